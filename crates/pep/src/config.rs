//! TOML configuration of the two sides of the split-connection gateway: the terminal (client
//! side of the satellite hop) and the gateway (Internet side). Every value has a documented
//! default and its unit in its name; [`TerminalConfig::validate`] and
//! [`GatewayConfig::validate`] reject bad values with a message naming the field by its TOML
//! path (`terminal.gateway: ...`). `deploy/terminal.toml` and `deploy/gateway.toml` are
//! commented examples.
//!
//! A terminal file holds one `[terminal]` table, a gateway file one `[gateway]` table, so the
//! field names in error messages are exactly the paths a user edits. The keys both sides take
//! are one struct, [`SharedConfig`] (the `shared` field of each side's config), written in the
//! same table as the side's own keys; [`SideConfig`] is what both sides derive from them. Unknown
//! keys are errors (naming the key, its line and the keys accepted; the other side's keys as the
//! other side's); `pep::setup` makes a loaded configuration into a side's options.
//! Loading does no other I/O: key files and the allowed-terminals file are read by the caller
//! (see [`GatewayConfig::allowed_terminal_keys`]), so they can be re-read without a restart.
//! A relative path in a file ([`load_terminal`], [`load_gateway`]) is relative to the file's
//! directory, and an error about a file a configuration names starts with its key
//! (`gateway.private_key_file: /tmp: is a directory`).

use crate::keys::PublicKey;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest configuration or allowed-terminals file read (1 MiB).
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most keys an allowed-terminals list may hold, inline and from its file together.
pub(crate) const MAX_ALLOWED_TERMINALS: usize = 100_000;
/// Bounds of a computed relay buffer: 64 KiB and 64 MiB.
pub(crate) const RELAY_BUFFER_MIN_BYTES: u64 = 64 << 10;
pub(crate) const RELAY_BUFFER_MAX_BYTES: u64 = 64 << 20;
/// Relay buffer used when the hop's rate or RTT is not configured (4 MiB).
pub(crate) const RELAY_BUFFER_DEFAULT_BYTES: u64 = 4 << 20;

/// Why a configuration could not be loaded or is invalid.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// A value out of range; `field` is its TOML path (`gateway.limits.max_connections`).
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The text is not valid TOML for this shape (unknown or missing key, wrong type); the
    /// message from the TOML parser names the key and its line.
    #[error("{0}")]
    Parse(String),
    /// A file could not be read: its path and the cause in a user's words ([`io_words`]).
    #[error("{}: {}", path.display(), io_words(error))]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// About the file the key `field` names: `gateway.allowed_terminals_file: PATH: REASON`.
    #[error("{field}: {error}")]
    Referenced {
        field: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Any of the above, found in a file.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The TOML path of the offending field, when the error is about one value.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } | ConfigError::Referenced { field, .. } => {
                Some(field)
            }
            ConfigError::InFile { source, .. } => source.field(),
            _ => None,
        }
    }

    /// An error about the file the key `field` names: `field: path: reason`.
    pub(crate) fn referenced(
        field: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ConfigError {
        ConfigError::Referenced {
            field: field.into(),
            error: source.into(),
        }
    }

    pub(crate) fn prefixed(self, prefix: &str) -> ConfigError {
        match self {
            ConfigError::Invalid { field, reason } => ConfigError::Invalid {
                field: format!("{prefix}.{field}"),
                reason,
            },
            other => other,
        }
    }

    fn in_file(self, path: &Path) -> ConfigError {
        match self {
            e @ ConfigError::Io { .. } => e,
            e => ConfigError::InFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        }
    }
}

/// An I/O error in a user's words: "no such file", "is a directory", "permission denied", else
/// the system's message.
pub(crate) fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => "no such file".into(),
        ErrorKind::PermissionDenied => "permission denied".into(),
        ErrorKind::IsADirectory => "is a directory".into(),
        ErrorKind::NotADirectory => "a component of the path is not a directory".into(),
        ErrorKind::InvalidData => "not text (invalid UTF-8)".into(),
        _ => e.to_string(),
    }
}

/// The private key in the file `path`, which the setting `field` names; an error names both.
fn load_private_key_field(
    field: &str,
    path: &Path,
) -> Result<crate::keys::PrivateKey, ConfigError> {
    crate::keys::load_private_key(path).map_err(|e| match e {
        crate::keys::KeyError::Io { path, source } => ConfigError::referenced(
            field,
            ConfigError::Io {
                path,
                error: source,
            },
        ),
        e => ConfigError::referenced(field, e),
    })
}

/// `path` as written in the file at `config`: relative paths are relative to its directory.
pub(crate) fn relative_to_file(config: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || path.as_os_str().is_empty() {
        return path.to_path_buf();
    }
    match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Terminal

/// One SOCKS5 user (RFC 1929 username/password authentication).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocksUser {
    /// 1..=255 bytes.
    pub user: String,
    /// 1..=255 bytes.
    pub password: String,
}

/// A gateway the terminal fails over to: one `[[terminal.backup_gateways]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupGateway {
    /// `host:port`, as `gateway`. Required.
    pub address: String,
    /// Its static public key, 64 hex digits (default: `gateway_public_key`, for instances that
    /// share one key).
    #[serde(default)]
    pub public_key: Option<String>,
}

/// The settings both sides take, written in the side's own table (`[terminal]`, `[gateway]`)
/// beside its own settings: the `shared` field of [`TerminalConfig`] and [`GatewayConfig`].
/// Names in [`SharedConfig::validate`]'s errors are relative to the side's table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SharedConfig {
    /// This side's private key file (written by `satstp keygen`). Required.
    pub private_key_file: PathBuf,
    /// Capacity of the hop from terminal to gateway, bit/s, as a number or with a unit
    /// (`"5Mbps"`) (default unknown). With `down_rate_bps` and `rtt_ms` it is the hop's
    /// allocation: STP starts at it and buffers are sized from it (`pep::sizing`).
    #[serde(default, deserialize_with = "rate_bps")]
    pub up_rate_bps: Option<u64>,
    /// Capacity of the hop from gateway to terminal, bit/s (default unknown).
    #[serde(default, deserialize_with = "rate_bps")]
    pub down_rate_bps: Option<u64>,
    /// The hop's base round-trip time, ms, used for buffer sizing (default unknown):
    /// a number of ms or a duration with a unit (`"600ms"`).
    #[serde(default, deserialize_with = "duration_ms")]
    pub rtt_ms: Option<u32>,
    /// HTTP listener for `/metrics` and `/status` (default none).
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Log filter: a level (`error`, `warn`, `info`, `debug`, `trace`) or `tracing`
    /// directives such as `"info,pep=debug"`; reloaded on SIGHUP. `--log-level` wins
    /// over it (default: the `RUST_LOG` environment variable, else `info`).
    #[serde(default)]
    pub log_level: Option<String>,
    /// STP parameters for the hop (default: the engine's defaults, sized from the
    /// allocation when it is set), in the engine's schema ([`StpOptions`]).
    #[serde(default)]
    pub stp: StpOptions,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Close a relayed connection idle in both directions for this long, s (default 300).
    #[serde(default = "default_idle_timeout_s")]
    pub idle_timeout_s: u32,
    /// Give up opening a connection after this long, s (default 30): at the terminal,
    /// through the gateway; at the gateway, to the destination.
    #[serde(default = "default_connect_timeout_s")]
    pub connect_timeout_s: u32,
    /// On SIGTERM or SIGINT, stop accepting and let open connections finish for at most
    /// this long, s, before exiting (default 30; 0 exits at once).
    #[serde(default = "default_shutdown_timeout_s")]
    pub shutdown_timeout_s: u32,
    /// How the satellite hop carries connections: "stp" (default: STP over the
    /// Noise-encrypted UDP tunnel), "tcp" (split TCP, one encrypted TCP connection per
    /// client connection; `docs/gateway.md`) or, at a gateway only, "both" (UDP and TCP
    /// on the same `listen` address and port).
    #[serde(default)]
    pub hop_transport: HopTransport,
    /// Socket options of the hop's TCP connections with `hop_transport = "tcp"`
    /// (buffers default to 2 × the hop's bandwidth-delay product when the rates and
    /// `rtt_ms` are set).
    #[serde(default)]
    pub hop_tcp: TcpOptions,
    /// STP hop: workers, each a task with its own UDP socket and hop core that the
    /// runtime runs on its own core (1 to 1024; default: at a gateway the cores
    /// available, at a terminal 1). A gateway's share its `listen` address
    /// (`SO_REUSEPORT`); a terminal's each hold a tunnel session (one handshake each)
    /// and its connections go to them in turn (`docs/scaling.md`, "Workers").
    #[serde(default)]
    pub workers: Option<u32>,
    /// STP hop: the tunnel's cipher suite, "auto" (default: AES-256-GCM where this
    /// machine has AES instructions, else ChaCha20-Poly1305; a terminal offers its
    /// preferred first and the other on the next retry), "chacha20-poly1305" or
    /// "aes-256-gcm" (that one only: a terminal offers it, a gateway accepts only it).
    /// `docs/tunnel.md`, "Cipher".
    #[serde(default)]
    pub tunnel_cipher: Option<String>,
}

impl Default for SharedConfig {
    /// The documented defaults and no key file (which [`SharedConfig::validate`] refuses).
    fn default() -> Self {
        SharedConfig {
            private_key_file: PathBuf::new(),
            up_rate_bps: None,
            down_rate_bps: None,
            rtt_ms: None,
            metrics_listen: None,
            log_level: None,
            stp: StpOptions::default(),
            limits: Limits::default(),
            idle_timeout_s: default_idle_timeout_s(),
            connect_timeout_s: default_connect_timeout_s(),
            shutdown_timeout_s: default_shutdown_timeout_s(),
            hop_transport: HopTransport::default(),
            hop_tcp: TcpOptions::default(),
            workers: None,
            tunnel_cipher: None,
        }
    }
}

