//! Behaviour tests of the TCP models: two connections over a deterministic in-test delay line
//! (rate, one-way delay, unbounded queue, scripted drops), hand-fed segments for exact receiver
//! and sender checks, and agents on the simulator.

use super::*;
use crate::packet::{Addr, Direction, FlowId, NodeId};
use crate::sim::{Sim, Time, MS, SEC};
use linkmodel::LinkConfig;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

/// One direction of the delay line: a serializer at `rate_bps` then a fixed delay.
struct Line {
    rate_bps: u64,
    delay: Time,
    free_at: Time,
}

impl Line {
    fn arrival(&mut self, now: Time, size: u32) -> Time {
        let start = now.max(self.free_at);
        let tx = (u128::from(size) * 8 * u128::from(SEC)).div_ceil(u128::from(self.rate_bps));
        self.free_at = start + tx as Time;
        self.free_at + self.delay
    }
}

/// Decides whether a segment is lost: (direction, segment, time sent, how many times A already
/// sent a segment starting at this sequence number).
type DropRule = Box<dyn FnMut(Dir, &TcpSegment, Time, u32) -> bool>;

/// The sender's state after every event.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: Time,
    acked: u64,
    recovery: RecoveryState,
    timeouts: u64,
    cwnd: u64,
}

/// Connection A (active) and B (passive) over a delay line.
struct Pair {
    now: Time,
    a: TcpConnection,
    b: TcpConnection,
    ab: Line,
    ba: Line,
    queue: BTreeMap<(Time, u64), (Dir, TcpSegment)>,
    next_id: u64,
    drop: DropRule,
    /// Times A sent a segment starting at each sequence number.
    sends_at_seq: BTreeMap<u64, u32>,
    /// What A sent: (time, segment, dropped).
    sent_a: Vec<(Time, TcpSegment, bool)>,
    sent_b: Vec<(Time, TcpSegment, bool)>,
    /// B's application reads everything as it arrives.
    read_b: bool,
    /// B closes once A finished.
    close_b: bool,
    delivered_b: u64,
    /// When B had read everything and the FIN.
    b_finished_at: Option<Time>,
    samples: Vec<Sample>,
}

impl Pair {
    fn new(a: TcpConfig, b: TcpConfig, rate_bps: u64, one_way: Time) -> Pair {
        assert_eq!(a.validate(), Ok(()));
        assert_eq!(b.validate(), Ok(()));
        Pair {
            now: 0,
            a: TcpConnection::new_active(0, a),
            b: TcpConnection::new_passive(0, b),
            ab: Line {
                rate_bps,
                delay: one_way,
                free_at: 0,
            },
            ba: Line {
                rate_bps,
                delay: one_way,
                free_at: 0,
            },
            queue: BTreeMap::new(),
            next_id: 0,
            drop: Box::new(|_, _, _, _| false),
            sends_at_seq: BTreeMap::new(),
            sent_a: Vec::new(),
            sent_b: Vec::new(),
            read_b: true,
            close_b: true,
            delivered_b: 0,
            b_finished_at: None,
            samples: Vec::new(),
        }
    }

    fn flush(&mut self) {
        let now = self.now;
        while let Some(seg) = self.a.poll_segment(now) {
            let n = self.sends_at_seq.entry(seg.seq).or_insert(0);
            let dropped = (self.drop)(Dir::AtoB, &seg, now, *n);
            if seg.len > 0 || seg.syn || seg.fin {
                *n += 1;
            }
            if !dropped {
                let at = self.ab.arrival(now, seg.wire_size());
                self.queue
                    .insert((at, self.next_id), (Dir::AtoB, seg.clone()));
                self.next_id += 1;
            }
            self.sent_a.push((now, seg, dropped));
        }
        while let Some(seg) = self.b.poll_segment(now) {
            let dropped = (self.drop)(Dir::BtoA, &seg, now, 0);
            if !dropped {
                let at = self.ba.arrival(now, seg.wire_size());
                self.queue
                    .insert((at, self.next_id), (Dir::BtoA, seg.clone()));
                self.next_id += 1;
            }
            self.sent_b.push((now, seg, dropped));
        }
    }

    /// Processes the next instant with events, up to `end`; false when there is none.
    fn step(&mut self, end: Time) -> bool {
        self.flush();
        let arrival = self.queue.keys().next().map(|&(t, _)| t);
        let next = [arrival, self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else { return false };
        let t = t.max(self.now);
        if t > end {
            self.now = end;
            return false;
        }
        self.now = t;
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > t {
                break;
            }
            let (dir, seg) = entry.remove();
            match dir {
                Dir::AtoB => self.b.on_segment(t, &seg),
                Dir::BtoA => self.a.on_segment(t, &seg),
            }
        }
        if self.a.poll_timeout().is_some_and(|d| d <= t) {
            self.a.on_timeout(t);
        }
        if self.b.poll_timeout().is_some_and(|d| d <= t) {
            self.b.on_timeout(t);
        }
        if self.read_b {
            self.delivered_b += self.b.read(u64::MAX);
        }
        if self.b.peer_finished() && self.b_finished_at.is_none() {
            self.b_finished_at = Some(t);
            if self.close_b {
                self.b.close();
            }
        }
        let st = self.a.stats();
        self.samples.push(Sample {
            t,
            acked: self.a.data_acked(),
            recovery: self.a.recovery(),
            timeouts: st.timeouts,
            cwnd: self.a.cwnd(),
        });
        true
    }

    fn run_until(&mut self, end: Time) {
        let mut guard = 0u64;
        while self.step(end) {
            guard += 1;
            assert!(guard < 50_000_000, "runaway simulation");
        }
        self.flush();
    }

    /// Runs until `cond` holds (or `end`); returns whether it held.
    fn run_until_cond(&mut self, end: Time, cond: impl Fn(&Pair) -> bool) -> bool {
        while !cond(self) {
            if !self.step(end) {
                return cond(self);
            }
        }
        true
    }

    /// Data segments A sent (time, segment, dropped).
    fn a_data(&self) -> impl Iterator<Item = &(Time, TcpSegment, bool)> {
        self.sent_a.iter().filter(|(_, s, _)| s.len > 0)
    }
}

fn cfg(variant: Variant) -> TcpConfig {
    TcpConfig {
        mss_bytes: 1000,
        ..TcpConfig::with_variant(variant)
    }
}

// ----- hand-driven helpers -----

