//! The computations `satstp bench leo` times, in an optimised build of this crate alone (the
//! binary's release build takes the whole workspace): all-pairs delays with the constellation's
//! default attachment, then the full forwarding state (serialised, bytes counted).
//!
//! `cargo run --release -p constellation --example leo_bench -- [PRESET] [STATIONS] [SECONDS]
//! [fstate]` (`fstate`: only the forwarding state and the coverage it finds)

use constellation::experiments::all_pairs;
use constellation::fstate;
use constellation::geo::{stations, Place};
use constellation::Constellation;
use std::time::Instant;

struct Count(u64);
impl std::io::Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let preset = args.get(1).map_or("starlink-550", String::as_str);
    let n: usize = args.get(2).map_or(Ok(100), |x| x.parse())?;
    let secs: u64 = args.get(3).map_or(Ok(600), |x| x.parse())?;
    let c = Constellation::preset(preset)?;
    let t = stations(n);
    for policy in [
        c.default_attachment().0,
        constellation::AttachPolicy::HighestElevation,
    ] {
        let started = Instant::now();
        let r = all_pairs(&c, &t, secs, 1.0, 1, policy);
        let wall = started.elapsed().as_secs_f64();
        println!(
            "pairs, {} attachment: {} paths, {} without, mean one-way {:.2} ms; {wall:.2} s, {:.0} paths/s",
            policy.name(),
            r.paths,
            r.unreachable,
            r.sum_delay_s / r.paths.max(1) as f64 * 1e3,
            r.paths as f64 / wall
        );
    }
    let pos: Vec<_> = t.iter().map(Place::position).collect();
    let mut sink = Count(0);
    let started = Instant::now();
    let f = fstate::run(&c, &pos, 0.0, secs, 1.0, &mut sink)?;
    let wall = started.elapsed().as_secs_f64();
    println!(
        "forwarding state: {} steps, {} lines of changes, {:.1} MB; {wall:.2} s ({:.1} ms per step)",
        f.steps,
        f.lines,
        sink.0 as f64 / 1e6,
        wall * 1e3 / f.steps as f64
    );
    for (p, &u) in t.iter().zip(&f.uncovered_steps) {
        if u > 0 {
            println!("  {} uncovered at {u} of {} steps", p.name, f.steps);
        }
    }
    Ok(())
}
