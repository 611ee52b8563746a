//! Shortest paths on a snapshot: Dijkstra from one source by delay (min-delay) or by ISL hop
//! count (min-hop), as the thesis computes them on demand (§6.3). Ties are broken by the lower
//! satellite number being settled first, so a min-hop search keeps the first of several
//! equal-hop paths it finds, whatever their delays (the source of fig. 6.11's outliers).
//!
//! Our own binary-heap Dijkstra over the snapshot's CSR arrays: no per-call allocation once
//! warmed up, and an early stop once every requested target is settled.

use crate::geo::{Vec3, C_KM_S};
use crate::topology::Snapshot;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The metric a path minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Delay,
    Hops,
}

/// The edge weight of a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Delay in ns.
    Delay,
    /// One per ISL hop.
    Hops,
    /// [`HOP_NS`] per ISL hop plus the delay in ns: fewest hops, then least delay.
    HopsThenDelay,
}

/// The hop unit of [`Weight::HopsThenDelay`]: 2^40 ns (about 18 minutes), more than any
/// path's delay, so hop counts dominate.
pub const HOP_NS: u64 = 1 << 40;

const UNREACHED: u64 = u64::MAX;
const NONE: u32 = u32::MAX;

/// Reusable Dijkstra state.
#[derive(Debug, Clone, Default)]
pub struct Router {
    cost: Vec<u64>,
    prev: Vec<u32>,
    done: Vec<bool>,
    target: Vec<bool>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Router {
    pub fn new() -> Router {
        Router::default()
    }

    /// Shortest paths from `src`; with `targets`, stops once all of them are settled.
    pub fn run(&mut self, snap: &Snapshot, src: u32, metric: Metric, targets: Option<&[u32]>) {
        let w = match metric {
            Metric::Delay => Weight::Delay,
            Metric::Hops => Weight::Hops,
        };
        self.search(snap, &[(src, 0)], w, targets);
    }

    /// Shortest paths from several roots at once, each starting with its own cost (a joint
    /// attachment: the satellites a terminal sees, each with its GSL delay in ns). With
    /// [`Weight::HopsThenDelay`] a path's cost is its ISL hops × [`HOP_NS`] plus its delay in
    /// ns (GSLs included), so fewer hops win and delay breaks ties.
    pub fn run_multi(
        &mut self,
        snap: &Snapshot,
        roots: &[(u32, u64)],
        weight: Weight,
        targets: Option<&[u32]>,
    ) {
        self.search(snap, roots, weight, targets);
    }

    fn search(
        &mut self,
        snap: &Snapshot,
        roots: &[(u32, u64)],
        weight: Weight,
        targets: Option<&[u32]>,
    ) {
        let n = snap.len();
        self.cost.clear();
        self.cost.resize(n, UNREACHED);
        self.prev.clear();
        self.prev.resize(n, NONE);
        self.done.clear();
        self.done.resize(n, false);
        self.heap.clear();
        self.target.clear();
        self.target.resize(n, false);
        let mut left = usize::MAX;
        if let Some(t) = targets {
            left = 0;
            for &v in t {
                if (v as usize) < n && !self.target[v as usize] {
                    self.target[v as usize] = true;
                    left += 1;
                }
            }
            if left == 0 {
                return;
            }
        }
        for &(r, c0) in roots {
            if (r as usize) < n && c0 < self.cost[r as usize] {
                self.cost[r as usize] = c0;
                self.heap.push(Reverse((c0, r)));
            }
        }
        while let Some(Reverse((c, u))) = self.heap.pop() {
            if self.done[u as usize] {
                continue;
            }
            self.done[u as usize] = true;
            let (lo, hi) = (
                snap.offsets[u as usize] as usize,
                snap.offsets[u as usize + 1] as usize,
            );
            if self.target[u as usize] {
                left -= 1;
                if left == 0 {
                    break;
                }
            }
            for k in lo..hi {
                let v = snap.targets[k];
                let w = match weight {
                    Weight::Delay => snap.delay_ns[k],
                    Weight::Hops => 1,
                    Weight::HopsThenDelay => HOP_NS + snap.delay_ns[k],
                };
                let nc = c + w;
                if nc < self.cost[v as usize] {
                    self.cost[v as usize] = nc;
                    self.prev[v as usize] = u;
                    self.heap.push(Reverse((nc, v)));
                }
            }
        }
    }

    /// The raw cost of the path to `dst` in the search's units (ns, hops, or hops × HOP_NS +
    /// ns), roots' starting costs included.
    pub fn raw_cost(&self, dst: u32) -> Option<u64> {
        match self.cost.get(dst as usize) {
            Some(&c) if c != UNREACHED => Some(c),
            _ => None,
        }
    }

    /// The neighbour `dst` forwards to on its way back towards the roots (`None` for a root
    /// itself or an unreached satellite): in a search rooted at a destination's satellites,
    /// `dst`'s next hop towards that destination.
    pub fn towards_root(&self, dst: u32) -> Option<u32> {
        match self.prev.get(dst as usize) {
            Some(&p) if p != NONE => Some(p),
            _ => None,
        }
    }

    /// The cost of the path to `dst`: its ISL delay in seconds (for [`Metric::Delay`], to the
    /// nanosecond) or its hop count (for [`Metric::Hops`]).
    pub fn cost(&self, dst: u32) -> Option<f64> {
        match self.cost.get(dst as usize) {
            Some(&c) if c != UNREACHED => Some(c as f64),
            _ => None,
        }
    }

    /// Whether `dst` was reached.
    pub fn reached(&self, dst: u32) -> bool {
        self.cost.get(dst as usize).is_some_and(|&c| c != UNREACHED)
    }

    /// The path from the source to `dst` (both included).
    pub fn path(&self, dst: u32) -> Option<Vec<u32>> {
        if !self.reached(dst) {
            return None;
        }
        let mut p = vec![dst];
        let mut x = dst;
        while self.prev[x as usize] != NONE {
            x = self.prev[x as usize];
            p.push(x);
        }
        p.reverse();
        Some(p)
    }

    /// The neighbour of the source on the path to `dst` (`Some(src)` for the source itself).
    pub fn first_hop(&self, dst: u32) -> Option<u32> {
        if !self.reached(dst) {
            return None;
        }
        // Walk back to the satellite whose predecessor is the root (or the root itself).
        let mut x = dst;
        while self.prev[x as usize] != NONE && self.prev[self.prev[x as usize] as usize] != NONE {
            x = self.prev[x as usize];
        }
        Some(x)
    }
}

/// A terminal-to-terminal path: up to the first satellite, ISLs, down from the last.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalPath {
    pub satellites: Vec<u32>,
    /// One-way propagation delay, GSLs included (s).
    pub delay_s: f64,
}

