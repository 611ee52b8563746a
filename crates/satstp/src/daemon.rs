//! `satstp terminal` and `satstp gateway`: the split-connection gateway's two sides as daemons,
//! configured by a TOML file (see `deploy/terminal.toml`, `deploy/gateway.toml`), running until
//! SIGTERM or SIGINT, then draining: the listeners close, open connections get up to
//! `shutdown_timeout_s` to finish, and the process exits 0. SIGHUP reloads the configuration:
//! the log level, and on a gateway the policy and the allowed terminals, change without touching
//! open connections. Logs go to standard error through `tracing` (`--log-level`, else the
//! file's `log_level`, else `RUST_LOG`); `/metrics` and `/status` are served on
//! `metrics_listen` when it is set. What the daemons check at start is also what
//! `satstp check` checks ([`prepare_terminal`], [`prepare_gateway`]).

use anyhow::{Context, Result};
use clap::Args;
use pep::config::Limits;
use pep::config::TcpOptions;
use pep::config::{load_gateway, load_terminal};
use pep::gateway::connect::ConnectOptions;
use pep::keys::{PrivateKey, PublicKey};
use pep::ops::{Ops, OpsConfig};
use pep::socks::SocksAuth;
use pep::stack::{GatewayHops, SocksListener, StpHop, TerminalHop};
use pep::{Gateway, GatewayOptions, Terminal, TerminalOptions};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// The filter text and its source for a daemon: `--log-level`, else the configuration's
/// `log_level` (`SIDE.log_level`), else `RUST_LOG`, else "info"; checked.
pub(crate) fn log_filter(
    flag: Option<&str>,
    file: Option<&str>,
    side: &str,
) -> Result<(String, tracing_subscriber::EnvFilter)> {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (text, origin) = match (flag, file, env) {
        (Some(f), _, _) => (f.to_string(), "--log-level".to_string()),
        (None, Some(f), _) => (f.to_string(), format!("{side}.log_level")),
        (None, None, Some(v)) => (v, "RUST_LOG".to_string()),
        (None, None, None) => ("info".to_string(), String::new()),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&text)
        .map_err(|e| anyhow::anyhow!("{origin}: {text:?} is not a log filter: {e}"))?;
    Ok((text, filter))
}

/// A bad `--log-level` is named before anything else is looked at.
fn check_log_flag(flag: Option<&str>) -> Result<()> {
    if flag.is_some() {
        log_filter(flag, None, "")?;
    }
    Ok(())
}

/// The daemon's log filter, replaced on SIGHUP unless `--log-level` set it.
struct Logging {
    flag: Option<String>,
    current: String,
    handle: tracing_subscriber::reload::Handle<
        tracing_subscriber::EnvFilter,
        tracing_subscriber::Registry,
    >,
}

/// Sends `tracing` events to standard error, filtered as [`log_filter`] says.
fn init_logging(flag: Option<&str>, file: Option<&str>, side: &str) -> Result<Logging> {
    use tracing_subscriber::prelude::*;
    let (current, filter) = log_filter(flag, file, side)?;
    let (layer, handle) = tracing_subscriber::reload::Layer::new(filter);
    // A subscriber set before (tests running two daemons in one process) stays.
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .try_init();
    Ok(Logging {
        flag: flag.map(str::to_string),
        current,
        handle,
    })
}

impl Logging {
    /// Applies a reloaded configuration's `log_level` (checked already); what changed.
    fn reload(&mut self, file: Option<&str>, side: &str) -> Result<Option<String>> {
        if self.flag.is_some() {
            return Ok(None);
        }
        let (text, filter) = log_filter(None, file, side)?;
        if text == self.current {
            return Ok(None);
        }
        self.handle
            .reload(filter)
            .map_err(|e| anyhow::anyhow!("cannot change the log filter: {e}"))?;
        let change = format!("log_level {:?} -> {text:?}", self.current);
        self.current = text;
        Ok(Some(change))
    }
}