impl SharedConfig {
    /// Checks every shared setting (names relative to the side's table).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_path(&self.private_key_file, "private_key_file")?;
        check_common(
            self.up_rate_bps,
            self.down_rate_bps,
            self.rtt_ms,
            self.idle_timeout_s,
            self.connect_timeout_s,
        )?;
        check_shutdown_timeout(self.shutdown_timeout_s)?;
        if let Some(n) = self.workers {
            if !(1..=MAX_WORKERS).contains(&n) {
                return Err(bad(
                    "workers",
                    format!("{n}: 1 to {MAX_WORKERS} (default: the cores available)"),
                ));
            }
        }
        self.tunnel_cipher()?;
        self.limits.validate().map_err(|e| e.prefixed("limits"))?;
        apply_stp(&self.stp, stp::Config::default())?;
        self.hop_tcp.validate().map_err(|e| e.prefixed("hop_tcp"))?;
        Ok(())
    }

    /// The tunnel suites of `tunnel_cipher` (default "auto").
    pub(crate) fn tunnel_cipher(&self) -> Result<crate::tunnel::CipherChoice, ConfigError> {
        match &self.tunnel_cipher {
            None => Ok(crate::tunnel::CipherChoice::Auto),
            Some(s) => crate::tunnel::CipherChoice::parse(s).map_err(|r| bad("tunnel_cipher", r)),
        }
    }

    /// Per-connection relay buffer for this hop, sized on the faster of its two directions
    /// (see [`Limits::relay_buffer`]).
    pub fn relay_buffer_bytes(&self) -> u64 {
        let rate = max_opt(self.up_rate_bps, self.down_rate_bps);
        self.limits.relay_buffer(rate, self.rtt_ms)
    }
}

/// What a side's configuration ([`TerminalConfig`], [`GatewayConfig`]) is to the code both
/// sides share: its table, its [`SharedConfig`], how it sees the hop; and what follows from
/// those alone.
pub trait SideConfig {
    /// The side's TOML table (`terminal`, `gateway`), the prefix of field names in errors.
    const TABLE: &'static str;
    /// The keys a running side re-reads on SIGHUP ([`changed_keys`] leaves them out).
    const RELOADABLE: &'static [&'static str];
    /// The settings both sides take.
    fn shared(&self) -> &SharedConfig;
    /// The hop's allocation as this side sees it, when `up_rate_bps`, `down_rate_bps` and
    /// `rtt_ms` are all set.
    fn hop_link(&self) -> Option<crate::sizing::HopLink>;
    /// Whether the hop may run over IPv6 (datagrams are sized for it).
    fn hop_ipv6(&self) -> bool;

    /// This side's private key, read from `private_key_file` now; errors start with the key
    /// (`gateway.private_key_file: /tmp: is a directory`).
    fn private_key(&self) -> Result<crate::keys::PrivateKey, ConfigError> {
        let field = format!("{}.private_key_file", Self::TABLE);
        load_private_key_field(&field, &self.shared().private_key_file)
    }

    /// The socket options of the TCP hop (`hop_transport = "tcp"`): `hop_tcp`, with buffers
    /// sized from the allocation when not set (send: this side's sending direction, receive:
    /// the other).
    fn hop_tcp_tuning(&self) -> TcpOptions {
        hop_tcp_tuning(&self.shared().hop_tcp, self.hop_link())
    }

    /// The STP connection parameters: the engine's defaults for the hop's address family,
    /// sized from the allocation when it is known ([`crate::sizing`]), with the `stp` table
    /// applied on top.
    fn stp_config(&self) -> Result<stp::Config, ConfigError> {
        let defaults = crate::sizing::hop_stp_defaults(self.hop_ipv6());
        let base = match self.hop_link() {
            Some(l) => l.stp_config(defaults),
            None => defaults,
        };
        apply_stp(&self.shared().stp, base).map_err(|e| e.prefixed(Self::TABLE))
    }

    /// The STP hop's workers: `workers`, else at a gateway the cores available and at a
    /// terminal 1.
    fn hop_workers(&self) -> usize {
        match self.shared().workers {
            Some(n) => n as usize,
            None if Self::TABLE == "gateway" => {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            }
            None => 1,
        }
    }
}

/// Most hop workers a side may have (`workers`).
pub(crate) const MAX_WORKERS: u32 = 1024;

/// The terminal: accepts client TCP and carries it over STP to the gateway.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TerminalConfig {
    /// SOCKS5 listener (default none). At least one of the three listeners must be set.
    #[serde(default)]
    pub socks_listen: Option<SocketAddr>,
    /// SOCKS5 users; empty means no authentication (default empty).
    #[serde(default)]
    pub socks_users: Vec<SocksUser>,
    /// SOCKS5 fast open: answer success at once and carry the client's first bytes with the
    /// destination, saving a satellite round trip per connection; a failed connect then
    /// resets the client instead of returning a SOCKS5 error code (default true).
    #[serde(default = "default_true")]
    pub socks_fast_open: bool,
    /// HTTP CONNECT proxy listener (default none).
    #[serde(default)]
    pub http_connect_listen: Option<SocketAddr>,
    /// Transparent (Linux TPROXY) listener (default none); see `deploy/nftables-tproxy.nft`.
    #[serde(default)]
    pub tproxy_listen: Option<SocketAddr>,
    /// Transparent mode: what happens to QUIC (UDP 443) from the LAN: `"pass"` (to the
    /// satellite link as it is), `"block"` (dropped: browsers fall back to TCP after their
    /// QUIC timeout) or `"reject"` (ICMP port unreachable: they fall back at once); default
    /// `"pass"`; `docs/quic.md`.
    #[serde(default)]
    pub quic: crate::quic_policy::QuicPolicy,
    /// The gateway's address, `host:port` (`[v6addr]:port` for an IPv6 literal): UDP with
    /// `hop_transport = "stp"`, TCP with `"tcp"`. Required.
    pub gateway: String,
    /// The gateway's static public key, 64 hex digits. Required.
    pub gateway_public_key: String,
    /// Further public keys of the same gateway (a key rotation): when the gateway leaves
    /// handshakes to `gateway_public_key` unanswered, the terminal tries these in order, as
    /// it fails over between gateways, without resetting connections (default none; STP hop
    /// only; `docs/gateway.md`, "Rotating the gateway's key").
    #[serde(default)]
    pub gateway_public_keys: Vec<String>,
    /// Gateways to fail over to, in order, when the one in use stops answering (STP hop
    /// only; default none; `docs/scaling.md`).
    #[serde(default)]
    pub backup_gateways: Vec<BackupGateway>,
    /// STP hop: the tunnel session is rekeyed (a new handshake, seamless for the streams)
    /// after this many seconds of use (default 120; at least 10; `docs/tunnel.md`).
    #[serde(default = "default_rekey_after_s")]
    pub rekey_after_s: u64,
    /// ... or after this many datagrams sealed and opened on it (default 4294967296; at
    /// least 1000).
    #[serde(default = "default_rekey_after_messages")]
    pub rekey_after_messages: u64,
    /// The settings both sides take, in the same table.
    #[serde(skip)]
    pub shared: SharedConfig,
}

/// How the satellite hop carries connections (`hop_transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HopTransport {
    /// STP over the Noise-encrypted UDP tunnel (default).
    #[default]
    Stp,
    /// Split TCP: one Noise-encrypted kernel TCP connection per client connection.
    Tcp,
    /// Gateway only: both at once, UDP and TCP on the same `listen` address and port.
    Both,
}

impl HopTransport {
    /// Whether this side runs the STP hop.
    pub fn stp(self) -> bool {
        matches!(self, HopTransport::Stp | HopTransport::Both)
    }
    /// Whether this side runs the TCP hop.
    pub fn tcp(self) -> bool {
        matches!(self, HopTransport::Tcp | HopTransport::Both)
    }
}

/// The TCP hop's socket options: `options`, with buffers not set there sized to 2 × the
/// bandwidth-delay product of their direction when the allocation is known.
fn hop_tcp_tuning(options: &TcpOptions, link: Option<crate::sizing::HopLink>) -> TcpOptions {
    let two_bdp = |rate: u64, rtt_ms: u32| {
        let b = u128::from(rate) * u128::from(rtt_ms) / 8000 * 2;
        b.clamp(4096, 1 << 30) as u32
    };
    TcpOptions {
        congestion: options.congestion.clone(),
        send_buffer_bytes: options
            .send_buffer_bytes
            .or(link.map(|l| two_bdp(l.send_rate_bps, l.rtt_ms))),
        recv_buffer_bytes: options
            .recv_buffer_bytes
            .or(link.map(|l| two_bdp(l.recv_rate_bps, l.rtt_ms))),
        nodelay: options.nodelay,
        max_pacing_rate_bps: options
            .max_pacing_rate_bps
            .or(link.map(|l| crate::sizing::tcp_payload_rate_bps(l.send_rate_bps))),
    }
}

/// Largest `max_pacing_rate_bps`: `SO_MAX_PACING_RATE` as a 32-bit count of bytes per second.
pub(crate) const MAX_PACING_RATE_BPS: u64 = (u32::MAX as u64 - 1) * 8;

fn default_idle_timeout_s() -> u32 {
    300
}
fn default_connect_timeout_s() -> u32 {
    30
}
fn default_shutdown_timeout_s() -> u32 {
    30
}
/// Largest `shutdown_timeout_s` accepted (one hour).
pub(crate) const MAX_SHUTDOWN_TIMEOUT_S: u32 = 3600;

fn check_shutdown_timeout(s: u32) -> Result<(), ConfigError> {
    if s > MAX_SHUTDOWN_TIMEOUT_S {
        return Err(bad(
            "shutdown_timeout_s",
            format!("must be from 0 to {MAX_SHUTDOWN_TIMEOUT_S}"),
        ));
    }
    Ok(())
}

/// A terminal file: its one table, read as `T` ([`TerminalConfig`], then [`SharedConfig`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TerminalFile<T> {
    terminal: T,
}

fn default_rekey_after_s() -> u64 {
    120
}

fn default_rekey_after_messages() -> u64 {
    1 << 32
}

impl TerminalConfig {
    /// When the STP hop's tunnel rekeys (validated by [`Self::validate`]).
    pub(crate) fn rekey(&self) -> crate::hop::RekeyConfig {
        crate::hop::RekeyConfig {
            after: std::time::Duration::from_secs(self.rekey_after_s),
            after_messages: self.rekey_after_messages,
            ..crate::hop::RekeyConfig::default()
        }
    }

