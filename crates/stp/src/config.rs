//! Connection and endpoint parameters, with documented defaults, units in the names, and
//! validation that names the offending field. `docs/stp-spec.md` §8 lists them all.

use crate::wire::{MIN_DATAGRAM, SD_RESERVE};
use std::time::Duration;
use thiserror::Error;

/// A configuration value out of range; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid STP configuration: {field}: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

/// Initial congestion window of the window controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialWindow {
    /// A number of full-sized SDs.
    Packets(u32),
    /// min(4·MSS, max(2·MSS, 4380 bytes)) — RFC 3390, the seeds' "4KSS".
    FourKss,
}

impl InitialWindow {
    /// The initial window in bytes for a given SD payload size.
    pub fn bytes(self, mss: u64) -> u64 {
        match self {
            InitialWindow::Packets(n) => u64::from(n.max(1)) * mss,
            InitialWindow::FourKss => (4 * mss).min((2 * mss).max(4380)),
        }
    }
}

/// Which congestion controller a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionMode {
    /// TCP-equivalent window control with byte counting (the seeds' default).
    Window,
    /// A fixed sending rate allocated by the network, in bits per second of datagram bytes.
    Rate { rate_bps: u64 },
    /// Window control started from a known allocation of `rate_bps` (bits per second of
    /// datagram bytes): the first window is the allocation's bandwidth-delay product over
    /// `initial_rtt_ms`, pacing never exceeds the allocation, and the window halves once per
    /// episode on loss or when an RTT sample exceeds the smallest RTT by more than
    /// `max_queue_delay_ms` (spec §6.5).
    Allocated {
        rate_bps: u64,
        max_queue_delay_ms: u32,
    },
}

