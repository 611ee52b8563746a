//! Relaying one client TCP connection across the hop, and the small protocol that rides at the
//! start of each STP stream (documented in `docs/gateway.md`):
//!
//! - terminal → gateway, first bytes of the stream (they ride on the BGN), the [`StreamHeader`]:
//!   a version byte, then the destination as `Target::encode` writes it; with version `0x02`
//!   the client's own address follows, in the same form (kind 1 or 4, address, port), so a
//!   gateway with source-address transparency can connect from it. Version `0x01` carries no
//!   client address; a gateway accepts both. Then the client's data.
//! - gateway → terminal, first byte: the outcome of the gateway's connect, as a SOCKS5 reply code
//!   (0 = connected, 2 = not allowed by policy, 3 = network unreachable, 4 = host unreachable or
//!   timed out, 5 = refused, 1 = other failure); then the server's data if connected.
//!
//! A new connection therefore costs exactly one satellite round trip before the client's first
//! byte reaches the server: the gateway connects while the BGN's answer is on its way back.

use crate::hop::{Hop, HopReader, HopStream, HopWriter, StreamEvent};
use crate::policy::Policy;
use crate::socks::{Reply, Target, TargetError};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Version byte of a stream header without the client's address.
pub const RELAY_VERSION: u8 = 1;
/// Version byte of a stream header that carries the client's address after the destination.
pub const RELAY_VERSION_CLIENT: u8 = 2;
/// Most header bytes a gateway waits for before giving up on a stream (the longest header is
/// 1 + 258 + 19 = 278 bytes: a 255-byte name and an IPv6 client address).
const MAX_HEADER: usize = 300;
const READ_BUF: usize = 64 * 1024;

/// The outcome the gateway reports for a connect.
pub fn reply_for(e: &io::Error) -> Reply {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Reply::ConnectionRefused,
        io::ErrorKind::TimedOut => Reply::HostUnreachable,
        io::ErrorKind::HostUnreachable => Reply::HostUnreachable,
        io::ErrorKind::NetworkUnreachable => Reply::NetworkUnreachable,
        _ => Reply::GeneralFailure,
    }
}

/// The first bytes of every stream, from the terminal: where to connect and, when the terminal
/// knows it, from whose address the connection came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    pub target: Target,
    /// The client's address as the terminal saw it (IPv4-mapped IPv6 addresses travel as IPv4).
    pub client: Option<SocketAddr>,
}

/// Why bytes cannot begin a stream header.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    #[error("unknown relay version {0}")]
    UnknownVersion(u8),
    #[error("bad destination in the stream header: {0}")]
    Target(TargetError),
    #[error("bad client address in the stream header: {0}")]
    Client(TargetError),
    #[error("the client address in the stream header is a name, not an IP address")]
    ClientNotAnAddress,
}

/// `addr` with an IPv4-mapped IPv6 address turned into IPv4 (a dual-stack socket reports IPv4
/// peers that way).
pub fn canonical_addr(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

impl StreamHeader {
    /// Appends the header's binary form: version `0x02` with a client address, `0x01` without.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self.client {
            Some(c) => {
                out.push(RELAY_VERSION_CLIENT);
                self.target.encode(out);
                Target::Ip(canonical_addr(c)).encode(out);
            }
            None => {
                out.push(RELAY_VERSION);
                self.target.encode(out);
            }
        }
    }

    /// Reads a header from the start of `buf`: `Ok(None)` while more bytes are needed, the
    /// header and its length once complete, an error as soon as `buf` cannot begin one.
    pub fn parse(buf: &[u8]) -> Result<Option<(StreamHeader, usize)>, HeaderError> {
        let Some((&version, rest)) = buf.split_first() else {
            return Ok(None);
        };
        if version != RELAY_VERSION && version != RELAY_VERSION_CLIENT {
            return Err(HeaderError::UnknownVersion(version));
        }
        let (target, n) = match Target::decode(rest) {
            Ok(t) => t,
            Err(TargetError::Truncated { .. }) => return Ok(None),
            Err(e) => return Err(HeaderError::Target(e)),
        };
        if version == RELAY_VERSION {
            return Ok(Some((
                StreamHeader {
                    target,
                    client: None,
                },
                1 + n,
            )));
        }
        let rest = rest.get(n..).unwrap_or_default();
        match Target::decode(rest) {
            Ok((Target::Ip(client), m)) => Ok(Some((
                StreamHeader {
                    target,
                    client: Some(canonical_addr(client)),
                },
                1 + n + m,
            ))),
            Ok((Target::Domain { .. }, _)) => Err(HeaderError::ClientNotAnAddress),
            Err(TargetError::Truncated { .. }) => Ok(None),
            Err(e) => Err(HeaderError::Client(e)),
        }
    }
}

