//! `satstp terminal` and `satstp gateway`: the split-connection gateway's two sides as daemons,
//! configured by a TOML file (see `deploy/terminal.toml`, `deploy/gateway.toml`), running until
//! interrupted.

use anyhow::{bail, Context, Result};
use clap::Args;
use pep::config::{load_gateway, load_terminal};
use pep::hop::{Hop, HopConfig, Security};
use pep::keys::load_private_key;
use pep::policy::{Policy, PolicyConfig};
use pep::socks::SocksAuth;
use pep::tunnel::{Responder, ResponderConfig};
use rand_core::SeedableRng;
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
    let cfg = load_terminal(&args.config)?;
    let key = load_private_key(&cfg.private_key_file)?;
    let gateway_key = cfg.gateway_public_key()?;
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        ..EndpointConfig::default()
    };
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    if cfg.metrics_listen.is_some() {
        eprintln!("warning: terminal.metrics_listen is not wired to the data path yet; ignored");
    }
    let seed = os_seed()?;
    runtime()?.block_on(async move {
        let gateway = tokio::net::lookup_host(&cfg.gateway)
            .await
            .with_context(|| format!("terminal.gateway: cannot resolve {}", cfg.gateway))?
            .next()
            .with_context(|| format!("terminal.gateway: {} has no address", cfg.gateway))?;
        let bind = if gateway.is_ipv6() {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let sock = tokio::net::UdpSocket::bind(bind)
            .await
            .context("cannot bind the hop's UDP socket")?;
        let hop = Hop::start(
            sock,
            Security::Terminal {
                local: key,
                gateway_key,
                gateway,
            },
            HopConfig {
                endpoint,
                relay_buffer_bytes: relay,
                seed,
            },
        )
        .map_err(anyhow::Error::msg)?;
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
            tokio::spawn(pep::relay::serve_socks(l, Arc::clone(&hop), Arc::new(auth)));
            listening.push(format!("SOCKS5 on {a}"));
        }
        if let Some(a) = cfg.http_connect_listen {
            let l = tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("terminal.http_connect_listen: cannot listen on {a}"))?;
            tokio::spawn(pep::relay::serve_http_connect(l, Arc::clone(&hop)));
            listening.push(format!("HTTP CONNECT on {a}"));
        }
        if let Some(a) = cfg.tproxy_listen {
            let l = pep::tproxy::bind_transparent(a).context("terminal.tproxy_listen")?;
            let l = tokio::net::TcpListener::from_std(l)
                .with_context(|| format!("terminal.tproxy_listen: cannot listen on {a}"))?;
            tokio::spawn(pep::tproxy::serve_tproxy(l, Arc::clone(&hop)));
            listening.push(format!("TPROXY on {a}"));
        }
        if listening.is_empty() {
            bail!(
                "terminal: no usable listener (socks_listen, http_connect_listen or tproxy_listen)"
            );
        }
        eprintln!(
            "satstp terminal: {}; gateway {gateway}",
            listening.join(", ")
        );
        tokio::signal::ctrl_c()
            .await
            .context("cannot wait for Ctrl-C")?;
        eprintln!("satstp terminal: stopping");
        Ok(())
    })
}

pub fn gateway(args: &DaemonArgs) -> Result<()> {
    let cfg = load_gateway(&args.config)?;
    let key = load_private_key(&cfg.private_key_file)?;
    let allowed = cfg.allowed_terminal_keys()?;
    let endpoint = EndpointConfig {
        connection: cfg.stp_config()?,
        ..EndpointConfig::default()
    };
    let relay = u32::try_from(cfg.relay_buffer_bytes()).unwrap_or(u32::MAX);
    // Host-name rules parse in the configuration but are not enforced by the relay yet: refuse
    // them rather than silently weakening a deny rule.
    for (field, list) in [("allow", &cfg.policy.allow), ("deny", &cfg.policy.deny)] {
        if let Some(name) = list
            .iter()
            .find(|e| e.parse::<pep::policy::Cidr>().is_err())
        {
            bail!("gateway.policy.{field}: \"{name}\": only IP addresses and CIDR ranges are supported so far");
        }
    }
    let policy = Policy::new(PolicyConfig {
        allow: cfg.policy.allow.clone(),
        deny: cfg.policy.deny.clone(),
        allow_private: cfg.policy.allow_private,
        own_addresses: vec![cfg.listen.ip()],
    })
    .context("gateway.policy")?;
    if cfg.source_transparent {
        pep::tproxy::check_transparent_allowed().context("gateway.source_transparent")?;
    }
    if cfg.metrics_listen.is_some() {
        eprintln!("warning: gateway.metrics_listen is not wired to the data path yet; ignored");
    }
    let seed = os_seed()?;
    let responder = Responder::new(
        key,
        allowed,
        ResponderConfig::default(),
        Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(os_seed()?)),
    )
    .map_err(|e| anyhow::anyhow!("gateway: {e}"))?;
    let connect_timeout = Duration::from_secs(u64::from(cfg.connect_timeout_s));
    runtime()?.block_on(async move {
        let sock = tokio::net::UdpSocket::bind(cfg.listen)
            .await
            .with_context(|| format!("gateway.listen: cannot bind {}", cfg.listen))?;
        let hop = Hop::start(
            sock,
            Security::Gateway {
                responder: Box::new(responder),
            },
            HopConfig {
                endpoint,
                relay_buffer_bytes: relay,
                seed,
            },
        )
        .map_err(anyhow::Error::msg)?;
        eprintln!("satstp gateway: listening on {}", hop.local_addr());
        let options = pep::relay::ConnectOptions {
            connect_timeout,
            source_transparent: cfg.source_transparent,
        };
        tokio::spawn(pep::relay::serve_with(hop, Arc::new(policy), options));
        tokio::signal::ctrl_c()
            .await
            .context("cannot wait for Ctrl-C")?;
        eprintln!("satstp gateway: stopping");
        Ok(())
    })
}
