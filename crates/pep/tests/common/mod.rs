//! Shared pieces of the gateway's end-to-end tests.
#![allow(dead_code)]

use linkem::{EmulatorConfig, EmulatorHandle, Profile, UdpEmulator};
use linkmodel::LinkConfig;
use pep::config::TcpOptions;
use pep::gateway::connect::ConnectOptions;
use pep::gateway::policy::{Policy, PolicyConfig};
use pep::hop::{Hop, HopConfig, HopStream, Security, StreamEvent};
use pep::keys::generate_keypair;
use pep::keys::{PrivateKey, PublicKey};
use pep::ops::OpsConfig;
use pep::socks::SocksAuth;
use pep::stack::{GatewayOptions, SocksListener, StpHop, TerminalHop, TerminalOptions};
use pep::tunnel::{Responder, ResponderConfig};
use rand_core::SeedableRng;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// The byte pattern and the FNV hash of the load-generation kit; the raw origin's `D n` answers
/// `pattern(0, n)`.
#[allow(unused_imports)]
pub use loadgen::pattern::{bytes as pattern, fnv};

/// Hop parameters for tests.
pub fn hop_config(seed: u64, relay_buffer_bytes: u32) -> HopConfig {
    HopConfig {
        endpoint: EndpointConfig::default(),
        relay_buffer_bytes,
        seed,
        send_rate_bps: None,
        rekey: Default::default(),
        cipher: Default::default(),
    }
}

/// Hop parameters sized from a link's allocation, as the daemons size them from their config
/// (`pep::sizing`).
pub fn hop_config_for(seed: u64, link: pep::sizing::HopLink) -> HopConfig {
    StpHop::sized(link, false, seed).hop_config(link.relay_buffer_bytes())
}

/// The two sides' views of a profile's allocation: (terminal, gateway).
pub fn profile_links(p: Profile) -> (pep::sizing::HopLink, pep::sizing::HopLink) {
    let (down, up, rtt_ns) = p.parameters();
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    (
        pep::sizing::HopLink {
            send_rate_bps: up,
            recv_rate_bps: down,
            rtt_ms,
        },
        pep::sizing::HopLink {
            send_rate_bps: down,
            recv_rate_bps: up,
            rtt_ms,
        },
    )
}

/// With a profile, an emulated link in front of `gateway`; returns it and the address the
/// terminal should use.
pub async fn link_to(
    gateway: SocketAddr,
    profile: Option<Profile>,
    seed: u64,
) -> (Option<EmulatorHandle>, SocketAddr) {
    match profile {
        Some(p) => {
            let (up, down) = p.links();
            let emu = emulate(gateway, up, down, seed).await;
            let addr = emu.local_addr();
            (Some(emu), addr)
        }
        None => (None, gateway),
    }
}

/// An emulated link with these directions in front of `gateway`.
pub async fn emulate(
    gateway: SocketAddr,
    up: LinkConfig,
    down: LinkConfig,
    seed: u64,
) -> EmulatorHandle {
    UdpEmulator::start(EmulatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        to: gateway,
        up,
        down,
        seed,
    })
    .await
    .unwrap()
}

/// A terminal hop on loopback talking to `gateway`.
pub async fn terminal_hop(
    local: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
    config: HopConfig,
) -> Hop {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    Hop::start(
        sock,
        Security::Terminal {
            local,
            gateway_key,
            gateway,
        },
        config,
    )
    .unwrap()
}

/// One request to an origin server: the word and the number of its first line ("D 1000\n" →
/// `"D"`, `Some(1000)`), and the connection, that line read.
pub struct Request {
    pub cmd: String,
    pub n: Option<usize>,
    pub conn: BufReader<TcpStream>,
}

/// Runs an origin server on `l`: `on_accept` sees each connection's peer as it is accepted, then
/// the connection's first line is read and `serve` answers the request, each in its own task.
pub fn spawn_origin<A, F, Fut>(l: TcpListener, mut on_accept: A, serve: F)
where
    A: FnMut(SocketAddr) + Send + 'static,
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        while let Ok((s, peer)) = l.accept().await {
            on_accept(peer);
            let serve = Arc::clone(&serve);
            tokio::spawn(async move {
                let mut conn = BufReader::new(s);
                let mut line = String::new();
                if conn.read_line(&mut line).await.is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let cmd = parts.next().unwrap_or("").to_owned();
                let n = parts.next().and_then(|n| n.parse::<usize>().ok());
                serve(Request { cmd, n, conn }).await;
            });
        }
    });
}

