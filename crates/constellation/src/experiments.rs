//! The computations behind the thesis' LEO figures (§6.3, §6.5.3) and the benchmark: random
//! pings by min-delay, min-hop and geographic routing; differences binned by distance; and
//! min-delay routes between every pair of a set of terminals over time.

use crate::fstate::{ForwardingState, FstateComputer};
use crate::geo::{random_place, Place, C_KM_S};
use crate::geographic::GeoRouter;
use crate::ground::{choose, AttachPolicy, HandoffMode};
use crate::routing::{path_delay_s, Metric, Router};
use crate::topology::{Constellation, Snapshot};
use crate::trace::{compute, Routing, TraceSpec};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One ping between two random points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ping {
    pub t_s: f64,
    pub distance_km: f64,
    pub min_delay_ms: f64,
    pub min_hop_ms: f64,
    /// Geographic forwarding's delay, `None` if the packet met a dead end (or not computed).
    pub geographic_ms: Option<f64>,
    pub geographic_failed: bool,
    pub min_delay_hops: u32,
}

/// Random pings and how many draws found a terminal without a satellite above its mask.
#[derive(Debug, Clone, Default)]
pub struct PingSet {
    pub pings: Vec<Ping>,
    pub uncovered: usize,
    pub unreachable: usize,
}

/// `n` pings, one every `interval_s` (thesis: 10,000 over 20,000 s), between points drawn
/// uniformly on the sphere, each terminal on its highest satellite; `geographic` also routes
/// each by geographic forwarding.
pub fn random_pings(
    c: &Constellation,
    n: usize,
    interval_s: f64,
    seed: u64,
    geographic: bool,
) -> PingSet {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut snap = Snapshot::default();
    let mut router = Router::new();
    let mut geo = GeoRouter::new();
    let mask = c.elevation_mask_deg();
    let mut out = PingSet::default();
    for i in 0..n {
        let t = i as f64 * interval_s;
        let (a, b) = (random_place(&mut rng, "a"), random_place(&mut rng, "b"));
        snap.rebuild(c, t);
        let (pa, pb) = (a.position(), b.position());
        let (Some(sa), Some(sb)) = (
            choose(&snap.positions, pa, mask, AttachPolicy::HighestElevation),
            choose(&snap.positions, pb, mask, AttachPolicy::HighestElevation),
        ) else {
            out.uncovered += 1;
            continue;
        };
        router.run(&snap, sa, Metric::Delay, Some(&[sb]));
        let Some(pd) = router.path(sb) else {
            out.unreachable += 1;
            continue;
        };
        router.run(&snap, sa, Metric::Hops, Some(&[sb]));
        let Some(ph) = router.path(sb) else {
            out.unreachable += 1;
            continue;
        };
        let g = match (geographic, c.shell()) {
            (true, Some(sh)) => Some(geo.route(&snap, sh, sa, sb, b.lat_deg, b.lon_deg)),
            _ => None,
        };
        out.pings.push(Ping {
            t_s: t,
            distance_km: a.distance_km(&b),
            min_delay_ms: path_delay_s(&snap, pa, &pd, pb) * 1e3,
            min_hop_ms: path_delay_s(&snap, pa, &ph, pb) * 1e3,
            geographic_ms: g
                .as_ref()
                .and_then(|r| r.as_ref().ok())
                .map(|p| path_delay_s(&snap, pa, p, pb) * 1e3),
            geographic_failed: g.as_ref().is_some_and(|r| r.is_err()),
            min_delay_hops: pd.len() as u32 - 1,
        });
    }
    out
}

/// Statistics of a quantity in one distance bin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub lo_km: f64,
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    pub max: f64,
}

/// `value(ping)` (skipping `None`) in bins of `width_km` of great-circle distance.
pub fn binned(pings: &[Ping], width_km: f64, value: impl Fn(&Ping) -> Option<f64>) -> Vec<Bin> {
    let nb = (20_100.0 / width_km).ceil() as usize;
    let mut vals: Vec<Vec<f64>> = vec![Vec::new(); nb];
    for p in pings {
        if let Some(v) = value(p) {
            let b = ((p.distance_km / width_km) as usize).min(nb - 1);
            vals[b].push(v);
        }
    }
    vals.iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, v)| {
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
            Bin {
                lo_km: i as f64 * width_km,
                n: v.len(),
                mean,
                sd: var.sqrt(),
                max: v.iter().copied().fold(f64::MIN, f64::max),
            }
        })
        .collect()
}