/// What SIGHUP does to a running daemon.
enum Reload<'a> {
    Terminal {
        path: &'a Path,
        logging: Logging,
        text: String,
    },
    Gateway {
        path: &'a Path,
        logging: Logging,
        text: String,
        gateway: &'a Gateway,
        /// The public keys handshakes are answered with: `private_key_file`'s, then
        /// `next_private_key_file`'s during a changeover.
        keys: Vec<PublicKey>,
    },
}

impl Reload<'_> {
    /// Re-reads the configuration and applies what can change while running — the log level;
    /// on a gateway also the policy, the allowed terminals (inline and from their file) and
    /// the key files (over an STP hop) — without touching open connections but a revoked
    /// terminal's. Logs what changed, the settings that changed but
    /// wait for a restart, or why the reload was refused (the running settings stay).
    async fn run(&mut self) {
        let (side, path) = match self {
            Reload::Terminal { path, .. } => ("terminal", *path),
            Reload::Gateway { path, .. } => ("gateway", *path),
        };
        tracing::info!(config = %path.display(), "{side}: SIGHUP: reloading the configuration");
        match self.apply().await {
            Ok((changed, restart)) => {
                if !restart.is_empty() {
                    tracing::warn!(
                        "{side}: reload: {} changed in {}; these take effect at the next restart",
                        restart.join(", "),
                        path.display()
                    );
                }
                if changed.is_empty() {
                    tracing::info!("{side}: configuration reloaded; nothing to change");
                } else {
                    tracing::info!("{side}: configuration reloaded: {}", changed.join("; "));
                }
            }
            Err(e) => tracing::error!(
                "{side}: reload refused, keeping the running settings: {}",
                crate::error_chain(&e)
            ),
        }
    }

    /// The changes applied and the keys that changed but need a restart.
    async fn apply(&mut self) -> Result<(Vec<String>, Vec<String>)> {
        match self {
            Reload::Terminal {
                path,
                logging,
                text,
            } => {
                let new_text = read_config_text(path)?;
                let cfg = load_terminal(path)?;
                prepare_terminal(cfg.clone())?;
                let restart = changed_keys(text, &new_text, "terminal", &["log_level"]);
                let mut changed = Vec::new();
                changed.extend(logging.reload(cfg.log_level.as_deref(), "terminal")?);
                *text = new_text;
                Ok((changed, restart))
            }
            Reload::Gateway {
                path,
                logging,
                text,
                gateway,
                keys,
            } => {
                let new_text = read_config_text(path)?;
                let cfg = load_gateway(path)?;
                let new = prepare_gateway(cfg)?;
                let reloadable = [
                    "log_level",
                    "policy",
                    "allowed_terminals",
                    "allowed_terminals_file",
                    "private_key_file",
                    "next_private_key_file",
                ];
                let restart = changed_keys(text, &new_text, "gateway", &reloadable);
                let new_keys = accepted_keys(&new)?;
                let keys_changed = new_keys != *keys;
                // Checked first, applied after: a bad log filter refuses the whole reload.
                log_filter(
                    logging.flag.as_deref(),
                    new.cfg.log_level.as_deref(),
                    "gateway",
                )?;
                let mut changed = Vec::new();
                if *gateway.policy() != new.policy {
                    gateway.replace_policy(new.policy.clone());
                    changed.push(format!(
                        "policy: allow={:?} deny={:?} allow_private={}",
                        new.cfg.policy.allow, new.cfg.policy.deny, new.cfg.policy.allow_private
                    ));
                }
                if keys_changed {
                    let accepted = gateway
                        .set_keys(new.key.clone(), new.next_key.clone())
                        .await
                        .context("the hop cannot change its key while running; restart it")?;
                    changed.push(keys_change(keys, &accepted));
                    *keys = accepted;
                }
                let change = gateway.set_allowed_terminals(new.allowed.clone()).await;
                for (what, keys) in [("added", &change.added), ("removed", &change.removed)] {
                    if !keys.is_empty() {
                        let shown: Vec<String> = keys.iter().map(|k| k.to_hex()).collect();
                        changed.push(format!("allowed terminals {what}: {}", shown.join(", ")));
                    }
                }
                changed.extend(logging.reload(new.cfg.log_level.as_deref(), "gateway")?);
                *text = new_text;
                Ok((changed, restart))
            }
        }
    }
}

