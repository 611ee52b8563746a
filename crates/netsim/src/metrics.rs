//! Per-flow and per-link measurements taken during a run, and the summary statistics of several
//! replications (mean and 95 % confidence interval, Student t).

use crate::clock::Time;
use crate::packet::{Direction, FlowId, LinkId, Packet};
use linkmodel::{DropCause, Fate};
use std::collections::BTreeMap;

/// What one flow did.
#[derive(Debug, Clone, Default)]
pub struct FlowMetrics {
    /// Application bytes delivered to the receiving application, in order.
    pub delivered_bytes: u64,
    /// When the flow's first packet was sent.
    pub started_ns: Option<Time>,
    /// When the receiving application got the last byte of a finite transfer.
    pub completed_ns: Option<Time>,
    pub retransmitted_packets: u64,
    pub timeouts: u64,
    /// Entries into fast recovery (TCP).
    pub fast_recoveries: u64,
    /// (time, congestion window in bytes) samples, when `trace` is on.
    pub cwnd_series: Vec<(Time, u64)>,
    /// (time, highest sequence number sent) samples, when `trace` is on.
    pub seq_series: Vec<(Time, u64)>,
    pub trace: bool,
}

/// Bytes and packets a flow put on a link in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Volume {
    pub packets: u64,
    pub bytes: u64,
}

/// What happened on one simplex link.
#[derive(Debug, Clone, Default)]
pub struct LinkMetrics {
    /// Bytes each flow transmitted on the link, by direction: packets that crossed the link by the
    /// end of the run, and packets lost to bit errors (counted when offered). Packets dropped at
    /// the queue or in an outage, or still queued at the end, do not count.
    pub by_flow: BTreeMap<(FlowId, bool), Volume>,
    /// Everything transmitted.
    pub transmitted: Volume,
    /// Transmitted packets that were not retransmissions (original bits).
    pub original: Volume,
    pub dropped_queue: u64,
    pub dropped_error: u64,
    pub dropped_outage: u64,
}

impl LinkMetrics {
    /// Bytes `flow` transmitted here in `direction`.
    pub fn flow_bytes(&self, flow: FlowId, direction: Direction) -> u64 {
        self.by_flow
            .get(&(flow, direction == Direction::Forward))
            .map_or(0, |v| v.bytes)
    }
}

impl Volume {
    fn add(&mut self, other: Volume) {
        self.packets += other.packets;
        self.bytes += other.bytes;
    }
}

/// Counts a transmitted packet to its flow's volume on the link, to everything transmitted and,
/// unless it is a retransmission, to the original bits.
fn count(flow: &mut Volume, transmitted: &mut Volume, original: &mut Volume, pkt: &Packet) {
    let one = Volume {
        packets: 1,
        bytes: u64::from(pkt.size),
    };
    flow.add(one);
    transmitted.add(one);
    if !pkt.retransmission {
        original.add(one);
    }
}

/// The packets that crossed one link since the tally was last added to the run's
/// [`LinkMetrics`]: the simulator counts every hop of every packet here (a vector index, and a
/// cheap hash only when the flow or direction changes from the packet before) instead of two
/// ordered-map look-ups, and adds the tally to [`Metrics::links`] whenever a run returns.
#[derive(Debug)]
pub(crate) struct LinkTally {
    by_flow: std::collections::HashMap<(FlowId, bool), Volume, crate::sim::BuildNodeHasher>,
    /// The flow and direction of the latest packets, and what they add up to (not yet in
    /// `by_flow`): a link mostly carries runs of one flow's packets.
    run_key: (FlowId, bool),
    run: Volume,
    transmitted: Volume,
    original: Volume,
}

impl Default for LinkTally {
    fn default() -> Self {
        LinkTally {
            by_flow: Default::default(),
            run_key: (FlowId(0), true),
            run: Volume::default(),
            transmitted: Volume::default(),
            original: Volume::default(),
        }
    }
}

impl LinkTally {
    /// Records a packet that crossed the link (as [`Metrics::on_transmitted`]).
    pub(crate) fn on_transmitted(&mut self, pkt: &Packet) {
        let key = (pkt.flow, pkt.direction == Direction::Forward);
        if key != self.run_key {
            self.end_run();
            self.run_key = key;
        }
        count(
            &mut self.run,
            &mut self.transmitted,
            &mut self.original,
            pkt,
        );
    }