    /// Checks every field; the error names the first bad one (`terminal.<field>`).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_inner().map_err(|e| e.prefixed("terminal"))
    }

    fn validate_inner(&self) -> Result<(), ConfigError> {
        if self.socks_listen.is_none()
            && self.http_connect_listen.is_none()
            && self.tproxy_listen.is_none()
        {
            return Err(bad(
                "socks_listen",
                "no listener configured: set socks_listen, http_connect_listen or tproxy_listen",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, u) in self.socks_users.iter().enumerate() {
            if u.user.is_empty() || u.user.len() > 255 {
                return Err(bad(
                    format!("socks_users[{i}].user"),
                    "must be from 1 to 255 bytes",
                ));
            }
            if u.password.is_empty() || u.password.len() > 255 {
                return Err(bad(
                    format!("socks_users[{i}].password"),
                    "must be from 1 to 255 bytes",
                ));
            }
            if !seen.insert(u.user.as_str()) {
                return Err(bad(
                    format!("socks_users[{i}].user"),
                    format!("duplicate user {:?}", u.user),
                ));
            }
        }
        if self.quic != crate::quic_policy::QuicPolicy::Pass && self.tproxy_listen.is_none() {
            return Err(bad(
                "quic",
                format!(
                    "\"{}\" acts on traffic the terminal routes in transparent mode: set \
                     tproxy_listen, or leave quic at \"pass\"",
                    self.quic.as_str()
                ),
            ));
        }
        if !self.socks_users.is_empty() && self.socks_listen.is_none() {
            return Err(bad("socks_users", "set without socks_listen"));
        }
        check_host_port(&self.gateway).map_err(|r| bad("gateway", r))?;
        PublicKey::from_hex(&self.gateway_public_key)
            .map_err(|e| bad("gateway_public_key", e.to_string()))?;
        for (i, k) in self.gateway_public_keys.iter().enumerate() {
            PublicKey::from_hex(k)
                .map_err(|e| bad(format!("gateway_public_keys[{i}]"), e.to_string()))?;
        }
        if !self.gateway_public_keys.is_empty() && self.shared.hop_transport.tcp() {
            return Err(bad(
                "gateway_public_keys",
                "several gateway keys need hop_transport = \"stp\"",
            ));
        }
        self.shared.validate()?;
        if self.shared.hop_transport == HopTransport::Both {
            return Err(bad(
                "hop_transport",
                "\"both\" is for a gateway; a terminal uses \"stp\" or \"tcp\"",
            ));
        }
        for (i, b) in self.backup_gateways.iter().enumerate() {
            check_host_port(&b.address)
                .map_err(|r| bad(format!("backup_gateways[{i}].address"), r))?;
            if let Some(k) = &b.public_key {
                PublicKey::from_hex(k)
                    .map_err(|e| bad(format!("backup_gateways[{i}].public_key"), e.to_string()))?;
            }
        }
        if self.rekey_after_s < 10 {
            return Err(bad(
                "rekey_after_s",
                format!("{} s: at least 10 (default 120)", self.rekey_after_s),
            ));
        }
        if self.rekey_after_messages < 1000 {
            return Err(bad(
                "rekey_after_messages",
                format!(
                    "{}: at least 1000 (default 4294967296)",
                    self.rekey_after_messages
                ),
            ));
        }
        if !self.backup_gateways.is_empty() && self.shared.hop_transport.tcp() {
            return Err(bad(
                "backup_gateways",
                "failover needs hop_transport = \"stp\"",
            ));
        }
        Ok(())
    }

    /// `gateway_public_keys`, parsed (validated by [`Self::validate`]).
    pub(crate) fn further_gateway_keys(&self) -> Result<Vec<PublicKey>, ConfigError> {
        self.gateway_public_keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                PublicKey::from_hex(k).map_err(|e| ConfigError::Invalid {
                    field: format!("terminal.gateway_public_keys[{i}]"),
                    reason: e.to_string(),
                })
            })
            .collect()
    }

    /// The backup gateways' addresses (unresolved) and keys, in order (validated by
    /// [`Self::validate`]).
    pub(crate) fn backup_gateways(&self) -> Result<Vec<(String, PublicKey)>, ConfigError> {
        let primary = self.gateway_public_key()?;
        self.backup_gateways
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let key = match &b.public_key {
                    Some(k) => PublicKey::from_hex(k).map_err(|e| {
                        bad(
                            format!("terminal.backup_gateways[{i}].public_key"),
                            e.to_string(),
                        )
                    })?,
                    None => primary,
                };
                Ok((b.address.clone(), key))
            })
            .collect()
    }

    /// The gateway's public key (validated by [`Self::validate`]).
    pub(crate) fn gateway_public_key(&self) -> Result<PublicKey, ConfigError> {
        PublicKey::from_hex(&self.gateway_public_key)
            .map_err(|e| bad("terminal.gateway_public_key", e.to_string()))
    }
}

impl SideConfig for TerminalConfig {
    const TABLE: &'static str = "terminal";
    const RELOADABLE: &'static [&'static str] = &["log_level"];
    fn shared(&self) -> &SharedConfig {
        &self.shared
    }
    /// Sends up, receives down.
    fn hop_link(&self) -> Option<crate::sizing::HopLink> {
        let s = &self.shared;
        Some(crate::sizing::HopLink {
            send_rate_bps: s.up_rate_bps?,
            recv_rate_bps: s.down_rate_bps?,
            rtt_ms: s.rtt_ms?,
        })
    }
    /// The gateway's address family; a host name may resolve to IPv6.
    fn hop_ipv6(&self) -> bool {
        !self
            .gateway
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.is_ipv4())
    }
}

// ---------------------------------------------------------------------------------------------
// Gateway

/// Socket options of TCP connections: the gateway's outbound ones (`[gateway.tcp]`) and the
/// split-TCP hop's (`[terminal.hop_tcp]`, `[gateway.hop_tcp]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpOptions {
    /// Linux congestion control (`TCP_CONGESTION`), e.g. "cubic", "bbr" (default: the
    /// system's). It must be available in the kernel, which is checked at connect time.
    #[serde(default)]
    pub congestion: Option<String>,
    /// `SO_SNDBUF`, bytes (default: the kernel's autotuning).
    #[serde(default)]
    pub send_buffer_bytes: Option<u32>,
    /// `SO_RCVBUF`, bytes (default: the kernel's autotuning).
    #[serde(default)]
    pub recv_buffer_bytes: Option<u32>,
    /// `TCP_NODELAY` (default true: the relay already coalesces what it writes).
    #[serde(default = "default_true")]
    pub nodelay: bool,
    /// `SO_MAX_PACING_RATE`, bit/s of TCP payload: the kernel paces the socket's segments at
    /// no more than this (and paces at all, whatever the congestion control). Default: none
    /// for `[gateway.tcp]`; for `hop_tcp`, the payload share of this side's sending allocation
    /// when it is configured, so a large window leaves as a smooth stream at the allocated rate
    /// instead of a burst into the satellite modem's queue.
    #[serde(default)]
    pub max_pacing_rate_bps: Option<u64>,
}

fn default_true() -> bool {
    true
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            congestion: None,
            send_buffer_bytes: None,
            recv_buffer_bytes: None,
            nodelay: true,
            max_pacing_rate_bps: None,
        }
    }
}

impl TcpOptions {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(cc) = &self.congestion {
            // The kernel's TCP_CA_NAME_MAX is 16 including the terminating NUL.
            if cc.is_empty()
                || cc.len() > 15
                || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(bad(
                    "congestion",
                    "must be a kernel congestion control name (1 to 15 of [A-Za-z0-9_])",
                ));
            }
        }
        for (v, name) in [
            (self.send_buffer_bytes, "send_buffer_bytes"),
            (self.recv_buffer_bytes, "recv_buffer_bytes"),
        ] {
            if matches!(v, Some(b) if !(4096..=1 << 30).contains(&b)) {
                return Err(bad(name, "must be from 4096 to 1073741824"));
            }
        }
        if matches!(self.max_pacing_rate_bps, Some(r) if !(8000..=MAX_PACING_RATE_BPS).contains(&r))
        {
            return Err(bad(
                "max_pacing_rate_bps",
                "must be from 8000 (1 kB/s) to 34359738360 (the kernel's 32-bit bytes/s)",
            ));
        }
        Ok(())
    }
}

/// The gateway: accepts terminals on one UDP socket and connects to destinations over TCP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct GatewayConfig {
    /// Address terminals reach: UDP for the STP hop, TCP (same address and port) for the
    /// TCP hop. Required.
    pub listen: SocketAddr,
    /// During a rotation of the gateway's key: the next private key file; terminals may
    /// address either key (default none; `docs/gateway.md`, "Rotating the gateway's key").
    #[serde(default)]
    pub next_private_key_file: Option<PathBuf>,
    /// Public keys (64 hex digits) of the terminals allowed in (default empty).
    #[serde(default)]
    pub allowed_terminals: Vec<String>,
    /// A file of further allowed keys, one per line, `#` starts a comment (default none).
    /// At least one of `allowed_terminals` and `allowed_terminals_file` must be set.
    #[serde(default)]
    pub allowed_terminals_file: Option<PathBuf>,
    /// Destination policy, the `[gateway.policy]` table.
    #[serde(default)]
    pub policy: crate::gateway::policy::PolicyConfig,
    /// Outbound TCP socket options.
    #[serde(default)]
    pub tcp: TcpOptions,
    /// Connect to destinations from the client's own address (IP_TRANSPARENT; needs
    /// CAP_NET_ADMIN and routing set up for the return traffic) (default false).
    #[serde(default)]
    pub source_transparent: bool,
    /// The settings both sides take, in the same table.
    #[serde(skip)]
    pub shared: SharedConfig,
}

/// A gateway file: its one table, read as `T` ([`GatewayConfig`], then [`SharedConfig`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayFile<T> {
    gateway: T,
}

impl GatewayConfig {
    /// The key of a rotation in progress, read from `next_private_key_file` (`None`: none);
    /// errors name the field and the file, in the words of [`io_words`].
    pub(crate) fn next_private_key(&self) -> Result<Option<crate::keys::PrivateKey>, ConfigError> {
        self.next_private_key_file
            .as_deref()
            .map(|f| load_private_key_field("gateway.next_private_key_file", f))
            .transpose()
    }