/// The public keys of a gateway's key files: `private_key_file`'s, then
/// `next_private_key_file`'s.
fn accepted_keys(setup: &GatewaySetup) -> Result<Vec<PublicKey>> {
    let mut keys = vec![setup.key.public_key().context("gateway.private_key_file")?];
    if let Some(next) = &setup.next_key {
        keys.push(next.public_key().context("gateway.next_private_key_file")?);
    }
    Ok(keys)
}

/// The log's words for a change of the gateway's keys: those now accepted, those dropped.
fn keys_change(before: &[PublicKey], now: &[PublicKey]) -> String {
    let names = ["private_key_file", "next_private_key_file"];
    let accepted: Vec<String> = now
        .iter()
        .zip(names)
        .map(|(k, n)| format!("{k} ({n})"))
        .collect();
    let mut line = format!(
        "gateway keys: handshakes now accepted to {}",
        accepted.join(", ")
    );
    let dropped: Vec<String> = before
        .iter()
        .filter(|k| !now.contains(k))
        .map(|k| k.to_string())
        .collect();
    if !dropped.is_empty() {
        line.push_str(&format!(
            "; no longer to {} (live sessions made under it carry on)",
            dropped.join(", ")
        ));
    }
    line
}

/// A configuration file's text, as [`load_terminal`] reads it.
fn read_config_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), pep::config::io_words(&e)))
}

/// The keys of the `[side]` table (and its sub-tables, as `limits`, `stp`) whose values differ
/// between two texts of a configuration, but those in `reloadable`.
fn changed_keys(old: &str, new: &str, side: &str, reloadable: &[&str]) -> Vec<String> {
    let table = |text: &str| -> toml::Table {
        text.parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get(side).and_then(|v| v.as_table()).cloned())
            .unwrap_or_default()
    };
    let (old, new) = (table(old), table(new));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !reloadable.contains(&k.as_str()) && old.get(*k) != new.get(*k))
        .map(|k| format!("{side}.{k}"))
        .collect()
}

