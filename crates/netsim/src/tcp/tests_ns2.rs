//! ns-2's NewReno and timer of 1997 (`recovery = "ns2"` without SACK, `timer = "ns2"`), each
//! rule against a hand-worked trace beside the default: the fast retransmit halves cwnd (ns-2's
//! `window()`), not the data in flight; it restarts the timer and then doubles the backoff;
//! every timeout halves `window()` into ssthresh; a timeout sets the timer before doubling the
//! backoff; an ACK in fast recovery sends at most two new segments, the ACK that ends it
//! opens cwnd and sends the rest at once; and every ACK of new data but a partial one gives
//! an RTT sample from the time stamp echoed (the segment it answers, as last sent).

use super::*;

const TICK: Time = 10 * MS;

/// A NewReno sender on 10 ms ticks (established at 100 ms: one 100 ms sample from the
/// handshake) with cwnd = `window` segments, `bytes` written and all of them sent at 100 ms.
fn sender(ns2_recovery: bool, ns2_timer: bool, window: u64, bytes: u64) -> TcpConnection {
    let mut c = cfg(Variant::NewReno);
    c.initial_window = InitialWindow::Segments(window as u32);
    c.clock_granularity_ns = TICK;
    c.min_rto_ns = 2 * TICK;
    c.ns2_recovery = ns2_recovery;
    c.ns2_timer = ns2_timer;
    let mut a = established(c, 100 * MS, bytes);
    assert_eq!(
        drain(&mut a, 100 * MS).len() as u64,
        (bytes / 1000).min(window)
    );
    a
}

/// Segment `i` (0-based) of 1000 bytes starts at sequence number `1 + 1000 i`.
fn seg(i: u64) -> u64 {
    1 + 1000 * i
}

/// Duplicate ACKs of a lost segment 0, one a millisecond from 201 ms; returns the time of the
/// last and what was sent on each.
fn dupacks(a: &mut TcpConnection, n: u64) -> (Time, Vec<Vec<TcpSegment>>) {
    let mut t = 200 * MS;
    let sent = (0..n)
        .map(|_| {
            t += MS;
            a.on_segment(t, &ack_of(1, vec![]));
            drain(a, t)
        })
        .collect();
    (t, sent)
}

#[test]
fn ns2_newreno_halves_cwnd_not_the_flight() {
    // cwnd 20 segments, 8 in flight (the application wrote 8), segment 0 lost.
    // ns-2's closecwnd(1): cwnd = window() / 2 = 10, ssthresh 10, inflated by 3 to 13.
    let mut a = sender(true, true, 20, 8000);
    let (_, sent) = dupacks(&mut a, 3);
    assert_eq!(sent[2].len(), 1);
    assert_eq!(sent[2][0].seq, seg(0));
    assert_eq!((a.ssthresh(), a.cwnd()), (10_000, 13_000));
    // RFC 5681 (default): ssthresh = flight / 2 = 4, cwnd 4 + 3.
    let mut b = sender(false, true, 20, 8000);
    dupacks(&mut b, 3);
    assert_eq!((b.ssthresh(), b.cwnd()), (4000, 7000));
}

#[test]
fn ns2_newreno_partial_ack_and_exit_return_to_the_halved_cwnd() {
    // Twenty in flight, segments 0 and 1 lost: 18 duplicate ACKs. cwnd 10 + 3, then + 1 for
    // each of the 15 more: 28 segments from segment 0, so 8 new ones (20..=27) leave.
    let mut a = sender(true, true, 20, 100_000);
    let (mut t, sent) = dupacks(&mut a, 18);
    let new: Vec<u64> = sent.iter().flatten().skip(1).map(|s| s.seq).collect();
    assert_eq!(new, (20..28).map(seg).collect::<Vec<_>>());
    assert_eq!(a.cwnd(), 28_000);
    // The partial ACK of segment 0: dupwnd_ = 0, cwnd back to 10; segment 1 resent.
    t += MS;
    a.on_segment(t, &ack_of(seg(1), vec![]));
    let sent = drain(&mut a, t);
    assert_eq!(a.cwnd(), 10_000);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].seq, seg(1));
    // The ACK of everything ends recovery with cwnd 10, opened by 1/10 segment (ns-2's
    // opencwnd() after newack()): ten segments at once.
    t += MS;
    a.on_segment(t, &ack_of(seg(28), vec![]));
    assert_eq!(a.recovery(), RecoveryState::Open);
    assert_eq!((a.cwnd(), drain(&mut a, t).len()), (10_100, 10));
}

