//! `satstp terminal` and `satstp gateway`: the split-connection gateway's two sides as daemons,
//! configured by a TOML file (see `deploy/terminal.toml`, `deploy/gateway.toml`), running until
//! SIGTERM or SIGINT, then draining: the listeners close, open connections get up to
//! `shutdown_timeout_s` to finish, and the process exits 0. Logs go to standard error through
//! `tracing` (`--log-level`, or `RUST_LOG`); `/metrics` and `/status` are served on
//! `metrics_listen` when it is set.

use anyhow::{bail, Context, Result};
use clap::Args;
use pep::config::Limits;
use pep::config::{load_gateway, load_terminal};
use pep::hop::{Hop, HopConfig, Security};
use pep::keys::load_private_key;
use pep::metrics::{Metrics, Side};
use pep::ops::{Ops, OpsConfig};
use pep::socks::SocksAuth;
use pep::tunnel::{Responder, ResponderConfig};
use rand_core::SeedableRng;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Log filter: a level (error, warn, info, debug, trace) or `tracing` directives such as
    /// "info,pep=debug". Default: the RUST_LOG environment variable, else "info".
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    #[command(flatten)]
    capture: crate::capture_args::CaptureArgs,
}

/// Sends `tracing` events to standard error, filtered by `--log-level`, else `RUST_LOG`, else
/// "info".
fn init_logging(flag: Option<&str>) -> Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match flag {
        Some(f) => EnvFilter::try_new(f)
            .map_err(|e| anyhow::anyhow!("--log-level: {f:?} is not a log filter: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v)
                .map_err(|e| anyhow::anyhow!("RUST_LOG: {v:?} is not a log filter: {e}"))?,
            _ => EnvFilter::new("info"),
        },
    };
    // A subscriber set before (tests running two daemons in one process) stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    Ok(())
}

/// The limits and timeouts one side enforces, from its configuration.
fn ops_config(limits: &Limits, relay_buffer_bytes: u64, idle_s: u32, open_s: u32) -> OpsConfig {
    OpsConfig {
        max_connections: limits.max_connections,
        max_connections_per_terminal: limits.max_connections_per_terminal,
        memory_cap_bytes: limits.memory_cap_bytes,
        reserve_per_connection_bytes: pep::ops::reserve_per_connection(relay_buffer_bytes),
        idle_timeout: Some(Duration::from_secs(u64::from(idle_s))),
        open_timeout: Some(Duration::from_secs(u64::from(open_s))),
    }
}

/// Serves `/metrics` and `/status` on `addr` (`field` names the setting in errors) until `ops`
/// drains.
async fn serve_metrics(
    addr: SocketAddr,
    field: &str,
    ops: &Arc<Ops>,
    hop: Option<Arc<Hop>>,
) -> Result<()> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("{field}: cannot listen on {addr}"))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "{field} is not a loopback address: keep it on a management network (/status shows client and destination addresses)"
        );
    }
    let o = Arc::clone(ops);
    let metrics = Arc::clone(ops.metrics());
    tokio::spawn(async move {
        pep::http_endpoint::serve(l, metrics, hop, async move { o.drained().await }).await;
    });
    tracing::info!(%addr, "serving /metrics and /status");
    Ok(())
}

/// Waits for SIGTERM or SIGINT; returns the signal's name.
async fn wait_for_signal() -> Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// Graceful shutdown: waits for a signal, stops accepting, and gives open connections up to
/// `timeout` to finish — their relays to end and their last bytes and ends to cross the `hops`
/// and be acknowledged — so a clean close in progress reaches the far side as a FIN. What is
/// left at the timeout is reset on both sides (counted as `drain_timeout`), never closed with
/// a FIN that would pass a cut transfer off as a complete one.
async fn run_until_signal(
    side: &str,
    ops: &Arc<Ops>,
    hops: &[Arc<Hop>],
    timeout: Duration,
) -> Result<()> {
    let sig = wait_for_signal().await?;
    let open = ops.open_connections();
    tracing::info!(
        signal = sig,
        open,
        timeout_s = timeout.as_secs(),
        "{side}: stopping; draining open connections"
    );
    ops.drain();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut clean = ops.wait_idle_until(deadline).await;
    for hop in hops {
        clean = clean && hop.wait_quiet(deadline).await;
    }
    if clean {
        tracing::info!("{side}: every connection finished; exiting");
    } else {
        tracing::warn!(
            left = ops.open_connections(),
            "{side}: shutdown_timeout_s passed; resetting the connections left"
        );
        ops.cut();
        if !ops.wait_idle(CUT_GRACE).await {
            tracing::warn!(
                left = ops.open_connections(),
                "{side}: relays did not end within {CUT_GRACE:?} of the reset"
            );
        }
    }
    // Streams without a relay any more (their bytes were still crossing) are reset here; the
    // hop's RSTs leave before the process exits.
    for hop in hops {
        hop.close().await;
    }
    Ok(())
}

