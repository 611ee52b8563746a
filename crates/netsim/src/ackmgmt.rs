//! ACK management in a link's queue, for asymmetric paths (the remedies surveyed by Ghani and
//! Dixit, seed 003, and RFC 3449): a link with any of these features keeps its waiting packets
//! in a [`ManagedQueue`] here instead of the link model's virtual queue, so queued packets can be
//! looked at and changed.
//!
//! - **ACK filtering**: a pure cumulative ACK entering the queue removes the older pure ACKs of
//!   the same connection still waiting (their information is contained in the new one). ACKs
//!   that do not advance the acknowledgement (duplicate ACKs, which drive fast retransmit) and
//!   segments carrying data, SYN, FIN or RST are never removed.
//! - **ACK pacing** (at the forward gateway, on the link carrying ACKs back towards the
//!   senders): an ACK leaves only while the watched forward queue holds fewer than a threshold
//!   of packets, and ACKs are spaced so that the data they acknowledge, sent again by the
//!   senders, arrives at no more than the forward link's rate — the ACK-pacing idea of Ghani's
//!   EAP (seed 003, refs. [12], [16]): TCP's sending follows the returning ACKs.
//! - **Window overwriting**: the advertised window of every ACK crossing the link is lowered
//!   to at most a cap (seed 003's "receiver window modification", in its static form).
//! - **Drop from front**: a pure ACK arriving at a full queue pushes out the oldest pure ACK
//!   waiting (seed 003's "drop-from-front strategies" that "push out 'older' ACK packets",
//!   after Lakshman et al., its ref. [16]); other arrivals at a full queue are dropped as usual.
//!
//! The queue is FIFO: filtering removes packets but never reorders, and pacing only delays
//! the head, so order is preserved. Its bound is the link's queue limit.

use crate::clock::Time;
use crate::packet::{Addr, FlowId, LinkId, Packet, Payload};
use std::collections::{HashMap, VecDeque};

/// ACK pacing: where the forward queue is and how fast it drains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AckPacing {
    /// The forward link whose queue is watched (the gateway's outgoing data queue).
    pub watch: LinkId,
    /// Rate of the watched link, bits per second: acknowledged bytes are released no faster.
    pub rate_bps: u64,
    /// ACKs wait while the watched queue holds at least this many packets.
    pub threshold_packets: usize,
}

/// What a managed queue does.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AckQueueConfig {
    /// Most packets waiting (the link's queue limit).
    pub capacity_packets: usize,
    /// Most bytes waiting (for a byte-limited link), if any.
    pub capacity_bytes: Option<u64>,
    pub filter: bool,
    pub pacing: Option<AckPacing>,
    /// Cap on the advertised window of ACKs, bytes.
    pub window_cap: Option<u64>,
    /// Drop from front: a pure ACK finding the queue full replaces the oldest pure ACK.
    pub drop_front: bool,
}

/// Counters of a managed queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckQueueStats {
    /// ACKs removed by filtering.
    pub filtered: u64,
    /// Packets refused because the queue was full.
    pub dropped: u64,
    /// ACKs whose window was lowered.
    pub windows_overwritten: u64,
    /// Older ACKs pushed out by a newer one (drop from front; also counted in `dropped`).
    pub pushed_out: u64,
    /// Times the head ACK had to wait for the watched queue to drain.
    pub held: u64,
}

/// What the link may do next.
#[derive(Debug)]
pub enum Release {
    /// Send this packet now.
    Now(Packet),
    /// Nothing may leave before this time (pacing).
    At(Time),
    /// Nothing is waiting.
    Empty,
}

/// The connection an ACK belongs to: flow and both ends (a flow may have several connections,
/// e.g. web exchanges or striped transfers).
type ConnKey = (FlowId, Addr, Addr);

/// A pure ACK: acknowledgement flag, no data, no SYN/FIN/RST.
fn pure_ack(p: &Packet) -> Option<u64> {
    match &p.payload {
        Payload::Tcp(s) if s.ack_flag && s.len == 0 && !s.syn && !s.fin && !s.rst => Some(s.ack),
        _ => None,
    }
}

fn key(p: &Packet) -> ConnKey {
    (p.flow, p.src, p.dst)
}

/// The waiting packets of a managed link.
#[derive(Debug, Default)]
pub struct ManagedQueue {
    config: AckQueueConfig,
    queue: VecDeque<Packet>,
    bytes: u64,
    /// Highest acknowledgement released per connection (pacing spaces by the advance).
    released_ack: HashMap<ConnKey, u64>,
    /// Earliest time the next ACK may leave (pacing).
    next_release: Time,
    /// An event for this queue is scheduled at this time.
    pub(crate) next_service: Option<Time>,
    pub stats: AckQueueStats,
}

