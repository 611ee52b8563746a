//! The modern TCP options beside the seeds' variants, each with scripted losses showing its
//! defining behaviour: limited transmit, RFC 6675 loss marking, PRR, per-ACK RTT samples.

use super::*;

fn modern(f: impl FnOnce(&mut TcpConfig)) -> TcpConfig {
    let mut c = cfg(Variant::SackNewReno);
    f(&mut c);
    c
}

fn new_data_after(segs: &[TcpSegment], from: u64) -> usize {
    segs.iter().filter(|s| s.len > 0 && s.seq >= from).count()
}

/// Three segments in flight, the first lost: two duplicate ACKs only.
fn small_window_loss(limited_transmit: bool) -> (TcpConnection, Vec<TcpSegment>) {
    let c = modern(|c| {
        c.initial_window = InitialWindow::Segments(3);
        c.limited_transmit = limited_transmit;
    });
    let mut a = established(c, 100 * MS, 10_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 3);
    let mut sent = Vec::new();
    // Segments 2 and 3 arrive: two duplicate ACKs.
    a.on_segment(200 * MS, &ack_of(1, vec![(1001, 2001)]));
    sent.extend(drain(&mut a, 200 * MS));
    a.on_segment(201 * MS, &ack_of(1, vec![(1001, 3001)]));
    sent.extend(drain(&mut a, 201 * MS));
    // Each segment sent meanwhile arrives too and brings another duplicate ACK.
    let mut t = 300 * MS;
    let mut high = 3001;
    for s in sent.clone() {
        high = high.max(s.seq + u64::from(s.len));
        a.on_segment(t, &ack_of(1, vec![(1001, high)]));
        sent.extend(drain(&mut a, t));
        t += MS;
    }
    (a, sent)
}

#[test]
fn limited_transmit_turns_two_duplicate_acks_into_a_fast_retransmit() {
    let (with, sent) = small_window_loss(true);
    // One new segment per duplicate ACK, then the third duplicate ACK: fast retransmit.
    let rexmit = sent.iter().position(|s| s.seq == 1 && s.len > 0);
    let rexmit = rexmit.unwrap_or_else(|| panic!("no fast retransmit: {sent:?}"));
    assert_eq!(new_data_after(&sent[..rexmit], 3001), 2, "{sent:?}");
    assert_eq!(with.stats().fast_retransmits, 1);
    let (without, sent) = small_window_loss(false);
    // Without it the window is full: nothing to send, no third duplicate ACK, a timeout ahead.
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(without.stats().fast_retransmits, 0);
    assert!(without.poll_timeout().is_some());
}

/// Five segments in flight, the first lost; one ACK (the others were lost) reports the four
/// others SACKed.
fn stretch_sack(rfc6675: bool) -> (TcpConnection, Vec<TcpSegment>) {
    let c = modern(|c| {
        c.initial_window = InitialWindow::Segments(5);
        c.rfc6675_loss_marking = rfc6675;
    });
    let mut a = established(c, 100 * MS, 5_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 5);
    a.on_segment(200 * MS, &ack_of(1, vec![(1001, 5001)]));
    let sent = drain(&mut a, 200 * MS);
    (a, sent)
}

#[test]
fn rfc6675_marks_a_hole_lost_from_sacked_bytes_not_duplicate_acks() {
    // RFC 6675: 4 segments SACKed above segment 1 (> 2·MSS): it is lost, recovery starts on
    // this first duplicate ACK.
    let (a, sent) = stretch_sack(true);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0].seq, sent[0].len), (1, 1000));
    assert_eq!(a.stats().fast_retransmits, 1);
    assert_eq!(a.recovery(), RecoveryState::FastRecovery);
    // Appendix A waits for three duplicate ACKs that will not come: a timeout later.
    let (b, sent) = stretch_sack(false);
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(b.stats().fast_retransmits, 0);
    // Marking a later hole: one SACKed segment above it is not enough for RFC 6675.
    let c = modern(|c| {
        c.initial_window = InitialWindow::Segments(10);
        c.rfc6675_loss_marking = true;
    });
    let mut a = established(c, 100 * MS, 10_000);
    drain(&mut a, 100 * MS);
    // Segments 1 and 6 lost; 2–5 arrive (3 duplicate ACKs → recovery), then 7 alone.
    for (k, hi) in [3001u64, 4001, 5001].iter().enumerate() {
        a.on_segment((200 + k as u64) * MS, &ack_of(1, vec![(1001, *hi)]));
    }
    drain(&mut a, 203 * MS);
    a.on_segment(204 * MS, &ack_of(1, vec![(6001, 7001), (1001, 5001)]));
    let s = drain(&mut a, 204 * MS);
    assert!(
        !s.iter().any(|x| x.seq == 5001),
        "hole 6 marked lost too early: {s:?}"
    );
    // Two more above it (8 and 9): more than 2·MSS SACKed above, now lost.
    a.on_segment(205 * MS, &ack_of(1, vec![(6001, 8001), (1001, 5001)]));
    drain(&mut a, 205 * MS);
    a.on_segment(206 * MS, &ack_of(1, vec![(6001, 9001), (1001, 5001)]));
    let s = drain(&mut a, 206 * MS);
    assert!(
        s.iter().any(|x| x.seq == 5001),
        "hole 6 not retransmitted: {s:?}"
    );
}

