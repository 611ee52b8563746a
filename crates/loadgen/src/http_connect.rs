//! The HTTP CONNECT client (RFC 9110 §9.3.6): the request and the reply head encoded and decoded
//! once, driven by an async (tokio) and a blocking flavour. The head is read byte by byte so that
//! nothing after it (the tunnelled stream) is consumed.

use crate::Error;
use std::io::{Read, Write};
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest reply head accepted.
pub const MAX_HEAD: usize = 8192;

/// The request for `authority` (`host:port`).
pub fn request(authority: &str) -> String {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
}

/// The status code of a reply head (`HTTP/1.1 200 Connection established\r\n...`).
pub fn status(head: &str) -> Result<u16, Error> {
    crate::http::status_code(head.lines().next().unwrap_or(""))
}

fn push(head: &mut Vec<u8>, b: u8) -> Result<bool, Error> {
    head.push(b);
    if head.len() > MAX_HEAD {
        return Err(Error::protocol("HTTP CONNECT reply head longer than 8 KiB"));
    }
    Ok(head.ends_with(b"\r\n\r\n"))
}

fn closed(head: &[u8]) -> Error {
    Error::protocol(format!(
        "connection closed inside the HTTP CONNECT reply head {:?}",
        String::from_utf8_lossy(head)
    ))
}

/// The exchange on a connection to the proxy: the status code and the whole reply head. A
/// refusal is `Ok`; only a broken exchange is an error.
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    authority: &str,
) -> Result<(u16, String), Error> {
    s.write_all(request(authority).as_bytes()).await?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    loop {
        if s.read(&mut b).await? == 0 {
            return Err(closed(&head));
        }
        if push(&mut head, b[0])? {
            break;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    Ok((status(&head)?, head))
}

/// Connects to the proxy and through it to `authority`: the stream once the proxy answers 2xx,
/// else [`Error::ConnectRefused`].
pub async fn connect(proxy: SocketAddr, authority: &str) -> Result<tokio::net::TcpStream, Error> {
    let mut s = tokio::net::TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    match handshake(&mut s, authority).await? {
        (code, _) if (200..300).contains(&code) => Ok(s),
        (code, _) => Err(Error::ConnectRefused(code)),
    }
}

/// The blocking flavour.
pub mod blocking {
    use super::*;

    /// [`super::handshake`] on a blocking stream.
    pub fn handshake<S: Read + Write>(s: &mut S, authority: &str) -> Result<(u16, String), Error> {
        s.write_all(request(authority).as_bytes())?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        loop {
            if s.read(&mut b)? == 0 {
                return Err(closed(&head));
            }
            if push(&mut head, b[0])? {
                break;
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        Ok((status(&head)?, head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse() {
        assert_eq!(
            status("HTTP/1.1 200 Connection established\r\n\r\n").unwrap(),
            200
        );
        assert_eq!(status("HTTP/1.0 403 Forbidden\r\n\r\n").unwrap(), 403);
        assert!(status("SSH-2.0\r\n\r\n").is_err());
        assert!(request("a:1").starts_with("CONNECT a:1 HTTP/1.1\r\n"));
    }
}