/// Terminal side: opens a stream to `target` carrying `early` client bytes and, when known, the
/// client's address (`client`, for a gateway with source-address transparency), and waits for
/// the gateway's verdict. On success returns the stream (positioned after the status byte) and
/// any server bytes that came with it.
pub async fn open(
    hop: &Hop,
    target: &Target,
    early: &[u8],
    client: Option<SocketAddr>,
) -> Result<(HopStream, Vec<u8>), Reply> {
    let mut first = Vec::with_capacity(MAX_HEADER + early.len());
    StreamHeader {
        target: target.clone(),
        client,
    }
    .encode(&mut first);
    first.extend_from_slice(early);
    let mut stream = hop.open(first).await.map_err(|_| Reply::GeneralFailure)?;
    loop {
        match stream.recv().await {
            Some(StreamEvent::Data(b)) if !b.is_empty() => {
                let code = b[0];
                if code != 0 {
                    return Err(reply_from_code(code));
                }
                return Ok((stream, b[1..].to_vec()));
            }
            Some(StreamEvent::Data(_)) => continue,
            _ => return Err(Reply::GeneralFailure),
        }
    }
}

fn reply_from_code(c: u8) -> Reply {
    match c {
        2 => Reply::NotAllowed,
        3 => Reply::NetworkUnreachable,
        4 => Reply::HostUnreachable,
        5 => Reply::ConnectionRefused,
        _ => Reply::GeneralFailure,
    }
}

/// Relays bytes between a TCP connection and a hop stream until both directions have ended.
/// `pre_client` are server bytes already received (to write to the client first); EOF passes
/// each way as a half-close; a failed stream resets the TCP connection.
pub async fn splice(
    tcp: TcpStream,
    stream: HopStream,
    pre_client: Vec<u8>,
) -> io::Result<(u64, u64)> {
    let (rd, mut wr) = tcp.into_split();
    let (hw, hr) = stream.split();
    if !pre_client.is_empty() {
        wr.write_all(&pre_client).await?;
    }
    let up = tokio::spawn(tcp_to_hop(rd, hw));
    let down = hop_to_tcp(hr, wr, pre_client.len() as u64).await;
    let up = up.await.map_err(|e| io::Error::other(e.to_string()))??;
    Ok((up, down?))
}

async fn tcp_to_hop(mut rd: OwnedReadHalf, hw: HopWriter) -> io::Result<u64> {
    let mut buf = vec![0u8; READ_BUF];
    let mut total = 0u64;
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            hw.shutdown().await;
            return Ok(total);
        }
        hw.write(&buf[..n]).await.map_err(io::Error::other)?;
        total += n as u64;
    }
}

async fn hop_to_tcp(mut hr: HopReader, mut wr: OwnedWriteHalf, already: u64) -> io::Result<u64> {
    let mut total = already;
    loop {
        match hr.recv().await {
            Some(StreamEvent::Data(b)) => {
                wr.write_all(&b).await?;
                total += b.len() as u64;
            }
            Some(StreamEvent::Finished) => {
                wr.shutdown().await?;
                return Ok(total);
            }
            Some(StreamEvent::Failed(e)) => {
                return Err(io::Error::new(io::ErrorKind::ConnectionReset, e));
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "hop closed",
                ))
            }
        }
    }
}

/// How the gateway connects to destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// How long one connect attempt may take.
    pub connect_timeout: Duration,
    /// Connect from the client's own address (IP_TRANSPARENT; needs CAP_NET_ADMIN and return
    /// routing through this host). Used only when the stream header carries the client's
    /// address and the destination is of the same family; otherwise the gateway connects from
    /// its own address.
    pub source_transparent: bool,
}

impl ConnectOptions {
    /// Connects from the gateway's own address with `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> ConnectOptions {
        ConnectOptions {
            connect_timeout,
            source_transparent: false,
        }
    }
}

/// Whether a client's address can be the source of a connection to a server: loopback,
/// unspecified, multicast and link-local addresses cannot (a SOCKS client on the terminal's own
/// loopback, for one), so the gateway connects from its own address for them.
fn routable_source(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_link_local())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// Connects to `dest`, from `source`'s IP address (any port) when given.
async fn connect_from(dest: SocketAddr, source: Option<SocketAddr>) -> io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect(dest).await;
    };
    let sock = if dest.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    crate::tproxy::set_transparent(&socket2::SockRef::from(&sock), dest.is_ipv6())?;
    sock.bind(SocketAddr::new(source.ip(), 0)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot bind to the client's address {}: {e}", source.ip()),
        )
    })?;
    sock.connect(dest).await
}

