//! The STP hop's read-ahead bound on loopback (`hop::read_ahead`, `limits.read_ahead_bytes`):
//! with many downloads at once the gateway's relays hold at most the bound (plus one chunk per
//! connection) of bytes read from the origins and not yet sent by STP, every byte arrives and
//! the bound is released whole at the end; a client that stops reading holds its share and no
//! more, and another connection's download still completes.

use crate::hop::read_ahead::CHUNK;
use crate::ops::OpsConfig;
use crate::tests_common::{default_pair, download, origin, socks_connect, Pair};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const BOUND: u64 = 1 << 20;

async fn bounded_pair() -> Pair {
    default_pair(OpsConfig {
        read_ahead_bytes: Some(BOUND),
        ..OpsConfig::unlimited()
    })
    .await
}

/// Samples the gateway's `read_ahead_bytes` until `stop`; the largest value seen.
fn sample_max(p: &Pair, stop: Arc<AtomicBool>) -> (Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let max = Arc::new(AtomicI64::new(0));
    let m = Arc::clone(p.gw.ops().metrics());
    let seen = Arc::clone(&max);
    let task = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            seen.fetch_max(m.read_ahead_bytes.get(), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    (max, task)
}

/// Waits up to 10 s for the gateway's read-ahead to be empty; what is left.
async fn drained(p: &Pair) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = p.gw.ops().metrics().read_ahead_bytes.get();
        if held == 0 || Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_holds_under_many_flows_and_every_byte_arrives() {
    let origin = origin().await;
    let p = bounded_pair().await;
    let metrics = Arc::clone(p.gw.ops().metrics());
    assert_eq!(metrics.read_ahead_bound_bytes.get(), BOUND as i64);
    let stop = Arc::new(AtomicBool::new(false));
    let (max, sampler) = sample_max(&p, Arc::clone(&stop));
    const FLOWS: u64 = 32;
    let loads: Vec<_> = (0..FLOWS)
        .map(|i| tokio::spawn(download(p.socks, origin, 2_000_000 + i as usize * 1000)))
        .collect();
    for l in loads {
        assert!(l.await.unwrap(), "a download arrived whole");
    }
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let max = max.load(Ordering::Relaxed) as u64;
    assert!(
        max <= BOUND + FLOWS * CHUNK,
        "the relays held {max} bytes unsent, more than the bound {BOUND} + one chunk per flow"
    );
    assert!(max > 0, "the read-ahead was never used");
    assert!(
        metrics.read_ahead_waits.get() > 0,
        "64 MB through a 1 MiB bound and no relay waited"
    );
    assert_eq!(drained(&p).await, 0, "the bound is released whole");
    // Prometheus and /status show it.
    let text = crate::tests_common::http_get(p.gw_metrics, "/metrics").await;
    assert!(
        text.contains(&format!(
            "satstp_read_ahead_bound_bytes{{side=\"gateway\"}} {BOUND}"
        )),
        "{text}"
    );
    assert!(text.contains("satstp_read_ahead_waits_total{side=\"gateway\"} "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_stop_another_download() {
    let origin = origin().await;
    let p = bounded_pair().await;
    // A download whose client never reads: its STP window at the gateway closes and the
    // bytes its relay read stay unsent.
    let (mut stalled, code) = socks_connect(p.socks, origin).await;
    assert_eq!(code, 0);
    stalled.write_all(b"D 500000000\n").await.unwrap();
    let metrics = Arc::clone(p.gw.ops().metrics());
    let deadline = Instant::now() + Duration::from_secs(10);
    while metrics.read_ahead_bytes.get() < (BOUND / 2) as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = metrics.read_ahead_bytes.get() as u64;
    assert!(
        (BOUND / 2..=BOUND + CHUNK).contains(&held),
        "the stalled connection holds {held} bytes (its share, the whole bound while alone)"
    );
    // Another connection downloads 8 MB meanwhile, its bytes one chunk at a time at least.
    let stop = Arc::new(AtomicBool::new(false));
    let (max, sampler) = sample_max(&p, Arc::clone(&stop));
    let started = Instant::now();
    assert!(
        download(p.socks, origin, 8_000_000).await,
        "the second download did not complete beside the stalled one"
    );
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let max = max.load(Ordering::Relaxed) as u64;
    assert!(max <= BOUND + 2 * CHUNK, "held {max} with two connections");
    assert!(took < Duration::from_secs(20), "8 MB took {took:?}");
    // The stalled connection still holds no more than it did.
    assert!(metrics.read_ahead_bytes.get() as u64 <= held + CHUNK);
    drop(stalled);
    assert_eq!(
        drained(&p).await,
        0,
        "a closed connection's bytes are released"
    );
}
