//! `satstp terminal` and `satstp gateway`: the split-connection gateway's two sides as daemons,
//! configured by a TOML file (see `deploy/terminal.toml`, `deploy/gateway.toml`), running until
//! SIGTERM or SIGINT, then draining: the listeners close, open connections get up to
//! `shutdown_timeout_s` to finish, and the process exits 0. Logs go to standard error through
//! `tracing` (`--log-level`, or `RUST_LOG`); `/metrics` and `/status` are served on
//! `metrics_listen` when it is set.

use anyhow::{Context, Result};
use clap::Args;
use pep::config::Limits;
use pep::config::TcpOptions;
use pep::config::{load_gateway, load_terminal};
use pep::gateway::connect::ConnectOptions;
use pep::keys::load_private_key;
use pep::ops::{Ops, OpsConfig};
use pep::socks::SocksAuth;
use pep::stack::{GatewayHops, SocksListener, StpHop, TerminalHop};
use pep::{Gateway, GatewayOptions, Terminal, TerminalOptions};
use std::io::Read;
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
    /// The side's limits and timeouts, with `limits` from its configuration.
    fn ops(&self, limits: &Limits) -> OpsConfig {
        ops_config(
            limits,
            self.relay_buffer_bytes,
            self.idle_timeout_s,
            self.connect_timeout_s,
        )
    }
}

/// A side's start failure, named by its setting (`terminal.socks_listen: ...`) where it has one.
fn side_error(side: &str, e: pep::stack::StackError) -> anyhow::Error {
    use pep::stack::StackError;
    match e {
        StackError::NoListener | StackError::NoHop => anyhow::anyhow!("{side}: {e}"),
        e => anyhow::anyhow!("{side}.{e}"),
    }
}

/// Raises the open-file limit (every relayed connection holds a descriptor or two).
fn raise_file_limit() {
    match pep::fdlimit::raise_nofile_limit() {
        Ok((before, now)) => tracing::info!(
            open_file_limit = now,
            was = before,
            "open-file limit (RLIMIT_NOFILE) {now}"
        ),
        Err(e) => tracing::warn!("cannot read or raise the open-file limit: {e}"),
    }
}

/// Logs that the daemon `side` started, with `details` (its own settings, `key=value` each),
/// `settings` and the limits of `ops`; then waits for a signal and returns the drain's timeout.
async fn run_started(
    side: &str,
    details: &str,
    settings: &Settings,
    ops: &Arc<Ops>,
) -> Result<Duration> {
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
    let sig = wait_for_signal().await?;
    let timeout = Duration::from_secs(u64::from(settings.shutdown_timeout_s));
    tracing::info!(
        signal = sig,
        open = ops.open_connections(),
        timeout_s = timeout.as_secs(),
        "{side}: stopping; draining open connections"
    );
    Ok(timeout)
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
fn check_hop_tcp(field: &str, tuning: &TcpOptions) -> Result<()> {
    let granted =
        pep::sockopt::check_tcp_options(tuning).map_err(|e| anyhow::anyhow!("{field}.{e}"))?;
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
    pep::keys::check_not_own_key(&key, &gateway_key).context("terminal.gateway_public_key")?;
    for (i, (_, k)) in cfg.backup_gateways()?.iter().enumerate() {
        pep::keys::check_not_own_key(&key, k)
            .with_context(|| format!("terminal.backup_gateways[{i}].public_key"))?;
    }
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        max_connections: hop_connection_limit(&cfg.limits),
        ..EndpointConfig::default()
    };
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    let send_rate = cfg.hop_link().map(|l| l.shaper_rate_bps());
    let settings = settings!(cfg);
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
            TerminalHop::Tcp {
                tuning,
                handshake_timeout: Duration::from_secs(u64::from(cfg.connect_timeout_s)),
            }
        } else {
            TerminalHop::Stp(Box::new(StpHop {
                endpoint,
                seed,
                send_rate_bps: send_rate,
                bind: None,
                capture,
                rekey: cfg.rekey(),
            }))
        };
        let mut o = TerminalOptions::new(key, gateway, gateway_key, hop, relay);
        if !cfg.hop_transport.tcp() {
            o.gateways = crate::failover::terminal_gateways(&cfg, gateway, gateway_key).await?;
        }
        o.socks = cfg.socks_listen.map(|listen| SocksListener {
            listen,
            auth: if cfg.socks_users.is_empty() {
                SocksAuth::None
            } else {
                SocksAuth::UserPass(
                    cfg.socks_users
                        .iter()
                        .map(|u| (u.user.clone(), u.password.clone()))
                        .collect(),
                )
            },
            fast_open: cfg.socks_fast_open,
        });
        o.http_connect = cfg.http_connect_listen;
        o.tproxy = cfg.tproxy_listen;
        o.ops = settings.ops(&cfg.limits);
        o.metrics_listen = cfg.metrics_listen;
        raise_file_limit();
        let t = Terminal::start(o)
            .await
            .map_err(|e| side_error("terminal", e))?;
        let mut listening = Vec::new();
        for (addr, what) in [
            (t.socks_addr(), "SOCKS5"),
            (t.http_connect_addr(), "HTTP CONNECT"),
            (t.tproxy_addr(), "TPROXY"),
        ] {
            if let Some(a) = addr {
                listening.push(format!("{what} on {a}"));
            }
        }
        let details = format!(
            "listeners={} gateway={gateway} hop={} hop_transport={:?}",
            listening.join(", "),
            t.hop().local_addr(),
            cfg.hop_transport
        );
        let timeout = run_started("terminal", &details, &settings, t.ops()).await?;
        t.stop(timeout).await;
        Ok(())
    })
}

