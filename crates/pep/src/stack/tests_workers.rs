//! Hops of several workers (`workers = 2` on both sides), read worker by worker: connections
//! land on every worker of both sides and arrive whole, the merged status and `/metrics` are the
//! workers' sums, and the gateway's limits and the send allocation are one for all workers (not
//! one per worker). A revoked terminal losing its sessions on every worker is
//! `tests/workers.rs`; the pair of workers is `tests/common`'s.

use crate::hop::HopStatus;
use crate::ops::OpsConfig;
use crate::tests_common::{
    default_pair, download, hop_config, http_get, origin, pair, socks_connect, WORKERS,
};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
