//! What a split connection promises its ends (issue 4, "Semantics end to end"), checked through
//! the real pieces on loopback: client → terminal (SOCKS5 or HTTP CONNECT) → encrypted hop →
//! gateway → server. Half-close both ways, resets both ways, refused and denied connects over
//! HTTP CONNECT, a terminal with an unknown key, tampered datagrams, 200 concurrent connections
//! and a gateway restart. Tests that need data in flight when something happens use the `leo`
//! profile of the link emulator; the others run without emulated delay.

mod common;

use common::{
    gateway_hop, hop_config, link_to, loopback_policy, pattern, relay_incoming, socks_handshake,
    terminal_hop,
};

use linkem::Profile;
use pep::hop::{Hop, HopStatus, StreamEvent};
use pep::keys::{generate_keypair, PrivateKey, PublicKey};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::oneshot;

/// Starts a gateway hop on `sock` serving the `terminals`, relaying every stream it accepts as
/// the gateway daemon does. The hop is returned (its `incoming` taken) so tests can read its
/// status.
fn start_gateway(sock: UdpSocket, key: PrivateKey, terminals: Vec<PublicKey>) -> Arc<Hop> {
    let mut hop = gateway_hop(sock, key, terminals, 3, hop_config(2, 1 << 20));
    relay_incoming(&mut hop, loopback_policy());
    Arc::new(hop)
}

struct Terminal {
    hop: Arc<Hop>,
    socks: SocketAddr,
    http: SocketAddr,
}

/// A terminal hop towards `gateway` with SOCKS5 and HTTP CONNECT listeners.
async fn start_terminal(key: PrivateKey, gateway_key: PublicKey, gateway: SocketAddr) -> Terminal {
    let t = common::terminal_stack(
        key,
        gateway_key,
        gateway,
        hop_config(1, 1 << 20),
        false,
        true,
        pep::ops::OpsConfig::unlimited(),
    )
    .await;
    Terminal {
        hop: Arc::clone(t.hop()),
        socks: t.socks_addr().unwrap(),
        http: t.http_connect_addr().unwrap(),
    }
}

struct Setup {
    gateway: Arc<Hop>,
    terminal: Terminal,
    _emu: Option<linkem::EmulatorHandle>,
}

/// A gateway and a terminal that knows it, with `profile`'s emulated link between them.
async fn setup(profile: Option<Profile>) -> Setup {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let gateway = start_gateway(sock, gk, vec![tp]);
    let (emu, to) = link_to(gateway.local_addr(), profile, 6).await;
    let terminal = start_terminal(tk, gp, to).await;
    Setup {
        gateway,
        terminal,
        _emu: emu,
    }
}

/// SOCKS5 CONNECT to `dest` (IPv4); the stream and the reply code.
async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> io::Result<(TcpStream, u8)> {
    let s = TcpStream::connect(proxy).await?;
    socks_handshake(s, dest).await
}

/// SOCKS5 CONNECT that must succeed.
async fn connect_ok(proxy: SocketAddr, dest: SocketAddr) -> TcpStream {
    let (s, code) = tokio::time::timeout(Duration::from_secs(20), socks_connect(proxy, dest))
        .await
        .expect("SOCKS reply in time")
        .expect("SOCKS exchange");
    assert_eq!(code, 0, "SOCKS reply");
    s
}

/// Makes the next close of `s` a reset (RST) instead of a FIN.
fn set_reset_on_close(s: &TcpStream) {
    socket2::SockRef::from(s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// Reads until end of stream or an error; what was read and how it ended.
async fn read_until_end(s: &mut TcpStream, got: &mut Vec<u8>) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// Waits until neither hop holds a stream any more: both STP connections closed and were
/// forgotten, nothing leaks.
async fn assert_no_streams_left(hops: &[&Hop]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut left = Vec::new();
        for h in hops {
            let st: HopStatus = h.status().await.expect("hop alive");
            left.push(st.streams.len());
        }
        if left.iter().all(|&n| n == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "streams still open on the hops: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server that accepts one connection and hands it to `f`; `f`'s result comes back through
/// the join handle.
async fn one_shot_server<F, Fut, T>(f: F) -> (SocketAddr, tokio::task::JoinHandle<T>)
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send,
    T: Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        f(s).await
    });
    (addr, h)
}

/// A server for one connection that reads the request to its end, only then sends `answer`
/// and closes; the handle yields the request.
async fn answer_after_request(answer: Vec<u8>) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
    one_shot_server(move |mut s| async move {
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(&answer).await.unwrap();
        s.shutdown().await.unwrap();
        got
    })
    .await
}

