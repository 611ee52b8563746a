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

use crate::config::TcpOptions;
use crate::hop::{Hop, HopReader, HopStream, HopWriter, StreamEvent};
use crate::http_connect;
use crate::metrics::{AuthFailure, Side};
use crate::metrics::{CloseReason, ConnTrack, ConnectionState, RefusalReason};
use crate::ops::{Conn, Ops};
use crate::policy::Policy;
use crate::socks::{self, SocksAuth};
use crate::socks::{Reply, Target, TargetError};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Version byte of a stream header without the client's address.
pub const RELAY_VERSION: u8 = 1;
/// Version byte of a stream header that carries the client's address after the destination.
pub const RELAY_VERSION_CLIENT: u8 = 2;
/// Most header bytes a gateway waits for before giving up on a stream (the longest header is
/// 1 + 258 + 19 = 278 bytes: a 255-byte name and an IPv6 client address).
const MAX_HEADER: usize = 300;
const READ_BUF: usize = 64 * 1024;
/// A connection's first read buffer towards the hop; it doubles up to [`READ_BUF`] while reads
/// fill it, so an idle connection holds little.
const READ_BUF_MIN: usize = 4 * 1024;

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
                    // The gateway ended its side after the code; end ours so the connection
                    // closes at both hops instead of lingering.
                    stream.shutdown().await;
                    return Err(reply_from_code(code));
                }
                return Ok((stream, b[1..].to_vec()));
            }
            Some(StreamEvent::Data(_)) => continue,
            _ => {
                stream.abort(ABORT_TCP_FAILED).await;
                return Err(Reply::GeneralFailure);
            }
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

/// Abort code a relay sends across the hop when its TCP connection failed (reset by the peer,
/// or a read or write error); the relay at the other end then resets its own TCP connection.
pub const ABORT_TCP_FAILED: u16 = 3;

/// How a splice ended badly, and so which side must be told.
enum SpliceError {
    /// The TCP connection failed: the stream is aborted.
    Tcp(io::Error),
    /// The stream failed (reset by the peer, timed out, or the hop is gone): the TCP connection
    /// is reset.
    Hop(io::Error),
}

/// Relays bytes between a TCP connection and a hop stream until both directions have ended.
/// `pre_client` are bytes from the stream already received (written to the TCP side first).
///
/// - End of stream passes each way as a half-close, after every earlier byte: EOF from the TCP
///   side shuts the stream's sending half down; the stream's end shuts the TCP write side down
///   once every byte before it was written. The other direction keeps flowing.
/// - A failure on either side ends both directions: a TCP error (a reset by the peer, a failed
///   read or write) aborts the stream with [`ABORT_TCP_FAILED`], so the far relay resets its
///   TCP connection in turn; a failed stream, or a hop that is gone, resets the TCP connection
///   (SO_LINGER 0), so its peer reads ECONNRESET and never mistakes a cut transfer for a
///   complete one.
pub async fn splice(
    tcp: TcpStream,
    stream: HopStream,
    pre_client: Vec<u8>,
) -> io::Result<(u64, u64)> {
    splice_tracked(tcp, stream, pre_client, None).await
}

/// Abort code a relay sends across the hop when it closes an idle connection.
pub const ABORT_IDLE: u16 = 4;

/// Abort code a relay sends across the hop when its side's graceful shutdown ran out of time.
pub const ABORT_DRAIN: u16 = 7;

