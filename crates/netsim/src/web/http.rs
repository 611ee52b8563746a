//! HTTP in the simulator: a browser-like client that fetches pages (the page's own object, then
//! its embedded objects) and a server that answers each request with the reply size the client
//! drew, over the TCP model or the real STP engine. The client fetches as HTTP/1.0 (a connection
//! per object, up to N at once), persistent HTTP/1.1 (one connection, one request at a time),
//! pipelined HTTP/1.1 (one connection, every embedded request at once) or N parallel persistent
//! connections (browsers use 6). Sizes, objects per page and think times come from
//! [`crate::web::http_model`]. Every transfer's latency (request issued, connection set-up included,
//! to the reply's last byte), every page's load time and the packets each side sent are logged in
//! an [`HttpLog`] the caller keeps.
//!
//! The TCP model carries byte counts, not bytes, so the server learns each request's and reply's
//! sizes from a table the client fills (keyed by the client's address); over STP, which carries
//! real bytes, each request starts with its 8-byte transfer number, the key of the same table.

use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
use crate::sim::{Agent, Ctx, Time};
use crate::stack::{
    earliest, send_stp, send_tcp, stp_deadline, tcp_timer, Route, StpWire, Wakeups,
};
use crate::stp_agent::{socket_of, Framing};
use crate::tcp::{TcpConfig, TcpConnection};
use crate::web::http_model;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};

/// How the client fetches a page's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    /// A new connection per object, at most `parallel` at once (the request half-closes the
    /// client's side, the reply ends with the server's FIN).
    Http10 { parallel: u32 },
    /// Persistent HTTP/1.1: one connection for the page, one request at a time.
    Persistent,
    /// Pipelined HTTP/1.1: one connection; every embedded object requested at once.
    Pipelined,
    /// `connections` persistent connections, each one request at a time.
    Parallel { connections: u32 },
}

impl HttpVersion {
    /// The versions the web reproductions compare: HTTP/1.0 with one and with four
    /// connections, persistent, pipelined, and six parallel persistent connections.
    pub const COMPARED: [HttpVersion; 5] = [
        HttpVersion::Http10 { parallel: 1 },
        HttpVersion::Http10 { parallel: 4 },
        HttpVersion::Persistent,
        HttpVersion::Pipelined,
        HttpVersion::Parallel { connections: 6 },
    ];

    pub fn label(self) -> String {
        match self {
            HttpVersion::Http10 { parallel: 1 } => "HTTP/1.0".into(),
            HttpVersion::Http10 { parallel } => format!("HTTP/1.0 ×{parallel}"),
            HttpVersion::Persistent => "P-HTTP".into(),
            HttpVersion::Pipelined => "pipelined".into(),
            HttpVersion::Parallel { connections } => format!("{connections} persistent"),
        }
    }
}

/// The transport under HTTP.
#[derive(Debug, Clone)]
pub enum Transport {
    Tcp(TcpConfig),
    Stp {
        config: EndpointConfig,
        framing: Framing,
    },
}

/// Which pages the client fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// Objects per page from the model.
    Model,
    /// Every page is `n` objects (sizes from the model); 1 gives single transfers.
    Objects(u32),
    /// Every page is one object whose reply size is drawn from the model restricted to
    /// `min_bytes..=max_bytes` (equal bounds: exactly that size): single transfers of one size
    /// class, to see where a protocol's cost comes from.
    Single { min_bytes: u64, max_bytes: u64 },
    /// Reply sizes as the seeds' own figures imply them ([`http_model::reply_size_seeds`]:
    /// Table 5.3's mean of about 3.9 segments); `objects` per page, or the model's count.
    SeedsImplied { objects: Option<u32> },
}

/// The pause between one page's last byte and the next page's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Think {
    /// The model's think times.
    Model,
    /// A fixed pause.
    Fixed(Time),
    /// A pause drawn uniformly from `[min, max)`: with `max - min` at least one delayed-ACK
    /// tick, each transfer meets BSD's 200 ms tick at a random phase, as a traffic generator on
    /// a real host does (a fixed pause on a jitter-free path locks the phase).
    Uniform { min: Time, max: Time },
}

/// What the client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    pub version: HttpVersion,
    pub pages: Pages,
    pub think: Think,
    /// Pages to fetch (then the client stops).
    pub max_pages: u32,
}

/// One completed transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferLog {
    pub reply_bytes: u64,
    /// From the request (or the connection it opened) to the reply's last byte.
    pub latency_ns: Time,
}

/// One completed page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageLog {
    pub objects: u32,
    /// Reply bytes of the page's objects.
    pub bytes: u64,
    /// Request bytes of the page's objects (HTTP payload, no headers below it).
    pub request_bytes: u64,
    /// From the page's request to the last byte of its last object.
    pub load_ns: Time,
}

/// Everything the client and server observed.
#[derive(Debug, Clone, Default)]
pub struct HttpLog {
    pub transfers: Vec<TransferLog>,
    pub pages: Vec<PageLog>,
    /// Packets (and their wire bytes) each side sent.
    pub client_packets: u64,
    pub client_bytes: u64,
    pub server_packets: u64,
    pub server_bytes: u64,
    /// Connections opened by the client.
    pub connections: u64,
    /// Transport failures seen (STP connection errors).
    pub failures: u64,
}

/// The log shared by a client, its server and the caller.
pub type SharedLog = Rc<RefCell<HttpLog>>;

/// Request and reply sizes the server must know, filled by the client.
#[derive(Debug, Default)]
pub struct Exchanges {
    /// TCP: per client address, the (request, reply) sizes of the requests in order, and
    /// whether the request asks the server to close after the reply (HTTP/1.0).
    by_addr: BTreeMap<Addr, VecDeque<(u64, u64, bool)>>,
    /// STP: per transfer number, the (request, reply) sizes.
    by_id: BTreeMap<u64, (u64, u64)>,
}

/// The size table shared by a client and its server.
pub type SharedExchanges = Rc<RefCell<Exchanges>>;

