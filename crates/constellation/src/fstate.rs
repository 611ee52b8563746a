//! Forwarding state per time step: every satellite's and every ground station's next hop
//! towards every ground station, with a joint attachment (a destination is reached through any
//! satellite it sees above its mask; a source station uses whichever satellite it sees gives the
//! least delay) and min-delay routes over GSL + ISLs + GSL. Ground stations do not relay.
//!
//! One Dijkstra per destination and step, rooted at the satellites the destination sees with
//! their GSL delays as starting costs: each satellite's predecessor in that search is its next
//! hop. Written as CSV lines of the entries that changed since the previous step (all of them at
//! the first), the compact form `satstp leo fstate` documents (docs/leo.md).

use crate::geo::{Place, Vec3};
use crate::ground::{choose, visible, AttachPolicy};
use crate::routing::{Router, Weight};
use crate::topology::{Constellation, Snapshot};
use std::io::Write;

/// No next hop (the destination is unreachable, or the node is the destination).
pub const NO_HOP: u32 = u32::MAX;

/// The forwarding state at one instant. Node ids: satellites `0..satellites`, ground stations
/// `satellites..satellites + stations` (in the order given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForwardingState {
    pub t_s: f64,
    pub satellites: usize,
    pub stations: usize,
    /// `sat_next[s * stations + g]`: satellite `s`'s next hop (a node id) towards station `g`.
    pub sat_next: Vec<u32>,
    /// `gs_next[h * stations + g]`: the satellite station `h` sends to for station `g`.
    pub gs_next: Vec<u32>,
    /// `gs_delay_ns[h * stations + g]`: one-way delay of that path (ns), `u64::MAX` if none.
    pub gs_delay_ns: Vec<u64>,
    /// The stations that see no satellite above the mask.
    pub uncovered: Vec<u32>,
}

impl ForwardingState {
    /// The next hop of node `node` towards station `g` (`None` for none).
    pub fn next_hop(&self, node: usize, g: usize) -> Option<u32> {
        let v = if node < self.satellites {
            self.sat_next[node * self.stations + g]
        } else {
            self.gs_next[(node - self.satellites) * self.stations + g]
        };
        (v != NO_HOP).then_some(v)
    }

    /// Writes the entries that differ from `prev` (all entries without one) as CSV lines
    /// `time_ns,node,destination,next_hop`, destinations as node ids, `-1` for no next hop.
    /// Returns the number of lines.
    pub fn write_changes(
        &self,
        prev: Option<&ForwardingState>,
        out: &mut dyn Write,
    ) -> std::io::Result<u64> {
        let t = (self.t_s * 1e9).round() as u64;
        let (n, g) = (self.satellites, self.stations);
        let mut lines = 0;
        let mut put = |node: usize, dest: usize, v: u32| -> std::io::Result<()> {
            lines += 1;
            if v == NO_HOP {
                writeln!(out, "{t},{node},{},-1", n + dest)
            } else {
                writeln!(out, "{t},{node},{},{v}", n + dest)
            }
        };
        for (k, &v) in self.sat_next.iter().enumerate() {
            if prev.is_none_or(|p| p.sat_next.get(k) != Some(&v)) {
                put(k / g, k % g, v)?;
            }
        }
        for (k, &v) in self.gs_next.iter().enumerate() {
            if k / g != k % g && prev.is_none_or(|p| p.gs_next.get(k) != Some(&v)) {
                put(n + k / g, k % g, v)?;
            }
        }
        Ok(lines)
    }
}

/// Computes forwarding state step after step, reusing its buffers.
#[derive(Debug, Clone, Default)]
pub struct FstateComputer {
    snap: Snapshot,
    router: Router,
    seen: Vec<Vec<(u32, u64)>>,
}

impl FstateComputer {
    pub fn new() -> FstateComputer {
        FstateComputer::default()
    }

