//! Deterministic fault sweep of the STP engine: every seed draws a scenario (transfer sizes both
//! ways, link rates and delays from terrestrial to GEO, random / Gilbert-Elliott / BER loss,
//! reordering, duplication, corruption, outages short and beyond the dead-peer timeout, the
//! smallest legal buffers, window / rate / allocated congestion control, half-closes, a reader
//! that pauses) and runs one connection through it over [`Net`]. The run must end, within a
//! virtual-time bound, with every byte delivered exactly and both sides closed, or with a clean
//! failure: never a clean end of stream with missing or wrong bytes, never a panic. The same seed
//! gives the same run, bit for bit; `satstp bench sweep` prints the seeds that fail.

use crate::{Checker, Net, Outcome, Side, Writer, NS_PER_MS};
use linkmodel::{Delay, LinkConfig, Loss, Outage, QueueLimit};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use stp::wire::{MIN_DATAGRAM, SD_RESERVE};
use stp::{Config, CongestionMode, EndpointConfig, InitialWindow};

/// Who writes when: the half-close patterns of a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Both sides write at once; each shuts its direction down when its bytes are written.
    Concurrent,
    /// B answers only after it has read A's end of stream (request, half-close, response).
    Response,
    /// A writes only after it has read B's end of stream (the responder speaks first).
    ServerFirst,
}

/// Everything one seed decides.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub a_to_b: u64,
    pub b_to_a: u64,
    /// Link a→b and b→a.
    pub ab: LinkConfig,
    pub ba: LinkConfig,
    pub cfg_a: Config,
    pub cfg_b: Config,
    pub pattern: Pattern,
    /// Neither side reads before this instant (its receive window fills and closes).
    pub read_pause_ns: u64,
    /// Whether an outage outlasts a dead-peer timeout (a clean failure is then expected, though a
    /// transfer that finished before it may still close cleanly).
    pub long_outage: bool,
    /// The run must have ended (both sides closed or failed) by this virtual time.
    pub limit_ns: u64,
}

/// What a seed's run showed.
#[derive(Debug, Clone)]
pub struct SeedReport {
    pub seed: u64,
    /// One line describing the scenario.
    pub summary: String,
    /// `None` if every check held, else what went wrong.
    pub failure: Option<String>,
    /// Whether the connection ended cleanly (both sides closed, all bytes exact) rather than with
    /// a reported failure.
    pub clean: bool,
    /// Whether the scenario had an outage longer than a dead-peer timeout.
    pub long_outage: bool,
    /// Virtual time at the end of the run.
    pub end_ns: u64,
    /// Extra lines (statistics) for a verbose rerun.
    pub detail: String,
}

/// Totals of a sweep.
#[derive(Debug, Clone, Default)]
pub struct SweepSummary {
    pub seeds: u64,
    pub clean: u64,
    pub failed_cleanly: u64,
    /// Of those, the ones without an outage beyond the dead-peer timeout (heavy loss, a handshake
    /// that never got through, a thin reverse channel).
    pub failed_without_long_outage: u64,
    /// Seeds whose checks did not hold.
    pub failures: Vec<SeedReport>,
}

struct Draw(ChaCha8Rng);