    /// Adds the current run to its flow's volume.
    fn end_run(&mut self) {
        if self.run.packets > 0 {
            let run = std::mem::take(&mut self.run);
            self.by_flow.entry(self.run_key).or_default().add(run);
        }
    }

    /// Adds what was counted to `link`'s metrics (creating them as the first packet would have)
    /// and starts over.
    pub(crate) fn flush(&mut self, metrics: &mut Metrics, link: LinkId) {
        if self.transmitted.packets == 0 {
            return;
        }
        self.end_run();
        let m = metrics.links.entry(link).or_default();
        for (k, v) in self.by_flow.drain() {
            m.by_flow.entry(k).or_default().add(v);
        }
        m.transmitted.add(std::mem::take(&mut self.transmitted));
        m.original.add(std::mem::take(&mut self.original));
    }
}

/// All measurements of a run.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub flows: BTreeMap<FlowId, FlowMetrics>,
    pub links: BTreeMap<LinkId, LinkMetrics>,
}

impl Metrics {
    fn flow(&mut self, f: FlowId) -> &mut FlowMetrics {
        self.flows.entry(f).or_default()
    }

    /// Whether flow `f` has completed (its last byte delivered).
    pub fn is_completed(&self, f: FlowId) -> bool {
        self.flows.get(&f).is_some_and(|m| m.completed_ns.is_some())
    }

    /// Records a packet offered to a link and its fate (drops; a packet lost to bit errors was
    /// transmitted, so it is counted here; delivered packets are counted on arrival).
    pub fn on_link(&mut self, link: LinkId, pkt: &Packet, fate: &Fate, _now: Time) {
        if let Fate::Deliver { .. } = fate {
            // Counted when it has crossed the link (`on_transmitted`).
            return;
        }
        let m = self.links.entry(link).or_default();
        match fate {
            Fate::Drop(DropCause::Queue) => m.dropped_queue += 1,
            // RED early drops are queue-management drops: counted with the queue's (the link
            // model's own stats keep them apart).
            Fate::Drop(DropCause::Red) => m.dropped_queue += 1,
            Fate::Drop(DropCause::Outage) => m.dropped_outage += 1,
            Fate::Drop(DropCause::Error) => {
                m.dropped_error += 1;
                self.on_transmitted(link, pkt);
            }
            Fate::Deliver { .. } => {}
        }
    }

    /// Records a packet that crossed (or was transmitted on) a link.
    pub fn on_transmitted(&mut self, link: LinkId, pkt: &Packet) {
        let m = self.links.entry(link).or_default();
        let v = m
            .by_flow
            .entry((pkt.flow, pkt.direction == Direction::Forward))
            .or_default();
        count(v, &mut m.transmitted, &mut m.original, pkt);
    }

    /// The receiving application got `bytes` more of `flow`.
    pub fn delivered(&mut self, flow: FlowId, bytes: u64) {
        self.flow(flow).delivered_bytes += bytes;
    }

    /// The flow sent its first packet.
    pub fn started(&mut self, flow: FlowId, now: Time) {
        self.flow(flow).started_ns.get_or_insert(now);
    }

    /// The receiving application got the end of a finite transfer.
    pub fn completed(&mut self, flow: FlowId, now: Time) {
        self.flow(flow).completed_ns.get_or_insert(now);
    }

    pub fn retransmitted(&mut self, flow: FlowId, packets: u64) {
        self.flow(flow).retransmitted_packets += packets;
    }

    pub fn timeout(&mut self, flow: FlowId) {
        self.flow(flow).timeouts += 1;
    }

    /// The flow's sender entered fast recovery `n` more times.
    pub fn fast_recoveries(&mut self, flow: FlowId, n: u64) {
        self.flow(flow).fast_recoveries += n;
    }

    /// Turns on cwnd/sequence series for `flow`.
    pub fn enable_trace(&mut self, flow: FlowId) {
        self.flow(flow).trace = true;
    }

    /// Whether `flow` records time series.
    pub fn tracing(&self, flow: FlowId) -> bool {
        self.flows.get(&flow).is_some_and(|f| f.trace)
    }

    /// Samples the congestion window and highest sequence sent, if tracing `flow`.
    pub fn sample(&mut self, flow: FlowId, now: Time, cwnd: u64, seq: u64) {
        let f = self.flow(flow);
        if f.trace {
            f.cwnd_series.push((now, cwnd));
            f.seq_series.push((now, seq));
        }
    }
}