/// The signals a running daemon handles, caught from before it says it started.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn catch() -> Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            hup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }

    /// Waits for SIGTERM or SIGINT, reloading on each SIGHUP; returns the signal's name.
    async fn wait(&mut self, reload: &mut Reload<'_>) -> &'static str {
        loop {
            tokio::select! {
                _ = self.term.recv() => return "SIGTERM",
                _ = self.int.recv() => return "SIGINT",
                _ = self.hup.recv() => reload.run().await,
            }
        }
    }
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
        OpsConfig::from_limits(limits, self.idle_timeout_s, self.connect_timeout_s)
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
    reload: &mut Reload<'_>,
) -> Result<Duration> {
    let mut signals = Signals::catch()?;
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
    let sig = signals.wait(reload).await;
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

/// A terminal's configuration with everything it names read and checked, as at start.
pub(crate) struct TerminalSetup {
    pub cfg: pep::config::TerminalConfig,
    pub key: PrivateKey,
    pub gateway_key: PublicKey,
    pub endpoint: EndpointConfig,
}

/// Checks what a terminal checks at start before it binds anything: its key file, the
/// gateway's key, the STP parameters, the backup gateways, the TCP hop's socket options.
pub(crate) fn prepare_terminal(cfg: pep::config::TerminalConfig) -> Result<TerminalSetup> {
    let key = cfg.private_key()?;
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
    if cfg.hop_transport.tcp() {
        check_hop_tcp("terminal.hop_tcp", &cfg.hop_tcp_tuning())?;
    }
    Ok(TerminalSetup {
        cfg,
        key,
        gateway_key,
        endpoint,
    })
}

/// The terminal's gateways in failover order: the gateway (resolved), then its backups.
pub(crate) async fn resolve_gateways(
    cfg: &pep::config::TerminalConfig,
    gateway_key: PublicKey,
) -> Result<Vec<(SocketAddr, PublicKey)>> {
    let gateway = tokio::net::lookup_host(&cfg.gateway)
        .await
        .with_context(|| format!("terminal.gateway: cannot resolve {}", cfg.gateway))?
        .next()
        .with_context(|| format!("terminal.gateway: {} has no address", cfg.gateway))?;
    if cfg.hop_transport.tcp() {
        return Ok(vec![(gateway, gateway_key)]);
    }
    crate::failover::terminal_gateways(cfg, gateway, gateway_key).await
}

/// A gateway's configuration with everything it names read and checked, as at start.
pub(crate) struct GatewaySetup {
    pub cfg: pep::config::GatewayConfig,
    pub key: PrivateKey,
    /// The key of a rotation in progress (`next_private_key_file`), served beside `key`.
    pub next_key: Option<PrivateKey>,
    pub allowed: Vec<PublicKey>,
    pub endpoint: EndpointConfig,
    pub policy: pep::gateway::policy::Policy,
}

/// Checks what a gateway checks at start before it binds anything: its key file, the allowed
/// terminals (inline and their file), the policy, the outbound and hop TCP socket options,
/// source transparency, the STP parameters.
pub(crate) fn prepare_gateway(cfg: pep::config::GatewayConfig) -> Result<GatewaySetup> {
    let key = cfg.private_key()?;
    let next_key = cfg.next_private_key()?;
    if let (Some(next), Some(f)) = (&next_key, &cfg.next_private_key_file) {
        if next.public_key().ok() == key.public_key().ok() {
            anyhow::bail!(
                "gateway.next_private_key_file: {} holds the same key as private_key_file; \
                 a rotation needs a new key (satstp keygen)",
                f.display()
            );
        }
    }
    let allowed = cfg.allowed_terminal_keys()?;
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        max_connections: hop_connection_limit(&cfg.limits),
        ..EndpointConfig::default()
    };
    let policy = cfg
        .build_policy(vec![cfg.listen.ip()])
        .map_err(|e| anyhow::anyhow!("gateway.{e}"))?;
    pep::sockopt::check_tcp_options(&cfg.tcp)
        .map_err(|e| anyhow::anyhow!("gateway.tcp: cannot be applied on this host: {e}"))?;
    if cfg.source_transparent {
        pep::sockopt::check_transparent_allowed().context("gateway.source_transparent")?;
    }
    if cfg.hop_transport.tcp() {
        check_hop_tcp("gateway.hop_tcp", &cfg.hop_tcp_tuning())?;
    }
    Ok(GatewaySetup {
        cfg,
        key,
        next_key,
        allowed,
        endpoint,
        policy,
    })
}

/// What both daemons do first, in this order: the flags checked (`--log-level`, the capture),
/// the configuration file read (its text kept for reload comparisons) and parsed, then logging
/// started at the flag's level, else the file's `log_level`.
fn start_side<C>(
    args: &DaemonArgs,
    side: &str,
    load: impl Fn(&Path) -> Result<C, pep::config::ConfigError>,
    file_log_level: impl Fn(&C) -> Option<&str>,
) -> Result<(String, C, Logging)> {
    check_log_flag(args.log_level.as_deref())?;
    args.capture.check()?;
    let text = read_config_text(&args.config)?;
    let cfg = load(&args.config)?;
    let logging = init_logging(args.log_level.as_deref(), file_log_level(&cfg), side)?;
    Ok((text, cfg, logging))
}

