//! `satstp demo`: the whole split-connection gateway in one process, without privileges. A local
//! HTTP origin server, a gateway, the UDP link emulator with a satellite profile, and a terminal
//! with a SOCKS5 listener, all on loopback; a client fetches one large object and a web page of
//! many objects through the terminal, and the demo reports goodput against the link's capacity,
//! the page load time, and the bytes the emulated link carried each way.
//!
//! Both hop sides are sized from the profile's allocation exactly as the daemons size them from
//! `up_rate_bps`, `down_rate_bps` and `rtt_ms` in their configuration files
//! (`pep::sizing::HopLink`). `--engine` runs the older engine-only demo instead (virtual time,
//! `demo_engine.rs`).

use anyhow::{bail, Context, Result};
use clap::Args;
use linkem::{EmulatorConfig, Profile, UdpEmulator};
use netsim::units::parse_bytes;
use pep::gateway::policy::{Policy, PolicyConfig};
use pep::keys::generate_keypair;
use pep::sizing::HopLink;
use pep::socks::SocksAuth;
use pep::stack::{SocksListener, StpHop, TerminalHop};
use pep::{GatewayOptions, TerminalOptions};
use rand_core::SeedableRng;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Link profile: geo (50/5 Mb/s, 600 ms), geo-1998, direcpc, leo.
    #[arg(long, default_value = "geo")]
    profile: Profile,
    /// Size of the large object (units such as 20MB or 4MiB accepted).
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// Objects on the web page (the first is the page itself, fetched before the others).
    #[arg(long, default_value_t = 30)]
    objects: u32,
    /// Seed for the page's object sizes and the emulated link.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Turn off the terminal's SOCKS5 fast open (on by default, as in the terminal's
    /// configuration): wait for the gateway's verdict before answering the client, one
    /// satellite round trip more per connection, failures reported as SOCKS5 reply codes.
    #[arg(long)]
    no_fast_open: bool,
    /// Run the engine-only demo instead: one STP transfer over the seeds' 1.5 Mb/s GEO path in
    /// virtual time (takes --size, --loss, --seed).
    #[arg(long)]
    engine: bool,
    /// Engine-only demo: random loss on both directions, as a fraction (0 to 0.5).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
}

/// Parallel connections a browser opens to one host (HTTP/1.1).
const BROWSER_CONNECTIONS: usize = 6;
/// Give up on any single fetch after this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);
/// The untimed object that brings the tunnel up before the measurements.
const WARM_UP_BYTES: u64 = 1000;