pub fn gateway(args: &DaemonArgs) -> Result<()> {
    init_logging(args.log_level.as_deref())?;
    let cfg = load_gateway(&args.config)?;
    let key = load_private_key(&cfg.private_key_file)?;
    let next_key = match &cfg.next_private_key_file {
        Some(f) => {
            let next = load_private_key(f).context("gateway.next_private_key_file")?;
            if next.public_key().ok() == key.public_key().ok() {
                anyhow::bail!(
                    "gateway.next_private_key_file: {} holds the same key as private_key_file; \
                     a rotation needs a new key (satstp keygen)",
                    f.display()
                );
            }
            Some(next)
        }
        None => None,
    };
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
    pep::sockopt::check_tcp_options(&cfg.tcp)
        .map_err(|e| anyhow::anyhow!("gateway.tcp: cannot be applied on this host: {e}"))?;
    if cfg.source_transparent {
        pep::sockopt::check_transparent_allowed().context("gateway.source_transparent")?;
    }
    let settings = settings!(cfg);
    let seed = os_seed()?;
    let capture = args.capture.open("gateway", cfg.hop_transport.stp())?;
    let hop_tcp = if cfg.hop_transport.tcp() {
        let tuning = cfg.hop_tcp_tuning();
        check_hop_tcp("gateway.hop_tcp", &tuning)?;
        Some(tuning)
    } else {
        None
    };
    let o = GatewayOptions {
        key,
        next_key,
        allowed,
        responder_seed: os_seed()?,
        listen: cfg.listen,
        hops: GatewayHops {
            stp: cfg.hop_transport.stp().then(|| StpHop {
                endpoint,
                seed,
                send_rate_bps: send_rate,
                bind: None,
                capture,
                rekey: Default::default(),
            }),
            tcp: hop_tcp,
        },
        relay_buffer_bytes: relay,
        policy: Arc::new(policy),
        connect: ConnectOptions {
            connect_timeout: Duration::from_secs(u64::from(cfg.connect_timeout_s)),
            source_transparent: cfg.source_transparent,
        },
        outbound_tcp: cfg.tcp.clone(),
        ops: settings.ops(&cfg.limits),
        metrics_listen: cfg.metrics_listen,
    };
    runtime()?.block_on(async move {
        raise_file_limit();
        let g = Gateway::start(o)
            .await
            .map_err(|e| side_error("gateway", e))?;
        let details = format!(
            "listen={} hop_transport={:?} source_transparent={} policy_allow={:?} \
             policy_deny={:?} allow_private={} tcp_congestion={:?}",
            g.hop_addr(),
            cfg.hop_transport,
            cfg.source_transparent,
            cfg.policy.allow,
            cfg.policy.deny,
            cfg.policy.allow_private,
            cfg.tcp.congestion.as_deref().unwrap_or("system default"),
        );
        let timeout = run_started("gateway", &details, &settings, g.ops()).await?;
        g.stop(timeout).await;
        Ok(())
    })
}
