//! A whole link direction: datagrams and instants in, `(deliver_at, datagram)` out. The one
//! model every driver runs — the simulator's links, `memnet`, the UDP relay and the TUN
//! forwarder — so that they cannot disagree on a datagram's fate.
//!
//! A [`Direction`] is the fixed-rate [`Link`] (queue, serialization, delay, loss, outages,
//! corruption, duplication) with two more rules on top:
//!
//! - **Rate.** With a fixed rate the link does everything. With a mahimahi rate trace
//!   ([`LinkConfig::rate_trace`]), a [`TracedQueue`] decides when each packet leaves (and drops on
//!   overflow, counted as queue drops); the packet is then offered to the link at its departure
//!   time, the link running at an unbounded rate with an unbounded queue so that it adds only the
//!   delay, losses and outages (and 1 ns of serialization).
//! - **Delivery order.** A packet is never delivered before one that entered the direction ahead
//!   of it, even when a delay trace steps down (a path change on a real link moves the queue as a
//!   whole): its arrival is held to the previous packet's. Only the test impairment
//!   `reorder_p > 0` reorders.
//!
//! [`Direction::offer`] decides a fate from a size; [`Direction::send`] (or
//! [`Direction::deliveries`] after `offer`) applies it to a [`Datagram`]: flips the corrupted
//! bit, makes the duplicate, and yields what arrives when. Time is passed in: virtual
//! nanoseconds in the simulator and memnet, nanoseconds since start in the emulators.

use crate::trace::TracedQueue;
use crate::{DropCause, Fate, Link, LinkConfig, LinkConfigError, LinkStats, QueueLimit};
use rand_core::RngCore;

/// What a direction carries: something with a size on the wire whose bits can be flipped.
pub trait Datagram: Clone {
    /// Flips bit `bit` (below 8 × the size offered). Returns false if the datagram has no bytes
    /// to flip (a modelled segment): a receiver's checksum would discard it, so it is lost.
    fn flip_bit(&mut self, bit: usize) -> bool;
}

impl Datagram for Vec<u8> {
    fn flip_bit(&mut self, bit: usize) -> bool {
        if let Some(byte) = self.get_mut(bit / 8) {
            *byte ^= 1 << (bit % 8);
        }
        true
    }
}

/// One copy of a datagram arriving at the far end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<D> {
    pub at_ns: u64,
    pub datagram: D,
    /// A copy made by the link (duplication), not the datagram as sent.
    pub duplicate: bool,
}

/// What arrives of one offered datagram: nothing, the datagram, or the datagram and a duplicate.
/// Yields the duplicate first (every driver schedules it first; it arrives later, or at the same
/// instant when the delivery order holds the original back).
#[derive(Debug, Clone)]
pub struct Deliveries<D> {
    duplicate: Option<Delivery<D>>,
    original: Option<Delivery<D>>,
}

impl<D> Iterator for Deliveries<D> {
    type Item = Delivery<D>;
    fn next(&mut self) -> Option<Delivery<D>> {
        self.duplicate.take().or_else(|| self.original.take())
    }
}

/// One direction of a link with its queue state.
#[derive(Debug, Clone)]
pub struct Direction {
    /// The configuration as given (with the rate trace, if any).
    config: LinkConfig,
    link: Link,
    traced: Option<TracedQueue>,
    /// Packets the traced queue dropped, and their bytes.
    traced_drops: u64,
    traced_drop_bytes: u64,
    keep_order: bool,
    last_at_ns: u64,
}

impl Direction {
    /// A direction in its initial state; checks every field of `config`.
    pub fn new(config: LinkConfig) -> Result<Self, LinkConfigError> {
        config.validate()?;
        let keep_order = config.reorder_p == 0.0;
        let mut inner = config.clone();
        let traced = inner
            .rate_trace
            .take()
            .map(|trace| TracedQueue::new(trace, config.queue));
        if traced.is_some() {
            inner.rate_bps = u64::MAX;
            inner.queue = QueueLimit::Packets(u32::MAX);
        }
        Ok(Direction {
            config,
            link: Link::new(inner)?,
            traced,
            traced_drops: 0,
            traced_drop_bytes: 0,
            keep_order,
            last_at_ns: 0,
        })
    }