/// Parameters of one connection. Both sides of a connection may use different values.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Largest datagram this side sends or accepts, STP header included (default 1452: a
    /// 1500-byte IPv6 path minus IPv6 and UDP headers).
    pub max_datagram_bytes: u16,
    /// Receive buffer: in-order unread plus out-of-order bytes (default 4 MiB).
    pub recv_buffer_bytes: u32,
    /// Send buffer: written but not yet acknowledged bytes (default 4 MiB).
    pub send_buffer_bytes: u32,
    /// Congestion controller (default `Window`).
    pub congestion: CongestionMode,
    /// Initial window of the window controller (default 10 packets).
    pub initial_window: InitialWindow,
    /// Lower bound on the pacing rate, bits/s (default none).
    pub min_rate_bps: Option<u64>,
    /// Upper bound on the pacing rate, bits/s (default none).
    pub max_rate_bps: Option<u64>,
    /// Budget for this side's feedback (STAT, USTAT, window updates) when it travels without
    /// data, bits/s of datagram bytes; set it to a share of a thin return channel so feedback
    /// never queues there. POLLs arriving while the budget is spent are answered together by one
    /// STAT (default none: no limit).
    pub reverse_rate_bps: Option<u64>,
    /// Granularity of the delayed-send timer, µs (default 1000).
    pub pacing_granularity_us: u32,
    /// Timer POLLs per smoothed RTT (default 3).
    pub polls_per_rtt: u32,
    /// Also POLL after this many new SDs since the last POLL; 0 disables (default 0).
    pub poll_every_sds: u32,
    /// Lower bound of the POLL interval, ms (default 10).
    pub min_poll_interval_ms: u32,
    /// Upper bound of the POLL interval, backoff included, ms (default 4000).
    pub max_poll_interval_ms: u32,
    /// Consecutive unanswered POLLs before backoff and window collapse (default 3).
    pub poll_miss_threshold: u32,
    /// Below this congestion window (in full SDs) the last SD of every burst carries a POLL and
    /// the POLL timer only backs that up, at 2·srtt + 4·rttvar (default 10).
    pub small_window_packets: u32,
    /// SDs that must arrive above a hole before the receiver reports it by USTAT (default 3).
    pub reorder_threshold: u32,
    /// Most holes awaiting the reorder threshold (and most USTATs queued) at once; past it the
    /// oldest is dropped and left to the next STAT (default 256).
    pub max_pending_gaps: u32,
    /// RTT assumed before the first sample, ms (default 600).
    pub initial_rtt_ms: u32,
    /// First BGN retransmission timeout, ms; doubles on every retry up to 64 times this value
    /// (default 1000). END is repeated by the POLL timer instead.
    pub handshake_timeout_ms: u32,
    /// With nothing outstanding, POLL (keepalive) after this long without hearing from the peer,
    /// ms (default 10000).
    pub keepalive_interval_ms: u32,
    /// Declare the peer dead after hearing nothing for this long, ms (default 30000).
    pub dead_timeout_ms: u32,
    // --- Window controller options of the short-transfer and deep-queue studies (spec §7.2b) ---
    /// Window controller: halve the window (once per loss episode, as for a loss) when an RTT
    /// sample exceeds the smallest RTT seen by more than this many ms; `None` (default) never
    /// backs off on delay, as the seeds' STP.
    pub window_rtt_backoff_ms: Option<u32>,
    /// Window controller: send the first flight (before the first report arrives) unpaced, as
    /// T/TCP would, instead of spreading it over the assumed RTT (default false).
    pub unpaced_first_flight: bool,
    /// Window controller: one pacing gain for every phase, 1.0 to 4.0 (the seeds' STP spreads
    /// each window uniformly over the RTT: 1.0); `None` (default): 2.0 in slow start, 1.25 in
    /// congestion avoidance (spec §7.3, design decision 17).
    pub pacing_gain: Option<f64>,
    /// Window controller: let bytes in flight exceed cwnd by the report allowance
    /// cwnd · T / srtt, T the POLL interval (spec §7.2a, design decision 29; default true). The
    /// seeds' STP has none: false.
    pub report_allowance: bool,
    /// Pace over min(srtt, 2 · smallest RTT) instead of srtt, so return-path queueing does not
    /// slow the sender (design decision 17; default true). The seeds spread each window over the
    /// smoothed RTT: false.
    pub pacing_rtt_cap: bool,
    /// Window controller: leave slow start, without reducing the window, once the smallest of
    /// three consecutive RTT samples exceeds the smallest RTT seen by clamp(min RTT / 8, 4 ms,
    /// 16 ms) (HyStart's delay test with RFC 9406's thresholds; spec §7.2c). Default false: an
    /// RTT sample includes the return path, so a queue of STATs on a thin return channel ends
    /// slow start early (spec §7.2c has the measurements). The seeds' STP leaves slow start only
    /// on a loss.
    pub slow_start_delay_exit: bool,
    /// Compute the checksum of every datagram sent (spec §3.3; default true). false leaves the
    /// field zero: only for a driver whose carrier authenticates every byte and which fills the
    /// checksum ([`crate::wire::fill_checksum`]) for a peer that has not said it skips the
    /// verification (satstp's tunnel, `docs/tunnel.md`, "Capabilities").
    pub emit_checksum: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_datagram_bytes: 1452,
            recv_buffer_bytes: 4 << 20,
            send_buffer_bytes: 4 << 20,
            congestion: CongestionMode::Window,
            initial_window: InitialWindow::Packets(10),
            min_rate_bps: None,
            max_rate_bps: None,
            reverse_rate_bps: None,
            pacing_granularity_us: 1000,
            polls_per_rtt: 3,
            poll_every_sds: 0,
            min_poll_interval_ms: 10,
            max_poll_interval_ms: 4000,
            poll_miss_threshold: 3,
            small_window_packets: 10,
            reorder_threshold: 3,
            max_pending_gaps: 256,
            initial_rtt_ms: 600,
            handshake_timeout_ms: 1000,
            keepalive_interval_ms: 10_000,
            dead_timeout_ms: 30_000,
            window_rtt_backoff_ms: None,
            unpaced_first_flight: false,
            pacing_gain: None,
            report_allowance: true,
            pacing_rtt_cap: true,
            slow_start_delay_exit: false,
            emit_checksum: true,
        }
    }
}

/// A named set of options (spec §11a): `profile = "thesis"` in a `[flow.stp]`, a reproduction
/// or a gateway's `[terminal.stp]` / `[gateway.stp]` table. Keys set beside the profile
/// override it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The engine's defaults (spec §8): the gateway's choice.
    Default,
    /// The seeds' STP as the thesis ran it (ch. 5, the kernel variant of Figs 5.10/5.11): each
    /// window spread uniformly over srtt (pacing gain 1, no RTT cap) on 10 ms ticks, no report
    /// allowance, an initial window of one packet, a POLL with the last SD of every burst below
    /// a window of 10 packets, three timer POLLs per RTT above it; TCP's slow start, avoidance
    /// and halving with byte counting (the window controller's own rules).
    Thesis,
}

impl Profile {
    /// The names accepted by `profile`.
    pub const NAMES: [&'static str; 2] = ["default", "thesis"];

    /// The profile called `name` (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<Profile> {
        match name.to_ascii_lowercase().as_str() {
            "default" => Some(Profile::Default),
            "thesis" => Some(Profile::Thesis),
            _ => None,
        }
    }

