//! A side's configuration made ready to run, as `satstp terminal`, `satstp gateway` and
//! `satstp check` use it: [`TerminalSetup::prepare`] and [`GatewaySetup::prepare`] read and
//! check everything the file names (key files, the allowed terminals, socket options on this
//! host) before anything is bound; their `options` are the [`TerminalOptions`] and
//! [`GatewayOptions`] that [`Terminal::start`](crate::Terminal::start) and
//! [`Gateway::start`](crate::Gateway::start) take. Errors name the setting
//! (`terminal.gateway_public_key: ...`).

use crate::capture::Capture;
use crate::config::{ConfigError, GatewayConfig, Limits, SharedConfig, SideConfig, TerminalConfig};
use crate::gateway::connect::ConnectOptions;
use crate::gateway::policy::Policy;
use crate::keys::{PrivateKey, PublicKey};
use crate::ops::OpsConfig;
use crate::socks::SocksAuth;
use crate::stack::{GatewayHops, SocksListener, StpHop, TerminalHop};
use crate::{GatewayOptions, TerminalOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;

fn invalid(field: impl Into<String>, reason: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.to_string(),
    }
}

/// Most STP connections the hop's endpoint holds: the configured connection limit, with room
/// for connections whose relay has ended while their closing handshake still crosses the hop
/// (an eighth more, at least 64), so `limits.max_connections` is the limit users meet.
fn hop_connection_limit(limits: &Limits) -> u32 {
    let m = limits.max_connections;
    m.saturating_add((m / 8).max(64))
}

/// The hop's STP endpoint: the side's STP parameters, its connection limit.
fn endpoint<C: SideConfig>(cfg: &C) -> Result<EndpointConfig, ConfigError> {
    Ok(EndpointConfig {
        connection: cfg.stp_config()?,
        max_connections: hop_connection_limit(&cfg.shared().limits),
        ..EndpointConfig::default()
    })
}

/// With the TCP hop, checks its socket options on this host (an error names the field, e.g.
/// `terminal.hop_tcp.congestion`) and warns when the kernel grants smaller buffers than asked.
fn check_hop_tcp<C: SideConfig>(cfg: &C) -> Result<(), ConfigError> {
    if !cfg.shared().hop_transport.tcp() {
        return Ok(());
    }
    let field = format!("{}.hop_tcp", C::TABLE);
    let tuning = cfg.hop_tcp_tuning();
    let granted = crate::sockopt::check_tcp_options(&tuning).map_err(|e| {
        let (key, reason) = match &e {
            crate::sockopt::SockoptError::Socket { field, source } => (*field, source.to_string()),
            // The other errors are about the congestion control, and say so first.
            e => ("congestion", e.to_string().replacen("congestion: ", "", 1)),
        };
        invalid(format!("{field}.{key}"), reason)
    })?;
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
                    "{field}.{name}: the kernel granted less than asked and this process may not force it past the cap (raise {sysctl}, or run the daemon with CAP_NET_ADMIN)"
                );
            }
        }
    }
    Ok(())
}

/// The side's STP hop: its endpoint, seeded with `seed`, paced at its allocation, capturing to
/// `capture`, with its workers and cipher.
fn stp_hop<C: SideConfig>(
    cfg: &C,
    endpoint: EndpointConfig,
    seed: u64,
    capture: Option<Capture>,
) -> Result<StpHop, ConfigError> {
    Ok(StpHop {
        send_rate_bps: cfg.hop_link().map(|l| l.shaper_rate_bps()),
        capture,
        cipher: cfg.shared().tunnel_cipher()?,
        workers: cfg.hop_workers(),
        ..StpHop::new(endpoint, seed)
    })
}

/// The side's limits and timeouts for its [`crate::ops::Ops`].
fn ops_config(shared: &SharedConfig) -> OpsConfig {
    OpsConfig::from_limits(
        &shared.limits,
        shared.idle_timeout_s,
        shared.connect_timeout_s,
    )
}

/// The relay buffer of the side's connections, bytes.
fn relay_buffer<C: SideConfig>(cfg: &C) -> u32 {
    u32::try_from(cfg.shared().relay_buffer_bytes()).unwrap_or(u32::MAX)
}

/// A terminal's configuration with everything it names read and checked, as at start.
pub struct TerminalSetup {
    pub cfg: TerminalConfig,
    pub key: PrivateKey,
    pub gateway_key: PublicKey,
    pub endpoint: EndpointConfig,
}

impl TerminalSetup {
    /// Checks what a terminal checks at start before it binds anything: its key file, the
    /// gateway's key, the STP parameters, the backup gateways, the TCP hop's socket options.
    pub fn prepare(cfg: TerminalConfig) -> Result<TerminalSetup, ConfigError> {
        let key = cfg.private_key()?;
        let gateway_key = cfg.gateway_public_key()?;
        crate::keys::check_not_own_key(&key, &gateway_key)
            .map_err(|e| invalid("terminal.gateway_public_key", e))?;
        for (i, (_, k)) in cfg.backup_gateways()?.iter().enumerate() {
            crate::keys::check_not_own_key(&key, k)
                .map_err(|e| invalid(format!("terminal.backup_gateways[{i}].public_key"), e))?;
        }
        let endpoint = endpoint(&cfg)?;
        check_hop_tcp(&cfg)?;
        Ok(TerminalSetup {
            cfg,
            key,
            gateway_key,
            endpoint,
        })
    }