/// Bytes of the transfer number at the start of an STP request.
const ID_BYTES: u64 = 8;
/// Token of the page timer (connection timers use their deadline as token).
const PAGE: u64 = u64::MAX;
/// Most wake-ups kept pending.
/// Local TCP ports a client cycles through.
const CLIENT_PORTS: u16 = 2000;
const ZEROS: [u8; 16 * 1024] = [0; 16 * 1024];

#[derive(Debug)]
struct Request {
    id: u64,
    reply: u64,
    issued: Time,
    html: bool,
}

enum Link {
    Tcp { conn: Box<TcpConnection>, port: u16 },
    Stp(ConnectionHandle),
}

struct ClientConn {
    link: Link,
    /// Requests sent whose replies are not complete, in order.
    outstanding: VecDeque<Request>,
    /// Reply bytes of the front request received so far.
    got: u64,
    /// HTTP/1.0: closes after its one request.
    one_shot: bool,
    closing: bool,
    done: bool,
    /// STP request bytes not yet accepted by the connection.
    unsent: Vec<u8>,
    /// TCP request bytes waiting for the connection to open (a sockets client writes after
    /// `connect` returns).
    unsent_tcp: u64,
}

struct Page {
    started: Time,
    objects: u32,
    bytes: u64,
    request_bytes: u64,
    /// Embedded objects not yet requested: (request, reply) sizes.
    queue: VecDeque<(u64, u64)>,
    /// Objects whose replies are not complete.
    remaining: u32,
    html_done: bool,
}

/// The browser-like client.
pub struct HttpClient {
    end: HttpEnd,
    server: Addr,
    workload: Workload,
    conns: Vec<ClientConn>,
    page: Option<Page>,
    pages_started: u32,
    next_id: u64,
    next_port: u16,
}

impl HttpClient {
    /// A client at `end` fetching from `server`.
    fn new(end: HttpEnd, server: Addr, workload: Workload) -> Self {
        let next_port = end.port.wrapping_add(1);
        HttpClient {
            end,
            server,
            workload,
            conns: Vec::new(),
            page: None,
            pages_started: 0,
            next_id: 1,
            next_port,
        }
    }

    fn start_page(&mut self, ctx: &mut Ctx<'_>) {
        if self.pages_started >= self.workload.max_pages {
            return;
        }
        self.pages_started += 1;
        let n = match self.workload.pages {
            Pages::Model | Pages::SeedsImplied { objects: None } => {
                http_model::objects_per_page(ctx.rng)
            }
            Pages::SeedsImplied { objects: Some(n) } => n.max(1),
            Pages::Objects(n) => n.max(1),
            Pages::Single { .. } => 1,
        };
        let pages = self.workload.pages;
        let mut objs: VecDeque<(u64, u64)> = (0..n)
            .map(|_| {
                let req = http_model::request_size(ctx.rng);
                let reply = match pages {
                    Pages::Single {
                        min_bytes,
                        max_bytes,
                    } => http_model::reply_size_between(ctx.rng, min_bytes, max_bytes),
                    Pages::SeedsImplied { .. } => http_model::reply_size_seeds(ctx.rng),
                    _ => http_model::reply_size(ctx.rng),
                };
                (req, reply)
            })
            .collect();
        let bytes = objs.iter().map(|o| o.1).sum();
        let request_bytes = objs.iter().map(|o| o.0).sum();
        let Some(html) = objs.pop_front() else { return };
        self.page = Some(Page {
            started: ctx.now,
            objects: n,
            bytes,
            request_bytes,
            queue: objs,
            remaining: n,
            html_done: false,
        });
        let one_shot = matches!(self.workload.version, HttpVersion::Http10 { .. });
        if let Some(i) = self.open(ctx, one_shot) {
            self.request(ctx, i, html, true);
        }
    }

    /// Opens a connection; returns its index.
    fn open(&mut self, ctx: &mut Ctx<'_>, one_shot: bool) -> Option<usize> {
        let link = match &self.end.transport {
            Transport::Tcp(cfg) => {
                let mut port = 0;
                for _ in 0..CLIENT_PORTS {
                    let p = self.next_port;
                    self.next_port = if p >= self.end.port.wrapping_add(CLIENT_PORTS) {
                        self.end.port.wrapping_add(1)
                    } else {
                        p + 1
                    };
                    let busy = self
                        .conns
                        .iter()
                        .any(|c| matches!(c.link, Link::Tcp { port, .. } if port == p));
                    if !busy {
                        port = p;
                        break;
                    }
                }
                if port == 0 {
                    return None;
                }
                ctx.bind(port);
                Link::Tcp {
                    conn: Box::new(TcpConnection::new_active(ctx.now, cfg.clone())),
                    port,
                }
            }
            Transport::Stp { .. } => {
                let ep = self.end.ep.as_mut()?;
                match ep.connect(Instant::from_nanos(ctx.now), socket_of(self.server)) {
                    Ok(h) => Link::Stp(h),
                    Err(_) => {
                        self.end.log.borrow_mut().failures += 1;
                        return None;
                    }
                }
            }
        };
        self.end.log.borrow_mut().connections += 1;
        self.conns.push(ClientConn {
            link,
            outstanding: VecDeque::new(),
            got: 0,
            one_shot,
            closing: false,
            done: false,
            unsent: Vec::new(),
            unsent_tcp: 0,
        });
        Some(self.conns.len() - 1)
    }

