//! The STP hop's tokio driver: one UDP socket and one task around the sans-IO [`HopCore`]
//! ([`super::core`], which holds the logic: streams, backpressure, shaping, handshakes, the
//! tunnel). Relays talk to it through [`HopStream`]s:
//!
//! - Towards the hop, a stream's writes take permits from a per-stream byte budget (the relay
//!   buffer) that the core drops once the bytes are in STP's send buffer; a full budget blocks
//!   the writer, so a slow satellite link stops reads from the TCP socket instead of growing
//!   buffers.
//! - From the hop, received bytes go into a bounded channel; while it is full the core stops
//!   reading that STP connection, whose receive window then closes.
//!
//! The driver reads datagrams in batches, turns commands from the handles into core calls,
//! sends what the core has to send (runs of equal-sized datagrams to one destination in one
//! system call where the kernel segments them) and sleeps until the core's next deadline.

use super::backpressure::Backpressure;
use super::batch::Batch;
use super::core::{CoreConfig, CoreSecurity, EventSink, HopCore, Offer, OnSent, StreamInfo, CHUNK};
use super::error::{AbortCode, HopError, StreamError};
use super::handle::*;
use super::read_ahead::ReadAhead;
use super::udp_batch::UdpBatch;
use crate::ops::MemoryBudget;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use stp::Instant;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

/// Most datagrams taken from the socket in one go.
const MAX_BATCH: usize = 256;
/// Most commands from the handles taken in one go.
const MAX_COMMANDS: usize = 64;
/// Receive buffer asked of the kernel for each hop socket (it may grant less): room for what
/// arrives while the worker waits for a core. 8 MiB (12 ms of 5 Gbit/s as the kernel counts
/// datagrams) overflowed in `bench gateway`'s 100-flow runs on 2 busy cores, 810-84,000
/// datagrams resent per GB; 32 MiB, none (`docs/scaling.md`).
const RECV_BUFFER: usize = 32 << 20;
/// Send buffer asked for each hop socket: bursts of a large window leaving at once. Not larger:
/// under a shaping qdisc it bounds what queues there.
const SEND_BUFFER: usize = 8 << 20;
/// While a stream's reader is full, how often the hop looks again if no reader wakes it.
const READ_RETRY: Duration = Duration::from_millis(50);
/// With no deadline from the core, the task still looks around this often.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// A stream's reader as the core sees it: its channel, and the side's memory budget that each
/// chunk is charged to until the reader drops it.
struct Sink {
    tx: mpsc::Sender<StreamEvent>,
    memory: Option<Arc<MemoryBudget>>,
}

impl EventSink for Sink {
    fn offer(&mut self, ev: StreamEvent) -> Offer {
        let ev = match (ev, &self.memory) {
            (StreamEvent::Data(b), Some(memory)) if !b.is_empty() => {
                if self.tx.is_closed() {
                    return Offer::Gone;
                }
                // The hop task is the channel's only sender: room now is room at the send.
                if self.tx.capacity() == 0 {
                    return Offer::Full(StreamEvent::Data(b));
                }
                match memory.try_charge(b.len() as u64) {
                    Some(charge) => StreamEvent::Data(charge.attach(b)),
                    None => return Offer::Full(StreamEvent::Data(b)),
                }
            }
            (ev, _) => ev,
        };
        match self.tx.try_send(ev) {
            Ok(()) => Offer::Taken,
            Err(mpsc::error::TrySendError::Full(ev)) => Offer::Full(ev),
            Err(mpsc::error::TrySendError::Closed(_)) => Offer::Gone,
        }
    }
}

type Core = HopCore<Sink, OwnedSemaphorePermit>;

impl Hop {
    /// Starts the hop task on `socket`.
    pub fn start(
        socket: UdpSocket,
        security: Security,
        config: HopConfig,
    ) -> Result<Hop, HopError> {
        Self::start_with_capture(socket, security, config, None)
    }

    /// As [`Hop::start`], writing every STP datagram the hop sends or receives (in clear, with
    /// its UDP addresses) to `capture` ([`crate::capture`]).
    pub(crate) fn start_with_capture(
        socket: UdpSocket,
        security: Security,
        config: HopConfig,
        capture: Option<crate::capture::Capture>,
    ) -> Result<Hop, HopError> {
        Self::start_workers(vec![(socket, security)], config, capture)
    }