/// [`splice`], counting the bytes each way into `conn`'s record and the side's metrics, and,
/// when the side has an idle timeout, closing the connection once no byte has moved either way
/// for that long: the stream is aborted with [`ABORT_IDLE`] and the TCP connection reset, and
/// the close is counted as `idle_timeout`.
pub async fn splice_tracked(
    mut tcp: TcpStream,
    stream: HopStream,
    pre_client: Vec<u8>,
    mut conn: Option<&mut Conn>,
) -> io::Result<(u64, u64)> {
    let idle = conn.as_ref().and_then(|c| c.ops().config().idle_timeout);
    if let Some(c) = conn.as_ref() {
        c.track().set_stream(stream.id());
        c.track().set_state(ConnectionState::Open);
        c.track().touch();
    }
    let (hw, hr) = stream.split();
    let outcome = {
        let tracked = conn.as_deref();
        let (rd, wr) = tcp.split();
        let relay = async {
            tokio::try_join!(
                tcp_to_hop(rd, &hw, tracked),
                hop_to_tcp(hr, wr, &pre_client, tracked)
            )
        };
        match tracked {
            Some(c) => tokio::select! {
                r = relay => Ok(r),
                _ = idle_watch(c.track(), idle) => Err(CloseReason::IdleTimeout),
                _ = c.ops().cut_called() => Err(CloseReason::DrainTimeout),
            },
            None => Ok(relay.await),
        }
    };
    let close = |conn: &mut Option<&mut Conn>, reason| {
        if let Some(c) = conn.as_deref_mut() {
            c.track().set_state(ConnectionState::Closing);
            c.set_close_reason(reason);
        }
    };
    let (reason, e) = match outcome {
        Ok(Ok(counts)) => {
            close(&mut conn, CloseReason::Done);
            return Ok(counts);
        }
        // After a stream failure the hop has forgotten the stream and the abort below is a
        // no-op; after a TCP failure it resets the connection across the hop.
        Ok(Err(SpliceError::Tcp(e))) => (CloseReason::TcpReset, e),
        Ok(Err(SpliceError::Hop(e))) => (CloseReason::HopReset, e),
        Err(reason) => {
            let what = if reason == CloseReason::IdleTimeout {
                "idle in both directions"
            } else {
                "the shutdown timeout passed while draining"
            };
            (reason, io::Error::new(io::ErrorKind::TimedOut, what))
        }
    };
    close(&mut conn, reason);
    let code = match reason {
        CloseReason::IdleTimeout => ABORT_IDLE,
        CloseReason::DrainTimeout => ABORT_DRAIN,
        _ => ABORT_TCP_FAILED,
    };
    hw.abort(code).await;
    reset_tcp(tcp);
    Err(e)
}

/// Completes once `track` has seen no byte either way for `limit`.
/// Never completes without a limit.
async fn idle_watch(track: &ConnTrack, limit: Option<Duration>) {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    loop {
        let idle = track.idle_for();
        if idle >= limit {
            return;
        }
        tokio::time::sleep(limit - idle).await;
    }
}

/// Closes `tcp` with a reset (RST) instead of a FIN.
fn reset_tcp(tcp: TcpStream) {
    let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
    drop(tcp);
}

async fn tcp_to_hop(
    mut rd: ReadHalf<'_>,
    hw: &HopWriter,
    conn: Option<&Conn>,
) -> Result<u64, SpliceError> {
    // Reads land in a buffer handed to the hop without copying; a full read doubles the next.
    let mut size = READ_BUF_MIN;
    let mut buf = bytes::BytesMut::new();
    let mut total = 0u64;
    loop {
        if buf.capacity() < READ_BUF_MIN / 4 {
            buf = bytes::BytesMut::with_capacity(size);
        }
        let room = buf.capacity();
        let n = rd.read_buf(&mut buf).await.map_err(SpliceError::Tcp)?;
        if n == 0 {
            hw.shutdown().await;
            if let Some(c) = conn {
                c.track().set_state(ConnectionState::HalfClosed);
            }
            return Ok(total);
        }
        if let Some(c) = conn {
            c.add_bytes(c.directions().0, n as u64);
        }
        if n == room && room >= size {
            size = (size * 2).min(READ_BUF);
        }
        hw.write_bytes(buf.split().freeze())
            .await
            .map_err(|e| SpliceError::Hop(io::Error::new(io::ErrorKind::ConnectionAborted, e)))?;
        total += n as u64;
    }
}