    fn request(&mut self, ctx: &mut Ctx<'_>, i: usize, (req, reply): (u64, u64), html: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let node = ctx.node;
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        // HTTP/1.0 over TCP: the server closes after the reply; the client closes after reading
        // it, except over T/TCP, whose client sends its request with the FIN (sendto with
        // MSG_EOF, thesis §2.1.1). Over STP the client ends its direction with the request.
        // A TCP client writes once `connect` has returned (the handshake done); a T/TCP client's
        // sendto opens the connection with the request on the SYN.
        let mut close_now = c.one_shot;
        match &mut c.link {
            Link::Tcp { conn, port } => {
                let ttcp = conn.config().data_on_syn;
                if ttcp || conn.is_established() {
                    conn.write(req);
                } else {
                    c.unsent_tcp += req;
                }
                close_now = c.one_shot && ttcp;
                self.end
                    .table
                    .borrow_mut()
                    .by_addr
                    .entry(Addr { node, port: *port })
                    .or_default()
                    .push_back((req, reply, c.one_shot));
            }
            Link::Stp(_) => {
                let req = req.max(ID_BYTES);
                self.end.table.borrow_mut().by_id.insert(id, (req, reply));
                c.unsent.extend_from_slice(&id.to_le_bytes());
                c.unsent
                    .resize(c.unsent.len() + (req - ID_BYTES) as usize, b'r');
            }
        }
        c.outstanding.push_back(Request {
            id,
            reply,
            issued: ctx.now,
            html,
        });
        if close_now {
            c.closing = true;
            if let Link::Tcp { conn, .. } = &mut c.link {
                conn.close();
            }
        }
        if let (Link::Stp(h), Some(ep)) = (&c.link, self.end.ep.as_mut()) {
            // STP's fast start: the request (and, for HTTP/1.0, the END) goes with the BGN, as
            // a sendto does with T/TCP.
            if let Some(sc) = ep.connection(*h) {
                write_unsent(sc, c);
            }
        }
    }

    /// Hands queued embedded objects to connections as the HTTP version allows.
    fn dispatch(&mut self, ctx: &mut Ctx<'_>) {
        let Some(page) = self.page.as_mut() else {
            return;
        };
        if !page.html_done {
            return;
        }
        let idle = |c: &ClientConn| !c.done && !c.closing && c.outstanding.is_empty();
        match self.workload.version {
            HttpVersion::Http10 { parallel } => loop {
                let busy = self
                    .conns
                    .iter()
                    .filter(|c| !c.outstanding.is_empty())
                    .count();
                if busy >= parallel.max(1) as usize {
                    break;
                }
                let Some(obj) = self.page.as_mut().and_then(|p| p.queue.pop_front()) else {
                    break;
                };
                if let Some(i) = self.open(ctx, true) {
                    self.request(ctx, i, obj, false);
                } else {
                    break;
                }
            },
            HttpVersion::Persistent | HttpVersion::Pipelined => {
                let pipelined = self.workload.version == HttpVersion::Pipelined;
                let Some(i) = self.conns.iter().position(|c| !c.done && !c.closing) else {
                    return;
                };
                while pipelined || self.conns[i].outstanding.is_empty() {
                    let Some(obj) = self.page.as_mut().and_then(|p| p.queue.pop_front()) else {
                        break;
                    };
                    self.request(ctx, i, obj, false);
                }
            }
            HttpVersion::Parallel { connections } => {
                while let Some(i) = self.conns.iter().position(idle) {
                    let Some(obj) = self.page.as_mut().and_then(|p| p.queue.pop_front()) else {
                        return;
                    };
                    self.request(ctx, i, obj, false);
                }
                loop {
                    let open = self.conns.iter().filter(|c| !c.done && !c.closing).count();
                    if open >= connections.max(1) as usize {
                        break;
                    }
                    let Some(obj) = self.page.as_mut().and_then(|p| p.queue.pop_front()) else {
                        break;
                    };
                    if let Some(i) = self.open(ctx, false) {
                        self.request(ctx, i, obj, false);
                    } else {
                        break;
                    }
                }
            }
        }
    }

    /// Counts `n` reply bytes on connection `i`; completes transfers.
    fn received(&mut self, ctx: &mut Ctx<'_>, i: usize, mut n: u64) {
        ctx.metrics.delivered(self.end.flow, n);
        let mut completed = Vec::new();
        if let Some(c) = self.conns.get_mut(i) {
            while n > 0 {
                let Some(front) = c.outstanding.front() else {
                    break;
                };
                let take = n.min(front.reply - c.got);
                c.got += take;
                n -= take;
                if c.got >= front.reply {
                    c.got = 0;
                    if let Some(r) = c.outstanding.pop_front() {
                        completed.push(r);
                    }
                }
            }
            // HTTP/1.0: the client closes once it has read the reply.
            if c.one_shot && !c.closing && c.outstanding.is_empty() {
                c.closing = true;
                if let Link::Tcp { conn, .. } = &mut c.link {
                    conn.close();
                }
            }
        }
        for r in completed {
            self.end.log.borrow_mut().transfers.push(TransferLog {
                reply_bytes: r.reply,
                latency_ns: ctx.now - r.issued,
            });
            let _ = r.id;
            let mut page_done = None;
            if let Some(p) = self.page.as_mut() {
                p.remaining = p.remaining.saturating_sub(1);
                if r.html {
                    p.html_done = true;
                }
                if p.remaining == 0 {
                    page_done = Some(PageLog {
                        objects: p.objects,
                        bytes: p.bytes,
                        request_bytes: p.request_bytes,
                        load_ns: ctx.now - p.started,
                    });
                }
            }
            if let Some(pl) = page_done {
                self.end.log.borrow_mut().pages.push(pl);
                self.page = None;
                self.end_page(ctx);
            } else {
                self.dispatch(ctx);
            }
        }
    }

    fn end_page(&mut self, ctx: &mut Ctx<'_>) {
        for c in &mut self.conns {
            if !c.closing && !c.done {
                c.closing = true;
                if let Link::Tcp { conn, .. } = &mut c.link {
                    conn.close();
                }
            }
        }
        let gap = match self.workload.think {
            Think::Model => http_model::think_time_ns(ctx.rng),
            Think::Fixed(t) => t,
            Think::Uniform { min, max } => {
                let span = max.saturating_sub(min);
                min + (http_model::uniform(ctx.rng) * span as f64) as Time
            }
        };
        if self.pages_started < self.workload.max_pages {
            ctx.timer_at(ctx.now + gap, PAGE);
        }
    }

