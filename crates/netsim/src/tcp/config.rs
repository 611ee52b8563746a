//! Parameters of one TCP endpoint: the sender variant, window and timer options the seeds study,
//! with documented defaults, units in the names, and validation that names the offending field.

use crate::sim::{Time, MS, SEC};
use thiserror::Error;

/// A configuration value out of range; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid TCP configuration: {field}: {reason}")]
pub struct TcpConfigError {
    pub field: &'static str,
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> TcpConfigError {
    TcpConfigError {
        field,
        reason: reason.into(),
    }
}

/// Loss recovery and congestion control of the sender (thesis §4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// 4.4BSD Reno: fast retransmit on three duplicate ACKs, window inflation, and recovery ends on
    /// the first ACK of new data (`cwnd = ssthresh`). Several losses in one window usually end in
    /// a retransmission timeout, and duplicate ACKs after a timeout may trigger false fast
    /// retransmits.
    Reno,
    /// NewReno (thesis appendix A rules 1–4; RFC 6582 partial-ACK handling, "slow-but-steady"):
    /// recovery lasts until everything outstanding at the loss is acknowledged; each partial ACK
    /// retransmits the next unacknowledged segment, so one loss is repaired per round trip.
    NewReno,
    /// SACK loss recovery (appendix A rules 5–7: eligibility, one retransmission per ACK, SACK use
    /// after a timeout) with Reno's recovery exit: the first ACK of new data ends recovery with
    /// `cwnd = ssthresh`, there is no `snd_recover`, so holes left over start a new fast retransmit
    /// and a new window halving.
    SackReno,
    /// The thesis's SACK-NewReno: appendix A rules 1–7 exactly.
    SackNewReno,
}

impl Variant {
    /// Whether the sender uses SACK information (when the peer permits SACK).
    pub fn uses_sack(self) -> bool {
        matches!(self, Variant::SackReno | Variant::SackNewReno)
    }

    /// Whether recovery lasts until `snd_recover` is acknowledged (NewReno rules 1–4).
    pub fn newreno_recovery(self) -> bool {
        matches!(self, Variant::NewReno | Variant::SackNewReno)
    }
}

/// Initial congestion window (thesis §2.1.2 and §4.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialWindow {
    /// One segment (the seeds' standard TCP).
    One,
    /// Two segments.
    Two,
    /// "4K slow start": min(4·MSS, max(2·MSS, 4380 bytes)) (RFC 3390).
    FourKss,
    /// Ten segments (RFC 6928).
    Ten,
    /// Any number of segments (at least one).
    Segments(u32),
}

impl InitialWindow {
    /// The initial window in bytes for a maximum segment size of `mss` bytes.
    pub fn bytes(self, mss: u64) -> u64 {
        match self {
            InitialWindow::One => mss,
            InitialWindow::Two => 2 * mss,
            InitialWindow::FourKss => (4 * mss).min((2 * mss).max(4380)),
            InitialWindow::Ten => 10 * mss,
            InitialWindow::Segments(n) => u64::from(n.max(1)) * mss,
        }
    }
}

/// How the congestion window grows in congestion avoidance (thesis §4.1.4–4.1.5). Every policy
/// adds at most one segment per acknowledged segment, so none is burstier than slow start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IncreasePolicy {
    /// About one segment per round trip: `cwnd += MSS·MSS/cwnd` per ACK.
    Standard,
    /// Floyd's Constant-Rate: `cwnd += min(c·rtt²·MSS·MSS/cwnd, MSS)` per ACK, with `rtt` the
    /// smoothed RTT in seconds, so the sending rate grows by about `c` segments/s per second
    /// whatever the RTT (c = 100 is as aggressive as standard TCP with a 100 ms RTT). The RTT is
    /// read on an exact clock, as timestamps would give it (thesis §4.1.6), or, with
    /// `coarse_timer`, as the seeds' ns-2 read it: the retransmission clock's smoothed RTT in
    /// whole ticks. Before the first sample the increase is standard.
    ConstantRate { c: f64 },
    /// Increase-by-K: `cwnd += min(K·MSS·MSS/cwnd, MSS)` per ACK, about K segments per RTT.
    IncreaseByK { k: f64 },
    /// CUBIC's window growth (RFC 9438, growth function only): after a reduction to β = 0.7 of
    /// the window `W_max` at the loss, the window follows `C·(t − K)³ + W_max` segments (C =
    /// 0.4, `K = ∛(W_max·(1 − β)/C)` seconds since the reduction): concave up to `W_max`, a
    /// plateau near it, then convex probing; never slower than the Reno-friendly estimate
    /// (α = 3(1 − β)/(1 + β) segments per RTT). Loss recovery is the variant's.
    Cubic,
}

