//! Centralized routing over discrete topology states (§6.6.2-6.6.3): the forwarding table of
//! one satellite, computed by min-delay shortest paths to the satellite serving each cell, at
//! successive states (one per cell its nadir crosses), how many entries persist from one state
//! to the next (temporal consistency), how many match what geographic forwarding would choose
//! (geographic consistency), and how small greedy aggregation of Gray-coded cells makes it.

use crate::cells::{greedy_2d, Cell, CellGrid, COLUMNS, ROWS};
use crate::geo::{from_lat_lon_deg, great_circle_km, Vec3};
use crate::routing::{Metric, Router};
use crate::topology::{Constellation, Snapshot};
use crate::walker::Shell;
use std::f64::consts::PI;

/// Entry of a cell served by the satellite itself.
pub const LOCAL: u32 = u32::MAX - 1;
/// Entry of a cell whose satellite cannot be reached.
pub const UNREACHABLE: u32 = u32::MAX;

/// One topology state of the studied satellite's table.
#[derive(Debug, Clone)]
pub struct StateTable {
    pub t_s: f64,
    pub latitude_deg: f64,
    /// Next-hop satellite per cell id (or [`LOCAL`], [`UNREACHABLE`]).
    pub entries: Vec<u32>,
    /// Fraction of cells whose entry equals the previous state's.
    pub persistence: Option<f64>,
    /// Fraction of non-local cells whose entry is the geographic next hop.
    pub geographic_consistency: f64,
    /// Cells that need an entry (not served by the satellite itself).
    pub nonlocal_cells: usize,
    /// Entries after greedy 2-D aggregation, when computed.
    pub aggregated_entries: Option<usize>,
    /// ISLs the studied satellite has in this state (Fig 6.24's dips follow their shutdown).
    pub isls: usize,
}

/// Seconds for a satellite's nadir to cross one cell (thesis: 26.5 s for Teledesic).
pub fn state_interval_s(shell: &Shell) -> f64 {
    PI / (ROWS as f64 * shell.mean_motion_rad_s())
}

/// Studies the table of satellite 0 of the middle plane from its ascending node northwards over
/// `states` states (64 reach the pole's latitude band). `aggregate` also runs the greedy
/// aggregation on every state (the expensive part).
pub fn study(shell: &Shell, states: u32, aggregate: bool) -> Vec<StateTable> {
    let grid = CellGrid::new();
    let ncell = grid.len();
    let centres: Vec<(f64, f64, Vec3)> = (0..ncell)
        .map(|id| {
            let (la, lo) = grid.centre(grid.cell_of_id(id));
            (la, lo, from_lat_lon_deg(la, lo, 1.0))
        })
        .collect();
    let p = shell.planes / 2;
    let me = p * shell.sats_per_plane;
    let n = shell.mean_motion_rad_s();
    let t0 = (2.0 * PI - shell.phase_rad(p, 0)).rem_euclid(2.0 * PI) / n;
    let dt = state_interval_s(shell);
    let c = Constellation::Walker(shell.clone());
    let mut snap = Snapshot::default();
    let mut router = Router::new();
    let mut out: Vec<StateTable> = Vec::new();
    let mut serving = vec![0u32; ncell];
    for k in 0..states {
        let t = t0 + (k as f64 + 0.5) * dt;
        snap.rebuild(&c, t);
        router.run(&snap, me, Metric::Delay, None);
        let first: Vec<u32> = (0..snap.len() as u32)
            .map(|s| match router.first_hop(s) {
                Some(h) if h == me => LOCAL,
                Some(h) => h,
                None => UNREACHABLE,
            })
            .collect();
        let units: Vec<Vec3> = snap
            .positions
            .iter()
            .map(|v| v.scale(1.0 / v.norm()))
            .collect();
        for (id, (_, _, u)) in centres.iter().enumerate() {
            let mut best = (f64::MIN, 0u32);
            for (s, v) in units.iter().enumerate() {
                let d = v.dot(*u);
                if d > best.0 {
                    best = (d, s as u32);
                }
            }
            serving[id] = best.1;
        }
        let entries: Vec<u32> = serving.iter().map(|&s| first[s as usize]).collect();
        let neighbours: Vec<u32> = snap.neighbours(me).map(|(v, _)| v).collect();
        let (mla, mlo) = (snap.lat_deg[me as usize], snap.lon_deg[me as usize]);
        let (mut nonlocal, mut geo_match) = (0usize, 0usize);
        for (id, &e) in entries.iter().enumerate() {
            if e == LOCAL {
                continue;
            }
            nonlocal += 1;
            let (la, lo, _) = centres[id];
            let here = great_circle_km(mla, mlo, la, lo);
            let g = neighbours
                .iter()
                .map(|&v| {
                    (
                        v,
                        great_circle_km(snap.lat_deg[v as usize], snap.lon_deg[v as usize], la, lo),
                    )
                })
                .filter(|&(_, d)| d < here)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|x| x.0);
            if g == Some(e) {
                geo_match += 1;
            }
        }
        let persistence = out.last().map(|prev| {
            prev.entries
                .iter()
                .zip(&entries)
                .filter(|(a, b)| a == b)
                .count() as f64
                / ncell as f64
        });
        let aggregated_entries = aggregate.then(|| aggregated(&grid, &entries, &neighbours));
        out.push(StateTable {
            t_s: t,
            latitude_deg: mla,
            entries,
            persistence,
            geographic_consistency: geo_match as f64 / nonlocal.max(1) as f64,
            nonlocal_cells: nonlocal,
            aggregated_entries,
            isls: neighbours.len(),
        });
    }
    out
}

/// Entries after aggregating, per next hop, the grid points of the cells it serves.
pub fn aggregated(grid: &CellGrid, entries: &[u32], neighbours: &[u32]) -> usize {
    let mut labels = vec![u16::MAX; (ROWS * COLUMNS) as usize];
    for r in 0..ROWS {
        for col in 0..COLUMNS {
            let e = entries[grid.id(grid.cell_of_grid(r, col))];
            labels[(r * COLUMNS + col) as usize] = match neighbours.iter().position(|&v| v == e) {
                Some(i) => i as u16,
                None if e == UNREACHABLE => u16::MAX - 1,
                None => u16::MAX, // local
            };
        }
    }
    let mut total = 0;
    for i in 0..neighbours.len() as u16 {
        total += greedy_2d(&labels, i).len();
    }
    total + greedy_2d(&labels, u16::MAX - 1).len()
}

/// The cell of a place (for users of the table).
pub fn cell_of(grid: &CellGrid, lat: f64, lon: f64) -> Cell {
    grid.cell_at(lat, lon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teledesic_state_interval_is_26_5_s() {
        let s = state_interval_s(&Shell::preset("teledesic").unwrap());
        assert!((s - 26.5).abs() < 0.1, "{s}");
    }

    #[test]
    fn tables_persist_and_aggregate() {
        let sh = Shell::preset("teledesic").unwrap();
        let st = study(&sh, 3, true);
        assert_eq!(st.len(), 3);
        for s in &st {
            assert_eq!(s.entries.len(), 21_362);
            assert!(s.nonlocal_cells > 20_000);
            let agg = s.aggregated_entries.unwrap();
            assert!(agg < s.nonlocal_cells / 3, "{agg}");
        }
        let p = st[1].persistence.unwrap();
        assert!((0.5..=1.0).contains(&p), "{p}");
    }
}
