//! SOCKS5 client → terminal → (emulated link) → gateway → local origin server, on loopback.

mod common;

use common::{
    assert_reset, closed_port, fetch_1000, fnv, geo_pair, origin, pattern, setup_opts,
    socks_connect, Setup,
};

use linkem::Profile;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn setup(profile: Option<Profile>, allow: Vec<String>) -> Setup {
    setup_opts(profile, allow, false).await
}

/// The acceptance run: 20 MB down and 5 MB up byte-exact through the `geo` profile
/// (50 Mb/s down, 5 Mb/s up, 600 ms RTT, one-BDP queues); the download's goodput, request to last
/// byte at the client, at least 75 % of the downlink; the uplink carries at most 1 % of the
/// downlink's bytes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_and_upload_through_socks_over_emulated_geo() {
    let origin = origin().await;
    let st = setup(Some(Profile::Geo), vec!["127.0.0.0/8".into()]).await;
    let emu = st.emu.as_ref().unwrap();
    let (down_rate, _, _) = Profile::Geo.parameters();

    let down = 20_000_000;
    let (mut s, code) = socks_connect(st.socks, origin).await;
    assert_eq!(code, 0);
    let before = emu.stats();
    let t0 = Instant::now();
    s.write_all(format!("D {down}\n").as_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(down);
    tokio::time::timeout(Duration::from_secs(120), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let after = emu.stats();
    assert_eq!(got.len(), down);
    assert!(got == pattern(0, down), "download corrupted");
    let goodput = down as f64 * 8.0 / secs;
    let up_bytes = after.up.sent_bytes - before.up.sent_bytes;
    let down_bytes = after.down.sent_bytes - before.down.sent_bytes;
    eprintln!(
        "20 MB download over emulated GEO: {secs:.2} s = {:.1} Mb/s ({:.1} % of the downlink); \
         link bytes up {up_bytes} down {down_bytes} ({:.3} %)",
        goodput / 1e6,
        100.0 * goodput / down_rate as f64,
        100.0 * up_bytes as f64 / down_bytes as f64
    );
    assert!(
        goodput >= 0.75 * down_rate as f64,
        "goodput {:.1} Mb/s is below 75 % of the {} Mb/s downlink",
        goodput / 1e6,
        down_rate / 1_000_000
    );
    assert!(
        up_bytes * 100 <= down_bytes,
        "uplink carried {up_bytes} bytes for {down_bytes} downlink bytes (over 1 %)"
    );

    let up = 5_000_000;
    let data = pattern(9, up);
    let (mut s, code) = socks_connect(st.socks, origin).await;
    assert_eq!(code, 0);
    let t0 = Instant::now();
    s.write_all(format!("U {up}\n").as_bytes()).await.unwrap();
    s.write_all(&data).await.unwrap();
    let mut h = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(120), s.read_exact(&mut h))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(u64::from_be_bytes(h), fnv(&data), "upload corrupted");
    eprintln!(
        "5 MB upload over emulated GEO: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let stats = st.emu.unwrap().shutdown().await;
    eprintln!(
        "emulated link: up {} B sent, {} dropped; down {} B sent, {} dropped",
        stats.up.sent_bytes,
        stats.up.dropped(),
        stats.down.sent_bytes,
        stats.down.dropped()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_denied_destinations_get_socks_errors() {
    let st = setup(None, vec!["127.0.0.0/8".into()]).await;
    // A closed port: connection refused (0x05).
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (_, code) = socks_connect(st.socks, closed).await;
    assert_eq!(code, 5);
    // Outside the allow-list: not allowed (0x02).
    let (_, code) = socks_connect(st.socks, "192.0.2.1:80".parse().unwrap()).await;
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_denied_by_default() {
    let origin = origin().await;
    let st = setup(None, vec![]).await;
    let (_, code) = socks_connect(st.socks, origin).await;
    assert_eq!(
        code, 2,
        "the gateway must not be an open proxy to its own loopback"
    );
}

/// SOCKS5 fast open over GEO: the success reply comes at once and the request rides with the
/// destination, so the answer arrives one round trip after the connect began (two without fast
/// open); a refused connect then shows as a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_open_saves_a_round_trip_and_resets_on_failure() {
    let origin = origin().await;
    let mut times = Vec::new();
    for fast_open in [false, true] {
        let st = geo_pair(fast_open).await;
        // A first connection brings the tunnel up; time the second.
        for round in 0..2 {
            let t0 = Instant::now();
            let (mut s, code) = socks_connect(st.socks, origin).await;
            assert_eq!(code, 0);
            fetch_1000(&mut s).await;
            if round == 1 {
                times.push(t0.elapsed().as_secs_f64());
            }
        }
        if fast_open {
            let (mut s, code) = socks_connect(st.socks, closed_port().await).await;
            assert_eq!(code, 0, "fast open answers before the verdict");
            assert_reset(&mut s).await;
        }
    }
    eprintln!(
        "connect + 1000-byte request/response over GEO: {:.2} s without fast open, {:.2} s with",
        times[0], times[1]
    );
    assert!(
        times[0] > 1.15,
        "two round trips expected, took {:.2} s",
        times[0]
    );
    assert!(
        times[1] < 0.9,
        "fast open should take about one round trip, took {:.2} s",
        times[1]
    );
}