/// The kit origin's raw `D n` and `U n` exchanges, for test servers that add verbs of their own.
pub async fn download_or_upload(r: Request) {
    let numbers: Vec<u64> = r.n.map(|n| n as u64).into_iter().collect();
    let _ = loadgen::origin::serve_raw(r.conn, &r.cmd, &numbers).await;
}

/// The kit's origin on loopback (raw `D n`, `U n`, `E` and HTTP), serving until the test's
/// runtime ends.
pub async fn origin() -> SocketAddr {
    loadgen::origin::Origin::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
        .detach()
}

/// The SOCKS5 CONNECT exchange (the kit's client) on a connection to the proxy, to `host` (an
/// IP address or a name) and `port`: the stream and the reply code.
pub async fn socks_handshake_to(
    mut s: TcpStream,
    host: &str,
    port: u16,
) -> io::Result<(TcpStream, u8)> {
    let dest = loadgen::socks5::Dest::new(host, port);
    let code = loadgen::socks5::handshake(&mut s, &dest)
        .await
        .map_err(io::Error::other)?;
    Ok((s, code))
}

/// [`socks_handshake_to`] `dest`.
pub async fn socks_handshake(s: TcpStream, dest: SocketAddr) -> io::Result<(TcpStream, u8)> {
    socks_handshake_to(s, &dest.ip().to_string(), dest.port()).await
}

/// SOCKS5 CONNECT through `proxy` to `host:port` (an IP address or a name); returns the stream
/// and the reply code.
pub async fn socks_connect_to(proxy: SocketAddr, host: &str, port: u16) -> (TcpStream, u8) {
    let s = TcpStream::connect(proxy).await.unwrap();
    socks_handshake_to(s, host, port).await.unwrap()
}

/// SOCKS5 CONNECT to `dest`; returns the stream and the reply code.
pub async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> (TcpStream, u8) {
    let s = TcpStream::connect(proxy).await.unwrap();
    socks_handshake(s, dest).await.unwrap()
}

/// Reads `s` until an event other than data: what arrived, and that event (`None`: the hop is
/// gone).
pub async fn read_hop_stream(s: &mut HopStream) -> (Vec<u8>, Option<StreamEvent>) {
    let mut got = Vec::new();
    loop {
        match s.recv().await {
            Some(StreamEvent::Data(b)) => got.extend_from_slice(&b),
            other => return (got, other),
        }
    }
}

/// The gateway's policy: destinations in `allow` permitted, those in `deny` refused.
pub fn policy(allow: Vec<String>, deny: Vec<String>) -> Arc<Policy> {
    Arc::new(
        Policy::new(PolicyConfig {
            allow,
            deny,
            allow_private: false,
            own_addresses: vec![],
        })
        .unwrap(),
    )
}

/// The policy of most tests: loopback servers allowed, everything else denied.
pub fn loopback_policy() -> Arc<Policy> {
    policy(vec!["127.0.0.0/8".into()], vec![])
}

/// A gateway hop on `sock` with key `key` serving the `terminals`; `rng_seed` seeds its
/// responder's session indices.
pub fn gateway_hop(
    sock: UdpSocket,
    key: PrivateKey,
    terminals: impl IntoIterator<Item = PublicKey>,
    rng_seed: u64,
    config: HopConfig,
) -> Hop {
    let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(rng_seed));
    let responder = Responder::new(key, terminals, ResponderConfig::default(), rng).unwrap();
    Hop::start(
        sock,
        Security::Gateway {
            responder: Box::new(responder),
        },
        config,
    )
    .unwrap()
}

/// Relays every stream `hop` accepts under `policy`, as the gateway daemon does (connects time
/// out after 5 s), each in its own task. Takes the hop's `incoming`; the hop stays with the
/// caller, which can read its status.
pub fn relay_incoming(hop: &mut Hop, policy: Arc<Policy>) {
    let mut incoming = hop.take_incoming();
    let options = ConnectOptions::new(Duration::from_secs(5));
    tokio::spawn(async move {
        while let Some(stream) = incoming.recv().await {
            let policy = Arc::clone(&policy);
            tokio::spawn(async move {
                let _ = pep::gateway::serve::serve_stream(stream, &policy, &options).await;
            });
        }
    });
}

