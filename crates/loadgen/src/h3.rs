//! HTTP/3 over QUIC: the kit's origin as a browser reaches it on UDP (RFC 9114).
//!
//! [`H3Origin`] answers the same requests as the TCP [origin](crate::origin), with the same
//! objects: `GET` of a [`Files`] path (the browser's test site) answers that object, `GET
//! /bytes/N/K` N bytes of object K's [pattern](crate::pattern), anything else `404` (counted in
//! [`H3Origin::not_found`], as the TCP origin counts it). The stack is quinn (QUIC on tokio,
//! TLS 1.3 by rustls with the ring provider) with the `h3` crate over it (`h3-quinn` joins them).
//!
//! TLS needs a certificate: [`TestPki`] makes a certificate authority for one run (rcgen) and a
//! leaf for the names the origin is reached by. Nothing is added to any trust store: a browser
//! is told to accept exactly this leaf's key with Chromium's
//! `--ignore-certificate-errors-spki-list` ([`H3Origin::chromium_flags`] gives it, with
//! `--origin-to-force-quic-on` so the first request already goes over QUIC). A TCP origin
//! advertises this one with an `Alt-Svc` header ([`H3Origin::alt_svc`], set as
//! [`OriginConfig::alt_svc`](crate::origin::OriginConfig::alt_svc)).
//!
//! What the origin saw is counted: QUIC connections completed ([`H3Origin::connections`]) and
//! objects answered in full, each with its path and size ([`H3Origin::served`]), so a test can
//! tell that a browser really used QUIC and received every byte.
//!
//! A request the client cancels (it resets the request stream, or stops the answer's, with
//! `H3_REQUEST_CANCELLED`, RFC 9114 §4.1.1) is counted in [`H3Origin::cancelled`], not as an
//! error: browsers do this as a normal part of loading (a request they no longer need). Such a
//! request is not in [`H3Origin::served`], so a caller that needs every object still sees the
//! one that did not arrive.

use crate::origin::{kit_path, Files, NotFound, RequestTally};
use crate::tls::{Alpn, TestPki, TlsOptions};
use crate::{pattern, Error};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Size of the pieces a `/bytes` body is sent in.
const PIECE: usize = 64 * 1024;

/// One object answered in full over HTTP/3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub path: String,
    pub bytes: u64,
}

#[derive(Default)]
struct Shared {
    /// The `Alt-Svc` value sent with every `200` answer (this origin itself: a browser that
    /// reached it over QUIC keeps knowing it for later visits, as real HTTP/3 servers arrange).
    alt_svc: String,
    connections: AtomicU64,
    served: Mutex<Vec<Served>>,
    not_found: Mutex<NotFound>,
    cancelled: Mutex<Cancelled>,
    errors: Mutex<Vec<String>>,
}

impl Shared {
    fn error(&self, what: String) {
        if let Ok(mut e) = self.errors.lock() {
            e.push(what);
        }
    }

    fn cancelled(&self, what: String) {
        if let Ok(mut c) = self.cancelled.lock() {
            c.note(what);
        }
    }
}

/// Requests the client cancelled (`H3_REQUEST_CANCELLED`): how many, and the first
/// [`NOT_FOUND_KEPT`](crate::origin::NOT_FOUND_KEPT) of them as `GET /path HTTP/3`, or `a request before its head` when the
/// stream was reset before the request arrived.
pub type Cancelled = RequestTally;

/// How answering one request ended, when it did not end with the answer sent.
enum Unanswered {
    /// The client cancelled the request: normal client behaviour.
    Cancelled,
    Failed(String),
}

impl Unanswered {
    fn stream(e: h3::error::StreamError) -> Unanswered {
        if cancelled_by_client(&e) {
            Unanswered::Cancelled
        } else {
            Unanswered::Failed(e.to_string())
        }
    }
}