    /// Runs the client after an input or timer: the transports answer first (as a kernel does
    /// before the application is scheduled: an ACK it owes goes out alone), then the
    /// application reads, writes and closes, then the transports send what that allows.
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        self.transmit(ctx);
        self.application(ctx);
        self.transmit(ctx);
        self.conns.retain(|c| !c.done || !c.outstanding.is_empty());
    }

    fn application(&mut self, ctx: &mut Ctx<'_>) {
        // Reads (and pending request bytes and closes).
        for i in 0..self.conns.len() {
            let ClientConn {
                link, unsent_tcp, ..
            } = &mut self.conns[i];
            let n = match link {
                Link::Tcp { conn, .. } => {
                    if *unsent_tcp > 0 && conn.is_established() {
                        *unsent_tcp -= conn.write(*unsent_tcp);
                    }
                    let n = conn.readable();
                    conn.read(n)
                }
                Link::Stp(h) => {
                    let h = *h;
                    let Some(ep) = self.end.ep.as_mut() else {
                        continue;
                    };
                    let Some(sc) = ep.connection(h) else {
                        self.conns[i].done = true;
                        continue;
                    };
                    write_unsent(sc, &mut self.conns[i]);
                    let mut n = 0u64;
                    while let Ok(Some(b)) = sc.read_chunk(usize::MAX) {
                        n += b.len() as u64;
                    }
                    n
                }
            };
            if n > 0 {
                self.received(ctx, i, n);
            }
        }
        if let Some(ep) = self.end.ep.as_mut() {
            while let Some((h, ev)) = ep.poll_event() {
                if matches!(ev, Event::Closed | Event::Failed(_)) {
                    if matches!(ev, Event::Failed(_)) {
                        self.end.log.borrow_mut().failures += 1;
                    }
                    for c in &mut self.conns {
                        if matches!(c.link, Link::Stp(x) if x == h) {
                            c.done = true;
                        }
                    }
                }
            }
        }
    }

    /// Sends what every connection has ready now and re-arms the wake-up.
    fn transmit(&mut self, ctx: &mut Ctx<'_>) {
        let (server, flow) = (self.server, self.end.flow);
        let mut tally = Tally::default();
        for c in &mut self.conns {
            if let Link::Tcp { conn, port } = &mut c.link {
                let route = Route {
                    port: *port,
                    peer: server,
                    flow,
                    direction: Direction::Reverse,
                };
                tally.send_tcp(ctx, conn, route);
                if c.closing && conn.is_send_complete() && conn.peer_finished() {
                    c.done = true;
                }
            }
        }
        let (packets, bytes) = self.end.finish_pump(ctx, Direction::Reverse, tally);
        let mut log = self.end.log.borrow_mut();
        log.client_packets += packets;
        log.client_bytes += bytes;
    }
}

/// Writes what STP can take of `c`'s unsent requests and ends the client's direction once
/// `c` is closing and everything is written.
fn write_unsent(sc: &mut stp::Connection, c: &mut ClientConn) {
    while !c.unsent.is_empty() {
        match sc.write(&c.unsent) {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                c.unsent.drain(..k);
            }
        }
    }
    if c.closing && c.unsent.is_empty() && !c.done {
        sc.shutdown();
    }
}

/// What both HTTP ends hold alike: their port and flow, the transport, the log and exchange table
/// they share, the STP endpoint (for the STP transport), its framing overhead, the datagram
/// buffer and the wake-up timer.
struct HttpEnd {
    port: u16,
    flow: FlowId,
    transport: Transport,
    log: SharedLog,
    table: SharedExchanges,
    ep: Option<Endpoint>,
    framing: u32,
    buf: Vec<u8>,
    wakeups: Wakeups,
}

impl HttpEnd {
    /// An end on `port`; no endpoint for TCP, for STP an endpoint of the transport's
    /// configuration whose random numbers are seeded from `seed`.
    fn new(
        port: u16,
        flow: FlowId,
        transport: Transport,
        (log, table): (SharedLog, SharedExchanges),
        seed: u64,
    ) -> Result<Self, stp::ConfigError> {
        let (ep, framing) = match &transport {
            Transport::Tcp(_) => (None, 0),
            Transport::Stp { config, framing } => (
                Some(Endpoint::new(
                    config.clone(),
                    Box::new(ChaCha8Rng::seed_from_u64(seed)),
                )?),
                framing.overhead(),
            ),
        };
        Ok(HttpEnd {
            port,
            flow,
            transport,
            log,
            table,
            ep,
            framing,
            buf: Vec::with_capacity(2048),
            wakeups: Wakeups::default(),
        })
    }

    /// Hands an STP datagram from `src` to the endpoint (dropped without one).
    fn handle_datagram(&mut self, now: Time, src: Addr, bytes: &[u8]) {
        if let Some(ep) = self.ep.as_mut() {
            ep.handle_datagram(Instant::from_nanos(now), socket_of(src), bytes);
        }
    }

    /// The wake-up fired at `now`: the endpoint's timers act.
    fn fired(&mut self, now: Time) {
        self.wakeups.fired(now);
        if let Some(ep) = self.ep.as_mut() {
            ep.handle_timeout(Instant::from_nanos(now));
        }
    }

    /// The end of both HTTP ends' pump: sends what the STP endpoint (if any) has ready now in
    /// `direction` (no datagram marked as a retransmission, the endpoint serving many
    /// connections), arms the next wake-up, and returns the packets and bytes sent in this pump
    /// (the TCP connections' `tally` included).
    fn finish_pump(
        &mut self,
        ctx: &mut Ctx<'_>,
        direction: Direction,
        mut tally: Tally,
    ) -> (u64, u64) {
        if let Some(ep) = self.ep.as_mut() {
            let wire = StpWire {
                port: self.port,
                flow: self.flow,
                direction,
                framing: self.framing,
            };
            let s = send_stp(ctx, ep, &mut self.buf, wire, None, &mut None, |_| {});
            tally.packets += s.segments as u64;
            tally.bytes += s.bytes;
            tally.next = earliest(tally.next, stp_deadline(ep, ctx.now));
        }
        self.wakeups.arm(ctx, tally.next);
        (tally.packets, tally.bytes)
    }
}