/// How long relays get to reset their connections once a drain ran out of time.
const CUT_GRACE: Duration = Duration::from_secs(2);

/// The settings both daemons share: the allocation, the relay buffer and the timeouts, which
/// size their operations and which they log when they start.
struct Settings {
    up_rate_bps: Option<u64>,
    down_rate_bps: Option<u64>,
    rtt_ms: Option<u32>,
    relay_buffer_bytes: u64,
    idle_timeout_s: u32,
    connect_timeout_s: u32,
    shutdown_timeout_s: u32,
}

/// The [`Settings`] of a terminal's or a gateway's configuration, whose fields share names.
macro_rules! settings {
    ($cfg:expr) => {
        Settings {
            up_rate_bps: $cfg.up_rate_bps,
            down_rate_bps: $cfg.down_rate_bps,
            rtt_ms: $cfg.rtt_ms,
            relay_buffer_bytes: $cfg.relay_buffer_bytes(),
            idle_timeout_s: $cfg.idle_timeout_s,
            connect_timeout_s: $cfg.connect_timeout_s,
            shutdown_timeout_s: $cfg.shutdown_timeout_s,
        }
    };
}

impl Settings {
    /// The side's limits, timeouts and metrics, with `limits` from its configuration.
    fn ops(&self, limits: &Limits, side: Side) -> Arc<Ops> {
        let config = ops_config(
            limits,
            self.relay_buffer_bytes,
            self.idle_timeout_s,
            self.connect_timeout_s,
        );
        Ops::new(config, Arc::new(Metrics::new(side)))
    }
}

/// Logs that the daemon `side` started, with `details` (its own settings, `key=value` each),
/// `settings` and the limits of `ops`; then runs until a signal and drains for up to
/// `shutdown_timeout_s`.
async fn run_started(
    side: &str,
    details: &str,
    settings: &Settings,
    ops: &Arc<Ops>,
    hops: &[Arc<Hop>],
) -> Result<()> {
    // Every relayed connection holds a descriptor or two: use all the system allows.
    match pep::fdlimit::raise_nofile_limit() {
        Ok((before, now)) => tracing::info!(
            open_file_limit = now,
            was = before,
            "open-file limit (RLIMIT_NOFILE) {now}"
        ),
        Err(e) => tracing::warn!("cannot read or raise the open-file limit: {e}"),
    }
    let c = ops.config();
    tracing::info!(
        up_rate_bps = settings.up_rate_bps,
        down_rate_bps = settings.down_rate_bps,
        rtt_ms = settings.rtt_ms,
        relay_buffer_bytes = settings.relay_buffer_bytes,
        max_connections = c.max_connections,
        max_connections_per_terminal = c.max_connections_per_terminal,
        memory_cap_bytes = c.memory_cap_bytes,
        idle_timeout_s = settings.idle_timeout_s,
        connect_timeout_s = settings.connect_timeout_s,
        shutdown_timeout_s = settings.shutdown_timeout_s,
        "satstp {side} started {details}"
    );
    let drain = Duration::from_secs(u64::from(settings.shutdown_timeout_s));
    run_until_signal(side, ops, hops, drain).await
}

/// Most STP connections the hop's endpoint holds: the configured connection limit, with room
/// for connections whose relay has ended while their closing handshake still crosses the hop
/// (an eighth more, at least 64), so `limits.max_connections` is the limit users meet.
fn hop_connection_limit(limits: &Limits) -> u32 {
    let m = limits.max_connections;
    m.saturating_add((m / 8).max(64))
}

/// Checks the TCP hop's socket options on this host (an error names the field, e.g.
/// `terminal.hop_tcp.congestion`) and warns when the kernel grants smaller buffers than asked.
fn check_hop_tcp(field: &str, tuning: &pep::hop::tcp::TcpTuning) -> Result<()> {
    let granted = tuning.check().map_err(|e| anyhow::anyhow!("{field}.{e}"))?;
    // Linux reports twice the usable size it granted.
    let send = (tuning.send_buffer_bytes, granted.send_buffer_bytes);
    let recv = (tuning.recv_buffer_bytes, granted.recv_buffer_bytes);
    for ((asked, got), name, sysctl) in [
        (send, "send_buffer_bytes", "net.core.wmem_max"),
        (recv, "recv_buffer_bytes", "net.core.rmem_max"),
    ] {
        if let Some(asked) = asked {
            if got / 2 < asked as usize {
                tracing::warn!(
                    asked,
                    granted = got / 2,
                    "{field}.{name}: the kernel granted less than asked (raise {sysctl})"
                );
            }
        }
    }
    Ok(())
}