    /// Checks every field; the error names the first bad one (`gateway.<field>`). The
    /// allowed-terminals file is not read here (see [`Self::allowed_terminal_keys`]).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_inner().map_err(|e| e.prefixed("gateway"))
    }

    fn validate_inner(&self) -> Result<(), ConfigError> {
        if self.listen.port() == 0 {
            return Err(bad("listen", "port must not be 0"));
        }
        if self.allowed_terminals.is_empty() && self.allowed_terminals_file.is_none() {
            return Err(bad(
                "allowed_terminals",
                "empty and no allowed_terminals_file: no terminal could connect",
            ));
        }
        if self.allowed_terminals.len() > MAX_ALLOWED_TERMINALS {
            return Err(bad(
                "allowed_terminals",
                format!("more than {MAX_ALLOWED_TERMINALS} keys"),
            ));
        }
        for (i, k) in self.allowed_terminals.iter().enumerate() {
            PublicKey::from_hex(k)
                .map_err(|e| bad(format!("allowed_terminals[{i}]"), e.to_string()))?;
        }
        if let Some(p) = &self.next_private_key_file {
            check_path(p, "next_private_key_file")?;
            if *p == self.shared.private_key_file {
                return Err(bad(
                    "next_private_key_file",
                    "the same file as private_key_file: a rotation needs a new key",
                ));
            }
        }
        if let Some(p) = &self.allowed_terminals_file {
            check_path(p, "allowed_terminals_file")?;
        }
        self.build_policy(Vec::new())?;
        self.tcp.validate().map_err(|e| e.prefixed("tcp"))?;
        self.shared.validate()
    }

    /// The policy the gateway enforces, `[gateway.policy]` with `own_addresses` denied unless
    /// allowed; errors name the entry as `policy.allow[i]` / `policy.deny[i]`.
    pub(crate) fn build_policy(
        &self,
        own_addresses: Vec<IpAddr>,
    ) -> Result<crate::gateway::policy::Policy, ConfigError> {
        use crate::gateway::policy::{Policy, PolicyConfig, PolicyError};
        Policy::new(PolicyConfig {
            own_addresses,
            ..self.policy.clone()
        })
        .map_err(|e| match e {
            PolicyError::BadRule {
                field,
                index,
                entry,
                reason,
            } => bad(
                format!("policy.{field}[{index}]"),
                format!("{entry:?}: {reason}"),
            ),
        })
    }

    /// Every allowed terminal key: the inline list, then the file's (read now), duplicates
    /// removed. Errors name the field, or the file and line.
    pub(crate) fn allowed_terminal_keys(&self) -> Result<Vec<PublicKey>, ConfigError> {
        let mut keys = Vec::new();
        for (i, k) in self.allowed_terminals.iter().enumerate() {
            keys.push(
                PublicKey::from_hex(k)
                    .map_err(|e| bad(format!("gateway.allowed_terminals[{i}]"), e.to_string()))?,
            );
        }
        if let Some(path) = &self.allowed_terminals_file {
            keys.extend(
                load_allowed_terminals_file(path)
                    .map_err(|e| ConfigError::referenced("gateway.allowed_terminals_file", e))?,
            );
        }
        keys.sort();
        keys.dedup();
        if keys.len() > MAX_ALLOWED_TERMINALS {
            return Err(bad(
                "gateway.allowed_terminals",
                format!("more than {MAX_ALLOWED_TERMINALS} keys in all"),
            ));
        }
        Ok(keys)
    }
}

impl SideConfig for GatewayConfig {
    const TABLE: &'static str = "gateway";
    const RELOADABLE: &'static [&'static str] = &[
        "log_level",
        "policy",
        "allowed_terminals",
        "allowed_terminals_file",
        "private_key_file",
        "next_private_key_file",
    ];
    fn shared(&self) -> &SharedConfig {
        &self.shared
    }
    /// Sends down, receives up.
    fn hop_link(&self) -> Option<crate::sizing::HopLink> {
        let s = &self.shared;
        Some(crate::sizing::HopLink {
            send_rate_bps: s.down_rate_bps?,
            recv_rate_bps: s.up_rate_bps?,
            rtt_ms: s.rtt_ms?,
        })
    }
    fn hop_ipv6(&self) -> bool {
        self.listen.is_ipv6()
    }
}

/// Parses an allowed-terminals list: one hex key per line; blank lines and everything after
/// `#` are ignored. Errors give the 1-based line.
pub(crate) fn parse_allowed_terminals(text: &str) -> Result<Vec<PublicKey>, ConfigError> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        if keys.len() >= MAX_ALLOWED_TERMINALS {
            return Err(bad(
                format!("line {}", i + 1),
                format!("more than {MAX_ALLOWED_TERMINALS} keys"),
            ));
        }
        keys.push(
            PublicKey::from_hex(content)
                .map_err(|e| bad(format!("line {}", i + 1), e.to_string()))?,
        );
    }
    Ok(keys)
}

/// Reads and parses an allowed-terminals file; errors name the file and line.
pub(crate) fn load_allowed_terminals_file(path: &Path) -> Result<Vec<PublicKey>, ConfigError> {
    let text = read_config_file(path)?;
    parse_allowed_terminals(&text).map_err(|e| e.in_file(path))
}

// ---------------------------------------------------------------------------------------------
// STP options and limits

/// The `stp` table of either side: overrides of [`stp::Config`] in the engine's own TOML schema
/// ([`stp::options`]), the same as a scenario's `[flow.stp]`. Field names and units are the
/// engine's; rates take units (`"5Mbps"`), buffer sizes sizes (`"4MiB"`).
pub(crate) type StpOptions = stp::ConfigOptions;

/// `options` applied to `base`; errors name the field as `stp.<key>`.
fn apply_stp(options: &StpOptions, base: stp::Config) -> Result<stp::Config, ConfigError> {
    options
        .apply(base)
        .map_err(|e| bad(format!("stp.{}", e.field), e.reason))
}

/// The smallest `limits.read_ahead_bytes`: four of the relay's largest reads.
const READ_AHEAD_MIN_BYTES: u64 = 256 << 10;

/// Resource limits of one side.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most relayed connections of one terminal at once (default 1024). On a terminal it
    /// bounds the terminal's own connections.
    #[serde(default = "default_max_connections_per_terminal")]
    pub max_connections_per_terminal: u32,
    /// Most relayed connections at once, all terminals together (default 10000).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Most bytes held in relay buffers at once; new connections are refused past it
    /// (default 512 MiB).
    #[serde(default = "default_memory_cap_bytes")]
    pub memory_cap_bytes: u64,
    /// Per-connection, per-direction relay buffer, bytes (default: computed by
    /// [`Limits::relay_buffer`] from the hop's rate and RTT).
    #[serde(default)]
    pub relay_buffer_bytes: Option<u64>,
    /// STP hop: most bytes the relays may have read from their TCP connections that STP has
    /// not yet sent, all connections together, shared fairly among those with bytes to send
    /// (default: 20 ms of the hop's send allocation, from 32 MiB to 256 MiB;
    /// `docs/scaling.md`, "The read-ahead bound"). Bytes in flight are outside it.
    #[serde(default)]
    pub read_ahead_bytes: Option<u64>,
}

/// A terminal may serve a household or a ship's or an aircraft's users: browsers open dozens of
/// connections per tab. The gateway's protection against one terminal taking everything.
fn default_max_connections_per_terminal() -> u32 {
    16_384
}
/// As many idle connections as the default memory cap admits (131,072 × 4 KiB = 512 MiB); the
/// open-file limit binds first on most hosts, and a descriptor shortage is refused cleanly.
fn default_max_connections() -> u32 {
    131_072
}
fn default_memory_cap_bytes() -> u64 {
    512 << 20
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections_per_terminal: default_max_connections_per_terminal(),
            max_connections: default_max_connections(),
            memory_cap_bytes: default_memory_cap_bytes(),
            relay_buffer_bytes: None,
            read_ahead_bytes: None,
        }
    }
}