/// Whether a request stream failed because the client cancelled the request: it reset the
/// stream, or asked the origin to stop sending, with `H3_REQUEST_CANCELLED` (RFC 9114 §4.1.1:
/// "the request or its response is cancelled").
fn cancelled_by_client(e: &h3::error::StreamError) -> bool {
    matches!(
        e,
        h3::error::StreamError::RemoteTerminate { code, .. }
            if *code == h3::error::Code::H3_REQUEST_CANCELLED
    )
}

/// A running HTTP/3 origin; stopped when dropped.
pub struct H3Origin {
    addr: SocketAddr,
    spki_sha256: String,
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
    task: tokio::task::JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl H3Origin {
    /// Serves HTTP/3 on `socket` (bound wherever the caller chose) on the current tokio runtime,
    /// with `ca`'s leaf, answering `files` and the kit's `/bytes` paths.
    pub fn start(
        socket: std::net::UdpSocket,
        ca: &TestPki,
        files: Option<Arc<Files>>,
    ) -> Result<H3Origin, Error> {
        let tls = ca.server_config(TlsOptions {
            alpn: Alpn::Http3,
            resumption: true,
            early_data: false,
        })?;
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| Error::Tls(format!("QUIC TLS configuration: {e}")))?;
        let config = quinn::ServerConfig::with_crypto(Arc::new(quic));
        let addr = socket.local_addr()?;
        let runtime =
            quinn::default_runtime().ok_or_else(|| io::Error::other("no tokio runtime running"))?;
        let endpoint = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(config),
            socket,
            runtime,
        )?;
        let shared = Arc::new(Shared {
            alt_svc: alt_svc_for(addr.port()),
            ..Shared::default()
        });
        let task = tokio::spawn(accept_loop(endpoint.clone(), files, Arc::clone(&shared)));
        Ok(H3Origin {
            addr,
            spki_sha256: ca.spki_sha256().to_owned(),
            shared,
            endpoint,
            task,
            runtime: None,
        })
    }

    /// [`H3Origin::start`] on a runtime thread of its own (for blocking callers, and for a
    /// socket bound inside a network namespace).
    pub fn start_in_thread(
        socket: std::net::UdpSocket,
        ca: &TestPki,
        files: Option<Arc<Files>>,
    ) -> Result<H3Origin, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("h3-origin")
            .enable_all()
            .build()?;
        let mut origin = {
            let _in_rt = rt.enter();
            H3Origin::start(socket, ca, files)?
        };
        origin.runtime = Some(rt);
        Ok(origin)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `Alt-Svc` value a TCP origin on the same host sends to advertise this one.
    pub fn alt_svc(&self) -> String {
        alt_svc_for(self.addr.port())
    }

    /// The Chromium flags that make a browser reach `host` (a name or address the certificate
    /// holds) over QUIC on this origin's port from the first request, and accept this run's
    /// leaf: no trust store is changed (the allow-list is the browser process's own).
    pub fn chromium_flags(&self, host: &str) -> Vec<String> {
        vec![
            format!("--origin-to-force-quic-on={host}:{}", self.addr.port()),
            format!("--ignore-certificate-errors-spki-list={}", self.spki_sha256),
        ]
    }

    /// QUIC connections whose handshake completed.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The objects answered in full so far, in the order they finished.
    pub fn served(&self) -> Vec<Served> {
        crate::snapshot(&self.shared.served)
    }

    /// Requests answered `404 Not Found` (paths the origin does not serve): counted, not errors.
    pub fn not_found(&self) -> NotFound {
        crate::snapshot(&self.shared.not_found)
    }

    /// Requests the client cancelled so far: counted, not errors.
    pub fn cancelled(&self) -> Cancelled {
        crate::snapshot(&self.shared.cancelled)
    }

    /// Failed handshakes, connections and requests so far (a cancelled request is not one).
    pub fn errors(&self) -> Vec<String> {
        crate::snapshot(&self.shared.errors)
    }
}