impl ManagedQueue {
    pub fn new(config: AckQueueConfig) -> Self {
        ManagedQueue {
            config,
            ..Default::default()
        }
    }

    pub fn config(&self) -> &AckQueueConfig {
        &self.config
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The waiting packets, head first.
    pub fn iter(&self) -> impl Iterator<Item = &Packet> {
        self.queue.iter()
    }

    /// Offers a packet: overwrites its window, filters the older ACKs it supersedes, and
    /// queues it; gives it back if the queue is full.
    pub fn push(&mut self, mut pkt: Packet) -> Result<(), Packet> {
        if let (Some(cap), Payload::Tcp(s)) = (self.config.window_cap, &mut pkt.payload) {
            if s.ack_flag && s.window > cap {
                s.window = cap;
                self.stats.windows_overwritten += 1;
            }
        }
        if self.config.filter {
            if let Some(ack) = pure_ack(&pkt) {
                let k = key(&pkt);
                let before = self.queue.len();
                let mut freed = 0;
                self.queue.retain(|q| {
                    let stale = key(q) == k && pure_ack(q).is_some_and(|a| a < ack);
                    if stale {
                        freed += u64::from(q.size);
                    }
                    !stale
                });
                self.bytes -= freed;
                self.stats.filtered += (before - self.queue.len()) as u64;
            }
        }
        let size = u64::from(pkt.size);
        let full = self.queue.len() >= self.config.capacity_packets
            || self
                .config
                .capacity_bytes
                .is_some_and(|b| self.bytes + size > b);
        if full {
            self.stats.dropped += 1;
            if self.config.drop_front && pure_ack(&pkt).is_some() {
                let oldest = self.queue.iter().position(|q| pure_ack(q).is_some());
                let fits = |old: u64| {
                    self.config
                        .capacity_bytes
                        .is_none_or(|b| self.bytes - old + size <= b)
                };
                if let Some(i) = oldest.filter(|&i| fits(u64::from(self.queue[i].size))) {
                    if let Some(old) = self.queue.remove(i) {
                        self.bytes = self.bytes - u64::from(old.size) + size;
                        self.queue.push_back(pkt);
                        self.stats.pushed_out += 1;
                        return Err(old);
                    }
                }
            }
            return Err(pkt);
        }
        self.bytes += size;
        self.queue.push_back(pkt);
        Ok(())
    }

    /// The head packet if it may leave at `now`; `watched_len` is the watched forward queue's
    /// length (pacing only). Non-ACK packets are never held, except behind a held ACK.
    pub fn release(&mut self, now: Time, watched_len: usize) -> Release {
        let Some(head) = self.queue.front() else {
            return Release::Empty;
        };
        if let (Some(p), Some(ack)) = (self.config.pacing, pure_ack(head)) {
            // While the forward queue is above the threshold, wait one forward packet time
            // (1000 bytes) and look again.
            if watched_len >= p.threshold_packets {
                self.stats.held += 1;
                return Release::At(now + tx_ns(1000, p.rate_bps));
            }
            if now < self.next_release {
                return Release::At(self.next_release);
            }
            let k = key(head);
            let advance = match self.released_ack.get(&k) {
                Some(&prev) => ack.saturating_sub(prev),
                None => 0,
            };
            let prev = self.released_ack.entry(k).or_insert(ack);
            *prev = (*prev).max(ack);
            self.next_release = now + tx_ns(advance, p.rate_bps);
        }
        match self.queue.pop_front() {
            Some(pkt) => {
                self.bytes -= u64::from(pkt.size);
                Release::Now(pkt)
            }
            None => Release::Empty,
        }
    }
}

/// Nanoseconds to send `bytes` at `rate_bps`.
fn tx_ns(bytes: u64, rate_bps: u64) -> Time {
    (u128::from(bytes) * 8 * 1_000_000_000)
        .div_ceil(u128::from(rate_bps.max(1)))
        .try_into()
        .unwrap_or(Time::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Direction, NodeId};
    use crate::tcp::TcpSegment;

    fn addr(n: u32, port: u16) -> Addr {
        Addr {
            node: NodeId(n),
            port,
        }
    }

    fn ack(id: u64, flow: u32, port: u16, ack: u64) -> Packet {
        Packet {
            id,
            src: addr(1, port),
            dst: addr(0, port + 1),
            flow: FlowId(flow),
            direction: Direction::Reverse,
            size: 40,
            payload: Payload::Tcp(TcpSegment {
                ack,
                ack_flag: true,
                window: 1 << 20,
                ..Default::default()
            }),
            retransmission: false,
        }
    }

    fn data(id: u64, flow: u32) -> Packet {
        Packet {
            payload: Payload::Tcp(TcpSegment {
                seq: 1,
                len: 960,
                ack: 1,
                ack_flag: true,
                ..Default::default()
            }),
            size: 1000,
            direction: Direction::Forward,
            ..ack(id, flow, 7, 1)
        }
    }

    fn acks_of(q: &ManagedQueue) -> Vec<(u32, u64)> {
        q.iter()
            .filter_map(|p| pure_ack(p).map(|a| (p.flow.0, a)))
            .collect()
    }

    fn filtering(capacity: usize) -> ManagedQueue {
        ManagedQueue::new(AckQueueConfig {
            capacity_packets: capacity,
            filter: true,
            ..Default::default()
        })
    }

    #[test]
    fn filtering_keeps_only_the_newest_ack_of_each_connection() {
        let mut q = filtering(100);
        q.push(ack(1, 1, 10, 1000)).unwrap();
        q.push(ack(2, 2, 20, 500)).unwrap();
        q.push(ack(3, 1, 10, 2000)).unwrap();
        q.push(ack(4, 1, 10, 3000)).unwrap();
        q.push(ack(5, 2, 20, 900)).unwrap();
        assert_eq!(acks_of(&q), vec![(1, 3000), (2, 900)]);
        assert_eq!(q.stats.filtered, 3);
    }

    #[test]
    fn filtering_never_drops_the_newest_ack_of_a_flow_nor_duplicates_nor_data() {
        // Pseudo-random arrivals of ACKs (some duplicates, some older than queued ones) and
        // data segments of three flows; after every push, the newest ACK of each flow is queued
        // every data segment pushed is still there, and so is every duplicate of the highest ACK.
        let mut q = filtering(10_000);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut newest: HashMap<u32, u64> = HashMap::new();
        let mut must_stay = Vec::new();
        let mut highest: HashMap<u32, u64> = HashMap::new();
        let mut dups = Vec::new();
        for id in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let flow = (x % 3) as u32;
            if x.is_multiple_of(11) {
                q.push(data(id, flow)).unwrap();
                must_stay.push(id);
                continue;
            }
            let h = highest.entry(flow).or_insert(0);
            let a = match x % 5 {
                0 => *h,                         // duplicate
                1 => h.saturating_sub(x % 3000), // reordered, older
                _ => *h + 1 + x % 2000,          // advancing
            };
            let dup = a == *h && *h > 0;
            *h = (*h).max(a);
            q.push(ack(id, flow, 10 + flow as u16 * 10, a)).unwrap();
            newest.insert(flow, id);
            if dup {
                dups.push((id, flow, a));
            }
            for (&f, &nid) in &newest {
                assert!(
                    q.iter().any(|p| p.id == nid),
                    "the newest ACK of flow {f} was dropped"
                );
            }
        }
        for id in must_stay {
            assert!(q.iter().any(|p| p.id == id), "packet {id} was removed");
        }
        // A duplicate ACK goes only once a higher ACK of its connection arrived.
        for (id, flow, a) in dups {
            if highest[&flow] == a {
                assert!(q.iter().any(|p| p.id == id), "duplicate ACK {id} removed");
            }
        }
        assert!(q.stats.filtered > 0);
    }