    /// The terminal's gateways in failover order (`docs/scaling.md`): the gateway (resolved),
    /// then under its further keys (a key rotation), then each backup resolved to an address
    /// of the gateway's family. With the TCP hop, the gateway alone.
    pub async fn gateways(&self) -> Result<Vec<(SocketAddr, PublicKey)>, ConfigError> {
        let cfg = &self.cfg;
        let resolve = |field: String, name: String, v6: Option<bool>| async move {
            tokio::net::lookup_host(&name)
                .await
                .map_err(|e| invalid(&field, format!("cannot resolve {name}: {e}")))?
                .find(|a| v6.is_none_or(|v6| a.is_ipv6() == v6))
                .ok_or_else(|| match v6 {
                    None => invalid(&field, format!("{name} has no address")),
                    Some(_) => invalid(
                        &field,
                        format!("{name} has no address of the gateway's family"),
                    ),
                })
        };
        let gateway = resolve("terminal.gateway".into(), cfg.gateway.clone(), None).await?;
        let mut gateways = vec![(gateway, self.gateway_key)];
        if cfg.shared.hop_transport.tcp() {
            return Ok(gateways);
        }
        for key in cfg.further_gateway_keys()? {
            gateways.push((gateway, key));
        }
        let backups = cfg.backup_gateways()?;
        if backups.is_empty() {
            return Ok(gateways);
        }
        for (i, (address, key)) in backups.into_iter().enumerate() {
            let field = format!("terminal.backup_gateways[{i}].address");
            gateways.push((resolve(field, address, Some(gateway.is_ipv6())).await?, key));
        }
        tracing::info!(
            gateways = ?gateways.iter().map(|g| g.0).collect::<Vec<_>>(),
            "terminal: gateways in failover order"
        );
        Ok(gateways)
    }

    /// The terminal's options: `gateways` (from [`Self::gateways`]), its hop (STP seeded with
    /// `seed` and capturing to `capture`, or TCP), its listeners, limits and metrics endpoint.
    pub fn options(
        &self,
        gateways: Vec<(SocketAddr, PublicKey)>,
        seed: u64,
        capture: Option<Capture>,
    ) -> Result<TerminalOptions, ConfigError> {
        let cfg = &self.cfg;
        let hop = if cfg.shared.hop_transport.tcp() {
            TerminalHop::Tcp {
                tuning: cfg.hop_tcp_tuning(),
                handshake_timeout: Duration::from_secs(u64::from(cfg.shared.connect_timeout_s)),
            }
        } else {
            TerminalHop::Stp(Box::new(StpHop {
                rekey: cfg.rekey(),
                ..stp_hop(cfg, self.endpoint.clone(), seed, capture)?
            }))
        };
        let auth = if cfg.socks_users.is_empty() {
            SocksAuth::None
        } else {
            let users = cfg.socks_users.iter();
            SocksAuth::UserPass(
                users
                    .map(|u| (u.user.clone(), u.password.clone()))
                    .collect(),
            )
        };
        Ok(TerminalOptions {
            key: self.key.clone(),
            gateways,
            hop,
            relay_buffer_bytes: relay_buffer(cfg),
            socks: cfg.socks_listen.map(|listen| SocksListener {
                listen,
                auth,
                fast_open: cfg.socks_fast_open,
            }),
            http_connect: cfg.http_connect_listen,
            tproxy: cfg.tproxy_listen,
            ops: ops_config(&cfg.shared),
            metrics_listen: cfg.shared.metrics_listen,
        })
    }
}

/// A gateway's configuration with everything it names read and checked, as at start.
pub struct GatewaySetup {
    pub cfg: GatewayConfig,
    pub key: PrivateKey,
    /// The key of a rotation in progress (`next_private_key_file`), served beside `key`.
    pub next_key: Option<PrivateKey>,
    pub allowed: Vec<PublicKey>,
    pub endpoint: EndpointConfig,
    pub policy: Policy,
}

