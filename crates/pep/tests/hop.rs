//! The hop driver end to end on loopback: a terminal and a gateway hop, with and without the
//! emulated GEO link between them; bytes arrive exactly, both ways, and half-close passes.

mod common;

use common::{gateway_hop, hop_config, link_to, pattern, read_hop_stream, terminal_hop};

use linkem::Profile;
use pep::hop::{Hop, HopConfig, HopStream, StreamEvent};
use pep::keys::generate_keypair;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::UdpSocket;

async fn read_all(s: &mut HopStream) -> Result<Vec<u8>, String> {
    match read_hop_stream(s).await {
        (got, Some(StreamEvent::Finished)) => Ok(got),
        (_, Some(StreamEvent::Failed(e))) => Err(e.to_string()),
        (_, Some(StreamEvent::Data(_))) => unreachable!("data is read, not returned"),
        (_, None) => Err("hop gone".into()),
    }
}

fn cfg(seed: u64) -> HopConfig {
    hop_config(seed, 1 << 20)
}

/// Starts a gateway hop; returns it and its address.
async fn gateway(
    terminal_key: pep::keys::PublicKey,
    gw_key: pep::keys::PrivateKey,
) -> (Hop, SocketAddr) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let hop = gateway_hop(sock, gw_key, [terminal_key], 9, cfg(2));
    let addr = hop.local_addr();
    (hop, addr)
}

async fn exchange(
    via: Option<Profile>,
    up: usize,
    down: usize,
) -> (Vec<u8>, Vec<u8>, Option<linkem::EmulatorStats>) {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (mut gw, gw_addr) = gateway(tp, gk).await;
    let (emu, target) = link_to(gw_addr, via, 5).await;
    let term = terminal_hop(tk, gp, target, cfg(1)).await;
    let up_data = pattern(1, up);
    let down_data = pattern(2, down);
    let server = {
        let down_data = down_data.clone();
        tokio::spawn(async move {
            let mut s = gw.accept().await.expect("a stream arrives");
            let got = read_all(&mut s).await.expect("upload completes");
            s.write(&down_data).await.unwrap();
            s.shutdown().await;
            // Keep the gateway hop alive until the terminal has everything.
            tokio::time::sleep(Duration::from_secs(3)).await;
            (got, gw)
        })
    };
    let mut s = term.open(b"hello".to_vec()).await.unwrap();
    s.write(&up_data).await.unwrap();
    s.shutdown().await;
    let got_down = read_all(&mut s).await.expect("download completes");
    let (got_up, _gw) = server.await.unwrap();
    let stats = match emu {
        Some(e) => Some(e.shutdown().await),
        None => None,
    };
    let mut want_up = b"hello".to_vec();
    want_up.extend_from_slice(&up_data);
    assert_eq!(got_up.len(), want_up.len());
    assert!(got_up == want_up, "upload corrupted");
    assert!(got_down == down_data, "download corrupted");
    (got_up, got_down, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cross_the_hop_both_ways_on_loopback() {
    tokio::time::timeout(Duration::from_secs(60), exchange(None, 1 << 20, 2 << 20))
        .await
        .expect("in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cross_an_emulated_geo_link() {
    let (_, _, stats) = tokio::time::timeout(
        Duration::from_secs(120),
        exchange(Some(Profile::Geo), 256 << 10, 5 << 20),
    )
    .await
    .expect("in time");
    let s = stats.unwrap();
    eprintln!(
        "emulated link: up {} bytes, down {} bytes",
        s.up.sent_bytes, s.down.sent_bytes
    );
    assert!(s.down.sent_bytes > 5 << 20);
    // The return channel carries the upload plus feedback: well under the download's size.
    assert!(
        s.up.sent_bytes < (256 << 10) + (5 << 20) / 20,
        "up {} bytes",
        s.up.sent_bytes
    );
}

/// A stream dropped without a half-close or an abort is aborted, so neither side keeps its
/// connection; dropping a `Hop` resets its connections, so the other side's streams fail at
/// once instead of waiting for the dead-peer timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_streams_and_hops_end_their_connections() {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (mut gw, gw_addr) = gateway(tp, gk).await;
    let term = terminal_hop(tk, gp, gw_addr, cfg(1)).await;
    let gw_monitor = gw.monitor();

    // A forgotten stream.
    let s = term.open(b"x".to_vec()).await.unwrap();
    let mut far = gw.accept().await.expect("a stream arrives");
    drop(s);
    let t0 = std::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), read_all(&mut far))
        .await
        .expect("the far side learns of the drop within seconds");
    assert!(ended.is_err(), "a dropped stream is a reset, not an end");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let status = term.status().await.unwrap();
    assert!(status.streams.is_empty(), "the terminal kept the stream");

    // A dropped hop.
    let mut s = term.open(b"y".to_vec()).await.unwrap();
    let _far = gw.accept().await.expect("a stream arrives");
    drop(gw);
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), read_all(&mut s))
        .await
        .expect("the terminal learns of the gateway's end within seconds");
    assert!(r.is_err(), "the stream must fail, got a clean end");
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The gateway's task has stopped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        gw_monitor.status().await.is_none(),
        "the gateway hop still runs"
    );
}