    /// A hop of several workers, one per `(socket, security)`: each a task with its own socket
    /// and hop core (its own STP endpoint and tunnel), on a thread of its own (a one-thread
    /// runtime, `satstp-hop-N`), so the workers run in parallel. A gateway starts the relay of
    /// each stream a worker accepted on that worker's thread ([`HopStream::home`]): its bytes
    /// reach the hop without waking another thread. The first worker keeps `config.seed`, the
    /// others derive theirs from it; they share the send allocation (one token bucket), the
    /// memory budget ([`Hop::charge_to`]), the capture and one `incoming`. A gateway's workers
    /// listen on one address (`SO_REUSEPORT`, [`crate::sockopt::bind_udp_workers`]), a
    /// terminal's each hold a tunnel session of their own. `docs/scaling.md`, "Workers".
    pub(crate) fn start_workers(
        workers: Vec<(UdpSocket, Security)>,
        config: HopConfig,
        capture: Option<crate::capture::Capture>,
    ) -> Result<Hop, HopError> {
        keep_freed_memory();
        let start = tokio::time::Instant::now();
        let wall_clock_at_zero_ns = super::clock::unix_ns_at(start.into_std());
        // The streams accepted and not yet taken by the relay: the STP endpoints' accept queue
        // (`max_accept_queue` each), which the workers empty into this channel at every pump.
        // A smaller channel refused a burst of opens the endpoints would have queued: a
        // thousand parallel opens reset as "gateway overloaded" on a busy machine.
        let queue = accept_queue(&config.endpoint, workers.len());
        let (in_tx, in_rx) = mpsc::channel(queue);
        let capture = capture.map(|c| Arc::new(std::sync::Mutex::new(c)));
        let mut tasks: Vec<HopTask> = Vec::with_capacity(workers.len());
        let mut txs = Vec::with_capacity(workers.len());
        let mut first_local = None;
        let n = workers.len() as u64;
        let mut runtimes = Vec::with_capacity(workers.len());
        for (i, (socket, security)) in workers.into_iter().enumerate() {
            let (socket, runtime) = worker_runtime(socket)?;
            runtimes.push(runtime);
            let local = socket.local_addr().map_err(|source| HopError::Io {
                what: "the hop's UDP socket".into(),
                source,
            })?;
            first_local.get_or_insert(local);
            // Room for bursts of a large window; the kernel may cap it (net.core.rmem_max), and
            // the daemon then raises it past the cap where it may.
            let buffers = crate::sockopt::set_udp_buffers(&socket, RECV_BUFFER, SEND_BUFFER);
            if i == 0 {
                log_udp_buffers(&buffers);
            }
            let recv_buffer = buffers.recv_bytes;
            let security = match security {
                Security::Terminal {
                    local,
                    gateway_key,
                    gateway,
                } => CoreSecurity::Terminal {
                    local,
                    gateways: vec![(gateway, gateway_key)],
                },
                Security::TerminalFailover { local, gateways } => {
                    CoreSecurity::Terminal { local, gateways }
                }
                Security::Gateway { responder } => CoreSecurity::Gateway { responder },
            };
            let mut core: Core = HopCore::new(
                CoreConfig {
                    endpoint: config.endpoint.clone(),
                    seed: worker_seed(config.seed, i),
                    rng: None,
                    send_rate_bps: config.send_rate_bps,
                    local,
                    wall_clock_at_zero_ns,
                },
                security,
                Instant::ZERO,
            )?;
            core.set_rekey(config.rekey);
            core.set_cipher(config.cipher)?;
            if let Some(first) = tasks.first() {
                core.share_allocation_of(&first.core);
            }
            if let Some(c) = &capture {
                let c = Arc::clone(c);
                core.set_tap(Box::new(move |src, dst, d| {
                    c.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .record(src, dst, d)
                }));
            }
            let (tx, rx) = mpsc::channel(1024);
            tasks.push(HopTask {
                udp: UdpBatch::new(&socket),
                overflow: SocketOverflow {
                    recv_buffer,
                    capped: buffers.short,
                    ..SocketOverflow::default()
                },
                backpressure: Backpressure::default(),
                backpressure_logged: None,
                socket,
                core,
                commands: rx,
                incoming: in_tx.clone(),
                queue,
                queue_full_logged: None,
                self_tx: tx.clone(),
                relay_buffer: config.relay_buffer_bytes.max(CHUNK as u32),
                start,
                room: Arc::new(Notify::new()),
                memory: None,
                read_ahead: None,
                batch: Batch::default(),
                shutting_down: false,
                ids: Ids {
                    worker: i as u64,
                    workers: n,
                },
            });
            txs.push(tx);
        }
        let local = first_local.ok_or_else(|| HopError::Io {
            what: "the hop's UDP sockets".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no socket given"),
        })?;
        for (task, mut rt) in tasks.into_iter().zip(runtimes) {
            std::thread::Builder::new()
                .name(format!("satstp-hop-{}", task.ids.worker))
                .spawn(move || {
                    if let Some(rt) = rt.0.take() {
                        rt.block_on(task.run());
                        // Relays still running there end with it; a blocking lookup is not
                        // waited for.
                        rt.shutdown_background();
                    }
                })
                .map_err(|source| HopError::Io {
                    what: "a hop worker's thread".into(),
                    source,
                })?;
        }
        Ok(Hop {
            workers: txs,
            next: Default::default(),
            incoming: in_rx,
            local,
        })
    }
}