/// A passive connection that completed its handshake at time 0; returns it and the sequence
/// number of its peer's first data byte (1).
fn accepted(config: TcpConfig) -> TcpConnection {
    let mut b = TcpConnection::new_passive(0, config);
    b.on_segment(
        0,
        &TcpSegment {
            seq: 0,
            syn: true,
            window: 65_535,
            sack_permitted: true,
            window_scaling: true,
            ..Default::default()
        },
    );
    let synack = b.poll_segment(0).expect("SYN-ACK");
    assert!(synack.syn && synack.ack_flag && synack.ack == 1);
    assert_eq!(b.poll_segment(0), None);
    b.on_segment(
        0,
        &TcpSegment {
            seq: 1,
            ack: 1,
            ack_flag: true,
            window: 1 << 20,
            ..Default::default()
        },
    );
    assert!(b.is_established());
    b
}

fn data(seq: u64, len: u32) -> TcpSegment {
    TcpSegment {
        seq,
        len,
        ack: 1,
        ack_flag: true,
        window: 1 << 20,
        ..Default::default()
    }
}

/// An active connection established at `t` (SYN at 0, SYN-ACK at `t`), with `bytes` written.
fn established(config: TcpConfig, t: Time, bytes: u64) -> TcpConnection {
    let mut a = TcpConnection::new_active(0, config);
    a.write(bytes);
    let syn = a.poll_segment(0).expect("SYN");
    assert!(syn.syn && !syn.ack_flag);
    a.on_segment(
        t,
        &TcpSegment {
            seq: 0,
            ack: 1,
            ack_flag: true,
            syn: true,
            window: 1 << 30,
            sack_permitted: true,
            window_scaling: true,
            ..Default::default()
        },
    );
    assert!(a.is_established());
    a
}

fn ack_of(ack: u64, sack: Vec<(u64, u64)>) -> TcpSegment {
    TcpSegment {
        seq: 1,
        ack,
        ack_flag: true,
        window: 1 << 30,
        sack,
        ..Default::default()
    }
}

fn drain(c: &mut TcpConnection, now: Time) -> Vec<TcpSegment> {
    std::iter::from_fn(|| c.poll_segment(now)).collect()
}

// ----- handshake, FIN, T/TCP -----

#[test]
fn handshake_transfer_and_fin() {
    let mut p = Pair::new(
        cfg(Variant::SackNewReno),
        cfg(Variant::SackNewReno),
        10_000_000,
        50 * MS,
    );
    assert_eq!(p.a.write(10_000), 10_000);
    p.a.close();
    p.run_until(10 * SEC);
    let (t0, syn, _) = &p.sent_a[0];
    assert!(*t0 == 0 && syn.syn && !syn.ack_flag && syn.len == 0);
    assert!(syn.sack_permitted && syn.window_scaling);
    assert_eq!(syn.wire_size(), 40);
    let (_, synack, _) = &p.sent_b[0];
    assert!(synack.syn && synack.ack_flag && synack.ack == 1 && synack.sack_permitted);
    // The third segment of the handshake carries the first data and acknowledges the SYN-ACK.
    let (t2, third, _) = &p.sent_a[1];
    assert!(third.ack_flag && third.ack == 1 && !third.syn && third.len == 1000);
    assert!(
        *t2 > 100 * MS && *t2 < 102 * MS,
        "one RTT after the SYN: {t2}"
    );
    assert_eq!(p.delivered_b, 10_000);
    assert!(p.b.peer_finished());
    assert!(p.a.is_send_complete() && p.b.is_send_complete());
    assert!(p.a.peer_finished(), "A got B's FIN too");
    let last_data = p.a_data().last().unwrap();
    assert!(last_data.1.fin, "the FIN rides on the last data segment");
    assert_eq!(p.a.stats().retransmitted_segments, 0);
    assert_eq!(p.b.stats().data_bytes_received, 10_000);
}

#[test]
fn data_on_syn_saves_a_round_trip() {
    let done_at = |data_on_syn: bool| {
        let a = TcpConfig {
            data_on_syn,
            initial_window: InitialWindow::FourKss,
            ..cfg(Variant::SackNewReno)
        };
        let mut p = Pair::new(a, cfg(Variant::SackNewReno), 10_000_000, 50 * MS);
        p.a.write(3000);
        p.a.close();
        p.run_until(10 * SEC);
        assert_eq!(p.delivered_b, 3000);
        (p.b_finished_at.unwrap(), p.sent_a.clone())
    };
    let (with, sent) = done_at(true);
    let (without, _) = done_at(false);
    // The SYN carries the first segment; the rest of the initial window follows before the
    // SYN-ACK, and the FIN rides on the last one.
    assert!(sent[0].1.syn && sent[0].1.len == 1000);
    assert!(sent[1..3]
        .iter()
        .all(|(t, s, _)| *t == 0 && s.len == 1000 && !s.ack_flag));
    assert!(sent[2].1.fin);
    assert!(with < 55 * MS, "one way: {with}");
    assert!(
        without > 150 * MS && without < 155 * MS,
        "1.5 RTT: {without}"
    );
}

#[test]
fn syn_retransmission_backs_off_and_shrinks_the_initial_window() {
    let a = TcpConfig {
        initial_window: InitialWindow::Ten,
        ..cfg(Variant::SackNewReno)
    };
    let mut p = Pair::new(a, cfg(Variant::SackNewReno), 10_000_000, 50 * MS);
    p.drop = Box::new(|dir, seg, _, n| dir == Dir::AtoB && seg.syn && n < 2);
    p.a.write(100_000);
    p.run_until_cond(10 * SEC, |p| p.a.is_established());
    let syns: Vec<Time> = p
        .sent_a
        .iter()
        .filter(|(_, s, _)| s.syn)
        .map(|(t, _, _)| *t)
        .collect();
    // Initial RTO 1 s, then 2 s.
    assert_eq!(syns, vec![0, SEC, 3 * SEC]);
    let st = p.a.stats();
    assert_eq!(st.syn_retransmissions, 2);
    assert_eq!(st.retransmitted_segments, 2);
    assert_eq!(st.timeouts, 0, "SYN losses are not data timeouts");
    assert_eq!(p.a.cwnd(), 1000, "one segment after a lost SYN (RFC 3390)");
    p.step(10 * SEC);
    p.flush();
    assert_eq!(p.a_data().count(), 1);
}

