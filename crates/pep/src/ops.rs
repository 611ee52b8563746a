//! Operations bookkeeping shared by the accept loops of both sides: admission of new
//! connections against the connection limits and the memory cap, the guard ([`Conn`]) that
//! holds an admitted connection's reservation and metrics record until it ends, the idle
//! timeout, and the drain signal of a graceful shutdown.
//!
//! Every relayed connection is admitted once, when it is accepted (terminal: a client TCP
//! connection; gateway: a stream a terminal opened). Admission fails, and the refusal is
//! counted under its reason, when
//!
//! - `max_connections` connections are open already (`connection_limit`);
//! - on a gateway, the opening terminal (identified by its public key) has
//!   `max_connections_per_terminal` open; on a terminal that limit bounds all of its own
//!   connections (`terminal_limit`);
//! - the bytes in use would pass `memory_cap_bytes` with another connection's own charge,
//!   [`CONNECTION_BYTES`] (`memory`).
//!
//! Memory is counted by use ([`MemoryBudget`]): a connection is charged [`CONNECTION_BYTES`]
//! while it lives, and its relay's buffers as they fill — a read buffer from the moment the TCP
//! socket has bytes until the hop has taken them, a chunk from the hop from the moment the hop
//! hands it to the relay until it is written to the TCP socket. When the cap is reached, new
//! connections are refused and the relays stop reading (the TCP receive window and the STP
//! window close) until buffers drain, so the bytes in use never pass the cap. An idle
//! connection costs its [`CONNECTION_BYTES`] only.

use crate::keys::PublicKey;
use crate::metrics::{CloseReason, ConnTrack, Direction, Metrics, RefusalReason, Side};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify, Semaphore};

/// What a connection is charged against `memory_cap_bytes` from admission to its end, whatever
/// it buffers: its share of the relay's state (tasks, records, the stream's entry). The default
/// cap of 512 MiB admits 131,072 idle connections.
pub const CONNECTION_BYTES: u64 = 4 * 1024;
/// Refused connections whose client is being answered at once (a SOCKS5 or HTTP reply needs
/// the client's request first); beyond this, refused connections are closed unanswered.
pub(crate) const MAX_REFUSING: usize = 64;

/// The bytes the relays of one side have in use, against `memory_cap_bytes`: what connections
/// are charged ([`CONNECTION_BYTES`]) and the buffers they fill, returned as they drain. Shared
/// by the side's [`Ops`] and its hop (which charges the chunks it hands to relays).
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    cap: u64,
    used: Mutex<u64>,
    /// Woken whenever bytes are returned.
    room: Notify,
    metrics: Arc<Metrics>,
}

impl MemoryBudget {
    /// A budget of `cap` bytes whose use `metrics` shows (`memory_reserved_bytes`).
    pub(crate) fn new(cap: u64, metrics: Arc<Metrics>) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            cap,
            used: Mutex::new(0),
            room: Notify::new(),
            metrics,
        })
    }

    /// Bytes in use now.
    pub(crate) fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges `n` bytes if that keeps the use within the cap.
    pub(crate) fn try_charge(self: &Arc<Self>, n: u64) -> Option<Charge> {
        {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let after = used.checked_add(n).filter(|&a| a <= self.cap)?;
            *used = after;
        }
        self.metrics
            .memory_reserved_bytes
            .add(i64::try_from(n).unwrap_or(i64::MAX));
        Some(Charge {
            budget: Arc::clone(self),
            bytes: n,
        })
    }

    /// Charges `n` bytes (at most the cap), waiting until they fit.
    pub(crate) async fn charge(self: &Arc<Self>, n: u64) -> Charge {
        let n = n.min(self.cap);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(c) = self.try_charge(n) {
                return c;
            }
            room.await;
        }
    }

    fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            *used = used.saturating_sub(n);
        }
        self.metrics
            .memory_reserved_bytes
            .add(-i64::try_from(n).unwrap_or(i64::MAX));
        self.room.notify_waiters();
    }
}