    /// The snapshot of the last step.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The forwarding state of `c` at orbit time `t_s` for ground stations at `stations`
    /// (Earth-fixed positions), into `out`.
    pub fn step(
        &mut self,
        c: &Constellation,
        t_s: f64,
        stations: &[Vec3],
        out: &mut ForwardingState,
    ) {
        self.step_attached(c, t_s, stations, AttachPolicy::Joint, out);
    }

    /// As [`FstateComputer::step`] with each station's satellites chosen by `attach`: joint
    /// (any satellite the station sees, chosen with the route), or one satellite per station
    /// and step, its highest (`HighestElevation`) or the first found above the mask
    /// (`FirstFound`), re-chosen at every step. A station sends up and receives down through
    /// its one satellite only.
    pub fn step_attached(
        &mut self,
        c: &Constellation,
        t_s: f64,
        stations: &[Vec3],
        attach: AttachPolicy,
        out: &mut ForwardingState,
    ) {
        self.snap.rebuild(c, t_s);
        self.compute(c.elevation_mask_deg(), stations, attach, out);
    }

    /// The forwarding state on the current snapshot (see [`FstateComputer::step_attached`]).
    fn compute(
        &mut self,
        mask_deg: f64,
        stations: &[Vec3],
        attach: AttachPolicy,
        out: &mut ForwardingState,
    ) {
        let (n, g) = (self.snap.len(), stations.len());
        self.seen.resize_with(g, Vec::new);
        for (h, &p) in stations.iter().enumerate() {
            visible(&self.snap.positions, p, mask_deg, &mut self.seen[h]);
            if attach != AttachPolicy::Joint {
                let one = choose(&self.snap.positions, p, mask_deg, attach);
                self.seen[h].retain(|&(s, _)| Some(s) == one);
            }
        }
        out.t_s = self.snap.t_s;
        out.satellites = n;
        out.stations = g;
        out.sat_next.clear();
        out.sat_next.resize(n * g, NO_HOP);
        out.gs_next.clear();
        out.gs_next.resize(g * g, NO_HOP);
        out.gs_delay_ns.clear();
        out.gs_delay_ns.resize(g * g, u64::MAX);
        out.uncovered.clear();
        out.uncovered
            .extend((0..g as u32).filter(|&h| self.seen[h as usize].is_empty()));
        for dest in 0..g {
            if self.seen[dest].is_empty() {
                continue;
            }
            self.router
                .run_multi(&self.snap, &self.seen[dest], Weight::Delay, None);
            for s in 0..n as u32 {
                if self.router.raw_cost(s).is_none() {
                    continue;
                }
                out.sat_next[s as usize * g + dest] = match self.router.towards_root(s) {
                    Some(p) => p,
                    None => (n + dest) as u32, // down to the destination itself
                };
            }
            for (h, seen) in self.seen.iter().enumerate() {
                if h == dest {
                    continue;
                }
                let best = seen
                    .iter()
                    .filter_map(|&(v, up)| self.router.raw_cost(v).map(|c| (c + up, v)))
                    .min();
                if let Some((d, v)) = best {
                    out.gs_next[h * g + dest] = v;
                    out.gs_delay_ns[h * g + dest] = d;
                }
            }
        }
    }
}

/// The CSV header line of [`ForwardingState::write_changes`].
pub const CSV_HEADER: &str = "time_ns,node,destination,next_hop";

