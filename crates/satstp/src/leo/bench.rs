//! `satstp bench leo`: over a stretch of orbit time (default: starlink-550, 100 terminals, every
//! 1 s for 600 s), (1) min-delay routes between every pair of ground terminals with the
//! constellation's attachment, on one core or several, and (2) the full forwarding state (every
//! satellite's and terminal's next hop towards every terminal, as `satstp leo fstate` writes
//! it); prints wall times, paths per second, and the terminals the shell does not always cover.

use super::parse_seconds;
use anyhow::{bail, Context, Result};
use clap::Args;
use constellation::experiments::all_pairs;
use constellation::fstate;
use constellation::geo::{random_place, Place, CITIES};
use constellation::{AttachPolicy, Constellation};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

#[derive(Debug, Args)]
pub struct LeoBenchArgs {
    /// Constellation preset (with optional changes, e.g. starlink-550,phasing=17).
    #[arg(long, default_value = "starlink-550")]
    constellation: String,
    /// Attachment of the pair delays: highest, first or joint (default: the constellation's,
    /// joint for the modern shells).
    #[arg(long)]
    attach: Option<String>,
    /// Ground terminals: the built-in cities first, then random points (seeded).
    #[arg(long, default_value_t = 100)]
    terminals: usize,
    /// Orbit time covered.
    #[arg(long, default_value = "600s", value_parser = parse_seconds)]
    duration: f64,
    /// Recompute every this long.
    #[arg(long, default_value = "1s", value_parser = parse_seconds)]
    step: f64,
    /// Threads (the instants are split between them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
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
    if a.terminals < 2 {
        bail!("--terminals must be at least 2");
    }
    if a.step <= 0.0 || a.duration <= 0.0 {
        bail!("--step and --duration must be positive");
    }
    let c = Constellation::preset(&a.constellation)?;
    let policy = match &a.attach {
        Some(x) => x.parse::<AttachPolicy>().context("--attach")?,
        None => c.default_attachment().0,
    };
    let t = terminals(a.terminals);
    let steps = (a.duration / a.step).round() as u64;
    let started = std::time::Instant::now();
    let r = all_pairs(&c, &t, steps, a.step, a.threads.max(1), policy);
    let wall = started.elapsed().as_secs_f64();
    let pps = r.paths as f64 / wall;
    let mean_ms = r.sum_delay_s / r.paths.max(1) as f64 * 1e3;
    // The full forwarding state, serialised as `leo fstate` writes it (bytes counted, not kept).
    let positions: Vec<_> = t.iter().map(Place::position).collect();
    let mut sink = CountingSink::default();
    let started = std::time::Instant::now();
    let f = fstate::run(&c, &positions, 0.0, steps, a.step, &mut sink)?;
    let fwall = started.elapsed().as_secs_f64();
    let never: Vec<&str> = t
        .iter()
        .zip(&f.uncovered_steps)
        .filter(|(_, &u)| u == f.steps)
        .map(|(p, _)| p.name.as_str())
        .collect();
    let partly: Vec<String> = t
        .iter()
        .zip(&f.uncovered_steps)
        .filter(|(_, &u)| u > 0 && u < f.steps)
        .map(|(p, &u)| {
            format!(
                "{} ({:.0}% of instants)",
                p.name,
                100.0 * u as f64 / f.steps as f64
            )
        })
        .collect();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "constellation": c.name(), "satellites": c.count(), "terminals": a.terminals,
                "snapshots": r.snapshots, "threads": a.threads, "attach": policy.name(),
                "paths": r.paths, "unreachable": r.unreachable, "wall_s": wall,
                "paths_per_s": pps, "mean_delay_ms": mean_ms,
                "fstate_wall_s": fwall, "fstate_steps": f.steps, "fstate_lines": f.lines,
                "fstate_bytes": sink.bytes,
                "fstate_entries_per_step": (c.count() + t.len()) * t.len(),
                "never_covered": never, "partly_covered": partly,
            })
        );
    } else {
        println!(
            "{} ({} satellites), {} terminals, {} instants every {} s, {} thread(s)",
            c.name(),
            c.count(),
            a.terminals,
            r.snapshots,
            a.step,
            a.threads
        );
        println!(
            "  pair delays ({} attachment): {} paths ({} pairs without a path), mean one-way {:.2} ms",
            policy.name(),
            r.paths,
            r.unreachable,
            mean_ms
        );
        println!("    wall time {wall:.2} s, {pps:.0} paths/s");
        println!(
            "  forwarding state (joint, min-delay; {} entries per instant): wall time {fwall:.2} s \
             ({:.1} ms per instant), {} CSV lines of changes, {:.1} MB",
            (c.count() + t.len()) * t.len(),
            fwall * 1e3 / f.steps.max(1) as f64,
            f.lines,
            sink.bytes as f64 / 1e6
        );
        if !never.is_empty() {
            println!(
                "  never covered (no satellite above the mask): {}",
                never.join(", ")
            );
        }
        if !partly.is_empty() {
            println!("  covered part of the time: {}", partly.join(", "));
        }
    }
    Ok(())
}

/// Counts the bytes written to it.
#[derive(Default)]
struct CountingSink {
    bytes: u64,
}

impl std::io::Write for CountingSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.bytes += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
