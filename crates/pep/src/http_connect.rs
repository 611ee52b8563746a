//! The server side of an HTTP proxy: reads a request head and returns what to do as a
//! [`Request`]: `CONNECT host:port HTTP/1.x` (RFC 9110 section 9.3.6) tunnels to the
//! destination; a request in absolute form, `GET http://host[:port]/path HTTP/1.x` (RFC 9112
//! section 3.2.2, what `http_proxy=` clients send for plain HTTP), is forwarded: its head is
//! rewritten to origin form for the destination ([`forward_head`]).
//!
//! The head is read up to the first empty line, at most [`MAX_HEAD_LEN`] bytes; lines may end
//! in CRLF or a bare LF, and empty lines before the request line are skipped. Header fields are
//! ignored. The authority is `host:port` where host is a dotted IPv4 address, an IPv6 address
//! in brackets, or a domain name the stream protocol accepts ([`crate::stream::TargetError`]); the port is 1
//! to 5 decimal digits. A malformed request gets `400 Bad Request`, a request in origin form
//! (`GET /path`, which names no destination) `405 Method Not Allowed`; the caller sends the
//! success or failure reply for a valid CONNECT ([`reply_ok`], [`reply_status`]), and a
//! failure reply for a forwarded request that could not be (its success reply is the
//! destination's). Timeouts are the caller's concern.

use crate::stream::Target;
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
    #[error("method {0:?} not allowed (only CONNECT, or a request with an http:// URL)")]
    MethodNotAllowed(String),
}

/// What a client asked the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port`: a tunnel; the client waits for [`reply_ok`].
    Connect(Target),
    /// A plain HTTP request in absolute form, to forward to `target`: `head` is its head in
    /// origin form ([`forward_head`]), to send before the client's further bytes (its body).
    Forward { target: Target, head: Vec<u8> },
}

impl Request {
    /// The destination.
    pub fn target(&self) -> &Target {
        match self {
            Request::Connect(t) | Request::Forward { target: t, .. } => t,
        }
    }
}

/// Header fields of the client–proxy hop, not forwarded (RFC 9110 section 7.6.1); the forwarded
/// request carries `Connection: close` instead, so the destination's answer ends the client's
/// connection and a next request, perhaps to another host, comes on a new one.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The head to send the destination for a request in absolute form: the request line in
/// origin form (`GET /path?query HTTP/1.1`), the client's header fields but the hop-by-hop ones
/// (and those the `Connection` field names), a `Host` field when the client sent none, and
/// `Connection: close`. `lines` are the head's lines after the request line, without their
/// ends.
pub(crate) fn forward_head<'a>(
    method: &str,
    path: &str,
    version: &str,
    authority: &str,
    lines: impl Iterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let lines: Vec<&[u8]> = lines.filter(|l| !l.is_empty()).collect();
    let name_of = |l: &[u8]| -> String {
        let name = l.split(|&b| b == b':').next().unwrap_or_default();
        String::from_utf8_lossy(name).trim().to_ascii_lowercase()
    };
    // Fields the client's Connection field names are hop-by-hop too.
    let mut drop: Vec<String> = HOP_BY_HOP.iter().map(|s| s.to_string()).collect();
    for l in &lines {
        if name_of(l) == "connection" {
            let value = l.splitn(2, |&b| b == b':').nth(1).unwrap_or_default();
            for token in String::from_utf8_lossy(value).split(',') {
                drop.push(token.trim().to_ascii_lowercase());
            }
        }
    }
    let mut head = format!("{method} {path} {version}\r\n").into_bytes();
    let mut has_host = false;
    for l in lines {
        let name = name_of(l);
        if drop.contains(&name) {
            continue;
        }
        has_host |= name == "host";
        head.extend_from_slice(l);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        head.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// Splits an absolute `http://` URL into its authority (`host[:port]`, port 80 when not
/// given: the destination), the authority as written, and its path and query (`/` when
/// empty).
fn parse_http_url(url: &str) -> Result<(Target, &str, &str), HttpConnectError> {
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some(_) => {
            return Err(HttpConnectError::Malformed(
                "only http:// URLs are forwarded (use CONNECT for others)",
            ))
        }
        None => return Err(HttpConnectError::Malformed("no destination in the request")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(HttpConnectError::Malformed("user information in the URL"));
    }
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.is_empty() { "/" } else { path };
    // Whether the authority ends with a port: after the last ']' (IPv6) there is a ':'.
    let after_host = authority.rsplit(']').next().unwrap_or(authority);
    let target = if after_host.contains(':') {
        parse_authority(authority)?
    } else {
        parse_authority(&format!("{authority}:80"))?
    };
    Ok((target, authority, path))
}

/// The reply to a CONNECT that succeeded; the tunnel starts after it.
pub(crate) fn reply_ok() -> &'static [u8] {
    b"HTTP/1.1 200 Connection Established\r\n\r\n"
}

