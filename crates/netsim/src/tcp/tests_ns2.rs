//! ns-2's NewReno and timer of 1997 (`recovery = "ns2"` without SACK, `timer = "ns2"`), each
//! rule against a hand-worked trace beside the default: the fast retransmit halves cwnd (ns-2's
//! `window()`), not the data in flight; it restarts the timer and then doubles the backoff;
//! every timeout halves `window()` into ssthresh; a timeout sets the timer before doubling the
//! backoff; and a segment sent in fast recovery is timed.

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
    // The ACK of everything ends recovery with cwnd 10: ten segments at once.
    t += MS;
    a.on_segment(t, &ack_of(seg(28), vec![]));
    assert_eq!(a.recovery(), RecoveryState::Open);
    assert_eq!((a.cwnd(), drain(&mut a, t).len()), (10_000, 10));
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
fn ns2_timer_times_a_segment_sent_in_fast_recovery() {
    // Twenty in flight, segment 0 lost, 19 duplicate ACKs: segments 20..=28 leave in
    // recovery, the first (20) on the 11th duplicate ACK at 211 ms.
    let exit = |ns2_timer: bool| {
        let mut a = sender(true, ns2_timer, 20, 100_000);
        let (mut t, sent) = dupacks(&mut a, 19);
        assert_eq!(sent[10].len(), 1);
        assert_eq!(sent[10][0].seq, seg(20));
        let before = a.stats().srtt_ns;
        // The ACK of everything at 311 ms: 100 ms after segment 20 left.
        t = t.max(311 * MS);
        a.on_segment(t, &ack_of(seg(29), vec![]));
        assert_eq!(a.recovery(), RecoveryState::Open);
        assert_eq!(a.poll_timeout(), None);
        // Ten more segments: the timer runs from here with the timeout as it now stands.
        a.write(10_000);
        drain(&mut a, t);
        let wait = a.poll_timeout().expect("timer") - t;
        (before, a.stats().srtt_ns, a.stats().rto_ns, wait)
    };
    // ns-2's output() starts timing segment 20 (rtt_active_ was cleared by the fast
    // retransmit): its ACK gives a 100 ms sample and ends the fast retransmit's backoff.
    let (before, after, rto, wait) = exit(true);
    assert_eq!(before, Some(100 * MS));
    assert_eq!(after, Some(100 * MS));
    // srtt 80 + 10 - 10 = 80 (eighths), 4·mdev 20 + 0 - 5 = 15: 10 + 15 + 1 = 26 ticks.
    assert_eq!((rto, wait), (260 * MS, 260 * MS));
    // BSD times nothing sent in recovery: no sample, the backoff stays (2 × 300 ms, on the
    // next 10 ms tick after 311 + 600 ms).
    let (_, _, rto, wait) = exit(false);
    assert_eq!((rto, wait), (600 * MS, 609 * MS));
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
    assert_eq!(a.stats().rto_ns, 4 * 310 * MS);
    assert_eq!(a.poll_timeout(), Some(t + 4 * 310 * MS));
    // Go back N up to segment 9, then new data (segment 10 on): the ACK beyond segment 10
    // ends the backoff, after newtimer() set the timer with it and with the RTO as it stood
    // before this ACK's sample (ns-2's newack: newtimer, then rtt_update).
    for next in 3..=10 {
        t += 100 * MS;
        a.on_segment(t, &ack_of(seg(next), vec![]));
        drain(&mut a, t);
        assert_eq!(a.stats().rto_ns, 4 * 310 * MS, "ack of segment {next}");
    }
    t += 100 * MS;
    a.on_segment(t, &ack_of(seg(11), vec![]));
    assert_eq!(a.poll_timeout(), Some(t + 4 * 310 * MS));
    assert!(a.stats().rto_ns < 4 * 310 * MS);
}
