//! The IP-level link emulator (Linux, root): two network namespaces, the terminal side and the
//! gateway side, joined only through a user-space forwarder that applies the shared link model
//! to every IP packet, one [`crate::Lane`] (a [`linkmodel::Direction`] and its schedule) per
//! direction.
//!
//! ```text
//!  terminal namespace                                             gateway namespace
//!  satstp-<tag>-t                                                 satstp-<tag>-g
//!  sat0 198.18.0.1/24, 2001:2::1/64                               sat0 198.18.0.2/24, 2001:2::2/64
//!    │  TUN                                                              TUN  │
//!    └──► up thread:   read ─► link model (rate, queue, delay, loss) ─► write ──┘
//!    ┌─── down thread: write ◄─ link model ◄──────────────────────────── read ◄┐
//! ```
//!
//! Each namespace has one TUN device, `sat0`, holding its address and the default routes (IPv4
//! and IPv6), and loopback. Addresses come from the benchmarking ranges set aside for exactly
//! this kind of isolated test network, 198.18.0.0/15 (RFC 2544) and 2001:2::/48 (RFC 5180); they
//! exist only inside the two namespaces. Each direction is one thread (see `forward`), so the
//! emulator uses at most two cores' worth of wake-ups and no locks on the data path.
//!
//! The emulator is a library: [`NetEmulator::start`] brings everything up (cleaning namespaces
//! left by crashed runs first), [`NetEmulator::command`] and [`NetEmulator::run_in`] run a
//! program or a closure on either side, [`NetEmulator::stats`] reads the counters, and
//! [`NetEmulator::stop`] (or drop) tears everything down.

mod forward;
mod netns;
mod tun;

pub use netns::{clean_stale, list_ours, LOCK_DIR, NAME_PREFIX, NETNS_DIR};

use crate::lane::Lane;
use crate::relay::Direction;
use crate::Profile;
use forward::Forwarder;
use linkmodel::{LinkConfig, LinkConfigError, LinkStats};
use netns::NsPair;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use thiserror::Error;

/// Name of the TUN device in each namespace.
pub const TUN_NAME: &str = "sat0";
/// The terminal side's address.
pub const TERMINAL_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The gateway side's address.
pub const GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The terminal side's IPv6 address.
pub const TERMINAL_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 1);
/// The gateway side's IPv6 address.
pub const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 2);
/// Transmit queue length of the TUN devices, packets: room for bursts while a forwarder thread
/// is writing.
pub const TUN_TXQUEUELEN: u32 = 2000;

/// One side of the emulated link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The terminal side (the satellite user).
    Terminal,
    /// The gateway side (the ground station, towards the Internet).
    Gateway,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Terminal => "terminal",
            Side::Gateway => "gateway",
        })
    }
}

impl Side {
    /// This side's IPv4 address.
    pub fn ipv4(self) -> Ipv4Addr {
        match self {
            Side::Terminal => TERMINAL_V4,
            Side::Gateway => GATEWAY_V4,
        }
    }

    /// This side's IPv6 address.
    pub fn ipv6(self) -> Ipv6Addr {
        match self {
            Side::Terminal => TERMINAL_V6,
            Side::Gateway => GATEWAY_V6,
        }
    }
}

/// What the emulator is to do.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// Terminal → gateway link. Byte counts are of whole IP packets; `overhead_bytes` is added
    /// on the medium as for any link.
    pub up: LinkConfig,
    /// Gateway → terminal link.
    pub down: LinkConfig,
    /// Seed of the links' random generators (the down link uses `seed + 1`).
    pub seed: u64,
    /// Namespace names are `satstp-<tag>-t` and `-g`; `None` picks `<pid>-<n>`, unique.
    pub tag: Option<String>,
    /// Run the forwarder threads under SCHED_FIFO at a low real-time priority (default true);
    /// if the kernel refuses, they run as ordinary threads.
    pub realtime: bool,
}

impl NetConfig {
    /// A profile's links for IP packets ([`Profile::ip_links`]), no traces, seed 1.
    pub fn from_profile(profile: Profile) -> Self {
        let (up, down) = profile.ip_links();
        NetConfig::new(up, down)
    }

    /// The given links, no traces, seed 1.
    pub fn new(up: LinkConfig, down: LinkConfig) -> Self {
        NetConfig {
            up,
            down,
            seed: 1,
            tag: None,
            realtime: true,
        }
    }
}

