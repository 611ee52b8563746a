//! One direction of the IP-level emulator's link: the shared [`linkmodel::Link`], optionally
//! behind a [`TracedQueue`] when the rate follows a mahimahi trace, with delivery kept in order.
//!
//! With a fixed rate the model does everything (queue, serialization, delay, loss, outages). With
//! a rate trace, the traced queue decides when each packet leaves (and drops on overflow, counted
//! as queue drops); the packet is then offered to the model at its departure time, the model
//! running at an unbounded rate with an unbounded queue so that it adds only the delay, losses
//! and outages.
//!
//! Delivery order: a packet is never delivered before one that entered the direction ahead of
//! it, even when a delay trace steps down (a path change on a real link moves the queue as a
//! whole), unless the configuration asks for reordering (`reorder_p > 0`).

use super::trace::{DeliveryTrace, TracedQueue};
use linkmodel::{Discipline, Fate, Link, LinkConfig, LinkConfigError, LinkStats, QueueLimit};
use rand_core::RngCore;

#[derive(Debug)]
pub struct NetLink {
    link: Link,
    traced: Option<TracedQueue>,
    /// Packets the traced queue dropped, and their bytes.
    traced_drops: u64,
    traced_drop_bytes: u64,
    keep_order: bool,
    last_at_ns: u64,
}

impl NetLink {
    pub fn new(
        config: LinkConfig,
        rate_trace: Option<DeliveryTrace>,
    ) -> Result<Self, LinkConfigError> {
        let keep_order = config.reorder_p == 0.0;
        let Some(trace) = rate_trace else {
            return Ok(NetLink {
                link: Link::new(config)?,
                traced: None,
                traced_drops: 0,
                traced_drop_bytes: 0,
                keep_order,
                last_at_ns: 0,
            });
        };
        config.validate()?;
        if matches!(config.discipline, Discipline::Red(_)) {
            return Err(LinkConfigError {
                field: "discipline",
                reason: "RED cannot be combined with a rate trace (the traced queue is drop-tail)"
                    .into(),
            });
        }
        let traced = TracedQueue::new(trace, config.queue);
        let mut inner = config;
        inner.rate_bps = u64::MAX;
        inner.queue = QueueLimit::Packets(u32::MAX);
        Ok(NetLink {
            link: Link::new(inner)?,
            traced: Some(traced),
            traced_drops: 0,
            traced_drop_bytes: 0,
            keep_order,
            last_at_ns: 0,
        })
    }

    /// Counters in the model's terms; traced-queue overflows count as offered and queue drops.
    pub fn stats(&self) -> LinkStats {
        let mut s = self.link.stats().clone();
        s.offered_packets += self.traced_drops;
        s.offered_bytes = s.offered_bytes.saturating_add(self.traced_drop_bytes);
        s.dropped_queue += self.traced_drops;
        s
    }

    /// Decides the fate of a packet of `size` bytes arriving at `now_ns` (non-decreasing).
    pub fn offer(&mut self, now_ns: u64, size: usize, rng: &mut dyn RngCore) -> Fate {
        let fate = match &mut self.traced {
            None => self.link.offer(now_ns, size, rng),
            Some(q) => {
                let bytes =
                    (size as u64).saturating_add(u64::from(self.link.config().overhead_bytes));
                match q.offer(now_ns, bytes) {
                    Some(depart) => self.link.offer(depart, size, rng),
                    None => {
                        self.traced_drops += 1;
                        self.traced_drop_bytes = self.traced_drop_bytes.saturating_add(bytes);
                        Fate::Drop(linkmodel::DropCause::Queue)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkmodel::{Delay, DropCause, Outage};
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
        cfg.delay = Delay::Trace {
            points: vec![(0, 30 * MS), (10 * MS, 5 * MS)],
            period_ns: None,
        };
        let mut l = NetLink::new(cfg, None).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(1);
        // 1000 bytes take 1 ms: leaves at 9 ms, arrives 39 ms.
        assert_eq!(at(l.offer(8 * MS, 1000, &mut r)), 39 * MS);
        // Leaves at 11 ms with 5 ms delay: would arrive at 16 ms, held to 39 ms.
        assert_eq!(at(l.offer(10 * MS, 1000, &mut r)), 39 * MS);
        assert_eq!(at(l.offer(50 * MS, 1000, &mut r)), 56 * MS);
    }

    #[test]
    fn rate_trace_sets_departures_and_model_adds_delay_and_outages() {
        let mut cfg = LinkConfig::simple(1, 10 * MS, 2);
        cfg.outages = vec![Outage {
            start_ns: 100 * MS,
            duration_ns: 10 * MS,
        }];
        let mut l = NetLink::new(cfg, Some(DeliveryTrace::constant(1, 1000))).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(1);
        // The model's unbounded rate still takes 1 ns per packet.
        assert_eq!(at(l.offer(0, 1500, &mut r)), 11 * MS + 1);
        assert_eq!(at(l.offer(0, 1500, &mut r)), 12 * MS + 1);
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
        let e = NetLink::new(red, Some(DeliveryTrace::constant(1, 10))).unwrap_err();
        assert_eq!(e.field, "discipline");
    }
}