/// Most free memory glibc's allocator keeps at the top of a heap instead of returning it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 64 << 20;
/// Allocations at least this large get their own mapping (glibc's largest setting).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;

/// The hop's data moves through buffers of up to 64 KiB that live for milliseconds (a TCP read,
/// an STP block, a chunk for a reader), on several threads. With glibc's defaults a heap whose
/// top is free beyond 128 KiB is trimmed and the next buffers fault fresh zeroed pages back in:
/// with 100 flows that zeroing (`clear_page_erms`) was 19 % of the gateway's CPU. The daemon
/// keeps up to [`TRIM_THRESHOLD`] free per heap instead (`docs/scaling.md`). Once per process.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only sets the allocator's parameters; it is called before the
            // hop's tasks allocate, and glibc serialises it with allocations anyway.
            let ok = unsafe {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
                    && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            };
            if !ok {
                tracing::debug!("the allocator refused its trim and mmap thresholds");
            }
        });
    }
}

/// How many accepted streams may wait for the relay, all workers together: each worker's STP
/// endpoint queues `max_accept_queue` (and refuses opens beyond it), so the hop does as well.
fn accept_queue(endpoint: &stp::EndpointConfig, workers: usize) -> usize {
    (endpoint.max_accept_queue as usize)
        .max(1)
        .saturating_mul(workers.max(1))
        .min(1 << 20)
}

/// At most one log line a worker about its full queue of accepted streams, this often.
const QUEUE_FULL_LOG_EVERY: Duration = Duration::from_secs(10);

/// A hop worker's own runtime (one thread, [`Hop::start_workers`]), with `socket` registered on
/// it.
fn worker_runtime(socket: UdpSocket) -> Result<(UdpSocket, WorkerRuntime), HopError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| HopError::Io { what, source }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("a hop worker's runtime"))?;
    let std = socket.into_std().map_err(io("the hop's UDP socket"))?;
    let socket = {
        let _in = rt.enter();
        UdpSocket::from_std(std).map_err(io("the hop's UDP socket"))?
    };
    Ok((socket, WorkerRuntime(Some(rt))))
}

/// A worker's runtime before its thread takes it: one dropped on the way (the hop failed to
/// start) shuts down without waiting, as a runtime dropped inside another runtime's task must.
struct WorkerRuntime(Option<tokio::runtime::Runtime>);

