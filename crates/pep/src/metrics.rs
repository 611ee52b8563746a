//! The metrics registry of one side (terminal or gateway): lock-free counters and gauges that
//! many tasks update through an `Arc<Metrics>`, a bounded table of per-connection status
//! entries, and their two renderings — Prometheus text exposition format 0.0.4
//! ([`Metrics::prometheus_text`]) and a JSON document for `/status` ([`Metrics::status_json`]).
//!
//! Directions are named after the satellite hop: `up` is terminal → gateway (client to
//! server), `down` is gateway → terminal, on both sides. "TCP" bytes are payload bytes read
//! from or written to the TCP sockets; "hop" bytes are the UDP payloads of the tunnel (STP and
//! tunnel headers included, IP/UDP headers not).

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Default bound on the per-connection status table.
pub const DEFAULT_MAX_STATUS_ENTRIES: usize = 4096;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn dec(&self) {
        self.add(-1);
    }
    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Which side this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Terminal,
    Gateway,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Terminal => "terminal",
            Side::Gateway => "gateway",
        }
    }
}

/// Direction across the hop: `Up` is terminal → gateway, `Down` gateway → terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

impl Direction {
    pub const ALL: [Direction; 2] = [Direction::Up, Direction::Down];
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// `limits.max_connections` reached.
    ConnectionLimit,
    /// `limits.max_connections_per_terminal` reached.
    TerminalLimit,
    /// `limits.memory_cap_bytes` reached.
    Memory,
    /// The destination policy said no.
    Policy,
    /// Client authentication (SOCKS5 user/password) failed.
    ClientAuth,
    /// The destination could not be resolved or connected to.
    ConnectFailed,
    /// `connect_timeout_s` passed.
    Timeout,
    /// The client or the peer broke the protocol (SOCKS5, HTTP, STP).
    Protocol,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 8] = [
        RefusalReason::ConnectionLimit,
        RefusalReason::TerminalLimit,
        RefusalReason::Memory,
        RefusalReason::Policy,
        RefusalReason::ClientAuth,
        RefusalReason::ConnectFailed,
        RefusalReason::Timeout,
        RefusalReason::Protocol,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::ConnectionLimit => "connection_limit",
            RefusalReason::TerminalLimit => "terminal_limit",
            RefusalReason::Memory => "memory",
            RefusalReason::Policy => "policy",
            RefusalReason::ClientAuth => "client_auth",
            RefusalReason::ConnectFailed => "connect_failed",
            RefusalReason::Timeout => "timeout",
            RefusalReason::Protocol => "protocol",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// STP control packet types counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StpControl {
    Poll,
    Stat,
    Ustat,
}

impl StpControl {
    pub const ALL: [StpControl; 3] = [StpControl::Poll, StpControl::Stat, StpControl::Ustat];
    pub fn as_str(self) -> &'static str {
        match self {
            StpControl::Poll => "poll",
            StpControl::Stat => "stat",
            StpControl::Ustat => "ustat",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Life stage of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Being opened (handshake with the client, STP BGN, or TCP connect at the gateway).
    Connecting,
    /// Relaying in both directions.
    Open,
    /// One direction has finished.
    HalfClosed,
    /// Being torn down.
    Closing,
}

/// One connection's row in `/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionStatus {
    pub id: u64,
    /// The client's address as seen by the terminal (`ip:port`).
    pub client: String,
    /// The destination as asked for (`host:port` or `ip:port`).
    pub destination: String,
    pub state: ConnectionState,
    /// Payload bytes relayed terminal → gateway.
    pub bytes_up: u64,
    /// Payload bytes relayed gateway → terminal.
    pub bytes_down: u64,
    /// The STP connection's smoothed RTT, ms, once measured.
    pub srtt_ms: Option<u32>,
    /// The STP connection's congestion window, bytes.
    pub cwnd_bytes: Option<u64>,
}

/// The registry. Share it as `Arc<Metrics>`; every update is one relaxed atomic operation,
/// except the status table, which takes a short mutex.
#[derive(Debug)]
pub struct Metrics {
    side: Side,
    started: Instant,
    /// Relayed connections open now.
    pub connections_active: Gauge,
    /// Relayed connections accepted since start.
    pub connections_total: Counter,
    connections_refused: [Counter; 8],
    tcp_bytes: [Counter; 2],
    hop_bytes: [Counter; 2],
    stp_sent: [Counter; 3],
    stp_received: [Counter; 3],
    /// STP SDs retransmitted.
    pub stp_retransmissions: Counter,
    /// Tunnel handshakes refused (unknown key, bad MAC, replay) and failed client logins.
    pub auth_failures: Counter,
    /// Status entries not recorded because the table was full.
    pub status_entries_dropped: Counter,
    status: Mutex<BTreeMap<u64, ConnectionStatus>>,
    max_status_entries: usize,
}