    #[test]
    fn filtering_frees_room_before_the_limit_applies() {
        let mut q = filtering(2);
        q.push(ack(1, 1, 10, 100)).unwrap();
        q.push(ack(2, 1, 10, 200)).unwrap();
        assert_eq!(q.len(), 1);
        q.push(ack(3, 2, 20, 100)).unwrap();
        assert!(q.push(ack(4, 3, 30, 100)).is_err(), "full: drop-tail");
        assert_eq!(q.stats.dropped, 1);
        let mut plain = ManagedQueue::new(AckQueueConfig {
            capacity_packets: 2,
            ..Default::default()
        });
        plain.push(ack(1, 1, 10, 100)).unwrap();
        plain.push(ack(2, 1, 10, 200)).unwrap();
        assert!(
            plain.push(ack(3, 1, 10, 300)).is_err(),
            "no filtering: full"
        );
    }

    #[test]
    fn window_overwriting_caps_advertised_windows() {
        let mut q = ManagedQueue::new(AckQueueConfig {
            capacity_packets: 10,
            window_cap: Some(65_535),
            ..Default::default()
        });
        q.push(ack(1, 1, 10, 100)).unwrap();
        let mut small = ack(2, 1, 10, 200);
        if let Payload::Tcp(s) = &mut small.payload {
            s.window = 8000;
        }
        q.push(small).unwrap();
        let w: Vec<u64> = q
            .iter()
            .map(|p| match &p.payload {
                Payload::Tcp(s) => s.window,
                Payload::Stp(_) => 0,
            })
            .collect();
        assert_eq!(w, vec![65_535, 8000]);
        assert_eq!(q.stats.windows_overwritten, 1);
    }

