//! The split-TCP hop end to end on loopback: SOCKS5 client → terminal → TCP hop → gateway →
//! local origin server. Byte-exact transfers both ways, half-close each way, an unknown terminal
//! key refused and counted, and a tampered byte on the hop killing only its own connection.

use crate::tests_common as common;

use crate::config::TcpOptions;
use crate::hop::tcp::{start_gateway, start_terminal, TcpHopConfig};
use crate::hop::AbortCode;
use crate::hop::Hop;
use crate::keys::{generate_keypair, PrivateKey, PublicKey};
use crate::socks::SocksAuth;
use common::{
    download_or_upload, fnv, loopback_policy, pattern, read_hop_stream, relay_incoming,
    socks_connect as socks_request, spawn_origin,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(60);

/// Origin server. Per connection, one command line:
/// - "D n": sends n pattern bytes, then closes;
/// - "U n": reads n bytes, answers their 8-byte FNV hash, closes;
/// - "E": reads to end of stream, then answers the hash of what it read and closes (the
///   client's half-close must arrive while the reply direction stays open);
/// - "F": sends "bye", half-closes, then reads to end of stream and reports what it read on
///   the test's channel (the client may still send after the server's half-close).
///
/// Counts accepted connections.
struct Origin {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    after_fin: mpsc::Receiver<Vec<u8>>,
}

async fn origin() -> Origin {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (tx, after_fin) = mpsc::channel(8);
    let count = Arc::clone(&accepted);
    let on_accept = move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    };
    spawn_origin(l, on_accept, move |mut r| {
        let tx = tx.clone();
        async move {
            match (r.cmd.as_str(), r.n) {
                ("D" | "U", Some(_)) => download_or_upload(r).await,
                ("E", None) => {
                    let mut got = Vec::new();
                    if r.conn.read_to_end(&mut got).await.is_ok() {
                        let mut reply = (got.len() as u64).to_be_bytes().to_vec();
                        reply.extend_from_slice(&fnv(&got).to_be_bytes());
                        let _ = r.conn.get_mut().write_all(&reply).await;
                        let _ = r.conn.get_mut().shutdown().await;
                    }
                }
                ("F", None) => {
                    let _ = r.conn.get_mut().write_all(b"bye").await;
                    let _ = r.conn.get_mut().shutdown().await;
                    let mut got = Vec::new();
                    if r.conn.read_to_end(&mut got).await.is_ok() {
                        let _ = tx.send(got).await;
                    }
                }
                _ => {}
            }
        }
    });
    Origin {
        addr,
        accepted,
        after_fin,
    }
}

fn hop_config() -> TcpHopConfig {
    TcpHopConfig {
        relay_buffer_bytes: 1 << 20,
        tuning: TcpOptions::default(),
        handshake_timeout: Duration::from_secs(10),
    }
}

/// A gateway on the TCP hop serving `allowed`, relaying to loopback; returns the hop (for its
/// status) and its address.
fn gateway(key: PrivateKey, allowed: Vec<PublicKey>) -> (Hop, SocketAddr) {
    let mut hop = start_gateway(
        "127.0.0.1:0".parse().unwrap(),
        key,
        None,
        allowed,
        hop_config(),
    )
    .unwrap();
    let addr = hop.local_addr();
    relay_incoming(&mut hop, loopback_policy());
    (hop, addr)
}

/// A terminal on the TCP hop towards `gateway` with a SOCKS5 listener; returns the listener's
/// address.
async fn terminal(
    key: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
) -> (SocketAddr, Arc<Hop>) {
    let c = hop_config();
    let mut o = crate::TerminalOptions::new(
        key,
        gateway,
        gateway_key,
        crate::stack::TerminalHop::Tcp {
            tuning: c.tuning,
            handshake_timeout: c.handshake_timeout,
        },
        c.relay_buffer_bytes,
    );
    o.socks = Some(crate::stack::SocksListener {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: SocksAuth::None,
        fast_open: false,
    });
    let t = crate::Terminal::start(o).await.unwrap();
    (t.socks_addr().unwrap(), Arc::clone(t.hop()))
}