impl Drop for H3Origin {
    fn drop(&mut self) {
        self.endpoint.close(0u32.into(), b"origin stopped");
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(endpoint: quinn::Endpoint, files: Option<Arc<Files>>, shared: Arc<Shared>) {
    // Connection tasks live in the set: aborting this task (dropping the origin) ends them.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => i,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Some(incoming) = incoming else {
            return;
        };
        let (files, shared) = (files.clone(), Arc::clone(&shared));
        conns.spawn(async move {
            let peer = incoming.remote_address();
            if let Err(e) = serve_connection(incoming, files, &shared).await {
                shared.error(format!("QUIC connection from {peer}: {e}"));
            }
        });
    }
}

async fn serve_connection(
    incoming: quinn::Incoming,
    files: Option<Arc<Files>>,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let conn = incoming.await.map_err(|e| format!("handshake: {e}"))?;
    shared.connections.fetch_add(1, Ordering::SeqCst);
    let quic = conn.clone();
    let mut h3 = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn))
        .await
        .map_err(|e| format!("HTTP/3 set-up: {e}"))?;
    let mut requests = tokio::task::JoinSet::new();
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                let (files, shared) = (files.clone(), Arc::clone(shared));
                requests.spawn(async move {
                    let (req, stream) = match resolver.resolve_request().await {
                        Ok(r) => r,
                        Err(e) if cancelled_by_client(&e) => {
                            return shared.cancelled("a request before its head".into())
                        }
                        Err(e) => return shared.error(format!("request head: {e}")),
                    };
                    let what = format!("{} {} HTTP/3", req.method(), req.uri().path());
                    match answer(req, stream, files.as_deref(), &shared).await {
                        Ok(()) => {}
                        Err(Unanswered::Cancelled) => shared.cancelled(what),
                        Err(Unanswered::Failed(e)) => shared.error(format!("{what}: {e}")),
                    }
                });
            }
            // The client closed the connection (a browser does when it is done).
            Ok(None) => break,
            Err(e) if ended_cleanly(&e, &quic) => break,
            Err(e) => return Err(format!("HTTP/3: {e}")),
        }
    }
    while requests.join_next().await.is_some() {}
    Ok(())
}

/// Whether a connection whose HTTP/3 layer failed with `e` ended without a fault: closed by
/// HTTP/3 with `H3_NO_ERROR`, or by QUIC (`quic`'s close reason) with `NO_ERROR` (Chromium
/// does this as it exits: "70:net error"), or idle until it timed out.
fn ended_cleanly(e: &h3::error::ConnectionError, quic: &quinn::Connection) -> bool {
    e.is_h3_no_error()
        || matches!(
            quic.close_reason(),
            Some(quinn::ConnectionError::TimedOut | quinn::ConnectionError::LocallyClosed)
                | Some(quinn::ConnectionError::ConnectionClosed(
                    quinn::ConnectionClose {
                        error_code: quinn::TransportErrorCode::NO_ERROR,
                        ..
                    }
                ))
        )
}

/// The `Alt-Svc` value advertising an HTTP/3 origin on `port` of the same host (a day).
fn alt_svc_for(port: u16) -> String {
    format!("h3=\":{port}\"; ma=86400")
}