pub fn run(args: &DemoArgs) -> Result<()> {
    if args.engine {
        return crate::demo_engine::run(&crate::demo_engine::DemoArgs {
            size: args.size.unwrap_or(10_000_000),
            loss: args.loss,
            seed: args.seed,
        });
    }
    if args.loss != 0.0 {
        bail!("--loss applies to the engine-only demo (--engine); the profiles set the link");
    }
    let profile = args.profile;
    let (down_bps, up_bps, rtt_ns) = profile.parameters();
    // Default object: 20 MB, or about 40 s of the downlink on slow profiles.
    let size = args
        .size
        .unwrap_or_else(|| 20_000_000.min(down_bps / 8 * 40).max(1_000_000));
    if size == 0 {
        bail!("--size must be positive");
    }
    if args.objects == 0 || args.objects > 1000 {
        bail!("--objects must be 1..=1000, got {}", args.objects);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(demo(profile, down_bps, up_bps, rtt_ns, size, args))
}

async fn demo(
    profile: Profile,
    down_bps: u64,
    up_bps: u64,
    rtt_ns: u64,
    size: u64,
    args: &DemoArgs,
) -> Result<()> {
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    println!(
        "satstp demo: the split-connection gateway over an emulated `{}` link, on loopback",
        profile.name()
    );
    println!(
        "  link: {:.1} Mb/s down, {:.2} Mb/s up, {} ms RTT, drop-tail queues of one BDP (UDP/IPv4 headers counted)",
        down_bps as f64 / 1e6,
        up_bps as f64 / 1e6,
        rtt_ms
    );
    println!("  path: client -SOCKS5-> terminal =STP over Noise (UDP)=> emulator => gateway -TCP-> origin{}\n",
        if !args.no_fast_open { " (SOCKS5 fast open)" } else { "" }
    );

    let origin = spawn_origin().await?;
    let stack = Stack::start(
        profile,
        down_bps,
        up_bps,
        rtt_ms,
        args.seed,
        !args.no_fast_open,
    )
    .await?;

    // A small object first, untimed: the terminal's tunnel comes up, as it is long before a
    // user's first click in a deployment.
    let warm = socks_connect(stack.socks, origin).await?;
    tokio::time::timeout(FETCH_TIMEOUT, get(&mut BufReader::new(warm), WARM_UP_BYTES))
        .await
        .context("the warm-up object did not arrive in time")??;

    // One large object; goodput is timed from the request to the last byte.
    let t_connect = Instant::now();
    let conn = socks_connect(stack.socks, origin).await?;
    let connect_secs = t_connect.elapsed().as_secs_f64();
    let before_bulk = stack.emulator.stats();
    let t0 = Instant::now();
    let (got, fnv) = tokio::time::timeout(FETCH_TIMEOUT, get(&mut BufReader::new(conn), size))
        .await
        .context("the large object did not arrive in time")??;
    let secs = t0.elapsed().as_secs_f64();
    if got != size || fnv != fnv_of_pattern(size) {
        bail!("the large object arrived corrupted or short ({got} of {size} bytes)");
    }
    let after_bulk = stack.emulator.stats();
    let goodput = size as f64 * 8.0 / secs;
    if !args.no_fast_open {
        println!(
            "  connection through the terminal: {connect_secs:.2} s (fast open: answered at once; the request travels with the destination)"
        );
    } else {
        println!(
            "  connection through the terminal and gateway: {connect_secs:.2} s (the gateway's verdict takes one satellite round trip)"
        );
    }
    println!(
        "  object of {size} bytes: {secs:.2} s from request to last byte, every byte verified"
    );
    println!(
        "    goodput {:.2} Mb/s = {:.1} % of the {:.1} Mb/s downlink (the ceiling here is about {:.0} %: one RTT\n    before the first byte, and {:.1} % of each datagram is STP, tunnel, UDP and IP headers)",
        goodput / 1e6,
        100.0 * goodput / down_bps as f64,
        down_bps as f64 / 1e6,
        100.0 * ceiling(size, down_bps, rtt_ns),
        100.0 * header_share()
    );

    // A web page: the page, then its objects over six persistent connections.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let sizes: Vec<u64> = (0..args.objects)
        .map(|_| netsim::web::response_size(&mut rng))
        .collect();
    let page_bytes: u64 = sizes.iter().sum();
    let t0 = Instant::now();
    tokio::time::timeout(FETCH_TIMEOUT, fetch_page(stack.socks, origin, &sizes))
        .await
        .context("the web page did not load in time")??;
    let plt = t0.elapsed().as_secs_f64();
    println!(
        "  web page: {} objects, {} bytes in all (sizes from the web model), {} connections: loaded in {plt:.2} s = {:.1} RTTs",
        sizes.len(),
        page_bytes,
        BROWSER_CONNECTIONS.min(sizes.len().saturating_sub(1)).max(1),
        plt * 1e9 / rtt_ns as f64
    );

    let stats = stack.emulator.stats();
    println!(
        "  emulated link: down {} bytes in {} datagrams, up {} bytes in {} datagrams, {} + {} dropped",
        stats.down.sent_bytes,
        stats.down.sent_packets,
        stats.up.sent_bytes,
        stats.up.sent_packets,
        stats.down.dropped(),
        stats.up.dropped()
    );
    let up = after_bulk.up.sent_bytes - before_bulk.up.sent_bytes;
    let down = after_bulk.down.sent_bytes - before_bulk.down.sent_bytes;
    println!(
        "    during the large object the uplink carried {up} bytes, {:.3} % of the downlink's {down}",
        100.0 * up as f64 / down.max(1) as f64
    );
    if let Some(st) = stack.gateway_status().await {
        let t = &st.totals;
        let get = |ty| t.packets_sent.get(ty);
        use stp::wire::Types;
        println!(
            "  gateway STP: {} SDs sent, {} retransmitted; received {} STATs and {} USTATs for {} POLLs",
            get(Types::SD),
            t.retransmitted_packets,
            t.packets_received.get(Types::STAT),
            t.packets_received.get(Types::USTAT),
            get(Types::POLL)
        );
    }
    println!(
        "\n  The seeds' claim: STP matches TCP's forward throughput while using up to ten times less\n  return-channel bandwidth. `satstp bench link` (root) compares against kernel TCP on one link."
    );
    stack.emulator.shutdown().await;
    Ok(())
}

/// The best goodput fraction of the downlink for one object: the request's round trip, then the
/// object at the payload share of the link.
fn ceiling(size: u64, down_bps: u64, rtt_ns: u64) -> f64 {
    let payload_rate = down_bps as f64 * (1.0 - header_share()) * pep::sizing::SHAPER_SHARE;
    let secs = rtt_ns as f64 / 1e9 + size as f64 * 8.0 / payload_rate;
    size as f64 * 8.0 / secs / down_bps as f64
}

/// Share of a full SD's bytes on the link that is not payload (STP header, tunnel, UDP, IPv4),
/// with the hop's datagram size.
fn header_share() -> f64 {
    let payload = pep::sizing::hop_stp_defaults(false).max_payload() as f64;
    let headers =
        stp::wire::HEADER_LEN + pep::tunnel::wire::DATA_OVERHEAD + pep::hop::IPV4_UDP_OVERHEAD;
    headers as f64 / (payload + headers as f64)
}

/// Terminal, emulator and gateway, wired together on loopback.
struct Stack {
    socks: SocketAddr,
    emulator: linkem::EmulatorHandle,
    gateway: pep::Gateway,
}

impl Stack {
    async fn start(
        profile: Profile,
        down_bps: u64,
        up_bps: u64,
        rtt_ms: u32,
        seed: u64,
        fast_open: bool,
    ) -> Result<Stack> {
        let (terminal_key, terminal_pub) = generate_keypair()?;
        let (gateway_key, gateway_pub) = generate_keypair()?;
        let gw_link = HopLink {
            send_rate_bps: down_bps,
            recv_rate_bps: up_bps,
            rtt_ms,
        };
        let term_link = HopLink {
            send_rate_bps: up_bps,
            recv_rate_bps: down_bps,
            rtt_ms,
        };
        // The origin is on loopback, which a gateway denies by default: allow it explicitly.
        let policy = Arc::new(
            Policy::new(PolicyConfig {
                allow: vec!["127.0.0.0/8".into()],
                deny: vec![],
                allow_private: false,
                own_addresses: vec![],
            })
            .map_err(anyhow::Error::msg)?,
        );
        let mut g = GatewayOptions::new(
            gateway_key,
            vec![terminal_pub],
            "127.0.0.1:0".parse()?,
            StpHop::sized(gw_link, false, seed.wrapping_add(2)),
            gw_link.relay_buffer_bytes(),
            policy,
            Duration::from_secs(30),
        );
        g.responder_seed = seed ^ 0x5eed;
        let gateway = pep::Gateway::start(g).await?;
        let (up, down) = profile.links();
        let emulator = UdpEmulator::start(EmulatorConfig {
            listen: "127.0.0.1:0".parse()?,
            to: gateway.hop_addr(),
            up,
            down,
            seed,
        })
        .await?;
        let mut stp = StpHop::sized(term_link, false, seed.wrapping_add(1));
        stp.bind = Some("127.0.0.1:0".parse()?);
        let mut t = TerminalOptions::new(
            terminal_key,
            emulator.local_addr(),
            gateway_pub,
            TerminalHop::Stp(Box::new(stp)),
            term_link.relay_buffer_bytes(),
        );
        t.socks = Some(SocksListener {
            listen: "127.0.0.1:0".parse()?,
            auth: SocksAuth::None,
            fast_open,
        });
        let terminal = pep::Terminal::start(t).await?;
        Ok(Stack {
            socks: terminal
                .socks_addr()
                .context("the terminal's SOCKS5 listener")?,
            emulator,
            gateway,
        })
    }

    async fn gateway_status(&self) -> Option<pep::hop::HopStatus> {
        self.gateway.status().await
    }
}

/// The origin: HTTP/1.1 with keep-alive; `GET /bytes/N` answers N bytes of a fixed pattern.
async fn spawn_origin() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = serve_http(s).await;
            });
        }
    });
    Ok(addr)
}

