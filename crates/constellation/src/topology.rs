//! The network at one instant: satellite positions and the active ISLs with their delays
//! (length / c), by the thesis' rules (§6.2): intra-plane ISLs always on; inter-plane ISLs off
//! while either end is above the latitude threshold; at most one cross-seam ISL per satellite,
//! to a satellite of the counter-rotating plane (the shortest eligible pairs matched first),
//! never while the two are within a few degrees of longitude (near where the planes cross) or
//! above the threshold.
//! Every ISL must also clear the Earth by 80 km.

use crate::geo::{clears, Vec3, C_KM_S, EARTH_RADIUS_KM};
use crate::ground::{AttachPolicy, HandoffMode};
use crate::tle::TleSet;
use crate::walker::{Shell, ShellKind};
use crate::ConstellationError;

/// Height above the surface an ISL's line of sight must clear (km).
pub const ISL_CLEARANCE_KM: f64 = 80.0;

/// Satellites: a Walker shell, or real satellites from TLEs.
#[derive(Debug, Clone)]
pub enum Constellation {
    Walker(Shell),
    Tle(TleSet),
}

impl Constellation {
    /// A preset by name (see [`crate::walker::PRESETS`]), with optional changes
    /// (`NAME[,KEY=VALUE…]`, see [`Shell::from_spec`]).
    pub fn preset(name: &str) -> Result<Constellation, ConstellationError> {
        Ok(Constellation::Walker(Shell::from_spec(name)?))
    }

    /// The attachment and handoff a path uses when none is given. The thesis' shells (Iridium,
    /// Teledesic) keep the thesis' rule: each terminal on its highest satellite, checked every
    /// 5–15 s (§6.2, §2.2.1), so the reproductions stay the thesis'. Modern shells and TLE
    /// input get the joint attachment re-optimised at every step, as operated networks route
    /// (a central scheduler picks both ends' satellites with the route) and as the reference
    /// simulator Hypatia computes forwarding state (Kassing et al., IMC 2020).
    pub fn default_attachment(&self) -> (AttachPolicy, HandoffMode) {
        match self {
            Constellation::Walker(s) if s.thesis_model => {
                (AttachPolicy::HighestElevation, HandoffMode::THESIS)
            }
            _ => (AttachPolicy::Joint, HandoffMode::Continuous),
        }
    }
    pub fn name(&self) -> &str {
        match self {
            Constellation::Walker(s) => &s.name,
            Constellation::Tle(t) => &t.name,
        }
    }
    pub fn count(&self) -> usize {
        match self {
            Constellation::Walker(s) => s.count(),
            Constellation::Tle(t) => t.len(),
        }
    }
    pub fn elevation_mask_deg(&self) -> f64 {
        match self {
            Constellation::Walker(s) => s.elevation_mask_deg,
            Constellation::Tle(t) => t.elevation_mask_deg,
        }
    }
    pub fn isl_latitude_threshold_deg(&self) -> f64 {
        match self {
            Constellation::Walker(s) => s.isl_latitude_threshold_deg,
            Constellation::Tle(t) => t.isl_latitude_threshold_deg,
        }
    }
    pub fn shell(&self) -> Option<&Shell> {
        match self {
            Constellation::Walker(s) => Some(s),
            Constellation::Tle(_) => None,
        }
    }
    /// Earth-fixed positions at `t_s` into `out`.
    pub fn positions(&self, t_s: f64, out: &mut Vec<Vec3>) {
        match self {
            Constellation::Walker(s) => s.positions(t_s, out),
            Constellation::Tle(t) => t.positions(t_s, out),
        }
    }
    /// The network at `t_s`.
    pub fn snapshot(&self, t_s: f64) -> Snapshot {
        let mut s = Snapshot::default();
        s.rebuild(self, t_s);
        s
    }
}

/// The network at one instant. Adjacency is stored compactly (CSR): the neighbours of
/// satellite `i` are `targets[offsets[i]..offsets[i+1]]`, with their delays in `delay_s`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub t_s: f64,
    pub positions: Vec<Vec3>,
    pub lat_deg: Vec<f64>,
    pub lon_deg: Vec<f64>,
    /// Active ISLs, each once as (lower index, higher index).
    pub edges: Vec<(u32, u32)>,
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    pub delay_s: Vec<f64>,
    /// `delay_s` in whole nanoseconds (at least 1): the search weights.
    pub delay_ns: Vec<u64>,
}