/// Twenty in flight, segments 0 and 19 lost, only three duplicate ACKs come back (the others'
/// ACKs lost): the fast retransmit at 203 ms, the partial ACK of segments 0..=18 at `partial`.
fn partial_ack_after_three_dupacks(
    increase: IncreasePolicy,
    partial: Time,
) -> (TcpConnection, Vec<u64>) {
    let mut c = cfg(Variant::NewReno);
    c.initial_window = InitialWindow::Segments(20);
    c.clock_granularity_ns = TICK;
    c.min_rto_ns = 2 * TICK;
    c.ns2_recovery = true;
    c.ns2_timer = true;
    c.increase = increase;
    let mut a = established(c, 100 * MS, 100_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 20);
    let (_, sent) = dupacks(&mut a, 3);
    assert_eq!(sent.concat().len(), 1);
    a.on_segment(partial, &ack_of(seg(19), vec![]));
    let sent = drain(&mut a, partial).iter().map(|s| s.seq).collect();
    (a, sent)
}

#[test]
fn ns2_newreno_sends_at_most_two_new_segments_per_ack_in_recovery() {
    // The partial ACK: cwnd back to 10 from segment 19 allows segments up to 28, nine of them
    // new (20..=28); ns-2's send(0, 0, 2) sends segment 19 again and two new ones.
    let (mut a, sent) = partial_ack_after_three_dupacks(IncreasePolicy::Standard, 300 * MS);
    assert_eq!(a.cwnd(), 10_000);
    assert_eq!(sent, vec![seg(19), seg(20), seg(21)]);
    // A duplicate ACK inflates cwnd to 11 (up to segment 29): two more, not eight.
    a.on_segment(301 * MS, &ack_of(seg(19), vec![]));
    let sent: Vec<u64> = drain(&mut a, 301 * MS).iter().map(|s| s.seq).collect();
    assert_eq!(sent, vec![seg(22), seg(23)]);
    // The ACK of segments 19..=21 passes the recovery point (20): dupacks_ = 0, opencwnd()
    // makes cwnd 10 + 1/10, and send(0, 0, maxburst_ = 0) sends the rest of the window up to
    // segment 31 at once: eight segments back to back.
    a.on_segment(302 * MS, &ack_of(seg(22), vec![]));
    assert_eq!(a.recovery(), RecoveryState::Open);
    assert_eq!(a.cwnd(), 10_100);
    let sent: Vec<u64> = drain(&mut a, 302 * MS).iter().map(|s| s.seq).collect();
    assert_eq!(sent, (24..32).map(seg).collect::<Vec<_>>());
}

#[test]
fn ns2_newreno_opens_cwnd_by_the_increase_policy_on_the_ack_that_ends_recovery() {
    // As above; the exit ACK's opencwnd() with increase-by-K adds min(K/cwnd, 1) segment:
    // K = 4 gives 10.4, K = 16 a whole segment (11), so one segment more leaves at once.
    let exit = |k: f64| {
        let (mut a, _) =
            partial_ack_after_three_dupacks(IncreasePolicy::IncreaseByK { k }, 300 * MS);
        a.on_segment(301 * MS, &ack_of(seg(19), vec![]));
        drain(&mut a, 301 * MS);
        a.on_segment(302 * MS, &ack_of(seg(22), vec![]));
        (a.cwnd(), drain(&mut a, 302 * MS).len())
    };
    assert_eq!(exit(4.0), (10_400, 8));
    assert_eq!(exit(16.0), (11_000, 9));
}

