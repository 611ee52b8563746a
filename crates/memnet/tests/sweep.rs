//! The fault sweep CI runs: 1,000 seeds of the STP engine under random impairments (see
//! `memnet::sweep`); every seed must deliver byte-exact or fail cleanly. `satstp bench sweep
//! --seed S` reruns a failing seed verbosely.

#[test]
fn thousand_seeds_deliver_exactly_or_fail_cleanly() {
    let seeds = std::env::var("STP_SWEEP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let start = std::env::var("STP_SWEEP_START")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let sum = memnet::sweep::sweep(start, seeds, |_| {});
    let lines: Vec<String> = sum
        .failures
        .iter()
        .map(|r| {
            format!(
                "seed {}: {}\n    scenario: {}",
                r.seed,
                r.failure.as_deref().unwrap_or(""),
                r.summary
            )
        })
        .collect();
    eprintln!(
        "{} seeds: {} clean, {} failed cleanly, {} broke a check",
        sum.seeds,
        sum.clean,
        sum.failed_cleanly,
        sum.failures.len()
    );
    assert!(lines.is_empty(), "{}", lines.join("\n"));
    // The sweep must exercise both outcomes, or its scenarios are too mild or too harsh.
    assert!(sum.clean > seeds / 2, "only {} clean runs", sum.clean);
    assert!(sum.failed_cleanly > 0, "no seed ended in a clean failure");
}
