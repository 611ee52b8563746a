//! T/TCP (RFC 1644) and 4KSS on an HTTP/1.0-style request/response exchange, packet by packet
//! (thesis §2.1.1, §4.2.4, §5.3): the exact segments a BSD-style pair of hosts sends, checked
//! against hand-computed sequences.
//!
//! The harness behaves as sockets applications over a BSD kernel do: after every arriving
//! segment or timer the TCP answers first (an ACK owed now goes out alone), then the
//! applications run, then TCP sends what they wrote. A standard client writes its request once
//! `connect` has returned, reads the reply to the end and closes; a T/TCP client opens with
//! `sendto(..., MSG_EOF)`, its request and FIN on the SYN. The server reads the request, then
//! writes its reply and closes at once (the FIN rides on the last data segment).

use super::*;
use crate::sim::{Time, MS, SEC};
use crate::web::http::describe_tcp;

/// One traced exchange.
struct Run {
    /// When the client read the last reply byte.
    done: Option<Time>,
    /// Every segment sent: (time, sent by the client, description as `SYN+ACK+data+FIN`).
    trace: Vec<(Time, bool, String)>,
    client: TcpConnection,
    server: TcpConnection,
}

impl Run {
    /// The trace as `"C SYN+data+FIN @0"`-style lines (times in ms).
    fn lines(&self) -> Vec<String> {
        self.trace
            .iter()
            .map(|(t, c, w)| format!("{} {w} @{}", if *c { "C" } else { "S" }, t / MS))
            .collect()
    }
}