/// The client sends its request and half-closes at once (with the request still in flight on
/// the emulated link); the server reads to the end, only then answers, 3 MB, and closes. The
/// client, which starts reading late so the terminal's buffers towards it fill, gets the whole
/// answer and a clean end of stream; the server got the whole request before its EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_half_close_still_receives_everything_after() {
    let st = setup(Some(Profile::Leo)).await;
    let request = pattern(10, 1 << 20);
    let answer = pattern(11, 3 << 20);
    let (server, served) = answer_after_request(answer.clone()).await;
    let mut c = connect_ok(st.terminal.socks, server).await;
    c.write_all(&request).await.unwrap();
    c.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut got = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(30), read_until_end(&mut c, &mut got))
        .await
        .expect("answer in time");
    assert!(
        end.is_ok(),
        "the answer ended with {end:?} after {} of {} bytes",
        got.len(),
        answer.len()
    );
    assert_eq!(got.len(), answer.len());
    assert!(got == answer, "answer corrupted");
    let at_server = tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("server done")
        .unwrap();
    assert_eq!(
        at_server.len(),
        request.len(),
        "the server's EOF came before all of the request"
    );
    assert!(at_server == request, "request corrupted");
    drop(c);
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// A client that half-closes at once and then reads slowly (a small receive buffer, and a
/// pause before reading): the whole 6 MB answer and the server's close reach the terminal and
/// the STP connection finishes while most of the answer still waits at the terminal. The
/// client must still get every byte and a clean end of stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_gets_the_whole_answer_after_the_hop_closed() {
    let st = setup(None).await;
    let answer = pattern(12, 6 << 20);
    let (server, served) = answer_after_request(answer.clone()).await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(8 << 10).unwrap();
    let c = sock.connect(st.terminal.socks).await.unwrap();
    let (mut c, code) = socks_handshake(c, server).await.unwrap();
    assert_eq!(code, 0);
    c.write_all(b"all of it, please").await.unwrap();
    c.shutdown().await.unwrap();
    assert_eq!(served.await.unwrap(), b"all of it, please");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Read slowly to the end: the terminal's socket buffer towards us stays full.
    let slowly = async {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match c.read(&mut buf).await {
                Ok(0) => return (got, Ok(())),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => return (got, Err(e)),
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    };
    let (got, end) = tokio::time::timeout(Duration::from_secs(30), slowly)
        .await
        .expect("answer in time");
    assert!(
        end.is_ok(),
        "the answer ended with {end:?} after {} of {} bytes",
        got.len(),
        answer.len()
    );
    assert!(
        got == answer,
        "answer: {} bytes, corrupted or cut",
        got.len()
    );
    drop(c);
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// The same at the hop itself: the gateway's side writes 3 MB and ends; the terminal's side
/// ended its own direction at once and reads slowly, so the STP connection closes and is freed
/// while the last chunks still wait for the reader. Every byte and then the end must come, not
/// a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_hop_reader_gets_every_byte_and_the_end() {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut gateway = gateway_hop(sock, gk, [tp], 9, hop_config(2, 1 << 20));
    let terminal = terminal_hop(tk, gp, gateway.local_addr(), hop_config(1, 1 << 20)).await;
    let data = pattern(13, 3 << 20);
    let mut s = terminal.open(b"x".to_vec()).await.unwrap();
    s.shutdown().await;
    let mut g = tokio::time::timeout(Duration::from_secs(10), gateway.accept())
        .await
        .expect("stream in time")
        .unwrap();
    g.write(&data).await.unwrap();
    g.shutdown().await;
    let mut first = Vec::new();
    loop {
        match g.recv().await {
            Some(StreamEvent::Data(b)) => first.extend_from_slice(&b),
            Some(StreamEvent::Finished) => break,
            other => panic!("gateway side: {other:?}"),
        }
    }
    assert_eq!(first, b"x");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let slowly = async {
        let mut got = Vec::new();
        loop {
            match s.recv().await {
                Some(StreamEvent::Data(b)) => got.extend_from_slice(&b),
                Some(StreamEvent::Finished) => return Ok(got),
                other => return Err((got.len(), other)),
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(20), slowly)
        .await
        .expect("the end in time");
    match got {
        Ok(got) => assert!(got == data, "{} bytes, corrupted or cut", got.len()),
        Err((n, ev)) => panic!("after {n} of {} bytes: {ev:?}", data.len()),
    }
    drop(gateway);
}

/// The server greets and half-closes at once; the client reads the greeting to its end, then
/// sends 2 MB and half-closes; the server receives all of it. The connection then closes
/// cleanly at both ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_half_close_still_receives_everything_after() {
    let st = setup(Some(Profile::Leo)).await;
    let greeting = pattern(20, 512 << 10);
    let upload = pattern(21, 2 << 20);
    let (server, served) = one_shot_server({
        let greeting = greeting.clone();
        move |mut s| async move {
            s.write_all(&greeting).await.unwrap();
            s.shutdown().await.unwrap();
            let mut got = Vec::new();
            let end = read_until_end(&mut s, &mut got).await;
            (got, end)
        }
    })
    .await;
    let mut c = connect_ok(st.terminal.socks, server).await;
    let mut got = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(30), read_until_end(&mut c, &mut got))
        .await
        .expect("greeting in time");
    assert!(end.is_ok(), "the greeting ended with {end:?}");
    assert!(
        got == greeting,
        "greeting: {} bytes, corrupted or cut",
        got.len()
    );
    // The server's FIN arrived; our direction is still open.
    c.write_all(&upload).await.unwrap();
    c.shutdown().await.unwrap();
    let (at_server, server_end) = tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("upload in time")
        .unwrap();
    assert!(server_end.is_ok(), "upload ended with {server_end:?}");
    assert_eq!(at_server.len(), upload.len());
    assert!(at_server == upload, "upload corrupted");
    let mut rest = [0u8; 1];
    assert_eq!(c.read(&mut rest).await.unwrap(), 0, "still a clean end");
    drop(c);
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// The server sends, waits until the client has some of it, sends more and resets the
/// connection (SO_LINGER 0). The client must see ECONNRESET, not an end of stream that would
/// make the cut transfer look complete, and what it got before is uncorrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_reset_reaches_the_client_as_a_reset() {
    let st = setup(None).await;
    let data = pattern(30, 512 << 10);
    let (server, served) = one_shot_server({
        let data = data.clone();
        move |mut s| async move {
            s.write_all(&data[..256 << 10]).await.unwrap();
            let mut k = [0u8; 1];
            s.read_exact(&mut k).await.unwrap();
            s.write_all(&data[256 << 10..]).await.unwrap();
            set_reset_on_close(&s);
            drop(s);
        }
    })
    .await;
    let mut c = connect_ok(st.terminal.socks, server).await;
    let mut got = vec![0u8; 256 << 10];
    c.read_exact(&mut got).await.unwrap();
    c.write_all(b"k").await.unwrap();
    served.await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(20), read_until_end(&mut c, &mut got))
        .await
        .expect("the reset must reach the client, not leave it hanging");
    match end {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}"),
        Ok(()) => panic!(
            "clean end of stream after {} bytes: a reset passed as a complete transfer",
            got.len()
        ),
    }
    assert!(
        got.len() <= data.len() && got == data[..got.len()],
        "data corrupted"
    );
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// The client sends a little, then resets its connection; the server, waiting for more, must
/// see ECONNRESET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reset_reaches_the_server_as_a_reset() {
    let st = setup(None).await;
    let (server, served) = one_shot_server(|mut s| async move {
        s.write_all(b"ready").await.unwrap();
        let mut got = Vec::new();
        let end =
            tokio::time::timeout(Duration::from_secs(20), read_until_end(&mut s, &mut got)).await;
        (got, end)
    })
    .await;
    let mut c = connect_ok(st.terminal.socks, server).await;
    let mut ready = [0u8; 5];
    c.read_exact(&mut ready).await.unwrap();
    assert_eq!(&ready, b"ready");
    c.write_all(b"hello").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    set_reset_on_close(&c);
    drop(c);
    let (got, end) = served.await.unwrap();
    let end = end.expect("the reset must reach the server, not leave it hanging");
    match end {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}"),
        Ok(()) => panic!("the server saw a clean end of stream instead of the client's reset"),
    }
    assert_eq!(got, b"hello");
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// `CONNECT authority` (the kit's HTTP CONNECT client) to an HTTP CONNECT listener, the reply
/// within 20 s; the connection and the reply head.
async fn http_connect(proxy: SocketAddr, authority: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let exchange = loadgen::http_connect::handshake(&mut s, authority);
    let (_, head) = tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("reply in time")
        .unwrap();
    (s, head)
}

