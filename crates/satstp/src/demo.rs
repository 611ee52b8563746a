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
use loadgen::client::{Client, Route};
use loadgen::origin::Origin;
use loadgen::page::{self, Style};
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
    /// virtual time (takes --size, --loss, --seed; refuses --profile, --objects and
    /// --no-fast-open, which set up the real-time demo).
    #[arg(long, conflicts_with_all = ["profile", "objects", "no_fast_open"])]
    engine: bool,
    /// Engine-only demo: random loss on both directions, as a fraction (0 to 0.5).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    loss: f64,
}

/// Parallel connections a browser opens to one host (HTTP/1.1).
const BROWSER_CONNECTIONS: usize = loadgen::page::BROWSER_CONNECTIONS;
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
        bail!("--objects must be from 1 to 1000, got {}", args.objects);
    }
    let ticker = crate::progress::Ticker::start("demo");
    ticker.phase("starting");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(demo(profile, down_bps, up_bps, rtt_ns, size, args, &ticker))
}

async fn demo(
    profile: Profile,
    down_bps: u64,
    up_bps: u64,
    rtt_ns: u64,
    size: u64,
    args: &DemoArgs,
    ticker: &crate::progress::Ticker,
) -> Result<()> {
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    outln!(
        "satstp demo: the split-connection gateway over an emulated `{}` link, on loopback",
        profile.name()
    );
    outln!(
        "  link: {:.1} Mb/s down, {:.2} Mb/s up, {} ms RTT, drop-tail queues of one BDP (UDP/IPv4 headers counted)",
        down_bps as f64 / 1e6,
        up_bps as f64 / 1e6,
        rtt_ms
    );
    outln!("  path: client -SOCKS5-> terminal =STP over Noise (UDP)=> emulator => gateway -TCP-> origin{}\n",
        if !args.no_fast_open { " (SOCKS5 fast open)" } else { "" }
    );

    let origin = Origin::bind("127.0.0.1:0".parse()?)
        .await
        .context("cannot start the origin")?;
    let stack = Stack::start(
        profile,
        down_bps,
        up_bps,
        rtt_ms,
        args.seed,
        !args.no_fast_open,
    )
    .await?;
    let client = Client::new(origin.addr(), Route::Socks5(stack.socks));

    ticker.phase("bringing the tunnel up");
    // A small object first, untimed: the terminal's tunnel comes up, as it is long before a
    // user's first click in a deployment.
    tokio::time::timeout(FETCH_TIMEOUT, async {
        client.connect().await?.get(0, WARM_UP_BYTES).await
    })
    .await
    .context("the warm-up object did not arrive in time")?
    .context("the warm-up object")?;

    ticker.phase("fetching the large object");
    // One large object; goodput is timed from the request to the last byte, every byte checked.
    let t_connect = Instant::now();
    let mut conn = client
        .connect()
        .await
        .context("connecting through the terminal")?;
    let connect_secs = t_connect.elapsed().as_secs_f64();
    let before_bulk = stack.emulator.stats();
    let t0 = Instant::now();
    tokio::time::timeout(FETCH_TIMEOUT, conn.get(1, size))
        .await
        .context("the large object did not arrive in time")?
        .context("the large object")?;
    let secs = t0.elapsed().as_secs_f64();
    let after_bulk = stack.emulator.stats();
    let goodput = size as f64 * 8.0 / secs;
    if !args.no_fast_open {
        outln!(
            "  connection through the terminal: {connect_secs:.2} s (fast open: answered at once; the request travels with the destination)"
        );
    } else {
        outln!(
            "  connection through the terminal and gateway: {connect_secs:.2} s (the gateway's verdict takes one satellite round trip)"
        );
    }
    outln!("  object of {size} bytes: {secs:.2} s from request to last byte, every byte verified");
    outln!(
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
    ticker.phase("loading the web page");
    let t0 = Instant::now();
    tokio::time::timeout(FETCH_TIMEOUT, page::fetch(&client, &sizes, Style::BROWSER))
        .await
        .context("the web page did not load in time")?
        .context("the web page")?;
    let plt = t0.elapsed().as_secs_f64();
    outln!(
        "  web page: {} objects, {} bytes in all (sizes from the web model), {} connections: loaded in {plt:.2} s = {:.1} RTTs",
        sizes.len(),
        page_bytes,
        BROWSER_CONNECTIONS.min(sizes.len().saturating_sub(1)).max(1),
        plt * 1e9 / rtt_ns as f64
    );

    let stats = stack.emulator.stats();
    outln!(
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
    outln!(
        "    during the large object the uplink carried {up} bytes, {:.3} % of the downlink's {down}",
        100.0 * up as f64 / down.max(1) as f64
    );
    if let Some(stp) = stack.gateway_status().await.and_then(|st| st.stp) {
        let t = &stp.totals;
        let get = |ty| t.packets_sent.get(ty);
        use stp::wire::Types;
        outln!(
            "  gateway STP: {} SDs sent, {} retransmitted; received {} STATs and {} USTATs for {} POLLs",
            get(Types::SD),
            t.retransmitted_packets,
            t.packets_received.get(Types::STAT),
            t.packets_received.get(Types::USTAT),
            get(Types::POLL)
        );
    }
    outln!(
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
        stp::wire::HEADER_LEN + pep::tunnel::DATA_OVERHEAD + pep::sizing::IPV4_UDP_OVERHEAD;
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