/// 64 bits from the operating system's random source (connection ids and initial sequence
/// numbers must not be predictable on a real network).
fn os_seed() -> Result<u64> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read /dev/urandom")?;
    Ok(u64::from_le_bytes(b))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn terminal(args: &DaemonArgs) -> Result<()> {
    init_logging(args.log_level.as_deref())?;
    let cfg = load_terminal(&args.config)?;
    let key = load_private_key(&cfg.private_key_file)?;
    let gateway_key = cfg.gateway_public_key()?;
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        max_connections: hop_connection_limit(&cfg.limits),
        ..EndpointConfig::default()
    };
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    let send_rate = cfg.hop_link().map(|l| l.shaper_rate_bps());
    let settings = settings!(cfg);
    let ops = settings.ops(&cfg.limits, Side::Terminal);
    let seed = os_seed()?;
    let capture = args.capture.open("terminal", !cfg.hop_transport.tcp())?;
    runtime()?.block_on(async move {
        let gateway = tokio::net::lookup_host(&cfg.gateway)
            .await
            .with_context(|| format!("terminal.gateway: cannot resolve {}", cfg.gateway))?
            .next()
            .with_context(|| format!("terminal.gateway: {} has no address", cfg.gateway))?;
        let hop = if cfg.hop_transport.tcp() {
            let tuning = cfg.hop_tcp_tuning();
            check_hop_tcp("terminal.hop_tcp", &tuning)?;
            let config = pep::hop::tcp::TcpHopConfig {
                relay_buffer_bytes: relay,
                tuning,
                handshake_timeout: Duration::from_secs(u64::from(cfg.connect_timeout_s)),
            };
            pep::hop::tcp::start_terminal(key, gateway_key, gateway, config)
                .map_err(anyhow::Error::msg)?
        } else {
            let bind = if gateway.is_ipv6() {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            };
            let sock = tokio::net::UdpSocket::bind(bind)
                .await
                .context("cannot bind the hop's UDP socket")?;
            Hop::start_with_capture(
                sock,
                crate::failover::terminal_security(&cfg, key, gateway, gateway_key).await?,
                HopConfig {
                    endpoint,
                    relay_buffer_bytes: relay,
                    seed,
                    send_rate_bps: send_rate,
                },
                capture,
            )
            .map_err(anyhow::Error::msg)?
        };
        let hop = Arc::new(hop);
        let mut listening = Vec::new();
        if let Some(a) = cfg.socks_listen {
            let l = tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("terminal.socks_listen: cannot listen on {a}"))?;
            let auth = if cfg.socks_users.is_empty() {
                SocksAuth::None
            } else {
                SocksAuth::UserPass(
                    cfg.socks_users
                        .iter()
                        .map(|u| (u.user.clone(), u.password.clone()))
                        .collect(),
                )
            };
            tokio::spawn(pep::terminal::socks5::serve_socks_opts(
                l,
                Arc::clone(&hop),
                Arc::new(auth),
                Arc::clone(&ops),
                cfg.socks_fast_open,
            ));
            listening.push(format!("SOCKS5 on {a}"));
        }
        if let Some(a) = cfg.http_connect_listen {
            let l = tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("terminal.http_connect_listen: cannot listen on {a}"))?;
            tokio::spawn(pep::terminal::http_connect::serve_http_connect_with(
                l,
                Arc::clone(&hop),
                Arc::clone(&ops),
            ));
            listening.push(format!("HTTP CONNECT on {a}"));
        }
        if let Some(a) = cfg.tproxy_listen {
            let l = pep::terminal::tproxy::bind_transparent(a).context("terminal.tproxy_listen")?;
            let l = tokio::net::TcpListener::from_std(l)
                .with_context(|| format!("terminal.tproxy_listen: cannot listen on {a}"))?;
            tokio::spawn(pep::terminal::tproxy::serve_tproxy_with(
                l,
                Arc::clone(&hop),
                Arc::clone(&ops),
            ));
            listening.push(format!("TPROXY on {a}"));
        }
        if listening.is_empty() {
            bail!(
                "terminal: no usable listener (socks_listen, http_connect_listen or tproxy_listen)"
            );
        }
        if let Some(a) = cfg.metrics_listen {
            serve_metrics(a, "terminal.metrics_listen", &ops, Some(Arc::clone(&hop))).await?;
        }
        let details = format!(
            "listeners={} gateway={gateway} hop={} hop_transport={:?}",
            listening.join(", "),
            hop.local_addr(),
            cfg.hop_transport
        );
        run_started("terminal", &details, &settings, &ops, &[hop]).await
    })
}

