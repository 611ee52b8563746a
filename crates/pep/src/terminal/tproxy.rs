//! Transparent interception at the terminal with Linux TPROXY (IPv4 and IPv6).
//!
//! A packet filter rule (`deploy/nftables-tproxy.nft`) hands TCP connections passing through
//! the terminal host to a listening socket that has `IP_TRANSPARENT` / `IPV6_TRANSPARENT` set;
//! the kernel then accepts them on that socket as if this host were the destination, so the
//! accepted socket's local address is the address the client wanted to reach. [`serve_tproxy`]
//! carries each such connection across the hop exactly like a SOCKS5 CONNECT to that address
//! ([`terminal::open`](super::open), then [`splice`](crate::splice::splice)); when the gateway reports a failure (refused,
//! unreachable, denied by its policy) the client's connection is reset, which is what the
//! client would have seen from the server itself.
//!
//! The client already believes itself connected when the terminal asks the gateway, so its
//! first bytes (a request, for the many protocols where the client speaks first) are collected
//! for up to [`EARLY_DATA_WAIT`] and ride on the stream's BGN with the header.
//!
//! Setting the transparent options needs `CAP_NET_ADMIN`. A dual-stack listener (`[::]:port`)
//! serves both families; IPv4 destinations then appear as IPv4-mapped IPv6 addresses and are
//! turned back into IPv4.

use crate::hop::Hop;
use crate::metrics::RefusalReason;
use crate::ops::{Conn, Ops};
use crate::stream::{canonical_addr, Target};
use crate::{splice, terminal};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// How long the terminal waits for a client's first bytes before opening the stream without
/// them. Short against a satellite round trip; protocols where the server speaks first (SSH,
/// SMTP) pay it once per connection.
pub(crate) const EARLY_DATA_WAIT: Duration = Duration::from_millis(5);
/// Most client bytes carried with the header.
const MAX_EARLY: usize = 4096;
/// Connections waiting to be accepted.
const BACKLOG: i32 = 1024;

/// Why a transparent listener could not be set up.
#[derive(Debug, Error)]
pub enum TproxyError {
    #[error("cannot create a TCP socket: {0}")]
    Socket(io::Error),
    #[error("{addr}: {error}")]
    Transparent { addr: SocketAddr, error: io::Error },
    #[error("cannot listen on {addr}: {error}")]
    Bind { addr: SocketAddr, error: io::Error },
}

/// A non-blocking listening socket on `addr` with the transparent option set, ready for
/// `tokio::net::TcpListener::from_std`. An unspecified IPv6 address listens on both families.
pub(crate) fn bind_transparent(addr: SocketAddr) -> Result<std::net::TcpListener, TproxyError> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP)).map_err(TproxyError::Socket)?;
    crate::sockopt::set_transparent(&SockRef::from(&s), addr.is_ipv6())
        .map_err(|error| TproxyError::Transparent { addr, error })?;
    let bind = |error| TproxyError::Bind { addr, error };
    if addr.is_ipv6() {
        s.set_only_v6(false).map_err(bind)?;
    }
    s.set_reuse_address(true).map_err(bind)?;
    s.bind(&addr.into()).map_err(bind)?;
    s.listen(BACKLOG).map_err(bind)?;
    s.set_nonblocking(true).map_err(bind)?;
    Ok(s.into())
}

/// The address the client of a transparently accepted connection wanted to reach.
pub(crate) fn original_destination(tcp: &TcpStream) -> io::Result<SocketAddr> {
    tcp.local_addr().map(canonical_addr)
}

/// Terminal: serves transparently intercepted connections on `listener` (made by
/// [`bind_transparent`]), each relayed across `hop` to its original destination, admitting each
/// connection against the limits of `ops` (a refused client
/// is reset), counting into its metrics, closing idle connections, until `ops` drains.
pub(crate) async fn serve_tproxy(listener: TcpListener, hop: Arc<Hop>, ops: Arc<Ops>) {
    let own = listener.local_addr().ok().map(canonical_addr);
    while let Some((tcp, peer, admitted)) = terminal::accept::next_client(&listener, &ops).await {
        match admitted {
            Ok(conn) => {
                let hop = Arc::clone(&hop);
                tokio::spawn(async move {
                    let _ = relay_one(tcp, peer, own, &hop, conn).await;
                });
            }
            Err(_) => crate::sockopt::reset(tcp),
        }
    }
    tracing::info!("terminal: transparent listener closed");
}

/// Relays one intercepted connection; resets it if the gateway cannot connect.
async fn relay_one(
    mut tcp: TcpStream,
    peer: SocketAddr,
    own: Option<SocketAddr>,
    hop: &Hop,
    mut conn: Conn,
) -> io::Result<(u64, u64)> {
    let dest = match original_destination(&tcp) {
        Ok(d) => d,
        Err(e) => {
            conn.refuse(RefusalReason::Protocol);
            return Err(e);
        }
    };
    conn.track().set_destination(dest.to_string());
    if Some(dest) == own {
        conn.refuse(RefusalReason::Protocol);
        // Someone connected to the listener's own address, not through the TPROXY rule: there
        // is no original destination to reach.
        crate::sockopt::reset(tcp);
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{peer} connected to the transparent listener {dest} directly"),
        ));
    }
    let _ = tcp.set_nodelay(true);
    let mut early = vec![0u8; MAX_EARLY];
    let n = match tokio::time::timeout(EARLY_DATA_WAIT, tcp.read(&mut early)).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(e),
        Err(_) => 0,
    };
    early.truncate(n);
    conn.add_bytes(conn.directions().0, n as u64);
    // A client that sent nothing and closed (n == 0 after a read) still gets its half-close
    // carried: splice reads the EOF again.
    // The verdict is awaited for `limit` from when the relay starts, after this.
    let limit = conn.ops().config().open_timeout;
    let opened = terminal::open_unverified_by(
        hop,
        &Target::Ip(dest),
        &early,
        Some(peer),
        terminal::deadline_in(limit),
    )
    .await;
    // Freed before the relay: it would otherwise stay for the connection's whole life.
    drop(early);
    match opened {
        // The relay starts before the verdict: later client bytes need not wait for it; a
        // failure verdict resets the client's connection.
        Ok(stream) => splice::splice_before_verdict(tcp, stream, &mut conn, limit).await,
        Err(code) => {
            conn.refuse(RefusalReason::for_verdict(code));
            crate::sockopt::reset(tcp);
            Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("{peer} → {dest}: the gateway answered: {code}"),
            ))
        }
    }
}