/// Why the emulator cannot run, or could not tear down.
#[derive(Debug, Error)]
pub enum NetError {
    #[error("the IP-level emulator cannot run here: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Config(String),
    #[error("{direction} link: {error}")]
    Link {
        direction: Direction,
        error: LinkConfigError,
    },
    #[error("'{command}' failed: {detail}")]
    Command { command: String, detail: String },
    #[error("{what}: {error}")]
    Io { what: String, error: io::Error },
}

/// Counters of one direction. `link` holds the model's decisions; the other fields count what
/// the forwarder did. Byte counts are of IP packets (plus the link's overhead in `link`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetDirectionStats {
    /// Offered, delivered and dropped by cause, as decided by the link model.
    pub link: LinkStats,
    /// Packets read from the sending side's TUN device (and offered to the link).
    pub read_packets: u64,
    pub read_bytes: u64,
    /// Packets written into the receiving side's TUN device, duplicates included.
    pub written_packets: u64,
    pub written_bytes: u64,
    /// Accepted by the model but dropped because the delivery schedule was full.
    pub dropped_schedule: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    /// Packets waiting for their arrival time now, and their bytes.
    pub in_flight: u64,
    pub in_flight_bytes: u64,
    /// How late writes were against the model's arrival times: the worst, and the sum (divide by
    /// `written_packets` for the mean), nanoseconds.
    pub late_max_ns: u64,
    pub late_total_ns: u64,
}

impl NetDirectionStats {
    /// Packets dropped for any reason: by the model (queue, RED, errors, outages) or because
    /// the schedule was full.
    pub fn dropped(&self) -> u64 {
        let l = &self.link;
        l.dropped_queue + l.dropped_red + l.dropped_error + l.dropped_outage + self.dropped_schedule
    }

    /// Mean lateness of a write, nanoseconds.
    pub fn late_mean_ns(&self) -> u64 {
        self.late_total_ns
            .checked_div(self.written_packets)
            .unwrap_or(0)
    }
}

/// Counters of both directions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    pub up: NetDirectionStats,
    pub down: NetDirectionStats,
}

/// Checks that this process can run the emulator: Linux, root (or CAP_NET_ADMIN and
/// CAP_SYS_ADMIN) and `/dev/net/tun`. The error says what is missing.
pub fn check_support() -> Result<(), NetError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetError::Unsupported(
            "it needs root (network namespaces and TUN devices)".into(),
        ));
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err(NetError::Unsupported(
            "/dev/net/tun is missing (load the tun module or run where it exists)".into(),
        ));
    }
    Ok(())
}

/// The running emulator. Dropping it tears everything down too; [`NetEmulator::stop`] also
/// reports errors and returns the final counters.
pub struct NetEmulator {
    ns: Option<NsPair>,
    stop: Arc<OwnedFd>,
    threads: Vec<JoinHandle<()>>,
    up: Arc<Mutex<NetDirectionStats>>,
    down: Arc<Mutex<NetDirectionStats>>,
    epoch: Instant,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor we just created and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal(fd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from `one` to an eventfd we own.
    unsafe {
        libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8);
    }
}

/// Runs `f` on a thread that has joined the network namespace `name` (as listed by
/// `ip netns list`, e.g. [`NetEmulator::namespace`]) and returns its result. Sockets `f` creates
/// belong to that namespace and can be used from any thread afterwards.
pub fn in_namespace<T, F>(name: &str, f: F) -> Result<T, NetError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tun::in_netns(&netns::netns_path(name), f).map_err(|error| NetError::Io {
        what: format!("cannot enter namespace {name}"),
        error,
    })
}

/// The `ip -batch` commands configuring `sat0` on one side.
fn side_setup(side: Side) -> String {
    format!(
        "link set lo up\n\
         link set {TUN_NAME} txqueuelen {TUN_TXQUEUELEN}\n\
         link set {TUN_NAME} addrgenmode none\n\
         addr add {v4}/24 dev {TUN_NAME}\n\
         addr add {v6}/64 dev {TUN_NAME} nodad\n\
         link set {TUN_NAME} up\n\
         route add default dev {TUN_NAME}\n\
         route add ::/0 dev {TUN_NAME}\n",
        v4 = side.ipv4(),
        v6 = side.ipv6(),
    )
}

