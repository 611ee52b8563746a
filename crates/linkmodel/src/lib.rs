//! The satellite link model shared by the simulator and the emulators.
//!
//! A [`Link`] is one direction of a link: a FIFO queue (drop-tail in packets or bytes) feeding a
//! serializer at a fixed rate, then a propagation delay (fixed or from a trace), with packet
//! errors (random, bit-error rate, Gilbert–Elliott bursts), scheduled outages, and the test-only
//! impairments reordering, duplication and corruption. Everything is a pure function of the
//! arrival times, packet sizes and a caller-supplied random generator: the same inputs and seed
//! give the same fates, whether time is virtual (simulator) or real (emulator).
//!
//! Times are nanoseconds since an epoch chosen by the caller.

use rand_core::RngCore;
use std::collections::VecDeque;
use thiserror::Error;

/// A parameter out of range; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid link parameter {field}: {reason}")]
pub struct LinkConfigError {
    pub field: &'static str,
    pub reason: String,
}

fn bad(field: &'static str, reason: &str) -> LinkConfigError {
    LinkConfigError {
        field,
        reason: reason.to_string(),
    }
}

/// Queue bound of the link buffer. The packet being serialized counts as queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    Packets(u32),
    Bytes(u64),
}

/// One-way propagation delay.
#[derive(Debug, Clone, PartialEq)]
pub enum Delay {
    /// Constant, in nanoseconds.
    Fixed(u64),
    /// Piecewise constant: `(from_ns, delay_ns)` pairs sorted by time; the first entry applies from
    /// time 0. With `period_ns`, the trace repeats.
    Trace {
        points: Vec<(u64, u64)>,
        period_ns: Option<u64>,
    },
}

/// Packet errors on the medium.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loss {
    None,
    /// Each packet lost independently with probability `p`.
    Random {
        p: f64,
    },
    /// Each bit in error with probability `ber`: packet error rate 1 − (1 − ber)^bits.
    Ber {
        ber: f64,
    },
    /// Two-state Markov chain per packet: from good to bad with `p_good_to_bad`, back with
    /// `p_bad_to_good`; a packet is lost with `loss_good` / `loss_bad` in each state.
    GilbertElliott {
        p_good_to_bad: f64,
        p_bad_to_good: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

/// A period during which the link delivers nothing (packets arriving or in flight are lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub start_ns: u64,
    pub duration_ns: u64,
}

/// Parameters of one direction of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Serialization rate in bits per second.
    pub rate_bps: u64,
    pub delay: Delay,
    pub queue: QueueLimit,
    pub loss: Loss,
    pub outages: Vec<Outage>,
    /// Bytes added to every packet on the medium (e.g. 28 for IPv4 + UDP headers).
    pub overhead_bytes: u32,
    /// Probability that a packet is held back by `reorder_delay_ns` extra (test impairment).
    pub reorder_p: f64,
    pub reorder_delay_ns: u64,
    /// Probability that a delivered packet arrives twice.
    pub duplicate_p: f64,
    /// Probability that a delivered packet has one bit flipped.
    pub corrupt_p: f64,
}

