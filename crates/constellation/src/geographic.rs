//! Geographic forwarding (§6.5): each satellite forwards a packet to the neighbour whose nadir
//! is closest (great circle) to the destination terminal, if that is closer than its own; within
//! a local routing radius of the destination's satellite (2 ISL hops below 45° latitude, 3
//! above) it uses local min-hop shortest paths instead. A satellite whose inter-plane ISLs are
//! off (a POLAR satellite) that finds no closer neighbour heads along its plane towards the
//! nearer of its plane's POLAR BORDER satellites (the thesis' tunnelling). A packet with no way
//! forward, or that would revisit a satellite, is dropped (a routing dead end).
//!
//! Cells are ~156 km, so nadir and terminal positions stand for the cells' centres.

use crate::geo::great_circle_km;
use crate::topology::Snapshot;
use crate::walker::Shell;
use std::collections::VecDeque;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadEnd {
    /// No neighbour reduces the distance and no local route exists.
    NoProgress,
    /// Forwarding would revisit a satellite.
    Loop,
}

/// Reusable state for geographic forwarding.
#[derive(Debug, Clone, Default)]
pub struct GeoRouter {
    depth: Vec<u32>,
    parent: Vec<u32>,
    touched: Vec<u32>,
    queue: VecDeque<u32>,
    visited: Vec<bool>,
}

/// The local routing radius of a satellite at `lat_deg` (§6.5.3).
pub fn routing_radius(lat_deg: f64) -> u32 {
    if lat_deg.abs() < 45.0 {
        2
    } else {
        3
    }
}

impl GeoRouter {
    pub fn new() -> GeoRouter {
        GeoRouter::default()
    }

    /// Min-hop path from `x` to `dst` within `radius` hops, if any (BFS, lowest numbers first).
    fn local_path(&mut self, snap: &Snapshot, x: u32, dst: u32, radius: u32) -> Option<Vec<u32>> {
        let n = snap.len();
        if self.depth.len() != n {
            self.depth = vec![u32::MAX; n];
            self.parent = vec![u32::MAX; n];
        }
        for &t in &self.touched {
            self.depth[t as usize] = u32::MAX;
        }
        self.touched.clear();
        self.queue.clear();
        self.depth[x as usize] = 0;
        self.touched.push(x);
        self.queue.push_back(x);
        while let Some(u) = self.queue.pop_front() {
            if u == dst {
                break;
            }
            let d = self.depth[u as usize];
            if d == radius {
                continue;
            }
            for (v, _) in snap.neighbours(u) {
                if self.depth[v as usize] == u32::MAX {
                    self.depth[v as usize] = d + 1;
                    self.parent[v as usize] = u;
                    self.touched.push(v);
                    self.queue.push_back(v);
                }
            }
        }
        if self.depth[dst as usize] == u32::MAX {
            return None;
        }
        let mut p = vec![dst];
        let mut y = dst;
        while y != x {
            y = self.parent[y as usize];
            p.push(y);
        }
        p.reverse();
        Some(p)
    }

    /// Forwards from satellite `src` towards the terminal at (`lat`, `lon`) served by `dst`;
    /// returns the satellites visited (both ends included) or the dead end met.
    pub fn route(
        &mut self,
        snap: &Snapshot,
        shell: &Shell,
        src: u32,
        dst: u32,
        lat: f64,
        lon: f64,
    ) -> Result<Vec<u32>, DeadEnd> {
        let n = snap.len();
        self.visited.clear();
        self.visited.resize(n, false);
        let dist =
            |s: u32| great_circle_km(snap.lat_deg[s as usize], snap.lon_deg[s as usize], lat, lon);
        let mut path = vec![src];
        let mut x = src;
        self.visited[x as usize] = true;
        while x != dst {
            if let Some(local) =
                self.local_path(snap, x, dst, routing_radius(snap.lat_deg[x as usize]))
            {
                path.extend_from_slice(&local[1..]);
                return Ok(path);
            }
            let here = dist(x);
            let mut next = snap
                .neighbours(x)
                .map(|(v, _)| (v, dist(v)))
                .filter(|&(_, d)| d < here)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(v, _)| v);
            if next.is_none() && snap.lat_deg[x as usize].abs() > shell.isl_latitude_threshold_deg {
                next = polar_step(snap, shell, x, lat, lon);
            }
            let Some(v) = next else {
                return Err(DeadEnd::NoProgress);
            };
            if self.visited[v as usize] {
                return Err(DeadEnd::Loop);
            }
            self.visited[v as usize] = true;
            path.push(v);
            x = v;
        }
        Ok(path)
    }
}

/// The intra-plane neighbour of POLAR satellite `x` towards the nearer (to the destination) of
/// the two POLAR BORDER satellites of its plane.
fn polar_step(snap: &Snapshot, sh: &Shell, x: u32, lat: f64, lon: f64) -> Option<u32> {
    let ns = sh.sats_per_plane;
    let (p, s) = (x / ns, x % ns);
    let thr = sh.isl_latitude_threshold_deg;
    let mut best: Option<(f64, u32)> = None;
    for dir in [1, ns - 1] {
        let mut k = s;
        for _ in 0..ns {
            k = (k + dir) % ns;
            let i = p * ns + k;
            if snap.lat_deg[i as usize].abs() <= thr {
                let d =
                    great_circle_km(snap.lat_deg[i as usize], snap.lon_deg[i as usize], lat, lon);
                if best.is_none_or(|b| d < b.0) {
                    best = Some((d, p * ns + (s + dir) % ns));
                }
                break;
            }
        }
    }
    best.map(|b| b.1).filter(|&v| snap.has_edge(x, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::place;
    use crate::ground::{choose, AttachPolicy};
    use crate::routing::{Metric, Router};
    use crate::topology::Constellation;

    #[test]
    fn geographic_routes_follow_links_and_reach_the_destination() {
        let sh = Shell::preset("teledesic").unwrap();
        let c = Constellation::Walker(sh.clone());
        let snap = c.snapshot(500.0);
        let (a, b) = (place("London").unwrap(), place("Nairobi").unwrap());
        let sa = choose(
            &snap.positions,
            a.position(),
            40.0,
            AttachPolicy::HighestElevation,
        )
        .unwrap();
        let sb = choose(
            &snap.positions,
            b.position(),
            40.0,
            AttachPolicy::HighestElevation,
        )
        .unwrap();
        let mut g = GeoRouter::new();
        let p = g.route(&snap, &sh, sa, sb, b.lat_deg, b.lon_deg).unwrap();
        assert_eq!((p[0], *p.last().unwrap()), (sa, sb));
        for w in p.windows(2) {
            assert!(snap.has_edge(w[0], w[1]));
        }
        let mut r = Router::new();
        r.run(&snap, sa, Metric::Hops, None);
        assert!(p.len() >= r.path(sb).unwrap().len());
    }

    #[test]
    fn radius_by_latitude() {
        assert_eq!(routing_radius(44.9), 2);
        assert_eq!(routing_radius(-45.0), 3);
    }
}
