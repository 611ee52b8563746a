//! The gateway's streams: admission, the stream header, the policy, the connect, the verdict
//! back to the terminal, then the relay.

use super::connect::{connect_from, routable_source, ConnectOptions};
use crate::config::TcpOptions;
use crate::gateway::policy::{Policy, PolicyCell};
use crate::hop::{AbortCode, HopStream, StreamEvent, WorkerHome};
use crate::metrics::RefusalReason;
use crate::ops::{Conn, Ops};
use crate::splice::splice_tracked;
use crate::stream::{StreamHeader, Target, Verdict, DEADLINE_MARGIN_MS, MAX_HEADER};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

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
pub(crate) async fn serve_stream_tracked(
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
                stream.abort(AbortCode::BadHeader).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        if head.len() > MAX_HEADER {
            refuse(&mut conn, RefusalReason::Protocol);
            stream.abort(AbortCode::BadHeader).await;
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
                stream.abort(AbortCode::BadHeader).await;
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended before its header",
                ));
            }
        }
    };
    let StreamHeader {
        target,
        client,
        deadline_ms,
    } = header;
    // At-most-once opens: a stream whose terminal has given up (or will have, before our
    // verdict can reach it) is not run. Checked now, before the connect, and before the
    // client's bytes are written to the server.
    let deadline = deadline_ms.filter(|&d| d > 0);
    let time_left = || {
        deadline.map(|d| {
            let ms = d.saturating_sub(crate::hop::clock::unix_ms_now() + DEADLINE_MARGIN_MS);
            std::time::Duration::from_millis(ms)
        })
    };
    if time_left().is_some_and(|t| t.is_zero()) {
        return expired(&stream, &mut conn, &target, deadline).await;
    }
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
        report(&stream, Verdict::PolicyDenied).await;
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
        let c = report(&stream, Verdict::HostUnreachable).await;
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{target}: no address ({c})"),
        ));
    }
    let allowed: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| policy.check_resolved(name, a.ip()).is_ok())
        .collect();
    if allowed.is_empty() {
        refuse(&mut conn, RefusalReason::Policy);
        report(&stream, Verdict::PolicyDenied).await;
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{target}: denied by policy"),
        ));
    }
    let mut last_err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
    let mut tcp = None;
    for a in &allowed {
        let limit = match time_left() {
            Some(t) if t.is_zero() => return expired(&stream, &mut conn, &target, deadline).await,
            Some(t) => t.min(options.connect_timeout),
            None => options.connect_timeout,
        };
        // Transparency only where the families match: an IPv4 client cannot be the source of
        // an IPv6 connection.
        let from = source.filter(|c| c.is_ipv4() == a.is_ipv4());
        match tokio::time::timeout(limit, connect_from(*a, from, tcp_options)).await {
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
        report(&stream, Verdict::for_connect_error(&last_err)).await;
        return Err(last_err);
    };
    if time_left().is_some_and(|t| t.is_zero()) {
        // Connected, but too late: the server gets a reset and none of the client's bytes.
        crate::sockopt::reset(tcp);
        return expired(&stream, &mut conn, &target, deadline).await;
    }
    if let Err(e) = stream.write(&[Verdict::Connected.to_byte()]).await {
        // The hop is gone: the server must not take the connection for a finished exchange.
        crate::sockopt::reset(tcp);
        return Err(io::Error::new(io::ErrorKind::ConnectionAborted, e));
    }
    if let Err(e) = tcp.write_all(&early).await {
        stream.abort(AbortCode::TcpFailed).await;
        crate::sockopt::reset(tcp);
        return Err(e);
    }
    if let Some(c) = conn.as_deref() {
        c.add_bytes(c.directions().1, early.len() as u64);
    }
    splice_tracked(tcp, stream, Vec::new(), conn).await
}

/// Refuses a stream whose deadline passed: counted as a timeout, logged, the stream aborted
/// (its terminal gave up on it already).
async fn expired(
    stream: &HopStream,
    conn: &mut Option<&mut Conn>,
    target: &Target,
    deadline_ms: Option<u64>,
) -> io::Result<(u64, u64)> {
    refuse(conn, RefusalReason::Timeout);
    let late_ms = deadline_ms.map_or(0, |d| {
        (crate::hop::clock::unix_ms_now() + DEADLINE_MARGIN_MS).saturating_sub(d)
    });
    tracing::info!(
        id = conn.as_deref().map(|c| c.track().id()),
        destination = %target,
        late_ms,
        "stream not run: its deadline (less the {DEADLINE_MARGIN_MS} ms margin) had passed; \
         the terminal gave up on it"
    );
    stream.abort(AbortCode::Expired).await;
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{target}: the stream's deadline had passed"),
    ))
}

/// Counts a refusal into `conn`, when tracked.
fn refuse(conn: &mut Option<&mut Conn>, reason: RefusalReason) {
    if let Some(c) = conn.as_deref_mut() {
        c.refuse(reason);
    }
}

/// Tells the terminal why the connect failed, and ends the stream.
async fn report(stream: &HopStream, code: Verdict) -> Verdict {
    let _ = stream.write(&[code.to_byte()]).await;
    stream.shutdown().await;
    code
}

/// Gateway: serves the streams terminals open, each in its own task, until `ops` drains (or
/// the hop is gone). Each is admitted first, against the limits of `ops` and per terminal by
/// its public key; a refused stream is answered with status byte 1 (general failure) and ended.
/// Outbound connections get the socket options `tcp`; each stream is checked against the
/// policy in force when it arrives.
pub(crate) async fn serve_gateway(
    mut incoming: mpsc::Receiver<HopStream>,
    policy: Arc<PolicyCell>,
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
                let policy = policy.current();
                let tcp = Arc::clone(&tcp);
                // On the thread of the hop worker that carries the stream: the relay's bytes
                // then reach the hop without waking another thread.
                let home = stream.home();
                WorkerHome::spawn_at(home, async move {
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
                    report(&stream, Verdict::Failed).await;
                });
            }
        }
    }
    tracing::info!("gateway: no longer accepting streams");
}