/// Runs one exchange over a lossless path with `one_way` delay and no serialization delay. The
/// server answers the request with `reply` bytes unless `answer` is false; `tao_cached` is the
/// server's TAO cache entry for the client.
fn exchange_with(
    client: TcpConfig,
    server: TcpConfig,
    reply: u64,
    one_way: Time,
    answer: bool,
    tao_cached: bool,
) -> Run {
    const REQUEST: u64 = 300;
    let ttcp = client.data_on_syn;
    let mut a = TcpConnection::new_active(0, client);
    let mut b = TcpConnection::new_passive(0, server);
    b.set_tao_cached(tao_cached);
    if ttcp {
        a.write(REQUEST);
        a.close();
    }
    // In flight: (arrival time, order, to the server?, segment).
    let mut wire: Vec<(Time, u64, bool, TcpSegment)> = Vec::new();
    let mut trace = Vec::new();
    let (mut order, mut now) = (0u64, 0);
    let (mut got_req, mut got_reply, mut requested, mut replied) = (0u64, 0u64, ttcp, false);
    let mut done = None;
    let mut transmit = |now: Time,
                        a: &mut TcpConnection,
                        b: &mut TcpConnection,
                        wire: &mut Vec<(Time, u64, bool, TcpSegment)>| {
        for (conn, from_client) in [(a, true), (b, false)] {
            while let Some(s) = conn.poll_segment(now) {
                order += 1;
                trace.push((now, from_client, describe_tcp(&s)));
                wire.push((now + one_way, order, from_client, s));
            }
        }
    };
    for _ in 0..100_000 {
        // The kernels answer the input, then the applications run, then the kernels send.
        transmit(now, &mut a, &mut b, &mut wire);
        if !requested && a.is_established() {
            a.write(REQUEST);
            requested = true;
        }
        got_req += b.read(u64::MAX);
        if answer && got_req >= REQUEST && !replied {
            b.write(reply);
            b.close();
            replied = true;
        }
        got_reply += a.read(u64::MAX);
        if got_reply >= reply && done.is_none() {
            done = Some(now);
            a.close();
        }
        transmit(now, &mut a, &mut b, &mut wire);
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
    Run {
        done,
        trace,
        client: a,
        server: b,
    }
}

fn exchange(client: TcpConfig, server: TcpConfig, reply: u64) -> Run {
    exchange_with(client, server, reply, RTT / 2, true, true)
}

/// The seeds' TCP with an exact 200 ms delayed-ACK timer (not BSD's tick, so that times are
/// exact), optionally T/TCP and 4KSS.
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
const MSS: u64 = 1460;

#[test]
fn tcp_one_segment_reply_is_eight_packets() {
    // BSD: connect() returns after the kernel's ACK of the SYN-ACK, so the request follows in
    // its own segment; the client's kernel ACKs the server's FIN at once and the application's
    // close sends the client's FIN after it.
    let r = exchange(cfg(false, false), cfg(false, false), 1000);
    assert_eq!(
        r.lines(),
        [
            "C SYN @0",
            "S SYN+ACK @300",
            "C ACK @600",
            "C ACK+data @600",
            "S ACK+data+FIN @900",
            "C ACK @1200",
            "C ACK+FIN @1200",
            "S ACK @1500",
        ]
    );
    assert_eq!(r.done, Some(2 * RTT));
    assert!(r.client.is_send_complete() && r.server.is_send_complete());
}

#[test]
fn ttcp_one_segment_reply_is_three_packets() {
    // RFC 1644's minimal transaction: SYN+request+FIN; SYN+ACK+reply+FIN (the SYN-ACK waited
    // for the reply); the ACK of the reply and FIN.
    let r = exchange(cfg(true, false), cfg(true, false), 1000);
    assert_eq!(
        r.lines(),
        ["C SYN+data+FIN @0", "S SYN+ACK+data+FIN @300", "C ACK @600"]
    );
    assert_eq!(r.done, Some(RTT));
    assert!(r.client.is_send_complete() && r.server.is_send_complete());
    assert!(r.client.peer_finished() && r.server.peer_finished());
    assert_eq!(r.server.stats().data_bytes_received, 300);
    assert_eq!(r.client.stats().data_bytes_received, 1000);
}

#[test]
fn three_segment_replies() {
    // Standard TCP: the first segment waits for the client's delayed ACK (200 ms here; the
    // thesis' analysis uses the BSD tick's 100 ms mean), then two segments, the FIN on the
    // last: 3 RTT + the ACK delay, 11 packets.
    let r = exchange(cfg(false, false), cfg(false, false), 3 * MSS);
    assert_eq!(
        r.lines(),
        [
            "C SYN @0",
            "S SYN+ACK @300",
            "C ACK @600",
            "C ACK+data @600",
            "S ACK+data @900",
            "C ACK @1400",
            "S ACK+data @1700",
            "S ACK+data+FIN @1700",
            "C ACK @2000",
            "C ACK+FIN @2000",
            "S ACK @2300",
        ]
    );
    assert_eq!(r.done, Some(3 * RTT + 200 * MS));
    // T/TCP: the SYN-ACK carries the first segment; a BSD T/TCP client delays the ACK of a
    // SYN-ACK that carries data (and no FIN), as of any data: 2 RTT + the ACK delay (the
    // thesis' analysis counts 2 RTT), 6 packets.
    let r = exchange(cfg(true, false), cfg(true, false), 3 * MSS);
    assert_eq!(
        r.lines(),
        [
            "C SYN+data+FIN @0",
            "S SYN+ACK+data @300",
            "C ACK @800",
            "S ACK+data @1100",
            "S ACK+data+FIN @1100",
            "C ACK @1400",
        ]
    );
    assert_eq!(r.done, Some(2 * RTT + 200 * MS));
    // 4KSS: the whole reply in the first flight (2 RTT); with T/TCP as well, 1 RTT.
    let r = exchange(cfg(false, true), cfg(false, true), 3 * MSS);
    assert_eq!(r.done, Some(2 * RTT));
    assert_eq!(r.trace.len(), 11);
    let r = exchange(cfg(true, true), cfg(true, true), 3 * MSS);
    assert_eq!(
        r.lines(),
        [
            "C SYN+data+FIN @0",
            "S SYN+ACK+data @300",
            "S ACK+data @300",
            "S ACK+data+FIN @300",
            // The second segment completes an ACK-every-two; the FIN is ACKed at once.
            "C ACK @600",
            "C ACK @600",
        ]
    );
    assert_eq!(r.done, Some(RTT));
}

#[test]
fn ttcp_saves_five_packets_a_transfer() {
    // SYN, SYN-ACK, the handshake's ACK, the client's separate FIN and the server's ACK of it.
    for segments in [1, 2, 3, 5, 10, 30] {
        let reply = segments * MSS;
        let tcp = exchange(cfg(false, false), cfg(false, false), reply);
        let ttcp = exchange(cfg(true, false), cfg(true, false), reply);
        assert_eq!(
            tcp.trace.len(),
            ttcp.trace.len() + 5,
            "{segments} segments: {:?} vs {:?}",
            tcp.lines(),
            ttcp.lines()
        );
    }
}

#[test]
fn ttcp_syn_ack_waits_for_the_reply_at_most_the_ack_delay() {
    // A server application that does not answer: the SYN-ACK (acknowledging the request and
    // FIN) leaves alone when the delayed-ACK timer fires.
    let r = exchange_with(
        cfg(true, false),
        cfg(true, false),
        1000,
        RTT / 2,
        false,
        true,
    );
    assert_eq!(r.lines()[..2], ["C SYN+data+FIN @0", "S SYN+ACK @500"]);
    assert_eq!(r.done, None);
}

#[test]
fn ttcp_without_a_tao_cache_entry_takes_the_three_way_handshake() {
    // First contact (RFC 1644 §3.3): the SYN-ACK acknowledges only the SYN; the request and
    // FIN wait for the handshake; then the server's kernel ACKs them and the reply follows.
    let r = exchange_with(
        cfg(true, false),
        cfg(true, false),
        1000,
        RTT / 2,
        true,
        false,
    );
    assert_eq!(
        r.lines(),
        [
            "C SYN+data+FIN @0",
            "S SYN+ACK @300",
            "C ACK @600",
            "S ACK @900",
            "S ACK+data+FIN @900",
            "C ACK @1200",
        ]
    );
    assert_eq!(r.done, Some(2 * RTT));
    assert_eq!(r.client.stats().retransmitted_segments, 0);
    assert_eq!(r.server.stats().data_bytes_received, 300);
}

#[test]
fn ttcp_needs_both_ends() {
    // A T/TCP client to a standard server: the server accepts the data on the SYN but waits
    // for the handshake before replying (2 RTT for one segment, as standard TCP).
    let r = exchange(cfg(true, false), cfg(false, false), 1000);
    assert_eq!(
        r.lines(),
        [
            "C SYN+data+FIN @0",
            "S SYN+ACK @300",
            "C ACK @600",
            "S ACK+data+FIN @900",
            "C ACK @1200",
        ]
    );
    assert_eq!(r.done, Some(2 * RTT));
    // A standard client to a T/TCP server: no data on the SYN, so no TAO shortcut.
    let r = exchange(cfg(false, false), cfg(true, false), 1000);
    assert_eq!(r.done, Some(2 * RTT));
    assert_eq!(r.trace.len(), 8);
}

#[test]
fn ttcp_syn_ack_goes_at_once_after_a_syn_without_fin() {
    // A T/TCP client that keeps its side open (no MSG_EOF): the server's SYN-ACK is not held,
    // so it leaves before the application has answered; the reply's first (full) segment
    // follows within the initial window, without waiting for the handshake. (A short last
    // segment would wait: Nagle, with the SYN unacknowledged.)
    let mut a = TcpConnection::new_active(0, cfg(true, false));
    let mut b = TcpConnection::new_passive(0, cfg(true, false));
    a.write(300);
    let syn = a.poll_segment(0).expect("SYN");
    assert_eq!(describe_tcp(&syn), "SYN+data");
    b.on_segment(RTT / 2, &syn);
    let syn_ack = b.poll_segment(RTT / 2).expect("SYN-ACK at once");
    assert_eq!(describe_tcp(&syn_ack), "SYN+ACK");
    assert_eq!(syn_ack.ack, 301);
    assert_eq!(b.read(u64::MAX), 300);
    b.write(2 * MSS);
    let reply = b
        .poll_segment(RTT / 2)
        .expect("reply before the handshake's ACK");
    assert_eq!(describe_tcp(&reply), "ACK+data");
    assert_eq!(u64::from(reply.len), MSS);
    assert!(b.poll_segment(RTT / 2).is_none());
}
