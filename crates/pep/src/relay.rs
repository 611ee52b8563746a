//! Relaying one client TCP connection across the hop, and the small protocol that rides at the
//! start of each STP stream (documented in `docs/gateway.md`):
//!
//! - terminal → gateway, first bytes of the stream (they ride on the BGN): `0x01` (version), then
//!   the destination as `Target::encode` writes it; then the client's data.
//! - gateway → terminal, first byte: the outcome of the gateway's connect, as a SOCKS5 reply code
//!   (0 = connected, 2 = not allowed by policy, 3 = network unreachable, 4 = host unreachable or
//!   timed out, 5 = refused, 1 = other failure); then the server's data if connected.
//!
//! A new connection therefore costs exactly one satellite round trip before the client's first
//! byte reaches the server: the gateway connects while the BGN's answer is on its way back.

use crate::hop::{Hop, HopReader, HopStream, HopWriter, StreamEvent};
use crate::policy::Policy;
use crate::socks::{Reply, Target};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Version byte of the stream header.
pub const RELAY_VERSION: u8 = 1;
/// Most header bytes a gateway waits for before giving up on a stream.
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

/// Terminal side: opens a stream to `target` carrying `early` client bytes, and waits for the
/// gateway's verdict. On success returns the stream (positioned after the status byte) and any
/// server bytes that came with it.
pub async fn open(hop: &Hop, target: &Target, early: &[u8]) -> Result<(HopStream, Vec<u8>), Reply> {
    let mut first = vec![RELAY_VERSION];
    target.encode(&mut first);
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

/// Gateway side: reads the stream header, checks the policy, connects, reports the outcome,
/// then relays. Returns the bytes relayed (client → server, server → client).
pub async fn serve_stream(
    mut stream: HopStream,
    policy: &Policy,
    connect_timeout: Duration,
) -> io::Result<(u64, u64)> {
    // Gather the header (it normally arrives whole, with the BGN).
    let mut head: Vec<u8> = Vec::new();
    let (target, used) = loop {
        if head.len() > 1 {
            if head[0] != RELAY_VERSION {
                stream.abort(1).await;
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unknown relay version",
                ));
            }
            if let Ok((t, n)) = Target::decode(&head[1..]) {
                break (t, n + 1);
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
        match tokio::time::timeout(connect_timeout, TcpStream::connect(a)).await {
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

/// Gateway: serves every stream the hop accepts, each in its own task.
pub async fn serve(mut hop: Hop, policy: std::sync::Arc<Policy>, connect_timeout: Duration) {
    while let Some(stream) = hop.incoming.recv().await {
        let policy = std::sync::Arc::clone(&policy);
        tokio::spawn(async move {
            let _ = serve_stream(stream, &policy, connect_timeout).await;
        });
    }
}

/// Terminal: serves SOCKS5 clients on `listener`, each connection relayed across `hop`.
pub async fn serve_socks(
    listener: tokio::net::TcpListener,
    hop: std::sync::Arc<Hop>,
    auth: std::sync::Arc<crate::socks::SocksAuth>,
) {
    while let Ok((mut tcp, _)) = listener.accept().await {
        let hop = std::sync::Arc::clone(&hop);
        let auth = std::sync::Arc::clone(&auth);
        tokio::spawn(async move {
            let Ok(target) = crate::socks::accept(&mut tcp, &auth).await else {
                return;
            };
            match open(&hop, &target, &[]).await {
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
    while let Ok((mut tcp, _)) = listener.accept().await {
        let hop = std::sync::Arc::clone(&hop);
        tokio::spawn(async move {
            let Ok((target, early)) = crate::http_connect::accept(&mut tcp).await else {
                return;
            };
            match open(&hop, &target, &early).await {
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
