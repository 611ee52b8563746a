//! Ground-to-satellite links (GSLs): which satellites a terminal sees above its elevation mask,
//! which one it uses, and when it hands off (§6.2, §2.2.1).
//!
//! Handoff modes: **asynchronous** (the thesis' default): each terminal checks on its own timer,
//! every 5–15 s (uniform random dither, seeded), whether its satellite has dropped below the
//! mask, and only then moves to another; **synchronous**: every terminal checks at the same
//! fixed instants (multiples of the interval), same rule; **continuous**: the terminal is
//! always on the best satellite (an ideal used for snapshots, pings and the benchmark).
//! A satellite that sinks below the horizon between checks is handed off at once (the link
//! could not exist), counted as a forced handoff.

use crate::geo::{elevation_deg, unit, Place, Vec3};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// When terminals look for a new satellite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HandoffMode {
    /// Own timer, uniformly between `min_s` and `max_s` (thesis: 5 and 15 s).
    Async { min_s: f64, max_s: f64 },
    /// All terminals at multiples of `interval_s`.
    Sync { interval_s: f64 },
    /// Always the best satellite.
    Continuous,
}

impl HandoffMode {
    /// The thesis' asynchronous handoff: checks every 5–15 s.
    pub const THESIS: HandoffMode = HandoffMode::Async {
        min_s: 5.0,
        max_s: 15.0,
    };
}

/// Which visible satellite a terminal picks when it (re)attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachPolicy {
    /// The one highest in the sky (also the nearest): longest expected visibility for polar
    /// shells, shortest GSL delay.
    HighestElevation,
    /// The first one found above the mask, in satellite order (the thesis' wording; which
    /// satellite is "first" is then arbitrary).
    FirstFound,
    /// Both ends of a path chosen together with the route: each end may use any satellite
    /// above its mask, and the path minimises the metric over GSL + ISLs + GSL (as operators'
    /// ground-station schedulers and Hypatia's forwarding state do). Resolved by the router;
    /// [`choose`] alone treats it as [`AttachPolicy::HighestElevation`].
    Joint,
}

impl AttachPolicy {
    pub fn name(self) -> &'static str {
        match self {
            AttachPolicy::HighestElevation => "highest",
            AttachPolicy::FirstFound => "first",
            AttachPolicy::Joint => "joint",
        }
    }
}

impl std::str::FromStr for AttachPolicy {
    type Err = crate::ConstellationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "highest" | "highest-elevation" => Ok(AttachPolicy::HighestElevation),
            "first" | "first-found" => Ok(AttachPolicy::FirstFound),
            "joint" => Ok(AttachPolicy::Joint),
            _ => Err(crate::ConstellationError::Request(format!(
                "unknown attachment '{s}' (highest, first or joint)"
            ))),
        }
    }
}

/// The sine of the elevation of `s` seen from `ground` (with `up` its unit vector), if it is
/// at or above `min_sin` (the sine of the mask) and the satellite exists.
#[inline]
fn sin_elevation_above(up: Vec3, ground: Vec3, s: Vec3, min_sin: f64) -> Option<f64> {
    let d = s.minus(ground);
    let along = d.dot(up);
    if along <= 0.0 && min_sin >= 0.0 {
        return None;
    }
    let sin_e = along / d.norm().max(1e-12);
    (sin_e >= min_sin && s.norm() != 0.0).then_some(sin_e)
}

/// The satellite `policy` picks for a terminal at `ground`, if any is above `mask_deg`.
pub fn choose(
    positions: &[Vec3],
    ground: Vec3,
    mask_deg: f64,
    policy: AttachPolicy,
) -> Option<u32> {
    // Compare sines of elevations: no inverse trigonometry in this hot loop.
    let up = ground.scale(1.0 / ground.norm().max(1e-12));
    let min_sin = mask_deg.to_radians().sin();
    let mut best: Option<(u32, f64)> = None;
    for (i, &s) in positions.iter().enumerate() {
        let Some(sin_e) = sin_elevation_above(up, ground, s, min_sin) else {
            continue;
        };
        match policy {
            AttachPolicy::FirstFound => return Some(i as u32),
            AttachPolicy::HighestElevation | AttachPolicy::Joint => {
                if best.is_none_or(|(_, b)| sin_e > b) {
                    best = Some((i as u32, sin_e));
                }
            }
        }
    }
    best.map(|b| b.0)
}

/// Every satellite above `mask_deg` from `ground`, with its GSL delay in whole nanoseconds (at
/// least 1), into `out` (cleared first), in satellite order.
pub fn visible(positions: &[Vec3], ground: Vec3, mask_deg: f64, out: &mut Vec<(u32, u64)>) {
    out.clear();
    let up = ground.scale(1.0 / ground.norm().max(1e-12));
    let min_sin = mask_deg.to_radians().sin();
    for (i, &s) in positions.iter().enumerate() {
        if sin_elevation_above(up, ground, s, min_sin).is_some() {
            out.push((i as u32, gsl_ns(ground, s)));
        }
    }
}

/// The delay of the GSL between `ground` and `sat` in whole nanoseconds (at least 1).
pub fn gsl_ns(ground: Vec3, sat: Vec3) -> u64 {
    ((ground.dist(sat) / crate::geo::C_KM_S * 1e9).round() as u64).max(1)
}

/// A handoff (or first attachment, or loss of every satellite).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Handoff {
    pub t_s: f64,
    pub from: Option<u32>,
    pub to: Option<u32>,
    /// The old satellite had sunk below the horizon before the check.
    pub forced: bool,
}

/// A terminal and its serving satellite over time.
#[derive(Debug, Clone)]
pub struct Terminal {
    pub place: Place,
    pub position: Vec3,
    pub serving: Option<u32>,
    mode: HandoffMode,
    policy: AttachPolicy,
    mask_deg: f64,
    next_check_s: f64,
    rng: ChaCha8Rng,
}