impl TerminalPath {
    pub fn isl_hops(&self) -> usize {
        self.satellites.len().saturating_sub(1)
    }
}

/// Delay (s) along terminal `a` → satellites → terminal `b`.
pub fn path_delay_s(snap: &Snapshot, a: Vec3, sats: &[u32], b: Vec3) -> f64 {
    let (Some(&f), Some(&l)) = (sats.first(), sats.last()) else {
        return f64::INFINITY;
    };
    let mut km = a.dist(snap.positions[f as usize]) + snap.positions[l as usize].dist(b);
    for w in sats.windows(2) {
        km += snap.positions[w[0] as usize].dist(snap.positions[w[1] as usize]);
    }
    km / C_KM_S
}

/// The path between terminals at `a` (served by `sa`) and `b` (served by `sb`) by `metric`.
pub fn terminal_path(
    snap: &Snapshot,
    router: &mut Router,
    a: Vec3,
    sa: u32,
    b: Vec3,
    sb: u32,
    metric: Metric,
) -> Option<TerminalPath> {
    router.run(snap, sa, metric, Some(&[sb]));
    let sats = router.path(sb)?;
    Some(TerminalPath {
        delay_s: path_delay_s(snap, a, &sats, b),
        satellites: sats,
    })
}

/// Reusable buffers of [`joint_path`].
#[derive(Debug, Clone, Default)]
pub struct JointScratch {
    /// Satellites the first terminal sees, with GSL delays (ns).
    pub from: Vec<(u32, u64)>,
    /// Satellites the second terminal sees, with GSL delays (ns).
    pub to: Vec<(u32, u64)>,
    targets: Vec<u32>,
}

/// The best path between terminals at `a` and `b` when each may use any satellite it sees above
/// `mask_deg` (a joint attachment): the satellites from `a`'s to `b`'s, and the path's cost in
/// `weight`'s units, both GSLs included. `None` when either sees no satellite or no satellite
/// `b` sees can be reached. Fills `scratch.from` and `scratch.to` with what each end sees.
pub fn joint_path(
    snap: &Snapshot,
    router: &mut Router,
    a: Vec3,
    b: Vec3,
    mask_deg: f64,
    weight: Weight,
    scratch: &mut JointScratch,
) -> Option<(Vec<u32>, u64)> {
    crate::ground::visible(&snap.positions, a, mask_deg, &mut scratch.from);
    crate::ground::visible(&snap.positions, b, mask_deg, &mut scratch.to);
    let JointScratch { from, to, targets } = scratch;
    best_between(snap, router, from, to, weight, targets)
}