impl LinkConfig {
    /// A loss-free link with a fixed delay and a packet-count queue.
    pub fn simple(rate_bps: u64, delay_ns: u64, queue_packets: u32) -> Self {
        LinkConfig {
            rate_bps,
            delay: Delay::Fixed(delay_ns),
            queue: QueueLimit::Packets(queue_packets),
            loss: Loss::None,
            outages: Vec::new(),
            overhead_bytes: 0,
            reorder_p: 0.0,
            reorder_delay_ns: 0,
            duplicate_p: 0.0,
            corrupt_p: 0.0,
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), LinkConfigError> {
        if self.rate_bps == 0 {
            return Err(bad("rate_bps", "must be positive"));
        }
        match self.queue {
            QueueLimit::Packets(0) => return Err(bad("queue", "must hold at least one packet")),
            QueueLimit::Bytes(0) => return Err(bad("queue", "must hold at least one byte")),
            _ => {}
        }
        if let Delay::Trace { points, period_ns } = &self.delay {
            if points.is_empty() {
                return Err(bad("delay", "trace has no points"));
            }
            if points.windows(2).any(|w| w[1].0 <= w[0].0) {
                return Err(bad("delay", "trace times must increase"));
            }
            if *period_ns == Some(0) {
                return Err(bad("delay", "trace period must be positive"));
            }
        }
        let prob = |v: f64| (0.0..=1.0).contains(&v);
        match self.loss {
            Loss::None => {}
            Loss::Random { p } if !prob(p) => return Err(bad("loss", "probability outside 0..=1")),
            Loss::Ber { ber } if !prob(ber) => return Err(bad("loss", "BER outside 0..=1")),
            Loss::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } if ![p_good_to_bad, p_bad_to_good, loss_good, loss_bad]
                .into_iter()
                .all(prob) =>
            {
                return Err(bad("loss", "Gilbert-Elliott probability outside 0..=1"))
            }
            _ => {}
        }
        for (name, v) in [
            ("reorder_p", self.reorder_p),
            ("duplicate_p", self.duplicate_p),
            ("corrupt_p", self.corrupt_p),
        ] {
            if !prob(v) {
                return Err(bad(name, "probability outside 0..=1"));
            }
        }
        Ok(())
    }

    /// Bits per second available to payload when every packet is `packet_bytes` long.
    pub fn goodput_capacity_bps(&self, packet_bytes: u32, payload_bytes: u32) -> f64 {
        let wire = f64::from(packet_bytes + self.overhead_bytes);
        self.rate_bps as f64 * f64::from(payload_bytes) / wire
    }
}

/// Why the link dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// The queue was full on arrival.
    Queue,
    /// Lost on the medium (random, BER or Gilbert–Elliott).
    Error,
    /// Arrived or was in flight during an outage.
    Outage,
}

/// What happens to one offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver {
        /// Arrival time at the far end.
        at_ns: u64,
        /// A bit to flip (bit index within the packet), if corrupted.
        corrupt_bit: Option<usize>,
        /// Arrival time of a duplicate copy, if duplicated.
        duplicate_at_ns: Option<u64>,
    },
    Drop(DropCause),
}

/// Counters of one link direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub offered_packets: u64,
    pub offered_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub dropped_queue: u64,
    pub dropped_error: u64,
    pub dropped_outage: u64,
    pub duplicated: u64,
    pub corrupted: u64,
}

/// One direction of a link, with its queue state.
#[derive(Debug, Clone)]
pub struct Link {
    config: LinkConfig,
    /// Departure times and sizes of packets queued or in service.
    queue: VecDeque<(u64, u64)>,
    queued_bytes: u64,
    last_departure_ns: u64,
    last_arrival_ns: u64,
    ge_bad: bool,
    stats: LinkStats,
}

