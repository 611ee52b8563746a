//! `satstp bench leo`: min-delay routes between every pair of ground terminals, recomputed
//! every step over a stretch of orbit time (default: starlink-550, 100 terminals, every 1 s
//! for 600 s), on one core or several; prints wall time and paths per second.

use super::parse_seconds;
use anyhow::{bail, Result};
use clap::Args;
use constellation::experiments::all_pairs;
use constellation::geo::{random_place, Place, CITIES};
use constellation::Constellation;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct LeoBenchArgs {
    /// Constellation preset.
    #[arg(long, default_value = "starlink-550")]
    constellation: String,
    /// Ground terminals: the built-in cities first, then random points (seeded).
    #[arg(long, default_value_t = 100)]
    terminals: usize,
    /// Orbit time covered.
    #[arg(long, default_value = "600s", value_parser = parse_seconds, allow_negative_numbers = true)]
    duration: f64,
    /// Recompute every this long.
    #[arg(long, default_value = "1s", value_parser = parse_seconds, allow_negative_numbers = true)]
    step: f64,
    /// Threads (the instants are split between them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `n` terminals: the cities, then random points spread uniformly over the band within 50° of
/// the equator (which every preset covers; starlink-550 and kuiper-630 do not reach the poles).
pub fn terminals(n: usize) -> Vec<Place> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    (0..n)
        .map(|i| match CITIES.get(i) {
            Some(&(name, la, lo)) => Place {
                name: name.to_string(),
                lat_deg: la,
                lon_deg: lo,
            },
            None => loop {
                let p = random_place(&mut rng, &format!("random-{i}"));
                if p.lat_deg.abs() <= 50.0 {
                    break p;
                }
            },
        })
        .collect()
}

pub fn run(a: &LeoBenchArgs) -> Result<()> {
    crate::outpath::json_start(&a.json)?;
    if a.terminals < 2 {
        bail!("--terminals must be at least 2");
    }
    if a.step <= 0.0 || a.duration <= 0.0 {
        bail!("--step and --duration must be positive");
    }
    let c = Constellation::preset(&a.constellation)?;
    let t = terminals(a.terminals);
    let steps = (a.duration / a.step).round() as u64;
    let started = std::time::Instant::now();
    let r = all_pairs(&c, &t, steps, a.step, a.threads.max(1));
    let wall = started.elapsed().as_secs_f64();
    let pps = r.paths as f64 / wall;
    let mean_ms = r.sum_delay_s / r.paths.max(1) as f64 * 1e3;
    if a.json.is_some() {
        crate::outpath::write_json(
            &a.json,
            &serde_json::json!({
                "constellation": c.name(), "satellites": c.count(), "terminals": a.terminals,
                "snapshots": r.snapshots, "threads": a.threads, "paths": r.paths,
                "unreachable": r.unreachable, "wall_s": wall, "paths_per_s": pps,
                "mean_delay_ms": mean_ms,
            }),
        )?;
    }
    {
        outln!(
            "{} ({} satellites), {} terminals, {} instants every {} s, {} thread(s)",
            c.name(),
            c.count(),
            a.terminals,
            r.snapshots,
            a.step,
            a.threads
        );
        outln!(
            "  {} paths ({} pairs without a path), mean one-way {:.2} ms",
            r.paths,
            r.unreachable,
            mean_ms
        );
        outln!("  wall time {wall:.2} s, {pps:.0} paths/s");
    }
    Ok(())
}