/// The smallest legal STP buffers (one SD to send, two to receive) and a first piece (stream header plus early
/// data) many times their size: every byte still arrives, in order, and the stream ends cleanly.
/// The part of the first piece that does not fit the send buffer waits in the stream's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_piece_larger_than_the_send_buffer_is_queued_not_cut() {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let tiny = |seed| {
        let mut c = cfg(seed);
        let mss = stp::Config::default().max_payload() as u32;
        c.endpoint.connection.send_buffer_bytes = mss;
        c.endpoint.connection.recv_buffer_bytes = 2 * mss;
        c.endpoint
            .connection
            .validate()
            .expect("one SD is a legal buffer size");
        c
    };
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut gw = gateway_hop(sock, gk, [tp], 9, tiny(2));
    let term = terminal_hop(tk, gp, gw.local_addr(), tiny(1)).await;
    let first = pattern(3, 40_000);
    let rest = pattern(4, 20_000);
    let s = term.open(first.clone()).await.unwrap();
    s.write(&rest).await.unwrap();
    s.shutdown().await;
    let mut far = gw.accept().await.expect("a stream arrives");
    let got = tokio::time::timeout(Duration::from_secs(20), read_all(&mut far))
        .await
        .expect("the upload completes within 20 s")
        .expect("the stream ends cleanly");
    let mut want = first;
    want.extend_from_slice(&rest);
    assert_eq!(got.len(), want.len(), "bytes were lost");
    assert!(got == want, "bytes arrived out of order or corrupted");
}

/// A burst of opens while the gateway's relay takes none (on a loaded machine it falls behind a
/// thousand parallel opens): the streams wait in the gateway's accept queue (the STP endpoint's
/// `max_accept_queue`) and each is served once the relay takes it, none reset as "gateway
/// overloaded". The queue was once 256 streams for the whole hop, and `satstp bench gateway
/// --terminals 100 --parallel 1000` failed with SOCKS reply 1 that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_opens_waits_for_the_relay_instead_of_being_reset() {
    const N: usize = 400;
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (mut gw, gw_addr) = gateway(tp, gk).await;
    let term = terminal_hop(tk, gp, gw_addr, cfg(1)).await;
    let mut streams = Vec::with_capacity(N);
    for i in 0..N {
        streams.push(term.open(format!("open {i}").into_bytes()).await.unwrap());
    }
    // Every open reaches the gateway (the terminal's open budget lets 500 a second through)
    // while nothing accepts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..N {
        let s = tokio::time::timeout(Duration::from_secs(10), gw.accept())
            .await
            .unwrap_or_else(|_| panic!("stream {i} of {N} did not arrive"))
            .expect("the hop runs");
        s.write(b"ok").await.unwrap();
        s.shutdown().await;
    }
    for (i, s) in streams.iter_mut().enumerate() {
        let r = tokio::time::timeout(Duration::from_secs(10), read_all(s))
            .await
            .unwrap_or_else(|_| panic!("stream {i}: no answer"));
        let got = r.unwrap_or_else(|e| panic!("stream {i} of {N} failed: {e}"));
        assert_eq!(got, b"ok", "stream {i}");
    }
}
