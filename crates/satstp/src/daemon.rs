//! `satstp terminal` and `satstp gateway`: the split-connection gateway's two sides as daemons,
//! configured by a TOML file (see `deploy/terminal.toml`, `deploy/gateway.toml`), running until
//! SIGTERM or SIGINT, then draining: the listeners close, open connections get up to
//! `shutdown_timeout_s` to finish, and the process exits 0. SIGHUP reloads the configuration:
//! the log level, and on a gateway the policy and the allowed terminals, change without touching
//! open connections. Logs go to standard error through `tracing` (`--log-level`, else the
//! file's `log_level`, else `RUST_LOG`); `/metrics` and `/status` are served on
//! `metrics_listen` when it is set. What the daemons check at start is also what
//! `satstp check` checks ([`TerminalSetup::prepare`], [`GatewaySetup::prepare`]); the
//! configuration's translation into the sides' options is `pep::setup`'s.

use anyhow::{Context, Result};
use clap::Args;
use pep::config::{changed_keys, gateway_from_text, read_config_file, terminal_from_text};
use pep::config::{GatewayConfig, SharedConfig};
use pep::config::{SideConfig, TerminalConfig};
use pep::keys::PublicKey;
use pep::ops::Ops;
use pep::setup::{GatewaySetup, QuicPolicyGuard, TerminalSetup};
use pep::{Gateway, Terminal};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
                let new_text = read_config_file(path)?;
                let cfg = TerminalSetup::prepare(terminal_from_text(path, &new_text)?)?.cfg;
                let restart = changed_keys::<TerminalConfig>(text, &new_text);
                let mut changed = Vec::new();
                changed.extend(logging.reload(cfg.shared.log_level.as_deref(), "terminal")?);
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
                let new_text = read_config_file(path)?;
                let new = GatewaySetup::prepare(gateway_from_text(path, &new_text)?)?;
                let restart = changed_keys::<GatewayConfig>(text, &new_text);
                let keys_changed = new.public_keys()? != *keys;
                let log_level = new.cfg.shared.log_level.as_deref();
                // Checked first, applied after: a bad log filter refuses the whole reload.
                log_filter(logging.flag.as_deref(), log_level, "gateway")?;
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
                changed.extend(logging.reload(log_level, "gateway")?);
                *text = new_text;
                Ok((changed, restart))
            }
        }
    }
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
/// the `shared` settings and the limits of `ops`; then waits for a signal and returns the
/// drain's timeout.
async fn run_started(
    side: &str,
    details: &str,
    settings: &SharedConfig,
    ops: &Arc<Ops>,
    reload: &mut Reload<'_>,
) -> Result<Duration> {
    let mut signals = Signals::catch()?;
    let c = ops.config();
    tracing::info!(
        up_rate_bps = settings.up_rate_bps,
        down_rate_bps = settings.down_rate_bps,
        rtt_ms = settings.rtt_ms,
        relay_buffer_bytes = settings.relay_buffer_bytes(),
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

/// What both daemons do first, in this order: the flags checked (`--log-level`, the capture),
/// the configuration file read once, its text parsed (and kept for reload comparisons), then
/// logging started at the flag's level, else the file's `log_level`.
fn start_side<C: SideConfig>(
    args: &DaemonArgs,
    parse: impl Fn(&Path, &str) -> Result<C, pep::config::ConfigError>,
) -> Result<(String, C, Logging)> {
    check_log_flag(args.log_level.as_deref())?;
    args.capture.check()?;
    let text = read_config_file(&args.config)?;
    let cfg = parse(&args.config, &text)?;
    let file_level = cfg.shared().log_level.as_deref();
    let logging = init_logging(args.log_level.as_deref(), file_level, C::TABLE)?;
    Ok((text, cfg, logging))
}

pub fn terminal(args: &DaemonArgs) -> Result<()> {
    let (text, cfg, logging) = start_side(args, terminal_from_text)?;
    let setup = TerminalSetup::prepare(cfg)?;
    let seed = os_seed()?;
    let capture = args
        .capture
        .open("terminal", !setup.cfg.shared.hop_transport.tcp())?;
    runtime()?.block_on(async move {
        let cfg = &setup.cfg;
        let gateways = setup.gateways().await?;
        let gateway = gateways.first().map(|g| g.0);
        let o = setup.options(gateways, seed, capture)?;
        raise_file_limit();
        let t = Terminal::start(o)
            .await
            .map_err(|e| side_error("terminal", e))?;
        let quic = cfg.tproxy_listen.map(|_| cfg.quic);
        let quic_guard = match quic {
            Some(policy) => Some(QuicPolicyGuard::apply(policy, t.ops().metrics())?),
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
            "listeners={} gateway={} hop={} hop_transport={:?}",
            listening.join(", "),
            gateway.map_or("none".into(), |g| g.to_string()),
            t.hop().local_addr(),
            cfg.shared.hop_transport
        );
        if let Some(policy) = quic {
            details.push_str(&format!(" quic={}", policy.describe()));
        }
        let mut reload = Reload::Terminal {
            path: &args.config,
            logging,
            text,
        };
        let timeout = run_started("terminal", &details, &cfg.shared, t.ops(), &mut reload).await?;
        t.stop(timeout).await;
        drop(quic_guard);
        Ok(())
    })
}

pub fn gateway(args: &DaemonArgs) -> Result<()> {
    let (text, cfg, logging) = start_side(args, gateway_from_text)?;
    let setup = GatewaySetup::prepare(cfg)?;
    let keys = setup.public_keys()?;
    let cfg = &setup.cfg;
    let capture = args
        .capture
        .open("gateway", cfg.shared.hop_transport.stp())?;
    let o = setup.options(os_seed()?, os_seed()?, capture)?;
    runtime()?.block_on(async move {
        raise_file_limit();
        let g = Gateway::start(o)
            .await
            .map_err(|e| side_error("gateway", e))?;
        let details = format!(
            "listen={} hop_transport={:?} source_transparent={} policy_allow={:?} \
             policy_deny={:?} allow_private={} tcp_congestion={:?}",
            g.hop_addr(),
            cfg.shared.hop_transport,
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
        let timeout = run_started("gateway", &details, &cfg.shared, g.ops(), &mut reload).await?;
        drop(reload);
        g.stop(timeout).await;
        Ok(())
    })
}