impl Terminal {
    /// A terminal, not yet attached; `seed` drives its check-timer dither.
    pub fn new(
        place: Place,
        mode: HandoffMode,
        policy: AttachPolicy,
        mask_deg: f64,
        seed: u64,
    ) -> Terminal {
        Terminal {
            position: place.position(),
            place,
            serving: None,
            mode,
            policy,
            mask_deg,
            next_check_s: f64::NEG_INFINITY,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Advances to time `t_s` (non-decreasing across calls) with the satellites at
    /// `positions`; returns the handoff if the serving satellite changed.
    pub fn update(&mut self, t_s: f64, positions: &[Vec3]) -> Option<Handoff> {
        let old = self.serving;
        let elevation = old.map(|s| elevation_deg(self.position, positions[s as usize]));
        let mut forced = false;
        let check = match self.mode {
            HandoffMode::Continuous => true,
            _ if old.is_none() => true,
            _ if elevation.is_some_and(|e| e < 0.0) => {
                forced = true;
                true
            }
            _ => t_s >= self.next_check_s,
        };
        if !check {
            return None;
        }
        // Schedule the next check.
        match self.mode {
            HandoffMode::Async { min_s, max_s } => {
                let base = if self.next_check_s.is_finite() {
                    self.next_check_s.max(t_s - max_s)
                } else {
                    t_s
                };
                let mut next = base;
                while next <= t_s {
                    next += min_s + (max_s - min_s) * unit(&mut self.rng);
                }
                self.next_check_s = next;
            }
            HandoffMode::Sync { interval_s } => {
                self.next_check_s = ((t_s / interval_s).floor() + 1.0) * interval_s;
            }
            HandoffMode::Continuous => {}
        }
        let keep = matches!(
            self.mode,
            HandoffMode::Async { .. } | HandoffMode::Sync { .. }
        ) && !forced
            && elevation.is_some_and(|e| e >= self.mask_deg);
        if keep {
            return None;
        }
        self.serving = choose(positions, self.position, self.mask_deg, self.policy);
        (self.serving != old).then_some(Handoff {
            t_s,
            from: old,
            to: self.serving,
            forced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::place;
    use crate::walker::Shell;

    #[test]
    fn visibility_respects_the_mask() {
        let sh = Shell::preset("iridium").unwrap();
        let mut pos = Vec::new();
        sh.positions(0.0, &mut pos);
        let ny = place("New York").unwrap().position();
        let s = choose(
            &pos,
            ny,
            sh.elevation_mask_deg,
            AttachPolicy::HighestElevation,
        )
        .unwrap();
        let e = elevation_deg(ny, pos[s as usize]);
        assert!(e >= 8.2);
        for (i, p) in pos.iter().enumerate() {
            assert!(elevation_deg(ny, *p) <= e + 1e-12, "{i} is higher");
        }
        let f = choose(&pos, ny, sh.elevation_mask_deg, AttachPolicy::FirstFound).unwrap();
        assert!(f <= s && elevation_deg(ny, pos[f as usize]) >= 8.2);
        assert_eq!(
            choose(&pos, ny, 89.999, AttachPolicy::HighestElevation),
            None
        );
    }

    #[test]
    fn async_handoff_checks_every_5_to_15_s_and_only_below_the_mask() {
        let sh = Shell::preset("iridium").unwrap();
        let mut t = Terminal::new(
            place("London").unwrap(),
            HandoffMode::THESIS,
            AttachPolicy::HighestElevation,
            sh.elevation_mask_deg,
            7,
        );
        let mut pos = Vec::new();
        let mut checks = Vec::new();
        let mut handoffs = 0;
        let mut k = 0.0;
        while k < 3.0 * 3600.0 {
            sh.positions(k, &mut pos);
            let before = t.next_check_s;
            if let Some(h) = t.update(k, &pos) {
                handoffs += 1;
                if let Some(f) = h.from {
                    // Handed off only because the old satellite was below the mask.
                    assert!(elevation_deg(t.position, pos[f as usize]) < sh.elevation_mask_deg);
                }
            }
            if t.next_check_s != before {
                checks.push(t.next_check_s);
            }
            // While attached, the serving satellite never sinks below the horizon unseen.
            if let Some(s) = t.serving {
                assert!(elevation_deg(t.position, pos[s as usize]) > -1.0);
            }
            k += 0.5;
        }
        let gaps: Vec<f64> = checks.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| (5.0..=15.0 + 1e-9).contains(g)),
            "{gaps:?}"
        );
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((9.0..11.0).contains(&mean), "mean check interval {mean}");
        // Iridium passes last ~10 minutes: a handful of handoffs per hour.
        assert!((6..60).contains(&handoffs), "{handoffs} handoffs in 3 h");
    }

    #[test]
    fn sync_handoff_happens_only_at_the_instants() {
        let sh = Shell::preset("teledesic").unwrap();
        let mut t = Terminal::new(
            place("Tokyo").unwrap(),
            HandoffMode::Sync { interval_s: 20.0 },
            AttachPolicy::HighestElevation,
            sh.elevation_mask_deg,
            1,
        );
        let mut pos = Vec::new();
        let mut k = 0.0;
        let mut n = 0;
        while k < 7200.0 {
            sh.positions(k, &mut pos);
            if let Some(h) = t.update(k, &pos) {
                n += 1;
                if h.from.is_some() && !h.forced {
                    assert!(
                        (h.t_s / 20.0 - (h.t_s / 20.0).round()).abs() < 1e-9,
                        "at {}",
                        h.t_s
                    );
                }
            }
            k += 1.0;
        }
        assert!(n > 3);
    }
}
