//! Assembling one side of the gateway: options → hop → listeners (terminal) or stream service
//! (gateway) → limits and metrics (`/metrics`, `/status`), and its graceful stop. The daemons,
//! the demo, the benchmarks and the tests all start their sides here ([`Terminal::start`],
//! [`Gateway::start`]); sizing from an allocation is [`crate::sizing`]'s.

use crate::capture::Capture;
use crate::config::TcpOptions;
use crate::gateway::connect::ConnectOptions;
use crate::gateway::policy::Policy;
use crate::hop::tcp::TcpHopConfig;
use crate::hop::{Hop, HopConfig, HopError, HopMonitor, HopStatus, Security};
use crate::keys::{PrivateKey, PublicKey};
use crate::metrics::{Metrics, Side};
use crate::ops::{Ops, OpsConfig};
use crate::socks::SocksAuth;
use crate::terminal::tproxy::TproxyError;
use crate::tunnel::{Responder, ResponderConfig};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;
use thiserror::Error;
use tokio::net::{TcpListener, UdpSocket};

impl crate::sizing::HopLink {
    /// The per-connection relay buffer for this link, as the daemons size it from their
    /// configuration ([`crate::config::Limits::relay_buffer`] on the faster direction). Here
    /// rather than in `sizing`, which the configuration itself uses.
    pub fn relay_buffer_bytes(&self) -> u32 {
        let rate = self.send_rate_bps.max(self.recv_rate_bps);
        let b = crate::config::Limits::default().relay_buffer(Some(rate), Some(self.rtt_ms));
        u32::try_from(b).unwrap_or(u32::MAX)
    }
}

/// How long relays get to reset their connections once a drain ran out of time.
pub(crate) const CUT_GRACE: Duration = Duration::from_secs(2);

/// Why a side could not start. Messages start with the setting's name (`socks_listen`, ...)
/// for the caller to prefix with its table (`terminal.`, `gateway.`).
#[derive(Debug, Error)]
pub enum StackError {
    #[error("{field}: cannot listen on {addr}: {source}")]
    Listen {
        field: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("tproxy_listen: {0}")]
    Tproxy(#[from] TproxyError),
    #[error("{field}: {source}")]
    Hop {
        field: &'static str,
        #[source]
        source: HopError,
    },
    #[error("no usable listener (socks_listen, http_connect_listen or tproxy_listen)")]
    NoListener,
    #[error("no hop transport")]
    NoHop,
}

/// The STP hop of a side.
pub struct StpHop {
    pub endpoint: EndpointConfig,
    /// Seeds the endpoint's connection ids and sequence numbers (and the terminal's session
    /// index): from the operating system's random source on a real network.
    pub seed: u64,
    /// This side's allocation, bit/s of link bytes ([`crate::sizing::HopLink::shaper_rate_bps`]).
    pub send_rate_bps: Option<u64>,
    /// Terminal: the UDP address to bind (default: any address of the gateway's family).
    pub bind: Option<SocketAddr>,
    pub capture: Option<Capture>,
    /// Terminal: when the tunnel session is rekeyed.
    pub rekey: crate::hop::RekeyConfig,
    /// The tunnel suites offered (terminal) or accepted (gateway): `tunnel_cipher`.
    pub cipher: crate::tunnel::CipherChoice,
    /// Hop workers ([`Hop::start_workers`]; `docs/scaling.md`, "Workers"): a gateway's share
    /// its `listen` address, a terminal's hold a tunnel session each. At least 1.
    pub workers: usize,
}

impl StpHop {
    /// An STP hop with `endpoint`, seeded with `seed`, no allocation, no capture.
    pub fn new(endpoint: EndpointConfig, seed: u64) -> StpHop {
        StpHop {
            endpoint,
            seed,
            send_rate_bps: None,
            bind: None,
            capture: None,
            rekey: crate::hop::RekeyConfig::default(),
            cipher: crate::tunnel::CipherChoice::Auto,
            workers: 1,
        }
    }