async fn hop_to_tcp(
    mut hr: HopReader,
    mut wr: WriteHalf<'_>,
    pre: &[u8],
    conn: Option<&Conn>,
) -> Result<u64, SpliceError> {
    let count = |n: usize| {
        if let Some(c) = conn {
            c.add_bytes(c.directions().1, n as u64);
        }
    };
    wr.write_all(pre).await.map_err(SpliceError::Tcp)?;
    count(pre.len());
    let mut total = pre.len() as u64;
    loop {
        match hr.recv().await {
            Some(StreamEvent::Data(b)) => {
                wr.write_all(&b).await.map_err(SpliceError::Tcp)?;
                count(b.len());
                total += b.len() as u64;
            }
            Some(StreamEvent::Finished) => {
                wr.shutdown().await.map_err(SpliceError::Tcp)?;
                if let Some(c) = conn {
                    c.track().set_state(ConnectionState::HalfClosed);
                }
                return Ok(total);
            }
            Some(StreamEvent::Failed(e)) => {
                return Err(SpliceError::Hop(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    e,
                )));
            }
            None => {
                return Err(SpliceError::Hop(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "hop closed",
                )))
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

/// Applies the `[gateway.tcp]` options that must be set before connecting: congestion
/// control and buffer sizes (`TCP_NODELAY` is set once connected).
fn apply_tcp_options(sock: &tokio::net::TcpSocket, o: &TcpOptions) -> io::Result<()> {
    if let Some(cc) = &o.congestion {
        socket2::SockRef::from(sock)
            .set_tcp_congestion(cc.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("congestion control {cc:?}: {e}")))?;
    }
    if let Some(b) = o.send_buffer_bytes {
        sock.set_send_buffer_size(b)?;
    }
    if let Some(b) = o.recv_buffer_bytes {
        sock.set_recv_buffer_size(b)?;
    }
    Ok(())
}

/// Checks that `o` can be applied on this host (the congestion control is available, the
/// buffer sizes are accepted) by applying it to a fresh, unconnected socket.
pub fn check_tcp_options(o: &TcpOptions) -> io::Result<()> {
    apply_tcp_options(&tokio::net::TcpSocket::new_v4()?, o)
}

/// Connects to `dest` with the outbound options `tcp`, from `source`'s IP address (any port)
/// when given.
async fn connect_from(
    dest: SocketAddr,
    source: Option<SocketAddr>,
    tcp: &TcpOptions,
) -> io::Result<TcpStream> {
    let sock = if dest.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    apply_tcp_options(&sock, tcp)?;
    let Some(source) = source else {
        let s = sock.connect(dest).await?;
        s.set_nodelay(tcp.nodelay)?;
        return Ok(s);
    };
    crate::tproxy::set_transparent(&socket2::SockRef::from(&sock), dest.is_ipv6())?;
    sock.bind(SocketAddr::new(source.ip(), 0)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot bind to the client's address {}: {e}", source.ip()),
        )
    })?;
    let s = sock.connect(dest).await?;
    s.set_nodelay(tcp.nodelay)?;
    Ok(s)
}

/// Gateway side: reads the stream header, checks the policy, connects, reports the outcome,
/// then relays. Returns the bytes relayed (client → server, server → client).
pub async fn serve_stream(
    stream: HopStream,
    policy: &Policy,
    options: &ConnectOptions,
) -> io::Result<(u64, u64)> {
    serve_stream_tracked(stream, policy, options, &TcpOptions::default(), None).await
}