/// A failure reply with `code` and `reason` (such as `403 Forbidden`, `502 Bad Gateway`,
/// `504 Gateway Timeout`), an empty body and `Connection: close`. Control characters in
/// `reason` are replaced by spaces so it cannot break the head.
pub(crate) fn reply_status(code: u16, reason: &str) -> Vec<u8> {
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
pub fn parse_head(head: &[u8]) -> Result<Request, HttpConnectError> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .skip_while(|l| l.is_empty());
    let request_line = lines
        .next()
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
    if method == "CONNECT" {
        return parse_authority(authority).map(Request::Connect);
    }
    if authority.starts_with('/') || authority == "*" {
        return Err(HttpConnectError::MethodNotAllowed(method.to_owned()));
    }
    let (target, written, path) = parse_http_url(authority)?;
    if line.bytes().any(|b| b.is_ascii_control())
        || lines
            .clone()
            .any(|l| l.iter().any(|&b| b.is_ascii_control() && b != b'\t'))
    {
        return Err(HttpConnectError::Malformed(
            "control character in a header field",
        ));
    }
    let head = forward_head(method, path, version, written, lines);
    Ok(Request::Forward { target, head })
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

/// Reads a request head from `stream` and returns the request and the bytes the client sent
/// after the head (the start of the tunnelled stream, or of a forwarded request's body).
///
/// A malformed or oversize head is answered with `400 Bad Request`, a request in origin form
/// with `405 Method Not Allowed` (with `Allow: CONNECT`); both end with an error. The caller
/// sends [`reply_ok`] or a [`reply_status`] failure for a valid CONNECT, a failure for a
/// forwarded request that could not be.
pub(crate) async fn accept<S>(stream: &mut S) -> Result<(Request, Vec<u8>), HttpConnectError>
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

    async fn run(input: &[u8]) -> (Result<(Request, Vec<u8>), HttpConnectError>, Vec<u8>) {
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
        assert_eq!(
            target,
            Request::Connect(Target::domain("example.com", 443).unwrap())
        );
        assert_eq!(rest, b"\x16\x03\x01hello");
        assert!(answer.is_empty(), "accept sends no reply on success");
    }

    #[tokio::test]
    async fn connect_ipv4_ipv6_bare_lf_and_http10() {
        let (r, _) = run(b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            r.unwrap().0.target(),
            &Target::Ip("[2001:db8::1]:8443".parse().unwrap())
        );
        let (r, _) = run(b"\r\nCONNECT 192.0.2.1:22 HTTP/1.0\nHost: x\n\n").await;
        let (target, rest) = r.unwrap();
        assert_eq!(
            target,
            Request::Connect(Target::Ip("192.0.2.1:22".parse().unwrap()))
        );
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
        assert_eq!(target.target(), &Target::domain("a.example", 80).unwrap());
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn malformed_requests_get_400() {
        let bad: [&[u8]; 18] = [
            b"GET http://example.com/\rX: y HTTP/1.1\r\n\r\n",
            b"GET http://example.com/ HTTP/1.1\r\nX: a\rInjected: b\r\n\r\n",
            b"GET https://example.com/ HTTP/1.1\r\n\r\n",
            b"GET example.com/ HTTP/1.1\r\n\r\n",
            b"GET http://user@example.com/ HTTP/1.1\r\n\r\n",
            b"GET http://example.com:0/ HTTP/1.1\r\n\r\n",
            b"GET http:///x HTTP/1.1\r\n\r\n",
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
    async fn absolute_form_is_forwarded_in_origin_form() {
        let (r, answer) = run(b"POST http://example.com:8080/a/b?c=d#frag HTTP/1.1\r\n\
              Host: example.com:8080\r\nProxy-Connection: keep-alive\r\n\
              Proxy-Authorization: Basic eDp5\r\nConnection: keep-alive, X-Secret\r\n\
              X-Secret: 1\r\nContent-Length: 5\r\nAccept: */*\r\n\r\nhello")
        .await;
        let (req, rest) = r.unwrap();
        assert!(answer.is_empty(), "the destination answers, not the proxy");
        assert_eq!(rest, b"hello");
        let Request::Forward { target, head } = req else {
            panic!("not forwarded: {req:?}");
        };
        assert_eq!(target, Target::domain("example.com", 8080).unwrap());
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 5\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        // No Host field, no path, an IP address, the default port.
        let (r, _) = run(b"GET http://192.0.2.7 HTTP/1.0\n\n").await;
        let Request::Forward { target, head } = r.unwrap().0 else {
            panic!("not forwarded");
        };
        assert_eq!(target, Target::Ip("192.0.2.7:80".parse().unwrap()));
        assert_eq!(
            head,
            b"GET / HTTP/1.0\r\nHost: 192.0.2.7\r\nConnection: close\r\n\r\n"
        );
        let (r, _) = run(b"GET http://[2001:db8::1]/x HTTP/1.1\r\n\r\n").await;
        assert_eq!(
            r.unwrap().0.target(),
            &Target::Ip("[2001:db8::1]:80".parse().unwrap())
        );
    }

    #[tokio::test]
    async fn origin_form_gets_405() {
        let (r, answer) = run(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n").await;
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
