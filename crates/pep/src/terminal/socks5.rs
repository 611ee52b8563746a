//! The terminal's SOCKS5 listener: the CONNECT exchange, optional fast open (success at once,
//! the client's first bytes on the BGN), then the relay.

use super::accept::next_client;
use super::{deadline_in, open_by, open_unverified_by, within, REFUSED_HANDSHAKE_TIMEOUT};
use crate::hop::AbortCode;
use crate::hop::Hop;
use crate::metrics::{AuthFailure, RefusalReason};
use crate::ops::{Conn, Ops};
use crate::socks::{self, Reply, SocksAuth};
use crate::splice::{splice_before_verdict, splice_tracked};
use crate::stream::Target;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a fast-open SOCKS5 terminal waits for the client's first bytes after its early
/// success reply before opening the stream without them.
pub(crate) const SOCKS_EARLY_DATA_WAIT: Duration = Duration::from_millis(5);
/// Most client bytes a fast-open SOCKS5 terminal carries with the stream header.
const SOCKS_MAX_EARLY: usize = 4096;

/// Terminal: serves SOCKS5 clients on `listener`, each connection relayed across `hop`, admitting
/// each client against the limits of `ops` (a refused client gets SOCKS5 reply 1, general
/// failure) and counting into its metrics, until `ops` drains. With `fast_open` the client gets
/// its success reply at once
/// and its first bytes ride on the BGN with the destination, so a new connection costs no
/// satellite round trip before the request is on its way — but a connect that then fails can
/// only be reported by resetting the client's connection (as for TPROXY), not with a SOCKS5
/// error code (`docs/gateway.md`, "SOCKS5 fast open").
pub(crate) async fn serve_socks(
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
    // The deadline is taken before the wait starts, so it is never later than the give-up.
    let deadline = deadline_in(limit);
    match within(limit, open_by(&hop, &target, &[], Some(peer), deadline)).await {
        Some(Ok((stream, pre))) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, "connection open");
            if tcp
                .write_all(&socks::reply(Reply::Succeeded, None))
                .await
                .is_ok()
            {
                let _ = splice_tracked(tcp, stream, pre, Some(&mut conn)).await;
            } else {
                stream.abort(AbortCode::TcpFailed).await;
            }
        }
        Some(Err(code)) => {
            conn.refuse(RefusalReason::for_verdict(code));
            let _ = tcp.write_all(&socks::reply(code.into(), None)).await;
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
    // The verdict is awaited for `limit` from when the relay starts, after this.
    let opened = open_unverified_by(hop, target, &early, Some(peer), deadline_in(limit)).await;
    // The early bytes are in the stream now; the buffer must not live as long as the
    // connection (4 KiB of every idle connection).
    drop(early);
    match opened {
        Ok(stream) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, "connection open (fast open)");
            // The relay starts before the verdict: later client bytes need not wait for it.
            let _ = splice_before_verdict(tcp, stream, &mut conn, limit).await;
        }
        Err(code) => {
            conn.refuse(RefusalReason::for_verdict(code));
            crate::sockopt::reset(tcp);
        }
    }
}