impl Limits {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(bad("max_connections", "must be positive"));
        }
        if self.max_connections_per_terminal == 0 {
            return Err(bad("max_connections_per_terminal", "must be positive"));
        }
        if self.max_connections_per_terminal > self.max_connections {
            return Err(bad(
                "max_connections_per_terminal",
                "must not exceed max_connections",
            ));
        }
        if self.memory_cap_bytes < 1 << 20 {
            return Err(bad("memory_cap_bytes", "must be at least 1 MiB"));
        }
        if let Some(b) = self.relay_buffer_bytes {
            if !(4096..=1 << 30).contains(&b) {
                return Err(bad("relay_buffer_bytes", "must be from 4096 to 1073741824"));
            }
            if b > self.memory_cap_bytes {
                return Err(bad(
                    "relay_buffer_bytes",
                    "must not exceed memory_cap_bytes",
                ));
            }
        }
        if let Some(b) = self.read_ahead_bytes {
            if !(READ_AHEAD_MIN_BYTES..=1 << 30).contains(&b) {
                return Err(bad(
                    "read_ahead_bytes",
                    format!(
                        "{b}: must be from {READ_AHEAD_MIN_BYTES} (256 KiB) to 1073741824 \
                         (1 GiB); leave it out for 20 ms of the hop's rate, 32 MiB at least"
                    ),
                ));
            }
            if b > self.memory_cap_bytes {
                return Err(bad(
                    "read_ahead_bytes",
                    format!(
                        "{b}: must not exceed memory_cap_bytes ({})",
                        self.memory_cap_bytes
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Relay buffer per connection and direction, bytes: `relay_buffer_bytes` when set;
    /// otherwise 2.5 × the hop's bandwidth-delay product (`rate_bps` × `rtt_ms`), clamped to
    /// 64 KiB..=64 MiB; 4 MiB when the rate or RTT is unknown.
    ///
    /// Why more than one BDP: a single connection fills the hop only if the relay holds a full
    /// BDP in flight, and the seeds find buffering "on the order of bandwidth-delay products"
    /// necessary for full utilization. After a loss, STP keeps the lost data and everything
    /// sent after it until the STAT/USTAT round trip completes, and the fast TCP side keeps
    /// filling the buffer meanwhile, so one more BDP is needed to keep the pipe full through
    /// recovery; the extra half absorbs the rate mismatch between the TCP side and the hop.
    /// Past about 3 × BDP extra buffering only adds queueing delay, which the seeds warn can
    /// reach the propagation delay itself — hence 2–3 × BDP, and the 64 MiB ceiling.
    pub(crate) fn relay_buffer(&self, rate_bps: Option<u64>, rtt_ms: Option<u32>) -> u64 {
        if let Some(b) = self.relay_buffer_bytes {
            return b;
        }
        match (rate_bps, rtt_ms) {
            (Some(rate), Some(rtt)) if rate > 0 && rtt > 0 => {
                let bdp = u128::from(rate) * u128::from(rtt) / 8000;
                let buf = bdp * 5 / 2;
                let clamped = buf.clamp(
                    u128::from(RELAY_BUFFER_MIN_BYTES),
                    u128::from(RELAY_BUFFER_MAX_BYTES),
                );
                u64::try_from(clamped).unwrap_or(RELAY_BUFFER_MAX_BYTES)
            }
            _ => RELAY_BUFFER_DEFAULT_BYTES,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Loading and shared checks

/// Parses the text of a terminal file (`[terminal]` table) and validates it.
pub(crate) fn parse_terminal(text: &str) -> Result<TerminalConfig, ConfigError> {
    from_toml::<TerminalFile<KnownKeys<TerminalConfig, GatewayConfig>>>(text)?;
    let mut c = from_toml::<TerminalFile<TerminalConfig>>(text)?.terminal;
    c.shared = from_toml::<TerminalFile<SharedConfig>>(text)?.terminal;
    c.validate()?;
    Ok(c)
}

/// Parses the text of a gateway file (`[gateway]` table) and validates it.
pub(crate) fn parse_gateway(text: &str) -> Result<GatewayConfig, ConfigError> {
    from_toml::<GatewayFile<KnownKeys<GatewayConfig, TerminalConfig>>>(text)?;
    let mut c = from_toml::<GatewayFile<GatewayConfig>>(text)?.gateway;
    c.shared = from_toml::<GatewayFile<SharedConfig>>(text)?.gateway;
    c.validate()?;
    Ok(c)
}

/// The keys of a side's table (and its sub-tables, as `limits`, `stp`) whose values differ
/// between two texts of its configuration file, but those it reloads ([`SideConfig::RELOADABLE`]):
/// what a reload must say waits for a restart (`terminal.rtt_ms`).
pub fn changed_keys<C: SideConfig>(old: &str, new: &str) -> Vec<String> {
    let table = |text: &str| -> toml::Table {
        text.parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get(C::TABLE).and_then(|v| v.as_table()).cloned())
            .unwrap_or_default()
    };
    let (old, new) = (table(old), table(new));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !C::RELOADABLE.contains(&k.as_str()) && old.get(*k) != new.get(*k))
        .map(|k| format!("{}.{k}", C::TABLE))
        .collect()
}

/// `text` read as `T`; an error shows the line and says serde's words in a user's.
fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        ConfigError::Parse(stp::options::toml_error_in_words(
            text,
            &e.to_string(),
            e.message(),
            e.span(),
        ))
    })
}

/// Reads a side's table and refuses a key that neither the side (`C`) nor [`SharedConfig`]
/// takes, as serde's `deny_unknown_fields` would (which a side cannot use: its table is read
/// twice, once for each part, so each part must pass over the other's keys); a key of the other
/// side (`O`) is said to be the other side's.
struct KnownKeys<C, O>(std::marker::PhantomData<(C, O)>);

impl<'de, C, O> Deserialize<'de> for KnownKeys<C, O>
where
    C: SideConfig + serde::de::DeserializeOwned,
    O: SideConfig + serde::de::DeserializeOwned,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(KnownKeys(std::marker::PhantomData))
    }
}

impl<'de, C, O> serde::de::Visitor<'de> for KnownKeys<C, O>
where
    C: SideConfig + serde::de::DeserializeOwned,
    O: SideConfig + serde::de::DeserializeOwned,
{
    type Value = Self;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "the [{}] table", C::TABLE)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let known: Vec<&str> = [struct_fields::<C>(), struct_fields::<SharedConfig>()].concat();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<serde::de::IgnoredAny>()?;
            if !known.contains(&key.as_str()) {
                let other = struct_fields::<O>().contains(&key.as_str());
                return Err(serde::de::Error::custom(unknown_key(
                    &key,
                    &known,
                    other,
                    C::TABLE,
                    O::TABLE,
                )));
            }
        }
        Ok(self)
    }
}

/// The words for a key `key` that the table `side` does not take: the other side's key, or the
/// nearest known one and all of them (`unknown field `...`` first, as serde says it).
fn unknown_key(key: &str, known: &[&str], other: bool, side: &str, other_side: &str) -> String {
    if other {
        return format!(
            "unknown field `{key}`: it is a {other_side} setting (the [{other_side}] table of a \
             {other_side} file); a {side} does not take it"
        );
    }
    let near = known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min();
    let listed: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "unknown field `{key}`{}, expected one of {}",
        near.map_or(String::new(), |(_, k)| format!(" (did you mean `{k}`?)")),
        listed.join(", ")
    )
}

/// Levenshtein distance of two keys, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The keys a struct's derived `Deserialize` takes, as serde hands them to a deserializer's
/// `deserialize_struct` (skipped fields left out): asked of a deserializer that only records them.
fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    #[derive(Debug)]
    struct Fields(&'static [&'static str]);
    impl std::fmt::Display for Fields {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "fields {:?}", self.0)
        }
    }
    impl std::error::Error for Fields {}
    impl serde::de::Error for Fields {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Fields(&[])
        }
    }
    struct Probe;
    impl<'de> serde::Deserializer<'de> for Probe {
        type Error = Fields;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
            Err(Fields(&[]))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Fields> {
            Err(Fields(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(Fields(f)) => f,
        Ok(_) => &[],
    }
}

/// Reads, parses and validates a terminal file; errors name the file and the field. Relative
/// paths in it are made relative to its directory.
pub fn load_terminal(path: &Path) -> Result<TerminalConfig, ConfigError> {
    terminal_from_text(path, &read_config_file(path)?)
}

/// Parses and validates `text`, the terminal file at `path` as [`read_config_file`] read it
/// (one read: what is checked is what runs); errors name the file and the field. Relative
/// paths in it are made relative to the file's directory.
pub fn terminal_from_text(path: &Path, text: &str) -> Result<TerminalConfig, ConfigError> {
    let mut c = parse_terminal(text).map_err(|e| e.in_file(path))?;
    c.shared.private_key_file = relative_to_file(path, &c.shared.private_key_file);
    Ok(c)
}

/// Reads, parses and validates a gateway file; errors name the file and the field. Relative
/// paths in it are made relative to its directory.
pub fn load_gateway(path: &Path) -> Result<GatewayConfig, ConfigError> {
    gateway_from_text(path, &read_config_file(path)?)
}

/// As [`terminal_from_text`], for a gateway file.
pub fn gateway_from_text(path: &Path, text: &str) -> Result<GatewayConfig, ConfigError> {
    let mut c = parse_gateway(text).map_err(|e| e.in_file(path))?;
    c.shared.private_key_file = relative_to_file(path, &c.shared.private_key_file);
    c.allowed_terminals_file = c.allowed_terminals_file.map(|f| relative_to_file(path, &f));
    c.next_private_key_file = c.next_private_key_file.map(|f| relative_to_file(path, &f));
    Ok(c)
}

/// A configuration file's text (at most 1 MiB); errors name the file.
pub fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let io = |error| ConfigError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::InFile {
            path: path.to_path_buf(),
            source: Box::new(ConfigError::Parse(format!(
                "larger than {MAX_FILE_BYTES} bytes"
            ))),
        });
    }
    Ok(text)
}

fn check_common(
    up_rate_bps: Option<u64>,
    down_rate_bps: Option<u64>,
    rtt_ms: Option<u32>,
    idle_timeout_s: u32,
    connect_timeout_s: u32,
) -> Result<(), ConfigError> {
    for (v, name) in [
        (up_rate_bps, "up_rate_bps"),
        (down_rate_bps, "down_rate_bps"),
    ] {
        if matches!(v, Some(r) if r < 1000) {
            return Err(bad(name, "must be at least 1000 bit/s"));
        }
    }
    if matches!(rtt_ms, Some(r) if r == 0 || r > 60_000) {
        return Err(bad("rtt_ms", "must be from 1 to 60000"));
    }
    // The allocation needs all three; some without the others would silently fall back to
    // slow start and default buffers.
    let set = [
        ("up_rate_bps", up_rate_bps.is_some()),
        ("down_rate_bps", down_rate_bps.is_some()),
        ("rtt_ms", rtt_ms.is_some()),
    ];
    if set.iter().any(|(_, s)| *s) {
        if let Some((missing, _)) = set.iter().find(|(_, s)| !*s) {
            let given: Vec<&str> = set.iter().filter(|(_, s)| *s).map(|(n, _)| *n).collect();
            return Err(bad(
                *missing,
                format!(
                    "missing: the hop's allocation needs up_rate_bps, down_rate_bps and rtt_ms \
                     together (only {} given)",
                    given.join(" and ")
                ),
            ));
        }
    }
    if idle_timeout_s == 0 {
        return Err(bad("idle_timeout_s", "must be positive"));
    }
    if connect_timeout_s == 0 || connect_timeout_s > 3600 {
        return Err(bad("connect_timeout_s", "must be from 1 to 3600"));
    }
    Ok(())
}

/// A rate in bit/s written as a number (`5000000`) or with a unit as on the command line
/// (`"5Mbps"`, `"512kbps"`, `"5 MB/s"` = 40 Mbit/s): `linkmodel::units`, whose errors say what
/// is accepted.
fn rate_bps<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    linkmodel::units::serde::opt_rate_bps(d)
}

/// A duration in ms written as a number (`600`) or with a unit (`"600ms"`, `"0.6s"`), at most
/// `u32::MAX` ms.
fn duration_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match linkmodel::units::serde::opt_duration_ms(d)? {
        None => Ok(None),
        Some(ms) => u32::try_from(ms).map(Some).map_err(|_| {
            serde::de::Error::custom(format!("{ms} ms is out of range (at most 49 days)"))
        }),
    }
}

fn check_path(p: &Path, field: &str) -> Result<(), ConfigError> {
    if p.as_os_str().is_empty() {
        return Err(bad(field, "must not be empty"));
    }
    Ok(())
}

