//! `satstp check FILE`: checks a terminal, gateway or scenario file — told apart by its content
//! (a `[terminal]` table, a `[gateway]` table, or a scenario's `[[node]]`s and `[[link]]`s) —
//! as the daemon or `satstp sim` would before starting, and prints the effective settings with
//! their units. A bad file fails with the same one-line error the daemon would give.

use anyhow::{Context, Result};
use clap::Args;
use pep::config::{gateway_from_text, read_config_file, terminal_from_text, Limits, SharedConfig};
use pep::setup::{GatewaySetup, TerminalSetup};
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A terminal or gateway configuration (TOML, as `satstp terminal --config`), or a scenario
    /// file (as `satstp sim`).
    file: PathBuf,
}

/// What kind of file a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Terminal,
    Gateway,
    Scenario,
}

/// Tells a file's kind by its top-level keys.
fn kind_of(path: &Path, text: &str) -> Result<Kind> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(
        match (
            table.contains_key("terminal"),
            table.contains_key("gateway"),
            ["node", "link", "constellation"]
                .iter()
                .any(|k| table.contains_key(*k)),
        ) {
            (true, false, _) => Kind::Terminal,
            (false, true, _) => Kind::Gateway,
            (false, false, true) => Kind::Scenario,
            (true, true, _) => anyhow::bail!(
                "{}: has both a [terminal] and a [gateway] table; a configuration file holds one",
                path.display()
            ),
            (false, false, false) => anyhow::bail!(
                "{}: not a terminal configuration ([terminal] table), a gateway configuration \
                 ([gateway] table) or a scenario ([[node]] and [[link]] tables, or a \
                 [constellation] table)",
                path.display()
            ),
        },
    )
}

pub fn run(args: &CheckArgs) -> Result<()> {
    let path = &args.file;
    // Read once: what is checked is what the daemon would run (the daemon's 1 MiB cap included).
    let text = read_config_file(path)?;
    // Warnings of the checks (a socket buffer the kernel caps, a key file others can read).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .try_init();
    let lines = match kind_of(path, &text)? {
        Kind::Terminal => terminal(path, &text)?,
        Kind::Gateway => gateway(path, &text)?,
        Kind::Scenario => scenario(path, &text)?,
    };
    for (key, value) in lines {
        println!("  {key:<36} {value}");
    }
    Ok(())
}

type Lines = Vec<(String, String)>;

/// `n` bytes, with a binary unit when it is a round one.
fn bytes(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{n} bytes ({} {unit})", n / size);
        }
    }
    format!("{n} bytes")
}

fn rate(r: Option<u64>) -> String {
    r.map_or("not set".into(), |r| {
        format!("{r} bit/s ({} Mbit/s)", r as f64 / 1e6)
    })
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("none".into(), |v| v.to_string())
}

/// The settings both sides share, as the daemon applies them.
fn shared_lines(side: &str, cfg: &SharedConfig, l: &mut Lines) -> Result<()> {
    let allocation = cfg.up_rate_bps.is_some();
    l.push(("up_rate_bps".into(), rate(cfg.up_rate_bps)));
    l.push(("down_rate_bps".into(), rate(cfg.down_rate_bps)));
    l.push((
        "rtt_ms".into(),
        cfg.rtt_ms.map_or("not set".into(), |r| format!("{r} ms")),
    ));
    let sized = if cfg.limits.relay_buffer_bytes.is_some() {
        ""
    } else if allocation {
        ", 2.5 × the hop's bandwidth-delay product"
    } else {
        ", the default without an allocation"
    };
    let relay = bytes(cfg.relay_buffer_bytes());
    l.push(("relay_buffer_bytes".into(), format!("{relay}{sized}")));
    limits_lines(&cfg.limits, l);
    // The STP hop's read-ahead bound, as pep's stack sizes it: this side's send allocation.
    let send_rate = cfg
        .rtt_ms
        .and(cfg.up_rate_bps.zip(cfg.down_rate_bps))
        .map(|(up, down)| if side == "terminal" { up } else { down });
    let read_ahead = match cfg.limits.read_ahead_bytes {
        Some(b) => bytes(b),
        None => format!(
            "{}, 20 ms of this side's send allocation within 32-256 MiB (the default)",
            bytes(pep::hop::default_read_ahead_bytes(send_rate))
        ),
    };
    l.push((
        "limits.read_ahead_bytes".into(),
        format!("{read_ahead}; bounds an STP hop only"),
    ));
    for (key, s) in [
        ("idle_timeout_s", cfg.idle_timeout_s),
        ("connect_timeout_s", cfg.connect_timeout_s),
        ("shutdown_timeout_s", cfg.shutdown_timeout_s),
    ] {
        l.push((key.into(), format!("{s} s")));
    }
    l.push((
        "hop_transport".into(),
        format!("{:?}", cfg.hop_transport).to_lowercase(),
    ));
    if cfg.hop_transport.stp() {
        l.push((
            "hop UDP socket buffers".into(),
            pep::hop::udp_buffer_report(),
        ));
    }
    l.push(("metrics_listen".into(), opt(&cfg.metrics_listen)));
    let (filter, _) = crate::daemon::log_filter(None, cfg.log_level.as_deref(), side)?;
    let unset = if cfg.log_level.is_some() {
        ""
    } else {
        " (not set in the file)"
    };
    l.push(("log_level".into(), format!("{filter}{unset}")));
    Ok(())
}