/// Twenty segments in flight, the first lost, then one duplicate ACK per arriving segment;
/// returns, per duplicate ACK, the new segments sent.
fn recovery_sending(prr: bool) -> Vec<usize> {
    let c = modern(|c| {
        c.initial_window = InitialWindow::Segments(20);
        c.prr = prr;
    });
    let mut a = established(c, 100 * MS, 60_000);
    assert_eq!(drain(&mut a, 100 * MS).len(), 20);
    (1..=19u64)
        .map(|k| {
            let t = (200 + k) * MS;
            a.on_segment(t, &ack_of(1, vec![(1001, 1001 + k * 1000)]));
            new_data_after(&drain(&mut a, t), 20_001)
        })
        .collect()
}

#[test]
fn prr_keeps_sending_through_recovery_where_inflation_waits() {
    let prr = recovery_sending(true);
    let inflation = recovery_sending(false);
    let first = |v: &[usize]| v.iter().position(|&n| n > 0).map(|i| i + 1);
    // Window inflation (cwnd = ssthresh + 3 segments, +1 per duplicate ACK) sends nothing new
    // until the inflated window passes the 20 segments in flight: the 11th duplicate ACK.
    assert_eq!(first(&inflation), Some(11), "{inflation:?}");
    // PRR sends about one new segment per two delivered from the start of recovery.
    let p = first(&prr).unwrap();
    assert!(p <= 6, "{prr:?}");
    let by_10: usize = prr[..10].iter().sum();
    assert!((2..=4).contains(&by_10), "{prr:?}");
    // Both end near ssthresh = 10 segments in flight: similar totals.
    let (tp, ti): (usize, usize) = (prr.iter().sum(), inflation.iter().sum());
    assert!(tp.abs_diff(ti) <= 2, "PRR {tp} vs inflation {ti}");
}

/// 2 Mb/s, 100 ms each way, a drop-tail queue of 100 packets (400 ms, twice the path's
/// bandwidth-delay product) in the data direction, exact clock, 200 ms minimum RTO, a 10 MB
/// transfer with SACK-NewReno. Returns (timeouts, spurious timeouts): a timeout is spurious when
/// a copy of the segment it resends is still queued or in flight (sent and not dropped).
fn full_buffer(per_ack: bool) -> (u64, u64) {
    let c = modern(|c| {
        c.clock_granularity_ns = 0;
        c.min_rto_ns = 200 * MS;
        c.recv_buffer_bytes = 4 << 20;
        c.rtt_per_ack = per_ack;
    });
    let mut p = Pair::new(c.clone(), c, 2_000_000, 100 * MS);
    // The line's serializer, replayed, to know the backlog each data packet meets.
    let mut free_at: Time = 0;
    p.drop = Box::new(move |dir, s, now, _| {
        if dir != Dir::AtoB {
            return false;
        }
        if free_at.saturating_sub(now) > 100 * 4 * MS {
            return true;
        }
        free_at = now.max(free_at) + u64::from(s.wire_size()) * 8 * SEC / 2_000_000;
        false
    });
    p.a.write(10_000 * 1000);
    p.a.close();
    let (mut timeouts, mut spurious) = (0, 0);
    while p.step(60 * SEC) {
        let st = p.a.stats();
        if st.timeouts > timeouts {
            timeouts = st.timeouts;
            let una = p.a.data_acked() + 1;
            if p.a_data().any(|(_, s, dropped)| s.seq == una && !dropped) {
                spurious += 1;
            }
        }
    }
    assert_eq!(p.delivered_b, 10_000 * 1000, "transfer incomplete");
    (timeouts, spurious)
}

#[test]
fn per_ack_rtt_samples_avoid_the_spurious_timeout_of_a_queued_retransmission() {
    // BSD timing (one segment per round trip, none during recovery): after the slow-start
    // overshoot the retransmission waits behind a full 400 ms queue, and the RTO, estimated
    // from the emptier queue of earlier rounds, expires first.
    let (bsd, bsd_spurious) = full_buffer(false);
    assert!(
        bsd >= 1 && bsd_spurious >= 1,
        "BSD: {bsd} timeouts, {bsd_spurious} spurious"
    );
    // Timestamps: every ACK updates the estimate, which follows the queue as it fills.
    let (ts, _) = full_buffer(true);
    assert_eq!(ts, 0, "per-ACK samples: {ts} timeouts");
}

/// One loss at a window of about 100 segments (RTT 100 ms, one ACK per segment), then
/// congestion avoidance: cwnd in segments after the reduction and after each round trip.
fn after_loss(increase: IncreasePolicy, rounds: usize) -> Vec<f64> {
    after_loss_from(increase, rounds).1
}