/// Checks `host:port` or `[v6addr]:port`; the port must be non-zero.
fn check_host_port(s: &str) -> Result<(), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected host:port"))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("{s:?}: port must be from 1 to 65535")),
    }
    if let Some(inner) = host.strip_prefix('[') {
        let v6 = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{s:?}: unclosed '['"))?;
        return v6
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("{s:?}: not an IPv6 address in brackets"));
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Ok(());
    }
    if host.contains(':') {
        return Err(format!(
            "{s:?}: write an IPv6 address in brackets, [addr]:port"
        ));
    }
    crate::gateway::policy::check_hostname(host).map_err(|r| format!("{s:?}: {r}"))
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const KEY_B: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    fn terminal_text(extra: &str) -> String {
        format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:1080\"\ngateway = \"gw.example.net:4433\"\n\
             gateway_public_key = \"{KEY_A}\"\nprivate_key_file = \"/etc/satstp/terminal.key\"\n{extra}"
        )
    }

    #[test]
    fn backup_gateways_are_checked_and_default_to_the_gateways_key() {
        let t = parse_terminal(&terminal_text(&format!(
            "[[terminal.backup_gateways]]\naddress = \"gw2.example.net:4433\"\n\
             [[terminal.backup_gateways]]\naddress = \"192.0.2.9:4433\"\npublic_key = \"{KEY_B}\"\n"
        )))
        .unwrap();
        let b = t.backup_gateways().unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].1, t.gateway_public_key().unwrap());
        assert_eq!(b[1].1, PublicKey::from_hex(KEY_B).unwrap());
        let e = parse_terminal(&terminal_text(
            "[[terminal.backup_gateways]]\naddress = \"no-port\"\n",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("terminal.backup_gateways[0].address"),
            "{e}"
        );
        let e = parse_terminal(&terminal_text(
            "hop_transport = \"tcp\"\n[[terminal.backup_gateways]]\naddress = \"a:1\"\n",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("backup_gateways"), "{e}");
    }

    #[test]
    fn rekey_and_rotation_keys_are_read_and_checked() {
        let t = parse_terminal(&terminal_text("")).unwrap();
        assert_eq!(t.rekey().after, std::time::Duration::from_secs(120));
        let t = parse_terminal(&terminal_text(&format!(
            "rekey_after_s = 30\nrekey_after_messages = 5000\ngateway_public_keys = [\"{KEY_B}\"]\n"
        )))
        .unwrap();
        assert_eq!(
            (t.rekey().after.as_secs(), t.rekey().after_messages),
            (30, 5000)
        );
        assert_eq!(t.further_gateway_keys().unwrap().len(), 1);
        for (extra, field) in [
            ("rekey_after_s = 5\n", "terminal.rekey_after_s"),
            (
                "rekey_after_messages = 10\n",
                "terminal.rekey_after_messages",
            ),
            (
                "gateway_public_keys = [\"nope\"]\n",
                "terminal.gateway_public_keys[0]",
            ),
        ] {
            let e = parse_terminal(&terminal_text(extra)).unwrap_err();
            assert_eq!(e.field(), Some(field), "{e}");
        }
        let g = parse_gateway(&gateway_text(
            "next_private_key_file = \"/etc/satstp/gw-next.key\"\n",
        ))
        .unwrap();
        assert!(g.next_private_key_file.is_some());
        let e = parse_gateway(&gateway_text(
            "next_private_key_file = \"/etc/satstp/gw.key\"\n",
        ))
        .unwrap_err();
        assert_eq!(e.field(), Some("gateway.next_private_key_file"), "{e}");
    }

    #[test]
    fn workers_default_per_side_and_are_checked() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            parse_gateway(&gateway_text("")).unwrap().hop_workers(),
            cores
        );
        assert_eq!(parse_terminal(&terminal_text("")).unwrap().hop_workers(), 1);
        let g = parse_gateway(&gateway_text("workers = 3\n")).unwrap();
        assert_eq!(g.hop_workers(), 3);
        let t = parse_terminal(&terminal_text("workers = 2\n")).unwrap();
        assert_eq!(t.hop_workers(), 2);
        for bad in ["workers = 0\n", "workers = 1025\n"] {
            let e = parse_gateway(&gateway_text(bad)).unwrap_err();
            assert_eq!(e.field(), Some("gateway.workers"), "{e}");
            assert!(e.to_string().contains("1 to 1024"), "{e}");
            let e = parse_terminal(&terminal_text(bad)).unwrap_err();
            assert_eq!(e.field(), Some("terminal.workers"), "{e}");
        }
    }

    #[test]
    fn tunnel_cipher_is_read_and_checked() {
        use crate::tunnel::{Cipher, CipherChoice};
        let g = parse_gateway(&gateway_text("")).unwrap();
        assert_eq!(g.shared.tunnel_cipher().unwrap(), CipherChoice::Auto);
        let t = parse_terminal(&terminal_text("tunnel_cipher = \"aes-256-gcm\"\n")).unwrap();
        assert_eq!(
            t.shared.tunnel_cipher().unwrap(),
            CipherChoice::Only(Cipher::Aes256Gcm)
        );
        let g = parse_gateway(&gateway_text("tunnel_cipher = \"chacha20-poly1305\"\n")).unwrap();
        assert_eq!(
            g.shared.tunnel_cipher().unwrap(),
            CipherChoice::Only(Cipher::ChaCha20Poly1305)
        );
        let e = parse_gateway(&gateway_text("tunnel_cipher = \"aes-128\"\n")).unwrap_err();
        assert_eq!(e.field(), Some("gateway.tunnel_cipher"), "{e}");
        assert!(
            e.to_string().contains("\"auto\", \"chacha20-poly1305\""),
            "{e}"
        );
        let e = parse_terminal(&terminal_text("tunnel_cipher = \"rot13\"\n")).unwrap_err();
        assert_eq!(e.field(), Some("terminal.tunnel_cipher"), "{e}");
    }

    fn gateway_text(extra: &str) -> String {
        format!(
            "[gateway]\nlisten = \"0.0.0.0:4433\"\nprivate_key_file = \"/etc/satstp/gw.key\"\n\
             allowed_terminals = [\"{KEY_B}\"]\n{extra}"
        )
    }

    fn field_of(r: Result<impl std::fmt::Debug, ConfigError>) -> String {
        match r {
            Err(e) => e
                .field()
                .map(str::to_owned)
                .unwrap_or_else(|| e.to_string()),
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn example_files_parse() {
        let text = include_str!("../../../deploy/terminal.toml");
        // The shipped placeholder gateway key is refused, naming the field, until replaced.
        match parse_terminal(text) {
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("gateway_public_key") && e.contains("placeholder"),
                    "{e}"
                );
            }
            Ok(_) => panic!("deploy/terminal.toml: the placeholder key was accepted"),
        }
        let t = parse_terminal(&text.replace(&"0".repeat(64), &"2".repeat(64)));
        let t = match t {
            Ok(t) => t,
            Err(e) => panic!("deploy/terminal.toml: {e}"),
        };
        assert!(t.socks_listen.is_some());
        t.stp_config().unwrap();
        let g = parse_gateway(include_str!("../../../deploy/gateway.toml"));
        let g = match g {
            Ok(g) => g,
            Err(e) => panic!("deploy/gateway.toml: {e}"),
        };
        assert!(!g.allowed_terminals.is_empty() || g.allowed_terminals_file.is_some());
        g.stp_config().unwrap();
        // The examples give the hop's allocation: both sides start from it, each at its own
        // sending direction's rate.
        let allocated = |c: stp::Config| match c.congestion {
            stp::CongestionMode::Allocated { rate_bps, .. } => rate_bps,
            other => panic!("expected the allocation controller, got {other:?}"),
        };
        let (tr, gr) = (
            allocated(t.stp_config().unwrap()),
            allocated(g.stp_config().unwrap()),
        );
        assert!(tr < t.shared.up_rate_bps.unwrap() && tr > t.shared.up_rate_bps.unwrap() * 9 / 10);
        assert!(
            gr < g.shared.down_rate_bps.unwrap() && gr > g.shared.down_rate_bps.unwrap() * 9 / 10
        );
    }

    #[test]
    fn explicit_congestion_overrides_the_allocation() {
        let t = parse_terminal(&terminal_text(
            "up_rate_bps = 1000000\ndown_rate_bps = 8000000\nrtt_ms = 600\n[terminal.stp]\ncongestion = \"window\"\n",
        ))
        .unwrap();
        assert_eq!(
            t.stp_config().unwrap().congestion,
            stp::CongestionMode::Window
        );
        let e = parse_terminal(&terminal_text(
            "up_rate_bps = 1000000\ndown_rate_bps = 8000000\n",
        ))
        .unwrap_err();
        assert_eq!(e.field(), Some("terminal.rtt_ms"), "{e}");
        assert!(
            e.to_string()
                .contains("only up_rate_bps and down_rate_bps given"),
            "{e}"
        );
        let e =
            parse_gateway(&gateway_text("down_rate_bps = \"50Mbps\"\nrtt_ms = 600\n")).unwrap_err();
        assert_eq!(e.field(), Some("gateway.up_rate_bps"), "{e}");
    }

    #[test]
    fn rates_take_units_as_on_the_command_line() {
        let t = parse_terminal(&terminal_text(
            "up_rate_bps = \"5Mbps\"\ndown_rate_bps = \"1.5Mb/s\"\nrtt_ms = 600\n",
        ))
        .unwrap();
        assert_eq!(
            (t.shared.up_rate_bps, t.shared.down_rate_bps),
            (Some(5_000_000), Some(1_500_000))
        );
        let t = parse_terminal(&terminal_text(
            "up_rate_bps = 5000000\ndown_rate_bps = \"512kbps\"\nrtt_ms = 600\n",
        ))
        .unwrap();
        assert_eq!(
            (t.shared.up_rate_bps, t.shared.down_rate_bps),
            (Some(5_000_000), Some(512_000))
        );
        let e = parse_terminal(&terminal_text(
            "up_rate_bps = \"5 furlongs\"\ndown_rate_bps = 1\nrtt_ms = 1\n",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("up_rate_bps"), "{e}");
        assert!(e.to_string().contains("unknown unit 'furlongs'"), "{e}");
        // Bytes are bytes (a capital B), and the RTT takes a unit too.
        let t = parse_terminal(&terminal_text(
            "up_rate_bps = \"64 kB/s\"\ndown_rate_bps = \"5MBps\"\nrtt_ms = \"0.6s\"\n",
        ))
        .unwrap();
        assert_eq!(
            (
                t.shared.up_rate_bps,
                t.shared.down_rate_bps,
                t.shared.rtt_ms
            ),
            (Some(512_000), Some(40_000_000), Some(600))
        );
        for (text, says) in [
            (
                "up_rate_bps = -5\ndown_rate_bps = 1\nrtt_ms = 1\n",
                "-5 is negative",
            ),
            (
                "up_rate_bps = \"5mbps\"\ndown_rate_bps = 1\nrtt_ms = 1\n",
                "ambiguous",
            ),
            (
                "up_rate_bps = 1\ndown_rate_bps = 1\nrtt_ms = \"600\"\n",
                "has no unit",
            ),
        ] {
            let e = parse_terminal(&terminal_text(text))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("enum") && !e.contains("u32"), "{text}: {e}");
        }
    }

    #[test]
    fn minimal_files_get_documented_defaults() {
        let t = parse_terminal(&terminal_text("")).unwrap();
        assert_eq!(t.shared.idle_timeout_s, 300);
        assert_eq!(t.shared.connect_timeout_s, 30);
        assert_eq!(t.shared.shutdown_timeout_s, 30);
        assert_eq!(t.shared.limits, Limits::default());
        assert_eq!(t.shared.limits.max_connections_per_terminal, 16_384);
        assert_eq!(t.shared.limits.max_connections, 131_072);
        assert_eq!(t.shared.limits.memory_cap_bytes, 512 << 20);
        // gw.example.net may resolve to IPv6: datagrams sized for it.
        assert_eq!(
            t.stp_config().unwrap(),
            crate::sizing::hop_stp_defaults(true)
        );
        assert_eq!(t.gateway_public_key().unwrap().to_hex(), KEY_A);
        let g = parse_gateway(&gateway_text("")).unwrap();
        assert!(!g.source_transparent);
        assert!(g.tcp.nodelay);
        assert!(!g.policy.allow_private);
        assert_eq!(g.allowed_terminal_keys().unwrap().len(), 1);
    }

    #[test]
    fn unknown_field_is_named() {
        let e = parse_terminal(&terminal_text("socks_listn = \"127.0.0.1:1\"")).unwrap_err();
        assert!(e.to_string().contains("socks_listn"), "{e}");
        let e = parse_gateway(&gateway_text("[gateway.limits]\nmax_conns = 3")).unwrap_err();
        assert!(e.to_string().contains("max_conns"), "{e}");
        let e = parse_gateway(&gateway_text("[gateway.stp]\npolls = 3")).unwrap_err();
        assert!(e.to_string().contains("polls"), "{e}");
    }

    /// The side's table is read in two parts (its own keys, then [`SharedConfig`]'s), and still
    /// a key neither takes is refused with its line, the keys accepted or the nearest one; a key
    /// of the other side is said to be the other side's.
    #[test]
    fn unknown_keys_are_refused_in_either_part_and_the_other_sides_are_named() {
        let shown = |e: ConfigError| e.to_string();
        // In the shared part: a misspelt shared key, with the nearest one.
        let e = shown(parse_terminal(&terminal_text("idle_timout_s = 3\n")).unwrap_err());
        assert!(e.contains("unknown field `idle_timout_s`"), "{e}");
        assert!(e.contains("did you mean `idle_timeout_s`?"), "{e}");
        assert!(e.contains("line 6") && e.contains("^^^^^^^^^^^^^"), "{e}");
        let e = shown(parse_gateway(&gateway_text("rtt = 600\n")).unwrap_err());
        assert!(e.contains("unknown field `rtt`"), "{e}");
        assert!(e.contains("`rtt_ms`") && e.contains("`listen`"), "{e}");
        // In each side's own part, with every accepted key listed.
        let e = shown(parse_terminal(&terminal_text("gateway_key = \"x\"\n")).unwrap_err());
        assert!(e.contains("unknown field `gateway_key`"), "{e}");
        assert!(
            e.contains("`gateway_public_key`") && e.contains("`private_key_file`"),
            "{e}"
        );
        let e = shown(parse_gateway(&gateway_text("allowed = []\n")).unwrap_err());
        assert!(e.contains("unknown field `allowed`"), "{e}");
        assert!(e.contains("`allowed_terminals`"), "{e}");
        // The other side's keys.
        let e = shown(parse_terminal(&terminal_text("listen = \"0.0.0.0:1\"\n")).unwrap_err());
        assert!(e.contains("`listen`: it is a gateway setting"), "{e}");
        let e =
            shown(parse_gateway(&gateway_text("socks_listen = \"127.0.0.1:1\"\n")).unwrap_err());
        assert!(
            e.contains("`socks_listen`: it is a terminal setting"),
            "{e}"
        );
        // Outside the table and in its sub-tables as before.
        let e = shown(parse_terminal(&format!("{}[gateway]\n", terminal_text(""))).unwrap_err());
        assert!(
            e.contains("unknown field `gateway`, expected `terminal`"),
            "{e}"
        );
        let e = shown(
            parse_terminal(&terminal_text("[terminal.hop_tcp]\nnodelai = true")).unwrap_err(),
        );
        assert!(e.contains("unknown field `nodelai`"), "{e}");
        // Both parts are read: values of each land where they belong.
        let t = parse_terminal(&terminal_text(
            "idle_timeout_s = 7\nsocks_fast_open = false\n",
        ))
        .unwrap();
        assert_eq!((t.shared.idle_timeout_s, t.socks_fast_open), (7, false));
    }

    #[test]
    fn keys_changed_between_two_texts_but_the_reloadable_ones() {
        let old = gateway_text("rtt_ms = 600\nup_rate_bps = 1000000\ndown_rate_bps = 1000000\n");
        let new = old
            .replace("600", "700")
            .replace("0.0.0.0:4433", "0.0.0.0:4434")
            + "log_level = \"debug\"\n[gateway.policy]\nallow_private = true\n";
        assert_eq!(
            changed_keys::<GatewayConfig>(&old, &new),
            ["gateway.listen", "gateway.rtt_ms"]
        );
        assert_eq!(
            changed_keys::<TerminalConfig>(
                &terminal_text(""),
                &terminal_text("[terminal.limits]\nmax_connections = 5")
            ),
            ["terminal.limits"]
        );
    }

    #[test]
    fn missing_required_field_is_named() {
        let e = parse_terminal("[terminal]\nsocks_listen = \"127.0.0.1:1080\"\n").unwrap_err();
        assert!(e.to_string().contains("gateway"), "{e}");
        let e = parse_gateway("[gateway]\nprivate_key_file = \"k\"\n").unwrap_err();
        assert!(e.to_string().contains("listen"), "{e}");
    }

    #[test]
    fn bad_hex_key_is_named() {
        let text = terminal_text("").replace(KEY_A, "abcd");
        assert_eq!(
            field_of(parse_terminal(&text)),
            "terminal.gateway_public_key"
        );
        let text = terminal_text("").replace(KEY_A, &KEY_A.replace('0', "g"));
        let e = parse_terminal(&text).unwrap_err();
        assert!(
            e.to_string().starts_with("terminal.gateway_public_key:"),
            "{e}"
        );
        let text = gateway_text("").replace(KEY_B, "xyz");
        assert_eq!(
            field_of(parse_gateway(&text)),
            "gateway.allowed_terminals[0]"
        );
    }

    #[test]
    fn zero_rates_are_named() {
        assert_eq!(
            field_of(parse_terminal(&terminal_text("up_rate_bps = 0"))),
            "terminal.up_rate_bps"
        );
        assert_eq!(
            field_of(parse_gateway(&gateway_text("down_rate_bps = 0"))),
            "gateway.down_rate_bps"
        );
        assert_eq!(
            field_of(parse_gateway(&gateway_text("rtt_ms = 0"))),
            "gateway.rtt_ms"
        );
        assert_eq!(
            field_of(parse_terminal(&terminal_text(
                "[terminal.stp]\ncongestion = \"rate\"\nrate_bps = 0"
            ))),
            "terminal.stp.rate_bps"
        );
        assert_eq!(
            field_of(parse_terminal(&terminal_text(
                "[terminal.stp]\nreverse_rate_bps = 0"
            ))),
            "terminal.stp.reverse_rate_bps"
        );
    }

    #[test]
    fn stp_table_is_the_engine_schema_and_old_spellings_are_refused() {
        let e = parse_terminal(&terminal_text("[terminal.stp]\ninitial_window = \"huge\""))
            .unwrap_err();
        assert!(e.to_string().contains("initial_window"), "{e}");
        let t = parse_terminal(&terminal_text(
            "[terminal.stp]\nrecv_buffer_bytes = \"8MiB\"\nreverse_rate_bps = \"64kbps\"",
        ))
        .unwrap();
        let c = t.stp_config().unwrap();
        assert_eq!(c.recv_buffer_bytes, 8 << 20);
        assert_eq!(c.reverse_rate_bps, Some(64_000));
        let e = parse_gateway(&gateway_text("[gateway.stp]\nmax_datagram = 1200")).unwrap_err();
        assert!(
            e.to_string()
                .contains("`max_datagram` is now spelled `max_datagram_bytes`"),
            "{e}"
        );
    }

    #[test]
    fn read_ahead_bytes_is_validated_and_named() {
        let t = parse_terminal(&terminal_text(
            "[terminal.limits]\nread_ahead_bytes = 4194304",
        ))
        .unwrap();
        assert_eq!(t.shared.limits.read_ahead_bytes, Some(4 << 20));
        assert_eq!(Limits::default().read_ahead_bytes, None);
        for (extra, says) in [
            (
                "read_ahead_bytes = 1000",
                "from 262144 (256 KiB) to 1073741824",
            ),
            (
                "read_ahead_bytes = 2147483648",
                "from 262144 (256 KiB) to 1073741824",
            ),
            (
                "memory_cap_bytes = 2097152\nread_ahead_bytes = 4194304",
                "must not exceed memory_cap_bytes (2097152)",
            ),
        ] {
            let e =
                parse_gateway(&gateway_text(&format!("[gateway.limits]\n{extra}"))).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("gateway.limits.read_ahead_bytes"), "{text}");
            assert!(text.contains(says), "{extra}: {text}");
        }
    }

    #[test]
    fn other_errors_are_named() {
        let cases: &[(&str, &str)] = &[
            ("idle_timeout_s = 0", "terminal.idle_timeout_s"),
            ("connect_timeout_s = 0", "terminal.connect_timeout_s"),
            ("shutdown_timeout_s = 3601", "terminal.shutdown_timeout_s"),
            (
                "[terminal.limits]\nmax_connections = 0",
                "terminal.limits.max_connections",
            ),
            (
                "[terminal.limits]\nmax_connections = 10\nmax_connections_per_terminal = 11",
                "terminal.limits.max_connections_per_terminal",
            ),
            (
                "[terminal.limits]\nrelay_buffer_bytes = 1",
                "terminal.limits.relay_buffer_bytes",
            ),
            (
                "[terminal.stp]\npolls_per_rtt = 0",
                "terminal.stp.polls_per_rtt",
            ),
            (
                "[terminal.stp]\ncongestion = \"rate\"",
                "terminal.stp.rate_bps",
            ),
            (
                "[[terminal.socks_users]]\nuser = \"\"\npassword = \"p\"",
                "terminal.socks_users[0].user",
            ),
        ];
        for (extra, field) in cases {
            assert_eq!(
                &field_of(parse_terminal(&terminal_text(extra))),
                field,
                "{extra}"
            );
        }
        let text = terminal_text("").replace("gw.example.net:4433", "gw.example.net");
        assert_eq!(field_of(parse_terminal(&text)), "terminal.gateway");
        let text = terminal_text("").replace("socks_listen = \"127.0.0.1:1080\"\n", "");
        assert_eq!(field_of(parse_terminal(&text)), "terminal.socks_listen");

        let gcases: &[(&str, &str)] = &[
            (
                "[gateway.policy]\ndeny = [\"10.0.0.0/33\"]",
                "gateway.policy.deny[0]",
            ),
            (
                "[gateway.policy]\nallow = [\"bad name!\"]",
                "gateway.policy.allow[0]",
            ),
            (
                "[gateway.tcp]\ncongestion = \"no such thing\"",
                "gateway.tcp.congestion",
            ),
            (
                "[gateway.tcp]\nsend_buffer_bytes = 10",
                "gateway.tcp.send_buffer_bytes",
            ),
            (
                "[gateway.policy]\ndeny = [\"*.example.com\", \"*.\"]",
                "gateway.policy.deny[1]",
            ),
        ];
        for (extra, field) in gcases {
            assert_eq!(
                &field_of(parse_gateway(&gateway_text(extra))),
                field,
                "{extra}"
            );
        }
        let text = gateway_text("").replace(&format!("allowed_terminals = [\"{KEY_B}\"]"), "");
        assert_eq!(field_of(parse_gateway(&text)), "gateway.allowed_terminals");
    }

    #[test]
    fn stp_options_apply() {
        let o = StpOptions {
            congestion: Some(stp::options::CongestionName::Rate),
            rate_bps: Some(1_500_000),
            initial_window: Some(stp::InitialWindow::FourKss),
            polls_per_rtt: Some(5),
            reverse_rate_bps: Some(64_000),
            max_datagram_bytes: Some(1200),
            ..StpOptions::default()
        };
        let c = apply_stp(&o, stp::Config::default()).unwrap();
        assert_eq!(
            c.congestion,
            stp::CongestionMode::Rate {
                rate_bps: 1_500_000
            }
        );
        assert_eq!(c.initial_window, stp::InitialWindow::FourKss);
        assert_eq!(c.polls_per_rtt, 5);
        assert_eq!(c.reverse_rate_bps, Some(64_000));
        assert_eq!(c.max_datagram_bytes, 1200);
        assert_eq!(
            c.recv_buffer_bytes,
            stp::Config::default().recv_buffer_bytes
        );
        let o = StpOptions {
            max_datagram_bytes: Some(10),
            ..StpOptions::default()
        };
        let e = apply_stp(&o, stp::Config::default()).unwrap_err();
        assert_eq!(e.field(), Some("stp.max_datagram_bytes"));
    }

    #[test]
    fn relay_buffer_math() {
        let l = Limits::default();
        // 1.5 Mb/s × 532 ms = 99 750 bytes; × 2.5 = 249 375.
        assert_eq!(l.relay_buffer(Some(1_500_000), Some(532)), 249_375);
        // 100 Mb/s × 600 ms = 7.5 MB; × 2.5 = 18.75 MB.
        assert_eq!(l.relay_buffer(Some(100_000_000), Some(600)), 18_750_000);
        // Tiny BDP: clamped up to 64 KiB.
        assert_eq!(l.relay_buffer(Some(64_000), Some(20)), 64 << 10);
        // Huge BDP: clamped down to 64 MiB.
        assert_eq!(l.relay_buffer(Some(10_000_000_000), Some(600)), 64 << 20);
        assert_eq!(l.relay_buffer(Some(u64::MAX), Some(u32::MAX)), 64 << 20);
        // Unknown rate or RTT: 4 MiB.
        assert_eq!(l.relay_buffer(None, Some(600)), 4 << 20);
        assert_eq!(l.relay_buffer(Some(1_000_000), None), 4 << 20);
        // Explicit value wins.
        let l = Limits {
            relay_buffer_bytes: Some(123_456),
            ..Limits::default()
        };
        assert_eq!(l.relay_buffer(Some(1_500_000), Some(532)), 123_456);
        // The terminal sizes on its faster direction.
        let t = parse_terminal(&terminal_text(
            "up_rate_bps = 256000\ndown_rate_bps = 8000000\nrtt_ms = 600",
        ))
        .unwrap();
        assert_eq!(
            t.shared.relay_buffer_bytes(),
            8_000_000 * 600 / 8000 * 5 / 2
        );
    }

    #[test]
    fn allowed_terminals_file_format() {
        let text = format!("# terminals\n\n{KEY_A}  # office\n  {KEY_B}\n{KEY_A}\n");
        let keys = parse_allowed_terminals(&text).unwrap();
        assert_eq!(keys.len(), 3);
        let e = parse_allowed_terminals(&format!("{KEY_A}\nnot-a-key\n")).unwrap_err();
        assert_eq!(e.field(), Some("line 2"));

        let dir = std::env::temp_dir().join(format!("pep-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("allowed");
        std::fs::write(&path, &text).unwrap();
        let g = GatewayConfig {
            allowed_terminals_file: Some(path.clone()),
            ..parse_gateway(&gateway_text("")).unwrap()
        };
        assert_eq!(g.allowed_terminal_keys().unwrap().len(), 2);
        std::fs::write(&path, "zz\n").unwrap();
        let e = g.allowed_terminal_keys().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("allowed") && msg.contains("line 1"), "{msg}");
        let gw = dir.join("gateway.toml");
        std::fs::write(&gw, gateway_text("rtt_ms = 0")).unwrap();
        let msg = load_gateway(&gw).unwrap_err().to_string();
        assert!(
            msg.contains("gateway.toml") && msg.contains("gateway.rtt_ms"),
            "{msg}"
        );
        let msg = load_terminal(&dir.join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("missing.toml"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_are_relative_to_the_file_and_errors_name_the_key() {
        let dir = std::env::temp_dir().join(format!("pep-config-paths-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let (private, _) = crate::keys::generate_keypair().unwrap();
        std::fs::write(dir.join("keys/gw.key"), private.to_hex()).unwrap();
        std::fs::write(dir.join("terminals.allow"), format!("{KEY_A}\n")).unwrap();
        let gw = dir.join("gateway.toml");
        std::fs::write(
            &gw,
            "[gateway]\nlisten = \"0.0.0.0:4433\"\nprivate_key_file = \"keys/gw.key\"\n\
             allowed_terminals_file = \"terminals.allow\"\n",
        )
        .unwrap();
        // Loaded from elsewhere: the paths are the file's neighbours, not the working directory's.
        let g = load_gateway(&gw).unwrap();
        assert_eq!(g.shared.private_key_file, dir.join("keys/gw.key"));
        assert_eq!(g.allowed_terminals_file, Some(dir.join("terminals.allow")));
        assert_eq!(g.private_key().unwrap().to_hex(), private.to_hex());
        assert_eq!(g.allowed_terminal_keys().unwrap().len(), 1);
        // Absolute paths stay; errors about the files name the key, the file and the cause.
        let mut g = GatewayConfig {
            allowed_terminals_file: Some(dir.join("nope")),
            ..g
        };
        g.shared.private_key_file = PathBuf::from("/tmp");
        assert_eq!(
            g.private_key().unwrap_err().to_string(),
            "gateway.private_key_file: /tmp: is a directory"
        );
        let e = g.allowed_terminal_keys().unwrap_err();
        assert_eq!(e.field(), Some("gateway.allowed_terminals_file"));
        assert_eq!(
            e.to_string(),
            format!(
                "gateway.allowed_terminals_file: {}: no such file",
                dir.join("nope").display()
            )
        );
        let t = dir.join("t.toml");
        std::fs::write(
            &t,
            terminal_text("").replace("/etc/satstp/terminal.key", "none.key"),
        )
        .unwrap();
        let t = load_terminal(&t).unwrap();
        assert_eq!(t.shared.private_key_file, dir.join("none.key"));
        assert_eq!(
            t.private_key().unwrap_err().to_string(),
            format!(
                "terminal.private_key_file: {}: no such file",
                dir.join("none.key").display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_read_once_is_the_configuration_that_runs() {
        // The daemons read the file once and parse that text (kept for the reload's
        // comparison): an edit after the read is not half-applied.
        let dir = std::env::temp_dir().join(format!("pep-config-once-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let gw = dir.join("gateway.toml");
        let file = |listen: &str| {
            format!(
                "[gateway]\nlisten = \"{listen}\"\nprivate_key_file = \"gw.key\"\n\
                 allowed_terminals = [\"{KEY_A}\"]\n"
            )
        };
        std::fs::write(&gw, file("0.0.0.0:4433")).unwrap();
        let text = read_config_file(&gw).unwrap();
        std::fs::write(&gw, file("0.0.0.0:5555")).unwrap();
        let g = gateway_from_text(&gw, &text).unwrap();
        assert_eq!(g.listen, "0.0.0.0:4433".parse().unwrap());
        assert_eq!(g.shared.private_key_file, dir.join("gw.key"));
        assert_eq!(load_gateway(&gw).unwrap().listen.port(), 5555);
        // Errors name the file as load_* does.
        let e = gateway_from_text(&gw, "[gateway]\nlisten = 1\n").unwrap_err();
        assert!(e.to_string().contains("gateway.toml"), "{e}");
        let big = dir.join("big.toml");
        std::fs::write(&big, "#".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        let e = read_config_file(&big).unwrap_err().to_string();
        assert!(e.contains("big.toml") && e.contains("larger than"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
