//! Smoothed round-trip time from STAT timestamp echoes (RFC 6298 filter, no retransmission timer).

use std::time::Duration;

/// Low-pass filtered RTT: srtt with gain 1/8, rttvar with gain 1/4, and the minimum seen.
///
/// Held as nanoseconds (8 bytes each, where a `Duration` takes 16: every connection has one);
/// the filter itself runs on `Duration`s, so the arithmetic is the same as ever.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: u64,
    rttvar: u64,
    /// The smallest sample; `u64::MAX` before the first.
    min: u64,
    has_sample: bool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// An estimator that reports `initial` until the first sample.
    pub fn new(initial: Duration) -> Self {
        RttEstimator {
            srtt: nanos(initial),
            rttvar: nanos(initial / 2),
            min: u64::MAX,
            has_sample: false,
        }
    }

    /// Feeds one sample.
    pub fn update(&mut self, sample: Duration) {
        self.min = self.min.min(nanos(sample));
        if !self.has_sample {
            self.srtt = nanos(sample);
            self.rttvar = nanos(sample / 2);
            self.has_sample = true;
            return;
        }
        let (srtt, rttvar) = (self.srtt(), self.rttvar());
        let diff = srtt.abs_diff(sample);
        self.rttvar = nanos((rttvar * 3 + diff) / 4);
        self.srtt = nanos((srtt * 7 + sample) / 8);
    }

    /// The smoothed RTT.
    pub fn srtt(&self) -> Duration {
        Duration::from_nanos(self.srtt)
    }
    /// The RTT variation.
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }
    /// [`Self::srtt`] in nanoseconds.
    pub fn srtt_ns(&self) -> u64 {
        self.srtt
    }
    /// [`Self::rttvar`] in nanoseconds.
    pub fn rttvar_ns(&self) -> u64 {
        self.rttvar
    }
    /// The smallest sample seen, if any.
    pub fn min(&self) -> Option<Duration> {
        self.has_sample.then_some(Duration::from_nanos(self.min))
    }
    /// Whether a sample has been taken.
    pub fn has_sample(&self) -> bool {
        self.has_sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_to_constant_samples() {
        let mut r = RttEstimator::new(Duration::from_millis(600));
        assert!(!r.has_sample());
        for _ in 0..100 {
            r.update(Duration::from_millis(532));
        }
        assert_eq!(r.srtt(), Duration::from_millis(532));
        assert_eq!(r.min(), Some(Duration::from_millis(532)));
        assert!(r.rttvar() < Duration::from_millis(1));
    }
}
