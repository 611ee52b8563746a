//! The table `satstp sim` and `satstp merge` print of a scenario's summary: mean ± confidence
//! interval per flow and per link (apart from `sim` so `shard` can print it without a cycle).

use netsim::scenario::Summary;

/// Prints `s` as the flow and link tables.
pub(crate) fn print_table(s: &Summary) {
    let pct = s.confidence * 100.0;
    outln!(
        "scenario {} ({} runs, mean ± {pct:.0}% CI)",
        s.scenario,
        s.runs
    );
    outln!(
        "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16} {:>9} {:>9}",
        "flow",
        "protocol",
        "goodput (kb/s)",
        "fwd efficiency",
        "reverse (kb/s)",
        "completion (s)",
        "timeouts",
        "recovers"
    );
    for f in &s.flows {
        let completion = f
            .completion_s
            .map_or("-".to_string(), |c| format!("{:.2} ± {:.2}", c.mean, c.ci));
        outln!(
            "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16} {:>9.1} {:>9.1}",
            f.name,
            f.protocol,
            format!(
                "{:.1} ± {:.1}",
                f.goodput_bps.mean / 1e3,
                f.goodput_bps.ci / 1e3
            ),
            format!("{:.3} ± {:.3}", f.fwd_efficiency.mean, f.fwd_efficiency.ci),
            format!(
                "{:.2} ± {:.2}",
                f.reverse_bps.mean / 1e3,
                f.reverse_bps.ci / 1e3
            ),
            completion,
            f.timeouts.mean,
            f.fast_recoveries.mean
        );
    }
    if let Some(j) = s.fairness {
        outln!(
            "  Jain's fairness index over the flows: {:.3} ± {:.3}",
            j.mean,
            j.ci
        );
    }
    outln!(
        "  {:<24} {:>18} {:>22} {:>12} {:>12} {:>12} {:>12}",
        "link",
        "utilization",
        "original-bit util.",
        "packets",
        "queue drops",
        "error drops",
        "outage drops"
    );
    for l in &s.links {
        outln!(
            "  {:<24} {:>18} {:>22} {:>12.0} {:>12.1} {:>12.1} {:>12.1}",
            l.name,
            format!("{:.3} ± {:.3}", l.utilization.mean, l.utilization.ci),
            format!(
                "{:.3} ± {:.3}",
                l.original_utilization.mean, l.original_utilization.ci
            ),
            l.packets.mean,
            l.drops_queue.mean,
            l.drops_error.mean,
            l.drops_outage.mean
        );
    }
}