/// Bytes charged to a [`MemoryBudget`], returned when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Charge {
    /// The bytes charged.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Returns what the charge holds beyond `n` bytes.
    pub(crate) fn shrink_to(&mut self, n: u64) {
        if n < self.bytes {
            self.budget.release(self.bytes - n);
            self.bytes = n;
        }
    }

    /// Ties the charge to `data`: it is returned once every slice of the returned bytes (the
    /// same bytes) is dropped.
    pub(crate) fn attach(self, data: bytes::Bytes) -> bytes::Bytes {
        bytes::Bytes::from_owner(Charged {
            data,
            _charge: self,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// Bytes that hold a [`Charge`] while they live.
struct Charged {
    data: bytes::Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// The limits and timeouts the accept loops enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsConfig {
    /// Most connections open at once.
    pub max_connections: u32,
    /// Gateway: most connections of one terminal at once. Terminal: most of its connections.
    pub max_connections_per_terminal: u32,
    /// Most bytes in use by connections and their relay buffers at once ([`MemoryBudget`]).
    pub memory_cap_bytes: u64,
    /// Close a relayed connection idle both ways this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Terminal: give up opening a stream through the gateway after this long; also bounds a
    /// client's SOCKS5 or HTTP CONNECT handshake (`None`: no bound).
    pub open_timeout: Option<Duration>,
    /// STP hop: the read-ahead bound, bytes read from TCP and not yet sent by STP, all
    /// connections together (`None`: from the hop's rate, [`crate::hop::default_read_ahead_bytes`]).
    pub read_ahead_bytes: Option<u64>,
}

impl OpsConfig {
    /// A daemon's limits and timeouts: `limits` from its configuration, its `idle_timeout_s`
    /// and `connect_timeout_s`.
    pub(crate) fn from_limits(
        limits: &crate::config::Limits,
        idle_timeout_s: u32,
        connect_timeout_s: u32,
    ) -> OpsConfig {
        OpsConfig {
            max_connections: limits.max_connections,
            max_connections_per_terminal: limits.max_connections_per_terminal,
            memory_cap_bytes: limits.memory_cap_bytes,
            idle_timeout: Some(Duration::from_secs(u64::from(idle_timeout_s))),
            open_timeout: Some(Duration::from_secs(u64::from(connect_timeout_s))),
            read_ahead_bytes: limits.read_ahead_bytes,
        }
    }

    /// No limits, no timeouts.
    pub fn unlimited() -> OpsConfig {
        OpsConfig {
            max_connections: u32::MAX,
            max_connections_per_terminal: u32::MAX,
            memory_cap_bytes: u64::MAX,
            idle_timeout: None,
            open_timeout: None,
            read_ahead_bytes: None,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    open: u32,
    per_terminal: HashMap<Option<PublicKey>, u32>,
}

/// Admission, metrics and drain state of one side; share it as `Arc<Ops>`.
#[derive(Debug)]
pub struct Ops {
    cfg: OpsConfig,
    metrics: Arc<Metrics>,
    memory: Arc<MemoryBudget>,
    state: Mutex<State>,
    stop: watch::Sender<bool>,
    /// Set when a drain ran out of time: the connections left are reset.
    cut: watch::Sender<bool>,
    ended: Notify,
    refusing: Arc<Semaphore>,
    /// A descriptor held back so a listener at the open-file limit can still accept a client
    /// to refuse it.
    descriptor_reserve: crate::fdlimit::Reserve,
    /// When the open-file limit was last logged (the log says so at most once a second).
    descriptor_logged: Mutex<Option<std::time::Instant>>,
}

impl Ops {
    pub(crate) fn new(cfg: OpsConfig, metrics: Arc<Metrics>) -> Arc<Ops> {
        let (stop, _) = watch::channel(false);
        let (cut, _) = watch::channel(false);
        Arc::new(Ops {
            memory: MemoryBudget::new(cfg.memory_cap_bytes, Arc::clone(&metrics)),
            cfg,
            metrics,
            state: Mutex::new(State::default()),
            stop,
            cut,
            ended: Notify::new(),
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            descriptor_reserve: crate::fdlimit::Reserve::default(),
            descriptor_logged: Mutex::new(None),
        })
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn config(&self) -> &OpsConfig {
        &self.cfg
    }

    /// The side's memory budget (give it to the hop: [`crate::hop::Hop::charge_to`]).
    pub(crate) fn memory(&self) -> &Arc<MemoryBudget> {
        &self.memory
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection — from the terminal with key `terminal` on a gateway (`None` on
    /// a terminal), from `client` when known — or counts its refusal and says why.
    pub(crate) fn admit(
        self: &Arc<Self>,
        terminal: Option<PublicKey>,
        client: Option<SocketAddr>,
    ) -> Result<Conn, RefusalReason> {
        let verdict = {
            let mut st = self.state();
            let of_terminal = st.per_terminal.get(&terminal).copied().unwrap_or(0);
            if st.open >= self.cfg.max_connections {
                Err(RefusalReason::ConnectionLimit)
            } else if of_terminal >= self.cfg.max_connections_per_terminal {
                Err(RefusalReason::TerminalLimit)
            } else if let Some(charge) = self.memory.try_charge(CONNECTION_BYTES) {
                st.open += 1;
                *st.per_terminal.entry(terminal).or_insert(0) += 1;
                Ok(charge)
            } else {
                Err(RefusalReason::Memory)
            }
        };
        match verdict {
            Ok(charge) => {
                self.metrics.connections_total.inc();
                self.metrics.connections_active.inc();
                let track = self
                    .metrics
                    .track(client.map(|c| c.to_string()), terminal.map(|k| k.to_hex()));
                Ok(Conn {
                    ops: Arc::clone(self),
                    track,
                    terminal,
                    charge: Some(charge),
                    close: CloseReason::Error,
                })
            }
            Err(reason) => {
                self.metrics.refused(reason).inc();
                let (limit_name, limit) = match reason {
                    RefusalReason::TerminalLimit => (
                        "limits.max_connections_per_terminal",
                        u64::from(self.cfg.max_connections_per_terminal),
                    ),
                    RefusalReason::Memory => ("limits.memory_cap_bytes", self.cfg.memory_cap_bytes),
                    _ => (
                        "limits.max_connections",
                        u64::from(self.cfg.max_connections),
                    ),
                };
                let in_use = if reason == RefusalReason::Memory {
                    format!(
                        " ({} bytes in use by open connections and their buffers)",
                        self.memory.used()
                    )
                } else {
                    String::new()
                };
                tracing::info!(
                    client = client.map(|c| c.to_string()),
                    terminal = terminal.map(|k| k.to_hex()),
                    reason = reason.as_str(),
                    limit,
                    "connection refused: {limit_name} = {limit} reached{in_use}"
                );
                Err(reason)
            }
        }
    }

    fn release(&self, terminal: &Option<PublicKey>) {
        {
            let mut st = self.state();
            st.open = st.open.saturating_sub(1);
            if let Some(n) = st.per_terminal.get_mut(terminal) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    st.per_terminal.remove(terminal);
                }
            }
        }
        self.metrics.connections_active.dec();
        self.ended.notify_waiters();
    }

    /// Connections admitted and not yet ended.
    pub fn open_connections(&self) -> u32 {
        self.state().open
    }

    /// Bytes in use by open connections and their buffers ([`MemoryBudget::used`]).
    pub fn reserved_bytes(&self) -> u64 {
        self.memory.used()
    }

    /// A permit to answer a refused client, if fewer than [`MAX_REFUSING`] are being answered.
    pub(crate) fn refusing_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.refusing).try_acquire_owned().ok()
    }

    /// The spare descriptor of this side's listeners.
    pub(crate) fn descriptor_reserve(&self) -> &crate::fdlimit::Reserve {
        &self.descriptor_reserve
    }

    /// Logs that the open-file limit was reached (`what` names the socket that could not be
    /// had), with the limit, at most once a second.
    pub(crate) fn log_descriptor_limit(&self, what: &str) {
        let mut last = self
            .descriptor_logged
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            *last = Some(std::time::Instant::now());
            let limit = crate::fdlimit::nofile_limit().map_or(0, |(soft, _)| soft);
            tracing::warn!(
                limit,
                "open-file limit (RLIMIT_NOFILE = {limit}) reached: no socket for {what}; \
                 refusing new connections (established ones carry on)"
            );
        }
    }

    /// Starts draining: the accept loops stop accepting; open connections carry on.
    pub(crate) fn drain(&self) {
        self.stop.send_replace(true);
    }

    #[cfg(test)]
    pub(crate) fn draining(&self) -> bool {
        *self.stop.borrow()
    }

    /// Completes once [`Self::drain`] has been called.
    pub(crate) async fn drained(&self) {
        let mut rx = self.stop.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Ends a drain that ran out of time: every connection still relaying resets both its TCP
    /// connection and its stream, and is counted as closed by `drain_timeout`.
    pub(crate) fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Completes once [`Self::cut`] has been called.
    pub(crate) async fn cut_called(&self) {
        let mut rx = self.cut.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|cut| *cut).await;
    }

    /// Waits until no connection is open or `timeout` passes; true if none is open.
    pub(crate) async fn wait_idle(&self, timeout: Duration) -> bool {
        self.wait_idle_until(tokio::time::Instant::now() + timeout)
            .await
    }

    /// Waits until no connection is open or `deadline` passes; true if none is open.
    pub(crate) async fn wait_idle_until(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.open_connections() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.open_connections() == 0;
            }
        }
    }
}

/// An admitted connection: holds its place under the limits, its [`CONNECTION_BYTES`] charge and
/// its metrics record until dropped, when it is counted as closed and logged.
#[derive(Debug)]
pub(crate) struct Conn {
    ops: Arc<Ops>,
    track: Arc<ConnTrack>,
    terminal: Option<PublicKey>,
    charge: Option<Charge>,
    close: CloseReason,
}

impl Conn {
    /// The connection's metrics record.
    pub(crate) fn track(&self) -> &ConnTrack {
        &self.track
    }

    pub(crate) fn ops(&self) -> &Arc<Ops> {
        &self.ops
    }

    /// Counts `n` payload bytes moving in `dir` at the TCP side.
    pub(crate) fn add_bytes(&self, dir: Direction, n: u64) {
        self.track.add_bytes(dir, n);
        self.ops.metrics.tcp_bytes(dir).add(n);
    }

    /// Directions of this side: (TCP → hop, hop → TCP).
    pub(crate) fn directions(&self) -> (Direction, Direction) {
        match self.ops.metrics.side() {
            Side::Terminal => (Direction::Up, Direction::Down),
            Side::Gateway => (Direction::Down, Direction::Up),
        }
    }

    /// Refuses the connection after admission (policy, failed connect, client protocol or
    /// authentication): counted under `reason`, and the connection closes as refused.
    pub(crate) fn refuse(&mut self, reason: RefusalReason) {
        self.ops.metrics.refused(reason).inc();
        self.close = CloseReason::Refused;
        tracing::info!(
            id = self.track.id(),
            client = self.track.client(),
            destination = self.track.destination(),
            reason = reason.as_str(),
            "connection refused"
        );
    }

    /// Records how the connection ended (default: an error).
    pub(crate) fn set_close_reason(&mut self, reason: CloseReason) {
        self.close = reason;
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let t = &self.track;
        self.ops.metrics.closed(self.close).inc();
        self.ops.metrics.untrack(t.id());
        self.charge = None;
        self.ops.release(&self.terminal);
        if self.close != CloseReason::Refused {
            tracing::info!(
                id = t.id(),
                client = t.client(),
                destination = t.destination(),
                bytes_up = t.bytes(Direction::Up),
                bytes_down = t.bytes(Direction::Down),
                age_s = t.age().as_secs_f64(),
                reason = self.close.as_str(),
                "connection closed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PublicKey {
        PublicKey::from_hex(&format!("{b:02x}").repeat(32)).unwrap()
    }

    fn ops(max: u32, per: u32, cap: u64) -> Arc<Ops> {
        Ops::new(
            OpsConfig {
                max_connections: max,
                max_connections_per_terminal: per,
                memory_cap_bytes: cap,
                ..OpsConfig::unlimited()
            },
            Arc::new(Metrics::new(Side::Gateway)),
        )
    }

    #[test]
    fn limits_refuse_and_release() {
        let o = ops(3, 2, u64::MAX);
        let a1 = o.admit(Some(key(1)), None).unwrap();
        let _a2 = o.admit(Some(key(1)), None).unwrap();
        assert_eq!(
            o.admit(Some(key(1)), None).unwrap_err(),
            RefusalReason::TerminalLimit
        );
        let _b1 = o.admit(Some(key(2)), None).unwrap();
        assert_eq!(
            o.admit(Some(key(3)), None).unwrap_err(),
            RefusalReason::ConnectionLimit
        );
        let m = o.metrics();
        assert_eq!(m.refused(RefusalReason::TerminalLimit).get(), 1);
        assert_eq!(m.refused(RefusalReason::ConnectionLimit).get(), 1);
        assert_eq!(m.connections_active.get(), 3);
        assert_eq!(m.status_len(), 3);
        drop(a1);
        assert_eq!(m.connections_active.get(), 2);
        assert_eq!(m.status_len(), 2);
        assert_eq!(m.closed(CloseReason::Error).get(), 1);
        let _a3 = o.admit(Some(key(1)), None).unwrap();
        assert_eq!(m.connections_total.get(), 4);
    }

    #[test]
    fn memory_cap_counts_connections_and_buffers() {
        let o = ops(100, 100, 10 * CONNECTION_BYTES);
        let a = o.admit(None, None).unwrap();
        let _b = o.admit(None, None).unwrap();
        assert_eq!(o.reserved_bytes(), 2 * CONNECTION_BYTES);
        // Buffers filling take the rest of the cap: the next connection is refused.
        let buffered = o.memory().try_charge(8 * CONNECTION_BYTES).unwrap();
        assert!(o.memory().try_charge(1).is_none());
        assert_eq!(o.admit(None, None).unwrap_err(), RefusalReason::Memory);
        assert_eq!(
            o.metrics().memory_reserved_bytes.get(),
            (10 * CONNECTION_BYTES) as i64
        );
        // Draining returns the bytes; so does a connection's end.
        let data = buffered.attach(bytes::Bytes::from(vec![7u8; 100]));
        let piece = data.slice(10..20);
        drop(data);
        assert_eq!(
            o.reserved_bytes(),
            10 * CONNECTION_BYTES,
            "a slice still holds it"
        );
        assert_eq!(&piece[..], &[7u8; 10]);
        drop(piece);
        assert_eq!(o.reserved_bytes(), 2 * CONNECTION_BYTES);
        drop(a);
        assert_eq!(o.reserved_bytes(), CONNECTION_BYTES);
        let mut c = o.admit(None, None).unwrap();
        c.refuse(RefusalReason::Policy);
        drop(c);
        let m = o.metrics();
        assert_eq!(m.refused(RefusalReason::Memory).get(), 1);
        assert_eq!(m.refused(RefusalReason::Policy).get(), 1);
        assert_eq!(m.closed(CloseReason::Refused).get(), 1);
        assert_eq!(m.memory_reserved_bytes.get(), CONNECTION_BYTES as i64);
        // Every admitted connection is open or closed under one reason.
        let closed: u64 = CloseReason::ALL.iter().map(|r| m.closed(*r).get()).sum();
        assert_eq!(
            m.connections_total.get(),
            closed + m.connections_active.get() as u64
        );
    }

    #[test]
    fn the_default_cap_admits_a_hundred_thousand_idle_connections() {
        let cap = crate::config::Limits::default().memory_cap_bytes;
        let o = ops(u32::MAX, u32::MAX, cap);
        let held: Vec<Conn> = (0..100_000).map(|_| o.admit(None, None).unwrap()).collect();
        assert_eq!(held.len(), 100_000);
        assert!(o.reserved_bytes() <= cap);
    }

    #[tokio::test]
    async fn a_charge_waits_for_room() {
        let m = MemoryBudget::new(1000, Arc::new(Metrics::new(Side::Terminal)));
        let full = m.try_charge(900).unwrap();
        let m2 = Arc::clone(&m);
        let waiter = tokio::spawn(async move { m2.charge(500).await.bytes() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        assert_eq!(m.used(), 900);
        drop(full);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, 500);
        assert_eq!(m.used(), 0, "the waiter's charge ended with its task");
        let mut c = m.try_charge(800).unwrap();
        c.shrink_to(300);
        assert_eq!((c.bytes(), m.used()), (300, 300));
        drop(c);
        assert_eq!(m.used(), 0);
    }

    #[tokio::test]
    async fn drain_and_wait_idle() {
        let o = ops(10, 10, u64::MAX);
        let c = o.admit(None, None).unwrap();
        assert!(!o.draining());
        let waiter = {
            let o = Arc::clone(&o);
            tokio::spawn(async move { o.drained().await })
        };
        o.drain();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!o.wait_idle(Duration::from_millis(50)).await);
        let o2 = Arc::clone(&o);
        let w = tokio::spawn(async move { o2.wait_idle(Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(c);
        assert!(w.await.unwrap());
    }
}