/// The node ids of a [`run`] as CSV, `id,kind,name,lat_deg,lon_deg`: the satellites (named
/// `P<plane>-S<index>` for a Walker shell, by their TLE names otherwise) at their positions at
/// orbit time `t_s`, then the ground stations. Commas in names become spaces.
pub fn nodes_csv(c: &Constellation, stations: &[Place], t_s: f64) -> String {
    use std::fmt::Write as _;
    let snap = c.snapshot(t_s);
    let mut t = String::from("id,kind,name,lat_deg,lon_deg\n");
    for i in 0..snap.len() {
        let name = match c {
            Constellation::Walker(sh) => format!(
                "P{}-S{}",
                i as u32 / sh.sats_per_plane,
                i as u32 % sh.sats_per_plane
            ),
            Constellation::Tle(ts) => ts
                .satellites
                .get(i)
                .map_or_else(|| format!("S{i}"), |s| s.name.replace(',', " ")),
        };
        let _ = writeln!(
            t,
            "{i},satellite,{name},{:.4},{:.4}",
            snap.lat_deg[i], snap.lon_deg[i]
        );
    }
    for (k, p) in stations.iter().enumerate() {
        let _ = writeln!(
            t,
            "{},station,{},{},{}",
            snap.len() + k,
            p.name.replace(',', " "),
            p.lat_deg,
            p.lon_deg
        );
    }
    t
}

/// Totals of a [`run`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FstateRun {
    pub steps: u64,
    /// CSV lines written (entries that changed, all of them at the first step).
    pub lines: u64,
    /// Per station: the steps at which it saw no satellite.
    pub uncovered_steps: Vec<u64>,
    /// Ordered station pairs with a path, summed over the steps, and their summed delay (s).
    pub paths: u64,
    pub sum_delay_s: f64,
}

