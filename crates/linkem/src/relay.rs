//! The real-time UDP relay: two sockets joined by two [`Lane`]s (a [`linkmodel::Direction`] each),
//! with the wall clock (nanoseconds since the relay started) as the model's time.
//!
//! The terminal sends to the relay's listening socket; every datagram is offered to the *up*
//! link and, if the model delivers it, sent at the model's arrival time from the relay's second
//! socket to the gateway (`to`). Datagrams the gateway sends back to that second socket go
//! through the *down* link to the terminal's most recently seen source address. Datagrams reaching
//! the second socket from any address other than `to` are ignored and counted.
//!
//! Every decision (queueing, serialization at a fixed or traced rate, delay, delivery order, loss,
//! outages, duplication, corruption) is the link direction's; the relay only keeps time and moves
//! bytes. What waits for its arrival time sits in the lane's schedule, bounded in entries and
//! bytes; an accepted datagram that does not fit is counted in
//! [`DirectionStats::dropped_schedule`].

use crate::lane::Lane as Core;
use linkmodel::{LinkConfig, LinkConfigError, LinkStats};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Largest datagram relayed, bytes (the UDP length field's limit).
pub const MAX_DATAGRAM_BYTES: usize = 65_535;

/// Datagrams sent per scheduler wake-up before the lock is released and taken again.
const SEND_BATCH: usize = 64;

/// One direction of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Terminal → gateway.
    Up,
    /// Gateway → terminal.
    Down,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "up",
            Direction::Down => "down",
        })
    }
}

/// What the relay is to do.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorConfig {
    /// Address the terminal sends to (port 0 picks a free one; see
    /// [`EmulatorHandle::local_addr`]).
    pub listen: SocketAddr,
    /// The gateway: where up-direction datagrams go, and the only source accepted on the
    /// gateway-side socket.
    pub to: SocketAddr,
    /// Terminal → gateway link.
    pub up: LinkConfig,
    /// Gateway → terminal link.
    pub down: LinkConfig,
    /// Seed of the links' random generators (the down link uses `seed + 1`).
    pub seed: u64,
}

/// Why the relay could not start.
#[derive(Debug, Error)]
pub enum EmulatorError {
    #[error("{direction} link: {source}")]
    Link {
        direction: Direction,
        #[source]
        source: LinkConfigError,
    },
    #[error("cannot bind the {side} socket to {addr}: {source}")]
    Bind {
        side: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the {side} socket's address: {source}")]
    LocalAddr {
        side: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Counters of one direction. `link` holds the model's decisions (its byte counts include the
/// configured per-packet overhead); the other fields count what the relay itself did, in payload
/// bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Offered, delivered and dropped by cause, as decided by the link model.
    pub link: LinkStats,
    /// Datagrams received from this direction's sender (and offered to the link).
    pub received_packets: u64,
    pub received_bytes: u64,
    /// Datagrams sent on to the far end, duplicates included.
    pub sent_packets: u64,
    pub sent_bytes: u64,
    /// Accepted by the model but dropped because the schedule was full.
    pub dropped_schedule: u64,
    /// Down only: due for delivery before any terminal had sent anything.
    pub dropped_no_peer: u64,
    /// Down only: datagrams from an address other than the gateway, ignored.
    pub ignored_foreign: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
    /// Datagrams waiting for their arrival time now, and their payload bytes.
    pub in_flight: u64,
    pub in_flight_bytes: u64,
}

impl DirectionStats {
    /// Datagrams dropped for any reason: by the model (queue, RED, errors, outages) or by the
    /// relay (schedule full, no terminal known).
    pub fn dropped(&self) -> u64 {
        let l = &self.link;
        l.dropped_queue
            + l.dropped_red
            + l.dropped_error
            + l.dropped_outage
            + self.dropped_schedule
            + self.dropped_no_peer
    }
}

/// Counters of both directions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    pub up: DirectionStats,
    pub down: DirectionStats,
}

/// Wall-clock time as the link model sees it: nanoseconds since the relay started.
#[derive(Debug, Clone, Copy)]
struct Clock {
    epoch: Instant,
}

impl Clock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn instant(&self, at_ns: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_nanos(at_ns))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400))
    }
}

