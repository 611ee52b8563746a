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

mod traffic;

pub use traffic::CAPTURE;

use crate::error::{Context, Result};
use crate::gateway::download;
use crate::process::rss_kib;
use linkem::{EmulatorConfig, Profile, UdpEmulator};
use loadgen::origin::Origin;
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use traffic::{attack_opens, flood, forged_initiations, tap, udp_rcvbuf_errors, Ammunition, Sent};

/// A kind of unwanted traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Random bytes.
    Random,
    /// Replays of the terminal's captured datagrams.
    Replay,
    /// Handshake initiations from unknown keys.
    Handshake,
    /// Stream opens from an authenticated terminal beyond its limit.
    Open,
}

/// What `satstp bench flood` was asked for (its flags, parsed).
#[derive(Debug, Clone)]
pub struct FloodOptions {
    /// Datagrams per second the flood aims for, all kinds together.
    pub rate: u64,
    /// Bytes of each download.
    pub size: u64,
    /// Connections the authenticated attacker terminal may hold at the gateway.
    pub attacker_limit: u32,
    /// The kinds of flood to send.
    pub kinds: Vec<Kind>,
    /// With a target: the network namespace to send from.
    pub netns: Option<String>,
    /// With a target: how long to flood.
    pub duration: Duration,
}

impl FloodOptions {
    /// The flags' checks.
    pub fn check(&self) -> Result<()> {
        if self.rate == 0 || self.rate > 10_000_000 {
            bail!(
                "--rate must be between 1 and 10000000 datagrams/s, got {}",
                self.rate
            );
        }
        if self.size == 0 {
            bail!("--size must be positive");
        }
        Ok(())
    }
}

/// The benchmark on its own runtime: a gateway, the emulated geo link and a terminal in this
/// process; a download without and one under the flood.
pub fn run(args: &FloodOptions) -> Result<Figures> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(bench(args))
}

/// What flooding an existing gateway sent.
#[derive(Debug, Clone, Copy)]
pub struct TargetReport {
    pub total: u64,
    pub seconds: f64,
    pub random: u64,
    pub initiations: u64,
    pub errors: u64,
}

/// Floods an existing gateway's hop port at `target` (loopback only) for the set duration.
pub fn flood_target(args: &FloodOptions, target: SocketAddr) -> Result<TargetReport> {
    if !target.ip().is_loopback() {
        bail!(
            "--target {target}: only loopback addresses are accepted (flood your own test bed: a \
             gateway on this host, or one inside a network namespace with --netns)"
        );
    }
    let duration = args.duration;
    // Keys are needed only to shape the initiations; the target's key is unknown, so they are
    // sealed to a random key and fail at the gateway exactly as unknown keys' would.
    let (_, fake_gateway) = generate_keypair().map_err(|e| err!("generating a key: {e}"))?;
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
                .map_err(|e| err!("--netns {ns}: {e}")),
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
        .map_err(|_| err!("the flood thread panicked"))??;
    let secs = t0.elapsed().as_secs_f64();
    let total = sent.random.load(Ordering::Relaxed) + sent.initiations.load(Ordering::Relaxed);
    Ok(TargetReport {
        total,
        seconds: secs,
        random: sent.random.load(Ordering::Relaxed),
        initiations: sent.initiations.load(Ordering::Relaxed),
        errors: sent.errors.load(Ordering::Relaxed),
    })
}

/// One hop sized for the `geo` profile from one side's view, as the daemons size it.
fn hop_config(link: HopLink, seed: u64) -> HopConfig {
    StpHop::sized(link, false, seed).hop_config(link.relay_buffer_bytes())
}

/// What the benchmark measured (the JSON report).
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    pub size_bytes: u64,
    pub flood_rate_target: u64,
    pub flood_rate_achieved: f64,
    pub sent_random: u64,
    pub sent_replayed: u64,
    pub sent_initiations: u64,
    pub send_errors: u64,
    pub attacker_opens: u64,
    pub baseline_mbps: f64,
    pub flooded_mbps: f64,
    pub goodput_kept: f64,
    /// A legitimate terminal started during the flood: ms until its tunnel was up (`None`:
    /// not within [`LATE_HANDSHAKE_BOUND`]).
    pub late_handshake_ms: Option<u64>,
    pub late_handshake_bound_ms: u64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    /// The gateway's drops during the flood, by cause.
    pub drops: serde_json::Value,
}

async fn bench(args: &FloodOptions) -> Result<Figures> {
    let origin = Origin::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .context("cannot start the origin")?;
    let key = |what: &str| generate_keypair().map_err(|e| err!("generating the {what} key: {e}"));
    let (tk, tp) = key("terminal")?;
    let (ak, ap) = key("attacker terminal")?;
    let (lk, lp) = key("late terminal")?;
    let (gk, gp) = key("gateway")?;
    let (down, up, rtt_ns) = Profile::Geo.parameters();
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    let (gw_link, term_link) = crate::loopback::hop_links(down, up, rtt_ms);

    // Gateway: both terminals allowed, each limited to `attacker_limit` connections.
    let policy = crate::loopback::loopback_origin_policy()?;
    let mut g = GatewayOptions::new(
        gk,
        vec![tp, ap, lp],
        SocketAddr::from(([127, 0, 0, 1], 0)),
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
        .map_err(|e| err!("starting the gateway: {e}"))?;
    let gw_addr = gateway.hop_addr();
    let gw_monitor = gateway.monitor().context("the gateway's hop")?;
    let ops = Arc::clone(gateway.ops());

    // The satellite link, the tap and the legitimate terminal.
    let (up_link, down_link) = Profile::Geo.links();
    let emu = UdpEmulator::start(EmulatorConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        to: gw_addr,
        up: up_link,
        down: down_link,
        seed: 1,
    })
    .await
    .map_err(|e| err!("starting the link emulator: {e}"))?;
    let captured = Arc::new(Mutex::new(Vec::new()));
    let tap_addr = tap(emu.local_addr(), Arc::clone(&captured)).await?;
    let mut stp = StpHop::sized(term_link, false, 1);
    stp.bind = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut t = TerminalOptions::new(
        tk,
        tap_addr,
        gp,
        TerminalHop::Stp(Box::new(stp)),
        term_link.relay_buffer_bytes(),
    );
    t.socks = Some(SocksListener {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        auth: SocksAuth::None,
        fast_open: true,
    });
    let terminal = pep::Terminal::start(t)
        .await
        .map_err(|e| err!("starting the terminal: {e}"))?;
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
    .map_err(|e| err!("starting the attacker's hop: {e}"))?;
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
        .map_err(|_| err!("the late terminal's task failed"))??;
    stop.store(true, Ordering::SeqCst);
    let flood_secs = flood_start.elapsed().as_secs_f64();
    flooder
        .join()
        .map_err(|_| err!("the flood thread panicked"))?;
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
    .map_err(|e| err!("starting the late terminal's hop: {e}"))?;
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