fn uniform(rng: &mut dyn RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl Link {
    /// A link in its initial state (empty queue, Gilbert–Elliott in the good state).
    pub fn new(config: LinkConfig) -> Result<Self, LinkConfigError> {
        config.validate()?;
        Ok(Link {
            config,
            queue: VecDeque::new(),
            queued_bytes: 0,
            last_departure_ns: 0,
            last_arrival_ns: 0,
            ge_bad: false,
            stats: LinkStats::default(),
        })
    }

    /// The parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Packets queued or in service at `now_ns` (after removing departed ones).
    pub fn queue_len(&mut self, now_ns: u64) -> usize {
        self.drain(now_ns);
        self.queue.len()
    }

    fn drain(&mut self, now_ns: u64) {
        while let Some(&(dep, size)) = self.queue.front() {
            if dep > now_ns {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= size;
        }
    }

    fn in_outage(&self, t: u64) -> bool {
        self.config
            .outages
            .iter()
            .any(|o| t >= o.start_ns && t < o.start_ns.saturating_add(o.duration_ns))
    }

    /// The propagation delay for a packet leaving at `t`.
    pub fn delay_at(&self, t: u64) -> u64 {
        match &self.config.delay {
            Delay::Fixed(d) => *d,
            Delay::Trace { points, period_ns } => {
                let t = match period_ns {
                    Some(p) => t % p,
                    None => t,
                };
                let i = points.partition_point(|&(from, _)| from <= t);
                points[i.saturating_sub(1)].1
            }
        }
    }

    fn lost_on_medium(&mut self, bytes: u64, rng: &mut dyn RngCore) -> bool {
        match self.config.loss {
            Loss::None => false,
            Loss::Random { p } => uniform(rng) < p,
            Loss::Ber { ber } => {
                let per = 1.0 - (1.0 - ber).powf((bytes * 8) as f64);
                uniform(rng) < per
            }
            Loss::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } => {
                let flip = if self.ge_bad {
                    p_bad_to_good
                } else {
                    p_good_to_bad
                };
                if uniform(rng) < flip {
                    self.ge_bad = !self.ge_bad;
                }
                uniform(rng) < if self.ge_bad { loss_bad } else { loss_good }
            }
        }
    }

    /// Offers a packet of `size` bytes at `now_ns` and decides its fate. Calls must come in
    /// non-decreasing time order.
    pub fn offer(&mut self, now_ns: u64, size: usize, rng: &mut dyn RngCore) -> Fate {
        let now_ns = now_ns.max(self.last_arrival_ns);
        self.last_arrival_ns = now_ns;
        let bytes = size as u64 + u64::from(self.config.overhead_bytes);
        self.stats.offered_packets += 1;
        self.stats.offered_bytes += bytes;
        if self.in_outage(now_ns) {
            self.stats.dropped_outage += 1;
            return Fate::Drop(DropCause::Outage);
        }
        self.drain(now_ns);
        let full = match self.config.queue {
            QueueLimit::Packets(n) => self.queue.len() >= n as usize,
            QueueLimit::Bytes(b) => self.queued_bytes + bytes > b,
        };
        if full {
            self.stats.dropped_queue += 1;
            return Fate::Drop(DropCause::Queue);
        }
        let start = now_ns.max(self.last_departure_ns);
        let tx_ns =
            (u128::from(bytes) * 8 * 1_000_000_000).div_ceil(u128::from(self.config.rate_bps));
        let depart = start.saturating_add(u64::try_from(tx_ns).unwrap_or(u64::MAX));
        self.last_departure_ns = depart;
        self.queue.push_back((depart, bytes));
        self.queued_bytes += bytes;
        if self.lost_on_medium(bytes, rng) {
            self.stats.dropped_error += 1;
            return Fate::Drop(DropCause::Error);
        }
        let mut at = depart.saturating_add(self.delay_at(depart));
        if self.in_outage(depart) || self.in_outage(at) {
            self.stats.dropped_outage += 1;
            return Fate::Drop(DropCause::Outage);
        }
        if self.config.reorder_p > 0.0 && uniform(rng) < self.config.reorder_p {
            at = at.saturating_add(self.config.reorder_delay_ns);
        }
        let corrupt_bit = (self.config.corrupt_p > 0.0 && uniform(rng) < self.config.corrupt_p)
            .then(|| (rng.next_u64() % (size.max(1) as u64 * 8)) as usize);
        if corrupt_bit.is_some() {
            self.stats.corrupted += 1;
        }
        let duplicate_at_ns = (self.config.duplicate_p > 0.0
            && uniform(rng) < self.config.duplicate_p)
            .then_some(at + 1);
        if duplicate_at_ns.is_some() {
            self.stats.duplicated += 1;
        }
        self.stats.delivered_packets += 1;
        self.stats.delivered_bytes += bytes;
        Fate::Deliver {
            at_ns: at,
            corrupt_bit,
            duplicate_at_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn serialization_and_delay() {
        // 8 Mb/s: a 1000-byte packet takes 1 ms; 10 ms delay.
        let mut l = Link::new(LinkConfig::simple(8_000_000, 10_000_000, 10)).unwrap();
        let mut r = rng();
        assert_eq!(
            l.offer(0, 1000, &mut r),
            Fate::Deliver {
                at_ns: 11_000_000,
                corrupt_bit: None,
                duplicate_at_ns: None
            }
        );
        assert_eq!(
            l.offer(0, 1000, &mut r),
            Fate::Deliver {
                at_ns: 12_000_000,
                corrupt_bit: None,
                duplicate_at_ns: None
            }
        );
    }

    #[test]
    fn drop_tail_by_packets_and_bytes() {
        let mut l = Link::new(LinkConfig::simple(8_000_000, 0, 2)).unwrap();
        let mut r = rng();
        assert!(matches!(l.offer(0, 1000, &mut r), Fate::Deliver { .. }));
        assert!(matches!(l.offer(0, 1000, &mut r), Fate::Deliver { .. }));
        assert_eq!(l.offer(0, 1000, &mut r), Fate::Drop(DropCause::Queue));
        assert!(
            matches!(l.offer(1_000_000, 1000, &mut r), Fate::Deliver { .. }),
            "one departed"
        );
        let mut cfg = LinkConfig::simple(8_000_000, 0, 1);
        cfg.queue = QueueLimit::Bytes(1500);
        let mut l = Link::new(cfg).unwrap();
        assert!(matches!(l.offer(0, 1000, &mut r), Fate::Deliver { .. }));
        assert_eq!(l.offer(0, 600, &mut r), Fate::Drop(DropCause::Queue));
        assert!(matches!(l.offer(0, 400, &mut r), Fate::Deliver { .. }));
    }

    #[test]
    fn random_loss_rate_is_close() {
        let mut cfg = LinkConfig::simple(1_000_000_000, 0, 100_000);
        cfg.loss = Loss::Random { p: 0.1 };
        let mut l = Link::new(cfg).unwrap();
        let mut r = rng();
        let lost = (0..100_000u64)
            .filter(|i| {
                matches!(
                    l.offer(i * 1_000_000, 100, &mut r),
                    Fate::Drop(DropCause::Error)
                )
            })
            .count();
        assert!((9_000..11_000).contains(&lost), "{lost}");
    }

    #[test]
    fn ber_packet_error_rate() {
        let mut cfg = LinkConfig::simple(1_000_000_000, 0, 100_000);
        cfg.loss = Loss::Ber { ber: 1e-5 };
        let mut l = Link::new(cfg).unwrap();
        let mut r = rng();
        // 1000-byte packets: PER = 1 - (1 - 1e-5)^8000 ≈ 0.0769
        let lost = (0..100_000u64)
            .filter(|i| matches!(l.offer(i * 1_000_000, 1000, &mut r), Fate::Drop(_)))
            .count();
        assert!((7_000..8_400).contains(&lost), "{lost}");
    }

    #[test]
    fn outage_drops_everything_inside() {
        let mut cfg = LinkConfig::simple(8_000_000, 5_000_000, 100);
        cfg.outages = vec![Outage {
            start_ns: 10_000_000,
            duration_ns: 10_000_000,
        }];
        let mut l = Link::new(cfg).unwrap();
        let mut r = rng();
        assert!(matches!(l.offer(0, 100, &mut r), Fate::Deliver { .. }));
        assert_eq!(
            l.offer(12_000_000, 100, &mut r),
            Fate::Drop(DropCause::Outage)
        );
        assert_eq!(
            l.offer(8_000_000, 100, &mut r),
            Fate::Drop(DropCause::Outage),
            "arrives during"
        );
        assert!(matches!(
            l.offer(25_000_000, 100, &mut r),
            Fate::Deliver { .. }
        ));
    }

    #[test]
    fn delay_trace_is_piecewise_and_periodic() {
        let mut cfg = LinkConfig::simple(1_000_000_000, 0, 100);
        cfg.delay = Delay::Trace {
            points: vec![(0, 10), (100, 20)],
            period_ns: Some(200),
        };
        let l = Link::new(cfg).unwrap();
        assert_eq!(l.delay_at(50), 10);
        assert_eq!(l.delay_at(150), 20);
        assert_eq!(l.delay_at(250), 10);
    }

    #[test]
    fn invalid_config_names_field() {
        let mut cfg = LinkConfig::simple(0, 0, 1);
        assert_eq!(Link::new(cfg.clone()).unwrap_err().field, "rate_bps");
        cfg.rate_bps = 1;
        cfg.duplicate_p = 2.0;
        assert_eq!(Link::new(cfg).unwrap_err().field, "duplicate_p");
    }
}
