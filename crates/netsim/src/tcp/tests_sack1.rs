//! ns-2's `Agent/TCP/Sack1` of 1997 (`recovery = "ns2"` on a SACK sender), each rule against a
//! hand-worked trace beside the default SACK sender (appendix A): the pipe, holes below the
//! highest SACK block, the partial ACK's timer, the burst at the end of recovery, and the
//! timeout's go-back-N.

use super::*;

/// Twenty segments of 1000 bytes in flight (initial window 20) from a SACK-NewReno sender,
/// with or without ns-2's Sack1 rules.
fn twenty_in_flight(sack1: bool) -> (TcpConnection, Time) {
    let mut c = cfg(Variant::SackNewReno);
    c.initial_window = InitialWindow::Segments(20);
    c.ns2_recovery = sack1;
    c.ns2_timer = true;
    let mut a = established(c, 100 * MS, 100_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 20);
    (a, 200 * MS)
}

/// Segment `i` (0-based) of 1000 bytes starts at sequence number `1 + 1000 i`.
fn seg(i: u64) -> u64 {
    1 + 1000 * i
}

/// Duplicate ACKs of segment 0's loss, the k-th SACKing segments 1..=k; returns what the
/// sender sent on each.
fn dupacks(
    a: &mut TcpConnection,
    t: &mut Time,
    ks: std::ops::RangeInclusive<u64>,
) -> Vec<Vec<TcpSegment>> {
    ks.map(|k| {
        *t += MS;
        a.on_segment(*t, &ack_of(1, vec![(seg(1), seg(k + 1))]));
        drain(a, *t)
    })
    .collect()
}

#[test]
fn sack1_pipe_is_cwnd_minus_three_and_sends_while_below_the_halved_window() {
    let (mut a, mut t) = twenty_in_flight(true);
    let sent = dupacks(&mut a, &mut t, 1..=19);
    // Third duplicate ACK: cwnd 20 -> 10, ssthresh 10, pipe 20 - 3 = 17; only the fast
    // retransmit leaves (outside the pipe count).
    assert!(sent[0].is_empty() && sent[1].is_empty());
    assert_eq!(sent[2].len(), 1);
    assert_eq!(sent[2][0].seq, seg(0));
    assert_eq!((a.cwnd(), a.ssthresh()), (10_000, 10_000));
    assert_eq!(a.recovery(), RecoveryState::FastRecovery);
    // Duplicate ACKs 4..=10 take the pipe from 16 down to 10: nothing is sent.
    for (k, s) in sent.iter().enumerate().take(10).skip(3) {
        assert!(s.is_empty(), "dupack {}: {s:?}", k + 1);
    }
    // From the 11th each takes it to 9, below cwnd: one new segment, back to 10.
    for (i, s) in sent.iter().enumerate().skip(10) {
        assert_eq!(s.len(), 1, "dupack {}", i + 1);
        assert_eq!(s[0].seq, seg(20 + i as u64 - 10), "dupack {}", i + 1);
    }
    // The window stays at 10 throughout (no inflation).
    assert_eq!(a.cwnd(), 10_000);
}

/// Segments 0 and 18 of twenty lost; duplicate ACKs from segments 1..=17, then one from
/// segment 19 (SACK blocks 19 and 1..=17). Returns the sender and what it sent on the 18th.
fn hole_near_the_top(sack1: bool) -> (TcpConnection, Time, Vec<TcpSegment>) {
    let (mut a, mut t) = twenty_in_flight(sack1);
    dupacks(&mut a, &mut t, 1..=17);
    t += MS;
    a.on_segment(t, &ack_of(1, vec![(seg(19), seg(20)), (seg(1), seg(18))]));
    let sent = drain(&mut a, t);
    (a, t, sent)
}

#[test]
fn sack1_resends_a_hole_with_less_than_three_segments_sacked_above_it() {
    // Sack1: segment 18 lies below the highest SACK block, so it is a hole to resend, though
    // only one segment above it is SACKed.
    let (_, _, sent) = hole_near_the_top(true);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].seq, seg(18));
    // Appendix A (rule 5) waits for SACKed data three segments beyond it: new data instead.
    let (_, _, sent) = hole_near_the_top(false);
    assert!(sent.iter().all(|s| s.seq >= seg(20)), "{sent:?}");
    assert!(!sent.iter().any(|s| s.seq == seg(18)));
}

#[test]
fn sack1_partial_ack_takes_two_from_the_pipe_and_restarts_the_timer_without_backoff() {
    let base = twenty_in_flight(true).0.stats().rto_ns;
    let (mut a, mut t, _) = hole_near_the_top(true);
    // The fast retransmit backed the timer off (ns-2's reset_rtx_timer(1)).
    assert_eq!(a.stats().rto_ns, 2 * base);
    // The retransmission of segment 0 arrives: ACK of 0..=17, segment 19 SACKed. Pipe 10 - 2
    // = 8: two segments leave, both new data (nothing left to resend below segment 19).
    t += MS;
    a.on_segment(t, &ack_of(seg(18), vec![(seg(19), seg(20))]));
    let sent = drain(&mut a, t);
    assert_eq!(a.recovery(), RecoveryState::FastRecovery);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|s| s.seq >= seg(27)), "{sent:?}");
    assert_eq!(a.cwnd(), 10_000);
    // t_backoff_ = 1 and a new timer from this ACK.
    assert_eq!(a.stats().rto_ns, base);
    assert_eq!(a.poll_timeout(), Some(t + base));
}