/// [`after_loss`], with the window (segments) when the loss was detected.
fn after_loss_from(increase: IncreasePolicy, rounds: usize) -> (f64, Vec<f64>) {
    let c = TcpConfig {
        initial_window: InitialWindow::Segments(100),
        initial_ssthresh_bytes: 2000,
        increase,
        clock_granularity_ns: 0,
        recv_buffer_bytes: 16 << 20,
        ..cfg(Variant::Reno)
    };
    let mut a = established(c, 100 * MS, u64::MAX / 8);
    let mut t = 100 * MS;
    ack_window(&mut a, t, 100 * MS, 1);
    t += 100 * MS;
    // The next window loses its first segment: three duplicate ACKs, the retransmission,
    // then everything is acknowledged (Reno leaves recovery with cwnd = ssthresh).
    let sent = drain(&mut a, t);
    let at_loss = a.cwnd() as f64 / 1000.0;
    let first = sent[0].seq;
    let n = sent.iter().filter(|s| s.len > 0).count() as u64;
    for k in 1..=3 {
        a.on_segment(
            t + 100 * MS,
            &ack_of(first, vec![(first + 1000, first + (k + 1) * 1000)]),
        );
    }
    drain(&mut a, t + 100 * MS);
    a.on_segment(t + 200 * MS, &ack_of(first + n * 1000, vec![]));
    t += 200 * MS;
    let mut v = vec![a.cwnd() as f64 / 1000.0];
    for _ in 0..rounds {
        ack_window(&mut a, t, 100 * MS, 1);
        t += 100 * MS;
        v.push(a.cwnd() as f64 / 1000.0);
    }
    (at_loss, v)
}

#[test]
fn cubic_grows_concave_to_the_last_maximum_then_convex() {
    let w = after_loss(IncreasePolicy::Cubic, 70);
    // β = 0.7 of the ~101-segment window; K = ∛(30/0.4) ≈ 4.2 s ≈ 42 round trips.
    assert!((69.0..=72.0).contains(&w[0]), "after the loss: {}", w[0]);
    assert!((96.0..=105.0).contains(&w[42]), "at K: {} ({w:?})", w[42]);
    let grew = |a: usize, b: usize| w[b] - w[a];
    // Concave: fast just after the reduction, a plateau near W_max ...
    assert!(grew(0, 10) > 3.0 * grew(32, 42), "{w:?}");
    // ... then convex probing beyond it.
    assert!(grew(52, 62) > 2.0 * grew(42, 52), "{w:?}");
    // W(7 s) = 0.4·(7 − 4.2)³ + 100 ≈ 109 segments.
    assert!(w[70] > 105.0, "{w:?}");
    // The seeds' standard increase halves and adds about one segment per round trip.
    let r = after_loss(IncreasePolicy::Standard, 42);
    assert!((49.0..=52.0).contains(&r[0]), "{}", r[0]);
    assert!((88.0..=95.0).contains(&r[42]), "{}", r[42]);
}

/// The window curve against RFC 9438's formulas, computed here independently: the loss sets
/// `W_max` to the window at the loss and the window to β = 0.7 of it (§4.6); from then on,
/// with every ACK of a round trip arriving at once, the window after round `r` is the cubic
/// target at the end of that round, `W_cubic(r·RTT) = C·(r·RTT − K)³ + W_max` with
/// `K = ∛((W_max − cwnd_epoch)/C)` (§4.2, Eq. 1–2; the target is taken one RTT ahead, §4.4),
/// or the Reno-friendly estimate where that is larger (§4.3).
#[test]
fn cubic_window_follows_the_rfc_9438_curve() {
    let rounds = 80;
    let (w_max, w) = after_loss_from(IncreasePolicy::Cubic, rounds);
    let (c, beta, rtt) = (0.4, 0.7, 0.1);
    // β: the window after the reduction (the flight at the loss, as RFC 9438 §4.6 permits).
    assert!(
        (w[0] - beta * w_max).abs() <= 1.0,
        "after the loss {} against 0.7 x {w_max}",
        w[0]
    );
    let k = ((w_max - w[0]) / c).cbrt();
    // §4.3: the Reno-friendly estimate grows α = 3(1 − β)/(1 + β) segments per round trip
    // until it reaches the window before the loss, then 1; the window is the larger of the two.
    let mut w_est = w[0];
    let mut worst = 0.0f64;
    for (r, &got) in w.iter().enumerate().skip(1) {
        w_est += if w_est >= w_max {
            1.0
        } else {
            3.0 * (1.0 - beta) / (1.0 + beta)
        };
        let t = r as f64 * rtt;
        let want = (c * (t - k).powi(3) + w_max).max(w_est);
        let err = (got - want).abs();
        worst = worst.max(err);
        assert!(
            err <= 1.0 + 0.01 * want,
            "round {r} (t = {t:.1} s): cwnd {got:.2} against max(W_cubic, W_est) {want:.2} segments (K = {k:.2} s)"
        );
    }
    eprintln!("worst deviation from W_cubic: {worst:.2} segments");
    // The curve is not Reno's: standard growth is 8 segments short of it at K.
    let r = after_loss(IncreasePolicy::Standard, rounds);
    let at_k = (k / rtt).round() as usize;
    assert!(w[at_k] - r[at_k] > 8.0, "{} vs {}", w[at_k], r[at_k]);
}