impl Draw {
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.next_u64() % (hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// Log-uniform between `lo` and `hi`.
    fn log(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }
}

fn size(d: &mut Draw, rate_bps: u64) -> u64 {
    let s = match d.range(0, 99) {
        0..=14 => 0,
        15..=29 => d.range(1, 100),
        30..=59 => d.range(101, 20_000),
        60..=89 => d.range(20_001, 200_000),
        _ => d.range(200_001, 3_000_000),
    };
    // At most about 30 s of what the direction can carry, so the slowest links keep the sweep
    // quick.
    s.min((rate_bps / 8 * 30).max(100))
}

fn link(d: &mut Draw, rate_bps: u64, delay_ns: u64) -> LinkConfig {
    let mut l = LinkConfig::simple(rate_bps, delay_ns, 100);
    let bdp = (rate_bps as f64 / 8.0 * 2.0 * delay_ns as f64 / 1e9) as u64;
    l.queue = if d.chance(0.5) {
        QueueLimit::Packets(d.range(2, 300) as u32)
    } else {
        QueueLimit::Bytes((bdp as f64 * d.log(0.3, 2.0)) as u64 + 3000)
    };
    l.overhead_bytes = if d.chance(0.5) { 28 } else { 0 };
    l.loss = match d.range(0, 9) {
        0..=3 => Loss::None,
        4..=5 => Loss::Random { p: d.unit() * 0.08 },
        6..=7 => Loss::GilbertElliott {
            p_good_to_bad: d.log(0.001, 0.05),
            p_bad_to_good: d.log(0.1, 0.6),
            loss_good: d.unit() * 0.01,
            loss_bad: 0.3 + d.unit() * 0.7,
        },
        _ => Loss::Ber {
            ber: d.log(1e-8, 2e-5),
        },
    };
    if d.chance(0.2) {
        l.reorder_p = d.unit() * 0.1;
        l.reorder_delay_ns = d.range(1, 100) * NS_PER_MS;
    }
    if d.chance(0.1) {
        l.duplicate_p = d.unit() * 0.05;
    }
    if d.chance(0.1) {
        l.corrupt_p = d.unit() * 0.02;
    }
    l
}

fn config(d: &mut Draw, link_rate_bps: u64, rtt_ms: u64) -> Config {
    let max_datagram_bytes = match d.range(0, 3) {
        0 => MIN_DATAGRAM as u16,
        1 => 576,
        2 => 1200,
        _ => 1452,
    };
    let mss = (usize::from(max_datagram_bytes) - SD_RESERVE) as u32;
    // A quarter of the seeds take the smallest legal buffers: one SD to send, two to receive.
    let send_buffer_bytes = if d.chance(0.25) {
        mss
    } else {
        d.log(f64::from(mss), f64::from(4u32 << 20)) as u32
    };
    let recv_buffer_bytes = if d.chance(0.25) {
        2 * mss
    } else {
        d.log(f64::from(2 * mss), f64::from(4u32 << 20)) as u32
    };
    let congestion = match d.range(0, 9) {
        0..=5 => CongestionMode::Window,
        6..=7 => CongestionMode::Rate {
            rate_bps: ((link_rate_bps as f64 * d.log(0.2, 1.3)) as u64).max(1000),
        },
        _ => CongestionMode::Allocated {
            rate_bps: ((link_rate_bps as f64 * d.log(0.3, 1.2)) as u64).max(1000),
            max_queue_delay_ms: d.range(5, 500) as u32,
        },
    };
    let dead_timeout_ms = d.range(4, 30) as u32 * 1000;
    Config {
        max_datagram_bytes,
        recv_buffer_bytes,
        send_buffer_bytes,
        congestion,
        initial_window: if d.chance(0.2) {
            InitialWindow::FourKss
        } else {
            InitialWindow::Packets(d.range(1, 40) as u32)
        },
        reorder_threshold: d.range(1, 5) as u32,
        initial_rtt_ms: (rtt_ms.max(1) as f64 * d.log(0.3, 3.0)).clamp(1.0, 3000.0) as u32,
        keepalive_interval_ms: dead_timeout_ms / 3,
        max_poll_interval_ms: (dead_timeout_ms / 2).min(4000),
        dead_timeout_ms,
        ..Config::default()
    }
}

/// Draws the scenario of `seed`.
pub fn scenario(seed: u64) -> Scenario {
    let mut d = Draw(ChaCha8Rng::seed_from_u64(seed ^ 0x5354_5053_5745_4550));
    let rate_ab = d.log(64e3, 100e6) as u64;
    let rate_ba = if d.chance(0.5) {
        rate_ab
    } else {
        d.log(9.6e3, rate_ab as f64) as u64
    };
    let delay_ms = match d.range(0, 3) {
        0 => d.range(0, 20),
        1 => d.range(20, 60),
        2 => d.range(240, 300),
        _ => d.range(0, 300),
    };
    let mut ab = link(&mut d, rate_ab, delay_ms * NS_PER_MS);
    let mut ba = link(&mut d, rate_ba, delay_ms * NS_PER_MS);
    let rtt_ms = 2 * delay_ms;
    let cfg_a = config(&mut d, rate_ab, rtt_ms);
    let cfg_b = config(&mut d, rate_ba, rtt_ms);
    // What a direction can carry: the least of the link's rate, a window (the smaller of the
    // sender's send buffer and the receiver's receive buffer) per round trip, and what a window
    // controller keeps under the link's packet loss (about MSS / RTT · 1.22 / √p).
    let carry = |rate: u64, link: &LinkConfig, snd: &Config, rcv: &Config| {
        let window = u64::from(snd.send_buffer_bytes.min(rcv.recv_buffer_bytes));
        let rtt_s = (rtt_ms.max(1) as f64 / 1e3) + 3.0 * 1500.0 * 8.0 / rate as f64;
        let dgram = snd.max_datagram_bytes.min(rcv.max_datagram_bytes);
        let mss = f64::from(dgram) - SD_RESERVE as f64;
        let p = link
            .loss
            .mean_packet_loss(u64::from(dgram) + u64::from(link.overhead_bytes));
        let loss_bound = if p > 0.0 {
            mss * 8.0 / rtt_s * 1.22 / p.sqrt()
        } else {
            f64::MAX
        };
        let bound = (window as f64 * 8.0 / rtt_s).min(loss_bound);
        rate.min(bound as u64).max(1000)
    };
    let eff_ab = carry(rate_ab, &ab, &cfg_a, &cfg_b);
    let eff_ba = carry(rate_ba, &ba, &cfg_b, &cfg_a);
    let a_to_b = size(&mut d, eff_ab);
    let b_to_a = size(&mut d, eff_ba);
    let pattern = match d.range(0, 3) {
        0 => Pattern::Response,
        1 => Pattern::ServerFirst,
        _ => Pattern::Concurrent,
    };
    let read_pause_ns = if d.chance(0.15) {
        d.range(1, 5000) * NS_PER_MS
    } else {
        0
    };
    // Nominal time to move everything at the slower rate, for placing outages and the bound.
    let nominal_ns = a_to_b * 8 * 1_000_000_000 / eff_ab + b_to_a * 8 * 1_000_000_000 / eff_ba;
    let dead_ns = u64::from(cfg_a.dead_timeout_ms.min(cfg_b.dead_timeout_ms)) * NS_PER_MS;
    let mut long_outage = false;
    let mut outage_ns = 0;
    match d.range(0, 9) {
        0..=4 => {}
        k => {
            let long = k == 9;
            let start_ns = d.range(0, nominal_ns + 2 * rtt_ms * NS_PER_MS + NS_PER_MS);
            let duration_ns = if long {
                dead_ns + d.range(1, 20_000) * NS_PER_MS
            } else {
                d.range(10, (dead_ns / NS_PER_MS / 2).clamp(11, 10_000)) * NS_PER_MS
            };
            let o = Outage {
                start_ns,
                duration_ns,
            };
            match d.range(0, 2) {
                0 => ab.outages.push(o),
                1 => ba.outages.push(o),
                _ => {
                    ab.outages.push(o);
                    ba.outages.push(o);
                }
            }
            long_outage = long;
            outage_ns = duration_ns;
        }
    }
    // Generous on purpose: loss bursts at a small window can slow a transfer a hundredfold.
    let dead_max = u64::from(cfg_a.dead_timeout_ms.max(cfg_b.dead_timeout_ms)) * NS_PER_MS;
    let limit_ns =
        120_000 * NS_PER_MS + 100 * nominal_ns + outage_ns + read_pause_ns + 4 * dead_max;
    Scenario {
        seed,
        a_to_b,
        b_to_a,
        ab,
        ba,
        cfg_a,
        cfg_b,
        pattern,
        read_pause_ns,
        long_outage,
        limit_ns,
    }
}

fn rate(bps: u64) -> String {
    if bps >= 1_000_000 {
        format!("{:.1}Mb/s", bps as f64 / 1e6)
    } else {
        format!("{:.1}kb/s", bps as f64 / 1e3)
    }
}

fn describe_link(l: &LinkConfig) -> String {
    let delay = match &l.delay {
        Delay::Fixed(ns) => ns / NS_PER_MS,
        Delay::Trace { .. } => 0,
    };
    let mut s = format!("{} {}ms", rate(l.rate_bps), delay);
    match l.loss {
        Loss::None => {}
        Loss::Random { p } => write!(s, " loss {:.3}", p).unwrap_or(()),
        Loss::Ber { ber } => write!(s, " ber {:.1e}", ber).unwrap_or(()),
        Loss::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_bad,
            ..
        } => write!(
            s,
            " GE {:.3}/{:.2}/{:.2}",
            p_good_to_bad, p_bad_to_good, loss_bad
        )
        .unwrap_or(()),
    }
    if l.reorder_p > 0.0 {
        write!(s, " reorder {:.3}", l.reorder_p).unwrap_or(());
    }
    if l.duplicate_p > 0.0 {
        write!(s, " dup {:.3}", l.duplicate_p).unwrap_or(());
    }
    if l.corrupt_p > 0.0 {
        write!(s, " corrupt {:.3}", l.corrupt_p).unwrap_or(());
    }
    for o in &l.outages {
        write!(
            s,
            " outage {:.1}s@{:.1}s",
            o.duration_ns as f64 / 1e9,
            o.start_ns as f64 / 1e9
        )
        .unwrap_or(());
    }
    s
}