impl Drop for WorkerRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Worker `i`'s seed: the hop's own for the first, distinct ones for the others (their
/// connection ids, sequence numbers and session indices must differ).
fn worker_seed(seed: u64, i: usize) -> u64 {
    if i == 0 {
        return seed;
    }
    let mut z = seed.wrapping_add((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct HopTask {
    socket: UdpSocket,
    /// Segmented sends and coalesced receives on `socket` where the kernel offers them.
    udp: UdpBatch,
    core: Core,
    commands: mpsc::Receiver<Command>,
    incoming: mpsc::Sender<HopStream>,
    /// `incoming`'s capacity ([`accept_queue`]), and when its being full was last logged.
    queue: usize,
    queue_full_logged: Option<Instant>,
    /// The kernel's drops on `socket` (receive buffer full), as `SO_RXQ_OVFL` reports them.
    overflow: SocketOverflow,
    /// Receive backpressure: the streams' windows held while `socket`'s queue is filling.
    backpressure: Backpressure,
    /// When an episode of it was last logged.
    backpressure_logged: Option<Instant>,
    self_tx: mpsc::Sender<Command>,
    relay_buffer: u32,
    start: tokio::time::Instant,
    /// Notified by readers as they take events.
    room: Arc<Notify>,
    /// What chunks handed to readers are charged to ([`Hop::charge_to`]).
    memory: Option<Arc<MemoryBudget>>,
    /// The hop's read-ahead bound ([`Hop::bound_read_ahead`]), one for all workers.
    read_ahead: Option<Arc<ReadAhead>>,
    /// The `Hop` handle is gone: reset everything and stop.
    shutting_down: bool,
    /// Reused between flushes: the datagrams waiting to leave together.
    batch: Batch,
    ids: Ids,
}

/// Whether a warning last logged at `last` may be logged again at `now`, at most every
/// [`QUEUE_FULL_LOG_EVERY`] (and if so, records `now`).
fn log_due(last: &mut Option<Instant>, now: Instant) -> bool {
    if last.is_some_and(|t| now.saturating_duration_since(t) < QUEUE_FULL_LOG_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

/// What this process's hop sockets' buffers come to on this host, for `satstp check`: a probe
/// socket asks as a hop worker does ([`crate::sockopt::set_udp_buffers`]).
pub fn udp_buffer_report() -> String {
    let socket = match std::net::UdpSocket::bind("127.0.0.1:0") {
        Ok(s) => s,
        Err(e) => return format!("unknown (a probe UDP socket failed: {e})"),
    };
    let b = crate::sockopt::set_udp_buffers(&socket, RECV_BUFFER, SEND_BUFFER);
    let mib = |n: usize| format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20));
    let granted = format!(
        "receive {}, send {} as the kernel counts them (twice the usable size)",
        mib(b.recv_bytes),
        mib(b.send_bytes)
    );
    let asked = format!("{} and {}", mib(b.asked_recv), mib(b.asked_send));
    if b.short {
        format!(
            "{granted}: short of the {asked} asked, capped at net.core.rmem_max / wmem_max, \
             and this process may not force them past (no CAP_NET_ADMIN); raise them to at \
             least {} and {}",
            b.asked_recv, b.asked_send
        )
    } else if b.forced {
        format!(
            "{granted}: the {asked} asked, raised past net.core.rmem_max / wmem_max with \
             CAP_NET_ADMIN (a daemon without it gets less)"
        )
    } else {
        format!("{granted}: the {asked} asked")
    }
}

/// Says once per hop what its UDP sockets' buffers came to when the kernel capped them: raised
/// past `net.core.rmem_max` / `wmem_max` (info), or left short (a warning with the fix).
fn log_udp_buffers(b: &crate::sockopt::UdpBuffers) {
    if b.short {
        tracing::warn!(
            asked_recv_bytes = b.asked_recv,
            asked_send_bytes = b.asked_send,
            recv_buffer_bytes = b.recv_bytes,
            send_buffer_bytes = b.send_bytes,
            "the hop's UDP sockets asked for {} bytes of receive and {} of send buffer and the \
             kernel granted {} and {} as it counts them (twice the usable size): it caps them \
             at net.core.rmem_max and net.core.wmem_max, and this process may not raise them \
             past that (no CAP_NET_ADMIN). Bursts beyond the buffer are dropped at the socket \
             and retransmitted; raise the sysctls (sysctl -w net.core.rmem_max={} \
             net.core.wmem_max={}) or run the daemon with CAP_NET_ADMIN",
            b.asked_recv,
            b.asked_send,
            b.recv_bytes,
            b.send_bytes,
            b.asked_recv,
            b.asked_send
        );
    } else if b.forced {
        tracing::info!(
            asked_recv_bytes = b.asked_recv,
            asked_send_bytes = b.asked_send,
            recv_buffer_bytes = b.recv_bytes,
            send_buffer_bytes = b.send_bytes,
            "the hop's UDP socket buffers were raised past net.core.rmem_max / wmem_max with \
             CAP_NET_ADMIN (SO_RCVBUFFORCE, SO_SNDBUFFORCE) to the {} and {} bytes asked",
            b.asked_recv,
            b.asked_send
        );
    }
}

/// What the kernel dropped on a hop socket because its receive buffer was full: the count it
/// reports beside received datagrams (`SO_RXQ_OVFL`, since the socket opened, 32 bits; one per
/// dropped receive unit: a datagram, or a run coalesced from one segmented send), and when a
/// rise was last logged.
#[derive(Default)]
struct SocketOverflow {
    /// The receive buffer the kernel granted, bytes (`SO_RCVBUF` as read back).
    recv_buffer: usize,
    /// The kernel granted less than the hop asked (`net.core.rmem_max`, not raised).
    capped: bool,
    /// The kernel's last count, and the drops counted so far (wraps of the 32 bits included).
    last: u32,
    total: u64,
    logged: Option<Instant>,
    /// Drops since the last log line.
    unlogged: u64,
}

impl SocketOverflow {
    /// Takes the kernel's count from a received datagram; true when it rose.
    fn note(&mut self, count: u32) -> bool {
        let new = u64::from(count.wrapping_sub(self.last));
        self.last = count;
        self.total += new;
        self.unlogged += new;
        new > 0
    }
}

/// Stream ids unique across a hop's workers: worker `w` of `n` hands out its core's id `i` as
/// `i × n + w`.
#[derive(Clone, Copy)]
struct Ids {
    worker: u64,
    workers: u64,
}

impl Ids {
    fn outer(self, id: u64) -> u64 {
        id.wrapping_mul(self.workers).wrapping_add(self.worker)
    }
    fn inner(self, id: u64) -> u64 {
        id / self.workers.max(1)
    }
}

impl HopTask {
    /// Logs the kernel's receive-buffer drops on the hop socket, at most every
    /// [`QUEUE_FULL_LOG_EVERY`], with their likely cause.
    fn log_overflow(&mut self) {
        let now = self.now();
        if !log_due(&mut self.overflow.logged, now) {
            return;
        }
        tracing::warn!(
            dropped = self.overflow.unlogged,
            total = self.overflow.total,
            recv_buffer_bytes = self.overflow.recv_buffer,
            "the kernel dropped {} receives at the hop's UDP socket ({} since start; a receive \
             is a datagram, or a run of datagrams the peer sent in one call): its receive \
             buffer ({} bytes as the kernel counts it) was full, so this worker did not read \
             fast enough for the peer's bursts (a busy or slow CPU, or many connections \
             starting at once); the peer's STP retransmits what was lost. If it persists, give \
             the daemon more cores (`workers`) or less competing load{}",
            self.overflow.unlogged,
            self.overflow.total,
            self.overflow.recv_buffer,
            if self.overflow.capped {
                ", and raise net.core.rmem_max: the kernel granted less buffer than the hop \
                 asked (see the warning at start)"
            } else {
                ""
            }
        );
        self.overflow.unlogged = 0;
    }

    /// Reads how full the socket's receive queue is and holds or frees the streams' windows
    /// ([`super::backpressure`]); logs an episode's start at most every
    /// [`QUEUE_FULL_LOG_EVERY`].
    fn check_backlog(&mut self) {
        let Some((queued, capacity)) = crate::sockopt::receive_queue(&self.socket) else {
            return;
        };
        let before = self.backpressure.ceiling();
        let streams = self.core.stream_count();
        let (ceiling, started) = self.backpressure.update(queued, capacity, streams);
        if ceiling != before {
            self.core.set_window_ceiling(ceiling);
        }
        if !started {
            return;
        }
        let now = self.now();
        if log_due(&mut self.backpressure_logged, now) {
            tracing::info!(
                queued_bytes = queued,
                recv_buffer_bytes = capacity,
                window_ceiling_bytes = ceiling,
                streams,
                episodes = self.backpressure.episodes,
                "the hop's UDP receive queue holds {queued} of its {capacity} bytes: this worker \
                 is not keeping up with what arrives (a busy or slow CPU, or more traffic than \
                 it can serve). Until the queue drains, each of its {} streams advertises a \
                 receive window of at most {} bytes, so the peer waits instead of losing \
                 datagrams to a full buffer ({} such episodes since start)",
                streams,
                ceiling.unwrap_or(0),
                self.backpressure.episodes,
            );
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// A handle for a stream the core carries: its writer's budget, its share of the read-ahead
    /// bound (which the core tells as STP sends its bytes) and its reader's channel.
    fn stream_handle(
        &mut self,
        info: StreamInfo,
        events: mpsc::Receiver<StreamEvent>,
    ) -> HopStream {
        let read_ahead = self.read_ahead.as_ref().map(|r| r.slot());
        if let Some(slot) = &read_ahead {
            let on_sent: Arc<dyn OnSent> = slot.clone();
            self.core.set_on_sent(info.id, on_sent);
        }
        HopStream {
            writer: HopWriter {
                id: self.ids.outer(info.id),
                budget: Arc::new(Semaphore::new(self.relay_buffer as usize)),
                budget_bytes: self.relay_buffer,
                tx: self.self_tx.clone(),
                ended: Default::default(),
                read_ahead,
            },
            reader: HopReader {
                rx: events,
                room: Arc::clone(&self.room),
            },
            peer: info.peer,
            peer_key: info.peer_key,
            home: Some(WorkerHome::here()),
        }
    }

    async fn run(mut self) {
        let mut buf = vec![0u8; 65_536];
        loop {
            let now = self.now();
            let mut wake = self
                .core
                .poll_timeout(now)
                .map(|t| self.start + Duration::from_nanos(t.as_nanos()))
                .unwrap_or_else(|| tokio::time::Instant::now() + IDLE_WAKE);
            let holding = self.core.holding();
            if holding {
                // A backstop: readers notify as they make room.
                wake = wake.min(tokio::time::Instant::now() + READ_RETRY);
            }
            let room = Arc::clone(&self.room);
            tokio::select! {
                r = self.socket.readable() => {
                    if r.is_ok() {
                        // Take everything already queued (up to MAX_BATCH datagrams) before
                        // pumping, so a burst cannot overflow the socket's receive buffer while
                        // we work per datagram.
                        let mut taken = 0;
                        while taken < MAX_BATCH {
                            let Ok(got) = self.udp.try_recv(&self.socket, &mut buf) else {
                                break;
                            };
                            if let Some(c) = got.overflows {
                                if self.overflow.note(c) {
                                    self.log_overflow();
                                }
                            }
                            let data = buf.get_mut(..got.len).unwrap_or_default();
                            let now = self.now();
                            for d in data.chunks_mut(got.segment.max(1)) {
                                taken += 1;
                                self.core.handle_datagram_in_place(now, got.from, d);
                            }
                        }
                        // A full batch is the sign of a backlog: see how full the queue is.
                        if taken >= MAX_BATCH || self.backpressure.is_on() {
                            self.check_backlog();
                        }
                    }
                }
                cmd = self.commands.recv() => {
                    match cmd {
                        Some(c) => {
                            self.on_command(c);
                            // And those already queued behind it (writes of other streams, or
                            // more of this one's), so one pump and one flush serve them all:
                            // fuller send batches, fewer passes per byte.
                            for _ in 1..MAX_COMMANDS {
                                let Ok(c) = self.commands.try_recv() else {
                                    break;
                                };
                                self.on_command(c);
                            }
                        }
                        None => {
                            if self.core.stream_count() == 0 { return; }
                        }
                    }
                }
                _ = room.notified(), if holding => {}
                _ = tokio::time::sleep_until(wake) => {
                    let now = self.now();
                    self.core.handle_timeout(now);
                }
            }
            self.pump();
            self.flush().await;
            self.core.report_sent();
            if self.shutting_down {
                self.core
                    .abort_all(AbortCode::HopClosed, StreamError::HopClosed);
                self.flush().await;
                return;
            }
        }
    }

    /// Lets the core work; streams it accepts go to `incoming` (refused when that is full).
    fn pump(&mut self) {
        let now = self.now();
        let mut accepted = Vec::new();
        let incoming = self.incoming.clone();
        let memory = self.memory.clone();
        let mut refused = 0u64;
        let mut accept = |info: StreamInfo| {
            // A slot in `incoming` first, so a refused stream costs no channel.
            let permit = match incoming.clone().try_reserve_owned() {
                Ok(p) => p,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    refused += 1;
                    return None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return None,
            };
            let (ev_tx, ev_rx) = mpsc::channel(READ_CHUNKS);
            accepted.push((info, ev_rx, permit));
            Some(Sink {
                tx: ev_tx,
                memory: memory.clone(),
            })
        };
        self.core.pump(now, &mut accept);
        for (info, events, permit) in accepted {
            permit.send(self.stream_handle(info, events));
        }
        if refused > 0 && log_due(&mut self.queue_full_logged, now) {
            tracing::warn!(
                refused,
                waiting = self.queue,
                "streams refused (reset as \"gateway overloaded\", the client gets a general \
                 failure): {} accepted streams already wait for the relay, the limit \
                 (the STP endpoint's max_accept_queue = {} per worker); the relay is not \
                 keeping up with the opens (CPU starved?)",
                self.queue,
                self.queue as u64 / self.ids.workers.max(1),
            );
        }
    }

    fn on_command(&mut self, c: Command) {
        match c {
            Command::Open {
                first,
                deadline,
                reply,
            } => {
                let now = self.now();
                let (ev_tx, ev_rx) = mpsc::channel(READ_CHUNKS);
                let deadline = deadline.map(|d| {
                    Instant::from_nanos(d.saturating_duration_since(self.start).as_nanos() as u64)
                });
                let sink = Sink {
                    tx: ev_tx,
                    memory: self.memory.clone(),
                };
                let r = self
                    .core
                    .open_by(now, Bytes::from(first), sink, deadline)
                    .map(|info| self.stream_handle(info, ev_rx));
                let _ = reply.send(r);
            }
            Command::Stream(StreamCmd::Data(id, bytes, permit)) => {
                self.core.write(self.ids.inner(id), bytes, Some(permit));
            }
            Command::Stream(StreamCmd::Shutdown(id)) => self.core.shutdown(self.ids.inner(id)),
            Command::Stream(StreamCmd::Abort(id, code)) => {
                self.core.abort(self.ids.inner(id), code)
            }
            Command::Status(reply) => {
                let mut status = self.core.status();
                status.socket_overflows = self.overflow.total;
                status.backpressure_episodes = self.backpressure.episodes;
                status.window_ceiling_bytes = self.backpressure.ceiling();
                for s in &mut status.streams {
                    s.id = self.ids.outer(s.id);
                }
                let _ = reply.send(status);
            }
            Command::ChargeTo(memory) => self.memory = Some(memory),
            Command::ReadAhead(bound) => self.read_ahead = Some(bound),
            Command::SetAllowed(keys, reply) => {
                let (added, removed) = self.core.set_allowed_terminals(keys).unwrap_or_default();
                let _ = reply.send(AllowedChange { added, removed });
            }
            Command::SetKeys(key, next, reply) => {
                let _ = reply.send(self.core.set_gateway_keys(key, next));
            }
            Command::Close => self.shutting_down = true,
        }
    }

    /// Sends what the core has to send. Runs of equal-sized datagrams to one destination leave
    /// in one system call where the kernel segments them. Each datagram is built and sealed at
    /// the end of the batch's bytes; one that cannot join waits there while the batch before it
    /// leaves.
    async fn flush(&mut self) {
        let mut batch = std::mem::take(&mut self.batch);
        // The clock is read again after each send (a system call); between them the datagrams
        // are built in a few microseconds, so one reading serves them all.
        let mut now = self.now();
        while let Some(t) = self.core.poll_transmit_append(now, &mut batch.bytes) {
            if !t.counted {
                // A handshake initiation: on its own, outside the counts.
                let tail = batch.bytes.get(batch.bytes.len() - t.size..);
                let _ = self
                    .socket
                    .send_to(tail.unwrap_or_default(), t.destination)
                    .await;
                batch.drop_tail();
                now = self.now();
                continue;
            }
            if !batch.fits(t.destination, t.size) {
                self.send_batch(&mut batch).await;
                now = self.now();
            }
            batch.commit(t.destination);
            if !self.udp.segments_sends() || batch.full() {
                self.send_batch(&mut batch).await;
                now = self.now();
            }
        }
        self.send_batch(&mut batch).await;
        self.batch = batch;
    }

    /// Sends a batch of sealed datagrams and empties it.
    async fn send_batch(&mut self, batch: &mut Batch) {
        let Some(dest) = batch.dest else {
            return;
        };
        if self
            .udp
            .send(&self.socket, batch.committed(), batch.segment, dest)
            .await
            .is_ok()
        {
            let now = self.now();
            self.core
                .note_sent(now, batch.count as u64, batch.committed().len() as u64);
        }
        batch.clear();
    }
}

#[cfg(test)]
mod overflow_tests {
    use super::SocketOverflow;

    #[test]
    fn the_kernels_count_is_summed_across_its_32_bit_wrap() {
        let mut o = SocketOverflow::default();
        assert!(o.note(5));
        assert!(!o.note(5), "no new drops");
        assert!(o.note(u32::MAX));
        assert!(o.note(3), "wrapped: 4 more");
        assert_eq!(o.total, u64::from(u32::MAX) + 4);
        assert_eq!(o.unlogged, o.total);
    }
}