/// Answers one request on its stream.
async fn answer<S>(
    req: Request<()>,
    mut stream: h3::server::RequestStream<S, Bytes>,
    files: Option<&Files>,
    shared: &Shared,
) -> Result<(), Unanswered>
where
    S: h3::quic::BidiStream<Bytes>,
{
    let path = req.uri().path().to_owned();
    let e = Unanswered::stream;
    let ok = |content_type: &str, len: u64| {
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", content_type)
            .header("content-length", len)
            .header("cache-control", "no-store")
            .header("alt-svc", shared.alt_svc.as_str())
            .body(())
            .map_err(|e| Unanswered::Failed(e.to_string()))
    };
    let get = req.method() == http::Method::GET;
    let bytes = if let Some((content_type, body)) = files.filter(|_| get).and_then(|f| f.get(&path))
    {
        stream
            .send_response(ok(content_type, body.len() as u64)?)
            .await
            .map_err(e)?;
        stream
            .send_data(Bytes::copy_from_slice(body))
            .await
            .map_err(e)?;
        body.len() as u64
    } else if let (true, Some(("bytes", n, key))) = (get, kit_path(&path)) {
        stream
            .send_response(ok("application/octet-stream", n)?)
            .await
            .map_err(e)?;
        let mut sent = 0u64;
        while sent < n {
            let k = (n - sent).min(PIECE as u64) as usize;
            let mut piece = vec![0u8; k];
            pattern::fill(key, sent, &mut piece);
            stream.send_data(Bytes::from(piece)).await.map_err(e)?;
            sent += k as u64;
        }
        n
    } else {
        if let Ok(mut nf) = shared.not_found.lock() {
            nf.note(format!("{} {path} HTTP/3", req.method()));
        }
        let resp = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("content-length", 0)
            .body(())
            .map_err(|e| Unanswered::Failed(e.to_string()))?;
        stream.send_response(resp).await.map_err(e)?;
        stream.finish().await.map_err(e)?;
        return Ok(());
    };
    stream.finish().await.map_err(e)?;
    if let Ok(mut s) = shared.served.lock() {
        s.push(Served { path, bytes });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    /// The ALPN token of HTTP/3.
    const ALPN_H3: &[u8] = b"h3";

    /// GETs `path` over HTTP/3 from `origin`, trusting `ca` alone: the status and the body.
    async fn h3_get(origin: &H3Origin, ca: &TestPki, paths: &[&str]) -> Vec<(u16, Vec<u8>)> {
        let (ep, _conn, mut send) = h3_connect(origin, ca).await;
        let mut out = Vec::new();
        for path in paths {
            let req = Request::get(format!("https://127.0.0.1{path}"))
                .body(())
                .unwrap();
            let mut stream = send.send_request(req).await.unwrap();
            stream.finish().await.unwrap();
            let resp = stream.recv_response().await.unwrap();
            let mut body = Vec::new();
            while let Some(mut chunk) = stream.recv_data().await.unwrap() {
                while chunk.has_remaining() {
                    let piece = chunk.chunk();
                    body.extend_from_slice(piece);
                    let k = piece.len();
                    chunk.advance(k);
                }
            }
            out.push((resp.status().as_u16(), body));
        }
        drop(send);
        // Closing the connection ends its driver.
        ep.close(0u32.into(), b"done");
        out
    }

    #[tokio::test]
    async fn objects_and_patterned_bytes_come_over_http3_byte_exact() {
        let ca = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        let mut files = Files::new();
        files.insert("/site/a.css", "text/css", b"body { color: red }".to_vec());
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let origin = H3Origin::start(socket, &ca, Some(Arc::new(files))).unwrap();
        let got = h3_get(
            &origin,
            &ca,
            &["/site/a.css", "/bytes/300001/7", "/favicon.ico"],
        )
        .await;
        assert_eq!(got[0], (200, b"body { color: red }".to_vec()));
        assert_eq!(got[1].0, 200);
        assert_eq!(got[1].1, pattern::bytes(7, 300_001));
        assert_eq!(got[2].0, 404);
        assert_eq!(origin.connections(), 1);
        assert_eq!(
            origin.served(),
            [
                Served {
                    path: "/site/a.css".into(),
                    bytes: 19
                },
                Served {
                    path: "/bytes/300001/7".into(),
                    bytes: 300_001
                }
            ]
        );
        assert_eq!(origin.not_found().first, ["GET /favicon.ico HTTP/3"]);
        assert!(
            origin.alt_svc().starts_with("h3=\":"),
            "{}",
            origin.alt_svc()
        );
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
    }

    /// A QUIC connection to `origin` with HTTP/3 on it (its driver running): the QUIC
    /// connection, for raw streams, and the HTTP/3 request sender.
    async fn h3_connect(
        origin: &H3Origin,
        ca: &TestPki,
    ) -> (
        quinn::Endpoint,
        quinn::Connection,
        h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    ) {
        let tls = ca.client_config(&[ALPN_H3]).unwrap();
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn = ep
            .connect(origin.addr(), "127.0.0.1")
            .unwrap()
            .await
            .unwrap();
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        (ep, conn, send)
    }

    /// Waits until `check` holds of `origin` (at most 5 s).
    async fn until(origin: &H3Origin, check: impl Fn(&H3Origin) -> bool) {
        for _ in 0..500 {
            if check(origin) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Opens a request stream with `conn`, sends the first byte of a HEADERS frame (no request
    /// yet) and resets the stream with `code`.
    async fn reset_before_the_head(conn: &quinn::Connection, code: h3::error::Code) {
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        send.write_all(&[0x01]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        send.reset(quinn::VarInt::from_u64(code.value()).unwrap())
            .unwrap();
    }

    #[tokio::test]
    async fn a_request_the_client_cancels_is_counted_and_not_an_error() {
        let ca = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let origin = H3Origin::start(socket, &ca, None).unwrap();
        let (_ep, conn, mut send) = h3_connect(&origin, &ca).await;
        // Cancelled before its head arrived (as Chromium does to a request it no longer needs).
        reset_before_the_head(&conn, h3::error::Code::H3_REQUEST_CANCELLED).await;
        until(&origin, |o| o.cancelled().count == 1).await;
        // Cancelled during its answer: the client stops the response stream.
        let req = Request::get("https://127.0.0.1/bytes/50000000/3")
            .body(())
            .unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        stream.finish().await.unwrap();
        assert_eq!(stream.recv_response().await.unwrap().status(), 200);
        assert!(stream.recv_data().await.unwrap().is_some());
        stream.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
        until(&origin, |o| o.cancelled().count == 2).await;
        assert_eq!(
            origin.cancelled(),
            Cancelled {
                count: 2,
                first: vec![
                    "a request before its head".into(),
                    "GET /bytes/50000000/3 HTTP/3".into()
                ]
            }
        );
        assert!(origin.served().is_empty(), "{:?}", origin.served());
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
        // Any other reset of a request is still an error.
        reset_before_the_head(&conn, h3::error::Code::H3_INTERNAL_ERROR).await;
        until(&origin, |o| !o.errors().is_empty()).await;
        let errors = origin.errors();
        assert!(
            errors.len() == 1
                && errors[0].contains("request head")
                && errors[0].contains("H3_INTERNAL_ERROR"),
            "{errors:?}"
        );
        assert_eq!(origin.cancelled().count, 2);
    }

    #[tokio::test]
    async fn the_tcp_origin_advertises_the_http3_one() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ca = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        let h3 =
            H3Origin::start(std::net::UdpSocket::bind("127.0.0.1:0").unwrap(), &ca, None).unwrap();
        let tcp = crate::origin::Origin::start(
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            crate::origin::OriginConfig {
                alt_svc: Some(h3.alt_svc()),
                ..Default::default()
            },
        );
        let mut s = tokio::net::TcpStream::connect(tcp.addr()).await.unwrap();
        s.write_all(b"GET /bytes/10 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        let want = format!("\r\nAlt-Svc: h3=\":{}\"; ma=86400\r\n", h3.addr().port());
        assert!(text.contains(&want), "{text}");
    }

    #[test]
    fn each_run_has_its_own_key_and_its_spki_hash() {
        let ca = TestPki::generate(&["127.0.0.1".into(), "origin.test".into()]).unwrap();
        // base64 of 32 bytes: 44 characters ending in one '='.
        assert_eq!(ca.spki_sha256().len(), 44);
        assert!(ca.spki_sha256().ends_with('='));
        assert!(ca.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let other = TestPki::generate(&["127.0.0.1".into()]).unwrap();
        assert_ne!(ca.spki_sha256(), other.spki_sha256(), "a new key per run");
    }
}
