//! Smoothed round-trip time from STAT timestamp echoes (RFC 6298 filter, no retransmission timer).

use std::time::Duration;

/// Low-pass filtered RTT: srtt with gain 1/8, rttvar with gain 1/4, and the minimum seen.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Duration,
    rttvar: Duration,
    min: Duration,
    latest: Duration,
    has_sample: bool,
}

impl RttEstimator {
    /// An estimator that reports `initial` until the first sample.
    pub fn new(initial: Duration) -> Self {
        RttEstimator {
            srtt: initial,
            rttvar: initial / 2,
            min: Duration::MAX,
            latest: initial,
            has_sample: false,
        }
    }

    /// Feeds one sample.
    pub fn update(&mut self, sample: Duration) {
        self.latest = sample;
        self.min = self.min.min(sample);
        if !self.has_sample {
            self.srtt = sample;
            self.rttvar = sample / 2;
            self.has_sample = true;
            return;
        }
        let diff = self.srtt.abs_diff(sample);
        self.rttvar = (self.rttvar * 3 + diff) / 4;
        self.srtt = (self.srtt * 7 + sample) / 8;
    }

    /// The smoothed RTT.
    pub fn srtt(&self) -> Duration {
        self.srtt
    }
    /// The RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }
    /// The smallest sample seen, if any.
    pub fn min(&self) -> Option<Duration> {
        self.has_sample.then_some(self.min)
    }
    /// Whether a sample has been taken.
    #[cfg(test)]
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