/// CUBIC constants (RFC 9438).
pub const CUBIC_C: f64 = 0.4;
pub const CUBIC_BETA: f64 = 0.7;

/// Parameters of one TCP endpoint. The two ends of a connection may use different values; the
/// sender variant only matters on the side that sends data.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpConfig {
    /// Sender loss recovery and congestion control (default `SackNewReno`, the thesis's choice).
    pub variant: Variant,
    /// Maximum segment size: data bytes per segment, headers excluded (default 1460, a 1500-byte
    /// MTU minus 40 bytes of IPv4 and TCP headers).
    pub mss_bytes: u32,
    /// Initial congestion window (default `One`, the seeds' standard TCP).
    pub initial_window: InitialWindow,
    /// Initial slow-start threshold, bytes (default `u64::MAX`: "arbitrarily large").
    pub initial_ssthresh_bytes: u64,
    /// Congestion-avoidance window increase (default `Standard`).
    pub increase: IncreasePolicy,
    /// Grow the window by bytes acknowledged rather than by ACKs received (RFC 3465; default
    /// false).
    pub byte_counting: bool,
    /// Byte counting limit L: at most L·MSS of growth per ACK in slow start (default 2).
    pub byte_counting_limit_segments: u32,
    /// Duplicate ACKs that trigger fast retransmit (default 3).
    pub dupack_threshold: u32,
    /// Receive buffer: unread in-order bytes plus free space; the offered window is the free
    /// space (default 240 KB = 245760, the window the seeds' receivers offered).
    pub recv_buffer_bytes: u64,
    /// Window scaling (RFC 1323). Without it the offered window is capped at 65535 bytes (default
    /// true).
    pub window_scaling: bool,
    /// Send buffer: written but unacknowledged bytes accepted from the application (default
    /// `u64::MAX`: unlimited).
    pub send_buffer_bytes: u64,
    /// Offer and use SACK (RFC 2018). A SACK variant whose peer does not permit SACK falls back to
    /// Reno or NewReno recovery; a receiver sends SACK blocks only if both ends permit (default
    /// true).
    pub sack_permitted: bool,
    /// SACK blocks per ACK, 1..=4 (default 3, what fits beside a timestamp option).
    pub max_sack_blocks: u8,
    /// Delay ACKs of in-order data (default true). Out-of-order, duplicate, hole-filling and FIN
    /// segments are always acknowledged at once.
    pub delayed_ack: bool,
    /// With delayed ACKs, acknowledge at least every this many data segments ("ACK every k";
    /// default 2).
    pub ack_every_segments: u32,
    /// Longest delay of an ACK, ns (default 200 ms).
    pub delayed_ack_timeout_ns: Time,
    /// Send delayed ACKs on a free-running timer of period `delayed_ack_timeout_ns`, as BSD's
    /// fast timer does (an ACK waits 100 ms on average), rather than exactly the timeout after
    /// the first unacknowledged segment (default false).
    pub delayed_ack_on_ticks: bool,
    /// Granularity of the clock that times round trips and retransmission timeouts, ns (default
    /// 500 ms, the BSD slow timer the seeds used; 0 for an exact clock). RTT samples are read
    /// in whole ticks, timeouts fire on tick boundaries, and the RTO is
    /// `srtt + max(G, 4·rttvar)` (RFC 6298).
    pub clock_granularity_ns: Time,
    /// The seeds' coarse timer, as BSD's slow timer and ns-2's `tcp_tick_` kept it (default
    /// false): an RTT sample counts the clock ticks it crossed but is at least one tick, and the
    /// Constant-Rate policy reads the smoothed RTT of the retransmission clock in whole ticks
    /// instead of an exact RTT (thesis §4.1.4 and §4.1.6: "a coarse estimate of the RTT ...
    /// impairs" CR). With `clock_granularity_ns` 500 ms every RTT under 500 ms reads 500 ms.
    pub coarse_timer: bool,
    /// Lower bound of the retransmission timeout, ns (default 1 s, RFC 6298).
    pub min_rto_ns: Time,
    /// Upper bound of the retransmission timeout, backoff included, ns (default 64 s).
    pub max_rto_ns: Time,
    /// Retransmission timeout before any RTT sample (SYN included), ns (default 1 s, RFC 6298).
    pub initial_rto_ns: Time,
    /// SYN (or SYN-ACK) retransmissions before the connection attempt fails (default 6).
    pub max_syn_retries: u32,
    /// T/TCP-style: send data with the SYN and, before the SYN-ACK arrives, up to the initial
    /// window (default false). The passive side always accepts such data.
    pub data_on_syn: bool,
    /// Nagle's algorithm: hold a short segment while data is unacknowledged, unless it ends the
    /// stream after `close` (default true).
    pub nagle: bool,
    /// Modern option (default false, the seeds' BSD timing): take an RTT sample from every ACK
    /// of new data, as TCP timestamps (RFC 7323) allow, from the last transmission of the
    /// highest segment it covers (retransmissions included: timestamps have no Karn
    /// ambiguity), instead of timing one segment per round trip.
    pub rtt_per_ack: bool,
    /// Modern option (default false): RFC 3042 limited transmit, one new segment beyond the
    /// window on each of the first `dupack_threshold − 1` duplicate ACKs.
    pub limited_transmit: bool,
    /// Modern option (default false, appendix A's rule): RFC 6675 loss marking in SACK
    /// recovery. A hole is lost once more than (`dupack_threshold` − 1)·MSS bytes above it are
    /// SACKed (appendix A instead needs SACKed data `dupack_threshold` segments beyond it), and
    /// recovery starts as soon as the first unacknowledged segment is lost, even before
    /// `dupack_threshold` duplicate ACKs.
    pub rfc6675_loss_marking: bool,
    /// Modern option (default false, the seeds' window inflation and deflation): RFC 6937
    /// Proportional Rate Reduction in fast recovery. Each ACK allows sending in proportion to
    /// the data it reports delivered (`ssthresh / flight at entry`), so the sender keeps
    /// sending through recovery instead of waiting for half a window of duplicate ACKs.
    pub prr: bool,
    /// ns-2's NewReno of 1997 (default false; `Agent/TCP/Newreno`, `tcp-newreno.cc` v1.7,
    /// with `maxburst_ 0`), which the seeds' simulations ran, for senders without SACK: the
    /// third duplicate ACK halves `min(cwnd, peer window)` in whole segments, not the data in
    /// flight (ssthresh the same, at least two), and restarts the timer before doubling the
    /// backoff; a partial ACK drops the whole inflation (back to the halved cwnd) instead of
    /// deflating by the data acknowledged; each ACK in fast recovery (duplicate or partial)
    /// sends at most two new segments (`send(0, 0, 2)`), the first duplicate ACKs below the
    /// threshold none; the ACK that ends recovery also returns to the halved cwnd whatever
    /// the data in flight, opens it as any new ACK does (`opencwnd()`, the increase policy
    /// included), and sends the rest of the window at once in one burst (RFC 6582 caps cwnd
    /// at the flight plus one segment); every timeout halves `min(cwnd, peer window)` into
    /// ssthresh (RFC 5681: the flight, once per segment).
    ///
    /// On a SACK sender it selects ns-2's `Agent/TCP/Sack1` of 1997 instead (`tcp-sack1.cc`
    /// v1.13 with `tcp.cc` v1.26, `maxburst_ 0`): on the third duplicate ACK cwnd becomes
    /// half of `min(cwnd, peer window)` in whole segments (ssthresh the same, at least two)
    /// and a pipe of `cwnd − 3` segments (before halving) is counted, one less per duplicate
    /// ACK, two less per partial ACK, one more per segment sent; while the pipe is below cwnd
    /// the sender resends the lowest hole below the highest SACK block not yet resent
    /// (appendix A's "three segments beyond" rule is not used), else new data. The fast
    /// retransmit backs the timer off; a partial ACK restarts it without backoff. Recovery
    /// ends with cwnd unchanged (the rest of the window in one burst). A timeout halves
    /// `min(cwnd, peer window)` into ssthresh every time, clears the scoreboard, ignores
    /// duplicate ACKs until new data is acknowledged, allows no fast retransmit until an ACK
    /// passes the data sent before it, and goes back N without SACK information.
    pub ns2_recovery: bool,
    /// ns-2's retransmission timer of 1997 (default false; `tcp.cc` v1.37, which the seeds'
    /// simulations ran, with `tcpTick_` = `clock_granularity_ns`): samples rounded to the
    /// nearest tick, `RTO = srtt + 4·mdev + 1 tick` in ns-2's fixed point, 3 s + 1 tick before
    /// the first sample, no floor but two ticks (`min_rto_ns` and `initial_rto_ns` are not
    /// used), and a timer that fires exactly one RTO after it is set instead of on the next
    /// tick of BSD's slow timer. A timeout sets the timer before doubling the backoff (the
    /// first retransmission waits one RTO); each new ACK sets it before its sample; the
    /// backoff ends when the first new segment sent since the last timeout or fast
    /// retransmit is acknowledged (ns-2's `rtt_seq_`), not with a sample. RTT samples come
    /// from the time stamp ns-2's sink echoes (a simulator header field: no option bytes on
    /// the wire): every ACK of new data but a partial ACK in fast recovery gives one, from
    /// when the segment it answers (the one at the old `snd_una`) was last sent, instead of
    /// BSD's one timed segment per round trip. Needs a positive clock granularity.
    pub ns2_timer: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            variant: Variant::SackNewReno,
            mss_bytes: 1460,
            initial_window: InitialWindow::One,
            initial_ssthresh_bytes: u64::MAX,
            increase: IncreasePolicy::Standard,
            byte_counting: false,
            byte_counting_limit_segments: 2,
            dupack_threshold: 3,
            recv_buffer_bytes: 240 * 1024,
            window_scaling: true,
            send_buffer_bytes: u64::MAX,
            sack_permitted: true,
            max_sack_blocks: 3,
            delayed_ack: true,
            ack_every_segments: 2,
            delayed_ack_timeout_ns: 200 * MS,
            delayed_ack_on_ticks: false,
            clock_granularity_ns: 500 * MS,
            coarse_timer: false,
            min_rto_ns: SEC,
            max_rto_ns: 64 * SEC,
            initial_rto_ns: SEC,
            max_syn_retries: 6,
            data_on_syn: false,
            nagle: true,
            rtt_per_ack: false,
            limited_transmit: false,
            rfc6675_loss_marking: false,
            prr: false,
            ns2_recovery: false,
            ns2_timer: false,
        }
    }
}