/// Mean and half-width of the 95 % confidence interval of a sample (Student t; zero width for
/// fewer than two values).
pub fn mean_ci95(values: &[f64]) -> (f64, f64) {
    mean_ci(values, Confidence::P95)
}

/// A two-sided confidence level for intervals of the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Confidence {
    /// 95 % (the default; the seeds' ch. 5 and testbed figures).
    #[default]
    #[serde(rename = "0.95")]
    P95,
    /// 99 % (the seeds' ch. 4 simulation studies).
    #[serde(rename = "0.99")]
    P99,
}

impl Confidence {
    /// The level from a fraction (0.95, 0.99) or percentage (95, 99).
    pub fn from_level(level: f64) -> Option<Confidence> {
        let l = if level > 1.0 { level / 100.0 } else { level };
        if (l - 0.95).abs() < 1e-9 {
            Some(Confidence::P95)
        } else if (l - 0.99).abs() < 1e-9 {
            Some(Confidence::P99)
        } else {
            None
        }
    }

    /// The level as a fraction.
    pub fn level(self) -> f64 {
        match self {
            Confidence::P95 => 0.95,
            Confidence::P99 => 0.99,
        }
    }

    /// Two-sided quantile of Student's t distribution with `df` degrees of freedom.
    pub fn t(self, df: usize) -> f64 {
        match self {
            Confidence::P95 => t_quantile(df, |(p95, _)| p95),
            Confidence::P99 => t_quantile(df, |(_, p99)| p99),
        }
    }
}

/// Sample standard deviation (n − 1 in the denominator; 0 for fewer than two values).
pub fn sample_sd(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
}

/// Mean and half-width of the confidence interval at `level` (Student t; zero width for fewer
/// than two values).
pub fn mean_ci(values: &[f64], level: Confidence) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, 0.0);
    }
    (mean, level.t(n - 1) * sample_sd(values) / (n as f64).sqrt())
}

/// Two-sided quantiles of Student's t distribution, (95 %, 99 %), for 1 to 30 degrees of freedom.
const T_TABLE: [(f64, f64); 30] = [
    (12.706, 63.657),
    (4.303, 9.925),
    (3.182, 5.841),
    (2.776, 4.604),
    (2.571, 4.032),
    (2.447, 3.707),
    (2.365, 3.499),
    (2.306, 3.355),
    (2.262, 3.250),
    (2.228, 3.169),
    (2.201, 3.106),
    (2.179, 3.055),
    (2.160, 3.012),
    (2.145, 2.977),
    (2.131, 2.947),
    (2.120, 2.921),
    (2.110, 2.898),
    (2.101, 2.878),
    (2.093, 2.861),
    (2.086, 2.845),
    (2.080, 2.831),
    (2.074, 2.819),
    (2.069, 2.807),
    (2.064, 2.797),
    (2.060, 2.787),
    (2.056, 2.779),
    (2.052, 2.771),
    (2.048, 2.763),
    (2.045, 2.756),
    (2.042, 2.750),
];
/// The same at 60 and 120 degrees of freedom, and the normal quantiles (infinite df).
const T_60: (f64, f64) = (2.000, 2.660);
const T_120: (f64, f64) = (1.980, 2.617);
const T_NORMAL: (f64, f64) = (1.960, 2.576);

/// The two-sided quantile of Student's t distribution with `df` degrees of freedom in the column
/// `level` picks from [`T_TABLE`]: tabulated up to 30, linear in df between the rows for 30, 60
/// and 120, the normal quantile beyond.
fn t_quantile(df: usize, level: fn((f64, f64)) -> f64) -> f64 {
    let (t30, t60, t120) = (level(T_TABLE[29]), level(T_60), level(T_120));
    match df {
        0 => f64::NAN,
        1..=30 => level(T_TABLE[df - 1]),
        31..=60 => t30 - (df - 30) as f64 * (t30 - t60) / 30.0,
        61..=120 => t60 - (df - 60) as f64 * (t60 - t120) / 60.0,
        _ => level(T_NORMAL),
    }
}

