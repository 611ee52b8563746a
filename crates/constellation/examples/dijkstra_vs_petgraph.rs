//! Measures our Dijkstra ([`constellation::routing::Router`]) against `petgraph::algo::dijkstra`
//! on the same snapshots: starlink-550 at 60 instants, every satellite of 20 spread out as a
//! source, all distances. Checks the two agree and prints the time of each.
//!
//! `cargo run --release -p constellation --example dijkstra_vs_petgraph`

use constellation::routing::{Metric, Router};
use constellation::Constellation;
use petgraph::graph::{NodeIndex, UnGraph};
use std::time::Instant;

fn main() {
    let c = Constellation::preset("starlink-550").expect("preset");
    let snaps: Vec<_> = (0..60).map(|k| c.snapshot(k as f64 * 10.0)).collect();
    let sources: Vec<u32> = (0..20).map(|i| i * 79).collect();
    let graphs: Vec<UnGraph<(), u64>> = snaps
        .iter()
        .map(|s| {
            let mut g = UnGraph::<(), u64>::with_capacity(s.len(), s.edges.len());
            for _ in 0..s.len() {
                g.add_node(());
            }
            for &(a, b) in &s.edges {
                let d = s.positions[a as usize].dist(s.positions[b as usize])
                    / constellation::geo::C_KM_S;
                g.add_edge(
                    NodeIndex::new(a as usize),
                    NodeIndex::new(b as usize),
                    ((d * 1e9).round() as u64).max(1),
                );
            }
            g
        })
        .collect();
    let mut router = Router::new();
    let t0 = Instant::now();
    let mut ours = 0.0;
    for s in &snaps {
        for &src in &sources {
            router.run(s, src, Metric::Delay, None);
            ours += (0..s.len() as u32)
                .filter_map(|v| router.cost(v))
                .sum::<f64>();
        }
    }
    let t_ours = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut theirs = 0.0;
    for g in &graphs {
        for &src in &sources {
            let m =
                petgraph::algo::dijkstra(g, NodeIndex::new(src as usize), None, |e| *e.weight());
            theirs += m.values().map(|&v| v as f64).sum::<f64>();
        }
    }
    let t_pet = t1.elapsed().as_secs_f64();
    let n = (snaps.len() * sources.len()) as f64;
    println!(
        "agree: {} (sums {ours:.0} / {theirs:.0})",
        (ours - theirs).abs() < 1.0
    );
    println!(
        "ours:     {:.1} µs per single-source search",
        t_ours / n * 1e6
    );
    println!(
        "petgraph: {:.1} µs per single-source search (graph already built)",
        t_pet / n * 1e6
    );
}