impl Snapshot {
    /// Recomputes everything for `t_s`, reusing the allocations.
    pub fn rebuild(&mut self, c: &Constellation, t_s: f64) {
        self.t_s = t_s;
        c.positions(t_s, &mut self.positions);
        self.lat_deg.clear();
        self.lon_deg.clear();
        for v in &self.positions {
            let (la, lo) = v.lat_lon_deg();
            self.lat_deg.push(la);
            self.lon_deg.push(lo);
        }
        self.edges.clear();
        match c {
            Constellation::Walker(s) => walker_isls(s, self),
            Constellation::Tle(t) if t.grid.is_some() => tle_grid_isls(t, self),
            Constellation::Tle(t) => nearest_isls(
                t.isls_per_satellite,
                t.max_isl_km,
                t.isl_latitude_threshold_deg,
                self,
            ),
        }
        self.edges.sort_unstable();
        self.edges.dedup();
        self.build_csr();
    }

    /// Builds the adjacency from explicit `positions` and `edges` (hand-made graphs in tests).
    #[doc(hidden)]
    pub fn rebuild_csr_for_tests(&mut self) {
        self.build_csr();
    }

    fn build_csr(&mut self) {
        let n = self.positions.len();
        let mut deg = vec![0u32; n + 1];
        for &(a, b) in &self.edges {
            deg[a as usize] += 1;
            deg[b as usize] += 1;
        }
        self.offsets.clear();
        self.offsets.push(0);
        let mut acc = 0;
        for d in deg.iter().take(n) {
            acc += d;
            self.offsets.push(acc);
        }
        self.targets.clear();
        self.targets.resize(acc as usize, 0);
        self.delay_s.clear();
        self.delay_s.resize(acc as usize, 0.0);
        self.delay_ns.clear();
        self.delay_ns.resize(acc as usize, 0);
        let mut fill: Vec<u32> = self.offsets[..n].to_vec();
        for &(a, b) in &self.edges {
            let d = self.positions[a as usize].dist(self.positions[b as usize]) / C_KM_S;
            for (x, y) in [(a, b), (b, a)] {
                let k = fill[x as usize] as usize;
                self.targets[k] = y;
                self.delay_s[k] = d;
                self.delay_ns[k] = ((d * 1e9).round() as u64).max(1);
                fill[x as usize] += 1;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.positions.len()
    }
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
    /// Neighbours of `i` with the delay of each ISL (s).
    pub fn neighbours(&self, i: u32) -> impl Iterator<Item = (u32, f64)> + '_ {
        let (a, b) = (
            self.offsets[i as usize] as usize,
            self.offsets[i as usize + 1] as usize,
        );
        self.targets[a..b]
            .iter()
            .copied()
            .zip(self.delay_s[a..b].iter().copied())
    }
    pub fn degree(&self, i: u32) -> usize {
        (self.offsets[i as usize + 1] - self.offsets[i as usize]) as usize
    }
    pub fn has_edge(&self, a: u32, b: u32) -> bool {
        self.neighbours(a).any(|(t, _)| t == b)
    }
}

fn add_if_clear(snap: &mut Snapshot, a: u32, b: u32) {
    if a != b
        && clears(
            snap.positions[a as usize],
            snap.positions[b as usize],
            EARTH_RADIUS_KM + ISL_CLEARANCE_KM,
        )
    {
        snap.edges.push((a.min(b), a.max(b)));
    }
}

/// Longitude difference folded into 0..=180 degrees.
pub fn lon_diff_deg(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(360.0);
    d.min(360.0 - d)
}

fn walker_isls(sh: &Shell, snap: &mut Snapshot) {
    let (np, ns) = (sh.planes, sh.sats_per_plane);
    let idx = |p: u32, s: u32| p * ns + s;
    let thr = sh.isl_latitude_threshold_deg;
    let low = |snap: &Snapshot, i: u32| snap.lat_deg[i as usize].abs() <= thr;
    for p in 0..np {
        let shifts: Vec<i64> = (1..=sh.isl_planes_each_side)
            .map(|d| plane_shift(sh, p, p + d))
            .collect();
        for s in 0..ns {
            let a = idx(p, s);
            for k in 1..=sh.isl_in_plane_each_side {
                add_if_clear(snap, a, idx(p, (s + k) % ns));
            }
            for (d, &k) in shifts.iter().enumerate() {
                let q = p + d as u32 + 1;
                if q >= np && sh.kind == ShellKind::Star {
                    continue; // the seam
                }
                let qq = q % np;
                let b = idx(qq, (s as i64 + k).rem_euclid(ns as i64) as u32);
                if low(snap, a) && low(snap, b) {
                    add_if_clear(snap, a, b);
                }
            }
        }
    }
    if sh.kind == ShellKind::Star && sh.cross_seam && np >= 2 {
        // Each satellite has one cross-seam terminal: among the pairs that may hold a link,
        // the shortest are matched first, one partner per satellite.
        let (first, last) = (0, np - 1);
        let mut pairs: Vec<(f64, u32, u32)> = Vec::new();
        for s in 0..ns {
            let a = idx(last, s);
            for k in 0..ns {
                let b = idx(first, k);
                let far_enough = lon_diff_deg(snap.lon_deg[a as usize], snap.lon_deg[b as usize])
                    >= sh.cross_seam_min_longitude_deg;
                if far_enough && low(snap, a) && low(snap, b) {
                    pairs.push((
                        snap.positions[a as usize].dist(snap.positions[b as usize]),
                        a,
                        b,
                    ));
                }
            }
        }
        pairs.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
        let mut used = vec![false; snap.positions.len()];
        for (_, a, b) in pairs {
            if !used[a as usize] && !used[b as usize] {
                used[a as usize] = true;
                used[b as usize] = true;
                add_if_clear(snap, a, b);
            }
        }
    }
}

/// Index in plane `q` of the satellite linked to satellite `s` of plane `p` (`q` may be
/// `planes` or more for the wrap-around of a delta shell). Co-rotating planes keep their
/// relative phase, so the pairing is fixed and one-to-one: the satellite nearest in phase.
/// When two are equally near (a half-spacing stagger, as Iridium and Teledesic have), the
/// choice alternates from plane to plane, so a ladder of inter-plane ISLs zig-zags along the
/// equator instead of spiralling with the stagger: as in the thesis' own ns-2 scripts
/// (`sat-iridium-links.tcl`, `sat-teledesic-links.tcl`: satellite i of a plane to satellite i
/// of the next, the even planes staggered), a satellite of an unstaggered plane (its phase
/// offset a whole number of in-plane spacings) links to the satellites half a spacing *ahead*
/// of it in both adjacent planes, and a staggered one to those half a spacing behind. So
/// Teledesic's representative satellite of fig. 6.24 loses its two adjacent-plane ISLs some
/// 7.5° before it reaches the latitude threshold itself (thesis: states 45 and 51).
pub fn inter_plane_partner(sh: &Shell, p: u32, s: u32, q: u32) -> u32 {
    (s as i64 + plane_shift(sh, p, q)).rem_euclid(sh.sats_per_plane as i64) as u32
}

fn plane_shift(sh: &Shell, p: u32, q: u32) -> i64 {
    let x = sh.phase_offset_deg * sh.sats_per_plane as f64 / 360.0;
    let round = |v: f64| (v + 0.5 + 1e-6).floor() as i64;
    // Halves round down: plane p's slot is at or below its phase, so an unstaggered plane
    // (p·x whole) reaches up to the staggered plane's satellite ahead of it.
    let round_half_down = |v: f64| (v - 0.5 - 1e-6).ceil() as i64;
    let shift = (p as f64 - q as f64) * x;
    let mut k = if (shift - shift.floor() - 0.5).abs() < 1e-6 {
        round_half_down(p as f64 * x) - round_half_down(q as f64 * x)
    } else {
        round(shift)
    };
    if q >= sh.planes {
        // Plane q is plane q - planes, whose satellites' phases lag by planes × offset.
        k += round(sh.planes as f64 * x);
    }
    k
}

/// The +Grid of TLE satellites listed plane by plane ([`TleSet::grid`]): in-plane neighbours
/// always, inter-plane partners while both are below the latitude threshold.
fn tle_grid_isls(t: &TleSet, snap: &mut Snapshot) {
    let Some((np, ns)) = t.grid else {
        return;
    };
    let thr = t.isl_latitude_threshold_deg;
    for p in 0..np {
        for s in 0..ns {
            let a = p * ns + s;
            add_if_clear(snap, a, p * ns + (s + 1) % ns);
            if let Some(&Some(k)) = t.grid_shift.get(p as usize) {
                let b = ((p + 1) % np) * ns + (s + k) % ns;
                if snap.lat_deg[a as usize].abs() <= thr && snap.lat_deg[b as usize].abs() <= thr {
                    add_if_clear(snap, a, b);
                }
            }
        }
    }
}

/// ISLs for satellites without plane structure: each to its `k` nearest satellites within
/// `max_km` (mutual or not), subject to the latitude threshold and clearance.
fn nearest_isls(k: u32, max_km: f64, thr: f64, snap: &mut Snapshot) {
    let n = snap.positions.len();
    let mut cand: Vec<(f64, u32)> = Vec::with_capacity(n);
    for a in 0..n {
        if snap.lat_deg[a].abs() > thr {
            continue;
        }
        cand.clear();
        for b in 0..n {
            if b != a && snap.lat_deg[b].abs() <= thr {
                let d = snap.positions[a].dist(snap.positions[b]);
                if d <= max_km {
                    cand.push((d, b as u32));
                }
            }
        }
        cand.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
        let picks: Vec<u32> = cand.iter().take(k as usize).map(|c| c.1).collect();
        for b in picks {
            add_if_clear(snap, a as u32, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(name: &str) -> Shell {
        Shell::preset(name).unwrap()
    }

    #[test]
    fn iridium_has_four_neighbours_at_low_latitude_and_none_across_the_seam() {
        let c = Constellation::Walker(shell("iridium"));
        let snap = c.snapshot(0.0);
        let sh = c.shell().unwrap();
        for i in 0..snap.len() as u32 {
            let (p, lat) = (i / sh.sats_per_plane, snap.lat_deg[i as usize]);
            let expect = if lat.abs() > 70.0 {
                2 // inter-plane links off in the polar regions
            } else if p == 0 || p == sh.planes - 1 {
                3 // seam planes lose one side
            } else {
                4
            };
            // A neighbour above the threshold also turns the link off.
            assert!(
                snap.degree(i) <= expect,
                "sat {i} lat {lat}: {}",
                snap.degree(i)
            );
            if lat.abs() < 50.0 {
                assert_eq!(snap.degree(i), expect, "sat {i} lat {lat}");
            }
            for (j, _) in snap.neighbours(i) {
                let q = j / sh.sats_per_plane;
                let across = (p == 0 && q == sh.planes - 1) || (q == 0 && p == sh.planes - 1);
                assert!(!across);
            }
        }
    }

    #[test]
    fn inter_plane_links_switch_off_exactly_at_the_latitude_threshold() {
        let sh = shell("iridium");
        let c = Constellation::Walker(sh.clone());
        let mut seen_on = false;
        let mut seen_off = false;
        for k in 0..400 {
            let snap = c.snapshot(k as f64 * 7.0);
            for &(a, b) in &snap.edges {
                let (pa, pb) = (a / sh.sats_per_plane, b / sh.sats_per_plane);
                if pa != pb {
                    assert!(snap.lat_deg[a as usize].abs() <= 70.0);
                    assert!(snap.lat_deg[b as usize].abs() <= 70.0);
                }
            }
            // Every partner pair below the threshold on both ends is linked.
            for p in 0..sh.planes - 1 {
                for s in 0..sh.sats_per_plane {
                    let a = p * sh.sats_per_plane + s;
                    let b = (p + 1) * sh.sats_per_plane + inter_plane_partner(&sh, p, s, p + 1);
                    let (la, lb) = (
                        snap.lat_deg[a as usize].abs(),
                        snap.lat_deg[b as usize].abs(),
                    );
                    if la <= 70.0 && lb <= 70.0 {
                        assert!(snap.has_edge(a, b));
                        seen_on |= la > 68.0;
                    } else {
                        assert!(!snap.has_edge(a, b));
                        seen_off |= la > 70.0 && la < 72.0;
                    }
                }
            }
        }
        assert!(
            seen_on && seen_off,
            "the threshold was approached from both sides"
        );
    }

    /// The half-slot tie broken as the thesis' ns-2 scripts break it: an unstaggered plane's
    /// satellites reach half a spacing ahead into both adjacent planes, a staggered plane's
    /// behind; the planes two away are level; the pairing is symmetric.
    #[test]
    fn half_slot_partners_lead_from_unstaggered_planes() {
        for name in ["teledesic", "iridium"] {
            let sh = shell(name);
            let half = 180.0 / sh.sats_per_plane as f64;
            let lead = |p: u32, s: u32, q: u32| {
                let k = inter_plane_partner(&sh, p, s, q);
                let d = (sh.phase_rad(q, k) - sh.phase_rad(p, s)).to_degrees();
                (d + 180.0).rem_euclid(360.0) - 180.0
            };
            for s in 0..sh.sats_per_plane {
                for p in 1..sh.planes - 2 {
                    let want = if p % 2 == 0 { half } else { -half };
                    assert!((lead(p, s, p + 1) - want).abs() < 1e-6, "{name} {p}/{s}");
                    assert!((lead(p, s, p - 1) - want).abs() < 1e-6, "{name} {p}/{s}");
                    let k = inter_plane_partner(&sh, p, s, p + 1);
                    assert_eq!(inter_plane_partner(&sh, p + 1, k, p), s, "{name} symmetric");
                    if sh.isl_planes_each_side >= 2 {
                        assert!(lead(p, s, p + 2).abs() < 1e-6, "{name} two planes away");
                    }
                }
            }
        }
    }

    #[test]
    fn teledesic_cross_seam_one_per_satellite_off_near_crossing() {
        let sh = shell("teledesic");
        let c = Constellation::Walker(sh.clone());
        let mut any = false;
        for k in 0..60 {
            let snap = c.snapshot(k as f64 * 13.0);
            let mut count = vec![0; snap.len()];
            for &(a, b) in &snap.edges {
                let (pa, pb) = (a / sh.sats_per_plane, b / sh.sats_per_plane);
                if (pa == 0 && pb == sh.planes - 1) || (pb == 0 && pa == sh.planes - 1) {
                    any = true;
                    count[a as usize] += 1;
                    count[b as usize] += 1;
                    assert!(
                        lon_diff_deg(snap.lon_deg[a as usize], snap.lon_deg[b as usize]) >= 8.0
                    );
                }
            }
            assert!(count.iter().all(|&c| c <= 1));
            // Never more than 8 ISLs.
            assert!((0..snap.len() as u32).all(|i| snap.degree(i) <= 8));
        }
        assert!(any, "some cross-seam ISLs are up");
        let mut no = sh.clone();
        no.cross_seam = false;
        let snap = Constellation::Walker(no).snapshot(0.0);
        assert!(!snap.edges.iter().any(|&(a, b)| a / 24 == 0 && b / 24 == 11));
    }

    #[test]
    fn teledesic_has_eight_neighbours_mid_plane_at_low_latitude() {
        let sh = shell("teledesic");
        let snap = Constellation::Walker(sh.clone()).snapshot(100.0);
        let mut checked = 0;
        for i in 0..snap.len() as u32 {
            let p = i / sh.sats_per_plane;
            if (2..sh.planes - 2).contains(&p) && snap.lat_deg[i as usize].abs() < 55.0 {
                assert_eq!(snap.degree(i), 8, "sat {i}");
                checked += 1;
            }
        }
        assert!(checked > 50);
    }

    #[test]
    fn grid_delta_wraps_around_with_four_links() {
        let sh = shell("kuiper-630");
        let snap = Constellation::Walker(sh.clone()).snapshot(0.0);
        assert!((0..snap.len() as u32).all(|i| snap.degree(i) == 4));
        assert_eq!(snap.edges.len(), 2 * sh.count());
    }
}
