//! The terminal's side of a connection: accepting clients (SOCKS5, HTTP CONNECT, transparent
//! interception), opening a stream across the hop with the stream header, and waiting for the
//! gateway's verdict.

pub(crate) mod accept;
pub(crate) mod http_connect;
pub(crate) mod socks5;
pub(crate) mod tproxy;

use crate::hop::{AbortCode, Hop, HopError, HopStream, StreamError, StreamEvent};
use crate::stream::{split_verdict, StreamHeader, Target, Verdict, MAX_HEADER};
use std::net::SocketAddr;
use std::time::Duration;

/// Terminal side: opens a stream to `target` carrying `early` client bytes and, when known, the
/// client's address (`client`, for a gateway with source-address transparency), and waits for
/// the gateway's verdict. On success returns the stream (positioned after the status byte) and
/// any server bytes that came with it.
pub async fn open(
    hop: &Hop,
    target: &Target,
    early: &[u8],
    client: Option<SocketAddr>,
) -> Result<(HopStream, Vec<u8>), Verdict> {
    open_by(hop, target, early, client, None).await
}

/// [`open`] for a caller that gives up waiting at `deadline`: the gateway never runs the stream
/// after it (`docs/gateway.md`, "At-most-once opens").
pub(crate) async fn open_by(
    hop: &Hop,
    target: &Target,
    early: &[u8],
    client: Option<SocketAddr>,
    deadline: Option<tokio::time::Instant>,
) -> Result<(HopStream, Vec<u8>), Verdict> {
    let mut stream = open_unverified_by(hop, target, early, client, deadline).await?;
    loop {
        match stream.recv().await {
            Some(StreamEvent::Data(b)) => match split_verdict(&b) {
                None => continue,
                Some((Verdict::Connected, rest)) => return Ok((stream, rest.to_vec())),
                Some((code, _)) => {
                    // The gateway ended its side after the code; end ours so the connection
                    // closes at both hops instead of lingering.
                    stream.shutdown().await;
                    return Err(code);
                }
            },
            Some(StreamEvent::Failed(StreamError::TunnelDown)) => {
                return Err(Verdict::NetworkUnreachable)
            }
            other => {
                // The stream ended before the gateway's verdict: say why, or the client's
                // general failure has no cause anywhere (a gateway resets a stream it has no
                // room for as "gateway overloaded", and logs the limit on its side).
                let why = match &other {
                    Some(StreamEvent::Failed(e)) => e.to_string(),
                    Some(StreamEvent::Finished) => "the gateway ended it".to_string(),
                    _ => "the hop closed".to_string(),
                };
                tracing::info!(
                    destination = %target,
                    "open failed before the gateway's verdict: {why}"
                );
                stream.abort(AbortCode::TcpFailed).await;
                return Err(Verdict::Failed);
            }
        }
    }
}

/// Terminal side: opens a stream to `target` carrying the header and `early` client bytes, without
/// waiting for the gateway's verdict: the stream's first byte, when it comes, is the verdict
/// ([`crate::splice::splice_before_verdict`] reads it).
///
/// `deadline` is when the caller gives up on the verdict (`None`: never). The header has a
/// deadline field, which the hop fills in the gateway's clock (`docs/gateway.md`,
/// "At-most-once opens"). A tunnel that is down refuses at once: network unreachable.
pub(crate) async fn open_unverified_by(
    hop: &Hop,
    target: &Target,
    early: &[u8],
    client: Option<SocketAddr>,
    deadline: Option<tokio::time::Instant>,
) -> Result<HopStream, Verdict> {
    let mut first = Vec::with_capacity(MAX_HEADER + early.len());
    StreamHeader {
        target: target.clone(),
        client,
        deadline_ms: Some(0),
    }
    .emit(&mut first);
    first.extend_from_slice(early);
    hop.open_by(first, deadline).await.map_err(|e| match e {
        HopError::TunnelDown => Verdict::NetworkUnreachable,
        _ => Verdict::Failed,
    })
}

/// When an opener that waits at most `limit` from now gives up.
pub(crate) fn deadline_in(limit: Option<Duration>) -> Option<tokio::time::Instant> {
    limit.map(|l| tokio::time::Instant::now() + l)
}

/// How long a refused client may take over its handshake before it is dropped unanswered.
const REFUSED_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

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
