//! SOCKS5 client → terminal → (emulated link) → gateway → local origin server, on loopback.

mod common;

use common::{hop_config, hop_config_for, link_to, pattern, profile_links, terminal_hop};

use linkem::Profile;
use pep::hop::{Hop, Security};
use pep::keys::generate_keypair;
use pep::policy::{Policy, PolicyConfig};
use pep::socks::SocksAuth;
use pep::tunnel::{Responder, ResponderConfig};
use rand_core::SeedableRng;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Origin server: "D n\n" → n pattern bytes then close; "U n\n" → reads n bytes, answers the
/// 8-byte FNV hash, closes.
async fn origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut r = BufReader::new(s);
                let mut line = String::new();
                if r.read_line(&mut line).await.is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let (Some(cmd), Some(n)) = (
                    parts.next(),
                    parts.next().and_then(|n| n.parse::<usize>().ok()),
                ) else {
                    return;
                };
                if cmd == "D" {
                    let _ = r.get_mut().write_all(&pattern(7, n)).await;
                    let _ = r.get_mut().shutdown().await;
                } else {
                    let mut got = vec![0u8; n];
                    if r.read_exact(&mut got).await.is_ok() {
                        let _ = r.get_mut().write_all(&fnv(&got).to_be_bytes()).await;
                        let _ = r.get_mut().shutdown().await;
                    }
                }
            });
        }
    });
    addr
}

struct Setup {
    socks: SocketAddr,
    emu: Option<linkem::EmulatorHandle>,
}

async fn setup(profile: Option<Profile>, allow: Vec<String>) -> Setup {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let gsock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(3));
    let responder = Responder::new(gk, [tp], ResponderConfig::default(), rng).unwrap();
    // With a profile both sides are sized from its allocation, as the daemons do from their
    // configuration files.
    let links = profile.map(profile_links);
    let hop_cfg = |seed, gateway_side: bool| match links {
        Some((t, g)) => hop_config_for(seed, if gateway_side { g } else { t }),
        None => hop_config(seed, 4 << 20),
    };
    let gw = Hop::start(
        gsock,
        Security::Gateway {
            responder: Box::new(responder),
        },
        hop_cfg(2, true),
    )
    .unwrap();
    let gw_addr = gw.local_addr();
    let policy = Arc::new(
        Policy::new(PolicyConfig {
            allow,
            deny: vec![],
            allow_private: false,
            own_addresses: vec![],
        })
        .unwrap(),
    );
    tokio::spawn(pep::relay::serve(gw, policy, Duration::from_secs(5)));
    let (emu, to) = link_to(gw_addr, profile, 4).await;
    let term = Arc::new(terminal_hop(tk, gp, to, hop_cfg(1, false)).await);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socks = l.local_addr().unwrap();
    tokio::spawn(pep::relay::serve_socks(l, term, Arc::new(SocksAuth::None)));
    Setup { socks, emu }
}

/// SOCKS5 CONNECT to `dest`; returns the stream and the reply code.
async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let SocketAddr::V4(v4) = dest else {
        panic!("ipv4 only here")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    (s, rep[1])
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
    assert!(got == pattern(7, down), "download corrupted");
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