    /// The profile's name as written in files.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Thesis => "thesis",
        }
    }

    /// Sets the options the profile names on `c`, leaving every other field (buffers, datagram
    /// size, controller, timers) as it is.
    pub fn apply_to(self, c: &mut Config) {
        let d = Config::default();
        let (gain, tick, allowance, cap, iw, small, polls, delay_exit) = match self {
            Profile::Default => (
                d.pacing_gain,
                d.pacing_granularity_us,
                d.report_allowance,
                d.pacing_rtt_cap,
                d.initial_window,
                d.small_window_packets,
                d.polls_per_rtt,
                d.slow_start_delay_exit,
            ),
            Profile::Thesis => (
                Some(1.0),
                10_000,
                false,
                false,
                InitialWindow::Packets(1),
                10,
                3,
                false,
            ),
        };
        c.pacing_gain = gain;
        c.pacing_granularity_us = tick;
        c.report_allowance = allowance;
        c.pacing_rtt_cap = cap;
        c.initial_window = iw;
        c.small_window_packets = small;
        c.polls_per_rtt = polls;
        c.slow_start_delay_exit = delay_exit;
    }

    /// The default configuration with the profile applied.
    pub fn config(self) -> Config {
        let mut c = Config::default();
        self.apply_to(&mut c);
        c
    }
}

impl Config {
    /// Checks every field; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if usize::from(self.max_datagram_bytes) < MIN_DATAGRAM {
            return Err(bad(
                "max_datagram_bytes",
                format!("must be at least {MIN_DATAGRAM}"),
            ));
        }
        let mss = self.max_payload() as u32;
        if self.recv_buffer_bytes < 2 * mss {
            return Err(bad("recv_buffer_bytes", "must hold at least two full SDs"));
        }
        if self.recv_buffer_bytes > 1 << 30 {
            return Err(bad("recv_buffer_bytes", "must be at most 1 GiB"));
        }
        if self.send_buffer_bytes < mss || self.send_buffer_bytes > 1 << 30 {
            return Err(bad("send_buffer_bytes", "must be between one SD and 1 GiB"));
        }
        if let CongestionMode::Rate { rate_bps } = self.congestion {
            if rate_bps < 1000 {
                return Err(bad("congestion.rate_bps", "must be at least 1000 bit/s"));
            }
        }
        if let CongestionMode::Allocated {
            rate_bps,
            max_queue_delay_ms,
        } = self.congestion
        {
            if rate_bps < 1000 {
                return Err(bad("congestion.rate_bps", "must be at least 1000 bit/s"));
            }
            if max_queue_delay_ms == 0 || max_queue_delay_ms > 60_000 {
                return Err(bad(
                    "congestion.max_queue_delay_ms",
                    "must be from 1 to 60000",
                ));
            }
        }
        if matches!(self.window_rtt_backoff_ms, Some(ms) if ms == 0 || ms > 600_000) {
            return Err(bad("window_rtt_backoff_ms", "must be from 1 to 600000"));
        }
        if let InitialWindow::Packets(n) = self.initial_window {
            if n == 0 || n > 1000 {
                return Err(bad("initial_window", "must be from 1 to 1000 packets"));
            }
        }
        if let (Some(lo), Some(hi)) = (self.min_rate_bps, self.max_rate_bps) {
            if lo > hi {
                return Err(bad("min_rate_bps", "must not exceed max_rate_bps"));
            }
        }
        if self.max_rate_bps == Some(0) {
            return Err(bad("max_rate_bps", "must be positive"));
        }
        if matches!(self.reverse_rate_bps, Some(r) if r < 100) {
            return Err(bad("reverse_rate_bps", "must be at least 100 bit/s"));
        }
        if matches!(self.pacing_gain, Some(g) if !(1.0..=4.0).contains(&g)) {
            return Err(bad("pacing_gain", "must be from 1.0 to 4.0"));
        }
        if self.pacing_granularity_us == 0 || self.pacing_granularity_us > 100_000 {
            return Err(bad("pacing_granularity_us", "must be from 1 to 100000"));
        }
        if self.polls_per_rtt == 0 || self.polls_per_rtt > 100 {
            return Err(bad("polls_per_rtt", "must be from 1 to 100"));
        }
        if self.min_poll_interval_ms == 0 {
            return Err(bad("min_poll_interval_ms", "must be positive"));
        }
        if self.max_poll_interval_ms < self.min_poll_interval_ms {
            return Err(bad(
                "max_poll_interval_ms",
                "must be at least min_poll_interval_ms",
            ));
        }
        if self.poll_miss_threshold == 0 {
            return Err(bad("poll_miss_threshold", "must be positive"));
        }
        if self.max_pending_gaps == 0 || self.max_pending_gaps > 65_536 {
            return Err(bad("max_pending_gaps", "must be from 1 to 65536"));
        }
        if self.initial_rtt_ms == 0 || self.initial_rtt_ms > 60_000 {
            return Err(bad("initial_rtt_ms", "must be from 1 to 60000"));
        }
        if self.handshake_timeout_ms == 0 {
            return Err(bad("handshake_timeout_ms", "must be positive"));
        }
        if self.keepalive_interval_ms == 0 {
            return Err(bad("keepalive_interval_ms", "must be positive"));
        }
        if self.dead_timeout_ms <= self.keepalive_interval_ms {
            return Err(bad("dead_timeout_ms", "must exceed keepalive_interval_ms"));
        }
        if self.dead_timeout_ms <= self.max_poll_interval_ms {
            return Err(bad("dead_timeout_ms", "must exceed max_poll_interval_ms"));
        }
        Ok(())
    }

    /// Largest SD payload this side sends: the datagram size less `wire::SD_RESERVE` (the header
    /// and room for a POLL, an END and a BGN/BGNAK to ride along).
    pub fn max_payload(&self) -> usize {
        usize::from(self.max_datagram_bytes) - SD_RESERVE
    }

    pub(crate) fn ms(v: u32) -> Duration {
        Duration::from_millis(u64::from(v))
    }
}

