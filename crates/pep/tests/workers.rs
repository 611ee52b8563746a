//! Hops of several workers (`workers = 2` on both sides): connections land on every worker of
//! both sides and arrive whole, the merged status and `/metrics` are the workers' sums, the
//! gateway's limits and the send allocation are one for all workers (not one per worker), and
//! a revoked terminal loses its sessions on every worker. The other suites run with several
//! workers too: `SATSTP_TEST_WORKERS=2 cargo test -p pep --test ops --test hop`.

mod common;

use common::{hop_config, http_get, loopback_stp, origin, pattern, policy, socks_connect};
use pep::config::TcpOptions;
use pep::hop::{HopConfig, HopStatus};
use pep::keys::{generate_keypair, PublicKey};
use pep::ops::OpsConfig;
use pep::socks::SocksAuth;
use pep::stack::{GatewayOptions, SocksListener, TerminalHop, TerminalOptions};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WORKERS: usize = 2;

struct Pair {
    socks: SocketAddr,
    gw_metrics: SocketAddr,
    terminal_key: PublicKey,
    term: pep::Terminal,
    gw: pep::Gateway,
}

/// A gateway and a terminal of [`WORKERS`] workers each on loopback, the gateway with limits
/// `ops` and `/metrics`; `gw` and `term` are the hops' parameters.
/// The pair most tests use: a 1 MiB relay buffer on both sides, seeds 2 and 1.
async fn default_pair(ops: OpsConfig) -> Pair {
    pair(hop_config(2, 1 << 20), hop_config(1, 1 << 20), ops).await
}

async fn pair(gw: HopConfig, term: HopConfig, ops: OpsConfig) -> Pair {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let mut stp = loopback_stp(&gw);
    stp.workers = WORKERS;
    let mut o = GatewayOptions::new(
        gk,
        vec![tp],
        "127.0.0.1:0".parse().unwrap(),
        stp,
        gw.relay_buffer_bytes,
        policy(vec!["127.0.0.0/8".into()], vec![]),
        Duration::from_secs(5),
    );
    o.ops = ops;
    o.outbound_tcp = TcpOptions::default();
    o.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let gateway = pep::Gateway::start(o).await.unwrap();
    let mut stp = loopback_stp(&term);
    stp.workers = WORKERS;
    let mut t = TerminalOptions::new(
        tk,
        gateway.hop_addr(),
        gp,
        TerminalHop::Stp(Box::new(stp)),
        term.relay_buffer_bytes,
    );
    t.socks = Some(SocksListener {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: SocksAuth::None,
        fast_open: false,
    });
    let terminal = pep::Terminal::start(t).await.unwrap();
    Pair {
        socks: terminal.socks_addr().unwrap(),
        gw_metrics: gateway.metrics_addr().unwrap(),
        terminal_key: tp,
        term: terminal,
        gw: gateway,
    }
}

/// Downloads `n` bytes from the origin through the terminal; true if they arrived whole.
async fn download(socks: SocketAddr, origin: SocketAddr, n: usize) -> bool {
    let (mut s, code) = socks_connect(socks, origin).await;
    if code != 0 {
        return false;
    }
    if s.write_all(format!("D {n}\n").as_bytes()).await.is_err() {
        return false;
    }
    let mut got = Vec::with_capacity(n);
    let ok = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got)).await;
    matches!(ok, Ok(Ok(_))) && got == pattern(0, n)
}

/// The sample `name{side="gateway",labels}` of a Prometheus text.
fn sample(text: &str, name: &str, labels: &str) -> u64 {
    let want = format!("{name}{{side=\"gateway\",{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {want} in\n{text}"))
}