/// The STP hop of `config`, bound to loopback, for the stack API.
pub fn loopback_stp(config: &HopConfig) -> StpHop {
    StpHop {
        endpoint: config.endpoint.clone(),
        seed: config.seed,
        send_rate_bps: config.send_rate_bps,
        bind: Some("127.0.0.1:0".parse().unwrap()),
        capture: None,
        rekey: config.rekey,
        cipher: config.cipher,
        workers: test_workers(),
    }
}

/// Hop workers per side in the tests built on [`loopback_stp`]: `SATSTP_TEST_WORKERS`
/// (default 1), so the suites run again with several (`docs/scaling.md`, "Workers").
pub fn test_workers() -> usize {
    std::env::var("SATSTP_TEST_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A gateway on loopback over the STP hop of `config` (its responder seeded with 3) serving
/// `terminals` under `policy`, with limits `ops`, outbound options `tcp` and `/metrics` on
/// loopback.
pub async fn gateway_stack(
    key: PrivateKey,
    terminals: Vec<PublicKey>,
    config: HopConfig,
    policy: Arc<Policy>,
    ops: OpsConfig,
    tcp: TcpOptions,
) -> pep::Gateway {
    let mut o = GatewayOptions::new(
        key,
        terminals,
        "127.0.0.1:0".parse().unwrap(),
        loopback_stp(&config),
        config.relay_buffer_bytes,
        policy,
        Duration::from_secs(5),
    );
    o.responder_seed = 3;
    o.ops = ops;
    o.outbound_tcp = tcp;
    o.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    pep::Gateway::start(o).await.unwrap()
}

/// A terminal on loopback towards `gateway` over the STP hop of `config`, with a SOCKS5
/// listener (fast open or not), an HTTP CONNECT listener when `http_connect`, and limits `ops`.
pub async fn terminal_stack(
    key: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
    config: HopConfig,
    fast_open: bool,
    http_connect: bool,
    ops: OpsConfig,
) -> pep::Terminal {
    let mut o = TerminalOptions::new(
        key,
        gateway,
        gateway_key,
        TerminalHop::Stp(Box::new(loopback_stp(&config))),
        config.relay_buffer_bytes,
    );
    o.socks = Some(SocksListener {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: SocksAuth::None,
        fast_open,
    });
    if http_connect {
        o.http_connect = Some("127.0.0.1:0".parse().unwrap());
    }
    o.ops = ops;
    pep::Terminal::start(o).await.unwrap()
}

/// A terminal with a SOCKS5 listener and a gateway on loopback, optionally with an emulated link
/// (`(up, down)`) between them; the gateway allows `allow`. Both sides live as long as this.
pub struct Setup {
    pub socks: SocketAddr,
    pub emu: Option<EmulatorHandle>,
    pub gateway: pep::hop::HopMonitor,
    pub terminal: pep::hop::HopMonitor,
    pub stacks: (pep::Terminal, pep::Gateway),
}

pub async fn socks_pair(
    terminal: HopConfig,
    gateway: HopConfig,
    links: Option<(LinkConfig, LinkConfig)>,
    allow: Vec<String>,
) -> Setup {
    socks_pair_opts(terminal, gateway, links, allow, false).await
}

/// [`socks_pair`] with the terminal's SOCKS5 fast open on or off.
pub async fn socks_pair_opts(
    terminal: HopConfig,
    gateway: HopConfig,
    links: Option<(LinkConfig, LinkConfig)>,
    allow: Vec<String>,
    fast_open: bool,
) -> Setup {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let gw = gateway_stack(
        gk,
        vec![tp],
        gateway,
        policy(allow, vec![]),
        OpsConfig::unlimited(),
        TcpOptions::default(),
    )
    .await;
    let gw_addr = gw.hop_addr();
    let (emu, to) = match links {
        Some((up, down)) => {
            let emu = emulate(gw_addr, up, down, 4).await;
            let addr = emu.local_addr();
            (Some(emu), addr)
        }
        None => (None, gw_addr),
    };
    let term = terminal_stack(
        tk,
        gp,
        to,
        terminal,
        fast_open,
        false,
        OpsConfig::unlimited(),
    )
    .await;
    Setup {
        socks: term.socks_addr().unwrap(),
        emu,
        gateway: gw.monitor().unwrap(),
        terminal: term.monitor(),
        stacks: (term, gw),
    }
}

/// `GET path` over HTTP/1.1 from `addr` (a metrics endpoint): asserts a 200 and returns the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// Hop workers per side in the pair of [`pair`].
pub const WORKERS: usize = 2;

/// A gateway and a terminal of [`WORKERS`] workers each, and what the worker tests read of them.
pub struct Pair {
    pub socks: SocketAddr,
    pub gw_metrics: SocketAddr,
    pub terminal_key: PublicKey,
    pub term: pep::Terminal,
    pub gw: pep::Gateway,
}

/// A gateway and a terminal of [`WORKERS`] workers each on loopback, the gateway with limits
/// `ops` and `/metrics`; `gw` and `term` are the hops' parameters.
/// The pair most tests use: a 1 MiB relay buffer on both sides, seeds 2 and 1.
pub async fn default_pair(ops: OpsConfig) -> Pair {
    pair(hop_config(2, 1 << 20), hop_config(1, 1 << 20), ops).await
}

pub async fn pair(gw: HopConfig, term: HopConfig, ops: OpsConfig) -> Pair {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let mut stp = loopback_stp(&gw);
    stp.workers = WORKERS;
    let mut o = GatewayOptions::new(
        gk,
        vec![tp],
        "127.0.0.1:0".parse().unwrap(),
        stp,
        gw.relay_buffer_bytes,
        policy(vec!["127.0.0.0/8".into()], vec![]),
        Duration::from_secs(5),
    );
    o.ops = ops;
    o.outbound_tcp = TcpOptions::default();
    o.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let gateway = pep::Gateway::start(o).await.unwrap();
    let mut stp = loopback_stp(&term);
    stp.workers = WORKERS;
    let mut t = TerminalOptions::new(
        tk,
        gateway.hop_addr(),
        gp,
        TerminalHop::Stp(Box::new(stp)),
        term.relay_buffer_bytes,
    );
    t.socks = Some(SocksListener {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: SocksAuth::None,
        fast_open: false,
    });
    let terminal = pep::Terminal::start(t).await.unwrap();
    Pair {
        socks: terminal.socks_addr().unwrap(),
        gw_metrics: gateway.metrics_addr().unwrap(),
        terminal_key: tp,
        term: terminal,
        gw: gateway,
    }
}

/// Downloads `n` bytes from the origin through the terminal; true if they arrived whole.
pub async fn download(socks: SocketAddr, origin: SocketAddr, n: usize) -> bool {
    let (mut s, code) = socks_connect(socks, origin).await;
    if code != 0 {
        return false;
    }
    if s.write_all(format!("D {n}\n").as_bytes()).await.is_err() {
        return false;
    }
    let mut got = Vec::with_capacity(n);
    let ok = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got)).await;
    matches!(ok, Ok(Ok(_))) && got == pattern(0, n)
}