/// Totals of an all-pairs run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AllPairs {
    pub snapshots: u64,
    pub paths: u64,
    pub unreachable: u64,
    pub sum_delay_s: f64,
}

/// Min-delay routes between every ordered pair of `terminals` at `steps` instants `step_s`
/// apart, on `threads` threads (instants split between them). With
/// [`AttachPolicy::HighestElevation`] or [`AttachPolicy::FirstFound`] each terminal uses one
/// satellite (one Dijkstra per source and instant); with [`AttachPolicy::Joint`] the pairs'
/// delays come from the forwarding state ([`crate::fstate`]: one Dijkstra per destination,
/// rooted at every satellite it sees).
pub fn all_pairs(
    c: &Constellation,
    terminals: &[Place],
    steps: u64,
    step_s: f64,
    threads: usize,
    policy: AttachPolicy,
) -> AllPairs {
    let threads = threads.clamp(1, steps.max(1) as usize);
    let positions: Vec<_> = terminals.iter().map(Place::position).collect();
    let mask = c.elevation_mask_deg();
    let work = |k0: u64| {
        let mut acc = AllPairs::default();
        let mut snap = Snapshot::default();
        let mut router = Router::new();
        let mut fc = FstateComputer::new();
        let mut fs = ForwardingState::default();
        let mut k = k0;
        while k < steps {
            if policy == AttachPolicy::Joint {
                fc.step(c, k as f64 * step_s, &positions, &mut fs);
                acc.snapshots += 1;
                let g = positions.len();
                for (x, &d) in fs.gs_delay_ns.iter().enumerate() {
                    if x / g == x % g {
                        continue;
                    }
                    if d == u64::MAX {
                        acc.unreachable += 1;
                    } else {
                        acc.paths += 1;
                        acc.sum_delay_s += d as f64 * 1e-9;
                    }
                }
                k += threads as u64;
                continue;
            }
            snap.rebuild(c, k as f64 * step_s);
            acc.snapshots += 1;
            let serving: Vec<Option<u32>> = positions
                .iter()
                .map(|&p| choose(&snap.positions, p, mask, policy))
                .collect();
            let targets: Vec<u32> = serving.iter().flatten().copied().collect();
            for (i, si) in serving.iter().enumerate() {
                let Some(si) = *si else {
                    acc.unreachable += terminals.len() as u64 - 1;
                    continue;
                };
                router.run(&snap, si, Metric::Delay, Some(&targets));
                for (j, sj) in serving.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    // ISL delay from the search's cost (ns), plus both GSLs.
                    match sj.and_then(|sj| router.cost(sj).map(|c| (sj, c))) {
                        Some((sj, c)) => {
                            acc.paths += 1;
                            let up = positions[i].dist(snap.positions[si as usize]);
                            let down = snap.positions[sj as usize].dist(positions[j]);
                            acc.sum_delay_s += c * 1e-9 + (up + down) / C_KM_S;
                        }
                        None => acc.unreachable += 1,
                    }
                }
            }
            k += threads as u64;
        }
        acc
    };
    let parts: Vec<AllPairs> = if threads == 1 {
        vec![work(0)]
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads as u64)
                .map(|k0| s.spawn(move || work(k0)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    parts.iter().fold(AllPairs::default(), |a, b| AllPairs {
        snapshots: a.snapshots + b.snapshots,
        paths: a.paths + b.paths,
        unreachable: a.unreachable + b.unreachable,
        sum_delay_s: a.sum_delay_s + b.sum_delay_s,
    })
}

/// A window of a path with a large delay step: (start orbit time, time of the step within the
/// window, delay before, delay after), all in seconds. Terminals are always on their best
/// satellite ([`HandoffMode::Continuous`], which has no memory, so a trace started at the
/// window's start sees the same path as the day's). Searches a day at 10 s for steps of at least
/// `min_step_s`, largest first, and returns the first `window_s` window (1 s samples) holding
/// such a step in its middle half.
pub fn step_window(
    c: &Constellation,
    from: &Place,
    to: &Place,
    min_step_s: f64,
    window_s: f64,
) -> Option<(f64, f64, f64, f64)> {
    let mut day = TraceSpec::new(from.clone(), to.clone(), Routing::MinDelay, 86_400.0, 10.0);
    day.handoff = Some(HandoffMode::Continuous);
    let day = compute(c, &day).ok()?;
    let mut steps: Vec<(f64, f64)> = day
        .samples
        .windows(2)
        .filter_map(|w| Some((w[1].t_s, (w[1].delay_s? - w[0].delay_s?).abs())))
        .filter(|&(_, d)| d >= min_step_s)
        .collect();
    steps.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (t, _) in steps {
        for back in [0.5, 0.4, 0.6, 0.3, 0.7] {
            let mut spec =
                TraceSpec::new(from.clone(), to.clone(), Routing::MinDelay, window_s, 1.0);
            spec.start_s = (t - back * window_s).max(0.0);
            spec.handoff = Some(HandoffMode::Continuous);
            let w = compute(c, &spec).ok()?;
            if let Some((at, a, b)) = w.largest_step() {
                if (b - a).abs() >= min_step_s && (0.25 * window_s..=0.75 * window_s).contains(&at)
                {
                    return Some((spec.start_s, at, a, b));
                }
            }
        }
    }
    None
}

/// The lowest one-way delay physically possible between two places: along the surface at c.
pub fn great_circle_delay_ms(a: &Place, b: &Place) -> f64 {
    a.distance_km(b) / C_KM_S * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn teledesic_pings_are_mostly_below_100_ms() {
        let c = Constellation::preset("teledesic").unwrap();
        let set = random_pings(&c, 300, 2.0, 3, true);
        assert_eq!(set.uncovered, 0);
        assert!(set.pings.len() >= 290);
        for p in &set.pings {
            assert!(p.min_hop_ms >= p.min_delay_ms - 1e-9);
            if let Some(g) = p.geographic_ms {
                assert!(g >= p.min_delay_ms - 1e-9);
            }
        }
        let over = set.pings.iter().filter(|p| p.min_delay_ms > 100.0).count();
        assert!(over * 20 < set.pings.len(), "{over} over 100 ms");
    }

    #[test]
    fn all_pairs_counts_every_ordered_pair() {
        let c = Constellation::preset("iridium").unwrap();
        let t: Vec<Place> = ["NY", "London", "Tokyo"]
            .iter()
            .map(|n| crate::geo::place(n).unwrap())
            .collect();
        let one = all_pairs(&c, &t, 4, 1.0, 1, AttachPolicy::HighestElevation);
        assert_eq!(one.snapshots, 4);
        assert_eq!(one.paths + one.unreachable, 4 * 6);
        let two = all_pairs(&c, &t, 4, 1.0, 2, AttachPolicy::HighestElevation);
        assert_eq!(one.paths, two.paths);
        assert!((one.sum_delay_s - two.sum_delay_s).abs() < 1e-9);
        // Joint: every pair too, never slower on average than one satellite per terminal.
        let j = all_pairs(&c, &t, 4, 1.0, 2, AttachPolicy::Joint);
        assert_eq!((j.snapshots, j.paths + j.unreachable), (4, 4 * 6));
        assert_eq!(j.paths, one.paths);
        assert!(j.sum_delay_s <= one.sum_delay_s + 1e-9);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// No path is faster than light along the surface: delay ≥ great-circle distance / c,
        /// for every preset, routing metric, time and pair of places.
        #[test]
        fn path_delay_is_at_least_great_circle_over_c(
            preset in 0usize..5, t in 0.0f64..86_400.0,
            la1 in -89.0f64..89.0, lo1 in -180.0f64..180.0, la2 in -89.0f64..89.0, lo2 in -180.0f64..180.0,
            hops in proptest::bool::ANY,
        ) {
            let c = Constellation::preset(crate::walker::PRESETS[preset]).unwrap();
            let (a, b) = (Place::new("a", la1, lo1).unwrap(), Place::new("b", la2, lo2).unwrap());
            let snap = c.snapshot(t);
            let mask = c.elevation_mask_deg();
            if let (Some(sa), Some(sb)) = (choose(&snap.positions, a.position(), mask, AttachPolicy::HighestElevation), choose(&snap.positions, b.position(), mask, AttachPolicy::HighestElevation)) {
                let mut r = Router::new();
                r.run(&snap, sa, if hops { Metric::Hops } else { Metric::Delay }, None);
                if let Some(p) = r.path(sb) {
                    let d = path_delay_s(&snap, a.position(), &p, b.position()) * 1e3;
                    prop_assert!(d >= great_circle_delay_ms(&a, &b) - 1e-9, "{} < {}", d, great_circle_delay_ms(&a, &b));
                }
            }
        }
    }
}
