//! `satstp bench flood`: a legitimate download through the gateway while its hop port is flooded
//! with forged and unwanted datagrams, on loopback.
//!
//! In-process set-up (the default): an origin, a gateway (its hop and relay, a limit of
//! `--attacker-limit` connections per terminal), the UDP link emulator with the `geo` profile
//! (50 Mb/s down, 5 Mb/s up, 600 ms round trip) in front of it, and a terminal with a SOCKS5
//! listener, sized as the daemons size them. Between the terminal and the emulator a tap copies
//! the terminal's sealed datagrams, which the flood then replays. The flood goes straight to the
//! gateway's hop port (an attacker on the Internet side, not behind the satellite link):
//! random bytes, replays of captured datagrams, handshake initiations from keys the gateway does
//! not know, and — from a second, authenticated terminal — stream opens (BGNs) beyond its
//! connection limit. The same download runs without and with the flood; the figures are the
//! goodput kept, the process's resident memory before and after, and every drop by its cause.
//!
//! With `--target ADDR` the flood (random bytes and unknown-key initiations only: the bench has
//! no key or capture of that deployment) goes to an existing gateway for `--duration`; only
//! loopback addresses are accepted, optionally inside a network namespace (`--netns`), so the
//! command cannot be pointed at someone else's host.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use linkem::{EmulatorConfig, Profile, UdpEmulator};
use netsim::units::{parse_bytes, parse_duration_ns};
use pep::gateway::policy::{Policy, PolicyConfig};
use pep::hop::{Hop, HopConfig, HopMonitor, HopStatus, Security};
use pep::keys::generate_keypair;
use pep::metrics::RefusalReason;
use pep::ops::OpsConfig;
use pep::sizing::HopLink;
use pep::socks::SocksAuth;
use pep::stack::{SocksListener, StpHop, TerminalHop};
use pep::{GatewayOptions, TerminalOptions};

use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

use crate::bench_gateway::{download, rss_kib};
use crate::flood::{
    attack_opens, flood, forged_initiations, tap, udp_rcvbuf_errors, Ammunition, Sent,
};
use loadgen::origin::Origin;

#[derive(Debug, Args)]
pub struct FloodBenchArgs {
    /// Datagrams per second the flood aims for, all kinds together.
    #[arg(long, default_value_t = 120_000)]
    rate: u64,
    /// Bytes of each download (units such as 20MB accepted).
    #[arg(long, default_value = "20MB", value_parser = parse_bytes)]
    size: u64,
    /// Connections the authenticated attacker terminal may hold at the gateway.
    #[arg(long, default_value_t = 64)]
    attacker_limit: u32,
    /// Which kinds of flood to send: random, replay, handshake (initiations from unknown keys),
    /// open (stream opens from an authenticated terminal beyond its limit); comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "random,replay,handshake,open"
    )]
    kinds: Vec<Kind>,
    /// Flood an existing gateway's hop port instead (a loopback address only).
    #[arg(long)]
    target: Option<SocketAddr>,
    /// With --target: the network namespace (`ip netns` name) to send from.
    #[arg(long, requires = "target")]
    netns: Option<String>,
    /// With --target: how long to flood (e.g. 10s).
    #[arg(long, default_value = "10s", value_parser = parse_duration_ns)]
    duration: u64,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// A kind of unwanted traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Random,
    Replay,
    Handshake,
    Open,
}