async fn serve_http(s: TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::new(s);
    loop {
        let mut request = String::new();
        if r.read_line(&mut request).await? == 0 {
            return Ok(());
        }
        // Skip the header lines.
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).await? == 0 || line == "\r\n" || line == "\n" {
                break;
            }
        }
        let n = request
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.strip_prefix("/bytes/"))
            .and_then(|n| n.parse::<u64>().ok());
        let w = r.get_mut();
        let Some(n) = n else {
            w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await?;
            continue;
        };
        w.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes())
            .await?;
        let mut sent = 0u64;
        let mut block = vec![0u8; 64 * 1024];
        while sent < n {
            let k = (n - sent).min(block.len() as u64) as usize;
            fill_pattern(sent, &mut block[..k]);
            w.write_all(&block[..k]).await?;
            sent += k as u64;
        }
    }
}

/// Byte `i` of every object: a cheap position-dependent pattern, so corruption and reordering
/// both show.
fn fill_pattern(offset: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        let x = (offset + i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        *b = (x >> 56) as u8;
    }
}

fn fnv_update(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv_of_pattern(n: u64) -> u64 {
    let mut h = FNV_START;
    let mut block = vec![0u8; 64 * 1024];
    let mut done = 0u64;
    while done < n {
        let k = (n - done).min(block.len() as u64) as usize;
        fill_pattern(done, &mut block[..k]);
        h = fnv_update(h, &block[..k]);
        done += k as u64;
    }
    h
}

/// A SOCKS5 (no authentication) connection to `dest` through `proxy`.
async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> Result<TcpStream> {
    let mut s = TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    s.write_all(&[5, 1, 0]).await?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await?;
    if m != [5, 0] {
        bail!("SOCKS method negotiation failed: {m:?}");
    }
    let SocketAddr::V4(v4) = dest else {
        bail!("the demo's origin is IPv4");
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await?;
    if rep[1] != 0 {
        bail!("the gateway refused the connection: SOCKS reply {}", rep[1]);
    }
    Ok(s)
}

/// One GET on a persistent connection; returns the body's length and FNV hash.
async fn get(r: &mut BufReader<TcpStream>, n: u64) -> Result<(u64, u64)> {
    r.get_mut()
        .write_all(format!("GET /bytes/{n} HTTP/1.1\r\nHost: origin\r\n\r\n").as_bytes())
        .await?;
    let mut status = String::new();
    r.read_line(&mut status).await?;
    if !status.starts_with("HTTP/1.1 200") {
        bail!("origin answered {status:?}");
    }
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            bail!("connection closed in the response header");
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse::<u64>().ok();
        }
    }
    let len = len.context("response without Content-Length")?;
    let mut h = FNV_START;
    let mut left = len;
    let mut buf = vec![0u8; 64 * 1024];
    while left > 0 {
        let k = r.read(&mut buf[..left.min(64 * 1024) as usize]).await?;
        if k == 0 {
            bail!("connection closed {left} bytes before the end of the body");
        }
        h = fnv_update(h, &buf[..k]);
        left -= k as u64;
    }
    Ok((len, h))
}

