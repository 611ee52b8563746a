//! Sharing and respecting the satellite hop's allocation: connections of one side share its
//! send allocation fairly, and a side whose configured allocation exceeds what the link really
//! carries backs off instead of flooding the link's queue.

mod common;

use common::{hop_config_for, origin, pattern, profile_links, socks_connect, socks_pair};
use linkem::Profile;
use pep::sizing::HopLink;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Downloads `n` bytes through the proxy; returns the seconds from request to last byte.
async fn download(socks: std::net::SocketAddr, origin: std::net::SocketAddr, n: usize) -> f64 {
    let (mut s, code) = socks_connect(socks, origin).await;
    assert_eq!(code, 0);
    let t0 = Instant::now();
    s.write_all(format!("D {n}\n").as_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(n);
    tokio::time::timeout(Duration::from_secs(120), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == pattern(0, n), "download corrupted");
    t0.elapsed().as_secs_f64()
}

/// Four simultaneous downloads over the `geo` profile: together they use the downlink as one
/// would, each gets about a quarter (Jain's index near 1), and the gateway's shaper keeps the
/// link's queue from overflowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_connections_share_the_allocation_fairly() {
    let origin = origin().await;
    let (t, g) = profile_links(Profile::Geo);
    let st = socks_pair(
        hop_config_for(1, t),
        hop_config_for(2, g),
        Some(Profile::Geo.links()),
        vec!["127.0.0.0/8".into()],
    )
    .await;
    let n = 6_000_000;
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| tokio::spawn(download(st.socks, origin, n)))
        .collect();
    let mut secs = Vec::new();
    for t in tasks {
        secs.push(t.await.unwrap());
    }
    let all = t0.elapsed().as_secs_f64();
    let rates: Vec<f64> = secs.iter().map(|s| n as f64 * 8.0 / s).collect();
    let sum: f64 = rates.iter().sum();
    let jain = sum * sum / (rates.len() as f64 * rates.iter().map(|r| r * r).sum::<f64>());
    let aggregate = 4.0 * n as f64 * 8.0 / all;
    let stats = st.emu.unwrap().shutdown().await;
    eprintln!(
        "4 x 6 MB over GEO: per-flow {:?} Mb/s, Jain {jain:.3}, aggregate {:.1} Mb/s, link drops down {}",
        rates.iter().map(|r| (r / 1e5).round() / 10.0).collect::<Vec<_>>(),
        aggregate / 1e6,
        stats.down.dropped()
    );
    assert!(jain > 0.95, "unfair sharing: Jain's index {jain:.3}");
    assert!(
        aggregate > 0.6 * 50e6,
        "aggregate {:.1} Mb/s leaves the downlink idle",
        aggregate / 1e6
    );
    assert_eq!(
        stats.down.dropped(),
        0,
        "the shaper should keep the downlink queue from overflowing"
    );
}

/// The gateway is told 50 Mb/s but the downlink carries 20 Mb/s with a deep queue (two seconds
/// at 20 Mb/s): the allocation controller sees the RTT rise and loss, backs off, and the transfer
/// still completes at a good share of what the link carries without keeping the queue full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overstated_allocation_backs_off() {
    let origin = origin().await;
    let (t, g) = profile_links(Profile::Geo);
    let real_down = 20_000_000;
    let (up, mut down) = Profile::Geo.links();
    down.rate_bps = real_down;
    down.queue = linkmodel::QueueLimit::Bytes(real_down / 8 * 2);
    let st = socks_pair(
        hop_config_for(1, t),
        hop_config_for(
            2,
            HopLink {
                send_rate_bps: g.send_rate_bps,
                ..g
            },
        ),
        Some((up, down)),
        vec!["127.0.0.0/8".into()],
    )
    .await;
    let n = 15_000_000;
    let secs = download(st.socks, origin, n).await;
    let goodput = n as f64 * 8.0 / secs;
    let status = st.gateway.status().await.unwrap();
    let stats = st.emu.unwrap().shutdown().await;
    eprintln!(
        "15 MB with a 50 Mb/s allocation over a 20 Mb/s link: {:.1} Mb/s, {} losses detected, link drops {}",
        goodput / 1e6,
        status.stp.as_ref().map_or(0, |s| s.totals.losses_detected),
        stats.down.dropped()
    );
    // After a reduction the window regrows by one SD per RTT, as TCP's does, so the transfer
    // runs below the link for a while: expect about 60 %, require 45 %.
    assert!(
        goodput > 0.45 * real_down as f64,
        "goodput {:.1} Mb/s: backing off went too far",
        goodput / 1e6
    );
    // Without backing off, the 30 Mb/s excess would overflow the 5 MB queue within about 1.3 s
    // and keep it overflowing for the whole transfer.
    assert!(
        stats.down.dropped() < (n / 1400 / 10) as u64,
        "{} datagrams dropped: the sender kept flooding the link",
        stats.down.dropped()
    );
}