/// Largest window TCP can offer with window scaling (65535 · 2^14).
pub const MAX_WINDOW_BYTES: u64 = 65_535 << 14;
/// Largest window without window scaling.
pub const UNSCALED_WINDOW_BYTES: u64 = 65_535;

impl TcpConfig {
    /// A default configuration with another sender variant.
    pub fn with_variant(variant: Variant) -> Self {
        TcpConfig {
            variant,
            ..TcpConfig::default()
        }
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), TcpConfigError> {
        if self.mss_bytes == 0 || self.mss_bytes > 65_495 {
            return Err(bad("mss_bytes", "must be from 1 to 65495"));
        }
        let mss = u64::from(self.mss_bytes);
        if self.initial_ssthresh_bytes < 2 * mss {
            return Err(bad("initial_ssthresh_bytes", "must be at least 2·MSS"));
        }
        match self.increase {
            IncreasePolicy::Standard | IncreasePolicy::Cubic => {}
            IncreasePolicy::ConstantRate { c } => {
                if !(c.is_finite() && c > 0.0) {
                    return Err(bad(
                        "increase",
                        "Constant-Rate c must be finite and positive",
                    ));
                }
            }
            IncreasePolicy::IncreaseByK { k } => {
                if !(k.is_finite() && k > 0.0) {
                    return Err(bad(
                        "increase",
                        "Increase-by-K K must be finite and positive",
                    ));
                }
            }
        }
        if self.byte_counting_limit_segments == 0 {
            return Err(bad("byte_counting_limit_segments", "must be at least 1"));
        }
        if self.dupack_threshold == 0 {
            return Err(bad("dupack_threshold", "must be at least 1"));
        }
        if self.recv_buffer_bytes < mss || self.recv_buffer_bytes > MAX_WINDOW_BYTES {
            return Err(bad(
                "recv_buffer_bytes",
                format!("must be between mss_bytes and {MAX_WINDOW_BYTES}"),
            ));
        }
        if self.send_buffer_bytes == 0 {
            return Err(bad("send_buffer_bytes", "must be positive"));
        }
        if !(1..=4).contains(&self.max_sack_blocks) {
            return Err(bad("max_sack_blocks", "must be from 1 to 4"));
        }
        if self.ack_every_segments == 0 {
            return Err(bad("ack_every_segments", "must be at least 1"));
        }
        if self.delayed_ack && self.delayed_ack_timeout_ns == 0 {
            return Err(bad(
                "delayed_ack_timeout_ns",
                "must be positive when delayed ACKs are on",
            ));
        }
        if self.ns2_timer && self.clock_granularity_ns == 0 {
            return Err(bad(
                "clock_granularity_ns",
                "must be positive with ns-2's timer (its tcpTick_)",
            ));
        }
        if self.min_rto_ns == 0 {
            return Err(bad("min_rto_ns", "must be positive"));
        }
        if self.max_rto_ns < self.min_rto_ns {
            return Err(bad("max_rto_ns", "must be at least min_rto_ns"));
        }
        if self.initial_rto_ns == 0 || self.initial_rto_ns > self.max_rto_ns {
            return Err(bad(
                "initial_rto_ns",
                "must be positive and at most max_rto_ns",
            ));
        }
        if self.clock_granularity_ns > 60 * SEC {
            return Err(bad("clock_granularity_ns", "must be at most 60 s"));
        }
        Ok(())
    }