/// Over HTTP CONNECT a refused connect is `502`, a destination the gateway's policy denies
/// `403` (and neither leaves a stream behind on either hop), and a working one `200` with bytes
/// passing both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connect_refused_is_502_and_denied_is_403() {
    let st = setup(None).await;
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (_, head) = http_connect(st.terminal.http, &closed.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 502 "), "refused: {head:?}");
    let (_, head) = http_connect(st.terminal.http, "192.0.2.1:80").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "denied: {head:?}");
    // Neither failed stream lingers on a hop.
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;

    let (server, served) = one_shot_server(|mut s| async move {
        let mut q = [0u8; 4];
        s.read_exact(&mut q).await.unwrap();
        s.write_all(b"pong").await.unwrap();
        q
    })
    .await;
    let (mut c, head) = http_connect(st.terminal.http, &server.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "allowed: {head:?}");
    c.write_all(b"ping").await.unwrap();
    let mut a = [0u8; 4];
    c.read_exact(&mut a).await.unwrap();
    assert_eq!(&a, b"pong");
    assert_eq!(&served.await.unwrap(), b"ping");
}

/// A terminal whose key the gateway does not list gets no connection; the gateway counts its
/// initiations as `unknown_key` and creates no tunnel session, no STP connection and no server
/// connection. A listed terminal on the same gateway works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_terminal_key_gets_nothing_and_creates_no_state() {
    let (listed_k, listed_p) = generate_keypair().unwrap();
    let (stranger_k, _) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let gateway = start_gateway(sock, gk, vec![listed_p]);
    let accepted = Arc::new(AtomicU64::new(0));
    let server = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let _ = s.write_all(b"hi").await;
                });
            }
        });
        addr
    };

    let stranger = start_terminal(stranger_k, gp, gateway.local_addr()).await;
    match tokio::time::timeout(
        Duration::from_secs(4),
        socks_connect(stranger.socks, server),
    )
    .await
    {
        Err(_) => {} // no answer: the connection never came up
        Ok(Ok((_, code))) => assert_ne!(code, 0, "an unlisted terminal got a connection"),
        Ok(Err(_)) => {} // the terminal gave up on the client
    }
    let g = gateway.status().await.unwrap();
    assert!(
        g.tunnel.unknown_key >= 1,
        "initiations not counted: {:?}",
        g.tunnel
    );
    assert_eq!(g.tunnel.handshakes, 0, "a session was created");
    assert_eq!(g.tunnel.data_opened, 0);
    let endpoint = &g.stp.as_ref().expect("STP figures").endpoint;
    assert_eq!(endpoint.datagrams_received, 0, "STP saw datagrams");
    assert_eq!(endpoint.accepted, 0);
    assert!(g.streams.is_empty());
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "the server was reached");
    let t = stranger.hop.status().await.unwrap();
    assert!(!t.established, "the stranger's tunnel came up");

    // The same gateway serves a listed terminal.
    let listed = start_terminal(listed_k, gp, gateway.local_addr()).await;
    let mut c = connect_ok(listed.socks, server).await;
    let mut hi = [0u8; 2];
    c.read_exact(&mut hi).await.unwrap();
    assert_eq!(&hi, b"hi");
    let g = gateway.status().await.unwrap();
    assert_eq!(g.tunnel.handshakes, 1);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// A UDP forwarder between a terminal and its gateway that keeps copies of the terminal's data