#[test]
fn lost_syn_ack_is_retransmitted_by_the_passive_side() {
    let mut p = Pair::new(
        cfg(Variant::SackNewReno),
        cfg(Variant::SackNewReno),
        10_000_000,
        50 * MS,
    );
    p.drop = Box::new(|dir, seg, t, _| dir == Dir::BtoA && seg.syn && t < 500 * MS);
    p.a.write(5000);
    p.a.close();
    p.run_until(20 * SEC);
    assert_eq!(p.delivered_b, 5000);
    assert!(p.b.stats().syn_retransmissions >= 1);
}

#[test]
fn handshake_gives_up_after_max_syn_retries() {
    let a = TcpConfig {
        max_syn_retries: 2,
        ..cfg(Variant::Reno)
    };
    let mut p = Pair::new(a, cfg(Variant::Reno), 10_000_000, 50 * MS);
    p.drop = Box::new(|dir, _, _, _| dir == Dir::AtoB);
    p.run_until(100 * SEC);
    assert_eq!(p.a.state(), TcpState::Closed);
    assert_eq!(p.sent_a.len(), 3);
    assert_eq!(p.a.poll_timeout(), None);
}

// ----- initial window -----

#[test]
fn initial_window_sizes() {
    for (iw, mss, segments) in [
        (InitialWindow::One, 1000, 1),
        (InitialWindow::Two, 1000, 2),
        (InitialWindow::FourKss, 1000, 4),
        (InitialWindow::FourKss, 1460, 3),
        (InitialWindow::Ten, 1000, 10),
    ] {
        let c = TcpConfig {
            initial_window: iw,
            mss_bytes: mss,
            ..TcpConfig::default()
        };
        let mut a = established(c, 100 * MS, 1_000_000);
        let sent = drain(&mut a, 100 * MS);
        assert_eq!(
            sent.iter().filter(|s| s.len > 0).count(),
            segments,
            "{iw:?} with MSS {mss}"
        );
        assert!(sent.iter().all(|s| s.len == mss));
    }
}

// ----- receiver: delayed ACKs and SACK -----

#[test]
fn delayed_ack_every_second_segment_or_after_200_ms() {
    let mut b = accepted(cfg(Variant::Reno));
    let t = SEC;
    b.on_segment(t, &data(1, 1000));
    assert_eq!(b.poll_segment(t), None, "first segment: ACK delayed");
    assert_eq!(b.poll_timeout(), Some(t + 200 * MS));
    b.on_segment(t, &data(1001, 1000));
    let ack = b.poll_segment(t).expect("second segment: ACK");
    assert_eq!((ack.ack, ack.len), (2001, 0));
    assert_eq!(b.poll_timeout(), None);
    // A lone segment is acknowledged by the timer.
    b.on_segment(2 * t, &data(2001, 1000));
    assert_eq!(b.poll_segment(2 * t), None);
    b.on_timeout(2 * t + 200 * MS);
    assert_eq!(b.poll_segment(2 * t + 200 * MS).unwrap().ack, 3001);
    // Out of order: at once, with a SACK block.
    b.on_segment(3 * t, &data(4001, 1000));
    let ack = b.poll_segment(3 * t).expect("immediate ACK");
    assert_eq!(ack.ack, 3001);
    assert_eq!(ack.sack, vec![(4001, 5001)]);
    // The hole filled: at once.
    b.on_segment(3 * t, &data(3001, 1000));
    let ack = b.poll_segment(3 * t).expect("immediate ACK");
    assert_eq!(ack.ack, 5001);
    assert!(ack.sack.is_empty());
    // A duplicate: at once.
    b.on_segment(3 * t, &data(1, 1000));
    assert_eq!(b.poll_segment(3 * t).unwrap().ack, 5001);
}

#[test]
fn ack_every_k_and_no_delay() {
    let mut b = accepted(TcpConfig {
        ack_every_segments: 4,
        ..cfg(Variant::Reno)
    });
    let acks: Vec<bool> = (0..8)
        .map(|i| {
            b.on_segment(SEC, &data(1 + i * 1000, 1000));
            b.poll_segment(SEC).is_some()
        })
        .collect();
    assert_eq!(
        acks,
        vec![false, false, false, true, false, false, false, true]
    );
    let mut b = accepted(TcpConfig {
        delayed_ack: false,
        ..cfg(Variant::Reno)
    });
    for i in 0..3 {
        b.on_segment(SEC, &data(1 + i * 1000, 1000));
        assert!(b.poll_segment(SEC).is_some());
    }
}

#[test]
fn delayed_ack_on_ticks_waits_for_the_next_tick() {
    let mut b = accepted(TcpConfig {
        delayed_ack_on_ticks: true,
        ..cfg(Variant::Reno)
    });
    b.on_segment(1_050 * MS, &data(1, 1000));
    assert_eq!(b.poll_timeout(), Some(1_200 * MS));
}

#[test]
fn sack_blocks_report_the_most_recent_first() {
    let mut b = accepted(cfg(Variant::SackNewReno));
    let t = SEC;
    b.on_segment(t, &data(1, 1000));
    // Segments 2, 4, 6 lost; 3, 5, 7, 8 arrive.
    let mut last = None;
    for i in [2u64, 4, 6, 7] {
        b.on_segment(t, &data(1 + i * 1000, 1000));
        last = b.poll_segment(t);
    }
    let ack = last.unwrap();
    assert_eq!(ack.ack, 1001);
    assert_eq!(
        ack.sack,
        vec![(6001, 8001), (4001, 5001), (2001, 3001)],
        "block of the latest arrival first"
    );
    assert_eq!(ack.option_bytes(), 28);
    assert_eq!(ack.wire_size(), 68);
    // The retransmission of 4 merges two blocks and leads.
    b.on_segment(t, &data(3001, 1000));
    assert_eq!(
        b.poll_segment(t).unwrap().sack,
        vec![(2001, 5001), (6001, 8001)]
    );
    // Limited to two blocks.
    let mut b = accepted(TcpConfig {
        max_sack_blocks: 2,
        ..cfg(Variant::SackNewReno)
    });
    for i in [1u64, 3, 5] {
        b.on_segment(t, &data(1 + i * 1000, 1000));
    }
    let ack = drain(&mut b, t).pop().unwrap();
    assert_eq!(ack.sack, vec![(5001, 6001), (3001, 4001)]);
    // Without SACK-permitted on the SYN, no blocks.
    let mut b = TcpConnection::new_passive(0, cfg(Variant::Reno));
    b.on_segment(
        0,
        &TcpSegment {
            syn: true,
            window: 65_535,
            ..Default::default()
        },
    );
    let synack = b.poll_segment(0).unwrap();
    assert!(!synack.sack_permitted);
    b.on_segment(0, &data(2001, 1000));
    assert!(b.poll_segment(0).unwrap().sack.is_empty());
}