    /// Logs, once at start, what running without the link's allocation costs: the hop's STP
    /// connections slow-start across the satellite round trip (a first answer of some tens of
    /// kilobytes takes one or two round trips more) and keep the engine's default buffers.
    fn warn_without_allocation(&self, side: &str) {
        if self.send_rate_bps.is_none() {
            tracing::warn!(
                "{side}: the STP hop runs without the link's allocation (up_rate_bps, \
                 down_rate_bps and rtt_ms unset): connections slow-start across the satellite \
                 round trip and use default buffers; set all three (docs/gateway.md, 'Using the \
                 hop's allocation')"
            );
        }
    }

    /// The hop handle's configuration for this hop, with `relay_buffer_bytes` per stream: the
    /// one place both sides (and the tests and benchmarks that start a [`Hop`] alone) build it.
    pub fn hop_config(&self, relay_buffer_bytes: u32) -> HopConfig {
        HopConfig {
            endpoint: self.endpoint.clone(),
            relay_buffer_bytes,
            seed: self.seed,
            send_rate_bps: self.send_rate_bps,
            rekey: self.rekey,
            cipher: self.cipher,
        }
    }

    /// An STP hop sized for `link` ([`crate::sizing`]), datagrams for IPv4 or IPv6 paths.
    pub fn sized(link: crate::sizing::HopLink, ipv6: bool, seed: u64) -> StpHop {
        StpHop {
            endpoint: EndpointConfig {
                connection: link.stp_config(crate::sizing::hop_stp_defaults(ipv6)),
                ..EndpointConfig::default()
            },
            seed,
            send_rate_bps: Some(link.shaper_rate_bps()),
            bind: None,
            capture: None,
            rekey: crate::hop::RekeyConfig::default(),
            cipher: crate::tunnel::CipherChoice::Auto,
            workers: 1,
        }
    }
}

/// The transport of a terminal's hop.
pub enum TerminalHop {
    Stp(Box<StpHop>),
    /// Split TCP ([`crate::hop::tcp`]).
    Tcp {
        tuning: TcpOptions,
        handshake_timeout: Duration,
    },
}

/// The terminal's SOCKS5 listener.
pub struct SocksListener {
    pub listen: SocketAddr,
    pub auth: SocksAuth,
    /// Answer success at once and carry the client's first bytes on the BGN
    /// ([`crate::terminal::socks5::serve_socks`]).
    pub fast_open: bool,
}

/// Everything a terminal needs.
pub struct TerminalOptions {
    pub key: PrivateKey,
    /// The gateways (address, public key) in order of preference; with more than one the STP
    /// hop fails over between them ([`Security::TerminalFailover`]).
    pub gateways: Vec<(SocketAddr, PublicKey)>,
    pub hop: TerminalHop,
    /// Bytes a connection may have handed to the hop and not yet seen taken
    /// ([`crate::sizing::HopLink::relay_buffer_bytes`]).
    pub relay_buffer_bytes: u32,
    pub socks: Option<SocksListener>,
    pub http_connect: Option<SocketAddr>,
    pub tproxy: Option<SocketAddr>,
    pub ops: OpsConfig,
    pub metrics_listen: Option<SocketAddr>,
}

impl TerminalOptions {
    /// A terminal of `gateway` over `hop` with no listener yet, no limits, no metrics endpoint.
    pub fn new(
        key: PrivateKey,
        gateway: SocketAddr,
        gateway_key: PublicKey,
        hop: TerminalHop,
        relay_buffer_bytes: u32,
    ) -> TerminalOptions {
        TerminalOptions {
            key,
            gateways: vec![(gateway, gateway_key)],
            hop,
            relay_buffer_bytes,
            socks: None,
            http_connect: None,
            tproxy: None,
            ops: OpsConfig::unlimited(),
            metrics_listen: None,
        }
    }
}

/// A running terminal.
pub struct Terminal {
    hop: Arc<Hop>,
    ops: Arc<Ops>,
    socks: Option<SocketAddr>,
    http_connect: Option<SocketAddr>,
    tproxy: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

async fn bind_tcp(field: &'static str, addr: SocketAddr) -> Result<TcpListener, StackError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StackError::Listen {
            field,
            addr,
            source,
        })
}

