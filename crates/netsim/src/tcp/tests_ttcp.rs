//! T/TCP and 4KSS on a request/response exchange (thesis §4.2.4): the request rides on the SYN,
//! the reply leaves with the SYN-ACK without waiting for the handshake, and the TAO test is
//! taken as passed (the client has talked to this server before).

use super::*;
use crate::sim::{Time, MS, SEC};

/// Runs one exchange over a lossless path with `one_way` delay and no serialization delay: the
/// client writes `request` bytes; the server, once it has read them, writes `reply` bytes and
/// closes. Returns (when the client read the last reply byte, segments sent by both sides,
/// client connection, server connection).
fn exchange(
    client: TcpConfig,
    server: TcpConfig,
    request: u64,
    reply: u64,
    one_way: Time,
) -> (Time, u64, TcpConnection, TcpConnection) {
    let mut a = TcpConnection::new_active(0, client);
    let mut b = TcpConnection::new_passive(0, server);
    a.write(request);
    // In flight: (arrival time, order, to the server?, segment).
    let mut wire: Vec<(Time, u64, bool, TcpSegment)> = Vec::new();
    let (mut order, mut now, mut got_req, mut got_reply) = (0u64, 0, 0u64, 0u64);
    let mut replied = false;
    let mut done = None;
    let mut segments = 0;
    for _ in 0..100_000 {
        // Applications.
        got_req += b.read(u64::MAX);
        if got_req >= request && !replied {
            b.write(reply);
            b.close();
            replied = true;
        }
        got_reply += a.read(u64::MAX);
        if got_reply >= reply && done.is_none() {
            done = Some(now);
            a.close();
        }
        while let Some(s) = a.poll_segment(now) {
            order += 1;
            segments += 1;
            wire.push((now + one_way, order, true, s));
        }
        while let Some(s) = b.poll_segment(now) {
            order += 1;
            segments += 1;
            wire.push((now + one_way, order, false, s));
        }
        // Next event: a segment's arrival or a timer.
        let timer = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let next = wire
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (w.0, w.1))
            .map(|(i, w)| (i, w.0));
        match (next, timer) {
            (Some((i, at)), t) if t.is_none_or(|t| at <= t) => {
                let (at, _, to_server, seg) = wire.remove(i);
                now = at;
                if to_server {
                    b.on_segment(now, &seg);
                } else {
                    a.on_segment(now, &seg);
                }
            }
            (_, Some(t)) => {
                now = t;
                a.on_timeout(now);
                b.on_timeout(now);
            }
            _ => break,
        }
        if now > 60 * SEC {
            break;
        }
    }
    (done.expect("reply read"), segments, a, b)
}

fn cfg(ttcp: bool, four_kss: bool) -> TcpConfig {
    TcpConfig {
        mss_bytes: 1460,
        data_on_syn: ttcp,
        initial_window: if four_kss {
            InitialWindow::FourKss
        } else {
            InitialWindow::One
        },
        ..TcpConfig::default()
    }
}

const RTT: Time = 600 * MS;

#[test]
fn three_segment_reply_costs_as_the_thesis_analysis() {
    // Standard TCP: handshake, the first segment, the delayed ACK (200 ms here, exactly; the
    // analysis uses its 100 ms mean), then the other two: 3 RTT + the ACK delay.
    let t = |ttcp, kss| exchange(cfg(ttcp, kss), cfg(ttcp, kss), 300, 3 * 1460, RTT / 2).0;
    assert_eq!(t(false, false), 3 * RTT + 200 * MS);
    // Either option: 2 RTT; both: 1 RTT.
    assert_eq!(t(true, false), 2 * RTT);
    assert_eq!(t(false, true), 2 * RTT);
    assert_eq!(t(true, true), RTT);
}

#[test]
fn ttcp_reply_leaves_with_the_syn_ack() {
    let (done, _, a, b) = exchange(cfg(true, true), cfg(true, true), 300, 2000, RTT / 2);
    assert_eq!(done, RTT);
    assert!(a.is_established() && b.is_established());
    assert_eq!(b.stats().data_bytes_received, 300);
    assert_eq!(a.stats().data_bytes_received, 2000);
    // The SYN-ACK carried the first reply segment: two data segments, no SYN retransmission.
    assert_eq!(b.stats().data_segments_sent, 2);
    assert_eq!(b.stats().syn_retransmissions, 0);
}

#[test]
fn ttcp_needs_both_ends() {
    // A T/TCP client to a standard server: the server accepts the data on the SYN but waits
    // for the handshake before replying (2 RTT for one segment, as standard TCP).
    let (done, ..) = exchange(cfg(true, false), cfg(false, false), 300, 1000, RTT / 2);
    assert_eq!(done, 2 * RTT);
    // A standard client to a T/TCP server: no data on the SYN, so no TAO shortcut.
    let (done, ..) = exchange(cfg(false, false), cfg(true, false), 300, 1000, RTT / 2);
    assert_eq!(done, 2 * RTT);
}

#[test]
fn ttcp_uses_fewer_packets() {
    let (_, standard, ..) = exchange(cfg(false, false), cfg(false, false), 300, 1000, RTT / 2);
    let (_, ttcp, ..) = exchange(cfg(true, false), cfg(true, false), 300, 1000, RTT / 2);
    assert!(ttcp < standard, "T/TCP {ttcp} vs TCP {standard}");
}