fn connections(s: &HopStatus) -> u64 {
    let stp = s.stp.as_ref().expect("an STP hop reports its STP figures");
    stp.totals.connections + stp.endpoint.closed.connections
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_land_on_every_worker_and_the_metrics_sum() {
    let origin = origin().await;
    let p = default_pair(OpsConfig::unlimited()).await;
    assert_eq!((p.gw.hops()[0].workers(), p.term.hop().workers()), (2, 2));
    let loads: Vec<_> = (0..8)
        .map(|i| tokio::spawn(download(p.socks, origin, 300_000 + i * 1000)))
        .collect();
    for l in loads {
        assert!(l.await.unwrap(), "a download arrived whole");
    }
    let gw_hop = &p.gw.hops()[0];
    for (side, ws) in [
        ("gateway", gw_hop.worker_statuses().await),
        ("terminal", p.term.hop().worker_statuses().await),
    ] {
        assert_eq!(ws.len(), WORKERS, "{side}");
        for (i, w) in ws.iter().enumerate() {
            assert!(
                connections(w) >= 2,
                "{side} worker {i} carried {} connections",
                connections(w)
            );
            assert_eq!(
                w.tunnel.handshakes, 1,
                "{side} worker {i}: one session each"
            );
        }
    }
    // The merged figures are the workers' sums (counters only grow: before ≤ merged ≤ after).
    let before = gw_hop.worker_statuses().await;
    let metrics = http_get(p.gw_metrics, "/metrics").await;
    let after = gw_hop.worker_statuses().await;
    let sum = |ws: &[HopStatus], f: fn(&HopStatus) -> u64| ws.iter().map(f).sum::<u64>();
    for (labels, f) in [
        (
            "direction=\"down\"",
            (|s: &HopStatus| s.bytes_sent) as fn(&HopStatus) -> u64,
        ),
        ("direction=\"up\"", |s: &HopStatus| s.bytes_received),
    ] {
        let m = sample(&metrics, "satstp_hop_bytes_total", labels);
        assert!(
            sum(&before, f) <= m && m <= sum(&after, f),
            "{labels}: {} ≤ {m} ≤ {}",
            sum(&before, f),
            sum(&after, f)
        );
    }
    assert!(sample(&metrics, "satstp_hop_bytes_total", "direction=\"down\"") > 8 * 300_000);
    let merged = gw_hop.status().await.unwrap();
    assert_eq!(
        merged.tunnel.handshakes, 2,
        "one session per terminal worker"
    );
    // The terminal's workers handshake at once, with one key: neither is taken for a replay.
    assert_eq!(
        merged.tunnel.replays, 0,
        "a normal start refuses no handshake"
    );
    assert!(merged.established);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_limits_are_shared_by_its_workers() {
    let origin = origin().await;
    let p = default_pair(OpsConfig {
        max_connections: 10,
        max_connections_per_terminal: 2,
        ..OpsConfig::unlimited()
    })
    .await;
    // Four echo connections held open, in turn on each worker: two are admitted, not four.
    let mut held = Vec::new();
    let mut codes = Vec::new();
    for _ in 0..4 {
        let (mut s, code) = socks_connect(p.socks, origin).await;
        if code == 0 {
            s.write_all(b"E\nx").await.unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
        }
        codes.push(code);
        held.push(s);
    }
    assert_eq!(
        codes.iter().filter(|&&c| c == 0).count(),
        2,
        "per-terminal limit 2 across both workers: {codes:?}"
    );
    let ws = p.gw.hops()[0].worker_statuses().await;
    assert!(
        ws.iter().all(|w| connections(w) >= 1),
        "both workers were asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_send_allocation_is_shared_by_the_workers() {
    let origin = origin().await;
    // The gateway sends at 40 Mbit/s of link bytes, whichever worker a connection is on.
    let rate = 40_000_000u64;
    let mut gw = hop_config(2, 1 << 20);
    gw.send_rate_bps = Some(rate);
    let p = pair(gw, hop_config(1, 1 << 20), OpsConfig::unlimited()).await;
    assert!(
        download(p.socks, origin, 1000).await,
        "warm up both sessions"
    );
    const EACH: usize = 2_000_000;
    let t0 = Instant::now();
    let loads: Vec<_> = (0..4)
        .map(|_| tokio::spawn(download(p.socks, origin, EACH)))
        .collect();
    for l in loads {
        assert!(l.await.unwrap());
    }
    let secs = t0.elapsed().as_secs_f64();
    let ws = p.gw.hops()[0].worker_statuses().await;
    assert!(ws.iter().all(|w| w
        .stp
        .as_ref()
        .expect("STP figures")
        .totals
        .payload_bytes_sent
        >= EACH as u64));
    // 8 MB of payload is at least 64 Mbit of link bytes: 1.6 s at 40 Mbit/s (two workers each
    // at the full rate would take 0.8 s).
    let floor = (4 * EACH) as f64 * 8.0 / rate as f64;
    assert!(
        secs > 0.85 * floor,
        "4 × {EACH} B in {secs:.2} s: faster than the allocation allows ({floor:.2} s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_terminal_loses_its_sessions_on_every_worker() {
    let origin = origin().await;
    let p = default_pair(OpsConfig::unlimited()).await;
    assert!(download(p.socks, origin, 1000).await);
    assert!(download(p.socks, origin, 1000).await);
    let change = p.gw.set_allowed_terminals(vec![]).await;
    assert_eq!(change.removed, vec![p.terminal_key]);
    // Every connection from now on fails, whichever worker it goes to.
    for _ in 0..4 {
        assert!(
            !download(p.socks, origin, 1000).await,
            "a revoked terminal got through"
        );
    }
    // Allowed again, both workers' sessions come back.
    p.gw.set_allowed_terminals(vec![p.terminal_key]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ok = 0;
    while ok < 4 && Instant::now() < deadline {
        if download(p.socks, origin, 1000).await {
            ok += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(ok, 4, "the terminal is back on every worker");
}