/// Parameters of an endpoint (the set of connections sharing one datagram socket).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// Whether BGNs from peers are accepted (default true).
    pub accept_incoming: bool,
    /// Most live connections (default 10000); further BGNs are refused with RST.
    pub max_connections: u32,
    /// Most accepted connections not yet taken by `accept` (default 1024).
    pub max_accept_queue: u32,
    /// How long a closed connection's identity is remembered, so that late packets are recognised
    /// and late ENDs answered, ms (default 60000).
    pub closed_retention_ms: u32,
    /// Most remembered closed connections (default 65536).
    pub max_closed_entries: u32,
    /// Most stateless RSTs sent per second (default 100).
    pub stateless_resets_per_s: u32,
    /// Parameters for every connection of the endpoint.
    pub connection: Config,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            accept_incoming: true,
            max_connections: 10_000,
            max_accept_queue: 1024,
            closed_retention_ms: 60_000,
            max_closed_entries: 65_536,
            stateless_resets_per_s: 100,
            connection: Config::default(),
        }
    }
}

impl EndpointConfig {
    /// Checks every field, including the connection parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(bad("max_connections", "must be positive"));
        }
        if self.max_accept_queue == 0 {
            return Err(bad("max_accept_queue", "must be positive"));
        }
        if self.max_closed_entries == 0 {
            return Err(bad("max_closed_entries", "must be positive"));
        }
        self.connection.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        EndpointConfig::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_field() {
        let c = Config {
            polls_per_rtt: 0,
            ..Config::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "polls_per_rtt");
        let c = Config {
            max_datagram_bytes: 100,
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("max_datagram_bytes"));
    }

    #[test]
    fn profiles_set_only_their_options() {
        assert_eq!(Profile::Default.config(), Config::default());
        let base = Config {
            recv_buffer_bytes: 1 << 16,
            ..Config::default()
        };
        let mut t = base.clone();
        Profile::Thesis.apply_to(&mut t);
        t.validate().unwrap();
        assert_eq!(
            t.recv_buffer_bytes,
            1 << 16,
            "buffers are not the profile's"
        );
        assert_eq!(t.pacing_gain, Some(1.0));
        assert_eq!(t.pacing_granularity_us, 10_000);
        assert!(!t.report_allowance && !t.pacing_rtt_cap);
        assert_eq!(t.initial_window, InitialWindow::Packets(1));
        Profile::Default.apply_to(&mut t);
        assert_eq!(t, base);
        assert_eq!(Profile::from_name("Thesis"), Some(Profile::Thesis));
        assert_eq!(Profile::from_name("seeds"), None);
    }

    #[test]
    fn four_kss() {
        assert_eq!(InitialWindow::FourKss.bytes(1000), 4000);
        assert_eq!(InitialWindow::FourKss.bytes(1460), 4380);
        assert_eq!(InitialWindow::FourKss.bytes(3000), 6000);
        assert_eq!(InitialWindow::Packets(10).bytes(1000), 10_000);
    }
}
