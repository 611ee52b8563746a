//! HTTP/1.1 as the kit speaks it: `GET /bytes/N/K` fetches N bytes of object K's pattern,
//! `POST /upload/N/K` sends them for the origin to check. The client side checks every byte it
//! receives; the head reader is shared with the [`origin`](crate::origin).

use crate::pattern::{self, Checker};
use crate::Error;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// The longest head line accepted, each way.
pub const MAX_LINE: u64 = 8192;
/// Header lines accepted in one head.
pub const MAX_HEADERS: usize = 64;
/// Bytes a body is written and read in.
pub const BLOCK: usize = 64 * 1024;

/// A request or response head: its first line and the headers the kit uses.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub first: String,
    pub content_length: Option<u64>,
    /// `Connection: close` was present.
    pub close: bool,
}

/// Reads a head; `None` at a clean end of stream before its first byte.
pub async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Result<Option<Head>, Error> {
    match read_line(r).await? {
        Some(first) => Ok(Some(read_rest_of_head(r, first).await?)),
        None => Ok(None),
    }
}

/// Reads the header lines of a head whose first line was `first`, through the empty line.
pub async fn read_rest_of_head<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    first: String,
) -> Result<Head, Error> {
    let mut head = Head {
        first,
        ..Head::default()
    };
    for _ in 0..=MAX_HEADERS {
        let line = read_line(r)
            .await?
            .ok_or_else(|| Error::protocol("connection closed inside an HTTP head"))?;
        if line.is_empty() {
            return Ok(head);
        }
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("content-length") {
                head.content_length = Some(
                    v.parse()
                        .map_err(|_| Error::protocol(format!("bad Content-Length {v:?}")))?,
                );
            } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
                head.close = true;
            }
        }
    }
    Err(Error::protocol(format!(
        "more than {MAX_HEADERS} header lines"
    )))
}

/// One line without its line end; `None` at end of stream before any byte.
pub async fn read_line<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Result<Option<String>, Error> {
    let mut buf = Vec::new();
    let n = r.take(MAX_LINE).read_until(b'\n', &mut buf).await?;
    if n == 0 {
        return Ok(None);
    }
    if !buf.ends_with(b"\n") {
        return Err(if n as u64 == MAX_LINE {
            Error::protocol("HTTP head line longer than 8 KiB")
        } else {
            Error::protocol("connection closed inside an HTTP head line")
        });
    }
    let line = String::from_utf8_lossy(&buf);
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
}

/// Writes `n` bytes of object `key`'s pattern.
pub async fn write_pattern<W: AsyncWrite + Unpin>(
    w: &mut W,
    key: u64,
    n: u64,
) -> Result<(), Error> {
    let mut block = vec![0u8; BLOCK.min(n as usize)];
    let mut sent = 0u64;
    while sent < n {
        let k = (n - sent).min(block.len() as u64) as usize;
        pattern::fill(key, sent, &mut block[..k]);
        w.write_all(&block[..k]).await?;
        sent += k as u64;
    }
    Ok(())
}

/// Reads `n` body bytes, checking them against object `key`'s pattern.
pub async fn read_pattern<R: AsyncRead + Unpin>(r: &mut R, key: u64, n: u64) -> Result<(), Error> {
    let mut check = Checker::new(key);
    let mut buf = vec![0u8; BLOCK.min(n as usize).max(1)];
    while check.len() < n {
        let want = (n - check.len()).min(buf.len() as u64) as usize;
        let k = r.read(&mut buf[..want]).await?;
        if k == 0 {
            break;
        }
        check.update(&buf[..k]);
    }
    check.finish(n)
}

/// The client end of one HTTP/1.1 connection to the origin.
pub struct HttpConn<S> {
    r: BufReader<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> HttpConn<S> {
    pub fn new(s: S) -> HttpConn<S> {
        HttpConn {
            r: BufReader::with_capacity(BLOCK, s),
        }
    }

    pub fn get_mut(&mut self) -> &mut S {
        self.r.get_mut()
    }

    /// The connection without its read buffer (empty after a complete exchange), for a caller
    /// that keeps many connections open.
    pub fn into_inner(self) -> S {
        self.r.into_inner()
    }

    /// `GET` object `key` of `n` bytes on this (persistent) connection; every byte checked.
    pub async fn get(&mut self, key: u64, n: u64) -> Result<(), Error> {
        self.fetch(key, n, false).await
    }

    /// `GET` with `Connection: close` (HTTP/1.0 style): the object, then the origin's close.
    pub async fn get_once(mut self, key: u64, n: u64) -> Result<(), Error> {
        self.fetch(key, n, true).await?;
        let mut extra = [0u8; 1];
        match self.r.read(&mut extra).await? {
            0 => Ok(()),
            _ => Err(Error::protocol(format!(
                "bytes after object {key} on a closing connection"
            ))),
        }
    }

    async fn fetch(&mut self, key: u64, n: u64, close: bool) -> Result<(), Error> {
        let close = if close { "Connection: close\r\n" } else { "" };
        let request = format!("GET /bytes/{n}/{key} HTTP/1.1\r\nHost: origin\r\n{close}\r\n");
        self.r.get_mut().write_all(request.as_bytes()).await?;
        let head = self.response().await?;
        let what = || format!("object {key} of {n} bytes");
        let status = status_code(&head.first)?;
        if status != 200 {
            return Err(Error::Status {
                status,
                what: what(),
            });
        }
        if head.content_length != Some(n) {
            return Err(Error::protocol(format!(
                "the origin announced {:?} bytes for {}",
                head.content_length,
                what()
            )));
        }
        read_pattern(&mut self.r, key, n).await
    }

    /// `POST` `n` bytes of object `key`; the origin checks every byte and answers 200 (else
    /// [`Error::Status`], 422 for a wrong byte).
    pub async fn post(&mut self, key: u64, n: u64) -> Result<(), Error> {
        let request = format!(
            "POST /upload/{n}/{key} HTTP/1.1\r\nHost: origin\r\nContent-Length: {n}\r\n\r\n"
        );
        let w = self.r.get_mut();
        w.write_all(request.as_bytes()).await?;
        write_pattern(w, key, n).await?;
        let head = self.response().await?;
        match status_code(&head.first)? {
            200 => Ok(()),
            status => Err(Error::Status {
                status,
                what: format!("the upload of object {key} ({n} bytes)"),
            }),
        }
    }

    /// A response head.
    pub async fn response(&mut self) -> Result<Head, Error> {
        read_head(&mut self.r)
            .await?
            .ok_or_else(|| Error::protocol("connection closed before the response"))
    }
}

/// The code of a status line (`HTTP/1.1 200 OK`).
pub fn status_code(line: &str) -> Result<u16, Error> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|c| c.parse().ok())) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") => Ok(code),
        _ => Err(Error::protocol(format!("bad status line {line:?}"))),
    }
}
