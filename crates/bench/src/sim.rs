//! `satstp bench sim`: the packet simulator's speed, simulated events per second on one thread,
//! over a reproduction's cases at one of its points.

use crate::error::{Context, Result};
use netsim::reproduce::Reproduction;
use serde_json::{json, Value};

/// One case (series) of the run.
#[derive(Debug, Clone)]
pub struct SimCase {
    pub case: String,
    pub events: u64,
    pub wall_seconds: f64,
}

/// Runs every series of `repro` (its scenario `template`) at the point labelled `point`, each
/// for `seconds` simulated, and times the simulator alone (the scenario built beforehand).
pub fn run(
    repro: &Reproduction,
    template: &str,
    point: &str,
    seconds: u32,
) -> Result<Vec<SimCase>> {
    let point = repro
        .points
        .iter()
        .find(|p| p.label == point)
        .with_context(|| format!("no {point} point"))?;
    let mut cases = Vec::new();
    for series in &repro.series {
        let mut sc = repro.scenario(template, series, point, false)?;
        sc.duration = format!("{seconds}s");
        let built = sc.build(sc.seed)?;
        let mut sim = built.sim;
        let t0 = std::time::Instant::now();
        let events = sim.run_until(sc.duration_ns()?);
        cases.push(SimCase {
            case: series.name.clone(),
            events,
            wall_seconds: t0.elapsed().as_secs_f64(),
        });
    }
    Ok(cases)
}

/// Events and wall seconds of all the cases together.
pub fn totals(cases: &[SimCase]) -> (u64, f64) {
    (
        cases.iter().map(|c| c.events).sum(),
        cases.iter().map(|c| c.wall_seconds).sum(),
    )
}

/// The JSON report.
pub fn json(cases: &[SimCase], seconds: u32) -> Value {
    let (events, wall) = totals(cases);
    json!({
        "benchmark": "sim",
        "simulated_seconds_per_case": seconds,
        "events": events,
        "wall_seconds": wall,
        "events_per_second": events as f64 / wall,
        "cases": cases.iter().map(|c| json!({"case": c.case, "events": c.events, "wall_seconds": c.wall_seconds})).collect::<Vec<_>>(),
    })
}