/// [`serve_stream`] with the outbound TCP options `tcp`, counting into `conn` (refusals under
/// their reason, bytes, the connection's `/status` record) when given.
pub async fn serve_stream_tracked(
    mut stream: HopStream,
    policy: &Policy,
    options: &ConnectOptions,
    tcp_options: &TcpOptions,
    mut conn: Option<&mut Conn>,
) -> io::Result<(u64, u64)> {
    // Gather the header (it normally arrives whole, with the BGN).
    let mut head: Vec<u8> = Vec::new();
    let (header, used) = loop {
        match StreamHeader::parse(&head) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => {
                refuse(&mut conn, RefusalReason::Protocol);
                stream.abort(1).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        if head.len() > MAX_HEADER {
            refuse(&mut conn, RefusalReason::Protocol);
            stream.abort(1).await;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream header too long",
            ));
        }
        match stream.recv().await {
            Some(StreamEvent::Data(b)) => head.extend_from_slice(&b),
            _ => {
                // Ended or failed before a header: nothing to connect; make sure neither hop
                // keeps the stream (a no-op if it failed).
                refuse(&mut conn, RefusalReason::Protocol);
                stream.abort(1).await;
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended before its header",
                ));
            }
        }
    };
    let StreamHeader { target, client } = header;
    if let Some(c) = conn.as_deref() {
        c.track().set_destination(target.to_string());
        if let Some(client) = client {
            c.track().set_client(client.to_string());
        }
    }
    let source = client.filter(|c| options.source_transparent && routable_source(c.ip()));
    let early = head.split_off(used);
    // A name is checked against the name rules before it is resolved.
    let name = match &target {
        Target::Domain { host, .. } => Some(host.as_str()),
        Target::Ip(_) => None,
    };
    if let Some(Err(denied)) = name.map(|n| policy.check_name(n)) {
        refuse(&mut conn, RefusalReason::Policy);
        report(&stream, Reply::NotAllowed).await;
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, denied));
    }
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
        refuse(&mut conn, RefusalReason::ConnectFailed);
        let c = report(&stream, Reply::HostUnreachable).await;
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{target}: no address ({c:?})"),
        ));
    }
    let allowed: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| policy.check_resolved(name, a.ip()).is_ok())
        .collect();
    if allowed.is_empty() {
        refuse(&mut conn, RefusalReason::Policy);
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
        match tokio::time::timeout(options.connect_timeout, connect_from(*a, from, tcp_options))
            .await
        {
            Ok(Ok(s)) => {
                tcp = Some(s);
                break;
            }
            Ok(Err(e)) => last_err = e,
            Err(_) => last_err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    let Some(mut tcp) = tcp else {
        let reason = if crate::fdlimit::is_descriptor_shortage(&last_err) {
            if let Some(c) = conn.as_deref() {
                c.ops()
                    .log_descriptor_limit("the connection to the destination");
            }
            RefusalReason::Descriptors
        } else if last_err.kind() == io::ErrorKind::TimedOut {
            RefusalReason::Timeout
        } else {
            RefusalReason::ConnectFailed
        };
        refuse(&mut conn, reason);
        report(&stream, reply_for(&last_err)).await;
        return Err(last_err);
    };
    if let Err(e) = stream.write(&[Reply::Succeeded as u8]).await {
        // The hop is gone: the server must not take the connection for a finished exchange.
        reset_tcp(tcp);
        return Err(io::Error::new(io::ErrorKind::ConnectionAborted, e));
    }
    if let Err(e) = tcp.write_all(&early).await {
        stream.abort(ABORT_TCP_FAILED).await;
        reset_tcp(tcp);
        return Err(e);
    }
    if let Some(c) = conn.as_deref() {
        c.add_bytes(c.directions().1, early.len() as u64);
    }
    splice_tracked(tcp, stream, Vec::new(), conn).await
}

/// Counts a refusal into `conn`, when tracked.
fn refuse(conn: &mut Option<&mut Conn>, reason: RefusalReason) {
    if let Some(c) = conn.as_deref_mut() {
        c.refuse(reason);
    }
}

/// Tells the terminal why the connect failed, and ends the stream.
async fn report(stream: &HopStream, code: Reply) -> Reply {
    let _ = stream.write(&[code as u8]).await;
    stream.shutdown().await;
    code
}

/// Gateway: serves every stream the hop accepts, each in its own task, connecting from the
/// gateway's own address.
pub async fn serve(hop: Hop, policy: Arc<Policy>, connect_timeout: Duration) {
    serve_with(hop, policy, ConnectOptions::new(connect_timeout)).await
}

/// Gateway: as [`serve`], connecting as `options` say.
pub async fn serve_with(mut hop: Hop, policy: Arc<Policy>, options: ConnectOptions) {
    let incoming = take_incoming(&mut hop);
    serve_gateway(
        incoming,
        policy,
        options,
        Arc::new(TcpOptions::default()),
        Ops::unlimited(Side::Gateway),
    )
    .await;
    // `hop` lives until here: dropping it earlier would stop the hop.
    drop(hop);
}

/// Takes the gateway hop's stream of incoming streams, so the [`Hop`] itself can be shared (for
/// [`Hop::status`]) while [`serve_gateway`] serves them. `hop.incoming` yields nothing after.
pub fn take_incoming(hop: &mut Hop) -> mpsc::Receiver<HopStream> {
    std::mem::replace(&mut hop.incoming, mpsc::channel(1).1)
}

/// Gateway: serves the streams terminals open, each in its own task, until `ops` drains (or
/// the hop is gone). Each is admitted first, against the limits of `ops` and per terminal by
/// its public key; a refused stream is answered with status byte 1 (general failure) and ended.
/// Outbound connections get the socket options `tcp`.
pub async fn serve_gateway(
    mut incoming: mpsc::Receiver<HopStream>,
    policy: Arc<Policy>,
    options: ConnectOptions,
    tcp: Arc<TcpOptions>,
    ops: Arc<Ops>,
) {
    loop {
        let stream = tokio::select! {
            _ = ops.drained() => break,
            s = incoming.recv() => match s {
                Some(s) => s,
                None => break,
            },
        };
        match ops.admit(stream.peer_key(), None) {
            Ok(mut conn) => {
                let policy = Arc::clone(&policy);
                let tcp = Arc::clone(&tcp);
                tokio::spawn(async move {
                    tracing::debug!(
                        id = conn.track().id(),
                        stream = stream.id(),
                        "stream accepted"
                    );
                    let r = serve_stream_tracked(stream, &policy, &options, &tcp, Some(&mut conn))
                        .await;
                    if let Err(e) = r {
                        tracing::debug!(id = conn.track().id(), error = %e, "connection ended");
                    }
                });
            }
            Err(_) => {
                tokio::spawn(async move {
                    report(&stream, Reply::GeneralFailure).await;
                });
            }
        }
    }
    tracing::info!("gateway: no longer accepting streams");
}

/// How long a refused client may take over its handshake before it is dropped unanswered.
const REFUSED_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (out of descriptors and the like) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// `fut`, bounded by `limit` when there is one; `None` when it ran out.
async fn within<T>(
    limit: Option<Duration>,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    match limit {
        Some(d) => tokio::time::timeout(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// The refusal reason for a gateway's verdict.
pub(crate) fn refusal_for(code: Reply) -> RefusalReason {
    match code {
        Reply::NotAllowed => RefusalReason::Policy,
        _ => RefusalReason::ConnectFailed,
    }
}

/// Accepts the next client on `listener` and admits it, until `ops` drains (`None`).
pub(crate) async fn next_client(
    listener: &TcpListener,
    ops: &Arc<Ops>,
) -> Option<(TcpStream, SocketAddr, Result<Conn, RefusalReason>)> {
    let mut refusing = false;
    loop {
        if !refusing {
            ops.descriptor_reserve().refill();
        }
        let accepted = tokio::select! {
            _ = ops.drained() => return None,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((tcp, peer)) if refusing => {
                // Accepted on the reserve's descriptor: answered as refused, then closed.
                let peer = canonical_addr(peer);
                return Some((tcp, peer, Err(RefusalReason::Descriptors)));
            }
            Ok((tcp, peer)) => {
                let peer = canonical_addr(peer);
                let _ = tcp.set_nodelay(true);
                let admitted = ops.admit(None, Some(peer));
                return Some((tcp, peer, admitted));
            }
            // The open-file limit: give up the spare descriptor to accept the client and
            // refuse it (a SOCKS5 or HTTP error instead of a hanging connect).
            Err(e) if crate::fdlimit::is_descriptor_shortage(&e) => {
                ops.log_descriptor_limit("a client's connection");
                ops.metrics().refused(RefusalReason::Descriptors).inc();
                refusing = ops.descriptor_reserve().release();
                if !refusing {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
            // The listener itself is still good: back off instead of spinning.
            Err(_) => tokio::time::sleep(ACCEPT_RETRY).await,
        }
    }
}

/// Terminal: serves SOCKS5 clients on `listener`, each connection relayed across `hop`.
pub async fn serve_socks(listener: TcpListener, hop: Arc<Hop>, auth: Arc<SocksAuth>) {
    serve_socks_with(listener, hop, auth, Ops::unlimited(Side::Terminal)).await
}

/// Terminal: as [`serve_socks`], admitting each client against the limits of `ops` (a refused
/// client gets SOCKS5 reply 1, general failure) and counting into its metrics, until `ops`
/// drains.
pub async fn serve_socks_with(
    listener: TcpListener,
    hop: Arc<Hop>,
    auth: Arc<SocksAuth>,
    ops: Arc<Ops>,
) {
    serve_socks_opts(listener, hop, auth, ops, false).await
}

/// How long a fast-open SOCKS5 terminal waits for the client's first bytes after its early
/// success reply before opening the stream without them.
pub const SOCKS_EARLY_DATA_WAIT: Duration = Duration::from_millis(5);
/// Most client bytes a fast-open SOCKS5 terminal carries with the stream header.
const SOCKS_MAX_EARLY: usize = 4096;

/// Terminal: as [`serve_socks_with`]; with `fast_open` the client gets its success reply at once
/// and its first bytes ride on the BGN with the destination, so a new connection costs no
/// satellite round trip before the request is on its way — but a connect that then fails can
/// only be reported by resetting the client's connection (as for TPROXY), not with a SOCKS5
/// error code (`docs/gateway.md`, "SOCKS5 fast open").
pub async fn serve_socks_opts(
    listener: TcpListener,
    hop: Arc<Hop>,
    auth: Arc<SocksAuth>,
    ops: Arc<Ops>,
    fast_open: bool,
) {
    while let Some((tcp, peer, admitted)) = next_client(&listener, &ops).await {
        let hop = Arc::clone(&hop);
        let auth = Arc::clone(&auth);
        match admitted {
            Ok(conn) => {
                tokio::spawn(socks_one(tcp, peer, hop, auth, conn, fast_open));
            }
            Err(_) => {
                let Some(permit) = ops.refusing_permit() else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut tcp = tcp;
                    let handshake = socks::accept(&mut tcp, &auth);
                    if let Ok(Ok(_)) =
                        tokio::time::timeout(REFUSED_HANDSHAKE_TIMEOUT, handshake).await
                    {
                        let _ = tcp
                            .write_all(&socks::reply(Reply::GeneralFailure, None))
                            .await;
                        let _ = tcp.shutdown().await;
                    }
                    drop(permit);
                });
            }
        }
    }
    tracing::info!("terminal: SOCKS5 listener closed");
}

async fn socks_one(
    mut tcp: TcpStream,
    peer: SocketAddr,
    hop: Arc<Hop>,
    auth: Arc<SocksAuth>,
    mut conn: Conn,
    fast_open: bool,
) {
    let limit = conn.ops().config().open_timeout;
    let target = match within(limit, socks::accept(&mut tcp, &auth)).await {
        Some(Ok(t)) => t,
        Some(Err(socks::SocksError::AuthFailed(user))) => {
            conn.ops()
                .metrics()
                .auth_failures(AuthFailure::Client)
                .inc();
            tracing::info!(client = %peer, user, "SOCKS5 login refused");
            conn.refuse(RefusalReason::ClientAuth);
            return;
        }
        Some(Err(_)) => return conn.refuse(RefusalReason::Protocol),
        None => return conn.refuse(RefusalReason::Timeout),
    };
    conn.track().set_destination(target.to_string());
    if fast_open {
        return socks_fast_open(tcp, peer, &hop, &target, conn, limit).await;
    }
    match within(limit, open(&hop, &target, &[], Some(peer))).await {
        Some(Ok((stream, pre))) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, "connection open");
            if tcp
                .write_all(&socks::reply(Reply::Succeeded, None))
                .await
                .is_ok()
            {
                let _ = splice_tracked(tcp, stream, pre, Some(&mut conn)).await;
            } else {
                stream.abort(ABORT_TCP_FAILED).await;
            }
        }
        Some(Err(code)) => {
            conn.refuse(refusal_for(code));
            let _ = tcp.write_all(&socks::reply(code, None)).await;
            let _ = tcp.shutdown().await;
        }
        None => {
            conn.refuse(RefusalReason::Timeout);
            let _ = tcp
                .write_all(&socks::reply(Reply::HostUnreachable, None))
                .await;
            let _ = tcp.shutdown().await;
        }
    }
}

/// The fast-open path of [`socks_one`]: success at once, the client's first bytes with the header.
async fn socks_fast_open(
    mut tcp: TcpStream,
    peer: SocketAddr,
    hop: &Hop,
    target: &Target,
    mut conn: Conn,
    limit: Option<Duration>,
) {
    if tcp
        .write_all(&socks::reply(Reply::Succeeded, None))
        .await
        .is_err()
    {
        return conn.refuse(RefusalReason::Protocol);
    }
    let mut early = vec![0u8; SOCKS_MAX_EARLY];
    let n = match tokio::time::timeout(SOCKS_EARLY_DATA_WAIT, tcp.read(&mut early)).await {
        Ok(Ok(n)) => n,
        Ok(Err(_)) => return conn.refuse(RefusalReason::Protocol),
        Err(_) => 0,
    };
    early.truncate(n);
    conn.add_bytes(conn.directions().0, n as u64);
    let opened = within(limit, open(hop, target, &early, Some(peer))).await;
    // The early bytes are in the stream now; the buffer must not live as long as the
    // connection (4 KiB of every idle connection).
    drop(early);
    match opened {
        Some(Ok((stream, pre))) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, "connection open (fast open)");
            let _ = splice_tracked(tcp, stream, pre, Some(&mut conn)).await;
        }
        Some(Err(code)) => {
            conn.refuse(refusal_for(code));
            crate::tproxy::reset(tcp);
        }
        None => {
            conn.refuse(RefusalReason::Timeout);
            crate::tproxy::reset(tcp);
        }
    }
}