fn describe_config(c: &Config) -> String {
    let cc = match c.congestion {
        CongestionMode::Window => "window".to_string(),
        CongestionMode::Rate { rate_bps } => format!("rate {}", rate(rate_bps)),
        CongestionMode::Allocated { rate_bps, .. } => format!("alloc {}", rate(rate_bps)),
    };
    format!(
        "{cc} dgram {} snd {} rcv {} dead {}s",
        c.max_datagram_bytes,
        c.send_buffer_bytes,
        c.recv_buffer_bytes,
        c.dead_timeout_ms / 1000
    )
}

impl Scenario {
    /// One line saying what the seed does.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "a→b {} B, b→a {} B, {:?}; a→b [{}] b→a [{}]; a [{}] b [{}]",
            self.a_to_b,
            self.b_to_a,
            self.pattern,
            describe_link(&self.ab),
            describe_link(&self.ba),
            describe_config(&self.cfg_a),
            describe_config(&self.cfg_b),
        );
        if self.read_pause_ns > 0 {
            write!(s, "; readers pause {} ms", self.read_pause_ns / NS_PER_MS).unwrap_or(());
        }
        s
    }
}

/// Runs one seed; a panic in the engine is caught and reported as the seed's failure.
pub fn run_seed(seed: u64) -> SeedReport {
    let sc = scenario(seed);
    let summary = sc.summary();
    match catch_unwind(AssertUnwindSafe(|| run_scenario(&sc))) {
        Ok(mut r) => {
            r.summary = summary;
            r
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            SeedReport {
                seed,
                summary,
                failure: Some(format!("panic: {msg}")),
                clean: false,
                long_outage: sc.long_outage,
                end_ns: 0,
                detail: String::new(),
            }
        }
    }
}