    /// The parameters, as given.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Counters in the link's terms; traced-queue overflows count as offered and queue drops.
    pub fn stats(&self) -> LinkStats {
        let mut s = self.link.stats().clone();
        s.offered_packets += self.traced_drops;
        s.offered_bytes = s.offered_bytes.saturating_add(self.traced_drop_bytes);
        s.dropped_queue += self.traced_drops;
        s
    }

    /// When the last accepted packet finishes leaving the queue.
    pub fn busy_until_ns(&self) -> u64 {
        match &self.traced {
            Some(q) => q.busy_until_ns(),
            None => self.link.busy_until_ns(),
        }
    }

    /// Packets queued or in service at `now_ns`.
    pub fn queue_len(&mut self, now_ns: u64) -> usize {
        match &mut self.traced {
            Some(q) => q.queue_len(now_ns),
            None => self.link.queue_len(now_ns),
        }
    }

    /// RED's average queue, `None` for drop-tail.
    pub fn red_average(&self) -> Option<f64> {
        self.link.red_average()
    }

    /// The propagation delay for a packet leaving at `t`.
    pub fn delay_at(&self, t: u64) -> u64 {
        self.link.delay_at(t)
    }

    /// Decides the fate of a datagram of `size` bytes arriving at `now_ns` (non-decreasing
    /// across calls).
    pub fn offer(&mut self, now_ns: u64, size: usize, rng: &mut dyn RngCore) -> Fate {
        let fate = match &mut self.traced {
            None => self.link.offer(now_ns, size, rng),
            Some(q) => {
                let bytes = (size as u64).saturating_add(u64::from(self.config.overhead_bytes));
                match q.offer(now_ns, bytes) {
                    Some(depart) => self.link.offer(depart, size, rng),
                    None => {
                        self.traced_drops += 1;
                        self.traced_drop_bytes = self.traced_drop_bytes.saturating_add(bytes);
                        Fate::Drop(DropCause::Queue)
                    }
                }
            }
        };
        match fate {
            Fate::Deliver {
                at_ns,
                corrupt_bit,
                duplicate_at_ns,
            } if self.keep_order => {
                let at_ns = at_ns.max(self.last_at_ns);
                self.last_at_ns = at_ns;
                Fate::Deliver {
                    at_ns,
                    corrupt_bit,
                    duplicate_at_ns: duplicate_at_ns.map(|d| d.max(at_ns)),
                }
            }
            other => other,
        }
    }

    /// Applies a fate decided by [`Direction::offer`] to the datagram: what arrives, when.
    pub fn deliveries<D: Datagram>(fate: Fate, datagram: D) -> Deliveries<D> {
        let none = Deliveries {
            duplicate: None,
            original: None,
        };
        let Fate::Deliver {
            at_ns,
            corrupt_bit,
            duplicate_at_ns,
        } = fate
        else {
            return none;
        };
        let mut datagram = datagram;
        if let Some(bit) = corrupt_bit {
            if !datagram.flip_bit(bit) {
                return none;
            }
        }
        Deliveries {
            duplicate: duplicate_at_ns.map(|at_ns| Delivery {
                at_ns,
                datagram: datagram.clone(),
                duplicate: true,
            }),
            original: Some(Delivery {
                at_ns,
                datagram,
                duplicate: false,
            }),
        }
    }

    /// Offers `datagram` of `size` bytes at `now_ns`: its fate, and what arrives when.
    pub fn send<D: Datagram>(
        &mut self,
        now_ns: u64,
        size: usize,
        datagram: D,
        rng: &mut dyn RngCore,
    ) -> (Fate, Deliveries<D>) {
        let fate = self.offer(now_ns, size, rng);
        (fate, Self::deliveries(fate, datagram))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse_delay_trace, DeliveryTrace};
    use crate::{Delay, Discipline, Loss, Outage};
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    const MS: u64 = 1_000_000;

    fn at(f: Fate) -> u64 {
        match f {
            Fate::Deliver { at_ns, .. } => at_ns,
            Fate::Drop(c) => panic!("dropped: {c:?}"),
        }
    }