impl Metrics {
    pub fn new(side: Side) -> Self {
        Self::with_status_capacity(side, DEFAULT_MAX_STATUS_ENTRIES)
    }

    /// A registry whose status table holds at most `max_status_entries` connections.
    pub fn with_status_capacity(side: Side, max_status_entries: usize) -> Self {
        Metrics {
            side,
            started: Instant::now(),
            connections_active: Gauge::default(),
            connections_total: Counter::default(),
            connections_refused: Default::default(),
            tcp_bytes: Default::default(),
            hop_bytes: Default::default(),
            stp_sent: Default::default(),
            stp_received: Default::default(),
            stp_retransmissions: Counter::default(),
            auth_failures: Counter::default(),
            status_entries_dropped: Counter::default(),
            status: Mutex::new(BTreeMap::new()),
            max_status_entries,
        }
    }

    pub fn side(&self) -> Side {
        self.side
    }

    /// Connections refused for `reason`.
    pub fn refused(&self, reason: RefusalReason) -> &Counter {
        &self.connections_refused[reason.index()]
    }
    /// Payload bytes at the TCP side moving in `dir`.
    pub fn tcp_bytes(&self, dir: Direction) -> &Counter {
        &self.tcp_bytes[dir.index()]
    }
    /// Tunnel datagram bytes on the satellite hop moving in `dir`, headers included.
    pub fn hop_bytes(&self, dir: Direction) -> &Counter {
        &self.hop_bytes[dir.index()]
    }
    /// STP control packets of `kind` this side sent.
    pub fn stp_sent(&self, kind: StpControl) -> &Counter {
        &self.stp_sent[kind.index()]
    }
    /// STP control packets of `kind` this side received.
    pub fn stp_received(&self, kind: StpControl) -> &Counter {
        &self.stp_received[kind.index()]
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnectionStatus>> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records or replaces a connection's status entry. Returns false (and counts the drop)
    /// when the table is full and `entry.id` is not already in it.
    pub fn status_insert(&self, entry: ConnectionStatus) -> bool {
        let mut t = self.table();
        if t.len() >= self.max_status_entries && !t.contains_key(&entry.id) {
            drop(t);
            self.status_entries_dropped.inc();
            return false;
        }
        t.insert(entry.id, entry);
        true
    }

    /// Changes a connection's entry in place; false if there is none.
    pub fn status_update(&self, id: u64, f: impl FnOnce(&mut ConnectionStatus)) -> bool {
        match self.table().get_mut(&id) {
            Some(e) => {
                f(e);
                true
            }
            None => false,
        }
    }

    /// Removes and returns a connection's entry.
    pub fn status_remove(&self, id: u64) -> Option<ConnectionStatus> {
        self.table().remove(&id)
    }

    /// Entries in the status table now.
    pub fn status_len(&self) -> usize {
        self.table().len()
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn prometheus_text(&self) -> String {
        let side = self.side.as_str();
        let mut out = String::with_capacity(4096);
        let mut family =
            |name: &str, kind: &str, help: &str, samples: &[(Vec<(&str, &str)>, String)]| {
                // Writing to a String cannot fail.
                let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
                let _ = writeln!(out, "# TYPE {name} {kind}");
                for (labels, value) in samples {
                    out.push_str(name);
                    out.push('{');
                    let _ = write!(out, "side=\"{side}\"");
                    for (k, v) in labels {
                        let _ = write!(out, ",{k}=\"{}\"", escape_label(v));
                    }
                    let _ = writeln!(out, "}} {value}");
                }
            };
        family(
            "satstp_connections_active",
            "gauge",
            "Relayed connections open now.",
            &[(vec![], self.connections_active.get().to_string())],
        );
        family(
            "satstp_connections_total",
            "counter",
            "Relayed connections accepted since start.",
            &[(vec![], self.connections_total.get().to_string())],
        );
        let refused: Vec<_> = RefusalReason::ALL
            .iter()
            .map(|r| {
                (
                    vec![("reason", r.as_str())],
                    self.refused(*r).get().to_string(),
                )
            })
            .collect();
        family(
            "satstp_connections_refused_total",
            "counter",
            "Connections refused, by reason.",
            &refused,
        );
        let by_dir = |f: &dyn Fn(Direction) -> u64| -> Vec<(Vec<(&str, &str)>, String)> {
            Direction::ALL
                .iter()
                .map(|d| (vec![("direction", d.as_str())], f(*d).to_string()))
                .collect()
        };
        family(
            "satstp_tcp_bytes_total",
            "counter",
            "Payload bytes relayed at the TCP side; up is terminal to gateway.",
            &by_dir(&|d| self.tcp_bytes(d).get()),
        );
        family(
            "satstp_hop_bytes_total",
            "counter",
            "Tunnel datagram bytes on the satellite hop, STP and tunnel headers included; up is terminal to gateway.",
            &by_dir(&|d| self.hop_bytes(d).get()),
        );
        let by_kind = |counters: &[Counter; 3]| -> Vec<(Vec<(&str, &str)>, String)> {
            StpControl::ALL
                .iter()
                .map(|k| {
                    (
                        vec![("type", k.as_str())],
                        counters[k.index()].get().to_string(),
                    )
                })
                .collect()
        };
        family(
            "satstp_stp_control_sent_total",
            "counter",
            "STP POLL, STAT and USTAT packets sent by this side.",
            &by_kind(&self.stp_sent),
        );
        family(
            "satstp_stp_control_received_total",
            "counter",
            "STP POLL, STAT and USTAT packets received by this side.",
            &by_kind(&self.stp_received),
        );
        family(
            "satstp_stp_retransmissions_total",
            "counter",
            "STP SDs retransmitted by this side.",
            &[(vec![], self.stp_retransmissions.get().to_string())],
        );
        family(
            "satstp_auth_failures_total",
            "counter",
            "Refused tunnel handshakes and failed client logins.",
            &[(vec![], self.auth_failures.get().to_string())],
        );
        family(
            "satstp_status_entries",
            "gauge",
            "Connections in the /status table.",
            &[(vec![], self.status_len().to_string())],
        );
        family(
            "satstp_status_entries_dropped_total",
            "counter",
            "Connections left out of the /status table because it was full.",
            &[(vec![], self.status_entries_dropped.get().to_string())],
        );
        out
    }

    /// The `/status` document: side, uptime, the main counters and every connection entry
    /// (ordered by id).
    pub fn status_json(&self) -> serde_json::Value {
        let connections: Vec<serde_json::Value> = self
            .table()
            .values()
            .map(|c| serde_json::to_value(c).unwrap_or(serde_json::Value::Null))
            .collect();
        let refused: serde_json::Map<String, serde_json::Value> = RefusalReason::ALL
            .iter()
            .map(|r| (r.as_str().to_owned(), self.refused(*r).get().into()))
            .collect();
        serde_json::json!({
            "side": self.side.as_str(),
            "uptime_s": self.started.elapsed().as_secs(),
            "connections_active": self.connections_active.get(),
            "connections_total": self.connections_total.get(),
            "connections_refused": refused,
            "tcp_bytes": {
                "up": self.tcp_bytes(Direction::Up).get(),
                "down": self.tcp_bytes(Direction::Down).get(),
            },
            "hop_bytes": {
                "up": self.hop_bytes(Direction::Up).get(),
                "down": self.hop_bytes(Direction::Down).get(),
            },
            "auth_failures": self.auth_failures.get(),
            "status_entries_dropped": self.status_entries_dropped.get(),
            "connections": connections,
        })
    }
}

/// HELP text escaping of the 0.0.4 format: backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Label value escaping of the 0.0.4 format: backslash, double quote and line feed.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn entry(id: u64) -> ConnectionStatus {
        ConnectionStatus {
            id,
            client: "192.0.2.1:40000".into(),
            destination: "example.com:443".into(),
            state: ConnectionState::Open,
            bytes_up: 10,
            bytes_down: 20,
            srtt_ms: Some(600),
            cwnd_bytes: Some(14520),
        }
    }

