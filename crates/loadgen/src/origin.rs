//! The origin server every benchmark, the demo and the tests fetch from.
//!
//! HTTP/1.1 with keep-alive (what [`crate::http::HttpConn`] and the page fetcher speak):
//! `GET /bytes/N/K` answers N bytes of object K's [pattern](crate::pattern) (K defaults to 0);
//! `POST /upload/N/K` with N bytes of that pattern answers `200` if every byte is right, else
//! `422` (and the origin records the wrong byte); `Connection: close` ends the connection after
//! the answer. A connection that sends nothing is held until its peer closes it (browsers open
//! such speculative connections). Any other well-formed request (a browser's `/favicon.ico`, a
//! `HEAD`) is answered `404 Not Found` and counted ([`Origin::not_found`]): real clients ask for
//! things a test site does not list, and that is not an error of the run.
//!
//! The raw dialect, for tests of the gateway's byte stream where HTTP framing would hide a clean
//! close or a reset, one exchange per connection: `D N [K]\n` answers N pattern bytes of object K
//! and closes; `U N\n` reads N bytes and answers their 8-byte FNV-1a hash (big-endian), then
//! closes; `E\n` echoes everything until the peer's end of stream, then closes; `S N C MS\n`
//! sends N bytes of object 0 paced, C bytes every MS milliseconds, then closes; `H N C MS\n`
//! does the same and then holds the connection until the peer closes it.
//!
//! Over TLS ([`OriginConfig::tls`]: TLS 1.3, see [`crate::tls`]) the origin speaks what ALPN
//! chose: HTTP/2 (`h2`: the same `GET /bytes/N/K`, `POST /upload/N/K` and static objects, one
//! stream each, answered concurrently) or HTTP/1.1 as above (also for a client that offers no
//! ALPN). The raw dialect is not spoken over TLS.
//!
//! The server runs on the caller's tokio runtime ([`Origin::start`]) or on a thread of its own
//! ([`Origin::start_in_thread`], for blocking callers). Dropping it stops it and every
//! connection it holds.

use crate::http::{self, Head};
use crate::pattern::{self, Checker};
use crate::Error;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Called on every accepted connection before it is served (e.g. to set its congestion control);
/// an error closes the connection and is recorded.
pub type SocketHook = Arc<dyn Fn(&TcpStream) -> io::Result<()> + Send + Sync>;

/// How the origin treats its connections.
#[derive(Clone, Default)]
pub struct OriginConfig {
    pub on_accept: Option<SocketHook>,
    /// Static objects answered to `GET` at their paths (e.g. a test web site for a browser),
    /// with their content types; other paths keep the kit's meaning.
    pub files: Option<Arc<Files>>,
    /// An `Alt-Svc` value sent with every `200` answer (e.g. [`crate::h3::H3Origin::alt_svc`]'s
    /// `h3=":443"; ma=86400`), advertising an HTTP/3 origin to browsers.
    pub alt_svc: Option<String>,
    /// Serve TLS with this configuration (its ALPN list decides between HTTP/2 and HTTP/1.1);
    /// `None`: plain HTTP/1.1 and the raw dialect.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// A byte stream the origin serves: a TCP connection or TLS over one.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// Static objects by absolute path (`/site/index.html`), query strings ignored.
#[derive(Debug, Clone, Default)]
pub struct Files {
    objects: std::collections::BTreeMap<String, (String, Vec<u8>)>,
}

impl Files {
    pub fn new() -> Files {
        Files::default()
    }

    /// Adds (or replaces) the object at `path`.
    pub fn insert(&mut self, path: &str, content_type: &str, body: Vec<u8>) {
        self.objects
            .insert(path.to_owned(), (content_type.to_owned(), body));
    }