/// Jain's fairness index of a set of throughputs: 1 when all are equal, 1/n when one takes all.
pub fn jain_index(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    if sq == 0.0 {
        return 1.0;
    }
    sum * sum / (n * sq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Addr, NodeId, Payload, TcpSegment};

    /// The per-link tally (runs of one flow summed before they reach the map) counts what
    /// counting each packet straight into the metrics counts: per flow and direction, in all,
    /// and in original bits, over interleaved flows, directions and retransmissions, across two
    /// flushes.
    #[test]
    fn the_link_tally_counts_as_the_metrics_do() {
        let addr = Addr {
            node: NodeId(0),
            port: 1,
        };
        let pkt = |i: u64| Packet {
            id: i,
            src: addr,
            dst: addr,
            flow: FlowId((i % 7 / 3) as u32),
            direction: if i.is_multiple_of(5) {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            size: 40 + (i % 11) as u32 * 100,
            payload: Payload::Tcp(TcpSegment::default()),
            retransmission: i.is_multiple_of(13),
        };
        let link = LinkId(3);
        let mut direct = Metrics::default();
        let mut tallied = Metrics::default();
        let mut tally = LinkTally::default();
        for i in 0..500 {
            direct.on_transmitted(link, &pkt(i));
            tally.on_transmitted(&pkt(i));
            if i == 200 {
                tally.flush(&mut tallied, link);
            }
        }
        tally.flush(&mut tallied, link);
        let (d, t) = (&direct.links[&link], &tallied.links[&link]);
        assert_eq!(d.by_flow, t.by_flow);
        assert_eq!(d.by_flow.len(), 6, "three flows, both directions");
        assert_eq!((d.transmitted, d.original), (t.transmitted, t.original));
        assert!(d.original.packets < d.transmitted.packets);
    }

    /// The t quantiles follow the printed table (df 1, 10, 30, 60, 120, ∞) at both levels and
    /// lie on the straight line between the tabulated df in between.
    #[test]
    fn t_quantiles_follow_the_table_and_interpolate_between_its_rows() {
        for (level, rows) in [
            (
                Confidence::P95,
                [
                    (1, 12.706),
                    (10, 2.228),
                    (30, 2.042),
                    (60, 2.000),
                    (120, 1.980),
                ],
            ),
            (
                Confidence::P99,
                [
                    (1, 63.657),
                    (10, 3.169),
                    (30, 2.750),
                    (60, 2.660),
                    (120, 2.617),
                ],
            ),
        ] {
            for (df, t) in rows {
                assert_eq!(level.t(df), t, "{level:?} df {df}");
            }
            let mid = |a: usize, b: usize| (level.t(a) + level.t(b)) / 2.0;
            assert!((level.t(45) - mid(30, 60)).abs() < 1e-12, "{level:?}");
            assert!((level.t(90) - mid(60, 120)).abs() < 1e-12, "{level:?}");
            assert!(level.t(0).is_nan());
        }
        assert_eq!(Confidence::P95.t(121), 1.960);
        assert_eq!(Confidence::P99.t(10_000), 2.576);
    }

    #[test]
    fn confidence_interval() {
        let (m, h) = mean_ci95(&[10.0, 12.0, 14.0]);
        assert_eq!(m, 12.0);
        // s = 2, n = 3: 4.303 * 2 / sqrt(3)
        assert!((h - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-9);
        assert_eq!(mean_ci95(&[5.0]), (5.0, 0.0));
    }

    #[test]
    fn ninety_nine_percent_intervals_are_wider() {
        let v = [10.0, 12.0, 14.0];
        let (_, h99) = mean_ci(&v, Confidence::P99);
        // s = 2, n = 3, t(0.995, 2) = 9.925
        assert!((h99 - 9.925 * 2.0 / 3f64.sqrt()).abs() < 1e-9);
        let many: Vec<f64> = (0..200).map(|i| f64::from(i % 7)).collect();
        let (_, a) = mean_ci(&many, Confidence::P95);
        let (_, b) = mean_ci(&many, Confidence::P99);
        // Large samples: the ratio tends to 2.576 / 1.960.
        assert!((b / a - 2.576 / 1.960).abs() < 1e-3, "{}", b / a);
        assert_eq!(Confidence::from_level(99.0), Some(Confidence::P99));
        assert_eq!(Confidence::from_level(0.95), Some(Confidence::P95));
        assert_eq!(Confidence::from_level(0.9), None);
        assert!((sample_sd(&v) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn jain() {
        assert!((jain_index(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
    }
}