/// Serves `/metrics` and `/status` of `ops` and `hop` on `addr` until `ops` drains; returns the
/// bound address.
async fn serve_metrics(
    addr: SocketAddr,
    ops: &Arc<Ops>,
    hop: Arc<Hop>,
) -> Result<SocketAddr, StackError> {
    let l = bind_tcp("metrics_listen", addr).await?;
    let bound = l.local_addr().unwrap_or(addr);
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "metrics_listen is not a loopback address: keep it on a management network (/status shows client and destination addresses)"
        );
    }
    let o = Arc::clone(ops);
    let metrics = Arc::clone(ops.metrics());
    tokio::spawn(async move {
        crate::http_endpoint::serve(l, metrics, Some(hop), async move { o.drained().await }).await;
    });
    tracing::info!(addr = %bound, "serving /metrics and /status");
    Ok(bound)
}

/// Gives an STP hop its read-ahead bound: `limits.read_ahead_bytes`, or 20 ms of its send
/// allocation ([`crate::hop::default_read_ahead_bytes`]); its use is reported in `ops`'s
/// metrics.
async fn bound_read_ahead(hop: &Hop, ops: &Ops, send_rate_bps: Option<u64>) {
    let bound = ops
        .config()
        .read_ahead_bytes
        .unwrap_or_else(|| crate::hop::default_read_ahead_bytes(send_rate_bps));
    let read_ahead = crate::hop::read_ahead::ReadAhead::new(bound, Some(Arc::clone(ops.metrics())));
    hop.bound_read_ahead(read_ahead).await;
    tracing::info!(
        read_ahead_bytes = bound,
        "STP hop read-ahead bound (limits.read_ahead_bytes)"
    );
}

impl Terminal {
    /// Starts the hop, the listeners and the metrics endpoint (within a tokio runtime).
    pub async fn start(o: TerminalOptions) -> Result<Terminal, StackError> {
        let hop_err = |source| StackError::Hop {
            field: "gateway",
            source,
        };
        let &(gateway, gateway_key) = o.gateways.first().ok_or(hop_err(HopError::NoGateway))?;
        // An STP hop's send allocation (`Some`), which sizes its default read-ahead bound.
        let mut stp_rate = None;
        let hop = match o.hop {
            TerminalHop::Tcp {
                tuning,
                handshake_timeout,
            } => {
                let config = TcpHopConfig {
                    relay_buffer_bytes: o.relay_buffer_bytes,
                    tuning,
                    handshake_timeout,
                };
                crate::hop::tcp::start_terminal(o.key, gateway_key, gateway, config).map_err(
                    |source| StackError::Hop {
                        field: "hop_tcp",
                        source,
                    },
                )?
            }
            TerminalHop::Stp(stp) => {
                let stp = *stp;
                stp.warn_without_allocation("terminal");
                stp_rate = Some(stp.send_rate_bps);
                let bind = stp.bind.unwrap_or(if gateway.is_ipv6() {
                    SocketAddr::from(([0u16; 8], 0))
                } else {
                    SocketAddr::from(([0u8; 4], 0))
                });
                let listen_err = |source| StackError::Listen {
                    field: "hop",
                    addr: bind,
                    source,
                };
                let socks =
                    crate::sockopt::bind_udp_consecutive(bind, stp.workers).map_err(listen_err)?;
                let mut workers = Vec::with_capacity(socks.len());
                for sock in socks {
                    let sock = UdpSocket::from_std(sock).map_err(listen_err)?;
                    let security = if o.gateways.len() > 1 {
                        Security::TerminalFailover {
                            local: o.key.clone(),
                            gateways: o.gateways.clone(),
                        }
                    } else {
                        Security::Terminal {
                            local: o.key.clone(),
                            gateway_key,
                            gateway,
                        }
                    };
                    workers.push((sock, security));
                }
                let config = stp.hop_config(o.relay_buffer_bytes);
                Hop::start_workers(workers, config, stp.capture).map_err(hop_err)?
            }
        };
        let hop = Arc::new(hop);
        let ops = Ops::new(o.ops, Arc::new(Metrics::new(Side::Terminal)));
        hop.charge_to(Arc::clone(ops.memory())).await;
        if let Some(rate) = stp_rate {
            bound_read_ahead(&hop, &ops, rate).await;
        }
        let mut t = Terminal {
            hop,
            ops,
            socks: None,
            http_connect: None,
            tproxy: None,
            metrics: None,
        };
        if let Some(s) = o.socks {
            let l = bind_tcp("socks_listen", s.listen).await?;
            t.socks = l.local_addr().ok();
            tokio::spawn(crate::terminal::socks5::serve_socks(
                l,
                Arc::clone(&t.hop),
                Arc::new(s.auth),
                Arc::clone(&t.ops),
                s.fast_open,
            ));
        }
        if let Some(a) = o.http_connect {
            let l = bind_tcp("http_connect_listen", a).await?;
            t.http_connect = l.local_addr().ok();
            tokio::spawn(crate::terminal::http_connect::serve_http_connect(
                l,
                Arc::clone(&t.hop),
                Arc::clone(&t.ops),
            ));
        }
        if let Some(a) = o.tproxy {
            let l = crate::terminal::tproxy::bind_transparent(a)?;
            let l = TcpListener::from_std(l).map_err(|source| StackError::Listen {
                field: "tproxy_listen",
                addr: a,
                source,
            })?;
            t.tproxy = l.local_addr().ok();
            tokio::spawn(crate::terminal::tproxy::serve_tproxy(
                l,
                Arc::clone(&t.hop),
                Arc::clone(&t.ops),
            ));
        }
        if t.socks.is_none() && t.http_connect.is_none() && t.tproxy.is_none() {
            return Err(StackError::NoListener);
        }
        if let Some(a) = o.metrics_listen {
            t.metrics = Some(serve_metrics(a, &t.ops, Arc::clone(&t.hop)).await?);
        }
        Ok(t)
    }