/// datagrams and, every `tamper_every`-th one, first sends the gateway a copy with one
/// ciphertext bit flipped (an on-path forgery, from the terminal's own address).
struct Tap {
    /// Where the terminal sends.
    addr: SocketAddr,
    captured: Arc<Mutex<Vec<Vec<u8>>>>,
    tampered: Arc<AtomicU64>,
}

const TUNNEL_DATA: u8 = 3;

async fn tap(gateway: SocketAddr, tamper_every: u64) -> Tap {
    let near = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let far = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = near.local_addr().unwrap();
    let captured = Arc::new(Mutex::new(Vec::new()));
    let tampered = Arc::new(AtomicU64::new(0));
    let terminal: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    {
        let (near, far, captured, tampered, terminal) = (
            Arc::clone(&near),
            Arc::clone(&far),
            Arc::clone(&captured),
            Arc::clone(&tampered),
            Arc::clone(&terminal),
        );
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            let mut until_tamper = tamper_every;
            while let Ok((n, from)) = near.recv_from(&mut buf).await {
                *terminal.lock().unwrap() = Some(from);
                let d = &buf[..n];
                if d.first() == Some(&TUNNEL_DATA) && n > 13 + 16 {
                    until_tamper -= 1;
                    if until_tamper == 0 {
                        until_tamper = tamper_every;
                        let mut bad = d.to_vec();
                        bad[n - 1] ^= 0x40;
                        let _ = far.send_to(&bad, gateway).await;
                        tampered.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _ = far.send_to(d, gateway).await;
                // Kept only once forwarded, so a copy sent later is a replay.
                if d.first() == Some(&TUNNEL_DATA) {
                    let mut c = captured.lock().unwrap();
                    if c.len() < 64 {
                        c.push(d.to_vec());
                    }
                }
            }
        });
    }
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, _)) = far.recv_from(&mut buf).await {
            let to = *terminal.lock().unwrap();
            if let Some(to) = to {
                let _ = near.send_to(&buf[..n], to).await;
            }
        }
    });
    Tap {
        addr,
        captured,
        tampered,
    }
}