#[test]
fn offered_window_is_the_free_buffer() {
    let mut b = accepted(TcpConfig {
        recv_buffer_bytes: 10_000,
        delayed_ack: false,
        ..cfg(Variant::Reno)
    });
    b.on_segment(SEC, &data(1, 1000));
    assert_eq!(b.poll_segment(SEC).unwrap().window, 9000);
    b.on_segment(SEC, &data(1001, 1000));
    assert_eq!(b.poll_segment(SEC).unwrap().window, 8000);
    assert_eq!(b.read(500), 500);
    assert_eq!(b.offered_window(), 8500);
    assert_eq!(b.poll_segment(SEC), None, "a small opening sends no update");
    assert_eq!(b.read(u64::MAX), 1500);
    let upd = b.poll_segment(SEC).expect("window update");
    assert_eq!(upd.window, 10_000);
    // Without window scaling the window stops at 65535.
    let b = accepted(TcpConfig {
        recv_buffer_bytes: 1 << 20,
        window_scaling: false,
        ..cfg(Variant::Reno)
    });
    assert_eq!(b.offered_window(), 65_535);
    let b = accepted(TcpConfig {
        recv_buffer_bytes: 1 << 20,
        ..cfg(Variant::Reno)
    });
    assert_eq!(b.offered_window(), 1 << 20);
}

// ----- sender: window growth -----

/// Sends one window from `a` at `t`, then acknowledges it segment by segment (`per_ack`
/// segments per ACK) at `t + rtt`; returns the segments sent.
fn ack_window(a: &mut TcpConnection, t: Time, rtt: Time, per_ack: u64) -> u64 {
    let sent = drain(a, t);
    let n = sent.iter().filter(|s| s.len > 0).count() as u64;
    let first = sent.iter().find(|s| s.len > 0).map_or(1, |s| s.seq);
    let mss = u64::from(a.config().mss_bytes);
    let mut acked = 0;
    while acked < n {
        acked = (acked + per_ack).min(n);
        a.on_segment(t + rtt, &ack_of(first + acked * mss, vec![]));
    }
    n
}

#[test]
fn slow_start_ack_counting_and_byte_counting() {
    let cases = [(false, 2, 3000), (true, 2, 4000), (false, 1, 4000)];
    for (byte_counting, per_ack, expect) in cases {
        let c = TcpConfig {
            initial_window: InitialWindow::Two,
            byte_counting,
            ..cfg(Variant::Reno)
        };
        let mut a = established(c, 100 * MS, 1_000_000);
        ack_window(&mut a, 100 * MS, 100 * MS, per_ack);
        assert_eq!(
            a.cwnd(),
            expect,
            "byte counting {byte_counting}, {per_ack} segments per ACK"
        );
    }
    // L limits growth per ACK: one ACK for 4 segments adds 2 segments with L = 2, 3 with L = 3.
    for (l, expect) in [(2, 6000), (3, 7000)] {
        let c = TcpConfig {
            initial_window: InitialWindow::FourKss,
            byte_counting: true,
            byte_counting_limit_segments: l,
            ..cfg(Variant::Reno)
        };
        let mut a = established(c, 100 * MS, 1_000_000);
        ack_window(&mut a, 100 * MS, 100 * MS, 4);
        assert_eq!(a.cwnd(), expect, "L = {l}");
    }
}

#[test]
fn byte_counting_speeds_up_slow_start_under_delayed_acks() {
    let cwnd_after = |byte_counting: bool| {
        let a = TcpConfig {
            byte_counting,
            ..cfg(Variant::SackNewReno)
        };
        let mut p = Pair::new(a, cfg(Variant::SackNewReno), 100_000_000, 50 * MS);
        p.a.write(u64::MAX);
        p.run_until(800 * MS);
        p.a.cwnd()
    };
    let (ac, bc) = (cwnd_after(false), cwnd_after(true));
    assert!(bc > 2 * ac, "byte counting {bc} vs ACK counting {ac}");
}

/// cwnd growth over `rounds` round trips of congestion avoidance, in segments, with an RTT of
/// `rtt` and one ACK per segment.
fn ca_growth(increase: IncreasePolicy, rtt: Time, rounds: u32) -> f64 {
    let c = TcpConfig {
        increase,
        clock_granularity_ns: 0,
        ..cfg(Variant::Reno)
    };
    ca_growth_with(c, rtt, rounds)
}

/// As [`ca_growth`], for the timer and policy of `c` (from an initial window of 10 segments in
/// congestion avoidance).
fn ca_growth_with(c: TcpConfig, rtt: Time, rounds: u32) -> f64 {
    let c = TcpConfig {
        initial_window: InitialWindow::Ten,
        initial_ssthresh_bytes: 2000,
        ..c
    };
    let mut a = established(c, rtt, u64::MAX / 8);
    let start = a.cwnd();
    let mut t = rtt;
    for _ in 0..rounds {
        ack_window(&mut a, t, rtt, 1);
        t += rtt;
    }
    (a.cwnd() - start) as f64 / 1000.0
}

#[test]
fn congestion_avoidance_policies() {
    // Standard: about one segment per RTT, whatever the RTT.
    let std = ca_growth(IncreasePolicy::Standard, 100 * MS, 10);
    assert!((9.0..=10.5).contains(&std), "standard {std}");
    // Increase-by-K: about K segments per RTT.
    let ibk = ca_growth(IncreasePolicy::IncreaseByK { k: 4.0 }, 100 * MS, 10);
    assert!((36.0..=41.0).contains(&ibk), "IBK 4: {ibk}");
    // Constant-Rate: c·rtt² segments per RTT, so c = 100 at 100 ms is standard and at 200 ms
    // is four times faster per RTT.
    let cr100 = ca_growth(IncreasePolicy::ConstantRate { c: 100.0 }, 100 * MS, 10);
    assert!((9.0..=10.5).contains(&cr100), "CR at 100 ms: {cr100}");
    let cr200 = ca_growth(IncreasePolicy::ConstantRate { c: 100.0 }, 200 * MS, 10);
    assert!((36.0..=41.0).contains(&cr200), "CR at 200 ms: {cr200}");
    // ... bounded by one segment per ACK: slow-start-like at most.
    let capped = ca_growth(IncreasePolicy::IncreaseByK { k: 1000.0 }, 100 * MS, 3);
    let ss = 10.0 * 2f64.powi(3) - 10.0;
    assert!(
        capped <= ss + 0.01,
        "IBK 1000 grew {capped} > slow start {ss}"
    );
}

