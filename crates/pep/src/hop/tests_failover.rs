//! A terminal configured with several gateways (`Security::TerminalFailover`): it uses the
//! first in order; when that one stops answering, the streams that reached it fail and new ones
//! go to the next gateway; a first gateway that never answers is passed over at start, and a
//! stream opened meanwhile opens at the next one. Each gateway has its own
//! key, so the terminal's new session really is with the other gateway.

use crate::hop::core::FAILOVER_AFTER_HANDSHAKES;
use crate::hop::{Hop, Security, StreamEvent};
use crate::keys::{generate_keypair, PublicKey};
use crate::tests_common::{gateway_hop, hop_config, read_hop_stream};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// A gateway hop that answers every stream with `name:` followed by what it read.
async fn named_gateway(
    name: &'static str,
    terminal: PublicKey,
    seed: u64,
) -> (SocketAddr, PublicKey, JoinHandle<()>) {
    let (key, public) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut hop: Hop = gateway_hop(sock, key, [terminal], seed, hop_config(seed, 1 << 20));
    let addr = hop.local_addr();
    let task = tokio::spawn(async move {
        while let Some(mut s) = hop.accept().await {
            tokio::spawn(async move {
                let (got, end) = read_hop_stream(&mut s).await;
                if matches!(end, Some(StreamEvent::Finished)) {
                    let mut reply = format!("{name}:").into_bytes();
                    reply.extend_from_slice(&got);
                    let _ = s.write(&reply).await;
                    s.shutdown().await;
                    // Keep the stream until the terminal has the reply.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            });
        }
    });
    (addr, public, task)
}

/// One request through the terminal: the reply, or why the stream failed.
async fn ask(term: &Hop, what: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = term.open(what.to_vec()).await.map_err(|e| e.to_string())?;
    s.shutdown().await;
    match tokio::time::timeout(Duration::from_secs(15), read_hop_stream(&mut s)).await {
        Ok((got, Some(StreamEvent::Finished))) => Ok(got),
        Ok((_, Some(StreamEvent::Failed(e)))) => Err(e.to_string()),
        Ok((_, other)) => Err(format!("stream ended with {other:?}")),
        Err(_) => Err("no answer in 15 s".into()),
    }
}

/// Asks until a reply comes (at most `limit`); the reply and how many attempts failed first.
async fn ask_until_answered(term: &Hop, limit: Duration) -> (Vec<u8>, u32) {
    let started = Instant::now();
    let mut failed = 0;
    loop {
        match ask(term, b"ping").await {
            Ok(r) => return (r, failed),
            Err(e) => {
                failed += 1;
                assert!(
                    started.elapsed() < limit,
                    "no gateway answered within {limit:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_fails_over_to_the_next_gateway_when_the_first_stops() {
    let (tk, tp) = generate_keypair().unwrap();
    let (a_addr, a_key, a_task) = named_gateway("A", tp, 2).await;
    let (b_addr, b_key, _b_task) = named_gateway("B", tp, 3).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let term = Hop::start(
        sock,
        Security::TerminalFailover {
            local: tk,
            gateways: vec![(a_addr, a_key), (b_addr, b_key)],
        },
        hop_config(1, 1 << 20),
    )
    .unwrap();
    // The first gateway in order serves while it answers.
    for _ in 0..2 {
        let r = ask(&term, b"ping")
            .await
            .expect("through the first gateway");
        assert_eq!(r, b"A:ping");
    }
    // It stops: its hop and socket go away.
    a_task.abort();
    let _ = a_task.await;
    let stopped = Instant::now();
    let (r, failed) = ask_until_answered(&term, Duration::from_secs(40)).await;
    assert_eq!(r, b"B:ping", "answered by the second gateway");
    let took = stopped.elapsed();
    eprintln!("failed over in {took:?} ({failed} requests failed first)");
    // Silence is noticed after REHANDSHAKE_AFTER, then FAILOVER_AFTER_HANDSHAKES tries, 1 s apart.
    assert!(took >= crate::hop::core::REHANDSHAKE_AFTER, "{took:?}");
    // And B keeps serving.
    assert_eq!(ask(&term, b"again").await.unwrap(), b"B:again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_gateway_that_never_answers_is_passed_over() {
    let (tk, tp) = generate_keypair().unwrap();
    // Bound, so datagrams are taken, but nothing answers.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (_, silent_key) = generate_keypair().unwrap();
    let (b_addr, b_key, _b_task) = named_gateway("B", tp, 3).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let term = Hop::start(
        sock,
        Security::TerminalFailover {
            local: tk,
            gateways: vec![(silent.local_addr().unwrap(), silent_key), (b_addr, b_key)],
        },
        hop_config(1, 1 << 20),
    )
    .unwrap();
    let (r, failed) = ask_until_answered(&term, Duration::from_secs(30)).await;
    assert_eq!(r, b"B:ping");
    // The request made while no gateway answered had sent nothing: it opened at B.
    assert_eq!(failed, 0);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(u64::from(FAILOVER_AFTER_HANDSHAKES) - 1),
        "the first gateway gets its tries: {took:?}"
    );
    let status = term.status().await.unwrap();
    assert!(status.established);
    assert!(
        status.handshakes_started >= 2,
        "{}",
        status.handshakes_started
    );
}

/// Each hop worker runs on a thread of its own, and a stream it carries names that thread's
/// runtime as its home: what the gateway spawns there (the stream's relay) runs on the worker's
/// thread, not on the caller's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_s_home_is_its_hop_worker_s_thread() {
    use crate::hop::WorkerHome;
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut gw: Hop = gateway_hop(sock, gk, [tp], 5, hop_config(5, 1 << 20));
    let term =
        crate::tests_common::terminal_hop(tk, gp, gw.local_addr(), hop_config(6, 1 << 20)).await;
    let opened = term
        .open(b"hello".to_vec())
        .await
        .expect("the stream opens");
    let accepted = tokio::time::timeout(Duration::from_secs(10), gw.accept())
        .await
        .expect("the gateway accepts in time")
        .expect("a stream arrives");
    let thread_of = |home: Option<WorkerHome>| async move {
        WorkerHome::spawn_at(home, async {
            std::thread::current().name().map(str::to_string)
        })
        .await
        .unwrap()
    };
    for (side, home) in [("gateway", accepted.home()), ("terminal", opened.home())] {
        assert!(home.is_some(), "the {side}'s stream has a home");
        let name = thread_of(home).await;
        assert_eq!(name.as_deref(), Some("satstp-hop-0"), "the {side}'s stream");
    }
    // Without a home (another transport's stream), the task runs on the caller's runtime.
    let here = thread_of(None).await;
    assert!(here.is_some_and(|n| !n.starts_with("satstp-hop")));
}
