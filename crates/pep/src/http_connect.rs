//! The server side of an HTTP CONNECT proxy (RFC 9110 section 9.3.6): reads a request head,
//! accepts only `CONNECT host:port HTTP/1.x`, and returns the destination as a [`Target`].
//!
//! The head is read up to the first empty line, at most [`MAX_HEAD_LEN`] bytes; lines may end
//! in CRLF or a bare LF, and empty lines before the request line are skipped. Header fields are
//! ignored. The authority is `host:port` where host is a dotted IPv4 address, an IPv6 address
//! in brackets, or a domain name as [`crate::socks::validate_domain`] allows it; the port is 1
//! to 5 decimal digits. A malformed request gets `400 Bad Request`, a method other than CONNECT
//! `405 Method Not Allowed`; the caller sends the success or failure reply for a valid one
//! ([`reply_ok`], [`reply_status`]). Timeouts are the caller's concern.

use crate::socks::Target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Upper bound in bytes on a request head (request line and header fields).
pub const MAX_HEAD_LEN: usize = 8 * 1024;

/// Why a CONNECT request was refused or could not be read.
#[derive(Debug, Error)]
pub enum HttpConnectError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("client closed the connection before the end of the request head")]
    Closed,
    #[error("request head longer than {MAX_HEAD_LEN} bytes")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("method {0:?} not allowed (only CONNECT)")]
    MethodNotAllowed(String),
}

/// The reply to a CONNECT that succeeded; the tunnel starts after it.
pub fn reply_ok() -> &'static [u8] {
    b"HTTP/1.1 200 Connection Established\r\n\r\n"
}

/// A failure reply with `code` and `reason` (such as `403 Forbidden`, `502 Bad Gateway`,
/// `504 Gateway Timeout`), an empty body and `Connection: close`. Control characters in
/// `reason` are replaced by spaces so it cannot break the head.
pub fn reply_status(code: u16, reason: &str) -> Vec<u8> {
    status_with(code, reason, "")
}

fn status_with(code: u16, reason: &str, extra: &str) -> Vec<u8> {
    let reason: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("HTTP/1.1 {code} {reason}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

/// Where the request head ends in `buf` (the index just past its empty line), if it does.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    let mut seen_request_line = false;
    while let Some(offset) = buf.get(start..)?.iter().position(|&b| b == b'\n') {
        let line = buf.get(start..start + offset)?;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        start += offset + 1;
        if line.is_empty() {
            if seen_request_line {
                return Some(start);
            }
        } else {
            seen_request_line = true;
        }
    }
    None
}

/// Parses a complete request head; the error is the status to answer with.
pub fn parse_head(head: &[u8]) -> Result<Target, HttpConnectError> {
    let request_line = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .find(|l| !l.is_empty())
        .ok_or(HttpConnectError::Malformed("no request line"))?;
    let line = std::str::from_utf8(request_line)
        .map_err(|_| HttpConnectError::Malformed("request line is not text"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(authority), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpConnectError::Malformed(
            "request line is not METHOD TARGET VERSION",
        ));
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpConnectError::Malformed(
            "version is not HTTP/1.0 or HTTP/1.1",
        ));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpConnectError::Malformed("bad method"));
    }
    if method != "CONNECT" {
        return Err(HttpConnectError::MethodNotAllowed(method.to_owned()));
    }
    parse_authority(authority)
}

/// Parses `host:port` (IPv6 in brackets).
pub fn parse_authority(authority: &str) -> Result<Target, HttpConnectError> {
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or(HttpConnectError::Malformed("authority has no port"))?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpConnectError::Malformed("bad port"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| HttpConnectError::Malformed("bad port"))?;
    if port == 0 {
        return Err(HttpConnectError::Malformed("port 0"));
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or(HttpConnectError::Malformed("unclosed '[' in authority"))?;
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| HttpConnectError::Malformed("bad IPv6 address"))?;
        return Ok(Target::Ip(SocketAddr::new(IpAddr::V6(ip), port)));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(Target::Ip(SocketAddr::new(IpAddr::V4(ip), port)));
    }
    Target::domain(host, port).map_err(|_| HttpConnectError::Malformed("bad host"))
}

/// Reads a CONNECT request head from `stream` and returns the destination and the bytes the
/// client sent after the head (the start of the tunnelled stream).
///
/// A malformed or oversize head is answered with `400 Bad Request`, another method with
/// `405 Method Not Allowed` (with `Allow: CONNECT`); both end with an error. The caller sends
/// [`reply_ok`] or a [`reply_status`] failure for a valid request.
pub async fn accept<S>(stream: &mut S) -> Result<(Target, Vec<u8>), HttpConnectError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() >= MAX_HEAD_LEN {
            return Err(refuse(stream, HttpConnectError::TooLarge).await);
        }
        let room = (MAX_HEAD_LEN - buf.len()).min(chunk.len());
        let Some(into) = chunk.get_mut(..room) else {
            return Err(HttpConnectError::TooLarge);
        };
        let n = stream.read(into).await?;
        if n == 0 {
            return Err(HttpConnectError::Closed);
        }
        buf.extend_from_slice(into.get(..n).unwrap_or_default());
    };
    let head = buf.get(..end).unwrap_or_default();
    match parse_head(head) {
        Ok(target) => Ok((target, buf.get(end..).unwrap_or_default().to_vec())),
        Err(e) => Err(refuse(stream, e).await),
    }
}