#[test]
fn ns2_newreno_fast_retransmit_restarts_the_timer_then_backs_off() {
    // The handshake's 100 ms sample on 10 ms ticks: srtt 10 ticks, 4·mdev 20, RTO = 10 + 20 +
    // 1 = 31 ticks.
    let mut a = sender(true, true, 20, 100_000);
    assert_eq!(a.stats().rto_ns, 310 * MS);
    let (t, _) = dupacks(&mut a, 3);
    // reset_rtx_timer(1): the timer runs one RTO from the fast retransmit, and the backoff
    // doubles for the next one.
    assert_eq!(a.poll_timeout(), Some(t + 310 * MS));
    assert_eq!(a.stats().rto_ns, 620 * MS);
    // The default restarts the timer without backoff (BSD).
    let mut b = sender(false, true, 20, 100_000);
    let (t, _) = dupacks(&mut b, 3);
    assert_eq!(b.poll_timeout(), Some(t + 310 * MS));
    assert_eq!(b.stats().rto_ns, 310 * MS);
}

#[test]
fn ns2_newreno_lowers_ssthresh_from_cwnd_at_every_timeout() {
    // cwnd 20, 8 in flight, no ACK: two timeouts in a row.
    let ssthresh_after_two = |ns2: bool| {
        let mut a = sender(ns2, true, 20, 8000);
        let mut after = Vec::new();
        for _ in 0..2 {
            let deadline = a.poll_timeout().expect("timer");
            a.on_timeout(deadline);
            drain(&mut a, deadline);
            after.push(a.ssthresh());
        }
        assert_eq!(a.stats().timeouts, 2);
        after
    };
    // ns-2's closecwnd(0): window() / 2 = 10, then cwnd 1 gives 0, raised to 2 segments.
    assert_eq!(ssthresh_after_two(true), vec![10_000, 2000]);
    // RFC 5681: flight / 2 = 4 once for the same segment.
    assert_eq!(ssthresh_after_two(false), vec![4000, 4000]);
}

#[test]
fn ns2_timer_first_retransmission_waits_one_rto() {
    // Ten segments sent at 100 ms, all lost. ns-2's timeout() sets the timer with the current
    // backoff and then doubles it: the timeouts come 310, 310, 620, 1240 ms apart.
    let timeouts = |ns2_timer: bool| {
        let mut a = sender(false, ns2_timer, 10, 10_000);
        let mut at = vec![100 * MS];
        for _ in 0..4 {
            let deadline = a.poll_timeout().expect("timer");
            a.on_timeout(deadline);
            drain(&mut a, deadline);
            at.push(deadline);
        }
        at.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>()
    };
    assert_eq!(
        timeouts(true),
        vec![310 * MS, 310 * MS, 620 * MS, 1240 * MS]
    );
    // BSD doubles first and fires on the next 10 ms tick: RFC 6298's RTO = 100 + max(10,
    // 4 · 50) = 300 ms, then 600, 1200, 2400 (every deadline already on a tick).
    assert_eq!(
        timeouts(false),
        vec![300 * MS, 600 * MS, 1200 * MS, 2400 * MS]
    );
}

