//! The terminal's HTTP proxy listener: the request head, then for a CONNECT the gateway's
//! verdict as an HTTP status and the relay; for a plain HTTP request in absolute form
//! (`GET http://host/path`, what `http_proxy=` clients send) the request rewritten to origin
//! form carried to the destination like a CONNECT's first bytes, and the relay of its answer
//! (a failure to reach it answered as for a CONNECT).

use super::accept::next_client;
use super::{deadline_in, open_by, within, REFUSED_HANDSHAKE_TIMEOUT};
use crate::hop::AbortCode;
use crate::hop::Hop;
use crate::http_connect::{self, Request};
use crate::metrics::RefusalReason;
use crate::ops::{Conn, Ops};
use crate::splice::splice_tracked;
use crate::stream::Verdict;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Terminal: serves HTTP CONNECT clients on `listener`, admitting each client against the limits of `ops` (a
/// refused client gets `503 Service Unavailable`) and counting into its metrics, until `ops`
/// drains.
pub(crate) async fn serve_http_connect(listener: TcpListener, hop: Arc<Hop>, ops: Arc<Ops>) {
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
    let (request, early) = match within(limit, http_connect::accept(&mut tcp)).await {
        Some(Ok(t)) => t,
        Some(Err(_)) => return conn.refuse(RefusalReason::Protocol),
        None => return conn.refuse(RefusalReason::Timeout),
    };
    // Bytes the client sent after its request head travel on the BGN, after the forwarded
    // request's head.
    let (target, early, forward) = match request {
        Request::Connect(target) => (target, early, false),
        Request::Forward { target, mut head } => {
            head.extend_from_slice(&early);
            (target, head, true)
        }
    };
    conn.track().set_destination(target.to_string());
    let (to_hop, _) = conn.directions();
    conn.add_bytes(to_hop, early.len() as u64);
    let status = match within(
        limit,
        open_by(&hop, &target, &early, Some(peer), deadline_in(limit)),
    )
    .await
    {
        Some(Ok((stream, pre))) => {
            tracing::debug!(id = conn.track().id(), client = %peer, destination = %target, forward, "connection open");
            // A forwarded request's answer is the destination's.
            if forward || tcp.write_all(http_connect::reply_ok()).await.is_ok() {
                let _ = splice_tracked(tcp, stream, pre, Some(&mut conn)).await;
            } else {
                stream.abort(AbortCode::TcpFailed).await;
            }
            return;
        }
        Some(Err(code)) => {
            conn.refuse(RefusalReason::for_verdict(code));
            match code {
                Verdict::PolicyDenied => (403, "Forbidden"),
                Verdict::HostUnreachable => (504, "Gateway Timeout"),
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