/// The origin for exchanges: the kit's.
async fn exchange_server() -> SocketAddr {
    common::origin().await
}

/// One exchange through SOCKS on one connection: `up` bytes of object `seed` posted (the origin
/// checks them), then object `seed + 1` of `down` bytes fetched with `Connection: close` (checked
/// here, and the origin's close after it).
async fn exchange(proxy: SocketAddr, server: SocketAddr, seed: u64, up: usize, down: usize) {
    let mut c = loadgen::http::HttpConn::new(connect_ok(proxy, server).await);
    c.post(seed, up as u64)
        .await
        .unwrap_or_else(|e| panic!("exchange {seed}: upload: {e}"));
    c.get_once(seed + 1, down as u64)
        .await
        .unwrap_or_else(|e| panic!("exchange {seed}: download: {e}"));
}

/// Modified and forged datagrams reach the gateway while a transfer runs, on the path and from
/// another address: every one is dropped and counted under its reason, and the transfer
/// finishes byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_datagrams_are_dropped_counted_and_harmless() {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let gateway = start_gateway(sock, gk, vec![tp]);
    let tap = tap(gateway.local_addr(), 40).await;
    let terminal = start_terminal(tk, gp, tap.addr).await;
    let server = exchange_server().await;
    let before = gateway.status().await.unwrap().tunnel;

    let transfer = tokio::spawn(exchange(terminal.socks, server, 40, 3 << 20, 3 << 20));
    // Wait for real data datagrams, then forge from a socket of our own.
    let deadline = Instant::now() + Duration::from_secs(10);
    let sample = loop {
        if let Some(d) = tap.captured.lock().unwrap().last().cloned() {
            break d;
        }
        assert!(Instant::now() < deadline, "no data datagram seen");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let attacker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = gateway.local_addr();
    let nonce = u64::from_be_bytes(sample[5..13].try_into().unwrap());
    const EACH: u64 = 10;
    for i in 0..EACH {
        // A real datagram under a fresh nonce with a flipped ciphertext bit.
        let mut forged = sample.clone();
        forged[5..13].copy_from_slice(&(nonce + 1_000_000 + i).to_be_bytes());
        forged[20] ^= 1;
        attacker.send_to(&forged, to).await.unwrap();
        // Garbage behind a valid header (data type, the session's index, a fresh nonce).
        let mut garbage = sample[..5].to_vec();
        garbage.extend_from_slice(&(nonce + 2_000_000 + i).to_be_bytes());
        garbage.extend_from_slice(&pattern(i, 200));
        attacker.send_to(&garbage, to).await.unwrap();
        // An exact copy: a replay.
        attacker.send_to(&sample, to).await.unwrap();
        // Too short to hold a tag.
        attacker.send_to(&sample[..16], to).await.unwrap();
        // An index no session has.
        let mut stray = sample.clone();
        stray[1..5].copy_from_slice(
            &(u32::from_be_bytes(sample[1..5].try_into().unwrap()) ^ 0x5a5a_0000).to_be_bytes(),
        );
        attacker.send_to(&stray, to).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), transfer)
        .await
        .expect("transfer in time")
        .unwrap();

    let after = gateway.status().await.unwrap().tunnel;
    let on_path = tap.tampered.load(Ordering::SeqCst);
    assert!(on_path > 0, "the tap tampered with nothing");
    let auth = after.auth_failures - before.auth_failures;
    assert!(
        auth >= on_path + 2 * EACH,
        "auth failures {auth}, expected at least {}",
        on_path + 2 * EACH
    );
    assert!(after.replays - before.replays >= EACH, "{after:?}");
    assert!(after.malformed - before.malformed >= EACH, "{after:?}");
    assert!(
        after.unknown_session - before.unknown_session >= EACH,
        "{after:?}"
    );
    assert_eq!(after.handshakes, 1, "the forgeries made a session");
}

