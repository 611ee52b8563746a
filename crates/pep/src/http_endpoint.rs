//! A minimal HTTP/1.1 server for the metrics endpoint: `GET /metrics` (Prometheus text format
//! 0.0.4) and `GET /status` (JSON). One request per connection, then the connection is closed.
//! Everything is bounded: the request head (8 KiB), the time a client may take
//! ([`REQUEST_TIMEOUT`]) and the number of requests served at once ([`MAX_CONCURRENT`]).
//!
//! With a hop, every request first takes a snapshot of it ([`Hop::status`]) into the registry
//! ([`Metrics::observe_hop`]), so hop and STP figures are as of the request.
//!
//! The endpoint has no authentication: bind it to loopback or a management network only
//! (`/status` shows client and destination addresses).

use crate::hop::Hop;
use crate::metrics::Metrics;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Largest request head (request line and headers) accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Time allowed for reading a request and writing its response.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests served at once; further connections are closed unanswered until one finishes.
pub(crate) const MAX_CONCURRENT: usize = 32;

/// Serves `/metrics` and `/status` for `metrics`, refreshed from `hop` when given, on
/// `listener` until `shutdown` completes. Requests in flight when it does are left to finish
/// (each within [`REQUEST_TIMEOUT`]).
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    hop: Option<Arc<Hop>>,
    shutdown: impl Future,
) {
    serve_with_timeout(listener, metrics, hop, shutdown, REQUEST_TIMEOUT).await
}

async fn serve_with_timeout(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    hop: Option<Arc<Hop>>,
    shutdown: impl Future,
    request_timeout: Duration,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                        // Overloaded: drop the connection rather than queue it.
                        continue;
                    };
                    let metrics = Arc::clone(&metrics);
                    let hop = hop.clone();
                    tokio::spawn(async move {
                        let work = handle(stream, &metrics, hop.as_deref());
                        let _ = tokio::time::timeout(request_timeout, work).await;
                        drop(permit);
                    });
                }
                // Out of file descriptors and the like: back off briefly instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
        }
    }
}

/// What a request head asks for, or why it is refused.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Status,
    Error(u16, &'static str),
}

async fn handle(
    mut stream: TcpStream,
    metrics: &Metrics,
    hop: Option<&Hop>,
) -> std::io::Result<()> {
    let route = match read_head(&mut stream).await? {
        Some(head) => route(&head),
        None => Route::Error(431, "request head too large\n"),
    };
    if matches!(route, Route::Metrics | Route::Status) {
        if let Some(status) = match hop {
            Some(h) => h.status().await,
            None => None,
        } {
            metrics.observe_hop(&status);
        }
    }
    let (status, content_type, body) = match route {
        Route::Metrics => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.prometheus_text(),
        ),
        Route::Status => (
            200,
            "application/json",
            format!("{}\n", metrics.status_json()),
        ),
        Route::Error(code, msg) => (code, "text/plain; charset=utf-8", msg.to_owned()),
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        reason_phrase(status),
        body.len(),
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads up to the blank line ending the head; `None` when it exceeds [`MAX_HEAD_BYTES`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let start = buf.len().saturating_sub(3);
        buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
        if let Some(pos) = find_head_end(buf.get(start..).unwrap_or(&[])) {
            let end = start + pos;
            if end > MAX_HEAD_BYTES {
                return Ok(None);
            }
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
    }
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::Error(400, "bad request\n");
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Error(400, "bad request\n");
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
        return Route::Error(400, "bad request\n");
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    let known = matches!(path, "/metrics" | "/status");
    if method != "GET" {
        return if known {
            Route::Error(405, "method not allowed\n")
        } else {
            Route::Error(404, "not found\n")
        };
    }
    match path {
        "/metrics" => Route::Metrics,
        "/status" => Route::Status,
        _ => Route::Error(404, "not found\n"),
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Direction, Side};

    async fn start() -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        start_with_timeout(REQUEST_TIMEOUT).await
    }

    async fn start_with_timeout(
        request_timeout: Duration,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let m = Arc::new(Metrics::new(Side::Terminal));
        m.connections_total.add(3);
        m.tcp_bytes(Direction::Up).add(42);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with_timeout(
            listener,
            m,
            None,
            async move {
                let _ = rx.await;
            },
            request_timeout,
        ));
        (addr, tx, task)
    }

    async fn request(addr: std::net::SocketAddr, raw: &[u8]) -> (String, String, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw).await.unwrap();
        let mut resp = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp))
            .await
            .unwrap()
            .unwrap();
        let resp = String::from_utf8(resp).unwrap();
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().to_owned();
        let content_type = lines
            .find_map(|l| l.strip_prefix("Content-Type: "))
            .unwrap_or("")
            .to_owned();
        let length: usize = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        (status, content_type, body.to_owned())
    }

    #[tokio::test]
    async fn serves_metrics_and_status_over_loopback() {
        let (addr, stop, task) = start().await;

        let (status, ct, body) =
            request(addr, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        assert!(body.contains("# TYPE satstp_connections_total counter\n"));
        assert!(body.contains("satstp_connections_total{side=\"terminal\"} 3\n"));
        assert!(body.contains("satstp_tcp_bytes_total{side=\"terminal\",direction=\"up\"} 42\n"));
        assert!(body.contains("satstp_hop_bytes_total"));
        assert!(body.contains("satstp_stp_packets_sent_total"));

        let (status, ct, body) = request(addr, b"GET /status?x=1 HTTP/1.0\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(ct, "application/json");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["side"], "terminal");
        assert_eq!(v["connections_total"], 3);
        assert!(v["connections"].is_array());

        let (status, _, _) = request(addr, b"GET /nothing HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        let (status, _, _) = request(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
        let (status, _, _) = request(addr, b"garbage\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 400 Bad Request");
        let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
        big.extend_from_slice(b"\r\n\r\n");
        let (status, _, _) = request(addr, &big).await;
        assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn slow_client_is_cut_off() {
        let (addr, stop, task) = start_with_timeout(Duration::from_millis(200)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metr").await.unwrap();
        let mut resp = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut resp))
            .await
            .expect("the server closes the connection after its request timeout")
            .unwrap_or(0);
        assert_eq!(n, 0, "no response to an unfinished request");
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn routing() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET /status HTTP/1.1\r\n\r\n"), Route::Status);
        assert!(matches!(
            route(b"HEAD /status HTTP/1.1\r\n\r\n"),
            Route::Error(405, _)
        ));
        assert!(matches!(
            route(b"GET /status FTP/1.0\r\n\r\n"),
            Route::Error(400, _)
        ));
        assert!(matches!(route(b"\xff\xfe\r\n\r\n"), Route::Error(400, _)));
    }
}