async fn fetch_one(proxy: SocketAddr, origin: SocketAddr, n: u64) -> Result<(u64, u64)> {
    let s = socks_connect(proxy, origin).await?;
    get(&mut BufReader::new(s), n).await
}

/// The page first, then the other objects spread over up to six persistent connections.
async fn fetch_page(proxy: SocketAddr, origin: SocketAddr, sizes: &[u64]) -> Result<()> {
    let Some((&page, objects)) = sizes.split_first() else {
        return Ok(());
    };
    let (n, h) = fetch_one(proxy, origin, page).await?;
    if n != page || h != fnv_of_pattern(page) {
        bail!("the page arrived corrupted");
    }
    let lanes = BROWSER_CONNECTIONS.min(objects.len());
    let queue = Arc::new(std::sync::Mutex::new(objects.to_vec()));
    let mut tasks = Vec::new();
    for _ in 0..lanes {
        let queue = Arc::clone(&queue);
        tasks.push(tokio::spawn(async move {
            let mut conn = BufReader::new(socks_connect(proxy, origin).await?);
            loop {
                let next = queue.lock().map_err(|_| anyhow::anyhow!("lock"))?.pop();
                let Some(size) = next else {
                    return Ok::<(), anyhow::Error>(());
                };
                let (n, h) = get(&mut conn, size).await?;
                if n != size || h != fnv_of_pattern(size) {
                    bail!("an object of {size} bytes arrived corrupted");
                }
            }
        }));
    }
    for t in tasks {
        t.await.context("a page fetch task failed")??;
    }
    Ok(())
}