/// Terminal: serves HTTP CONNECT clients on `listener`.
pub async fn serve_http_connect(listener: TcpListener, hop: Arc<Hop>) {
    serve_http_connect_with(listener, hop, Ops::unlimited(Side::Terminal)).await
}

/// Terminal: as [`serve_http_connect`], admitting each client against the limits of `ops` (a
/// refused client gets `503 Service Unavailable`) and counting into its metrics, until `ops`
/// drains.
pub async fn serve_http_connect_with(listener: TcpListener, hop: Arc<Hop>, ops: Arc<Ops>) {
    while let Some((tcp, peer, admitted)) = next_client(&listener, &ops).await {
        let hop = Arc::clone(&hop);
        match admitted {
            Ok(conn) => {
                tokio::spawn(http_connect_one(tcp, peer, hop, conn));
            }
            Err(_) => {
                let Some(permit) = ops.refusing_permit() else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut tcp = tcp;
                    let handshake = http_connect::accept(&mut tcp);
                    if let Ok(Ok(_)) =
                        tokio::time::timeout(REFUSED_HANDSHAKE_TIMEOUT, handshake).await
                    {
                        let _ = tcp
                            .write_all(&http_connect::reply_status(503, "Service Unavailable"))
                            .await;
                        let _ = tcp.shutdown().await;
                    }
                    drop(permit);
                });
            }
        }
    }
    tracing::info!("terminal: HTTP CONNECT listener closed");
}