/// Gateway side: reads the stream header, checks the policy, connects, reports the outcome,
/// then relays. Returns the bytes relayed (client → server, server → client).
pub async fn serve_stream(
    mut stream: HopStream,
    policy: &Policy,
    options: &ConnectOptions,
) -> io::Result<(u64, u64)> {
    // Gather the header (it normally arrives whole, with the BGN).
    let mut head: Vec<u8> = Vec::new();
    let (header, used) = loop {
        match StreamHeader::parse(&head) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => {
                stream.abort(1).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        if head.len() > MAX_HEADER {
            stream.abort(1).await;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream header too long",
            ));
        }
        match stream.recv().await {
            Some(StreamEvent::Data(b)) => head.extend_from_slice(&b),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended before its header",
                ))
            }
        }
    };
    let StreamHeader { target, client } = header;
    let source = client.filter(|c| options.source_transparent && routable_source(c.ip()));
    let early = head.split_off(used);
    let addrs: Vec<SocketAddr> = match &target {
        Target::Ip(a) => vec![*a],
        Target::Domain { host, port } => {
            match tokio::net::lookup_host((host.as_str(), *port)).await {
                Ok(it) => it.collect(),
                Err(_) => Vec::new(),
            }
        }
    };

    if addrs.is_empty() {
        let c = report(&stream, Reply::HostUnreachable).await;
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{target}: no address ({c:?})"),
        ));
    }
    let allowed: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| policy.check(a.ip()).is_ok())
        .collect();
    if allowed.is_empty() {
        report(&stream, Reply::NotAllowed).await;
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{target}: denied by policy"),
        ));
    }
    let mut last_err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
    let mut tcp = None;
    for a in &allowed {
        // Transparency only where the families match: an IPv4 client cannot be the source of
        // an IPv6 connection.
        let from = source.filter(|c| c.is_ipv4() == a.is_ipv4());
        match tokio::time::timeout(options.connect_timeout, connect_from(*a, from)).await {
            Ok(Ok(s)) => {
                tcp = Some(s);
                break;
            }
            Ok(Err(e)) => last_err = e,
            Err(_) => last_err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    let Some(mut tcp) = tcp else {
        report(&stream, reply_for(&last_err)).await;
        return Err(last_err);
    };
    let _ = tcp.set_nodelay(true);
    stream
        .write(&[Reply::Succeeded as u8])
        .await
        .map_err(io::Error::other)?;
    if !early.is_empty() {
        tcp.write_all(&early).await?;
    }
    splice(tcp, stream, Vec::new()).await
}

/// Tells the terminal why the connect failed, and ends the stream.
async fn report(stream: &HopStream, code: Reply) -> Reply {
    let _ = stream.write(&[code as u8]).await;
    stream.shutdown().await;
    code
}

/// Gateway: serves every stream the hop accepts, each in its own task, connecting from the
/// gateway's own address.
pub async fn serve(hop: Hop, policy: std::sync::Arc<Policy>, connect_timeout: Duration) {
    serve_with(hop, policy, ConnectOptions::new(connect_timeout)).await
}

/// Gateway: as [`serve`], connecting as `options` say.
pub async fn serve_with(mut hop: Hop, policy: std::sync::Arc<Policy>, options: ConnectOptions) {
    while let Some(stream) = hop.incoming.recv().await {
        let policy = std::sync::Arc::clone(&policy);
        tokio::spawn(async move {
            let _ = serve_stream(stream, &policy, &options).await;
        });
    }
}

/// Terminal: serves SOCKS5 clients on `listener`, each connection relayed across `hop`.
pub async fn serve_socks(
    listener: tokio::net::TcpListener,
    hop: std::sync::Arc<Hop>,
    auth: std::sync::Arc<crate::socks::SocksAuth>,
) {
    while let Ok((mut tcp, peer)) = listener.accept().await {
        let hop = std::sync::Arc::clone(&hop);
        let auth = std::sync::Arc::clone(&auth);
        tokio::spawn(async move {
            let Ok(target) = crate::socks::accept(&mut tcp, &auth).await else {
                return;
            };
            match open(&hop, &target, &[], Some(peer)).await {
                Ok((stream, pre)) => {
                    if tcp
                        .write_all(&crate::socks::reply(Reply::Succeeded, None))
                        .await
                        .is_ok()
                    {
                        let _ = splice(tcp, stream, pre).await;
                    }
                }
                Err(code) => {
                    let _ = tcp.write_all(&crate::socks::reply(code, None)).await;
                    let _ = tcp.shutdown().await;
                }
            }
        });
    }
}

/// Terminal: serves HTTP CONNECT clients on `listener`.
pub async fn serve_http_connect(listener: tokio::net::TcpListener, hop: std::sync::Arc<Hop>) {
    while let Ok((mut tcp, peer)) = listener.accept().await {
        let hop = std::sync::Arc::clone(&hop);
        tokio::spawn(async move {
            let Ok((target, early)) = crate::http_connect::accept(&mut tcp).await else {
                return;
            };
            match open(&hop, &target, &early, Some(peer)).await {
                Ok((stream, pre)) => {
                    if tcp.write_all(crate::http_connect::reply_ok()).await.is_ok() {
                        let _ = splice(tcp, stream, pre).await;
                    }
                }
                Err(code) => {
                    let status = match code {
                        Reply::NotAllowed => (403, "Forbidden"),
                        Reply::HostUnreachable => (504, "Gateway Timeout"),
                        _ => (502, "Bad Gateway"),
                    };
                    let _ = tcp
                        .write_all(&crate::http_connect::reply_status(status.0, status.1))
                        .await;
                    let _ = tcp.shutdown().await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(h: &StreamHeader) -> Vec<u8> {
        let mut b = Vec::new();
        h.encode(&mut b);
        b
    }

    #[test]
    fn header_without_client_is_version_1() {
        let h = StreamHeader {
            target: Target::Ip("198.51.100.7:443".parse().unwrap()),
            client: None,
        };
        let b = encoded(&h);
        assert_eq!(b, [1, 1, 198, 51, 100, 7, 1, 187]);
        assert_eq!(StreamHeader::parse(&b), Ok(Some((h, 8))));
    }

    #[test]
    fn header_with_client_round_trips_byte_by_byte() {
        for (target, client) in [
            (
                Target::Ip("[2001:db8::1]:80".parse().unwrap()),
                "[2001:db8:1::2]:40000",
            ),
            (
                Target::domain("example.com", 8080).unwrap(),
                "192.0.2.2:1234",
            ),
        ] {
            let h = StreamHeader {
                target,
                client: Some(client.parse().unwrap()),
            };
            let mut b = encoded(&h);
            assert_eq!(b[0], RELAY_VERSION_CLIENT);
            let len = b.len();
            for cut in 0..len {
                assert_eq!(StreamHeader::parse(&b[..cut]), Ok(None), "cut at {cut}");
            }
            b.extend_from_slice(b"GET /");
            assert_eq!(StreamHeader::parse(&b), Ok(Some((h, len))));
        }
    }

    #[test]
    fn mapped_client_address_travels_as_ipv4() {
        let h = StreamHeader {
            target: Target::Ip("203.0.113.2:80".parse().unwrap()),
            client: Some("[::ffff:192.0.2.2]:5555".parse().unwrap()),
        };
        let b = encoded(&h);
        let (got, _) = StreamHeader::parse(&b).unwrap().unwrap();
        assert_eq!(got.client, Some("192.0.2.2:5555".parse().unwrap()));
    }

    #[test]
    fn only_routable_client_addresses_become_sources() {
        for a in ["192.0.2.2", "10.1.2.3", "2001:db8::2", "fd00::1"] {
            assert!(routable_source(a.parse().unwrap()), "{a}");
        }
        for a in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(!routable_source(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn bad_headers_are_named() {
        assert_eq!(
            StreamHeader::parse(&[9, 1]),
            Err(HeaderError::UnknownVersion(9))
        );
        assert_eq!(
            StreamHeader::parse(&[1, 7, 0]),
            Err(HeaderError::Target(TargetError::UnknownKind(7)))
        );
        // Version 2 whose client address is a name.
        let mut b = vec![2];
        Target::Ip("203.0.113.2:80".parse().unwrap()).encode(&mut b);
        Target::domain("a.example", 1).unwrap().encode(&mut b);
        assert_eq!(
            StreamHeader::parse(&b),
            Err(HeaderError::ClientNotAnAddress)
        );
        let mut b = vec![2];
        Target::Ip("203.0.113.2:80".parse().unwrap()).encode(&mut b);
        b.push(5);
        assert_eq!(
            StreamHeader::parse(&b),
            Err(HeaderError::Client(TargetError::UnknownKind(5)))
        );
    }
}