pub fn terminal(args: &DaemonArgs) -> Result<()> {
    let (text, cfg, logging) =
        start_side(args, "terminal", load_terminal, |c| c.log_level.as_deref())?;
    let TerminalSetup {
        cfg,
        key,
        gateway_key,
        endpoint,
    } = prepare_terminal(cfg)?;
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    let send_rate = cfg.hop_link().map(|l| l.shaper_rate_bps());
    let settings = settings!(cfg);
    let seed = os_seed()?;
    let capture = args.capture.open("terminal", !cfg.hop_transport.tcp())?;
    runtime()?.block_on(async move {
        let gateways = resolve_gateways(&cfg, gateway_key).await?;
        let gateway = gateways
            .first()
            .map_or(SocketAddr::from(([0u8; 4], 0)), |g| g.0);
        let hop = if cfg.hop_transport.tcp() {
            TerminalHop::Tcp {
                tuning: cfg.hop_tcp_tuning(),
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
                cipher: cfg.tunnel_cipher()?,
                workers: cfg.hop_workers(),
            }))
        };
        let mut o = TerminalOptions::new(key, gateway, gateway_key, hop, relay);
        o.gateways = gateways;
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
        let quic = cfg.tproxy_listen.map(|_| cfg.quic);
        let _quic_counter = match quic {
            Some(policy) => Some(apply_quic_policy(policy, t.ops().metrics())?),
            None => None,
        };
        let mut listening = Vec::new();
        for (addr, what) in [
            (t.socks_addr(), "SOCKS5"),
            (t.http_connect_addr(), "HTTP proxy"),
            (t.tproxy_addr(), "TPROXY"),
        ] {
            if let Some(a) = addr {
                listening.push(format!("{what} on {a}"));
            }
        }
        let mut details = format!(
            "listeners={} gateway={gateway} hop={} hop_transport={:?}",
            listening.join(", "),
            t.hop().local_addr(),
            cfg.hop_transport
        );
        if let Some(policy) = quic {
            details.push_str(&format!(" quic={}", policy.describe()));
        }
        let mut reload = Reload::Terminal {
            path: &args.config,
            logging,
            text,
        };
        let timeout = run_started("terminal", &details, &settings, t.ops(), &mut reload).await?;
        t.stop(timeout).await;
        if quic.is_some_and(|p| p.verdict().is_some()) {
            pep::quic_policy::remove();
        }
        Ok(())
    })
}

/// Applies the transparent terminal's QUIC policy (its nftables table, `docs/quic.md`), shows
/// it in `/metrics`, and for block and reject reads the rule's counter into `/metrics` every
/// [`QUIC_COUNTER_EVERY`] on a task that ends when the returned guard is dropped.
fn apply_quic_policy(
    policy: pep::quic_policy::QuicPolicy,
    metrics: &Arc<pep::metrics::Metrics>,
) -> Result<Option<AbortOnDrop>> {
    pep::quic_policy::apply(policy)
        .with_context(|| format!("terminal.quic = \"{}\"", policy.as_str()))?;
    metrics.set_quic_policy(policy);
    if policy.verdict().is_none() {
        return Ok(None);
    }
    let metrics = Arc::clone(metrics);
    let task = tokio::spawn(async move {
        let mut warned = false;
        loop {
            match tokio::task::spawn_blocking(pep::quic_policy::read_counter).await {
                Ok(Ok(n)) => metrics.quic_packets.set(n),
                Ok(Err(e)) if !warned => {
                    warned = true;
                    tracing::warn!(
                        "terminal: cannot read the QUIC policy's packet counter (was the table \
                         inet {} deleted by hand?): {e}",
                        pep::quic_policy::TABLE
                    );
                }
                _ => {}
            }
            tokio::time::sleep(QUIC_COUNTER_EVERY).await;
        }
    });
    Ok(Some(AbortOnDrop(task)))
}

/// How often the terminal reads its QUIC policy's nftables counter.
const QUIC_COUNTER_EVERY: Duration = Duration::from_secs(5);

/// Ends a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn gateway(args: &DaemonArgs) -> Result<()> {
    let (text, cfg, logging) =
        start_side(args, "gateway", load_gateway, |c| c.log_level.as_deref())?;
    let setup = prepare_gateway(cfg)?;
    let keys = accepted_keys(&setup)?;
    let GatewaySetup {
        cfg,
        key,
        next_key,
        allowed,
        endpoint,
        policy,
    } = setup;
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    let send_rate = cfg.hop_link().map(|l| l.shaper_rate_bps());
    let settings = settings!(cfg);
    let seed = os_seed()?;
    let capture = args.capture.open("gateway", cfg.hop_transport.stp())?;
    let cipher = cfg.tunnel_cipher()?;
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
                cipher,
                workers: cfg.hop_workers(),
            }),
            tcp: cfg.hop_transport.tcp().then(|| cfg.hop_tcp_tuning()),
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
        let mut reload = Reload::Gateway {
            path: &args.config,
            logging,
            text,
            gateway: &g,
            keys,
        };
        let timeout = run_started("gateway", &details, &settings, g.ops(), &mut reload).await?;
        drop(reload);
        g.stop(timeout).await;
        Ok(())
    })
}