/// Runs seeds `start..start + count`, calling `progress` after each.
pub fn sweep(start: u64, count: u64, mut progress: impl FnMut(&SeedReport)) -> SweepSummary {
    let mut sum = SweepSummary::default();
    for seed in start..start.saturating_add(count) {
        let r = run_seed(seed);
        sum.seeds += 1;
        progress(&r);
        if r.failure.is_some() {
            sum.failures.push(r);
        } else if r.clean {
            sum.clean += 1;
        } else {
            sum.failed_cleanly += 1;
            if !r.long_outage {
                sum.failed_without_long_outage += 1;
            }
        }
    }
    sum
}

/// Runs `sc` and checks its outcome, without catching panics ([`run_seed`] wraps it).
pub fn run_scenario(sc: &Scenario) -> SeedReport {
    let ep = |c: &Config| EndpointConfig {
        connection: c.clone(),
        ..EndpointConfig::default()
    };
    for (name, c) in [("a", &sc.cfg_a), ("b", &sc.cfg_b)] {
        if let Err(e) = ep(c).validate() {
            return report(
                sc,
                Some(format!("scenario drew an invalid config for {name}: {e}")),
            );
        }
    }
    let mut net = Net::new(
        ep(&sc.cfg_a),
        ep(&sc.cfg_b),
        sc.ab.clone(),
        sc.ba.clone(),
        sc.seed,
    );
    let ha = match net.a.connect(net.instant(), net.addr_b) {
        Ok(h) => h,
        Err(e) => return report(sc, Some(format!("connect failed: {e:?}"))),
    };
    let mut hb = None;
    let mut wa = Writer::new(sc.seed ^ 0xa, sc.a_to_b);
    let mut wb = Writer::new(sc.seed ^ 0xb, sc.b_to_a);
    let mut ca = Checker::new(sc.seed ^ 0xb, sc.b_to_a);
    let mut cb = Checker::new(sc.seed ^ 0xa, sc.a_to_b);
    let (mut oa, mut ob) = (Outcome::default(), Outcome::default());
    let mut app = |net: &mut Net| {
        let now = net.now;
        let reading = now >= sc.read_pause_ns;
        if sc.pattern != Pattern::ServerFirst || ca.eof {
            wa.drive(&mut net.a, ha);
        }
        if reading {
            ca.drive(&mut net.a, ha);
        }
        if hb.is_none() {
            hb = net.b.accept();
        }
        if let Some(h) = hb {
            if sc.pattern != Pattern::Response || cb.eof {
                wb.drive(&mut net.b, h);
            }
            if reading {
                cb.drive(&mut net.b, h);
            }
        }
        let ea = net.events(Side::A);
        oa.absorb(&ea, now);
        let eb = net.events(Side::B);
        ob.absorb(&eb, now);
        let a_over = oa.closed || oa.failed.is_some();
        // B never heard of the connection if every BGN was lost: nothing to end there.
        let b_over = ob.closed || ob.failed.is_some() || (hb.is_none() && oa.failed.is_some());
        a_over && b_over
    };
    // The readers' pause ends at a fixed time even if nothing else happens then.
    let mut ended = sc.read_pause_ns > 0 && net.run(sc.read_pause_ns, &mut app);
    if !ended {
        ended = net.run(sc.limit_ns, &mut app);
    }
    // A side may close with bytes still unread (its receive side is complete once everything
    // arrived); read what is left, as an application would before dropping the connection.
    ca.drive(&mut net.a, ha);
    if let Some(h) = hb {
        cb.drive(&mut net.b, h);
    }
    // A closed connection whose bytes were all read is released by its endpoint; its `Closed`
    // event is then the clean end of the stream an application sees.
    if oa.closed && net.a.connection(ha).is_none() {
        ca.eof = true;
    }
    if ob.closed && hb.is_some_and(|h| net.b.connection(h).is_none()) {
        cb.eof = true;
    }
    let mut problems = Vec::new();
    if let Some(at) = cb.mismatch_at {
        problems.push(format!("a→b stream wrong at byte {at}"));
    }
    if let Some(at) = ca.mismatch_at {
        problems.push(format!("b→a stream wrong at byte {at}"));
    }
    if cb.eof && cb.bytes != sc.a_to_b {
        problems.push(format!(
            "b saw a clean end of stream after {} of {} bytes",
            cb.bytes, sc.a_to_b
        ));
    }
    if ca.eof && ca.bytes != sc.b_to_a {
        problems.push(format!(
            "a saw a clean end of stream after {} of {} bytes",
            ca.bytes, sc.b_to_a
        ));
    }
    let failed = oa.failed.is_some() || ob.failed.is_some();
    if !ended {
        problems.push(format!(
            "not over after {} s of virtual time: a {:?} b {:?}, {}/{} and {}/{} bytes",
            sc.limit_ns / 1_000_000_000,
            oa,
            ob,
            cb.bytes,
            sc.a_to_b,
            ca.bytes,
            sc.b_to_a
        ));
    } else if !failed {
        if !cb.complete(sc.a_to_b) || !ca.complete(sc.b_to_a) {
            problems.push(format!(
                "both sides closed but a→b {}/{} (eof {}), b→a {}/{} (eof {})",
                cb.bytes, sc.a_to_b, cb.eof, ca.bytes, sc.b_to_a, ca.eof
            ));
        }
        if !(oa.closed && ob.closed) {
            problems.push(format!("ended without closing: a {oa:?} b {ob:?}"));
        }
    }
    // One side closing while the other fails is legal if the closing side got all it was owed;
    // the end-of-stream checks above cover that.
    let mut r = report(sc, (!problems.is_empty()).then(|| problems.join("; ")));
    r.clean = ended && !failed;
    r.end_ns = net.now;
    r.detail = format!(
        "end {:.3} s; a {:?}; b {:?}\na→b read {} of {} (eof {}), b→a read {} of {} (eof {})\n\
         link a→b {:?}\nlink b→a {:?}\nendpoint a {:?}\nendpoint b {:?}",
        net.now as f64 / 1e9,
        oa,
        ob,
        cb.bytes,
        sc.a_to_b,
        cb.eof,
        ca.bytes,
        sc.b_to_a,
        ca.eof,
        net.wire.links[0].stats(),
        net.wire.links[1].stats(),
        net.a.stats(),
        net.b.stats(),
    );
    r
}

fn report(sc: &Scenario, failure: Option<String>) -> SeedReport {
    SeedReport {
        seed: sc.seed,
        summary: String::new(),
        failure,
        clean: false,
        long_outage: sc.long_outage,
        end_ns: 0,
        detail: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_are_valid_and_deterministic() {
        for seed in 0..200 {
            let s = scenario(seed);
            assert_eq!(s.summary(), scenario(seed).summary());
            s.ab.validate().unwrap();
            s.ba.validate().unwrap();
            for c in [&s.cfg_a, &s.cfg_b] {
                c.validate().unwrap();
            }
        }
    }

    #[test]
    fn a_seed_reruns_bit_for_bit() {
        let a = run_seed(7);
        let b = run_seed(7);
        assert_eq!(a.end_ns, b.end_ns);
        assert_eq!(a.detail, b.detail);
    }
}