    /// The SOCKS5 listener's address.
    pub fn socks_addr(&self) -> Option<SocketAddr> {
        self.socks
    }
    /// The HTTP CONNECT listener's address.
    pub fn http_connect_addr(&self) -> Option<SocketAddr> {
        self.http_connect
    }
    /// The transparent listener's address.
    pub fn tproxy_addr(&self) -> Option<SocketAddr> {
        self.tproxy
    }
    /// The `/metrics` and `/status` endpoint's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }
    /// The hop.
    pub fn hop(&self) -> &Arc<Hop> {
        &self.hop
    }
    /// The hop's status, without keeping it alive.
    pub fn monitor(&self) -> HopMonitor {
        self.hop.monitor()
    }
    /// The limits, timeouts and metrics.
    pub fn ops(&self) -> &Arc<Ops> {
        &self.ops
    }

    /// Graceful stop: see [`stop`].
    pub async fn stop(self, timeout: Duration) -> bool {
        stop("terminal", &self.ops, &[self.hop], timeout).await
    }
}

/// The hops a gateway serves.
pub struct GatewayHops {
    /// STP over the Noise tunnel on UDP `listen`.
    pub stp: Option<StpHop>,
    /// Split TCP on TCP `listen`.
    pub tcp: Option<TcpOptions>,
}

/// Everything a gateway needs.
pub struct GatewayOptions {
    pub key: PrivateKey,
    /// During a key rotation, the gateway's next key: initiations addressed to it are accepted
    /// too (`next_private_key_file`).
    pub next_key: Option<PrivateKey>,
    /// The terminals it serves.
    pub allowed: Vec<PublicKey>,
    /// Seeds the tunnel responder's session indices.
    pub responder_seed: u64,
    pub listen: SocketAddr,
    pub hops: GatewayHops,
    pub relay_buffer_bytes: u32,
    pub policy: Arc<Policy>,
    pub connect: ConnectOptions,
    /// Options of the outbound connections.
    pub outbound_tcp: TcpOptions,
    pub ops: OpsConfig,
    pub metrics_listen: Option<SocketAddr>,
}

impl GatewayOptions {
    /// A gateway on `listen` over an STP hop, serving `allowed` under `policy`, connects timing
    /// out after `connect_timeout`; no limits, no metrics endpoint.
    pub fn new(
        key: PrivateKey,
        allowed: Vec<PublicKey>,
        listen: SocketAddr,
        stp: StpHop,
        relay_buffer_bytes: u32,
        policy: Arc<Policy>,
        connect_timeout: Duration,
    ) -> GatewayOptions {
        GatewayOptions {
            key,
            next_key: None,
            allowed,
            responder_seed: stp.seed ^ 0x5eed,
            listen,
            hops: GatewayHops {
                stp: Some(stp),
                tcp: None,
            },
            relay_buffer_bytes,
            policy,
            connect: ConnectOptions::new(connect_timeout),
            outbound_tcp: TcpOptions::default(),
            ops: OpsConfig::unlimited(),
            metrics_listen: None,
        }
    }
}