impl GatewaySetup {
    /// Checks what a gateway checks at start before it binds anything: its key files, the
    /// allowed terminals (inline and their file), the policy, the outbound and hop TCP socket
    /// options, source transparency, the STP parameters.
    pub fn prepare(cfg: GatewayConfig) -> Result<GatewaySetup, ConfigError> {
        let key = cfg.private_key()?;
        let next_key = cfg.next_private_key()?;
        if let (Some(next), Some(f)) = (&next_key, &cfg.next_private_key_file) {
            if next.public_key().ok() == key.public_key().ok() {
                return Err(invalid(
                    "gateway.next_private_key_file",
                    format!(
                        "{} holds the same key as private_key_file; a rotation needs a new key \
                         (satstp keygen)",
                        f.display()
                    ),
                ));
            }
        }
        let allowed = cfg.allowed_terminal_keys()?;
        let endpoint = endpoint(&cfg)?;
        let policy = cfg
            .build_policy(vec![cfg.listen.ip()])
            .map_err(|e| e.prefixed("gateway"))?;
        crate::sockopt::check_tcp_options(&cfg.tcp).map_err(|e| {
            invalid(
                "gateway.tcp",
                format!("cannot be applied on this host: {e}"),
            )
        })?;
        if cfg.source_transparent {
            crate::sockopt::check_transparent_allowed()
                .map_err(|e| invalid("gateway.source_transparent", e))?;
        }
        check_hop_tcp(&cfg)?;
        Ok(GatewaySetup {
            cfg,
            key,
            next_key,
            allowed,
            endpoint,
            policy,
        })
    }

    /// The public keys handshakes are answered to: `private_key_file`'s, then
    /// `next_private_key_file`'s.
    pub fn public_keys(&self) -> Result<Vec<PublicKey>, ConfigError> {
        let mut keys = vec![self
            .key
            .public_key()
            .map_err(|e| invalid("gateway.private_key_file", e))?];
        if let Some(next) = &self.next_key {
            let k = next.public_key();
            keys.push(k.map_err(|e| invalid("gateway.next_private_key_file", e))?);
        }
        Ok(keys)
    }

    /// The gateway's options: its hops (STP seeded with `seed` and capturing to `capture`,
    /// TCP, or both), the tunnel responder seeded with `responder_seed`, its policy, outbound
    /// connections, limits and metrics endpoint.
    pub fn options(
        &self,
        seed: u64,
        responder_seed: u64,
        capture: Option<Capture>,
    ) -> Result<GatewayOptions, ConfigError> {
        let cfg = &self.cfg;
        let transport = cfg.shared.hop_transport;
        let stp = match transport.stp() {
            true => Some(stp_hop(cfg, self.endpoint.clone(), seed, capture)?),
            false => None,
        };
        Ok(GatewayOptions {
            key: self.key.clone(),
            next_key: self.next_key.clone(),
            allowed: self.allowed.clone(),
            responder_seed,
            listen: cfg.listen,
            hops: GatewayHops {
                stp,
                tcp: transport.tcp().then(|| cfg.hop_tcp_tuning()),
            },
            relay_buffer_bytes: relay_buffer(cfg),
            policy: Arc::new(self.policy.clone()),
            connect: ConnectOptions {
                connect_timeout: Duration::from_secs(u64::from(cfg.shared.connect_timeout_s)),
                source_transparent: cfg.source_transparent,
            },
            outbound_tcp: cfg.tcp.clone(),
            ops: ops_config(&cfg.shared),
            metrics_listen: cfg.shared.metrics_listen,
        })
    }
}

/// The transparent terminal's QUIC policy while it runs (its nftables table, `docs/quic.md`),
/// shown in `/metrics`; for block and reject the rule's counter is read into `/metrics` every
/// [`QUIC_COUNTER_EVERY`]. Dropping it stops the reading and removes the table.
pub struct QuicPolicyGuard {
    policy: crate::quic_policy::QuicPolicy,
    counter: Option<tokio::task::JoinHandle<()>>,
}

/// How often the terminal reads its QUIC policy's nftables counter.
pub(crate) const QUIC_COUNTER_EVERY: Duration = Duration::from_secs(5);

impl QuicPolicyGuard {
    /// Applies `policy` (an error names `terminal.quic`) and shows it in `metrics`.
    pub fn apply(
        policy: crate::quic_policy::QuicPolicy,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> Result<QuicPolicyGuard, ConfigError> {
        crate::quic_policy::apply(policy)
            .map_err(|e| invalid("terminal.quic", format!("\"{}\": {e}", policy.as_str())))?;
        metrics.set_quic_policy(policy);
        let metrics = Arc::clone(metrics);
        let counter = policy.verdict().map(|_| {
            tokio::spawn(async move {
                let mut warned = false;
                loop {
                    match tokio::task::spawn_blocking(crate::quic_policy::read_counter).await {
                        Ok(Ok(n)) => metrics.quic_packets.set(n),
                        Ok(Err(e)) if !warned => {
                            warned = true;
                            tracing::warn!(
                                "terminal: cannot read the QUIC policy's packet counter (was the \
                                 table inet {} deleted by hand?): {e}",
                                crate::quic_policy::TABLE
                            );
                        }
                        _ => {}
                    }
                    tokio::time::sleep(QUIC_COUNTER_EVERY).await;
                }
            })
        });
        Ok(QuicPolicyGuard { policy, counter })
    }
}

impl Drop for QuicPolicyGuard {
    fn drop(&mut self) {
        if let Some(task) = self.counter.take() {
            task.abort();
        }
        if self.policy.verdict().is_some() {
            crate::quic_policy::remove();
        }
    }
}