pub fn run(args: &FloodBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    if args.rate == 0 || args.rate > 10_000_000 {
        bail!(
            "--rate must be between 1 and 10000000 datagrams/s, got {}",
            args.rate
        );
    }
    if args.size == 0 {
        bail!("--size must be positive");
    }
    if let Some(target) = args.target {
        return flood_target(args, target);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let figures = rt.block_on(bench(args))?;
    print_figures(&figures);
    crate::outpath::write_json(&args.json, &figures)?;
    Ok(())
}

fn flood_target(args: &FloodBenchArgs, target: SocketAddr) -> Result<()> {
    if !target.ip().is_loopback() {
        bail!(
            "--target {target}: only loopback addresses are accepted (flood your own test bed: a \
             gateway on this host, or one inside a network namespace with --netns)"
        );
    }
    let duration = Duration::from_nanos(args.duration);
    // Keys are needed only to shape the initiations; the target's key is unknown, so they are
    // sealed to a random key and fail at the gateway exactly as unknown keys' would.
    let (_, fake_gateway) = generate_keypair().map_err(|e| anyhow!("generating a key: {e}"))?;
    let ammo = Ammunition {
        random: args.kinds.contains(&Kind::Random),
        replays: Vec::new(),
        initiations: if args.kinds.contains(&Kind::Handshake) {
            forged_initiations(&fake_gateway)?
        } else {
            Vec::new()
        },
    };
    let sent = Arc::new(Sent::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, st2, rate) = (Arc::clone(&sent), Arc::clone(&stop), args.rate);
    let netns = args.netns.clone();
    let t0 = Instant::now();
    let worker = std::thread::spawn(move || -> Result<()> {
        match netns {
            Some(ns) => linkem::net::in_namespace(&ns, move || flood(target, rate, ammo, s2, st2))
                .map_err(|e| anyhow!("--netns {ns}: {e}")),
            None => {
                flood(target, rate, ammo, s2, st2);
                Ok(())
            }
        }
    });
    std::thread::sleep(duration);
    stop.store(true, Ordering::SeqCst);
    worker
        .join()
        .map_err(|_| anyhow!("the flood thread panicked"))??;
    let secs = t0.elapsed().as_secs_f64();
    let total = sent.random.load(Ordering::Relaxed) + sent.initiations.load(Ordering::Relaxed);
    outln!(
        "satstp bench flood: {total} datagrams to {target} in {secs:.1} s = {:.0}/s \
         (random {}, unknown-key initiations {}, send errors {}); read the gateway's drops in its \
         /metrics (satstp_auth_failures_total by reason)",
        total as f64 / secs,
        sent.random.load(Ordering::Relaxed),
        sent.initiations.load(Ordering::Relaxed),
        sent.errors.load(Ordering::Relaxed)
    );
    Ok(())
}

/// One hop sized for the `geo` profile from one side's view, as the daemons size it.
fn hop_config(link: HopLink, seed: u64) -> HopConfig {
    let stp = StpHop::sized(link, false, seed);
    HopConfig {
        endpoint: stp.endpoint,
        relay_buffer_bytes: link.relay_buffer_bytes(),
        seed,
        send_rate_bps: stp.send_rate_bps,
        rekey: stp.rekey,
    }
}

#[derive(serde::Serialize)]
struct Figures {
    size_bytes: u64,
    flood_rate_target: u64,
    flood_rate_achieved: f64,
    sent_random: u64,
    sent_replayed: u64,
    sent_initiations: u64,
    send_errors: u64,
    attacker_opens: u64,
    baseline_mbps: f64,
    flooded_mbps: f64,
    goodput_kept: f64,
    /// A legitimate terminal started during the flood: ms until its tunnel was up (`None`:
    /// not within [`LATE_HANDSHAKE_BOUND`]).
    late_handshake_ms: Option<u64>,
    late_handshake_bound_ms: u64,
    rss_before_kib: u64,
    rss_after_kib: u64,
    /// The gateway's drops during the flood, by cause.
    drops: serde_json::Value,
}

async fn bench(args: &FloodBenchArgs) -> Result<Figures> {
    let origin = Origin::bind("127.0.0.1:0".parse()?)
        .await
        .context("cannot start the origin")?;
    let key =
        |what: &str| generate_keypair().map_err(|e| anyhow!("generating the {what} key: {e}"));
    let (tk, tp) = key("terminal")?;
    let (ak, ap) = key("attacker terminal")?;
    let (lk, lp) = key("late terminal")?;
    let (gk, gp) = key("gateway")?;
    let (down, up, rtt_ns) = Profile::Geo.parameters();
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    let gw_link = HopLink {
        send_rate_bps: down,
        recv_rate_bps: up,
        rtt_ms,
    };
    let term_link = HopLink {
        send_rate_bps: up,
        recv_rate_bps: down,
        rtt_ms,
    };

    // Gateway: both terminals allowed, each limited to `attacker_limit` connections.
    let policy = Policy::new(PolicyConfig {
        allow: vec!["127.0.0.0/8".into()],
        deny: vec![],
        allow_private: false,
        own_addresses: vec![],
    })
    .map_err(|e| anyhow!("building the gateway policy: {e}"))?;
    let mut g = GatewayOptions::new(
        gk,
        vec![tp, ap, lp],
        "127.0.0.1:0".parse()?,
        StpHop::sized(gw_link, false, 2),
        gw_link.relay_buffer_bytes(),
        Arc::new(policy),
        Duration::from_secs(5),
    );
    g.responder_seed = 3;
    g.ops = OpsConfig {
        max_connections_per_terminal: args.attacker_limit,
        ..OpsConfig::unlimited()
    };
    let gateway = pep::Gateway::start(g)
        .await
        .map_err(|e| anyhow!("starting the gateway: {e}"))?;
    let gw_addr = gateway.hop_addr();
    let gw_monitor = gateway.monitor().context("the gateway's hop")?;
    let ops = Arc::clone(gateway.ops());

    // The satellite link, the tap and the legitimate terminal.
    let (up_link, down_link) = Profile::Geo.links();
    let emu = UdpEmulator::start(EmulatorConfig {
        listen: "127.0.0.1:0".parse()?,
        to: gw_addr,
        up: up_link,
        down: down_link,
        seed: 1,
    })
    .await
    .map_err(|e| anyhow!("starting the link emulator: {e}"))?;
    let captured = Arc::new(Mutex::new(Vec::new()));
    let tap_addr = tap(emu.local_addr(), Arc::clone(&captured)).await?;
    let mut stp = StpHop::sized(term_link, false, 1);
    stp.bind = Some("127.0.0.1:0".parse()?);
    let mut t = TerminalOptions::new(
        tk,
        tap_addr,
        gp,
        TerminalHop::Stp(Box::new(stp)),
        term_link.relay_buffer_bytes(),
    );
    t.socks = Some(SocksListener {
        listen: "127.0.0.1:0".parse()?,
        auth: SocksAuth::None,
        fast_open: true,
    });
    let terminal = pep::Terminal::start(t)
        .await
        .map_err(|e| anyhow!("starting the terminal: {e}"))?;
    let socks = terminal
        .socks_addr()
        .context("the terminal's SOCKS5 listener")?;

    download(socks, origin.addr(), 1000)
        .await
        .context("warm-up download")?;
    let t0 = Instant::now();
    download(socks, origin.addr(), args.size)
        .await
        .context("baseline download")?;
    let baseline_mbps = args.size as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e6;

    // The flood.
    let replays = if args.kinds.contains(&Kind::Replay) {
        captured.lock().map(|c| c.clone()).unwrap_or_default()
    } else {
        Vec::new()
    };
    let ammo = Ammunition {
        random: args.kinds.contains(&Kind::Random),
        replays,
        initiations: if args.kinds.contains(&Kind::Handshake) {
            forged_initiations(&gp)?
        } else {
            Vec::new()
        },
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_kib = rss_kib()?;
    let before = status(&gw_monitor).await?;
    let kernel_before = udp_rcvbuf_errors();
    let refused_before = ops.metrics().refused(RefusalReason::TerminalLimit).get();
    let sent = Arc::new(Sent::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, st2, rate) = (Arc::clone(&sent), Arc::clone(&stop), args.rate);
    let flood_start = Instant::now();
    let flooder = std::thread::spawn(move || flood(gw_addr, rate, ammo, s2, st2));
    let attacker = Hop::start(
        UdpSocket::bind("127.0.0.1:0").await?,
        Security::Terminal {
            local: ak,
            gateway_key: gp,
            gateway: gw_addr,
        },
        hop_config(gw_link, 4),
    )
    .map_err(|e| anyhow!("starting the attacker's hop: {e}"))?;
    // A legitimate terminal that connects once the flood has emptied the handshake budget (2 s
    // in): how long its handshake takes (initiations resent every second) is the flood's cost
    // to newcomers.
    let late_hs = tokio::spawn(late_handshake_ms(lk, gp, gw_addr, gw_link));
    let opens = Arc::new(AtomicU64::new(0));
    let attack = args.kinds.contains(&Kind::Open).then(|| {
        tokio::spawn(attack_opens(
            Arc::new(attacker),
            origin.addr(),
            Arc::clone(&opens),
            Arc::clone(&stop),
        ))
    });
    let t0 = Instant::now();
    let flooded = download(socks, origin.addr(), args.size).await;
    let flooded_secs = t0.elapsed().as_secs_f64();
    let late_handshake = late_hs
        .await
        .map_err(|_| anyhow!("the late terminal's task failed"))??;
    stop.store(true, Ordering::SeqCst);
    let flood_secs = flood_start.elapsed().as_secs_f64();
    flooder
        .join()
        .map_err(|_| anyhow!("the flood thread panicked"))?;
    if let Some(a) = attack {
        let _ = a.await;
    }
    flooded.context("download under the flood")?;
    let after = status(&gw_monitor).await?;
    let kernel_drops = udp_rcvbuf_errors().saturating_sub(kernel_before);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after_kib = rss_kib()?;
    let flooded_mbps = args.size as f64 * 8.0 / flooded_secs / 1e6;

    let (t0c, t1c) = (before.tunnel, after.tunnel);
    let stp_of = |s: &HopStatus| {
        s.stp
            .as_ref()
            .map(|s| s.endpoint.clone())
            .context("the gateway's STP hop reported no STP figures")
    };
    let (e0, e1) = (&stp_of(&before)?, &stp_of(&after)?);
    let drops = json!({
        "tunnel_malformed": t1c.malformed - t0c.malformed,
        "tunnel_unknown_session": t1c.unknown_session - t0c.unknown_session,
        "tunnel_auth_failures": t1c.auth_failures - t0c.auth_failures,
        "tunnel_replays": t1c.replays - t0c.replays,
        "tunnel_unknown_key": t1c.unknown_key - t0c.unknown_key,
        "tunnel_rate_limited": t1c.rate_limited - t0c.rate_limited,
        "tunnel_session_limit": t1c.session_limit - t0c.session_limit,
        "stp_malformed": e1.malformed - e0.malformed,
        "stp_unknown_connection": e1.unknown_connection - e0.unknown_connection,
        "stp_refused": e1.refused - e0.refused,
        "kernel_receive_buffer_full": kernel_drops,
        "hop_opens_rate_limited": after.opens_rate_limited - before.opens_rate_limited,
        "relay_refused_terminal_limit":
            ops.metrics().refused(RefusalReason::TerminalLimit).get() - refused_before,
    });
    let (random, replayed, initiations) = (
        sent.random.load(Ordering::Relaxed),
        sent.replayed.load(Ordering::Relaxed),
        sent.initiations.load(Ordering::Relaxed),
    );
    Ok(Figures {
        size_bytes: args.size,
        flood_rate_target: args.rate,
        flood_rate_achieved: (random + replayed + initiations) as f64 / flood_secs,
        sent_random: random,
        sent_replayed: replayed,
        sent_initiations: initiations,
        send_errors: sent.errors.load(Ordering::Relaxed),
        attacker_opens: opens.load(Ordering::Relaxed),
        baseline_mbps,
        flooded_mbps,
        goodput_kept: flooded_mbps / baseline_mbps,
        late_handshake_ms: late_handshake,
        late_handshake_bound_ms: LATE_HANDSHAKE_BOUND.as_millis() as u64,
        rss_before_kib,
        rss_after_kib,
        drops,
    })
}

/// How long the late terminal may take to complete its handshake during the flood.
const LATE_HANDSHAKE_BOUND: Duration = Duration::from_secs(20);

/// Starts a terminal hop to `gateway` and waits for its tunnel: ms until established, or
/// `None` after [`LATE_HANDSHAKE_BOUND`].
async fn late_handshake_ms(
    local: pep::keys::PrivateKey,
    gateway_key: pep::keys::PublicKey,
    gateway: SocketAddr,
    link: HopLink,
) -> Result<Option<u64>> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t0 = Instant::now();
    let hop = Hop::start(
        UdpSocket::bind("127.0.0.1:0").await?,
        Security::Terminal {
            local,
            gateway_key,
            gateway,
        },
        hop_config(link, 5),
    )
    .map_err(|e| anyhow!("starting the late terminal's hop: {e}"))?;
    while t0.elapsed() < LATE_HANDSHAKE_BOUND {
        let up = hop
            .status()
            .await
            .context("the late terminal's hop stopped")?
            .established;
        if up {
            return Ok(Some(t0.elapsed().as_millis() as u64));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(None)
}

async fn status(m: &HopMonitor) -> Result<HopStatus> {
    m.status().await.context("the gateway hop stopped")
}

fn print_figures(f: &Figures) {
    outln!("satstp bench flood: a {} byte download over the emulated geo link (50 Mb/s down) while the gateway's hop port is flooded from loopback", f.size_bytes);
    outln!(
        "  flood: {:.0} datagrams/s achieved (target {}): random {}, replayed {}, unknown-key initiations {}; send errors {}; attacker stream opens {}",
        f.flood_rate_achieved,
        f.flood_rate_target,
        f.sent_random,
        f.sent_replayed,
        f.sent_initiations,
        f.send_errors,
        f.attacker_opens
    );
    outln!(
        "  goodput: {:.2} Mb/s without the flood, {:.2} Mb/s under it = {:.1} % kept",
        f.baseline_mbps,
        f.flooded_mbps,
        f.goodput_kept * 100.0
    );
    match f.late_handshake_ms {
        Some(ms) => outln!(
            "  a legitimate terminal started during the flood: tunnel up after {ms} ms (bound {} ms)",
            f.late_handshake_bound_ms
        ),
        None => outln!(
            "  a legitimate terminal started during the flood: tunnel NOT up within {} ms",
            f.late_handshake_bound_ms
        ),
    }
    outln!(
        "  process RSS (gateway, terminal, emulator, flooder): {} KiB before the flood, {} KiB after",
        f.rss_before_kib, f.rss_after_kib
    );
    outln!("  gateway drops during the flood, by cause:");
    if let Some(m) = f.drops.as_object() {
        for (k, v) in m {
            outln!("    {k:<32} {v}");
        }
    }
}