/// SOCKS5 CONNECT to `dest`, the reply within [`T`]; returns the stream and the reply code.
async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> (TcpStream, u8) {
    tokio::time::timeout(T, socks_request(proxy, dest))
        .await
        .expect("SOCKS reply timed out")
}

async fn pair() -> (Hop, SocketAddr) {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (gw, gw_addr) = gateway(gk, vec![tp]);
    let (socks, _) = terminal(tk, gp, gw_addr).await;
    (gw, socks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_and_upload_byte_exact() {
    let o = origin().await;
    let (gw, socks) = pair().await;

    let down = 8 << 20;
    let (mut s, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let t0 = Instant::now();
    s.write_all(format!("D {down}\n").as_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(down);
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(got.len(), down);
    assert!(got == pattern(0, down), "download corrupted");
    eprintln!(
        "download {down} B over the TCP hop: {:.3} s = {:.0} Mbit/s",
        secs,
        down as f64 * 8.0 / secs / 1e6
    );

    let up = 4 << 20;
    let data = pattern(9, up);
    let (mut s, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let t0 = Instant::now();
    s.write_all(format!("U {up}\n").as_bytes()).await.unwrap();
    s.write_all(&data).await.unwrap();
    let mut h = [0u8; 8];
    tokio::time::timeout(T, s.read_exact(&mut h))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(u64::from_be_bytes(h), fnv(&data), "upload corrupted");
    eprintln!(
        "upload {up} B over the TCP hop: {:.3} s",
        t0.elapsed().as_secs_f64()
    );

    // The gateway saw two authenticated connections and every byte, sealed, on its socket.
    let st = gw.status().await.unwrap();
    assert_eq!(st.tunnel.handshakes, 2);
    assert_eq!(st.tunnel.unknown_key + st.tunnel.auth_failures, 0);
    assert!(st.bytes_sent > down as u64, "{}", st.bytes_sent);
    assert!(st.bytes_received > up as u64, "{}", st.bytes_received);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_passes_each_way() {
    let mut o = origin().await;
    let (_gw, socks) = pair().await;

    // Client → server FIN: the server reads to its end of stream and still answers.
    let (mut s, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let body = pattern(3, 300_000);
    s.write_all(b"E\n").await.unwrap();
    s.write_all(&body).await.unwrap();
    s.shutdown().await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut reply))
        .await
        .expect("no answer after the client's half-close")
        .unwrap();
    let mut want = (body.len() as u64).to_be_bytes().to_vec();
    want.extend_from_slice(&fnv(&body).to_be_bytes());
    assert_eq!(reply, want);

    // Server → client FIN: the client sees end of stream and can still send.
    let (mut s, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    s.write_all(b"F\n").await.unwrap();
    let mut got = [0u8; 3];
    tokio::time::timeout(T, s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"bye");
    let mut rest = [0u8; 1];
    let n = tokio::time::timeout(T, s.read(&mut rest))
        .await
        .expect("the server's half-close did not arrive")
        .unwrap();
    assert_eq!(n, 0, "expected end of stream after the server's half-close");
    let late = pattern(4, 200_000);
    s.write_all(&late).await.unwrap();
    s.shutdown().await.unwrap();
    let seen = tokio::time::timeout(T, o.after_fin.recv())
        .await
        .expect("the server never saw the client's end of stream")
        .unwrap();
    assert_eq!(seen.len(), late.len());
    assert!(
        seen == late,
        "bytes sent after the server's half-close corrupted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_terminal_key_is_refused_and_counted() {
    let o = origin().await;
    let (allowed_key, allowed_pub) = generate_keypair().unwrap();
    let (stranger, _) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (gw, gw_addr) = gateway(gk, vec![allowed_pub]);

    // A terminal whose key is not on the allow-list: refused before anything reaches the origin.
    let (socks, _) = terminal(stranger, gp, gw_addr).await;
    let (_s, code) = socks_connect(socks, o.addr).await;
    assert_ne!(code, 0, "an unknown terminal got through");
    let st = gw.status().await.unwrap();
    assert_eq!(st.tunnel.unknown_key, 1);
    assert_eq!(st.tunnel.handshakes, 0);
    assert!(st.streams.is_empty());
    assert_eq!(o.accepted.load(Ordering::SeqCst), 0);

    // A terminal that has the wrong gateway key: its first message does not even verify.
    let (_, wrong_gp) = generate_keypair().unwrap();
    let (socks, _) = terminal(allowed_key.clone(), wrong_gp, gw_addr).await;
    let (_s, code) = socks_connect(socks, o.addr).await;
    assert_ne!(code, 0);
    let st = gw.status().await.unwrap();
    assert_eq!(st.tunnel.auth_failures, 1);
    assert_eq!(st.tunnel.handshakes, 0);
    assert_eq!(o.accepted.load(Ordering::SeqCst), 0);

    // The allowed terminal still gets through.
    let (socks, _) = terminal(allowed_key, gp, gw_addr).await;
    let (mut s, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    s.write_all(b"D 1000\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == pattern(0, 1000));
    let st = gw.status().await.unwrap();
    assert_eq!((st.tunnel.unknown_key, st.tunnel.auth_failures), (1, 1));
    assert_eq!(st.tunnel.handshakes, 1);
}

/// Copies `r` to `w`, flipping one bit of the byte at offset `tamper_at` when given.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    tamper_at: Option<usize>,
) {
    let mut buf = vec![0u8; 16 << 10];
    let mut seen = 0usize;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(at) = tamper_at.filter(|&at| seen <= at && at < seen + n) {
            buf[at - seen] ^= 0x40;
        }
        seen += n;
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// A TCP relay between terminal and gateway that flips one bit of one byte, `at` bytes into
/// the terminal → gateway direction (`up`) or the other, of the connection with index `victim`
/// (0-based, in accept order).
async fn tampering_relay(to: SocketAddr, victim: usize, at: usize, up: bool) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut index = 0;
        while let Ok((client, _)) = l.accept().await {
            let tamper = (index == victim).then_some(at);
            index += 1;
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(to).await else {
                    return;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let (t_up, t_down) = if up { (tamper, None) } else { (None, tamper) };
                tokio::join!(pump(cr, sw, t_up), pump(sr, cw, t_down));
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_byte_kills_only_its_connection() {
    let o = origin().await;
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (gw, gw_addr) = gateway(gk, vec![tp]);
    // The second hop connection gets one byte changed 300 kB in, well past its handshake.
    let relay = tampering_relay(gw_addr, 1, 300_000, true).await;
    let (socks, _term) = terminal(tk, gp, relay).await;

    let n = 2_000_000;
    let (mut a, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let (mut b, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let da = pattern(21, n);
    let db = pattern(22, n);
    let send_a = async {
        a.write_all(format!("U {n}\n").as_bytes()).await.unwrap();
        a.write_all(&da).await.unwrap();
        let mut h = [0u8; 8];
        tokio::time::timeout(T, a.read_exact(&mut h))
            .await
            .unwrap()
            .map(|_| u64::from_be_bytes(h))
    };
    let send_b = async {
        // Writes may fail once the hop connection is gone; the outcome is what the client reads.
        let _ = b.write_all(format!("U {n}\n").as_bytes()).await;
        let _ = b.write_all(&db).await;
        let mut h = [0u8; 8];
        tokio::time::timeout(T, b.read_exact(&mut h))
            .await
            .expect("the tampered connection hung instead of failing")
            .map(|_| u64::from_be_bytes(h))
    };
    let (ra, rb) = tokio::join!(send_a, send_b);
    assert_eq!(
        ra.unwrap(),
        fnv(&da),
        "the untouched connection was damaged"
    );
    assert!(
        rb.is_err(),
        "the tampered connection delivered an answer: {rb:?}"
    );
    let st = gw.status().await.unwrap();
    assert_eq!(st.tunnel.auth_failures, 1);
    assert_eq!(st.tunnel.handshakes, 2);

    // A new connection works.
    let (mut c, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    c.write_all(b"D 50000\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(T, c.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == pattern(0, 50_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_download_byte_fails_only_its_connection_at_the_terminal() {
    let o = origin().await;
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let (gw, gw_addr) = gateway(gk, vec![tp]);
    let relay = tampering_relay(gw_addr, 0, 500_000, false).await;
    let (socks, term) = terminal(tk, gp, relay).await;

    let n = 3_000_000;
    let (mut a, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    let (mut b, code) = socks_connect(socks, o.addr).await;
    assert_eq!(code, 0);
    async fn fetch(s: &mut TcpStream, n: usize) -> Vec<u8> {
        s.write_all(format!("D {n}\n").as_bytes()).await.unwrap();
        let mut got = Vec::new();
        // A failed download may end in a reset: what matters is what arrived before it.
        let _ = tokio::time::timeout(T, s.read_to_end(&mut got))
            .await
            .expect("a download hung");
        got
    }
    let (got_a, got_b) = tokio::join!(fetch(&mut a, n), fetch(&mut b, n));
    // Connection 0 (a) crossed the tampering: it ends short, never with wrong bytes.
    assert!(got_a.len() < n, "the tampered download completed");
    assert!(
        got_a[..] == pattern(0, n)[..got_a.len()],
        "tampered bytes reached the client"
    );
    assert!(got_b == pattern(0, n), "the untouched download was damaged");
    let st = term.status().await.unwrap();
    assert_eq!(st.tunnel.auth_failures, 1);
    let st = gw.status().await.unwrap();
    assert_eq!(st.tunnel.auth_failures, 0);
}

/// The streams' events, straight from the hops: first bytes ride in the handshake, FIN each way
/// ends up as `Finished` after every byte, a reset as `Failed`, and a reader that does not read
/// holds the writer back instead of letting buffers grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_events_and_backpressure() {
    use crate::hop::StreamEvent;
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let mut gw = start_gateway(
        "127.0.0.1:0".parse().unwrap(),
        gk,
        None,
        vec![tp],
        hop_config(),
    )
    .unwrap();
    let term = start_terminal(tk, gp, gw.local_addr(), hop_config()).unwrap();

    async fn read_all(s: &mut crate::hop::HopStream) -> (Vec<u8>, Option<StreamEvent>) {
        tokio::time::timeout(T, read_hop_stream(s)).await.unwrap()
    }

    // Half-close each way; first bytes larger than a handshake message carries.
    let first = pattern(5, 100_000);
    let mut t = term.open(first.clone()).await.unwrap();
    let mut g = tokio::time::timeout(T, gw.accept()).await.unwrap().unwrap();
    assert_eq!(g.peer_key(), Some(tp));
    g.write(b"world").await.unwrap();
    g.shutdown().await;
    let (got, end) = read_all(&mut t).await;
    assert_eq!(got, b"world");
    assert_eq!(end, Some(StreamEvent::Finished));
    t.write(b"more").await.unwrap();
    t.shutdown().await;
    let (got, end) = read_all(&mut g).await;
    assert_eq!(got.len(), first.len() + 4);
    assert!(got[..first.len()] == first[..] && &got[first.len()..] == b"more");
    assert_eq!(end, Some(StreamEvent::Finished));

    // A reset.
    let mut t = term.open(b"x".to_vec()).await.unwrap();
    let g = gw.accept().await.unwrap();
    g.abort(AbortCode::DrainTimeout).await;
    let (_, end) = read_all(&mut t).await;
    match end {
        Some(StreamEvent::Failed(e)) => {
            assert_eq!(e.abort_code(), Some(AbortCode::DrainTimeout), "{e}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }

    // Backpressure: the gateway does not read while the terminal writes 32 MB.
    let total = 32 << 20;
    let data = Arc::new(pattern(6, total));
    let t = term.open(Vec::new()).await.unwrap();
    let mut g = gw.accept().await.unwrap();
    let d = Arc::clone(&data);
    let writer = tokio::spawn(async move {
        t.write(&d).await.unwrap();
        t.shutdown().await;
        t
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "32 MB written into a reader that reads nothing"
    );
    let st = term.status().await.unwrap();
    // The split-TCP hop runs no STP, and its status says so rather than showing zeros.
    assert!(
        st.stp.is_none(),
        "STP figures for the TCP hop: {:?}",
        st.stp
    );
    assert!(st.streams.iter().all(|s| s.stp.is_none()));
    let sent: u64 = st.streams.iter().map(|s| s.payload_bytes_sent).sum();
    eprintln!("written to the hop while the reader read nothing: {sent} bytes");
    assert!(
        sent < 20 << 20,
        "{sent} bytes left the writer while its reader read nothing"
    );
    let (got, end) = read_all(&mut g).await;
    assert_eq!(end, Some(StreamEvent::Finished));
    assert_eq!(got.len(), total);
    assert!(got == *data);
    writer.await.unwrap();
}

/// The split-TCP hop takes a key changeover and a revocation while running (a SIGHUP reload
/// calls these): a terminal knowing only the next key gets through once it is added and while it
/// is the only one, open connections carry on across the change, and a revoked terminal's open
/// stream fails at once with code 9 at both ends while another terminal's carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_hop_changes_its_keys_and_revokes_a_terminal_at_once() {
    use crate::hop::{StreamError, StreamEvent};
    let (ak, ap) = generate_keypair().unwrap();
    let (bk, bp) = generate_keypair().unwrap();
    let (old, old_pub) = generate_keypair().unwrap();
    let (next, next_pub) = generate_keypair().unwrap();
    let mut gw = start_gateway(
        "127.0.0.1:0".parse().unwrap(),
        old.clone(),
        None,
        vec![ap, bp],
        hop_config(),
    )
    .unwrap();
    let to_old = start_terminal(ak.clone(), old_pub, gw.local_addr(), hop_config()).unwrap();
    let to_next = start_terminal(bk, next_pub, gw.local_addr(), hop_config()).unwrap();
    async fn recv(gw: &mut Hop) -> crate::hop::HopStream {
        tokio::time::timeout(T, gw.accept()).await.unwrap().unwrap()
    }

    // Before the changeover the next key is not answered.
    let mut early = to_next.open(b"early".to_vec()).await.unwrap();
    let (_, end) = tokio::time::timeout(T, read_hop_stream(&mut early))
        .await
        .unwrap();
    assert!(matches!(end, Some(StreamEvent::Failed(_))), "{end:?}");
    let mut a_open = to_old.open(b"a".to_vec()).await.unwrap();
    let mut a_gw = recv(&mut gw).await;

    // old + next: both terminals get through; the open connection carries on.
    let accepted = gw.set_gateway_keys(old.clone(), Some(next.clone())).await;
    assert_eq!(accepted, Some(vec![old_pub, next_pub]));
    let mut b_open = to_next.open(b"b".to_vec()).await.unwrap();
    let b_gw = recv(&mut gw).await;
    assert_eq!(b_gw.peer_key(), Some(bp));

    // next only: the old-key terminal's open connection still carries bytes, its new ones fail.
    let accepted = gw.set_gateway_keys(next.clone(), None).await;
    assert_eq!(accepted, Some(vec![next_pub]));
    a_gw.write(b"still here").await.unwrap();
    let mut got = [0u8; 10];
    let mut n = 0;
    while n < got.len() {
        match tokio::time::timeout(T, a_open.recv()).await.unwrap() {
            Some(StreamEvent::Data(d)) => {
                got[n..n + d.len()].copy_from_slice(&d);
                n += d.len();
            }
            other => panic!("the open connection ended at the promotion: {other:?}"),
        }
    }
    assert_eq!(&got, b"still here");
    let mut late = to_old.open(b"late".to_vec()).await.unwrap();
    let (_, end) = tokio::time::timeout(T, read_hop_stream(&mut late))
        .await
        .unwrap();
    assert!(matches!(end, Some(StreamEvent::Failed(_))), "{end:?}");

    // Revoking terminal A: its open stream fails at once at both ends with the revocation,
    // B's carries on byte-exact.
    let t0 = Instant::now();
    let change = gw.set_allowed_terminals(vec![bp]).await;
    assert_eq!(change.removed, vec![ap]);
    let (_, end) = tokio::time::timeout(T, read_hop_stream(&mut a_open))
        .await
        .unwrap();
    match end {
        Some(StreamEvent::Failed(e)) => {
            assert_eq!(e.abort_code(), Some(AbortCode::Revoked), "{e}")
        }
        other => panic!("the revoked terminal's stream did not fail: {other:?}"),
    }
    let (_, end) = tokio::time::timeout(T, read_hop_stream(&mut a_gw))
        .await
        .unwrap();
    assert_eq!(end, Some(StreamEvent::Failed(StreamError::Revoked)));
    let took = t0.elapsed();
    eprintln!("revoked stream failed at both ends {took:?} after the allow-list change");
    assert!(took < Duration::from_secs(1), "revocation took {took:?}");
    let data = pattern(7, 1 << 20);
    b_gw.write(&data).await.unwrap();
    b_gw.shutdown().await;
    let (got, end) = tokio::time::timeout(T, read_hop_stream(&mut b_open))
        .await
        .unwrap();
    assert_eq!(end, Some(StreamEvent::Finished));
    assert!(got == data, "B's stream was not byte-exact");
}

#[test]
fn hop_transport_configuration() {
    use crate::config::{parse_gateway, parse_terminal, HopTransport, SideConfig};
    let key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let terminal = |extra: &str| {
        parse_terminal(&format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:1080\"\ngateway = \"192.0.2.1:4433\"\n\
             gateway_public_key = \"{key}\"\nprivate_key_file = \"t.key\"\n{extra}"
        ))
    };
    let gateway = |extra: &str| {
        parse_gateway(&format!(
            "[gateway]\nlisten = \"0.0.0.0:4433\"\nprivate_key_file = \"g.key\"\n\
             allowed_terminals = [\"{key}\"]\n{extra}"
        ))
    };
    // Default: STP; system congestion control, kernel-tuned buffers.
    let t = terminal("").unwrap();
    assert_eq!(t.shared.hop_transport, HopTransport::Stp);
    assert_eq!(t.hop_tcp_tuning(), TcpOptions::default());
    // With the allocation known, buffers are 2 × the BDP of their direction.
    let t = terminal(
        "hop_transport = \"tcp\"\nup_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
         [terminal.hop_tcp]\ncongestion = \"bbr\"",
    )
    .unwrap();
    assert_eq!(t.shared.hop_transport, HopTransport::Tcp);
    let tuning = t.hop_tcp_tuning();
    assert_eq!(tuning.congestion.as_deref(), Some("bbr"));
    assert_eq!(tuning.send_buffer_bytes, Some(750_000));
    assert_eq!(tuning.recv_buffer_bytes, Some(7_500_000));
    assert!(tuning.nodelay);
    // Paced at the payload share of 99 % of the 5 Mb/s uplink (1448 of 1500 bytes).
    assert_eq!(tuning.max_pacing_rate_bps, Some(4_778_400));
    let g = gateway(
        "hop_transport = \"both\"\nup_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
         [gateway.hop_tcp]\nrecv_buffer_bytes = 65536\nnodelay = false",
    )
    .unwrap();
    assert!(g.shared.hop_transport.stp() && g.shared.hop_transport.tcp());
    let tuning = g.hop_tcp_tuning();
    assert_eq!(tuning.send_buffer_bytes, Some(7_500_000));
    assert_eq!(tuning.recv_buffer_bytes, Some(65_536));
    assert!(!tuning.nodelay);
    assert_eq!(tuning.max_pacing_rate_bps, Some(47_784_000));
    // An explicit pacing cap wins over the allocation's.
    let g = gateway(
        "hop_transport = \"tcp\"\nup_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
         [gateway.hop_tcp]\nmax_pacing_rate_bps = 20000000",
    )
    .unwrap();
    assert_eq!(g.hop_tcp_tuning().max_pacing_rate_bps, Some(20_000_000));
    // Errors name the field.
    let e = terminal("hop_transport = \"both\"").unwrap_err();
    assert_eq!(e.field(), Some("terminal.hop_transport"), "{e}");
    let e = terminal("hop_transport = \"quic\"").unwrap_err();
    assert!(e.to_string().contains("hop_transport"), "{e}");
    let e = gateway("[gateway.hop_tcp]\ncongestion = \"no such\"").unwrap_err();
    assert_eq!(e.field(), Some("gateway.hop_tcp.congestion"), "{e}");
    let e = terminal("[terminal.hop_tcp]\nsend_buffer_bytes = 1").unwrap_err();
    assert_eq!(e.field(), Some("terminal.hop_tcp.send_buffer_bytes"), "{e}");
    let e = terminal("[terminal.hop_tcp]\nmax_pacing_rate_bps = 10").unwrap_err();
    assert_eq!(
        e.field(),
        Some("terminal.hop_tcp.max_pacing_rate_bps"),
        "{e}"
    );
    assert!(e.to_string().contains("must be from 8000"), "{e}");
}

#[tokio::test]
async fn congestion_control_missing_from_the_kernel_is_named() {
    let (tk, _) = generate_keypair().unwrap();
    let (_, gp) = generate_keypair().unwrap();
    let config = TcpHopConfig {
        tuning: TcpOptions {
            congestion: Some("nosuchcc".into()),
            ..TcpOptions::default()
        },
        ..hop_config()
    };
    let e = start_terminal(tk, gp, "127.0.0.1:9".parse().unwrap(), config)
        .err()
        .expect("a missing congestion control was accepted")
        .to_string();
    assert!(
        e.starts_with("congestion:") && e.contains("nosuchcc"),
        "{e}"
    );
}

/// The hop's sockets are paced at `max_pacing_rate_bps` (the allocation, by default, when it is
/// configured), both the terminal's and the connections the gateway accepts: 3 MB each way at
/// 16 Mbit/s takes about 1.5 s (1.3 s measured), where the same hop unpaced moves it at
/// loopback speed (0.02 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_sockets_are_paced_at_the_configured_rate() {
    let n = 3_000_000;
    let data = Arc::new(pattern(7, n));
    // Seconds for `n` bytes up and then `n` bytes down, with the given pacing on both sides.
    async fn transfer(rate: Option<u64>, data: Arc<Vec<u8>>) -> (f64, f64) {
        let (tk, tp) = generate_keypair().unwrap();
        let (gk, gp) = generate_keypair().unwrap();
        let config = || TcpHopConfig {
            tuning: TcpOptions {
                max_pacing_rate_bps: rate,
                ..TcpOptions::default()
            },
            ..hop_config()
        };
        let mut gw =
            start_gateway("127.0.0.1:0".parse().unwrap(), gk, None, vec![tp], config()).unwrap();
        let term = start_terminal(tk, gp, gw.local_addr(), config()).unwrap();
        let mut t = term.open(b"x".to_vec()).await.unwrap();
        let mut g = tokio::time::timeout(T, gw.accept()).await.unwrap().unwrap();
        let t0 = Instant::now();
        t.write(&data).await.unwrap();
        t.shutdown().await;
        let (got, _) = tokio::time::timeout(T, read_hop_stream(&mut g))
            .await
            .unwrap();
        let up = t0.elapsed().as_secs_f64();
        assert!(
            got.len() == data.len() + 1 && got[1..] == data[..],
            "upload corrupted"
        );
        let t0 = Instant::now();
        g.write(&data).await.unwrap();
        g.shutdown().await;
        let (got, _) = tokio::time::timeout(T, read_hop_stream(&mut t))
            .await
            .unwrap();
        let down = t0.elapsed().as_secs_f64();
        assert!(got == *data, "download corrupted");
        (up, down)
    }
    let paced = transfer(Some(16_000_000), Arc::clone(&data)).await;
    let unpaced = transfer(None, Arc::clone(&data)).await;
    eprintln!("3 MB up, down: paced at 16 Mbit/s {paced:?} s, unpaced {unpaced:?} s");
    for (dir, p, u) in [("up", paced.0, unpaced.0), ("down", paced.1, unpaced.1)] {
        assert!(
            // 1.5 s at the rate; the first window (ten 64 KiB loopback segments) may leave early.
            (0.9..20.0).contains(&p),
            "{dir}: 3 MB at 16 Mbit/s took {p:.3} s (expected about 1.5)"
        );
        assert!(
            u < p / 2.0,
            "{dir}: unpaced {u:.3} s is not faster than paced {p:.3} s"
        );
    }
}