/// The seeds' coarse timer (thesis §4.1.4, §4.1.6): on 500 ms ticks every RTT under 500 ms
/// reads one tick, so Constant-Rate grows a 100 ms and a 200 ms connection alike (c·0.5² = 4
/// segments per RTT at c = 16) and its RTT compensation is gone; on an exact RTT it grows them
/// by c·rtt² = 0.16 and 0.64 segments per RTT.
#[test]
fn coarse_timer_hides_the_rtt_from_constant_rate() {
    let grow = |rtt: Time, coarse_timer: bool| {
        let c = TcpConfig {
            increase: IncreasePolicy::ConstantRate { c: 16.0 },
            clock_granularity_ns: 500 * MS,
            coarse_timer,
            ..cfg(Variant::Reno)
        };
        ca_growth_with(c, rtt, 10)
    };
    let (c100, c200) = (grow(100 * MS, true), grow(200 * MS, true));
    assert!((36.0..=41.0).contains(&c100), "coarse, 100 ms: {c100}");
    assert!((c100 - c200).abs() <= 1.0, "coarse: {c100} vs {c200}");
    let (e100, e200) = (grow(100 * MS, false), grow(200 * MS, false));
    assert!(e100 < 2.5, "exact, 100 ms: {e100}");
    assert!((5.0..=8.0).contains(&e200), "exact, 200 ms: {e200}");
}

// ----- retransmission timer -----

#[test]
fn rto_backs_off_and_karn_ignores_retransmitted_segments() {
    // A 50 KB window keeps the 125 KB path free of queueing, so the RTT stays at 100 ms.
    let a = TcpConfig {
        clock_granularity_ns: 0,
        recv_buffer_bytes: 50_000,
        ..cfg(Variant::NewReno)
    };
    let mut p = Pair::new(a.clone(), a, 10_000_000, 50 * MS);
    // Blackhole A→B from 2 s to 20 s.
    p.drop = Box::new(|dir, _, t, _| dir == Dir::AtoB && (2 * SEC..20 * SEC).contains(&t));
    p.a.write(u64::MAX);
    p.run_until(2 * SEC);
    let before = p.a.stats();
    let srtt = before.srtt_ns.unwrap();
    assert!(srtt > 100 * MS && srtt < 110 * MS, "srtt {srtt}");
    assert_eq!(before.rto_ns, SEC, "RTO at its 1 s minimum");
    p.run_until(20 * SEC);
    let srtt = p.a.stats().srtt_ns.unwrap();
    p.run_until_cond(40 * SEC, |p| p.a.stats().timeouts >= 5);
    // The same segment is retransmitted after 1, 2, 4, 8 s.
    let una = p.a.data_acked() + 1;
    let times: Vec<Time> = p
        .sent_a
        .iter()
        .filter(|(t, s, _)| s.seq == una && *t >= 2 * SEC)
        .map(|(t, _, _)| *t)
        .collect();
    let gaps: Vec<Time> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // First transmission, then the 1 s RTO (restarted by the last ACK before the blackhole).
    assert!(gaps[0] > SEC && gaps[0] < 1100 * MS, "times {times:?}");
    assert_eq!(gaps[1..4], [2 * SEC, 4 * SEC, 8 * SEC], "times {times:?}");
    // After the blackhole the retransmission is acknowledged: no RTT sample from it (Karn), so
    // srtt is unchanged and the backed-off RTO stays until a new segment is timed.
    let backed_off = p.a.stats().rto_ns;
    assert!(backed_off >= 16 * SEC);
    let una_before = p.a.data_acked();
    p.run_until_cond(40 * SEC, |p| p.a.data_acked() > una_before);
    let st = p.a.stats();
    assert_eq!(
        st.srtt_ns,
        Some(srtt),
        "no sample from a retransmitted segment"
    );
    assert_eq!(st.rto_ns, backed_off);
    p.run_until(p.now + 2 * SEC);
    let st = p.a.stats();
    assert_eq!(st.rto_ns, SEC, "a fresh sample ends the backoff");
}

#[test]
fn coarse_clock_times_out_on_ticks() {
    let mut p = Pair::new(cfg(Variant::Reno), cfg(Variant::Reno), 10_000_000, 50 * MS);
    p.drop = Box::new(|dir, _, t, _| dir == Dir::AtoB && (1_234 * MS..9 * SEC).contains(&t));
    p.a.write(u64::MAX);
    p.run_until(20 * SEC);
    let st = p.a.stats();
    assert!(st.timeouts >= 3);
    let srtt = st.srtt_ns.unwrap();
    assert!(srtt <= 500 * MS, "coarse srtt {srtt}");
    // Every timeout fires on a 500 ms tick.
    let mut prev = 0;
    for s in &p.samples {
        if s.timeouts > prev {
            assert_eq!(s.t % (500 * MS), 0, "timeout at {}", s.t);
            prev = s.timeouts;
        }
    }
}

#[test]
fn ns2_timer_fires_exactly_and_doubles() {
    let ns2 = || TcpConfig {
        ns2_timer: true,
        ..cfg(Variant::Reno)
    };
    let mut p = Pair::new(ns2(), ns2(), 10_000_000, 50 * MS);
    p.drop = Box::new(|dir, _, t, _| dir == Dir::AtoB && (1_234 * MS..20 * SEC).contains(&t));
    p.a.write(u64::MAX);
    p.run_until(30 * SEC);
    let mut at = Vec::new();
    let mut prev = 0;
    for s in &p.samples {
        if s.timeouts > prev {
            at.push(s.t);
            prev = s.timeouts;
        }
    }
    assert!(at.len() >= 3, "timeouts at {at:?}");
    // ns-2 fires one RTO after the timer is set, not on a 500 ms tick, and each backoff
    // doubles the wait exactly.
    assert!(at.iter().any(|t| t % (500 * MS) != 0), "timeouts at {at:?}");
    assert_eq!(at[2] - at[1], 2 * (at[1] - at[0]), "timeouts at {at:?}");
}

// ----- loss recovery: the acceptance scenario -----

/// Outcome of three drops in one window.
#[derive(Debug)]
struct Recovery {
    /// First retransmission of the first dropped segment.
    detected: Time,
    /// The ACK that covered all three dropped segments arrived.
    repaired: Time,
    timeouts: u64,
    fast_retransmits: u64,
    retransmitted: u64,
    /// cwnd when recovery ended (first Open sample after `repaired`).
    cwnd_after: u64,
    ssthresh_after: u64,
    rtt: Time,
    completed: bool,
}