    /// The maximum segment size as a byte count.
    pub(crate) fn mss(&self) -> u64 {
        u64::from(self.mss_bytes.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(TcpConfig::default().validate(), Ok(()));
        assert_eq!(TcpConfig::default().recv_buffer_bytes, 245_760);
    }

    #[test]
    fn bad_fields_are_named() {
        let cases: Vec<(&str, TcpConfig)> = vec![
            (
                "mss_bytes",
                TcpConfig {
                    mss_bytes: 0,
                    ..Default::default()
                },
            ),
            (
                "recv_buffer_bytes",
                TcpConfig {
                    recv_buffer_bytes: 100,
                    ..Default::default()
                },
            ),
            (
                "max_sack_blocks",
                TcpConfig {
                    max_sack_blocks: 5,
                    ..Default::default()
                },
            ),
            (
                "increase",
                TcpConfig {
                    increase: IncreasePolicy::ConstantRate { c: f64::NAN },
                    ..Default::default()
                },
            ),
            (
                "max_rto_ns",
                TcpConfig {
                    max_rto_ns: 1,
                    ..Default::default()
                },
            ),
            (
                "ack_every_segments",
                TcpConfig {
                    ack_every_segments: 0,
                    ..Default::default()
                },
            ),
            (
                "byte_counting_limit_segments",
                TcpConfig {
                    byte_counting_limit_segments: 0,
                    ..Default::default()
                },
            ),
        ];
        for (field, cfg) in cases {
            let err = cfg.validate().expect_err(field);
            assert_eq!(err.field, field);
            assert!(err.to_string().contains(field));
        }
    }

    #[test]
    fn initial_windows() {
        assert_eq!(InitialWindow::One.bytes(1460), 1460);
        assert_eq!(InitialWindow::Two.bytes(1460), 2920);
        assert_eq!(InitialWindow::FourKss.bytes(1460), 4380);
        assert_eq!(InitialWindow::FourKss.bytes(1000), 4000);
        assert_eq!(InitialWindow::FourKss.bytes(536), 2144);
        assert_eq!(InitialWindow::FourKss.bytes(2500), 5000);
        assert_eq!(InitialWindow::Ten.bytes(1000), 10_000);
    }
}