    #[test]
    fn a_delay_step_down_does_not_reorder() {
        let mut cfg = LinkConfig::simple(8_000_000, 0, 100);
        cfg.delay = parse_delay_trace("0 30\n10 5\n", "step.trace").unwrap();
        let mut l = Direction::new(cfg.clone()).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(1);
        // 1000 bytes take 1 ms: leaves at 9 ms, arrives 39 ms.
        assert_eq!(at(l.offer(8 * MS, 1000, &mut r)), 39 * MS);
        // Leaves at 11 ms with 5 ms delay: would arrive at 16 ms, held to 39 ms.
        assert_eq!(at(l.offer(10 * MS, 1000, &mut r)), 39 * MS);
        assert_eq!(at(l.offer(50 * MS, 1000, &mut r)), 56 * MS);
        // The fixed-rate link alone reorders; the test impairment turns the rule off.
        let mut bare = Link::new(cfg.clone()).unwrap();
        assert_eq!(at(bare.offer(8 * MS, 1000, &mut r)), 39 * MS);
        assert_eq!(at(bare.offer(10 * MS, 1000, &mut r)), 16 * MS);
        cfg.reorder_p = 1e-9;
        let mut l = Direction::new(cfg).unwrap();
        assert_eq!(at(l.offer(8 * MS, 1000, &mut r)), 39 * MS);
        assert_eq!(at(l.offer(10 * MS, 1000, &mut r)), 16 * MS);
    }

    #[test]
    fn rate_trace_sets_departures_and_link_adds_delay_and_outages() {
        let mut cfg = LinkConfig::simple(1, 10 * MS, 2);
        cfg.outages = vec![Outage {
            start_ns: 100 * MS,
            duration_ns: 10 * MS,
        }];
        cfg.rate_trace = Some(DeliveryTrace::constant(1, 1000));
        let mut l = Direction::new(cfg.clone()).unwrap();
        assert_eq!(l.config(), &cfg);
        let mut r = ChaCha8Rng::seed_from_u64(1);
        // The inner link's unbounded rate still takes 1 ns per packet.
        assert_eq!(at(l.offer(0, 1500, &mut r)), 11 * MS + 1);
        assert_eq!(at(l.offer(0, 1500, &mut r)), 12 * MS + 1);
        assert_eq!(l.queue_len(0), 2);
        assert_eq!(l.busy_until_ns(), 2 * MS);
        assert_eq!(l.offer(0, 1500, &mut r), Fate::Drop(DropCause::Queue));
        assert_eq!(
            l.offer(105 * MS, 100, &mut r),
            Fate::Drop(DropCause::Outage)
        );
        let s = l.stats();
        assert_eq!(
            (
                s.offered_packets,
                s.delivered_packets,
                s.dropped_queue,
                s.dropped_outage
            ),
            (4, 2, 1, 1)
        );
        let mut red = LinkConfig::simple(1_000_000, 0, 100);
        red.discipline = Discipline::Red(Default::default());
        red.rate_trace = Some(DeliveryTrace::constant(1, 10));
        assert_eq!(Direction::new(red).unwrap_err().field, "discipline");
        let mut traced = LinkConfig::simple(1_000_000, 0, 100);
        traced.rate_trace = Some(DeliveryTrace::constant(1, 10));
        assert_eq!(
            Link::new(traced).unwrap_err().field,
            "rate_trace",
            "the fixed-rate link does not follow a trace silently"
        );
    }