const LOSS_MSS: u64 = 1000;
/// Segment indices dropped (first transmission only), all in one 30-segment window.
const LOST: [u64; 3] = [200, 204, 209];

/// 10 Mb/s, 50 ms each way, no queue limit; the receiver offers 30 segments, so the sender is
/// window-limited at 30 segments when segments 200, 204 and 209 are lost.
fn three_losses(variant: Variant, lost: [u64; 3]) -> Recovery {
    let c = TcpConfig {
        recv_buffer_bytes: 30 * LOSS_MSS,
        ..cfg(variant)
    };
    let mut p = Pair::new(c.clone(), c, 10_000_000, 50 * MS);
    let lost_seqs: Vec<u64> = lost.iter().map(|i| 1 + i * LOSS_MSS).collect();
    let drops = lost_seqs.clone();
    p.drop = Box::new(move |dir, seg, _, n| {
        dir == Dir::AtoB && seg.len > 0 && n == 0 && drops.contains(&seg.seq)
    });
    let total = 600 * LOSS_MSS;
    p.a.write(total);
    p.a.close();
    let last_end = lost.iter().max().unwrap() * LOSS_MSS + LOSS_MSS;
    assert!(p.run_until_cond(60 * SEC, |p| p.a.data_acked() >= last_end));
    let repaired = p.now;
    p.run_until(120 * SEC);
    let detected = p
        .sent_a
        .iter()
        .filter(|(_, s, _)| s.seq == lost_seqs[0])
        .map(|(t, _, _)| *t)
        .nth(1)
        .unwrap();
    let st = p.a.stats();
    let end_sample = p
        .samples
        .iter()
        .find(|s| s.t >= repaired && s.recovery == RecoveryState::Open)
        .unwrap();
    let _ = end_sample.acked;
    Recovery {
        detected,
        repaired,
        timeouts: st.timeouts,
        fast_retransmits: st.fast_retransmits,
        retransmitted: st.retransmitted_segments,
        cwnd_after: end_sample.cwnd,
        ssthresh_after: st.ssthresh_bytes,
        rtt: st.exact_srtt_ns.unwrap(),
        completed: p.delivered_b == total && p.b.peer_finished(),
    }
}

#[test]
fn three_losses_in_one_window_separate_the_variants() {
    let sack_newreno = three_losses(Variant::SackNewReno, LOST);
    let newreno = three_losses(Variant::NewReno, LOST);
    let reno = three_losses(Variant::Reno, LOST);
    let sack_reno = three_losses(Variant::SackReno, LOST);
    for (name, r) in [
        ("SACK-NewReno", &sack_newreno),
        ("NewReno", &newreno),
        ("Reno", &reno),
        ("SACK-Reno", &sack_reno),
    ] {
        eprintln!(
            "{name:13} recovery {:7.1} ms = {:.2} RTT (rtt {:.1} ms), timeouts {}, fast retransmits {}, retransmitted {}, cwnd after {} B",
            (r.repaired - r.detected) as f64 / 1e6,
            (r.repaired - r.detected) as f64 / r.rtt as f64,
            r.rtt as f64 / 1e6,
            r.timeouts,
            r.fast_retransmits,
            r.retransmitted,
            r.cwnd_after,
        );
        assert!(r.completed, "{name} completes the transfer");
    }
    let rtts = |r: &Recovery| (r.repaired - r.detected) as f64 / r.rtt as f64;
    // SACK-NewReno: all three repaired in about one RTT, one fast retransmit, no timeout, and
    // exactly the three lost segments sent again.
    assert_eq!(sack_newreno.timeouts, 0);
    assert_eq!(sack_newreno.fast_retransmits, 1);
    assert_eq!(sack_newreno.retransmitted, 3);
    assert!(rtts(&sack_newreno) < 1.3, "{sack_newreno:?}");
    // Rule 3: recovery ends with cwnd = min(ssthresh, flight + 1 segment).
    assert!(sack_newreno.cwnd_after <= sack_newreno.ssthresh_after);
    // NewReno: one RTT per loss, no timeout.
    assert_eq!(newreno.timeouts, 0);
    assert_eq!(newreno.fast_retransmits, 1);
    assert_eq!(newreno.retransmitted, 3);
    let nr = rtts(&newreno);
    assert!((2.8..3.5).contains(&nr), "NewReno took {nr} RTTs");
    // Reno: leaves recovery on the first partial ACK and waits for a timeout.
    assert!(reno.timeouts >= 1, "{reno:?}");
    assert!(reno.repaired - reno.detected >= SEC, "{reno:?}");
    // SACK-Reno with all holes known at once: about one RTT as well.
    assert_eq!(sack_reno.timeouts, 0);
    assert!(rtts(&sack_reno) < 1.3, "{sack_reno:?}");
}

#[test]
fn sack_reno_halves_again_for_a_hole_found_late_sack_newreno_does_not() {
    // The third loss is the window's second-to-last segment: too few segments follow it for
    // SACK to mark it eligible before the first partial ACK.
    let lost = [200, 204, 228];
    let sack_newreno = three_losses(Variant::SackNewReno, lost);
    let sack_reno = three_losses(Variant::SackReno, lost);
    eprintln!("SACK-NewReno {sack_newreno:?}\nSACK-Reno {sack_reno:?}");
    assert!(sack_newreno.completed && sack_reno.completed);
    assert_eq!(sack_newreno.timeouts, 0);
    assert_eq!(sack_newreno.fast_retransmits, 1, "one window reduction");
    assert!(
        sack_reno.fast_retransmits >= 2 || sack_reno.timeouts >= 1,
        "SACK-Reno needs another reduction: {sack_reno:?}"
    );
    assert!(sack_reno.ssthresh_after < sack_newreno.ssthresh_after);
}

#[test]
fn variants_without_peer_sack_fall_back() {
    // A SACK-NewReno sender whose peer refuses SACK behaves like NewReno.
    let a = TcpConfig {
        recv_buffer_bytes: 30 * LOSS_MSS,
        ..cfg(Variant::SackNewReno)
    };
    let b = TcpConfig {
        sack_permitted: false,
        ..a.clone()
    };
    let mut p = Pair::new(a, b, 10_000_000, 50 * MS);
    let drops: Vec<u64> = LOST.iter().map(|i| 1 + i * LOSS_MSS).collect();
    p.drop = Box::new(move |dir, seg, _, n| {
        dir == Dir::AtoB && seg.len > 0 && n == 0 && drops.contains(&seg.seq)
    });
    p.a.write(400 * LOSS_MSS);
    p.a.close();
    p.run_until(60 * SEC);
    assert_eq!(p.delivered_b, 400 * LOSS_MSS);
    assert!(p.sent_b.iter().all(|(_, s, _)| s.sack.is_empty()));
    let st = p.a.stats();
    assert_eq!((st.timeouts, st.fast_retransmits), (0, 1));
}