    /// Checks every line against the exposition format: comments are `# HELP name text` or
    /// `# TYPE name counter|gauge`, each family's TYPE precedes its samples, samples are
    /// `name{label="value",...} number`.
    fn check_exposition(text: &str) -> BTreeMap<String, String> {
        let mut types = BTreeMap::new();
        let mut helped = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(valid_name(name), "{line}");
                assert!(!help.is_empty());
                assert!(helped.insert(name.to_owned()), "duplicate HELP: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(valid_name(name), "{line}");
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert!(helped.contains(name), "TYPE before HELP: {line}");
                assert!(types.insert(name.to_owned(), kind.to_owned()).is_none());
            } else {
                let (name, rest) = line.split_once('{').expect(line);
                assert!(types.contains_key(name), "sample before TYPE: {line}");
                assert!(name.starts_with("satstp_"));
                if types[name] == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                let (labels, value) = rest.rsplit_once("} ").expect(line);
                value.parse::<f64>().expect(line);
                for pair in labels.split(',') {
                    let (k, v) = pair.split_once('=').expect(line);
                    assert!(valid_name(k), "{line}");
                    assert!(
                        v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                        "{line}"
                    );
                }
                assert!(labels.starts_with("side=\""), "{line}");
            }
        }
        assert!(text.ends_with('\n'));
        types
    }

    fn valid_name(s: &str) -> bool {
        let mut b = s.bytes();
        matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
    }

    #[test]
    fn prometheus_format() {
        let m = Metrics::new(Side::Gateway);
        m.connections_active.inc();
        m.connections_total.add(5);
        m.refused(RefusalReason::Policy).add(2);
        m.tcp_bytes(Direction::Down).add(1000);
        m.hop_bytes(Direction::Up).add(77);
        m.stp_sent(StpControl::Stat).add(3);
        m.stp_received(StpControl::Poll).add(4);
        m.stp_retransmissions.inc();
        m.auth_failures.inc();
        let text = m.prometheus_text();
        let types = check_exposition(&text);
        assert_eq!(types["satstp_connections_active"], "gauge");
        assert_eq!(types["satstp_connections_total"], "counter");
        assert!(text.contains("satstp_connections_active{side=\"gateway\"} 1\n"));
        assert!(text.contains("satstp_connections_total{side=\"gateway\"} 5\n"));
        assert!(text
            .contains("satstp_connections_refused_total{side=\"gateway\",reason=\"policy\"} 2\n"));
        assert!(text.contains("satstp_tcp_bytes_total{side=\"gateway\",direction=\"down\"} 1000\n"));
        assert!(text.contains("satstp_hop_bytes_total{side=\"gateway\",direction=\"up\"} 77\n"));
        assert!(text.contains("satstp_stp_control_sent_total{side=\"gateway\",type=\"stat\"} 3\n"));
        assert!(
            text.contains("satstp_stp_control_received_total{side=\"gateway\",type=\"poll\"} 4\n")
        );
        assert!(text.contains("satstp_stp_retransmissions_total{side=\"gateway\"} 1\n"));
        assert!(text.contains("satstp_auth_failures_total{side=\"gateway\"} 1\n"));
        let t = Metrics::new(Side::Terminal).prometheus_text();
        check_exposition(&t);
        assert!(t.contains("satstp_tcp_bytes_total{side=\"terminal\",direction=\"up\"} 0\n"));
    }

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x\\y\nz"), "x\\\\y\\nz");
    }

    #[test]
    fn status_json_shape() {
        let m = Metrics::new(Side::Terminal);
        m.connections_active.add(2);
        assert!(m.status_insert(entry(7)));
        assert!(m.status_insert(ConnectionStatus {
            srtt_ms: None,
            cwnd_bytes: None,
            state: ConnectionState::Connecting,
            ..entry(3)
        }));
        assert!(m.status_update(7, |e| e.bytes_down += 5));
        let v = m.status_json();
        assert_eq!(v["side"], "terminal");
        assert_eq!(v["connections_active"], 2);
        assert!(v["uptime_s"].is_u64());
        assert_eq!(v["connections_refused"]["policy"], 0);
        assert_eq!(v["tcp_bytes"]["up"], 0);
        let conns = v["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 2);
        assert_eq!(conns[0]["id"], 3);
        assert_eq!(conns[0]["state"], "connecting");
        assert!(conns[0]["srtt_ms"].is_null());
        assert_eq!(conns[1]["id"], 7);
        assert_eq!(conns[1]["client"], "192.0.2.1:40000");
        assert_eq!(conns[1]["destination"], "example.com:443");
        assert_eq!(conns[1]["state"], "open");
        assert_eq!(conns[1]["bytes_up"], 10);
        assert_eq!(conns[1]["bytes_down"], 25);
        assert_eq!(conns[1]["srtt_ms"], 600);
        assert_eq!(conns[1]["cwnd_bytes"], 14520);
        assert_eq!(m.status_remove(3).map(|e| e.id), Some(3));
        assert_eq!(m.status_json()["connections"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn status_table_is_bounded() {
        let m = Metrics::with_status_capacity(Side::Gateway, 2);
        assert!(m.status_insert(entry(1)));
        assert!(m.status_insert(entry(2)));
        assert!(!m.status_insert(entry(3)));
        assert!(
            m.status_insert(entry(2)),
            "replacing an entry needs no room"
        );
        assert_eq!(m.status_len(), 2);
        assert_eq!(m.status_entries_dropped.get(), 1);
        assert!(!m.status_update(3, |_| {}));
    }

    #[test]
    fn counters_from_many_threads() {
        let m = Arc::new(Metrics::new(Side::Gateway));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.tcp_bytes(Direction::Up).add(3);
                        m.connections_active.inc();
                        m.connections_active.dec();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.tcp_bytes(Direction::Up).get(), 12_000);
        assert_eq!(m.connections_active.get(), 0);
    }
}