/// Sends the reply `error` calls for and hands the error back (a failure to send is reported
/// instead).
async fn refuse<S>(stream: &mut S, error: HttpConnectError) -> HttpConnectError
where
    S: AsyncWrite + Unpin,
{
    let reply = match &error {
        HttpConnectError::MethodNotAllowed(_) => {
            status_with(405, "Method Not Allowed", "Allow: CONNECT\r\n")
        }
        HttpConnectError::Malformed(_) | HttpConnectError::TooLarge => {
            reply_status(400, "Bad Request")
        }
        _ => return error,
    };
    if let Err(e) = stream.write_all(&reply).await {
        return HttpConnectError::Io(e);
    }
    if let Err(e) = stream.flush().await {
        return HttpConnectError::Io(e);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    async fn run(input: &[u8]) -> (Result<(Target, Vec<u8>), HttpConnectError>, Vec<u8>) {
        let (mut client, mut server) = duplex(64 * 1024);
        client.write_all(input).await.unwrap();
        // End of the client's stream: a head that is not complete by now never will be.
        client.shutdown().await.unwrap();
        let result = accept(&mut server).await;
        drop(server);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        (result, answer)
    }

    #[tokio::test]
    async fn connect_with_leftover_bytes() {
        let (r, answer) = run(
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: t\r\n\r\n\x16\x03\x01hello",
        )
        .await;
        let (target, rest) = r.unwrap();
        assert_eq!(target, Target::domain("example.com", 443).unwrap());
        assert_eq!(rest, b"\x16\x03\x01hello");
        assert!(answer.is_empty(), "accept sends no reply on success");
    }

    #[tokio::test]
    async fn connect_ipv4_ipv6_bare_lf_and_http10() {
        let (r, _) = run(b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            r.unwrap().0,
            Target::Ip("[2001:db8::1]:8443".parse().unwrap())
        );
        let (r, _) = run(b"\r\nCONNECT 192.0.2.1:22 HTTP/1.0\nHost: x\n\n").await;
        let (target, rest) = r.unwrap();
        assert_eq!(target, Target::Ip("192.0.2.1:22".parse().unwrap()));
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn head_split_over_many_writes() {
        let (mut client, mut server) = duplex(64);
        let task = tokio::spawn(async move {
            let r = accept(&mut server).await.map_err(|e| e.to_string());
            (r, server)
        });
        for b in b"CONNECT a.example:80 HTTP/1.1\r\nX: y\r\n\r\n" {
            client.write_all(&[*b]).await.unwrap();
            tokio::task::yield_now().await;
        }
        let (r, _server) = task.await.unwrap();
        let (target, rest) = r.unwrap();
        assert_eq!(target, Target::domain("a.example", 80).unwrap());
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn malformed_requests_get_400() {
        let bad: [&[u8]; 11] = [
            b"CONNECT example.com HTTP/1.1\r\n\r\n",
            b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT example.com:0 HTTP/1.1\r\n\r\n",
            b"CONNECT example.com: HTTP/1.1\r\n\r\n",
            b"CONNECT 2001:db8::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT [2001:db8::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT ex ample.com:443 HTTP/1.1\r\n\r\n",
            b"CONNECT example.com:443 HTTP/2.0\r\n\r\n",
            b"CONNECT example.com:443\r\n\r\n",
            b"CONNECT http://example.com:443/ HTTP/1.1\r\n\r\n",
            b"\xff\xfe garbage\r\n\r\n",
        ];
        for input in bad {
            let (r, answer) = run(input).await;
            assert!(
                matches!(r, Err(HttpConnectError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert!(answer.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
        }
    }

    #[tokio::test]
    async fn other_methods_get_405() {
        let (r, answer) =
            run(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n").await;
        assert!(matches!(r, Err(HttpConnectError::MethodNotAllowed(ref m)) if m == "GET"));
        assert!(answer.starts_with(b"HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(answer.windows(15).any(|w| w == b"Allow: CONNECT\r"));
    }

    #[tokio::test]
    async fn oversize_head_gets_400() {
        let mut input = b"CONNECT example.com:443 HTTP/1.1\r\n".to_vec();
        while input.len() <= MAX_HEAD_LEN {
            input.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        input.extend_from_slice(b"\r\n");
        let (r, answer) = run(&input).await;
        assert!(matches!(r, Err(HttpConnectError::TooLarge)));
        assert!(answer.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    }

    #[tokio::test]
    async fn early_close_is_reported() {
        let (r, answer) = run(b"CONNECT example.com:443 HTTP/1.1\r\n").await;
        assert!(matches!(r, Err(HttpConnectError::Closed)));
        assert!(answer.is_empty());
    }

    #[test]
    fn replies() {
        assert_eq!(reply_ok(), b"HTTP/1.1 200 Connection Established\r\n\r\n");
        assert_eq!(
            reply_status(502, "Bad Gateway"),
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let injected = reply_status(403, "Forbidden\r\nX-Evil: 1");
        assert!(!injected.windows(8).any(|w| w == b"\r\nX-Evil"));
        assert!(
            reply_status(504, "Gateway Timeout").starts_with(b"HTTP/1.1 504 Gateway Timeout\r\n")
        );
    }

    #[test]
    fn garbage_heads_never_panic() {
        // A deterministic generator: many random heads, all answered without a panic.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let len = (x % 300) as usize;
            let mut head = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pick = b"CONNECT :[]0123456789abc.\r\n HTTP/1.\xff";
                head.push(pick[(x % pick.len() as u64) as usize]);
            }
            let _ = head_end(&head);
            let _ = parse_head(&head);
        }
    }
}