#[test]
fn after_a_timeout_sack_resends_only_the_holes() {
    // Segments 200, 202 and 204 are lost twice: fast recovery cannot repair them and a timeout
    // follows. Returns the stats and the segments sent more than once that were not holes (data
    // the receiver already held). Three holes, so that three SACK blocks can describe what the
    // receiver holds.
    let holes = [200u64, 202, 204];
    let run = |sack_permitted: bool| {
        let c = TcpConfig {
            recv_buffer_bytes: 30 * LOSS_MSS,
            sack_permitted,
            ..cfg(Variant::SackNewReno)
        };
        let mut p = Pair::new(c.clone(), c, 10_000_000, 50 * MS);
        p.drop = Box::new(move |dir, seg, _, n| {
            let i = seg.seq.saturating_sub(1) / LOSS_MSS;
            dir == Dir::AtoB && seg.len > 0 && n <= 1 && holes.contains(&i)
        });
        p.a.write(400 * LOSS_MSS);
        p.a.close();
        p.run_until(60 * SEC);
        assert_eq!(p.delivered_b, 400 * LOSS_MSS);
        let wasted: Vec<u64> = p
            .sends_at_seq
            .iter()
            .filter(|&(&seq, &n)| n > 1 && seq > 0 && !holes.contains(&((seq - 1) / LOSS_MSS)))
            .map(|(&seq, _)| (seq - 1) / LOSS_MSS)
            .collect();
        (p.a.stats(), wasted)
    };
    let (sack, sack_wasted) = run(true);
    assert_eq!(sack.timeouts, 1, "{sack:?}");
    assert_eq!(sack.retransmitted_segments, 6, "each hole twice: {sack:?}");
    assert!(sack_wasted.is_empty(), "resent held data: {sack_wasted:?}");
    // The same sender without SACK goes back N and resends data the receiver held.
    let (plain, plain_wasted) = run(false);
    assert!(plain.timeouts >= 1);
    assert!(!plain_wasted.is_empty(), "{plain:?}");
}

// ----- zero window -----

#[test]
fn zero_window_probe_and_window_update() {
    let b_cfg = TcpConfig {
        recv_buffer_bytes: 10_000,
        ..cfg(Variant::SackNewReno)
    };
    let mut p = Pair::new(cfg(Variant::SackNewReno), b_cfg, 10_000_000, 50 * MS);
    p.read_b = false;
    p.a.write(50_000);
    p.a.close();
    p.run_until(10 * SEC);
    assert_eq!(p.b.readable(), 10_000, "B's buffer is full");
    assert!(p.a.data_acked() == 10_000);
    let probes = p.a_data().filter(|(_, s, _)| s.len == 1).count();
    assert!(probes >= 2, "zero-window probes: {probes}");
    assert_eq!(p.a.stats().timeouts, 0, "probes are not timeouts");
    p.read_b = true;
    p.run_until(30 * SEC);
    assert_eq!(p.delivered_b, 50_000);
    assert!(p.b.peer_finished());
}

// ----- agents on the simulator -----

fn two_nodes(rate_bps: u64, one_way: Time, forward_queue: u32) -> (Sim, NodeId, NodeId) {
    let mut sim = Sim::new(1);
    let a = sim.add_node("a");
    let b = sim.add_node("b");
    sim.add_link(
        "a->b",
        a,
        b,
        LinkConfig::simple(rate_bps, one_way, forward_queue),
    )
    .unwrap();
    sim.add_link("b->a", b, a, LinkConfig::simple(rate_bps, one_way, 10_000))
        .unwrap();
    sim.compute_routes();
    (sim, a, b)
}

#[test]
fn bulk_transfer_reaches_link_rate_on_a_clean_path() {
    let (mut sim, a, b) = two_nodes(10_000_000, 50 * MS, 10_000);
    let flow = FlowId(7);
    let bytes = 20_000_000;
    sim.metrics.enable_trace(flow);
    let sink = TcpAgent::sink(80, TcpConfig::default()).unwrap();
    let sender = TcpAgent::bulk_sender(
        flow,
        1000,
        Addr { node: b, port: 80 },
        Some(bytes),
        TcpConfig::default(),
    )
    .unwrap();
    sim.add_agent(b, 80, 0, Box::new(sink)).unwrap();
    let s_id = sim.add_agent(a, 1000, 0, Box::new(sender)).unwrap();
    sim.run_until(120 * SEC);
    sim.finish();
    let m = &sim.metrics.flows[&flow];
    assert_eq!(m.delivered_bytes, bytes);
    let (start, end) = (m.started_ns.unwrap(), m.completed_ns.unwrap());
    let goodput = bytes as f64 * 8.0 / ((end - start) as f64 / 1e9);
    let capacity = 10e6 * 1460.0 / 1500.0;
    eprintln!(
        "bulk 20 MB: {:.3} s, goodput {:.3} Mb/s = {:.1}% of payload capacity",
        (end - start) as f64 / 1e9,
        goodput / 1e6,
        100.0 * goodput / capacity
    );
    assert!(goodput > 0.9 * capacity, "goodput {goodput}");
    assert_eq!(m.retransmitted_packets, 0);
    assert_eq!(m.timeouts, 0);
    assert!(!m.cwnd_series.is_empty() && m.cwnd_series.len() == m.seq_series.len());
    assert!(m.seq_series.windows(2).all(|w| w[0].1 <= w[1].1));
    let agent: &TcpAgent = sim.agent_as(s_id).unwrap();
    let conn = agent.connection().unwrap();
    assert!(conn.is_send_complete() && conn.peer_finished());
    // Reverse traffic: about one 40-byte ACK per two data segments.
    let rev = sim.link_by_name("b->a").unwrap();
    let ack_bytes = sim.metrics.links[&rev].flow_bytes(flow, Direction::Reverse);
    let data_segments = bytes / 1460;
    assert!(ack_bytes < data_segments * 25, "{ack_bytes}");
    assert!(ack_bytes > data_segments * 15, "{ack_bytes}");
}