fn limits_lines(limits: &Limits, l: &mut Lines) {
    l.push((
        "limits.max_connections".into(),
        limits.max_connections.to_string(),
    ));
    l.push((
        "limits.max_connections_per_terminal".into(),
        limits.max_connections_per_terminal.to_string(),
    ));
    l.push((
        "limits.memory_cap_bytes".into(),
        format!(
            "{}, admits {} idle connections",
            bytes(limits.memory_cap_bytes),
            limits.memory_cap_bytes / pep::ops::CONNECTION_BYTES
        ),
    ));
}

fn terminal(path: &Path, text: &str) -> Result<Lines> {
    let setup = TerminalSetup::prepare(terminal_from_text(path, text)?)?;
    let cfg = &setup.cfg;
    let gateways = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(setup.gateways())?;
    println!("{}: terminal configuration, OK", path.display());
    let mut l: Lines = vec![(
        "private_key_file".into(),
        format!(
            "{} (public key {})",
            cfg.shared.private_key_file.display(),
            setup.key.public_key()?.to_hex()
        ),
    )];
    for (i, (addr, key)) in gateways.iter().enumerate() {
        let name = if i == 0 {
            format!("gateway ({})", cfg.gateway)
        } else {
            format!("backup_gateways[{}]", i - 1)
        };
        l.push((name, format!("{addr}, public key {}", key.to_hex())));
    }
    l.push((
        "socks_listen".into(),
        match cfg.socks_listen {
            Some(a) => format!(
                "{a} (fast open {}, {} users)",
                if cfg.socks_fast_open { "on" } else { "off" },
                cfg.socks_users.len()
            ),
            None => "none".into(),
        },
    ));
    l.push(("http_connect_listen".into(), opt(&cfg.http_connect_listen)));
    l.push(("tproxy_listen".into(), opt(&cfg.tproxy_listen)));
    if cfg.tproxy_listen.is_some() {
        l.push(("quic".into(), cfg.quic.describe()));
    }
    shared_lines("terminal", &cfg.shared, &mut l)?;
    Ok(l)
}

fn gateway(path: &Path, text: &str) -> Result<Lines> {
    let setup = GatewaySetup::prepare(gateway_from_text(path, text)?)?;
    let cfg = &setup.cfg;
    println!("{}: gateway configuration, OK", path.display());
    let mut l: Lines = vec![
        ("listen".into(), cfg.listen.to_string()),
        (
            "private_key_file".into(),
            format!(
                "{} (public key {})",
                cfg.shared.private_key_file.display(),
                setup.key.public_key()?.to_hex()
            ),
        ),
    ];
    if let (Some(file), Some(next)) = (&cfg.next_private_key_file, &setup.next_key) {
        l.push((
            "next_private_key_file".into(),
            format!(
                "{} (public key {}; a key rotation: handshakes to either key are accepted)",
                file.display(),
                next.public_key()?.to_hex()
            ),
        ));
    }
    l.extend([
        (
            "allowed terminals".into(),
            format!(
                "{} {} ({} inline{})",
                setup.allowed.len(),
                if setup.allowed.len() == 1 {
                    "key"
                } else {
                    "keys"
                },
                cfg.allowed_terminals.len(),
                cfg.allowed_terminals_file
                    .as_ref()
                    .map_or(String::new(), |f| format!(
                        ", the rest from {}",
                        f.display()
                    ))
            ),
        ),
        ("policy.allow".into(), format!("{:?}", cfg.policy.allow)),
        ("policy.deny".into(), format!("{:?}", cfg.policy.deny)),
        (
            "policy.allow_private".into(),
            cfg.policy.allow_private.to_string(),
        ),
        (
            "tcp.congestion".into(),
            cfg.tcp
                .congestion
                .clone()
                .unwrap_or_else(|| "system default".into()),
        ),
        (
            "source_transparent".into(),
            cfg.source_transparent.to_string(),
        ),
    ]);
    shared_lines("gateway", &cfg.shared, &mut l)?;
    Ok(l)
}

fn scenario(path: &Path, text: &str) -> Result<Lines> {
    let s = netsim::scenario::Scenario::from_toml(text)
        .with_context(|| format!("invalid scenario {}", path.display()))?;
    println!("{}: scenario {:?}, OK", path.display(), s.name);
    let mut lines: Lines = vec![
        ("duration".into(), s.duration.clone()),
        (
            "runs".into(),
            match s.replication()? {
                netsim::scenario::Replication::Fixed { runs } => runs.to_string(),
                rule => format!("{rule:?}"),
            },
        ),
        ("seed".into(), s.seed.to_string()),
        ("nodes".into(), s.nodes.len().to_string()),
        ("links".into(), s.links.len().to_string()),
        ("flows".into(), s.flows.len().to_string()),
        ("web".into(), s.web.len().to_string()),
    ];
    if let Some(c) = &s.constellation {
        let what = c.preset.clone().or(c.tle.clone()).unwrap_or_default();
        lines.push(("constellation".into(), what));
        lines.push((
            "ground stations".into(),
            s.ground_stations.len().to_string(),
        ));
    }
    Ok(lines)
}