/// A SOCKS5 pair over `profile` (sized from it) or plain loopback, the gateway allowing
/// `allow`, the terminal's SOCKS5 fast open on or off.
pub async fn setup_opts(profile: Option<Profile>, allow: Vec<String>, fast_open: bool) -> Setup {
    // With a profile both sides are sized from its allocation, as the daemons do from their
    // configuration files.
    let (term, gw) = match profile.map(profile_links) {
        Some((t, g)) => (hop_config_for(1, t), hop_config_for(2, g)),
        None => (hop_config(1, 4 << 20), hop_config(2, 4 << 20)),
    };
    socks_pair_opts(term, gw, profile.map(|p| p.links()), allow, fast_open).await
}

/// Over the `geo` profile, reaching loopback, fast open on or off.
pub async fn geo_pair(fast_open: bool) -> Setup {
    setup_opts(Some(Profile::Geo), vec!["127.0.0.0/8".into()], fast_open).await
}

/// A loopback port nothing listens on (bound, then closed).
pub async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// The client's next read, within 30 s, is a reset: a refused connect after fast open.
pub async fn assert_reset(s: &mut TcpStream) {
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(
        r.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "a refused connect must reset the client"
    );
}

/// Asks the origin for 1000 pattern bytes over `s` and checks the whole answer.
pub async fn fetch_1000(s: &mut TcpStream) {
    s.write_all(b"D 1000\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == pattern(0, 1000));
}