pub fn gateway(args: &DaemonArgs) -> Result<()> {
    init_logging(args.log_level.as_deref())?;
    let cfg = load_gateway(&args.config)?;
    let key = load_private_key(&cfg.private_key_file)?;
    let allowed = cfg.allowed_terminal_keys()?;
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        max_connections: hop_connection_limit(&cfg.limits),
        ..EndpointConfig::default()
    };
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    let send_rate = cfg.hop_link().map(|l| l.shaper_rate_bps());
    let policy = cfg
        .policy
        .build(vec![cfg.listen.ip()])
        .map_err(|e| anyhow::anyhow!("gateway.{e}"))?;
    pep::gateway::connect::check_tcp_options(&cfg.tcp)
        .map_err(|e| anyhow::anyhow!("gateway.tcp: cannot be applied on this host: {e}"))?;
    if cfg.source_transparent {
        pep::terminal::tproxy::check_transparent_allowed().context("gateway.source_transparent")?;
    }
    let settings = settings!(cfg);
    let ops = settings.ops(&cfg.limits, Side::Gateway);
    let seed = os_seed()?;
    let capture = args.capture.open("gateway", cfg.hop_transport.stp())?;
    let tcp_hop_keys = (key.clone(), allowed.clone());
    let responder = Responder::new(
        key,
        allowed,
        ResponderConfig::default(),
        Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(os_seed()?)),
    )
    .map_err(|e| anyhow::anyhow!("gateway: {e}"))?;
    let connect_timeout = Duration::from_secs(u64::from(cfg.connect_timeout_s));
    runtime()?.block_on(async move {
        // The STP hop on UDP and/or the TCP hop on the same address and port.
        let mut hops = Vec::new();
        if cfg.hop_transport.stp() {
            let sock = tokio::net::UdpSocket::bind(cfg.listen)
                .await
                .with_context(|| format!("gateway.listen: cannot bind {}", cfg.listen))?;
            let hop = Hop::start_with_capture(
                sock,
                Security::Gateway {
                    responder: Box::new(responder),
                },
                HopConfig {
                    endpoint,
                    relay_buffer_bytes: relay,
                    seed,
                    send_rate_bps: send_rate,
                },
                capture,
            )
            .map_err(anyhow::Error::msg)?;
            hops.push(hop);
        }
        if cfg.hop_transport.tcp() {
            let tuning = cfg.hop_tcp_tuning();
            check_hop_tcp("gateway.hop_tcp", &tuning)?;
            let config = pep::hop::tcp::TcpHopConfig {
                relay_buffer_bytes: relay,
                tuning,
                handshake_timeout: pep::hop::tcp::HANDSHAKE_TIMEOUT,
            };
            let (key, allowed) = tcp_hop_keys;
            let hop = pep::hop::tcp::start_gateway(cfg.listen, key, allowed, config)
                .map_err(|e| anyhow::anyhow!("gateway.listen (TCP hop): {e}"))?;
            hops.push(hop);
        }
        let options = pep::gateway::connect::ConnectOptions {
            connect_timeout,
            source_transparent: cfg.source_transparent,
        };
        let policy = Arc::new(policy);
        let outbound = Arc::new(cfg.tcp.clone());
        let mut running = Vec::new();
        for mut hop in hops {
            let incoming = pep::gateway::serve::take_incoming(&mut hop);
            tokio::spawn(pep::gateway::serve::serve_gateway(
                incoming,
                Arc::clone(&policy),
                options,
                Arc::clone(&outbound),
                Arc::clone(&ops),
            ));
            running.push(Arc::new(hop));
        }
        // `/status` shows the first hop (the STP one when both run).
        let hop = running
            .first()
            .cloned()
            .context("gateway: no hop transport")?;
        if let Some(a) = cfg.metrics_listen {
            serve_metrics(a, "gateway.metrics_listen", &ops, Some(Arc::clone(&hop))).await?;
        }
        let details = format!(
            "listen={} hop_transport={:?} source_transparent={} policy_allow={:?} \
             policy_deny={:?} allow_private={} tcp_congestion={:?}",
            hop.local_addr(),
            cfg.hop_transport,
            cfg.source_transparent,
            cfg.policy.allow,
            cfg.policy.deny,
            cfg.policy.allow_private,
            cfg.tcp.congestion.as_deref().unwrap_or("system default"),
        );
        drop(hop);
        run_started("gateway", &details, &settings, &ops, &running).await
    })
}