/// A running gateway.
pub struct Gateway {
    hops: Vec<Arc<Hop>>,
    ops: Arc<Ops>,
    policy: Arc<crate::gateway::policy::PolicyCell>,
    metrics: Option<SocketAddr>,
}

impl Gateway {
    /// Starts the hops (STP on UDP and/or split TCP on TCP, same address), the stream service
    /// and the metrics endpoint (within a tokio runtime).
    pub async fn start(o: GatewayOptions) -> Result<Gateway, StackError> {
        use rand_core::SeedableRng;
        let mut hops = Vec::new();
        let mut listen = o.listen;
        // The STP hop's send allocation (`Some`), which sizes its default read-ahead bound.
        let mut stp_rate = None;
        if let Some(stp) = o.hops.stp {
            stp.warn_without_allocation("gateway");
            stp_rate = Some(stp.send_rate_bps);
            let listen_err = |source| StackError::Listen {
                field: "listen",
                addr: listen,
                source,
            };
            let socks =
                crate::sockopt::bind_udp_workers(listen, stp.workers).map_err(listen_err)?;
            let mut workers = Vec::with_capacity(socks.len());
            // Replay protection and the per-key session limit hold for the daemon, not per
            // worker: terminals sharing a key usually reach different workers.
            let key_table = crate::tunnel::KeyTable::new();
            for (i, sock) in socks.into_iter().enumerate() {
                // Each worker answers its own terminals' handshakes: a responder each, seeded
                // apart (their session indices must differ), one allow-list and key for all.
                let seed = o.responder_seed.wrapping_add(i as u64);
                let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(seed));
                let mut responder = Responder::new(
                    o.key.clone(),
                    o.allowed.iter().copied(),
                    ResponderConfig::default(),
                    rng,
                )
                .map_err(|e| StackError::Hop {
                    field: "private_key_file",
                    source: HopError::Tunnel(e),
                })?;
                responder.set_next_key(o.next_key.clone());
                responder.join(&key_table);
                let sock = UdpSocket::from_std(sock).map_err(listen_err)?;
                let security = Security::Gateway {
                    responder: Box::new(responder),
                };
                workers.push((sock, security));
            }
            let config = stp.hop_config(o.relay_buffer_bytes);
            let hop = Hop::start_workers(workers, config, stp.capture).map_err(|source| {
                StackError::Hop {
                    field: "listen",
                    source,
                }
            })?;
            // The TCP hop takes the same port when the UDP one was chosen by the system.
            listen = hop.local_addr();
            hops.push(hop);
        }
        if let Some(tuning) = o.hops.tcp {
            let config = TcpHopConfig {
                relay_buffer_bytes: o.relay_buffer_bytes,
                tuning,
                handshake_timeout: crate::hop::tcp::HANDSHAKE_TIMEOUT,
            };
            let hop = crate::hop::tcp::start_gateway(listen, o.key, o.next_key, o.allowed, config)
                .map_err(|source| StackError::Hop {
                    field: "listen (TCP hop)",
                    source,
                })?;
            hops.push(hop);
        }
        let ops = Ops::new(o.ops, Arc::new(Metrics::new(Side::Gateway)));
        let policy = Arc::new(crate::gateway::policy::PolicyCell::new(o.policy));
        let outbound = Arc::new(o.outbound_tcp);
        let mut running = Vec::new();
        for (i, mut hop) in hops.into_iter().enumerate() {
            hop.charge_to(Arc::clone(ops.memory())).await;
            // The STP hop, when there is one, is the first.
            if let (0, Some(rate)) = (i, stp_rate) {
                bound_read_ahead(&hop, &ops, rate).await;
            }
            let incoming = hop.take_incoming();
            tokio::spawn(crate::gateway::serve::serve_gateway(
                incoming,
                Arc::clone(&policy),
                o.connect,
                Arc::clone(&outbound),
                Arc::clone(&ops),
            ));
            running.push(Arc::new(hop));
        }
        // `/status` shows the first hop (the STP one when both run).
        let first = running.first().cloned().ok_or(StackError::NoHop)?;
        let metrics = match o.metrics_listen {
            Some(a) => Some(serve_metrics(a, &ops, first).await?),
            None => None,
        };
        Ok(Gateway {
            hops: running,
            ops,
            policy,
            metrics,
        })
    }

    /// Puts `policy` in force for the streams that arrive from now on (a reload); streams
    /// already open are not checked again.
    pub fn replace_policy(&self, policy: Policy) {
        self.policy.replace(policy);
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.current()
    }

    /// Serves the terminal keys in `allowed` from now on, on every hop
    /// ([`Hop::set_allowed_terminals`]); the keys added and removed.
    pub async fn set_allowed_terminals(
        &self,
        allowed: Vec<PublicKey>,
    ) -> crate::hop::AllowedChange {
        let mut change = crate::hop::AllowedChange::default();
        for hop in &self.hops {
            let c = hop.set_allowed_terminals(allowed.clone()).await;
            if change == crate::hop::AllowedChange::default() {
                change = c;
            }
        }
        change
    }

    /// Answers tunnel handshakes with `key`, and with `next` too during a changeover, from now
    /// on ([`Hop::set_gateway_keys`]); live sessions carry on. The public keys now accepted;
    /// `None` when a hop refused the keys (one snow cannot use), in which case the hops
    /// before it did change.
    pub async fn set_keys(
        &self,
        key: PrivateKey,
        next: Option<PrivateKey>,
    ) -> Option<Vec<PublicKey>> {
        let mut accepted = None;
        for (i, hop) in self.hops.iter().enumerate() {
            let keys = hop.set_gateway_keys(key.clone(), next.clone()).await?;
            if i == 0 {
                accepted = Some(keys);
            }
        }
        accepted
    }

    /// The hop's address (the STP hop's UDP address when it runs, else the TCP hop's).
    pub fn hop_addr(&self) -> SocketAddr {
        self.hops
            .first()
            .map_or(SocketAddr::from(([0u8; 4], 0)), |h| h.local_addr())
    }
    /// The `/metrics` and `/status` endpoint's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }
    /// The hops (STP first when both run).
    pub fn hops(&self) -> &[Arc<Hop>] {
        &self.hops
    }
    /// The first hop's status, without keeping it alive.
    pub fn monitor(&self) -> Option<HopMonitor> {
        self.hops.first().map(|h| h.monitor())
    }
    /// The first hop's status now.
    pub async fn status(&self) -> Option<HopStatus> {
        self.hops.first()?.status().await
    }
    /// The limits, timeouts and metrics.
    pub fn ops(&self) -> &Arc<Ops> {
        &self.ops
    }

    /// Graceful stop: see [`stop`].
    pub async fn stop(self, timeout: Duration) -> bool {
        stop("gateway", &self.ops, &self.hops, timeout).await
    }
}

/// Graceful stop of a side: stops accepting, and gives open connections up to `timeout` to
/// finish — their relays to end and their last bytes and ends to cross the `hops` and be
/// acknowledged — so a clean close in progress reaches the far side as a FIN. What is left at
/// the timeout is reset on both sides (counted as `drain_timeout`), never closed with a FIN that
/// would pass a cut transfer off as a complete one. Then the hops close (their RSTs leave before
/// this returns). True when every connection finished in time.
pub(crate) async fn stop(side: &str, ops: &Arc<Ops>, hops: &[Arc<Hop>], timeout: Duration) -> bool {
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
    // Streams without a relay any more (their bytes were still crossing) are reset here.
    for hop in hops {
        hop.close().await;
    }
    clean
}

// The end-to-end suites that drive the stack together with what is not API (the split-TCP
// hop's own start, the limits' accounting, the outbound TCP check, each worker's status, how
// long SOCKS5 fast open waits for early bytes).
#[cfg(test)]
mod tests_backpressure;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_read_ahead;
#[cfg(test)]
mod tests_socks;
#[cfg(test)]
mod tests_tcp_hop;
#[cfg(test)]
mod tests_workers;