impl NetEmulator {
    /// Validates the configuration, cleans namespaces left by crashed runs, creates the two
    /// namespaces with their TUN devices and addresses, and starts forwarding. The model's clock
    /// starts when forwarding starts.
    pub fn start(config: NetConfig) -> Result<NetEmulator, NetError> {
        let up_lane =
            Lane::new(config.up, ChaCha8Rng::seed_from_u64(config.seed)).map_err(|error| {
                NetError::Link {
                    direction: Direction::Up,
                    error,
                }
            })?;
        let down_lane = Lane::new(
            config.down,
            ChaCha8Rng::seed_from_u64(config.seed.wrapping_add(1)),
        )
        .map_err(|error| NetError::Link {
            direction: Direction::Down,
            error,
        })?;
        check_support()?;
        clean_stale()?;
        let ns = NsPair::create(config.tag.as_deref())?;
        let open = |name: &str| {
            tun::Tun::open_in(&netns::netns_path(name), TUN_NAME).map_err(|error| NetError::Io {
                what: format!("cannot create TUN device {TUN_NAME} in namespace {name}"),
                error,
            })
        };
        let terminal_tun = Arc::new(open(&ns.terminal)?);
        let gateway_tun = Arc::new(open(&ns.gateway)?);
        for (side, name) in [(Side::Terminal, &ns.terminal), (Side::Gateway, &ns.gateway)] {
            netns::run_ip(&["-n", name, "-batch", "-"], Some(&side_setup(side)))?;
        }
        let stop = Arc::new(eventfd().map_err(|error| NetError::Io {
            what: "cannot create an eventfd".into(),
            error,
        })?);
        let up = Arc::new(Mutex::new(NetDirectionStats::default()));
        let down = Arc::new(Mutex::new(NetDirectionStats::default()));
        let epoch = Instant::now();
        let lanes = [
            (
                "linkem-up",
                Forwarder {
                    input: terminal_tun.clone(),
                    output: gateway_tun.clone(),
                    lane: up_lane,
                    epoch,
                    stop: stop.clone(),
                    stats: up.clone(),
                    realtime: config.realtime,
                },
            ),
            (
                "linkem-down",
                Forwarder {
                    input: gateway_tun,
                    output: terminal_tun,
                    lane: down_lane,
                    epoch,
                    stop: stop.clone(),
                    stats: down.clone(),
                    realtime: config.realtime,
                },
            ),
        ];
        let mut emu = NetEmulator {
            ns: Some(ns),
            stop,
            threads: Vec::new(),
            up,
            down,
            epoch,
        };
        for (name, fwd) in lanes {
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || fwd.run())
                .map_err(|error| NetError::Io {
                    what: "cannot start a forwarder thread".into(),
                    error,
                })?;
            emu.threads.push(handle);
        }
        Ok(emu)
    }

    /// The namespace of a side (for `ip netns exec NAME …`).
    pub fn namespace(&self, side: Side) -> &str {
        match (&self.ns, side) {
            (Some(ns), Side::Terminal) => &ns.terminal,
            (Some(ns), Side::Gateway) => &ns.gateway,
            (None, _) => "",
        }
    }

    /// A command that runs `program` in a side's namespace (through `ip netns exec`); configure
    /// and spawn it as any [`Command`].
    pub fn command(&self, side: Side, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(netns::ip_binary());
        cmd.args(["netns", "exec", self.namespace(side)])
            .arg(program);
        cmd
    }

    /// Runs `f` on a thread inside a side's namespace and returns its result. Sockets `f`
    /// creates belong to that namespace and can be used from any thread afterwards.
    pub fn run_in<T, F>(&self, side: Side, f: F) -> Result<T, NetError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let name = self.namespace(side).to_string();
        tun::in_netns(&netns::netns_path(&name), f).map_err(|error| NetError::Io {
            what: format!("cannot enter namespace {name}"),
            error,
        })
    }

    /// Nanoseconds since forwarding started (the model's clock).
    pub fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Counters of both directions now (updated by each forwarder after every wake-up).
    pub fn stats(&self) -> NetStats {
        let get = |m: &Mutex<NetDirectionStats>| match m.lock() {
            Ok(s) => s.clone(),
            Err(e) => e.into_inner().clone(),
        };
        NetStats {
            up: get(&self.up),
            down: get(&self.down),
        }
    }

    fn shutdown(&mut self) -> Result<(), NetError> {
        signal(&self.stop);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The forwarders held the last references to the TUN devices: they are closed now.
        match self.ns.take() {
            Some(ns) => ns.delete(),
            None => Ok(()),
        }
    }

    /// Stops forwarding (packets still waiting are discarded and stay counted in `in_flight`),
    /// deletes both namespaces and returns the final counters.
    pub fn stop(mut self) -> Result<NetStats, NetError> {
        self.shutdown()?;
        Ok(self.stats())
    }
}

impl Drop for NetEmulator {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