    /// The content type and body at `path`.
    pub fn get(&self, path: &str) -> Option<(&str, &[u8])> {
        let path = path.split('?').next().unwrap_or(path);
        self.objects
            .get(path)
            .map(|(t, b)| (t.as_str(), b.as_slice()))
    }
}

/// The head reader's buffer: small, because an idle held connection keeps it.
const HEAD_BUFFER: usize = 256;

struct Shared {
    accepted: AtomicU64,
    ended: AtomicU64,
    phase: Mutex<String>,
    errors: Mutex<Vec<String>>,
    not_found: Mutex<NotFound>,
}

/// Requests of one kind an origin counts rather than calls errors (answered 404, or cancelled
/// by the client): how many, and the first few.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestTally {
    pub count: u64,
    /// The first [`NOT_FOUND_KEPT`] of them, as request lines (e.g. `GET /favicon.ico
    /// HTTP/1.1`).
    pub first: Vec<String>,
}

impl RequestTally {
    /// Counts one more, keeping its request line among the first few.
    pub(crate) fn note(&mut self, line: String) {
        self.count += 1;
        if self.first.len() < NOT_FOUND_KEPT {
            self.first.push(line);
        }
    }
}

/// Requests answered 404.
pub type NotFound = RequestTally;

/// How many request lines [`RequestTally::first`] keeps.
pub const NOT_FOUND_KEPT: usize = 16;

/// The largest body of an unknown request the origin reads and discards to keep the connection;
/// a larger one is answered 404 and the connection closed.
const DISCARD_LIMIT: u64 = 1 << 20;