struct LaneState {
    core: Core,
    stats: DirectionStats,
}

/// One direction: the link, its schedule and counters, and the sender's wake-up.
struct Lane {
    state: Mutex<LaneState>,
    wake: Notify,
}

impl Lane {
    fn new(config: LinkConfig, seed: u64, direction: Direction) -> Result<Self, EmulatorError> {
        let core = Core::new(config, ChaCha8Rng::seed_from_u64(seed))
            .map_err(|source| EmulatorError::Link { direction, source })?;
        Ok(Lane {
            state: Mutex::new(LaneState {
                core,
                stats: DirectionStats::default(),
            }),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, LaneState> {
        // The state stays consistent even if a holder panicked: every update is a counter or
        // a complete push/pop.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> DirectionStats {
        let st = self.lock();
        let mut s = st.stats.clone();
        s.link = st.core.link_stats();
        s.dropped_schedule = st.core.dropped_schedule();
        (s.in_flight, s.in_flight_bytes) = st.core.in_flight();
        s
    }

    /// Offers one received datagram to the link and schedules what the model delivers.
    fn offer(&self, now_ns: u64, data: &[u8]) {
        let mut st = self.lock();
        let st = &mut *st;
        st.stats.received_packets += 1;
        st.stats.received_bytes = st.stats.received_bytes.saturating_add(data.len() as u64);
        st.core.offer(now_ns, data);
        self.wake.notify_one();
    }
}

/// Where a direction's datagrams go.
#[derive(Clone)]
enum Destination {
    Fixed(SocketAddr),
    /// The terminal's most recent source address, once known.
    Terminal(Arc<Mutex<Option<SocketAddr>>>),
}

impl Destination {
    fn get(&self) -> Option<SocketAddr> {
        match self {
            Destination::Fixed(a) => Some(*a),
            Destination::Terminal(t) => *t.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// The relay's entry point.
pub struct UdpEmulator;

impl UdpEmulator {
    /// Binds the terminal-side socket at `config.listen` and a gateway-side socket (loopback
    /// if `to` is loopback, else the unspecified address; any port), and starts relaying on the
    /// current tokio runtime. The model's clock starts now.
    pub async fn start(config: EmulatorConfig) -> Result<EmulatorHandle, EmulatorError> {
        let up = Arc::new(Lane::new(config.up, config.seed, Direction::Up)?);
        let down = Arc::new(Lane::new(
            config.down,
            config.seed.wrapping_add(1),
            Direction::Down,
        )?);
        let terminal_sock =
            UdpSocket::bind(config.listen)
                .await
                .map_err(|source| EmulatorError::Bind {
                    side: "terminal-side",
                    addr: config.listen,
                    source,
                })?;
        let gateway_bind = SocketAddr::new(gateway_side_ip(config.to.ip()), 0);
        let gateway_sock =
            UdpSocket::bind(gateway_bind)
                .await
                .map_err(|source| EmulatorError::Bind {
                    side: "gateway-side",
                    addr: gateway_bind,
                    source,
                })?;
        let local_addr = terminal_sock
            .local_addr()
            .map_err(|source| EmulatorError::LocalAddr {
                side: "terminal-side",
                source,
            })?;
        let gateway_side_addr =
            gateway_sock
                .local_addr()
                .map_err(|source| EmulatorError::LocalAddr {
                    side: "gateway-side",
                    source,
                })?;
        let terminal_sock = Arc::new(terminal_sock);
        let gateway_sock = Arc::new(gateway_sock);
        let clock = Clock {
            epoch: Instant::now(),
        };
        let terminal = Arc::new(Mutex::new(None));
        let tasks = vec![
            tokio::spawn(receive(
                terminal_sock.clone(),
                up.clone(),
                clock,
                Source::Terminal(terminal.clone()),
            )),
            tokio::spawn(receive(
                gateway_sock.clone(),
                down.clone(),
                clock,
                Source::Gateway(config.to),
            )),
            tokio::spawn(deliver(
                gateway_sock,
                up.clone(),
                clock,
                Destination::Fixed(config.to),
            )),
            tokio::spawn(deliver(
                terminal_sock,
                down.clone(),
                clock,
                Destination::Terminal(terminal),
            )),
        ];
        Ok(EmulatorHandle {
            local_addr,
            gateway_side_addr,
            up,
            down,
            tasks,
        })
    }
}

fn gateway_side_ip(to: IpAddr) -> IpAddr {
    match (to, to.is_loopback()) {
        (IpAddr::V4(_), true) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (IpAddr::V6(_), true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        (IpAddr::V4(_), false) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (IpAddr::V6(_), false) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Who may send into a direction.
enum Source {
    /// Anyone; the sender becomes the terminal.
    Terminal(Arc<Mutex<Option<SocketAddr>>>),
    /// Only the gateway.
    Gateway(SocketAddr),
}

async fn receive(sock: Arc<UdpSocket>, lane: Arc<Lane>, clock: Clock, source: Source) {
    // One byte more than the largest datagram, so nothing is silently truncated.
    let mut buf = vec![0u8; MAX_DATAGRAM_BYTES + 1];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((n, from)) => {
                match &source {
                    Source::Terminal(t) => {
                        *t.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
                    }
                    Source::Gateway(gw) if from != *gw => {
                        lane.lock().stats.ignored_foreign += 1;
                        continue;
                    }
                    Source::Gateway(_) => {}
                }
                let data = buf.get(..n.min(MAX_DATAGRAM_BYTES)).unwrap_or(&[]);
                lane.offer(clock.now_ns(), data);
            }
            Err(_) => {
                // E.g. an ICMP error reported on some platforms: count it and carry on, without
                // spinning if the error repeats.
                lane.lock().stats.recv_errors += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

async fn deliver(sock: Arc<UdpSocket>, lane: Arc<Lane>, clock: Clock, dest: Destination) {
    let mut batch = Vec::with_capacity(SEND_BATCH);
    loop {
        let next_at = {
            let mut st = lane.lock();
            let now = clock.now_ns();
            while batch.len() < SEND_BATCH {
                match st.core.pop_due(now) {
                    Some(due) => batch.push(due),
                    None => break,
                }
            }
            st.core.next_at()
        };
        let full = batch.len() == SEND_BATCH;
        for due in batch.drain(..) {
            let Some(to) = dest.get() else {
                lane.lock().stats.dropped_no_peer += 1;
                continue;
            };
            let sent = sock.send_to(&due.data, to).await;
            let mut st = lane.lock();
            match sent {
                Ok(n) => {
                    st.stats.sent_packets += 1;
                    st.stats.sent_bytes = st.stats.sent_bytes.saturating_add(n as u64);
                }
                Err(_) => st.stats.send_errors += 1,
            }
        }
        if full {
            continue;
        }
        match next_at {
            Some(at) if at <= clock.now_ns() => {}
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(clock.instant(at)) => {}
                    _ = lane.wake.notified() => {}
                }
            }
            None => lane.wake.notified().await,
        }
    }
}

/// A running relay. Dropping it stops the relay too; [`EmulatorHandle::shutdown`] also waits for
/// its tasks and returns the final counters.
pub struct EmulatorHandle {
    local_addr: SocketAddr,
    gateway_side_addr: SocketAddr,
    up: Arc<Lane>,
    down: Arc<Lane>,
    tasks: Vec<JoinHandle<()>>,
}

impl EmulatorHandle {
    /// The address the terminal sends to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the gateway sees the relay's datagrams come from (and replies to).
    pub fn gateway_side_addr(&self) -> SocketAddr {
        self.gateway_side_addr
    }

    /// Counters of both directions now.
    pub fn stats(&self) -> EmulatorStats {
        EmulatorStats {
            up: self.up.stats(),
            down: self.down.stats(),
        }
    }

    /// Stops relaying (datagrams still waiting are discarded, and stay counted in `in_flight`)
    /// and returns the final counters.
    pub async fn shutdown(mut self) -> EmulatorStats {
        let tasks = std::mem::take(&mut self.tasks);
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            // A cancelled task reports `JoinError::Cancelled`; nothing else is expected.
            let _ = t.await;
        }
        self.stats()
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