    #[test]
    fn drop_from_front_pushes_out_the_oldest_ack_for_a_newer_one() {
        let mut q = ManagedQueue::new(AckQueueConfig {
            capacity_packets: 3,
            drop_front: true,
            ..Default::default()
        });
        q.push(data(1, 1)).unwrap();
        q.push(ack(2, 1, 10, 1000)).unwrap();
        q.push(ack(3, 1, 10, 2000)).unwrap();
        // Full: the newest ACK goes in, the oldest ACK (not the data ahead of it) comes out.
        let out = q.push(ack(4, 1, 10, 3000)).unwrap_err();
        assert_eq!(out.id, 2);
        assert_eq!(acks_of(&q), vec![(1, 2000), (1, 3000)]);
        assert_eq!(q.len(), 3);
        // Data finding the queue full is dropped itself.
        assert_eq!(q.push(data(5, 1)).unwrap_err().id, 5);
        assert_eq!((q.stats.pushed_out, q.stats.dropped), (1, 2));
        // Without the option the arrival is the one dropped.
        let mut tail = ManagedQueue::new(AckQueueConfig {
            capacity_packets: 1,
            ..Default::default()
        });
        tail.push(ack(1, 1, 10, 1000)).unwrap();
        assert_eq!(tail.push(ack(2, 1, 10, 2000)).unwrap_err().id, 2);
    }

    fn pacing(threshold: usize) -> ManagedQueue {
        ManagedQueue::new(AckQueueConfig {
            capacity_packets: 1000,
            pacing: Some(AckPacing {
                watch: LinkId(0),
                rate_bps: 8_000_000,
                threshold_packets: threshold,
            }),
            ..Default::default()
        })
    }

    /// Drains `q` as a link would (one packet at a time, waiting as told) with the watched queue
    /// at `watched(t)`; returns (time, id) of each release.
    fn drain(q: &mut ManagedQueue, watched: impl Fn(Time) -> usize) -> Vec<(Time, u64)> {
        let mut t = 0;
        let mut out = Vec::new();
        for _ in 0..100_000 {
            match q.release(t, watched(t)) {
                Release::Now(p) => out.push((t, p.id)),
                Release::At(at) => {
                    assert!(at > t, "pacing must move time forward");
                    t = at;
                }
                Release::Empty => break,
            }
        }
        out
    }

    #[test]
    fn pacing_preserves_order_and_spaces_acks_by_the_data_they_acknowledge() {
        let mut q = pacing(10);
        // Two connections, ACKs each acknowledging 1000 bytes, a data packet in between.
        let mut id = 0;
        for i in 1..=5u64 {
            for (flow, port) in [(1, 10), (2, 20)] {
                id += 1;
                q.push(ack(id, flow, port, i * 1000)).unwrap();
            }
            if i == 3 {
                id += 1;
                q.push(data(id, 3)).unwrap();
            }
        }
        let out = drain(&mut q, |_| 0);
        let ids: Vec<u64> = out.iter().map(|&(_, i)| i).collect();
        assert_eq!(ids, (1..=id).collect::<Vec<_>>(), "order preserved");
        // At 8 Mb/s, 1000 acknowledged bytes take 1 ms: after the first ACK of each connection
        // (no advance known), consecutive ACKs leave at least 1 ms apart.
        let acks: Vec<Time> = out
            .iter()
            .filter(|&&(_, i)| i != 7)
            .map(|&(t, _)| t)
            .collect();
        for w in acks[2..].windows(2) {
            assert!(w[1] - w[0] >= 1_000_000, "{acks:?}");
        }
    }

    #[test]
    fn pacing_holds_acks_while_the_forward_queue_is_above_threshold() {
        let mut q = pacing(5);
        q.push(ack(1, 1, 10, 1000)).unwrap();
        q.push(ack(2, 1, 10, 2000)).unwrap();
        // The forward queue holds 8 packets until t = 20 ms, then 2.
        let out = drain(&mut q, |t| if t < 20_000_000 { 8 } else { 2 });
        assert_eq!(out.len(), 2);
        assert!(out[0].0 >= 20_000_000, "{out:?}");
        assert!(q.stats.held > 0);
    }
}