/// The forwarding state of `c` for `stations` at orbit times `start_s + k·step_s`,
/// `k = 0..steps`, written to `out` as CSV (a header line, then
/// [`ForwardingState::write_changes`] per step).
pub fn run(
    c: &Constellation,
    stations: &[Vec3],
    start_s: f64,
    steps: u64,
    step_s: f64,
    out: &mut dyn Write,
) -> std::io::Result<FstateRun> {
    let mut fc = FstateComputer::new();
    let (mut prev, mut cur) = (ForwardingState::default(), ForwardingState::default());
    let mut r = FstateRun {
        uncovered_steps: vec![0; stations.len()],
        ..Default::default()
    };
    writeln!(out, "{CSV_HEADER}")?;
    for k in 0..steps {
        fc.step(c, start_s + k as f64 * step_s, stations, &mut cur);
        r.lines += cur.write_changes((k > 0).then_some(&prev), out)?;
        for &h in &cur.uncovered {
            r.uncovered_steps[h as usize] += 1;
        }
        let g = stations.len();
        for (x, &d) in cur.gs_delay_ns.iter().enumerate() {
            if x / g != x % g && d != u64::MAX {
                r.paths += 1;
                r.sum_delay_s += d as f64 * 1e-9;
            }
        }
        r.steps += 1;
        std::mem::swap(&mut prev, &mut cur);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::place;
    use crate::ground::gsl_ns;

    /// Independent brute force: all-pairs ISL delays by Floyd–Warshall, then each node's best
    /// total delay to each station over every satellite the station sees; every next hop of
    /// the forwarding state must lie on such a best path (ties may pick any), and every node
    /// without one must have no path.
    fn check_against_floyd_warshall(
        c: &Constellation,
        t_s: f64,
        names: &[&str],
        attach: AttachPolicy,
    ) {
        let stations: Vec<Vec3> = names.iter().map(|n| place(n).unwrap().position()).collect();
        let mut fc = FstateComputer::new();
        let mut fs = ForwardingState::default();
        fc.step_attached(c, t_s, &stations, attach, &mut fs);
        let snap = c.snapshot(t_s);
        let n = snap.len();
        const INF: u64 = u64::MAX / 4;
        let mut d = vec![INF; n * n];
        for i in 0..n {
            d[i * n + i] = 0;
        }
        for i in 0..n {
            for k in snap.offsets[i] as usize..snap.offsets[i + 1] as usize {
                let j = snap.targets[k] as usize;
                d[i * n + j] = d[i * n + j].min(snap.delay_ns[k]);
            }
        }
        for k in 0..n {
            for i in 0..n {
                let dik = d[i * n + k];
                if dik == INF {
                    continue;
                }
                for j in 0..n {
                    let x = dik + d[k * n + j];
                    if x < d[i * n + j] {
                        d[i * n + j] = x;
                    }
                }
            }
        }
        let mask = c.elevation_mask_deg();
        // The satellites station h may use: all it sees above the mask (joint), or the one of
        // highest elevation, or the first in satellite order.
        let sees = |h: usize| -> Vec<(usize, u64)> {
            let up = stations[h].scale(1.0 / stations[h].norm());
            let above: Vec<(usize, f64)> = (0..n)
                .map(|s| {
                    let v = snap.positions[s].minus(stations[h]);
                    (s, (v.dot(up) / v.norm()).asin().to_degrees())
                })
                .filter(|&(_, e)| e >= mask)
                .collect();
            let chosen: Vec<usize> = match attach {
                AttachPolicy::Joint => above.iter().map(|x| x.0).collect(),
                AttachPolicy::FirstFound => above.first().map(|x| x.0).into_iter().collect(),
                AttachPolicy::HighestElevation => above
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|x| x.0)
                    .into_iter()
                    .collect(),
            };
            chosen
                .into_iter()
                .map(|s| (s, gsl_ns(stations[h], snap.positions[s])))
                .collect()
        };
        let mut checked = 0;
        for g in 0..stations.len() {
            let down = sees(g);
            // Best delay from each satellite to station g.
            let best: Vec<u64> = (0..n)
                .map(|s| {
                    down.iter()
                        .map(|&(v, gd)| d[s * n + v].saturating_add(gd))
                        .min()
                        .unwrap_or(INF)
                })
                .collect();
            for s in 0..n {
                let hop = fs.next_hop(s, g);
                if best[s] >= INF {
                    assert_eq!(hop, None, "sat {s} to {g}: unreachable");
                    continue;
                }
                let hop = hop.unwrap_or_else(|| panic!("sat {s} to {g}: no hop"));
                if hop as usize == n + g {
                    let gd = down
                        .iter()
                        .find(|x| x.0 == s)
                        .expect("down to a station it sees")
                        .1;
                    assert_eq!(gd, best[s], "sat {s} down to {g}");
                } else {
                    let h = hop as usize;
                    let w = (snap.offsets[s] as usize..snap.offsets[s + 1] as usize)
                        .find(|&k| snap.targets[k] == hop)
                        .map(|k| snap.delay_ns[k])
                        .unwrap_or_else(|| panic!("sat {s}: {h} is not a neighbour"));
                    assert_eq!(w + best[h], best[s], "sat {s} -> {h} to {g}");
                }
                checked += 1;
            }
            for h in 0..stations.len() {
                if h == g {
                    assert_eq!(fs.next_hop(n + h, g), None);
                    continue;
                }
                let opt = sees(h)
                    .iter()
                    .map(|&(v, up)| best[v].saturating_add(up))
                    .min()
                    .unwrap_or(INF);
                match fs.next_hop(n + h, g) {
                    None => assert!(opt >= INF, "station {h} to {g}: a path exists"),
                    Some(v) => {
                        let up = gsl_ns(stations[h], snap.positions[v as usize]);
                        assert_eq!(up + best[v as usize], opt, "station {h} -> {v} to {g}");
                        assert_eq!(fs.gs_delay_ns[h * stations.len() + g], opt);
                    }
                }
            }
        }
        assert!(checked > n, "{checked} entries checked");
    }

    #[test]
    fn forwarding_state_matches_a_brute_force_on_small_shells() {
        let names = [
            "New York",
            "London",
            "Tokyo",
            "Sydney",
            "Nairobi",
            "Reykjavík",
        ];
        let iridium = Constellation::preset("iridium").unwrap();
        for t in [0.0, 1234.0, 3000.0] {
            check_against_floyd_warshall(&iridium, t, &names, AttachPolicy::Joint);
        }
        let teledesic = Constellation::preset("teledesic").unwrap();
        check_against_floyd_warshall(&teledesic, 500.0, &names, AttachPolicy::Joint);
    }

    /// With one satellite per station (highest or first), every next hop still lies on a best
    /// path, now through that satellite only: checked against the same brute force.
    #[test]
    fn single_satellite_attachment_matches_the_brute_force() {
        let names = ["New York", "London", "Tokyo", "Sydney", "Nairobi"];
        let iridium = Constellation::preset("iridium").unwrap();
        for attach in [AttachPolicy::HighestElevation, AttachPolicy::FirstFound] {
            for t in [0.0, 2000.0] {
                check_against_floyd_warshall(&iridium, t, &names, attach);
            }
        }
        // And it differs from joint: a station uses one satellite where joint may use another.
        let stations: Vec<Vec3> = names.iter().map(|n| place(n).unwrap().position()).collect();
        let c = Constellation::preset("starlink-550").unwrap();
        let mut fc = FstateComputer::new();
        let (mut j, mut h) = (ForwardingState::default(), ForwardingState::default());
        fc.step_attached(&c, 0.0, &stations, AttachPolicy::Joint, &mut j);
        fc.step_attached(&c, 0.0, &stations, AttachPolicy::HighestElevation, &mut h);
        let (dj, dh): (u64, u64) = (
            j.gs_delay_ns.iter().filter(|&&d| d != u64::MAX).sum(),
            h.gs_delay_ns.iter().filter(|&&d| d != u64::MAX).sum(),
        );
        assert!(dj < dh, "joint {dj} ns, highest {dh} ns summed over pairs");
    }

    #[test]
    fn nodes_are_the_satellites_then_the_stations() {
        let c = Constellation::preset("iridium").unwrap();
        let mut home = place("London").unwrap();
        home.name = "Home, sweet".into();
        let t = nodes_csv(&c, &[home, place("Tokyo").unwrap()], 0.0);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 1 + 66 + 2);
        assert_eq!(lines[0], "id,kind,name,lat_deg,lon_deg");
        // Iridium: 6 planes of 11; satellite 12 is the second of the second plane.
        assert!(
            lines[13].starts_with("12,satellite,P1-S1,"),
            "{}",
            lines[13]
        );
        let snap = c.snapshot(0.0);
        assert_eq!(
            lines[1],
            format!(
                "0,satellite,P0-S0,{:.4},{:.4}",
                snap.lat_deg[0], snap.lon_deg[0]
            )
        );
        assert!(
            lines[67].starts_with("66,station,Home  sweet,51.5"),
            "{}",
            lines[67]
        );
        assert!(
            lines[68].starts_with("67,station,Tokyo,35.6"),
            "{}",
            lines[68]
        );
    }

    #[test]
    fn changes_are_written_compactly() {
        let c = Constellation::preset("iridium").unwrap();
        let stations: Vec<Vec3> = ["NY", "London"]
            .iter()
            .map(|n| place(n).unwrap().position())
            .collect();
        let mut fc = FstateComputer::new();
        let (mut a, mut b) = (ForwardingState::default(), ForwardingState::default());
        fc.step(&c, 0.0, &stations, &mut a);
        let mut first = Vec::new();
        let all = a.write_changes(None, &mut first).unwrap();
        // Every satellite entry, and each station's entry for the other.
        assert_eq!(all, 66 * 2 + 2);
        fc.step(&c, 1.0, &stations, &mut b);
        let mut next = Vec::new();
        let changed = b.write_changes(Some(&a), &mut next).unwrap();
        assert!(changed < all / 4, "{changed} of {all} changed in 1 s");
        let text = String::from_utf8(first).unwrap();
        let line = text.lines().next().unwrap();
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], "0");
        assert!(text.lines().all(|l| l.split(',').count() == 4));
    }
}