impl Shared {
    fn phase(&self) -> String {
        self.phase.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// A running origin; stopped when dropped.
pub struct Origin {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Origin {
    /// Listens on `addr` (e.g. `127.0.0.1:0`) on the current tokio runtime.
    pub async fn bind(addr: SocketAddr) -> io::Result<Origin> {
        Ok(Origin::start(
            TcpListener::bind(addr).await?,
            OriginConfig::default(),
        ))
    }

    /// Serves `listener` on the current tokio runtime.
    pub fn start(listener: TcpListener, config: OriginConfig) -> Origin {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let shared = Arc::new(Shared {
            accepted: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            phase: Mutex::new("start".into()),
            errors: Mutex::new(Vec::new()),
            not_found: Mutex::new(NotFound::default()),
        });
        let task = tokio::spawn(accept_loop(listener, config, Arc::clone(&shared)));
        Origin {
            addr,
            shared,
            task,
            runtime: None,
        }
    }

    /// Serves a listening `std` socket (bound wherever the caller chose, e.g. inside a network
    /// namespace) on a runtime thread of its own.
    pub fn start_in_thread(
        listener: std::net::TcpListener,
        config: OriginConfig,
    ) -> io::Result<Origin> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("origin")
            .enable_all()
            .build()?;
        listener.set_nonblocking(true)?;
        let mut origin = {
            let _in_rt = rt.enter();
            Origin::start(TcpListener::from_std(listener)?, config)
        };
        origin.runtime = Some(rt);
        Ok(origin)
    }

    /// [`Origin::start_in_thread`] on a fresh loopback port.
    pub fn loopback_in_thread() -> io::Result<Origin> {
        Origin::start_in_thread(
            std::net::TcpListener::bind("127.0.0.1:0")?,
            OriginConfig::default(),
        )
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections that have ended so far, cleanly or not (those that failed are in
    /// [`Origin::errors`]).
    pub fn ended(&self) -> u64 {
        self.shared.ended.load(Ordering::SeqCst)
    }

    /// Names what the caller is doing from now on; connection errors name it.
    pub fn set_phase(&self, phase: &str) {
        if let Ok(mut p) = self.shared.phase.lock() {
            *p = phase.to_owned();
        }
    }

    /// Leaves the origin serving until its runtime ends; its address.
    pub fn detach(self) -> SocketAddr {
        let addr = self.addr;
        std::mem::forget(self);
        addr
    }

    /// The requests answered `404 Not Found` so far (paths the origin does not serve, such as a
    /// browser's `/favicon.ico`): counted, not errors.
    pub fn not_found(&self) -> NotFound {
        crate::snapshot(&self.shared.not_found)
    }

    /// The connection errors so far (a peer's reset, a wrong upload, a malformed request), each
    /// naming the connection and the phases it was opened and failed in.
    pub fn errors(&self) -> Vec<String> {
        crate::snapshot(&self.shared.errors)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, config: OriginConfig, shared: Arc<Shared>) {
    // Connection tasks live in the set: aborting this task (dropping the origin) ends them.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Ok((s, peer)) = accepted else {
            // Out of descriptors, or the like: try again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let number = shared.accepted.fetch_add(1, Ordering::SeqCst) + 1;
        let opened_in = shared.phase();
        let (shared, config) = (Arc::clone(&shared), config.clone());
        conns.spawn(async move {
            let mut answered = 0u64;
            let _ = s.set_nodelay(true);
            let result = match &config.on_accept {
                Some(hook) => hook(&s).map_err(Error::from),
                None => Ok(()),
            };
            let result = match (result, config.tls.clone()) {
                (Ok(()), None) => serve(s, &config, &shared, &mut answered).await,
                (Ok(()), Some(tls)) => serve_tls(s, tls, &config, &shared, &mut answered).await,
                (Err(e), _) => Err(e),
            };
            if let Err(e) = result {
                let now = shared.phase();
                if let Ok(mut v) = shared.errors.lock() {
                    v.push(format!(
                        "connection {number} from {peer} (opened during the {opened_in}, \
                         {answered} request(s) answered) failed during the {now}: {e}"
                    ));
                }
            }
            shared.ended.fetch_add(1, Ordering::SeqCst);
        });
    }
}

/// Completes the TLS handshake and serves what ALPN chose: HTTP/2, or HTTP/1.1 otherwise. A
/// connection that closes before its handshake began (a browser's unused speculative one) is
/// not an error.
async fn serve_tls(
    s: TcpStream,
    tls: Arc<rustls::ServerConfig>,
    config: &OriginConfig,
    shared: &Arc<Shared>,
    answered: &mut u64,
) -> Result<(), Error> {
    let mut first = [0u8; 1];
    if s.peek(&mut first).await? == 0 {
        return Ok(());
    }
    let s = tokio_rustls::TlsAcceptor::from(tls)
        .accept(s)
        .await
        .map_err(|e| Error::Tls(format!("handshake: {e}")))?;
    let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
    if h2 {
        Box::pin(serve_h2(
            s,
            config.files.clone(),
            Arc::clone(shared),
            answered,
        ))
        .await
    } else {
        match serve(s, config, shared, answered).await {
            // Browsers close idle HTTPS connections without TLS's close_notify; a wrong or short
            // upload is still caught by its byte check.
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(()),
            r => r,
        }
    }
}

fn h2_error(e: h2::Error) -> Error {
    match e.get_io() {
        Some(io) => Error::Io(io::Error::new(io.kind(), io.to_string())),
        None => Error::H2(e.to_string()),
    }
}

/// Serves an HTTP/2 connection until the peer ends it: every stream a task of its own.
async fn serve_h2<S: Stream + 'static>(
    s: S,
    files: Option<Arc<Files>>,
    shared: Arc<Shared>,
    answered: &mut u64,
) -> Result<(), Error> {
    let mut conn = match h2::server::handshake(s).await {
        Ok(c) => c,
        // A browser's speculative connection, closed after TLS before it spoke HTTP/2.
        Err(e) if e.is_io() => return Ok(()),
        Err(e) => return Err(h2_error(e)),
    };
    let mut streams = tokio::task::JoinSet::new();
    let mut failed = None;
    loop {
        let next = tokio::select! {
            r = conn.accept() => r,
            Some(done) = streams.join_next(), if !streams.is_empty() => {
                match done {
                    Ok(Ok(())) => *answered += 1,
                    Ok(Err(e)) => { failed.get_or_insert(e); }
                    Err(_) => {}
                }
                continue;
            }
        };
        match next {
            Some(Ok((request, respond))) => {
                let (files, shared) = (files.clone(), Arc::clone(&shared));
                streams.spawn(async move {
                    serve_h2_stream(request, respond, files.as_deref(), &shared).await
                });
            }
            Some(Err(e)) if e.is_go_away() || e.is_io() => break,
            Some(Err(e)) => return Err(h2_error(e)),
            None => break,
        }
    }
    while let Some(done) = streams.join_next().await {
        match done {
            Ok(Ok(())) => *answered += 1,
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One HTTP/2 request: the same meanings as HTTP/1.1's.
async fn serve_h2_stream(
    request: ::http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    files: Option<&Files>,
    shared: &Shared,
) -> Result<(), Error> {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let head = |status: u16, content_type: Option<&str>, len: u64| {
        let mut b = ::http::Response::builder()
            .status(status)
            .header("content-length", len)
            .header("cache-control", "no-store");
        if let Some(t) = content_type {
            b = b.header("content-type", t);
        }
        b.body(()).map_err(|e| Error::H2(e.to_string()))
    };
    if let Some((content_type, body)) = files.filter(|_| method == "GET").and_then(|f| f.get(&path))
    {
        let len = body.len() as u64;
        let send = respond
            .send_response(head(200, Some(content_type), len)?, len == 0)
            .map_err(h2_error)?;
        return send_h2_body(send, len, |offset, out| {
            let start = offset as usize;
            out.copy_from_slice(&body[start..start + out.len()]);
        })
        .await;
    }
    let mut parts = path.trim_start_matches('/').split('/');
    let kind = parts.next().unwrap_or("");
    let fields: Result<Vec<u64>, _> = parts.map(str::parse).collect();
    let target = match (kind, fields.as_deref()) {
        ("bytes" | "upload", Ok([n])) => Some((*n, 0)),
        ("bytes" | "upload", Ok([n, key])) => Some((*n, *key)),
        _ => None,
    };
    match (method.as_str(), kind, target) {
        ("GET", "bytes", Some((n, key))) => {
            let send = respond
                .send_response(head(200, None, n)?, n == 0)
                .map_err(h2_error)?;
            send_h2_body(send, n, |offset, out| pattern::fill(key, offset, out)).await
        }
        ("POST", "upload", Some((n, key))) => {
            let mut body = request.into_body();
            let mut check = Checker::new(key);
            while let Some(piece) = body.data().await {
                let piece = piece.map_err(h2_error)?;
                check.update(&piece);
                let _ = body.flow_control().release_capacity(piece.len());
            }
            let status = match (check.len() == n, check.first_wrong()) {
                (true, None) => 200,
                _ => 422,
            };
            respond
                .send_response(head(status, None, 0)?, true)
                .map_err(h2_error)?;
            match (check.len(), check.first_wrong()) {
                (_, Some(i)) => Err(bad(format!("upload {key}: byte {i} of {n} is wrong"))),
                (got, None) if got != n => Err(bad(format!(
                    "upload {key}: {got} bytes arrived, {n} announced"
                ))),
                _ => Ok(()),
            }
        }
        _ => {
            count_not_found(shared, format!("{method} {path} HTTP/2"));
            respond
                .send_response(head(404, None, 0)?, true)
                .map_err(h2_error)?;
            Ok(())
        }
    }
}

/// Sends a body of `n` bytes, `fill(offset, out)` writing each piece, as the peer's flow control
/// lets it (never more buffered than the peer's window).
async fn send_h2_body(
    mut send: h2::SendStream<bytes::Bytes>,
    n: u64,
    fill: impl Fn(u64, &mut [u8]),
) -> Result<(), Error> {
    let mut sent = 0u64;
    while sent < n {
        send.reserve_capacity((n - sent).min(http::BLOCK as u64) as usize);
        let granted = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(c) => c.map_err(h2_error)?,
            None => return Err(Error::H2("stream closed by the peer".into())),
        };
        if granted == 0 {
            continue;
        }
        let k = (granted as u64).min(n - sent) as usize;
        let mut piece = vec![0u8; k];
        fill(sent, &mut piece);
        sent += k as u64;
        send.send_data(bytes::Bytes::from(piece), sent == n)
            .map_err(h2_error)?;
    }
    Ok(())
}

/// Serves one connection until its peer closes it (or a raw exchange or a closing request ends).
/// The wait for the first line is a small future of its own: an idle held connection costs
/// little; what follows is boxed.
async fn serve<S: Stream>(
    s: S,
    config: &OriginConfig,
    shared: &Shared,
    answered: &mut u64,
) -> Result<(), Error> {
    let mut r = BufReader::with_capacity(HEAD_BUFFER, s);
    let Some(first) = next_request_line(&mut r).await? else {
        return Ok(());
    };
    Box::pin(serve_requests(r, first, config, shared, answered)).await
}

async fn serve_requests<S: Stream>(
    mut r: BufReader<S>,
    mut line: String,
    config: &OriginConfig,
    shared: &Shared,
    answered: &mut u64,
) -> Result<(), Error> {
    loop {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or("");
        if !(line.ends_with("HTTP/1.1") || line.ends_with("HTTP/1.0")) {
            let numbers: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
            *answered += 1;
            return serve_raw(r, verb, &numbers).await;
        }
        let head = http::read_rest_of_head(&mut r, line).await?;
        let close = serve_http(&mut r, &head, config, shared).await?;
        // Over TLS the last records of an answer can wait in the TLS layer's buffer when the
        // socket was full: flushed, or a browser waits for them forever.
        r.get_mut().flush().await?;
        *answered += 1;
        if close {
            r.get_mut().shutdown().await?;
            return Ok(());
        }
        match next_request_line(&mut r).await? {
            Some(next) => line = next,
            None => return Ok(()),
        }
    }
}

/// The next request's first line, or `None` when the client ended the connection between
/// requests. Ending it with a reset is normal there: a browser that exits, or drops an idle
/// keep-alive connection, aborts it (and a split gateway relays the abort as a reset). A reset
/// inside a request or an answer is still an error.
async fn next_request_line<S: Stream>(r: &mut BufReader<S>) -> Result<Option<String>, Error> {
    if r.buffer().is_empty() {
        match r.fill_buf().await {
            Ok([]) => return Ok(None),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    http::read_line(r).await
}

fn bad(what: String) -> Error {
    Error::protocol(what)
}

/// One HTTP request whose head is read; whether the connection ends after it.
async fn serve_http<S: Stream>(
    r: &mut BufReader<S>,
    head: &Head,
    config: &OriginConfig,
    shared: &Shared,
) -> Result<bool, Error> {
    let (files, alt_svc) = (config.files.as_deref(), config.alt_svc.as_deref());
    let mut words = head.first.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let alt_svc = match alt_svc {
        Some(v) => format!("Alt-Svc: {v}\r\n"),
        None => String::new(),
    };
    if let Some((content_type, body)) = files.filter(|_| method == "GET").and_then(|f| f.get(path))
    {
        let w = r.get_mut();
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{alt_svc}\r\n",
            body.len()
        );
        w.write_all(answer.as_bytes()).await?;
        w.write_all(body).await?;
        return Ok(head.close);
    }
    let Some((kind, n, key)) = kit_path(path) else {
        return not_found(r, head, shared).await;
    };
    match (method, kind) {
        ("GET", "bytes") => {
            let w = r.get_mut();
            w.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{alt_svc}\r\n").as_bytes(),
            )
            .await?;
            http::write_pattern(w, key, n).await?;
        }
        ("POST", "upload") => {
            if head.content_length != Some(n) {
                respond(r, "400 Bad Request").await?;
                return Err(bad(format!(
                    "upload of {n} bytes announced Content-Length {:?}",
                    head.content_length
                )));
            }
            let mut check = Checker::new(key);
            read_body(r, n, |piece| check.update(piece)).await?;
            if let Some(i) = check.first_wrong() {
                respond(r, "422 Unprocessable Content").await?;
                return Err(bad(format!("upload {key}: byte {i} of {n} is wrong")));
            }
            respond(r, "200 OK").await?;
        }
        _ => return not_found(r, head, shared).await,
    }
    Ok(head.close)
}

/// A path of the kit's own dialect, `/bytes/N/K` or `/upload/N/K` (K defaults to 0): its kind
/// (`bytes` or `upload`), N and K. Every server of the kit ([`crate::h3`] too) reads paths here.
pub(crate) fn kit_path(path: &str) -> Option<(&str, u64, u64)> {
    let mut parts = path.trim_start_matches('/').split('/');
    let kind = parts.next().unwrap_or("");
    let fields: Result<Vec<u64>, _> = parts.map(str::parse).collect();
    match (kind, fields.as_deref()) {
        ("bytes" | "upload", Ok([n])) => Some((kind, *n, 0)),
        ("bytes" | "upload", Ok([n, key])) => Some((kind, *n, *key)),
        _ => None,
    }
}

/// Answers a request for something the origin does not serve with `404 Not Found` and counts it;
/// the connection goes on (its body, if any, read and discarded) unless the body is too large
/// to skip or the request asked for the close.
async fn not_found<S: Stream>(
    r: &mut BufReader<S>,
    head: &Head,
    shared: &Shared,
) -> Result<bool, Error> {
    count_not_found(shared, head.first.clone());
    let body = head.content_length.unwrap_or(0);
    let close = head.close || body > DISCARD_LIMIT;
    if !close && body > 0 {
        read_body(r, body, |_| ()).await?;
    }
    let connection = if close { "Connection: close\r\n" } else { "" };
    let text = format!("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n{connection}\r\n");
    r.get_mut().write_all(text.as_bytes()).await?;
    Ok(close)
}

/// Counts a request answered 404, keeping the first few request lines.
fn count_not_found(shared: &Shared, line: String) {
    if let Ok(mut n) = shared.not_found.lock() {
        n.note(line);
    }
}

async fn respond<S: Stream>(r: &mut BufReader<S>, status: &str) -> Result<(), Error> {
    let text = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
    r.get_mut().write_all(text.as_bytes()).await?;
    Ok(())
}

/// Reads `n` body bytes (first what the head reader holds), handing each piece to `sink`.
async fn read_body<S: Stream>(
    r: &mut BufReader<S>,
    n: u64,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), Error> {
    let mut got = 0u64;
    let mut buf = vec![0u8; http::BLOCK.min(n as usize).max(1)];
    while got < n {
        let want = (n - got).min(buf.len() as u64) as usize;
        let k = r.read(&mut buf[..want]).await?;
        if k == 0 {
            return Err(Error::Short { got, len: n });
        }
        sink(&buf[..k]);
        got += k as u64;
    }
    Ok(())
}

/// One raw exchange (`D`, `U`, `E`) whose request line (`verb` and its `numbers`) `r` has read;
/// the connection ends after it. Public for test servers that add verbs of their own.
pub async fn serve_raw<S: Stream>(
    mut r: BufReader<S>,
    verb: &str,
    numbers: &[u64],
) -> Result<(), Error> {
    match (verb, numbers) {
        ("D", [n]) | ("D", [n, _]) => {
            let key = numbers.get(1).copied().unwrap_or(0);
            http::write_pattern(r.get_mut(), key, *n).await?;
        }
        ("U", [n]) => {
            let mut h = pattern::FNV_START;
            read_body(&mut r, *n, |piece| h = pattern::fnv_update(h, piece)).await?;
            r.get_mut().write_all(&h.to_be_bytes()).await?;
        }
        ("S" | "H", [n, chunk, ms]) => {
            let every = std::time::Duration::from_millis(*ms);
            let mut block = vec![0u8; (*chunk).clamp(1, 1 << 20) as usize];
            let mut sent = 0u64;
            while sent < *n {
                let k = (n - sent).min(block.len() as u64) as usize;
                pattern::fill(0, sent, &mut block[..k]);
                r.get_mut().write_all(&block[..k]).await?;
                sent += k as u64;
                tokio::time::sleep(every).await;
            }
            if verb == "H" {
                let mut sink = [0u8; 64];
                while r.read(&mut sink).await? > 0 {}
            }
        }
        ("E", []) => {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let k = r.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                r.get_mut().write_all(&buf[..k]).await?;
            }
        }
        _ => return Err(bad(format!("bad raw request {verb:?} {numbers:?}"))),
    }
    r.get_mut().shutdown().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpConn;

    #[tokio::test]
    async fn keep_alive_gets_and_posts_are_checked() {
        let origin = Origin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut c = HttpConn::new(TcpStream::connect(origin.addr()).await.unwrap());
        c.post(3, 300_000).await.unwrap();
        c.get(4, 700_001).await.unwrap();
        c.get(5, 0).await.unwrap();
        // A wrong byte in an upload: 422, and the origin records it.
        let mut body = pattern::bytes(6, 1000);
        body[10] ^= 1;
        let s = c.get_mut();
        s.write_all(b"POST /upload/1000/6 HTTP/1.1\r\nContent-Length: 1000\r\n\r\n")
            .await
            .unwrap();
        s.write_all(&body).await.unwrap();
        let head = c.response().await.unwrap();
        assert_eq!(http::status_code(&head.first).unwrap(), 422);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let errors = origin.errors();
        assert!(
            errors.len() == 1 && errors[0].contains("upload 6: byte 10 of 1000 is wrong"),
            "{errors:?}"
        );
        assert_eq!(origin.accepted(), 1);
    }

    #[tokio::test]
    async fn unknown_paths_are_answered_404_and_counted_not_failed() {
        let origin = Origin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut c = HttpConn::new(TcpStream::connect(origin.addr()).await.unwrap());
        // What a real browser asks for unprompted, then a HEAD and a POST with a body to skip;
        // the same connection then serves a kit request.
        for req in [
            "GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n",
            "HEAD /bytes/10 HTTP/1.1\r\n\r\n",
            "POST /form HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        ] {
            c.get_mut().write_all(req.as_bytes()).await.unwrap();
            let head = c.response().await.unwrap();
            assert_eq!(http::status_code(&head.first).unwrap(), 404, "{req}");
        }
        c.get(1, 1000).await.unwrap();
        let nf = origin.not_found();
        assert_eq!(nf.count, 3);
        assert_eq!(nf.first[0], "GET /favicon.ico HTTP/1.1");
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
        assert_eq!(origin.accepted(), 1);
    }

    #[tokio::test]
    async fn a_reset_between_requests_is_a_normal_end_and_inside_one_an_error() {
        let origin = Origin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        // What a browser does to an idle keep-alive connection when it exits: a reset after the
        // last answer.
        let mut c = HttpConn::new(TcpStream::connect(origin.addr()).await.unwrap());
        c.get(1, 1000).await.unwrap();
        c.get_mut().set_zero_linger().unwrap();
        drop(c);
        // A reset inside a request's head.
        let mut s = TcpStream::connect(origin.addr()).await.unwrap();
        s.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        s.set_zero_linger().unwrap();
        drop(s);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let errors = origin.errors();
        assert!(
            errors.len() == 1 && errors[0].contains("connection 2 "),
            "only the reset inside a request is an error: {errors:?}"
        );
    }

    #[tokio::test]
    async fn a_wrong_byte_in_a_download_fails_it() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = [0u8; 256];
            let _ = s.read(&mut req).await.unwrap();
            let mut body = pattern::bytes(1, 5000);
            body[4321] ^= 0x40;
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
                .await
                .unwrap();
            s.write_all(&body).await.unwrap();
        });
        let mut c = HttpConn::new(TcpStream::connect(addr).await.unwrap());
        let e = c.get(1, 5000).await.unwrap_err();
        assert_eq!(e.to_string(), "object 1: byte 4321 of 5000 is wrong");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn raw_exchanges_end_with_a_close() {
        let origin = Origin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut s = TcpStream::connect(origin.addr()).await.unwrap();
        s.write_all(b"D 5000 9\n").await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, pattern::bytes(9, 5000));

        let mut s = TcpStream::connect(origin.addr()).await.unwrap();
        let data = pattern::bytes(2, 70_000);
        s.write_all(b"U 70000\n").await.unwrap();
        s.write_all(&data).await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, pattern::fnv(&data).to_be_bytes());

        let mut s = TcpStream::connect(origin.addr()).await.unwrap();
        s.write_all(b"S 2500 1000 10\n").await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, pattern::bytes(0, 2500));

        let mut s = TcpStream::connect(origin.addr()).await.unwrap();
        s.write_all(b"E\nhello").await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
    }

    #[test]
    fn the_threaded_origin_serves_blocking_clients() {
        use std::io::{Read, Write};
        let origin = Origin::loopback_in_thread().unwrap();
        let mut s = std::net::TcpStream::connect(origin.addr()).unwrap();
        s.write_all(b"GET /bytes/100/3 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let text = String::from_utf8_lossy(&got[..38]).into_owned();
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"),
            "{text}"
        );
        assert_eq!(&got[got.len() - 100..], &pattern::bytes(3, 100)[..]);
    }
}