#[test]
fn agents_report_losses_and_persistent_senders_keep_going() {
    let run = |forward_queue: u32| {
        let (mut sim, a, b) = two_nodes(2_000_000, 100 * MS, forward_queue);
        let flow = FlowId(1);
        let sink = TcpAgent::sink(9, TcpConfig::default()).unwrap();
        let peer = Addr { node: b, port: 9 };
        let sender = TcpAgent::bulk_sender(flow, 10, peer, None, TcpConfig::default()).unwrap();
        sim.add_agent(b, 9, 0, Box::new(sink)).unwrap();
        sim.add_agent(a, 10, 0, Box::new(sender)).unwrap();
        sim.run_until(30 * SEC);
        sim.finish();
        sim.metrics.flows[&flow].clone()
    };
    let clean = run(10_000);
    // A 20-packet queue: slow start overflows it.
    let lossy = run(20);
    assert!(clean.completed_ns.is_none() && lossy.completed_ns.is_none());
    // About 2 Mb/s for 30 s, less slow start.
    assert!(
        clean.delivered_bytes > 6_000_000,
        "{}",
        clean.delivered_bytes
    );
    assert_eq!(clean.retransmitted_packets, 0);
    assert!(lossy.retransmitted_packets > 0);
    assert!(
        lossy.delivered_bytes > 5_000_000,
        "{}",
        lossy.delivered_bytes
    );
}

// ----- robustness -----

#[test]
fn odd_segments_never_panic_or_stall() {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let pick = |rng: &mut ChaCha8Rng, near: u64| -> u64 {
        match rng.next_u32() % 6 {
            0 => 0,
            1 => u64::MAX - u64::from(rng.next_u32() % 3),
            2 => rng.next_u64(),
            _ => near
                .wrapping_add(u64::from(rng.next_u32() % 20_000))
                .wrapping_sub(5000),
        }
    };
    for round in 0..200 {
        let variant = [
            Variant::Reno,
            Variant::NewReno,
            Variant::SackReno,
            Variant::SackNewReno,
        ][round % 4];
        let c = TcpConfig {
            data_on_syn: round % 3 == 0,
            recv_buffer_bytes: 4000 + (round as u64 % 5) * 10_000,
            // ns-2's NewReno and Sack1 in every other pair of rounds.
            ns2_recovery: round % 8 >= 4,
            ..cfg(variant)
        };
        let mut conns = [
            TcpConnection::new_passive(0, c.clone()),
            TcpConnection::new_active(0, c.clone()),
            established(c.clone(), 100 * MS, 50_000),
            accepted(c),
        ];
        let mut now = 100 * MS;
        for step in 0..300 {
            now += u64::from(rng.next_u32() % 50) * MS;
            for conn in conns.iter_mut() {
                let near = conn.data_acked() + 1;
                let nsack = (rng.next_u32() % 5) as usize;
                let seg = TcpSegment {
                    seq: pick(&mut rng, near),
                    len: [0, 1, 500, 1000, 70_000][(rng.next_u32() % 5) as usize],
                    ack: pick(&mut rng, near),
                    ack_flag: rng.next_u32() % 4 != 0,
                    syn: rng.next_u32() % 10 == 0,
                    fin: rng.next_u32() % 10 == 0,
                    rst: step == 299 && rng.next_u32() % 2 == 0,
                    window: [0, 1, 65_535, u64::MAX][(rng.next_u32() % 4) as usize],
                    sack: (0..nsack)
                        .map(|_| (pick(&mut rng, near), pick(&mut rng, near)))
                        .collect(),
                    sack_permitted: rng.next_u32() % 2 == 0,
                    window_scaling: rng.next_u32() % 2 == 0,
                    ts_val: u64::from(rng.next_u32() % 3) * now,
                    ts_ecr: u64::from(rng.next_u32() % 3) * now,
                };
                conn.on_segment(now, &seg);
                if step % 7 == 0 {
                    conn.write(u64::from(rng.next_u32() % 10_000));
                    conn.read(u64::from(rng.next_u32() % 10_000));
                }
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.on_timeout(now);
                }
                let n = std::iter::from_fn(|| conn.poll_segment(now))
                    .take(10_000)
                    .count();
                assert!(n < 10_000, "poll_segment does not stop");
            }
        }
    }
}

#[path = "tests_modern.rs"]
mod modern;

#[path = "tests_sack1.rs"]
mod sack1;

#[path = "tests_ns2.rs"]
mod ns2;

/// NewReno, twenty segments in flight, segments 1 and 2 lost: eighteen duplicate ACKs, the
/// partial ACK of the first retransmission, a duplicate ACK per segment sent meanwhile, then
/// the ACK of everything. Returns (cwnd after the partial ACK, segments sent on the last ACK).
fn two_losses_recovery(ns2: bool) -> (u64, usize) {
    let mut c = cfg(Variant::NewReno);
    c.initial_window = InitialWindow::Segments(20);
    c.ns2_recovery = ns2;
    let mut a = established(c, 100 * MS, 100_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 20);
    let mut t = 200 * MS;
    let mut later = Vec::new();
    for _ in 3..=20 {
        a.on_segment(t, &ack_of(1, vec![]));
        later.extend(drain(&mut a, t));
        t += MS;
    }
    a.on_segment(t, &ack_of(1001, vec![]));
    let cwnd = a.cwnd();
    later.extend(drain(&mut a, t));
    let mut high = 20_001;
    for s in later.iter().filter(|s| s.seq >= 20_001) {
        t += MS;
        high = high.max(s.seq + u64::from(s.len));
        a.on_segment(t, &ack_of(1001, vec![]));
    }
    t += MS;
    a.on_segment(t, &ack_of(high, vec![]));
    assert_eq!(a.recovery(), RecoveryState::Open);
    (cwnd, drain(&mut a, t).len())
}

#[test]
fn ns2_recovery_drops_the_inflation_and_bursts_at_the_exit() {
    // ssthresh = 10 segments. RFC 6582 deflates by the data acknowledged and leaves recovery
    // with the flight plus one segment: one segment goes out.
    let (cwnd, burst) = two_losses_recovery(false);
    assert!(cwnd > 20_000, "{cwnd}");
    assert_eq!(burst, 1);
    // ns-2's NewReno of 1997: cwnd back to ssthresh on the partial ACK, and the whole window
    // of ten segments at once when recovery ends with nothing in flight.
    let (cwnd, burst) = two_losses_recovery(true);
    assert_eq!(cwnd, 10_000);
    assert_eq!(burst, 10);
}