#[test]
fn ns2_timer_samples_every_ack_from_the_echoed_time_stamp() {
    // Two segments at 100 ms; their ACKs at 150 and 160 ms. ns-2's newack() takes a sample
    // on each from the echoed time stamp: 50 ms (5 ticks) and 60 ms (6 ticks). After the
    // handshake's 10 ticks (srtt8 80, rttvar4 20): srtt8 80 + 5 - 10 = 75, rttvar4 20 + 5 - 5
    // = 20; then srtt8 75 + 6 - 9 = 72 (90 ms), rttvar4 20 + 3 - 5 = 18: RTO 9 + 18 + 1 = 28
    // ticks.
    let srtt_rto = |ns2_timer: bool| {
        let mut a = sender(false, ns2_timer, 2, 100_000);
        a.on_segment(150 * MS, &ack_of(seg(1), vec![]));
        drain(&mut a, 150 * MS);
        a.on_segment(160 * MS, &ack_of(seg(2), vec![]));
        (a.stats().srtt_ns, a.stats().rto_ns)
    };
    assert_eq!(srtt_rto(true), (Some(90 * MS), 280 * MS));
    // BSD times one segment a round trip (segment 0): one sample, 50 ms (RFC 6298: srtt
    // 100 · 7/8 + 50/8).
    assert_eq!(srtt_rto(false).0, Some(93_750_000));
}

#[test]
fn ns2_timer_takes_no_sample_on_a_partial_ack_and_one_from_the_retransmission_on_the_exit() {
    // Fast retransmit of segment 0 at 203 ms; its partial ACK at 353 ms would be a 150 ms
    // sample, but partialnewack() takes none: srtt stays the handshake's 100 ms.
    let (mut a, _) = partial_ack_after_three_dupacks(IncreasePolicy::Standard, 353 * MS);
    assert_eq!(a.stats().srtt_ns, Some(100 * MS));
    a.on_segment(354 * MS, &ack_of(seg(19), vec![]));
    drain(&mut a, 354 * MS);
    assert_eq!(a.stats().srtt_ns, Some(100 * MS));
    // The ACK ending recovery answers segment 19, resent at 353 ms: a 120 ms (12 ticks)
    // sample, srtt8 80 + 12 - 10 = 82 (102.5 ms).
    a.on_segment(473 * MS, &ack_of(seg(22), vec![]));
    assert_eq!(a.stats().srtt_ns, Some(102_500_000));
}

#[test]
fn ns2_timer_backoff_ends_with_the_ack_of_a_new_segment_not_with_a_sample() {
    // Ten segments lost at 100 ms: two timeouts (backoff 4), then the ACK of the first
    // retransmission. rtt_active_ was cleared by the timeouts and no new data was sent since,
    // so the backoff stays (ns-2's rtt_update does not touch it): the timer runs 4 × 31 ticks.
    let mut a = sender(false, true, 10, 20_000);
    let mut t = 0;
    for _ in 0..2 {
        t = a.poll_timeout().expect("timer");
        a.on_timeout(t);
        drain(&mut a, t);
    }
    assert_eq!(a.stats().rto_ns, 4 * 310 * MS);
    t += 100 * MS;
    a.on_segment(t, &ack_of(seg(1), vec![]));
    // Slow start from one segment: segments 1 and 2 are resent (go back N), nothing new.
    let sent: Vec<u64> = drain(&mut a, t).iter().map(|s| s.seq).collect();
    assert_eq!(sent, vec![seg(1), seg(2)]);
    assert_eq!(a.rto_backoff(), 2);
    assert_eq!(a.poll_timeout(), Some(t + 4 * 310 * MS));
    // Go back N up to segment 9, then new data (segment 10 on): the ACK beyond segment 10
    // ends the backoff, after newtimer() set the timer with it and with the RTO as it stood
    // before this ACK's sample (ns-2's newack: newtimer, then rtt_update).
    for next in 3..=10 {
        t += 100 * MS;
        a.on_segment(t, &ack_of(seg(next), vec![]));
        drain(&mut a, t);
        assert_eq!(a.rto_backoff(), 2, "ack of segment {next}");
    }
    let before = a.stats().rto_ns;
    t += 100 * MS;
    a.on_segment(t, &ack_of(seg(11), vec![]));
    assert_eq!(a.poll_timeout(), Some(t + before));
    assert_eq!(a.rto_backoff(), 0);
    assert!(a.stats().rto_ns < before / 2);
}