/// The ACK that ends recovery acknowledges everything sent; returns the segments sent then.
fn exit_burst(sack1: bool) -> (u64, usize) {
    let (mut a, mut t, _) = hole_near_the_top(sack1);
    let high = a.highest_data_sent() + 1;
    t += MS;
    a.on_segment(t, &ack_of(high, vec![]));
    assert_eq!(a.recovery(), RecoveryState::Open);
    (a.cwnd(), drain(&mut a, t).len())
}

#[test]
fn sack1_leaves_recovery_with_the_halved_window_in_one_burst() {
    // Sack1 keeps cwnd = 10 segments and, nothing being in flight, sends all ten at once.
    assert_eq!(exit_burst(true), (10_000, 10));
    // Appendix A (NewReno rule 3) leaves with the flight plus one segment: one segment.
    let (_, burst) = exit_burst(false);
    assert_eq!(burst, 1);
}

/// Ten segments in flight, segments 0 and 2 lost, two duplicate ACKs (too few for a fast
/// retransmit), then the timeout. Returns the sender and the time.
fn timeout_with_holes(sack1: bool) -> (TcpConnection, Time) {
    let mut c = cfg(Variant::SackNewReno);
    c.initial_window = InitialWindow::Segments(10);
    c.ns2_recovery = sack1;
    let mut a = established(c, 100 * MS, 100_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 10);
    let mut t = 200 * MS;
    for k in [1u64, 3] {
        t += MS;
        a.on_segment(t, &ack_of(1, vec![(seg(3), seg(k + 2)), (seg(1), seg(2))]));
        assert!(drain(&mut a, t).is_empty());
    }
    let deadline = a.poll_timeout().expect("timer");
    a.on_timeout(deadline);
    assert_eq!(a.stats().timeouts, 1);
    let sent = drain(&mut a, deadline);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].seq, seg(0));
    (a, deadline)
}

#[test]
fn sack1_after_a_timeout_ignores_dupacks_and_goes_back_n_over_sacked_data() {
    let (mut a, mut t) = timeout_with_holes(true);
    assert_eq!((a.cwnd(), a.ssthresh()), (1000, 5000));
    // Late duplicate ACKs (SACKing 1 and 3..=9): ignored, no fast retransmit.
    for _ in 0..4 {
        t += MS;
        a.on_segment(t, &ack_of(1, vec![(seg(3), seg(10)), (seg(1), seg(2))]));
        assert!(drain(&mut a, t).is_empty());
    }
    assert_eq!(a.stats().fast_retransmits, 0);
    assert_eq!(a.recovery(), RecoveryState::Loss);
    // Segment 0 arrives: ACK of 0..=1 with 3..=9 SACKed. Slow start to 2 segments and go back
    // N: segments 2 and 3, though the receiver holds 3.
    t += MS;
    a.on_segment(t, &ack_of(seg(2), vec![(seg(3), seg(10))]));
    let sent: Vec<u64> = drain(&mut a, t).iter().map(|s| s.seq).collect();
    assert_eq!(sent, vec![seg(2), seg(3)]);
    // Appendix A's rule 7 skips what the receiver reported after the timeout (and the window,
    // two segments from segment 2, allows nothing beyond segment 10).
    let (mut b, mut t) = timeout_with_holes(false);
    t += MS;
    b.on_segment(t, &ack_of(seg(2), vec![(seg(3), seg(10))]));
    let sent: Vec<u64> = drain(&mut b, t).iter().map(|s| s.seq).collect();
    assert_eq!(sent, vec![seg(2)]);
}

#[test]
fn sack1_lowers_ssthresh_at_every_timeout() {
    // ns-2's closecwnd(0) halves window() at each timeout (at least two segments); the default
    // keeps ssthresh for repeated timeouts of one segment (RFC 5681).
    for (sack1, want) in [(true, 2000), (false, 5000)] {
        let (mut a, _) = timeout_with_holes(sack1);
        let deadline = a.poll_timeout().expect("timer");
        a.on_timeout(deadline);
        assert_eq!(a.stats().timeouts, 2);
        assert_eq!(a.ssthresh(), want, "sack1 {sack1}");
    }
}

#[test]
fn sack1_transfers_with_losses_on_a_delay_line() {
    // Segments 20, 60, ..., 260 lost once: Sack1 repairs each with one fast retransmit, no
    // timeout, and delivers everything.
    let c = TcpConfig {
        recv_buffer_bytes: 64 * LOSS_MSS,
        ns2_recovery: true,
        ..cfg(Variant::SackNewReno)
    };
    let mut p = Pair::new(c.clone(), c, 10_000_000, 50 * MS);
    p.drop = Box::new(|dir, seg, _, n| {
        dir == Dir::AtoB && seg.len > 0 && n == 0 && (seg.seq / LOSS_MSS) % 40 == 20
    });
    p.a.write(300 * LOSS_MSS);
    p.a.close();
    p.run_until(60 * SEC);
    let st = p.a.stats();
    assert_eq!(p.delivered_b, 300 * LOSS_MSS, "{st:?}");
    assert_eq!((st.fast_retransmits, st.timeouts), (7, 0), "{st:?}");
    assert_eq!(st.retransmitted_segments, 7, "{st:?}");
}