/// What one pump of an HTTP end has sent so far, and when it must run again.
#[derive(Default)]
struct Tally {
    packets: u64,
    bytes: u64,
    next: Option<Time>,
}

impl Tally {
    /// Sends what `conn` has due now along `route`, counts it, and notes when the connection
    /// wants to run again (now, if it stopped at the per-event cap).
    fn send_tcp(&mut self, ctx: &mut Ctx<'_>, conn: &mut TcpConnection, route: Route) {
        let s = send_tcp(ctx, conn, route, |_, _| {});
        self.packets += s.segments as u64;
        self.bytes += s.bytes;
        if s.more {
            self.next = earliest(self.next, Some(ctx.now));
        }
        self.next = earliest(self.next, conn.poll_timeout());
    }
}

impl Agent for HttpClient {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.metrics.started(self.end.flow, ctx.now);
        self.start_page(ctx);
        self.pump(ctx);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        match &pkt.payload {
            Payload::Tcp(seg) => {
                for c in &mut self.conns {
                    if let Link::Tcp { conn, port } = &mut c.link {
                        if *port == pkt.dst.port {
                            conn.on_segment(ctx.now, seg);
                        }
                    }
                }
            }
            Payload::Stp(bytes) => self.end.handle_datagram(ctx.now, pkt.src, bytes),
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        if token == PAGE {
            self.start_page(ctx);
        } else {
            let now = ctx.now;
            self.end.fired(now);
            for c in &mut self.conns {
                if let Link::Tcp { conn, .. } = &mut c.link {
                    tcp_timer(conn, now);
                }
            }
        }
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ServerConn {
    conn: TcpConnection,
    /// Request bytes read and not yet matched to a request.
    got: u64,
    closed: bool,
}

#[derive(Default)]
struct StpServerConn {
    /// Bytes of the current request's transfer number read so far.
    header: Vec<u8>,
    /// Request bytes still to read after the header.
    body_left: u64,
    /// Reply bytes not yet written.
    reply_left: u64,
    peer_done: bool,
    shut: bool,
}

/// Answers a client's requests over TCP or STP.
pub struct HttpServer {
    end: HttpEnd,
    tcp: BTreeMap<Addr, ServerConn>,
    /// T/TCP: the client hosts whose connection counts this host has cached (RFC 1644 TAO).
    tao_cache: BTreeSet<crate::packet::NodeId>,
    stp: BTreeMap<ConnectionHandle, StpServerConn>,
}

impl HttpServer {
    /// A server at `end`.
    fn new(end: HttpEnd) -> Self {
        HttpServer {
            end,
            tcp: BTreeMap::new(),
            tao_cache: BTreeSet::new(),
            stp: BTreeMap::new(),
        }
    }

    /// Runs the server after an input or timer: the transports answer first (as a kernel does
    /// before the application is scheduled), then the application reads requests, writes
    /// replies and closes, then the transports send what that allows.
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        self.transmit(ctx);
        self.application();
        self.transmit(ctx);
    }

    fn application(&mut self) {
        // TCP: match requests, write replies, close after the client.
        for (addr, sc) in self.tcp.iter_mut() {
            if sc.conn.is_established() {
                // RFC 1644: a host caches a peer's connection count once a connection with it
                // completes its handshake (or passes the TAO test).
                self.tao_cache.insert(addr.node);
            }
            let n = sc.conn.readable();
            sc.got += sc.conn.read(n);
            let mut table = self.end.table.borrow_mut();
            if let Some(q) = table.by_addr.get_mut(addr) {
                while let Some(&(req, reply, close)) = q.front() {
                    if sc.got < req {
                        break;
                    }
                    sc.got -= req;
                    q.pop_front();
                    sc.conn.write(reply);
                    if close && !sc.closed {
                        sc.conn.close();
                        sc.closed = true;
                    }
                }
            }
            drop(table);
            if sc.conn.peer_fin_received() && !sc.closed {
                sc.conn.close();
                sc.closed = true;
            }
        }
        // STP.
        let Some(ep) = self.end.ep.as_mut() else {
            return;
        };
        while let Some(h) = ep.accept() {
            self.stp.insert(h, StpServerConn::default());
        }
        let table = self.end.table.borrow();
        for (&h, st) in self.stp.iter_mut() {
            let Some(c) = ep.connection(h) else { continue };
            loop {
                match c.read_chunk(usize::MAX) {
                    Ok(Some(b)) => {
                        let mut b: &[u8] = &b;
                        while !b.is_empty() {
                            if st.body_left > 0 {
                                let k = (st.body_left as usize).min(b.len());
                                st.body_left -= k as u64;
                                b = &b[k..];
                                continue;
                            }
                            let need = ID_BYTES as usize - st.header.len();
                            let k = need.min(b.len());
                            st.header.extend_from_slice(&b[..k]);
                            b = &b[k..];
                            if st.header.len() == ID_BYTES as usize {
                                let mut id = [0u8; 8];
                                id.copy_from_slice(&st.header);
                                st.header.clear();
                                let (req, reply) = table
                                    .by_id
                                    .get(&u64::from_le_bytes(id))
                                    .copied()
                                    .unwrap_or((ID_BYTES, 0));
                                st.body_left = req - ID_BYTES;
                                st.reply_left += reply;
                            }
                        }
                    }
                    Ok(None) => {
                        st.peer_done = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            while st.reply_left > 0 {
                let k = (st.reply_left as usize).min(ZEROS.len());
                match c.write(&ZEROS[..k]) {
                    Ok(0) | Err(_) => break,
                    Ok(w) => st.reply_left -= w as u64,
                }
            }
            if st.peer_done && st.reply_left == 0 && !st.shut {
                c.shutdown();
                st.shut = true;
            }
        }
        drop(table);
        while let Some((h, ev)) = ep.poll_event() {
            if matches!(ev, Event::Closed | Event::Failed(_)) {
                self.stp.remove(&h);
            }
        }
    }

    /// Sends what every connection has ready now and re-arms the wake-up.
    fn transmit(&mut self, ctx: &mut Ctx<'_>) {
        let mut tally = Tally::default();
        for (addr, sc) in self.tcp.iter_mut() {
            let route = Route {
                port: self.end.port,
                peer: *addr,
                flow: self.end.flow,
                direction: Direction::Forward,
            };
            tally.send_tcp(ctx, &mut sc.conn, route);
        }
        self.tcp
            .retain(|_, sc| !(sc.closed && sc.conn.is_send_complete() && sc.conn.peer_finished()));
        let (packets, bytes) = self.end.finish_pump(ctx, Direction::Forward, tally);
        let mut log = self.end.log.borrow_mut();
        log.server_packets += packets;
        log.server_bytes += bytes;
    }
}

impl Agent for HttpServer {
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        match &pkt.payload {
            Payload::Tcp(seg) => {
                let Transport::Tcp(cfg) = &self.end.transport else {
                    return;
                };
                let fresh = seg.syn && !seg.ack_flag;
                let replace = match self.tcp.get(&pkt.src) {
                    None => fresh,
                    Some(sc) => fresh && sc.closed && sc.conn.is_send_complete(),
                };
                if replace {
                    let mut conn = TcpConnection::new_passive(ctx.now, cfg.clone());
                    conn.set_tao_cached(self.tao_cache.contains(&pkt.src.node));
                    self.tcp.insert(
                        pkt.src,
                        ServerConn {
                            conn,
                            got: 0,
                            closed: false,
                        },
                    );
                }
                if let Some(sc) = self.tcp.get_mut(&pkt.src) {
                    sc.conn.on_segment(ctx.now, seg);
                }
            }
            Payload::Stp(bytes) => self.end.handle_datagram(ctx.now, pkt.src, bytes),
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        let now = ctx.now;
        self.end.fired(now);
        for sc in self.tcp.values_mut() {
            tcp_timer(&mut sc.conn, now);
        }
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Why an HTTP pair could not be added.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(transparent)]
    Stp(#[from] stp::ConfigError),
    #[error(transparent)]
    Sim(#[from] crate::sim::SimError),
}

/// A client and its server on two nodes of `sim`, sharing a fresh log (returned).
#[allow(clippy::too_many_arguments)]
pub fn add_http_pair(
    sim: &mut crate::sim::Sim,
    client_node: crate::packet::NodeId,
    server_node: crate::packet::NodeId,
    flow: FlowId,
    ports: (u16, u16),
    transport: Transport,
    workload: Workload,
    seed: u64,
    start: Time,
) -> Result<SharedLog, HttpError> {
    let log: SharedLog = Rc::new(RefCell::new(HttpLog::default()));
    let table: SharedExchanges = Rc::new(RefCell::new(Exchanges::default()));
    let server_addr = Addr {
        node: server_node,
        port: ports.1,
    };
    let server = HttpServer::new(HttpEnd::new(
        ports.1,
        flow,
        transport.clone(),
        (log.clone(), table.clone()),
        seed ^ 0x5e,
    )?);
    let client = HttpClient::new(
        HttpEnd::new(ports.0, flow, transport, (log.clone(), table), seed ^ 0xc1)?,
        server_addr,
        workload,
    );
    sim.add_agent(server_node, ports.1, 0, Box::new(server))?;
    sim.add_agent(client_node, ports.0, start, Box::new(client))?;
    Ok(log)
}

/// One packet of a traced exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WirePacket {
    /// When it entered the link (after its queue accepted it).
    pub at_ns: Time,
    /// Sent by the client (else by the server).
    pub from_client: bool,
    /// What it carries: TCP flags and data as `SYN+ACK+data+FIN` (`ACK` alone: a pure ACK);
    /// STP packet types in wire order, e.g. `BGNAK+STAT+SD+POLL` (SD: data).
    pub what: String,
    /// Data bytes carried (TCP payload; STP datagram bytes beyond the common header).
    pub data_bytes: u64,
}

/// Describes a TCP segment as `SYN+ACK+data+FIN`.
pub fn describe_tcp(seg: &crate::tcp::TcpSegment) -> String {
    let mut parts = Vec::new();
    if seg.rst {
        parts.push("RST");
    }
    if seg.syn {
        parts.push("SYN");
    }
    if seg.ack_flag {
        parts.push("ACK");
    }
    if seg.len > 0 {
        parts.push("data");
    }
    if seg.fin {
        parts.push("FIN");
    }
    parts.join("+")
}

/// Describes an STP datagram by the packet types it carries, in wire order.
pub fn describe_stp(datagram: &[u8]) -> String {
    use stp::wire::Types;
    let Some(t) = stp::wire::peek_types(datagram) else {
        return "malformed".into();
    };
    let names = [
        (Types::BGN, "BGN"),
        (Types::BGNAK, "BGNAK"),
        (Types::RST, "RST"),
        (Types::POLL, "POLL"),
        (Types::STAT, "STAT"),
        (Types::USTAT, "USTAT"),
        (Types::END, "END"),
        (Types::ENDAK, "ENDAK"),
        (Types::SD, "SD"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(ty, _)| t.contains(*ty))
        .map(|&(_, n)| n)
        .collect();
    v.join("+")
}

/// Runs HTTP/1.0 transfers of a `reply_bytes` reply over a two-host path (`rate_bps` each way,
/// round-trip time `rtt`, no loss) and returns every packet both sides sent for the second
/// one, in order, times from its request: the exchange of one Table 5.3 transfer, set-up and
/// close included. The first transfer warms the hosts up as in a long run (T/TCP's TAO cache
/// holds the client after it); the second starts 5 s after it. Transfers still running 60 s
/// after their start are cut there.
pub fn trace_exchange(
    transport: Transport,
    reply_bytes: u64,
    rate_bps: u64,
    rtt: Time,
) -> Result<Vec<WirePacket>, HttpError> {
    use crate::sim::{Sim, SEC};
    const GAP: Time = 5 * SEC;
    let mut sim = Sim::new(1);
    let client = sim.add_node("client");
    let server = sim.add_node("server");
    let link = |_| linkmodel::LinkConfig::simple(rate_bps, rtt / 2, 1000);
    let up = sim.add_link("client->server", client, server, link(()))?;
    let down = sim.add_link("server->client", server, client, link(()))?;
    sim.compute_routes();
    let trace: Rc<RefCell<Vec<WirePacket>>> = Rc::default();
    for (id, from_client) in [(up, true), (down, false)] {
        let t = trace.clone();
        sim.trace_link(
            id,
            Box::new(move |at, pkt: &Packet| {
                let (what, data_bytes) = match &pkt.payload {
                    Payload::Tcp(seg) => (describe_tcp(seg), u64::from(seg.len)),
                    Payload::Stp(d) => (
                        describe_stp(d),
                        d.len().saturating_sub(stp::wire::HEADER_LEN) as u64,
                    ),
                };
                t.borrow_mut().push(WirePacket {
                    at_ns: at,
                    from_client,
                    what,
                    data_bytes,
                });
            }),
        );
    }
    let workload = Workload {
        version: HttpVersion::Http10 { parallel: 1 },
        pages: Pages::Single {
            min_bytes: reply_bytes,
            max_bytes: reply_bytes,
        },
        think: Think::Fixed(GAP),
        max_pages: 2,
    };
    let log = add_http_pair(
        &mut sim,
        client,
        server,
        crate::packet::FlowId(1),
        (1000, 80),
        transport,
        workload,
        1,
        0,
    )?;
    sim.run_until(60 * SEC);
    let first = log.borrow().pages.first().map(|p| p.load_ns);
    let Some(first) = first else {
        return Ok(Vec::new());
    };
    let start = first + GAP;
    sim.run_until(start + 60 * SEC);
    sim.finish();
    let out = trace
        .borrow()
        .iter()
        .filter(|p| p.at_ns >= start)
        .map(|p| WirePacket {
            at_ns: p.at_ns - start,
            ..p.clone()
        })
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Sim, MS, SEC};
    use crate::tcp::InitialWindow;
    use linkmodel::LinkConfig;

    fn path(rate: u64, one_way: Time) -> (Sim, crate::packet::NodeId, crate::packet::NodeId) {
        let mut sim = Sim::new(3);
        let c = sim.add_node("client");
        let s = sim.add_node("server");
        sim.add_duplex(c, s, LinkConfig::simple(rate, one_way, 1000))
            .unwrap();
        sim.compute_routes();
        (sim, c, s)
    }

    fn run(transport: Transport, workload: Workload, until: Time) -> HttpLog {
        let (mut sim, c, s) = path(100_000_000, 300 * MS);
        let log = add_http_pair(
            &mut sim,
            c,
            s,
            FlowId(1),
            (1000, 80),
            transport,
            workload,
            1,
            0,
        )
        .unwrap();
        sim.run_until(until);
        sim.finish();
        let l = log.borrow().clone();
        l
    }

    fn single(n: u32) -> Workload {
        Workload {
            version: HttpVersion::Http10 { parallel: 1 },
            pages: Pages::Objects(1),
            think: Think::Fixed(SEC),
            max_pages: n,
        }
    }

    #[test]
    fn tcp_transfers_complete_and_ttcp_saves_a_round_trip() {
        let std_tcp = run(Transport::Tcp(TcpConfig::default()), single(20), 200 * SEC);
        assert_eq!(std_tcp.transfers.len(), 20);
        assert_eq!(std_tcp.pages.len(), 20);
        let min_std = std_tcp
            .transfers
            .iter()
            .map(|t| t.latency_ns)
            .min()
            .unwrap();
        assert!(min_std >= 1200 * MS, "two RTTs at least: {min_std}");
        let ttcp = TcpConfig {
            data_on_syn: true,
            initial_window: InitialWindow::FourKss,
            ..TcpConfig::default()
        };
        let fast = run(Transport::Tcp(ttcp), single(20), 200 * SEC);
        assert_eq!(fast.transfers.len(), 20);
        let mean = |l: &HttpLog| {
            l.transfers.iter().map(|t| t.latency_ns as f64).sum::<f64>() / l.transfers.len() as f64
        };
        assert!(
            mean(&fast) < 0.7 * mean(&std_tcp),
            "{} vs {}",
            mean(&fast),
            mean(&std_tcp)
        );
        assert!(
            fast.client_packets + fast.server_packets
                < std_tcp.client_packets + std_tcp.server_packets
        );
    }

    #[test]
    fn stp_transfers_complete() {
        let cfg = EndpointConfig::default();
        let l = run(
            Transport::Stp {
                config: cfg,
                framing: Framing::Ip,
            },
            single(10),
            200 * SEC,
        );
        assert_eq!(l.transfers.len(), 10, "{l:?}");
        assert_eq!(l.failures, 0);
        // Fast start: the request rides on the BGN, so one RTT plus transmission for small
        // replies.
        let min = l.transfers.iter().map(|t| t.latency_ns).min().unwrap();
        assert!(min < 1200 * MS, "{min}");
    }

    #[test]
    fn stp_sends_a_persistent_connections_next_request_at_once() {
        // The next request is issued while the previous reply is read; it must leave in that
        // same instant (it once waited for the connection's next timer, up to half an RTT).
        let w = Workload {
            version: HttpVersion::Persistent,
            pages: Pages::Objects(6),
            think: Think::Fixed(SEC),
            max_pages: 8,
        };
        let l = run(
            Transport::Stp {
                config: EndpointConfig::default(),
                framing: Framing::Ip,
            },
            w,
            400 * SEC,
        );
        assert_eq!(l.pages.len(), 8, "{l:?}");
        // One-datagram replies on an open connection: one RTT (600 ms) plus transmission.
        let small: Vec<Time> = l
            .transfers
            .iter()
            .skip(1)
            .filter(|t| t.reply_bytes <= 1000)
            .map(|t| t.latency_ns)
            .collect();
        assert!(small.len() >= 3, "{:?}", l.transfers);
        for lat in small {
            assert!(lat < 610 * MS, "{lat}");
        }
    }

    #[test]
    fn every_version_loads_pages() {
        for version in HttpVersion::COMPARED {
            for transport in [
                Transport::Tcp(TcpConfig::default()),
                Transport::Stp {
                    config: EndpointConfig::default(),
                    framing: Framing::Ip,
                },
            ] {
                let w = Workload {
                    version,
                    pages: Pages::Objects(8),
                    think: Think::Fixed(SEC),
                    max_pages: 3,
                };
                let stp = matches!(transport, Transport::Stp { .. });
                let l = run(transport, w, 300 * SEC);
                assert_eq!(l.pages.len(), 3, "{version:?} stp={stp}");
                assert_eq!(l.transfers.len(), 24, "{version:?} stp={stp}");
                let conns_per_page = l.connections as f64 / 3.0;
                match version {
                    HttpVersion::Http10 { .. } => assert_eq!(conns_per_page, 8.0),
                    HttpVersion::Persistent | HttpVersion::Pipelined => {
                        assert_eq!(conns_per_page, 1.0)
                    }
                    HttpVersion::Parallel { connections } => {
                        assert!(conns_per_page <= f64::from(connections))
                    }
                }
            }
        }
    }

    #[test]
    fn pipelining_beats_sequential_persistent() {
        let page = |version| {
            let w = Workload {
                version,
                pages: Pages::Objects(10),
                think: Think::Fixed(SEC),
                max_pages: 1,
            };
            run(Transport::Tcp(TcpConfig::default()), w, 300 * SEC).pages[0].load_ns
        };
        let p = page(HttpVersion::Persistent);
        let pipe = page(HttpVersion::Pipelined);
        assert!(pipe < p, "pipelined {pipe} vs persistent {p}");
    }

    /// The Table 5.3 set-up: the seeds' TCP (BSD delayed-ACK tick) over 1.3 Mb/s, 600 ms RTT.
    fn table53_trace(transport: Transport, reply: u64) -> Vec<WirePacket> {
        trace_exchange(transport, reply, 1_300_000, 600 * MS).unwrap()
    }

    fn seeds_tcp(ttcp: bool) -> Transport {
        Transport::Tcp(TcpConfig {
            delayed_ack_on_ticks: true,
            data_on_syn: ttcp,
            ..TcpConfig::default()
        })
    }

    fn whats(trace: &[WirePacket]) -> Vec<String> {
        trace
            .iter()
            .map(|p| format!("{} {}", if p.from_client { "C" } else { "S" }, p.what))
            .collect()
    }

    #[test]
    fn http10_exchanges_packet_by_packet() {
        // Standard TCP, a one-segment reply: the handshake's ACK and the request are separate
        // segments (connect() returns after the kernel's ACK), as are the client's ACK of the
        // server's FIN and its own FIN.
        let t = table53_trace(seeds_tcp(false), 1000);
        assert_eq!(
            whats(&t),
            [
                "C SYN",
                "S SYN+ACK",
                "C ACK",
                "C ACK+data",
                "S ACK+data+FIN",
                "C ACK",
                "C ACK+FIN",
                "S ACK"
            ]
        );
        // The server sends the reply a round trip and a half after the SYN (plus the
        // request's transmission time).
        let reply = t
            .iter()
            .find(|p| !p.from_client && p.data_bytes > 0)
            .unwrap();
        assert!(
            (900 * MS..910 * MS).contains(&reply.at_ns),
            "{}",
            reply.at_ns
        );
        // T/TCP with a warm TAO cache: RFC 1644's three segments.
        let t = table53_trace(seeds_tcp(true), 1000);
        assert_eq!(whats(&t), ["C SYN+data+FIN", "S SYN+ACK+data+FIN", "C ACK"]);
        // T/TCP, three segments: the client's ACK of the SYN-ACK's data waits for the BSD
        // delayed-ACK tick (at most 200 ms).
        let t = table53_trace(seeds_tcp(true), 3 * 1460);
        assert_eq!(
            whats(&t),
            [
                "C SYN+data+FIN",
                "S SYN+ACK+data",
                "C ACK",
                "S ACK+data",
                "S ACK+data+FIN",
                "C ACK"
            ]
        );
        let wait = t[2].at_ns - (t[1].at_ns + 300 * MS);
        assert!(wait <= 200 * MS, "{wait}");
        // T/TCP saves five packets a transfer whatever the reply's size.
        for segments in [1, 2, 4, 7, 12] {
            let reply = segments * 1460 - 100;
            let tcp = table53_trace(seeds_tcp(false), reply).len();
            let ttcp = table53_trace(seeds_tcp(true), reply).len();
            assert_eq!(tcp, ttcp + 5, "{segments} segments");
        }
        // STP's fast start: the request and the END ride on the BGN.
        let mut stp = EndpointConfig::default();
        stp.connection.initial_window = stp::InitialWindow::Packets(1);
        let t = table53_trace(
            Transport::Stp {
                config: stp,
                framing: Framing::Ip,
            },
            1000,
        );
        assert_eq!(t[0].what, "BGN+POLL+END+SD");
        assert!(t[0].from_client);
        let served: u64 = t
            .iter()
            .filter(|p| !p.from_client)
            .map(|p| p.data_bytes)
            .sum();
        assert!(served >= 1000, "{t:?}");
    }
}
