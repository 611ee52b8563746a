//! A 60-second total outage of the satellite hop in the middle of a 20 MB download over the
//! emulated `geo` link (both directions dark; every datagram sent or in flight meanwhile is
//! lost). With the hop's default dead-peer timeout (above the outage) the transfer resumes when
//! the link returns and completes byte-exact; with a dead-peer timeout shorter than the outage
//! the client's connection is reset — never a clean end with bytes missing.

mod common;

use common::{hop_config_for, origin, pattern, profile_links, socks_connect, socks_pair};
use linkem::Profile;
use linkmodel::Outage;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SIZE: usize = 20_000_000;
/// When the outage starts, counted from the emulator's start: the tunnel handshake, the
/// connect and about a second of the download come first.
const OUTAGE_START: Duration = Duration::from_millis(3500);
const OUTAGE: Duration = Duration::from_secs(60);

/// Downloads `SIZE` bytes through the pair while the hop goes dark for `OUTAGE`; what the
/// client read and how its read ended, and how long it took.
async fn download_across_the_outage(
    dead_timeout_ms: Option<u32>,
) -> (Vec<u8>, std::io::Result<usize>, Duration) {
    let origin = origin().await;
    let (t, g) = profile_links(Profile::Geo);
    let (mut tc, mut gc) = (hop_config_for(1, t), hop_config_for(2, g));
    if let Some(ms) = dead_timeout_ms {
        for c in [&mut tc, &mut gc] {
            c.endpoint.connection.dead_timeout_ms = ms;
        }
    }
    let (mut up, mut down) = Profile::Geo.links();
    let outage = Outage {
        start_ns: OUTAGE_START.as_nanos() as u64,
        duration_ns: OUTAGE.as_nanos() as u64,
    };
    up.outages.push(outage);
    down.outages.push(outage);
    let st = socks_pair(tc, gc, Some((up, down)), vec!["127.0.0.0/8".into()]).await;
    let t0 = Instant::now();
    let (mut s, code) = socks_connect(st.socks, origin).await;
    assert_eq!(code, 0);
    s.write_all(format!("D {SIZE}\n").as_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(SIZE);
    let end = tokio::time::timeout(Duration::from_secs(180), s.read_to_end(&mut got))
        .await
        .expect("the download neither finished nor failed within 180 s");
    (got, end, t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_long_outage_mid_download_is_ridden_out_byte_exact() {
    let default = pep::sizing::hop_stp_defaults(false).dead_timeout_ms;
    assert!(
        u64::from(default) > OUTAGE.as_millis() as u64,
        "the hop's default dead-peer timeout ({default} ms) must outlast a one-minute outage"
    );
    let (got, end, took) = download_across_the_outage(None).await;
    eprintln!(
        "20 MB across a 60 s outage: {} bytes in {:.1} s, ended {end:?}",
        got.len(),
        took.as_secs_f64()
    );
    assert!(end.is_ok(), "the download failed: {end:?}");
    assert_eq!(got.len(), SIZE, "bytes missing after the outage");
    assert!(got == pattern(0, SIZE), "the download was corrupted");
    assert!(
        took > OUTAGE,
        "finished in {took:?}: the outage did not hit the transfer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_beyond_the_dead_peer_timeout_resets_the_client() {
    let (got, end, took) = download_across_the_outage(Some(15_000)).await;
    eprintln!(
        "20 MB across a 60 s outage with a 15 s dead-peer timeout: {} bytes in {:.1} s, ended {end:?}",
        got.len(),
        took.as_secs_f64()
    );
    assert!(got.len() < SIZE, "the transfer cannot have completed");
    assert!(
        got == pattern(0, SIZE)[..got.len()],
        "the bytes before the cut must be right"
    );
    let e = end.expect_err("a cut transfer must not end with a clean EOF");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    assert!(
        took < OUTAGE,
        "the reset came after {took:?}, not at the dead-peer timeout"
    );
}