async fn http_connect_one(mut tcp: TcpStream, peer: SocketAddr, hop: Arc<Hop>, mut conn: Conn) {
    let limit = conn.ops().config().open_timeout;
    let (target, early) = match within(limit, http_connect::accept(&mut tcp)).await {
        Some(Ok(t)) => t,
        Some(Err(_)) => return conn.refuse(RefusalReason::Protocol),
        None => return conn.refuse(RefusalReason::Timeout),
    };
    conn.track().set_destination(target.to_string());
    // Bytes the client sent after its request head travel on the BGN.
    let (to_hop, _) = conn.directions();
    conn.add_bytes(to_hop, early.len() as u64);
    let status = match within(limit, open(&hop, &target, &early, Some(peer))).await {
        Some(Ok((stream, pre))) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, "connection open");
            if tcp.write_all(http_connect::reply_ok()).await.is_ok() {
                let _ = splice_tracked(tcp, stream, pre, Some(&mut conn)).await;
            } else {
                stream.abort(ABORT_TCP_FAILED).await;
            }
            return;
        }
        Some(Err(code)) => {
            conn.refuse(refusal_for(code));
            match code {
                Reply::NotAllowed => (403, "Forbidden"),
                Reply::HostUnreachable => (504, "Gateway Timeout"),
                _ => (502, "Bad Gateway"),
            }
        }
        None => {
            conn.refuse(RefusalReason::Timeout);
            (504, "Gateway Timeout")
        }
    };
    let _ = tcp
        .write_all(&http_connect::reply_status(status.0, status.1))
        .await;
    let _ = tcp.shutdown().await;
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