/// 200 connections at once through one terminal and gateway, each a different exchange (up to
/// 30 KB up and 40 KB down), all byte-exact, each its own STP connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connections_are_byte_exact() {
    let st = setup(None).await;
    let server = exchange_server().await;
    let proxy = st.terminal.socks;
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            let up = 1 + (i as usize * 7919) % 30_000;
            let down = 1 + (i as usize * 104_729) % 40_000;
            tokio::spawn(exchange(proxy, server, 1000 + 2 * i, up, down))
        })
        .collect();
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("200 exchanges in time");
    let g = st.gateway.status().await.unwrap();
    let endpoint = &g.stp.as_ref().expect("STP figures").endpoint;
    assert_eq!(endpoint.accepted, 200, "one STP connection per client");
    assert_no_streams_left(&[&st.terminal.hop, &st.gateway]).await;
}

/// A gateway in a runtime of its own, on its own thread, so it can be stopped as a whole: its
/// hop task, socket and relays go away as a crashed process's would.
struct GatewayProcess {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GatewayProcess {
    fn start(sock: std::net::UdpSocket, key: PrivateKey, terminal: PublicKey) -> GatewayProcess {
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                sock.set_nonblocking(true).unwrap();
                let sock = UdpSocket::from_std(sock).unwrap();
                let _hop = start_gateway(sock, key, vec![terminal]);
                let _ = stopped.await;
            });
            // Dropping the runtime drops every task, the hop's socket with it.
        });
        GatewayProcess {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    async fn kill(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            tokio::task::spawn_blocking(move || t.join().unwrap())
                .await
                .unwrap();
        }
    }
}

/// While a download runs, the gateway dies and a new one starts on the same address with the
/// same key. The running connection fails with a reset within a bounded time (it cannot be
/// carried on: the new gateway knows nothing of it), and a connection opened after the restart
/// works byte-exact once the terminal has re-handshaken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_restart_fails_old_connections_and_serves_new_ones() {
    let started = Instant::now();
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let gw_addr = sock.local_addr().unwrap();
    let first = GatewayProcess::start(sock, gk.clone(), tp);
    let terminal = start_terminal(tk, gp, gw_addr).await;
    let exchanges = exchange_server().await;
    // An endless download.
    let endless = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let chunk = pattern(50, 16 << 10);
                    while s.write_all(&chunk).await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                });
            }
        });
        addr
    };
    let mut old = connect_ok(terminal.socks, endless).await;
    let mut got = vec![0u8; 256 << 10];
    old.read_exact(&mut got).await.unwrap();
    let chunk = pattern(50, 16 << 10);
    assert!(
        got.chunks(16 << 10).all(|c| c == chunk),
        "download corrupted"
    );

    first.kill().await;
    let restarted_at = Instant::now();
    let sock = loop {
        match std::net::UdpSocket::bind(gw_addr) {
            Ok(s) => break s,
            Err(e) => {
                assert!(
                    restarted_at.elapsed() < Duration::from_secs(3),
                    "rebind: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let second = GatewayProcess::start(sock, gk, tp);

    let old_end = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        let end = loop {
            match old.read(&mut buf).await {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        (end, restarted_at.elapsed())
    });
    // A new connection after the restart: the first attempt works.
    tokio::time::timeout(
        Duration::from_secs(30),
        exchange(terminal.socks, exchanges, 60, 256 << 10, 512 << 10),
    )
    .await
    .expect("a new connection works within 30 s of the restart");
    let new_ok_after = restarted_at.elapsed();

    let (end, failed_after) = tokio::time::timeout(Duration::from_secs(40), old_end)
        .await
        .expect("the old connection must fail, not hang")
        .unwrap();
    match end {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}"),
        Ok(()) => panic!("the cut download ended with a clean end of stream"),
    }
    let t = terminal.hop.status().await.unwrap();
    assert!(t.handshakes_started >= 2, "no re-handshake");
    eprintln!(
        "gateway restart: new connection worked after {new_ok_after:?}, old one reset after \
         {failed_after:?}; {} handshakes; test took {:?}",
        t.handshakes_started,
        started.elapsed()
    );
    second.kill().await;
}