/// The best path from any of `from` to any of `to` (satellites with their GSL delays in ns),
/// and its cost in `weight`'s units with both GSLs. One end pinned to a single satellite is a
/// one-element slice.
pub fn best_between(
    snap: &Snapshot,
    router: &mut Router,
    from: &[(u32, u64)],
    to: &[(u32, u64)],
    weight: Weight,
    targets: &mut Vec<u32>,
) -> Option<(Vec<u32>, u64)> {
    if from.is_empty() || to.is_empty() {
        return None;
    }
    targets.clear();
    targets.extend(to.iter().map(|v| v.0));
    router.run_multi(snap, from, weight, Some(targets));
    let (cost, last) = to
        .iter()
        .filter_map(|&(s, g)| router.raw_cost(s).map(|c| (c + g, s)))
        .min()?;
    Some((router.path(last)?, cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot from explicit points and edges.
    pub(crate) fn hand_made(points: &[(f64, f64, f64)], edges: &[(u32, u32)]) -> Snapshot {
        let mut s = Snapshot {
            positions: points.iter().map(|&(x, y, z)| Vec3::new(x, y, z)).collect(),
            ..Default::default()
        };
        s.lat_deg = vec![0.0; points.len()];
        s.lon_deg = vec![0.0; points.len()];
        s.edges = edges.to_vec();
        s.rebuild_csr_for_tests();
        s
    }

    #[test]
    fn min_delay_and_min_hop_differ_on_a_hand_made_graph() {
        // 0 → 3 directly is one long hop (3000 km); 0 → 1 → 2 → 3 is three short hops
        // (3 × 500 km). Min-hop takes the long hop, min-delay the short ones.
        let s = hand_made(
            &[
                (0.0, 0.0, 0.0),
                (500.0, 0.0, 0.0),
                (1000.0, 0.0, 0.0),
                (1500.0, 0.0, 0.0),
                (0.0, 3000.0, 0.0),
            ],
            &[(0, 1), (1, 2), (2, 3), (0, 4), (3, 4)],
        );
        let mut r = Router::new();
        r.run(&s, 0, Metric::Delay, None);
        assert_eq!(r.path(3).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(r.first_hop(3), Some(1));
        r.run(&s, 0, Metric::Hops, None);
        assert_eq!(r.path(3).unwrap(), vec![0, 4, 3]);
        // Add a direct long edge: min-hop prefers it, min-delay does not.
        let s2 = hand_made(
            &[
                (0.0, 0.0, 0.0),
                (500.0, 0.0, 0.0),
                (1000.0, 0.0, 0.0),
                (1500.0, 0.0, 0.0),
                (750.0, 3000.0, 0.0),
            ],
            &[(0, 1), (1, 2), (2, 3), (0, 4), (3, 4)],
        );
        r.run(&s2, 0, Metric::Hops, None);
        assert_eq!(r.path(3).unwrap(), vec![0, 4, 3]);
        r.run(&s2, 0, Metric::Delay, None);
        assert_eq!(r.path(3).unwrap(), vec![0, 1, 2, 3]);
        let d = path_delay_s(
            &s2,
            Vec3::new(0.0, -300.0, 0.0),
            &[0, 1, 2, 3],
            Vec3::new(1500.0, -400.0, 0.0),
        );
        assert!((d - (300.0 + 1500.0 + 400.0) / C_KM_S).abs() < 1e-12);
    }

    #[test]
    fn unreachable_and_ties() {
        // Square 0-1-3, 0-2-3 of equal hops: the lower-numbered middle node wins the tie.
        let s = hand_made(
            &[
                (0.0, 0.0, 0.0),
                (0.0, 900.0, 0.0),
                (900.0, 0.0, 0.0),
                (900.0, 900.0, 0.0),
                (5.0, 5.0, 5.0),
            ],
            &[(0, 1), (0, 2), (1, 3), (2, 3)],
        );
        let mut r = Router::new();
        r.run(&s, 0, Metric::Hops, None);
        assert_eq!(r.path(3).unwrap(), vec![0, 1, 3]);
        assert!(!r.reached(4));
        assert_eq!(r.path(4), None);
        assert_eq!(r.path(0).unwrap(), vec![0]);
        r.run(&s, 0, Metric::Delay, Some(&[3]));
        assert!(r.reached(3));
    }
}
