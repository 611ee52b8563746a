//! The forwarder of one direction: a thread that reads IP packets from one namespace's TUN
//! device, offers each to the direction's [`Lane`] (the link direction and its schedule, shared
//! with the UDP relay), and writes what the lane hands back into the other namespace's TUN device
//! at the model's arrival time.
//!
//! Timing: the thread sleeps in `ppoll(2)` on the input device and a stop descriptor, with the
//! timeout set to the absolute deadline of the earliest waiting packet (recomputed from the
//! clock after every wake-up, so oversleeping never accumulates), and with the thread's timer
//! slack lowered to 1 ns (the default 50 µs would let the kernel defer every wake-up). Every
//! wake-up writes all packets that are due, reads every packet that is waiting (up to
//! [`READ_BATCH`]) stamped with the clock at the read, and reports counters once. How late each
//! write is against its model time is measured and reported. Unless disabled, the thread runs
//! under SCHED_FIFO at a low real-time priority, so that ordinary processes keeping both cores
//! busy (compilers, the programs under test) do not delay a wake-up by a scheduler slice.

use super::tun::Tun;
use super::NetDirectionStats;
use crate::lane::Lane;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Largest packet read from a TUN device (its MTU is 1500, but an MTU can be raised).
const MAX_PACKET_BYTES: usize = 65_535;
/// Packets read per wake-up before due packets are written again.
pub const READ_BATCH: usize = 256;

/// Everything one direction's thread owns.
pub struct Forwarder {
    pub input: Arc<Tun>,
    pub output: Arc<Tun>,
    pub lane: Lane,
    pub epoch: Instant,
    pub stop: Arc<OwnedFd>,
    pub stats: Arc<Mutex<NetDirectionStats>>,
    /// Run under SCHED_FIFO (see [`REALTIME_PRIORITY`]).
    pub realtime: bool,
}

/// SCHED_FIFO priority of the forwarder threads: low among real-time priorities, above every
/// ordinary process, so that a busy machine does not hold a due packet back by a scheduler tick.
/// Each wake-up does bounded work and the kernel's real-time throttling still applies.
pub const REALTIME_PRIORITY: libc::c_int = 10;

/// Moves the calling thread to SCHED_FIFO; keeps the ordinary policy if that is refused.
fn set_realtime() -> bool {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: changes the policy of the calling thread only, with a valid sched_param.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}

fn now_ns(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Forwarder {
    /// Runs until the stop descriptor becomes readable.
    pub fn run(mut self) {
        // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument and affects only the
        // calling thread.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
        }
        if self.realtime {
            set_realtime();
        }
        let mut local = NetDirectionStats::default();
        let mut buf = vec![0u8; MAX_PACKET_BYTES + 1];
        loop {
            // Write everything due.
            let now = now_ns(self.epoch);
            while let Some(due) = self.lane.pop_due(now) {
                match self.output.write(&due.data) {
                    Ok(n) => {
                        local.written_packets += 1;
                        local.written_bytes = local.written_bytes.saturating_add(n as u64);
                        let late = now_ns(self.epoch).saturating_sub(due.at_ns);
                        local.late_max_ns = local.late_max_ns.max(late);
                        local.late_total_ns = local.late_total_ns.saturating_add(late);
                    }
                    Err(_) => local.write_errors += 1,
                }
            }
            self.report(&mut local);
            if let Ok(mut shared) = self.stats.lock() {
                *shared = local.clone();
            }
            // Sleep until the next deadline, a packet to read, or the stop signal.
            let timeout = self
                .lane
                .next_at()
                .map(|at| at.saturating_sub(now_ns(self.epoch)));
            match wait(&self.input, &self.stop, timeout) {
                Ok(Wake { stop: true, .. }) => break,
                Ok(Wake { readable: true, .. }) => {}
                Ok(_) => continue,
                Err(_) => {
                    local.read_errors += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            }
            for _ in 0..READ_BATCH {
                match self.input.read(&mut buf) {
                    Ok(n) => {
                        let t = now_ns(self.epoch);
                        let packet = buf.get(..n.min(MAX_PACKET_BYTES)).unwrap_or(&[]);
                        local.read_packets += 1;
                        local.read_bytes = local.read_bytes.saturating_add(packet.len() as u64);
                        self.lane.offer(t, packet);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        // E.g. the device went away: count it, without spinning if it repeats.
                        local.read_errors += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        break;
                    }
                }
            }
        }
        self.report(&mut local);
        if let Ok(mut shared) = self.stats.lock() {
            *shared = local;
        }
    }

    /// Copies the lane's counters into `local`.
    fn report(&self, local: &mut NetDirectionStats) {
        local.link = self.lane.link_stats();
        local.dropped_schedule = self.lane.dropped_schedule();
        (local.in_flight, local.in_flight_bytes) = self.lane.in_flight();
    }
}

struct Wake {
    readable: bool,
    stop: bool,
}

/// `ppoll` on the input device and the stop descriptor, for at most `timeout_ns` (for ever
/// without it).
fn wait(input: &Tun, stop: &OwnedFd, timeout_ns: Option<u64>) -> io::Result<Wake> {
    let mut fds = [
        libc::pollfd {
            fd: input.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid array of two pollfd; `ts_ptr` is null or points to a timespec
    // that outlives the call; no signal mask is passed.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, ts_ptr, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(Wake {
                readable: false,
                stop: false,
            });
        }
        return Err(e);
    }
    let [input, stop] = fds;
    Ok(Wake {
        readable: input.revents & libc::POLLIN != 0,
        stop: stop.revents & libc::POLLIN != 0,
    })
}