    #[test]
    fn a_rate_trace_step_up_and_a_delay_step_down_keep_fifo() {
        // 1 opportunity per ms for 10 ms, then 4 per ms: departures bunch up; the delay drops
        // from 40 to 10 ms at 5 ms. Arrivals must never go backwards.
        let mut text = String::new();
        for t in 1..=10 {
            text.push_str(&format!("{t}\n"));
        }
        for t in 11..=20 {
            for _ in 0..4 {
                text.push_str(&format!("{t}\n"));
            }
        }
        let mut cfg = LinkConfig::simple(1, 0, 1000);
        cfg.rate_trace = Some(DeliveryTrace::parse(&text, "m").unwrap());
        cfg.delay = parse_delay_trace("0 40\n5 10\n", "d").unwrap();
        let mut l = Direction::new(cfg).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(3);
        let arrivals: Vec<u64> = (0..40).map(|_| at(l.offer(0, 1500, &mut r))).collect();
        assert!(arrivals.windows(2).all(|w| w[0] <= w[1]), "{arrivals:?}");
        // Each departure takes the inner link's 1 ns of serialization.
        assert_eq!(arrivals[0], 41 * MS + 1);
        // The 5th leaves at 5 ms with 10 ms delay (15 ms) but the 4th arrives at 44 ms.
        assert_eq!(arrivals[4], 44 * MS + 1);
        // The 40th leaves at 18 ms, 10 ms away, and is still held behind the 4th.
        assert!(arrivals[4..].iter().all(|&a| a == 44 * MS + 1));
    }

    #[test]
    fn datagrams_are_corrupted_duplicated_and_lost_as_the_fate_says() {
        let mut cfg = LinkConfig::simple(8_000_000, 5 * MS, 100);
        cfg.corrupt_p = 1.0;
        cfg.duplicate_p = 1.0;
        let mut l = Direction::new(cfg).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(9);
        let sent = vec![0u8; 1000];
        let (fate, deliveries) = l.send(0, sent.len(), sent.clone(), &mut r);
        let got: Vec<Delivery<Vec<u8>>> = deliveries.collect();
        let Fate::Deliver {
            at_ns,
            corrupt_bit: Some(bit),
            duplicate_at_ns: Some(dup),
        } = fate
        else {
            panic!("{fate:?}");
        };
        assert_eq!(at_ns, 6 * MS);
        assert_eq!(dup, 6 * MS + 1);
        assert_eq!(got.len(), 2);
        assert!(got[0].duplicate && !got[1].duplicate);
        assert_eq!((got[0].at_ns, got[1].at_ns), (dup, at_ns));
        for d in &got {
            assert_eq!(d.datagram[bit / 8], 1 << (bit % 8), "bit {bit} flipped");
            let flipped: u32 = d.datagram.iter().map(|b| b.count_ones()).sum();
            assert_eq!(flipped, 1);
        }
        // A datagram without bytes to flip is lost; a dropped one yields nothing.
        #[derive(Clone)]
        struct Segment;
        impl Datagram for Segment {
            fn flip_bit(&mut self, _bit: usize) -> bool {
                false
            }
        }
        assert_eq!(Direction::deliveries(fate, Segment).count(), 0);
        assert_eq!(
            Direction::deliveries(Fate::Drop(DropCause::Error), sent).count(),
            0
        );
    }

    #[test]
    fn same_seed_same_schedule() {
        let run = |seed: u64| {
            let mut cfg = LinkConfig::simple(2_000_000, 20 * MS, 30);
            cfg.loss = Loss::GilbertElliott {
                p_good_to_bad: 0.05,
                p_bad_to_good: 0.3,
                loss_good: 0.01,
                loss_bad: 0.5,
            };
            cfg.delay = Delay::Trace {
                points: vec![(0, 30 * MS), (200 * MS, 10 * MS)],
                period_ns: Some(400 * MS),
            };
            cfg.duplicate_p = 0.05;
            cfg.corrupt_p = 0.05;
            let mut l = Direction::new(cfg).unwrap();
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            let mut out = Vec::new();
            for i in 0..2000u64 {
                let d = vec![(i % 251) as u8; 200 + (i % 7) as usize * 100];
                let (_, got) = l.send(i * MS / 2, d.len(), d, &mut r);
                out.extend(got.map(|d| (d.at_ns, d.datagram, d.duplicate)));
            }
            out
        };
        let a = run(5);
        assert_eq!(a, run(5));
        assert_ne!(a, run(6));
        let originals: Vec<u64> = a.iter().filter(|d| !d.2).map(|d| d.0).collect();
        assert!(originals.windows(2).all(|w| w[0] <= w[1]), "FIFO");
        assert!(a.iter().any(|d| d.2), "some duplicated");
    }
}
