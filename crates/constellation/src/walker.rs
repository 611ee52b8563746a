//! Walker shells: circular orbits of equal altitude in evenly spaced planes, over a spherical
//! Earth that rotates beneath them (the thesis' model, §6.2). A *star* shell (polar, like
//! Iridium and Teledesic) spreads its ascending nodes over 180°, so the first and last planes
//! counter-rotate across the *seam*; a *delta* shell spreads them over 360°.
//!
//! Satellite `p * sats_per_plane + s` is number `s` of plane `p`. At time `t` (seconds) its
//! argument of latitude is `360·s/S + p·phase_offset + n·t`, with `n` the Kepler mean motion.

use crate::geo::{Vec3, EARTH_RADIUS_KM, EARTH_ROTATION_RAD_S, MU_KM3_S2};
use crate::ConstellationError;
use std::f64::consts::PI;

/// How the planes' ascending nodes are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellKind {
    /// Over 180°: near-polar planes with a counter-rotating seam.
    Star,
    /// Over 360°: inclined planes, no seam.
    Delta,
}

/// A shell of satellites and the parameters of its links.
#[derive(Debug, Clone, PartialEq)]
pub struct Shell {
    pub name: String,
    pub altitude_km: f64,
    pub planes: u32,
    pub sats_per_plane: u32,
    pub inclination_deg: f64,
    pub kind: ShellKind,
    /// Angle between the ascending nodes of adjacent co-rotating planes (Table 6.1's
    /// "interplane separation"). For a star shell the seam separation is what is left of 180°.
    pub interplane_separation_deg: f64,
    /// In-plane angle by which each plane's satellites lead the previous plane's (Teledesic:
    /// 7.5°, half the in-plane spacing).
    pub phase_offset_deg: f64,
    /// Minimum elevation at which a terminal may use a satellite.
    pub elevation_mask_deg: f64,
    /// Intra-plane ISLs on each side (Iridium 1, Teledesic 2).
    pub isl_in_plane_each_side: u32,
    /// Inter-plane ISLs to planes on each side (Iridium 1, Teledesic 2: the adjacent plane and
    /// the one two planes away).
    pub isl_planes_each_side: u32,
    /// Whether a star shell keeps one ISL per satellite across the seam.
    pub cross_seam: bool,
    /// Inter-plane and cross-seam ISLs are off while either end is above this latitude (§6.2:
    /// 70°).
    pub isl_latitude_threshold_deg: f64,
    /// Cross-seam ISLs are off while their ends are within this many degrees of longitude of
    /// each other (near where the counter-rotating planes cross; §6.2: 8°).
    pub cross_seam_min_longitude_deg: f64,
    /// Ground-to-satellite link rate (thesis: 1.5 Mb/s).
    pub gsl_rate_bps: u64,
    /// Inter-satellite link rate (thesis: 25 Mb/s Iridium, 155 Mb/s Teledesic).
    pub isl_rate_bps: u64,
    /// One of the thesis' shells (Table 6.1): paths default to the thesis' attachment and
    /// handoff (highest elevation, asynchronous checks), so its reproductions stay the thesis'.
    /// Modern shells default to a joint attachment (see [`crate::Constellation::default_attachment`]).
    pub thesis_model: bool,
}

/// Names of the presets.
pub const PRESETS: [&str; 5] = [
    "iridium",
    "teledesic",
    "starlink-550",
    "kuiper-630",
    "oneweb",
];

impl Shell {
    /// A preset by name: the thesis' Table 6.1 `iridium` and `teledesic` exactly, and modern
    /// shells (sources in `docs/leo.md`).
    pub fn preset(name: &str) -> Result<Shell, ConstellationError> {
        let base = |name: &str| Shell {
            name: name.to_string(),
            altitude_km: 0.0,
            planes: 0,
            sats_per_plane: 0,
            inclination_deg: 0.0,
            kind: ShellKind::Star,
            interplane_separation_deg: 0.0,
            phase_offset_deg: 0.0,
            elevation_mask_deg: 0.0,
            isl_in_plane_each_side: 1,
            isl_planes_each_side: 1,
            cross_seam: false,
            isl_latitude_threshold_deg: 70.0,
            cross_seam_min_longitude_deg: 8.0,
            gsl_rate_bps: 1_500_000,
            isl_rate_bps: 25_000_000,
            thesis_model: false,
        };
        let s = match name.to_ascii_lowercase().as_str() {
            // Table 6.1: 780 km, 6 × 11, 86.4°, 31.6° apart, seam 22°, mask 8.2°, 4 ISLs,
            // no cross-seam ISLs; staggered by half the in-plane spacing (§6.2).
            "iridium" => Shell {
                altitude_km: 780.0,
                planes: 6,
                sats_per_plane: 11,
                inclination_deg: 86.4,
                interplane_separation_deg: 31.6,
                phase_offset_deg: 180.0 / 11.0,
                elevation_mask_deg: 8.2,
                thesis_model: true,
                ..base("iridium")
            },
            // Table 6.1: 1375 km, 12 × 24, 84.7°, 15° apart, seam 15°, mask 40°, 8 ISLs,
            // cross-seam ISLs; offset 7.5° between adjacent planes (§6.2).
            "teledesic" => Shell {
                altitude_km: 1375.0,
                planes: 12,
                sats_per_plane: 24,
                inclination_deg: 84.7,
                interplane_separation_deg: 15.0,
                phase_offset_deg: 7.5,
                elevation_mask_deg: 40.0,
                isl_in_plane_each_side: 2,
                isl_planes_each_side: 2,
                cross_seam: true,
                isl_rate_bps: 155_000_000,
                thesis_model: true,
                ..base("teledesic")
            },
            // SpaceX FCC modification (2019): 72 planes × 22 at 53°, 550 km; 25° mask. The
            // filing gives no phasing: Walker F = 1 (adjacent planes' satellites abreast, so the
            // +Grid ISLs cross the orbits).
            "starlink-550" | "starlink" => Shell {
                altitude_km: 550.0,
                planes: 72,
                sats_per_plane: 22,
                inclination_deg: 53.0,
                kind: ShellKind::Delta,
                interplane_separation_deg: 5.0,
                phase_offset_deg: 360.0 / 1584.0,
                elevation_mask_deg: 25.0,
                isl_rate_bps: 10_000_000_000,
                gsl_rate_bps: 100_000_000,
                ..base("starlink-550")
            },
            // Amazon Kuiper FCC application (2019), 630 km shell: 34 × 34 at 51.9°; 35° mask;
            // Walker F = 1 as for Starlink.
            "kuiper-630" | "kuiper" => Shell {
                altitude_km: 630.0,
                planes: 34,
                sats_per_plane: 34,
                inclination_deg: 51.9,
                kind: ShellKind::Delta,
                interplane_separation_deg: 360.0 / 34.0,
                phase_offset_deg: 360.0 / 1156.0,
                elevation_mask_deg: 35.0,
                isl_rate_bps: 10_000_000_000,
                gsl_rate_bps: 100_000_000,
                ..base("kuiper-630")
            },
            // OneWeb's nominal 648-satellite system: 18 planes × 36, 1200 km, 87.9°; planes
            // evenly over 180°. Real OneWeb satellites are bent pipes: the +Grid ISLs are
            // hypothetical. Mask 40° (assumed; see docs/leo.md).
            "oneweb" => Shell {
                altitude_km: 1200.0,
                planes: 18,
                sats_per_plane: 36,
                inclination_deg: 87.9,
                interplane_separation_deg: 10.0,
                phase_offset_deg: 5.0,
                elevation_mask_deg: 40.0,
                isl_rate_bps: 10_000_000_000,
                gsl_rate_bps: 100_000_000,
                ..base("oneweb")
            },
            _ => return Err(ConstellationError::UnknownPreset(name.to_string())),
        };
        s.validate()?;
        Ok(s)
    }

    /// A preset with optional changes: `NAME[,KEY=VALUE…]`, keys `altitude` (km), `phasing`
    /// (Walker F: adjacent planes' satellites offset by 360°·F/T, T the number of satellites),
    /// `mask` (degrees) and `inclination` (degrees); e.g. `starlink-550,phasing=17,mask=40`.
    /// Lets a user match another tool's shell.
    pub fn from_spec(spec: &str) -> Result<Shell, ConstellationError> {
        let mut parts = spec.split(',').map(str::trim);
        let name = parts.next().unwrap_or("");
        let mut s = Shell::preset(name)?;
        for kv in parts {
            let bad = |reason: String| {
                ConstellationError::Request(format!(
                "constellation '{spec}': '{kv}': {reason} (accepted: altitude=KM, phasing=F, mask=DEG, inclination=DEG)"
            ))
            };
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad("expected KEY=VALUE".into()))?;
            let k = k.trim();
            if !["altitude", "mask", "inclination", "phasing"].contains(&k) {
                return Err(bad(format!("unknown key '{k}'")));
            }
            let x: f64 = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("'{}' is not a number", v.trim())))?;
            match k {
                "altitude" => s.altitude_km = x,
                "mask" => s.elevation_mask_deg = x,
                "inclination" => s.inclination_deg = x,
                "phasing" => s.set_walker_phasing(x)?,
                other => return Err(bad(format!("unknown key '{other}'"))),
            }
        }
        s.validate()?;
        if spec.contains(',') {
            s.name = spec.split(',').map(str::trim).collect::<Vec<_>>().join(",");
        }
        Ok(s)
    }

    /// Sets the Walker phasing factor F (an integer 0..planes-1): each plane's satellites lead
    /// the previous plane's by 360°·F/T.
    pub fn set_walker_phasing(&mut self, f: f64) -> Result<(), ConstellationError> {
        if !(f.fract() == 0.0 && (0.0..self.planes as f64).contains(&f)) {
            return Err(ConstellationError::Field {
                field: "phasing",
                reason: format!(
                    "Walker F must be a whole number 0..{} for {} planes, got {f}",
                    self.planes.saturating_sub(1),
                    self.planes
                ),
            });
        }
        self.phase_offset_deg = 360.0 * f / self.count() as f64;
        Ok(())
    }

    /// The Walker phasing factor F of the shell, if its phase offset is a whole multiple of
    /// 360°/T.
    pub fn walker_phasing(&self) -> Option<u32> {
        let f = self.phase_offset_deg * self.count() as f64 / 360.0;
        ((f - f.round()).abs() < 1e-6 && f >= -1e-9).then_some(f.round() as u32)
    }

    /// Checks every field, naming the first that is wrong.
    pub fn validate(&self) -> Result<(), ConstellationError> {
        let bad =
            |field: &'static str, reason: String| Err(ConstellationError::Field { field, reason });
        if !(100.0..=50_000.0).contains(&self.altitude_km) {
            return bad(
                "altitude_km",
                format!("must be 100..50000 km, got {}", self.altitude_km),
            );
        }
        if self.planes == 0 || self.planes > 1000 {
            return bad("planes", format!("must be 1..1000, got {}", self.planes));
        }
        if self.sats_per_plane < 2 || self.sats_per_plane > 1000 {
            return bad(
                "sats_per_plane",
                format!("must be 2..1000, got {}", self.sats_per_plane),
            );
        }
        if !(0.0..=180.0).contains(&self.inclination_deg) {
            return bad(
                "inclination_deg",
                format!("must be 0..180, got {}", self.inclination_deg),
            );
        }
        let span = match self.kind {
            ShellKind::Star => 180.0,
            ShellKind::Delta => 360.0,
        };
        if !(self.interplane_separation_deg > 0.0
            && self.interplane_separation_deg * (self.planes as f64 - 1.0) < span)
        {
            return bad(
                "interplane_separation_deg",
                format!(
                    "{} planes {}° apart do not fit in {span}°",
                    self.planes, self.interplane_separation_deg
                ),
            );
        }
        if !(0.0..90.0).contains(&self.elevation_mask_deg) {
            return bad(
                "elevation_mask_deg",
                format!("must be 0..90, got {}", self.elevation_mask_deg),
            );
        }
        if !self.phase_offset_deg.is_finite() {
            return bad("phase_offset_deg", "must be a number".into());
        }
        if self.isl_in_plane_each_side > self.sats_per_plane / 2 {
            return bad(
                "isl_in_plane_each_side",
                format!("at most half the plane ({})", self.sats_per_plane / 2),
            );
        }
        if self.isl_planes_each_side as u64 * 2 >= self.planes as u64 && self.planes > 1 {
            return bad(
                "isl_planes_each_side",
                format!("too many for {} planes", self.planes),
            );
        }
        if !(0.0..=90.0).contains(&self.isl_latitude_threshold_deg) {
            return bad(
                "isl_latitude_threshold_deg",
                format!("must be 0..90, got {}", self.isl_latitude_threshold_deg),
            );
        }
        Ok(())
    }

    pub fn count(&self) -> usize {
        (self.planes * self.sats_per_plane) as usize
    }
    pub fn radius_km(&self) -> f64 {
        EARTH_RADIUS_KM + self.altitude_km
    }
    /// Kepler mean motion (rad/s).
    pub fn mean_motion_rad_s(&self) -> f64 {
        (MU_KM3_S2 / self.radius_km().powi(3)).sqrt()
    }
    /// Orbital period (s): 2π √(a³/μ).
    pub fn period_s(&self) -> f64 {
        2.0 * PI / self.mean_motion_rad_s()
    }
    /// Seam separation of a star shell (degrees): 180° less the planes' spread.
    pub fn seam_separation_deg(&self) -> f64 {
        180.0 - self.interplane_separation_deg * (self.planes as f64 - 1.0)
    }
    /// Right ascension of plane `p`'s ascending node (radians) at time 0.
    pub fn raan_rad(&self, p: u32) -> f64 {
        (self.interplane_separation_deg * p as f64).to_radians()
    }
    /// Argument of latitude (radians) of satellite `s` of plane `p` at time 0.
    pub fn phase_rad(&self, p: u32, s: u32) -> f64 {
        (360.0 * s as f64 / self.sats_per_plane as f64 + self.phase_offset_deg * p as f64)
            .to_radians()
    }

    /// Inertial position (km) of satellite `(p, s)` at `t_s`, in a frame whose x axis is the
    /// Earth-fixed prime meridian's direction at time 0.
    pub fn inertial_position(&self, p: u32, s: u32, t_s: f64) -> Vec3 {
        let u = self.phase_rad(p, s) + self.mean_motion_rad_s() * t_s;
        orbit_point(
            self.radius_km(),
            self.raan_rad(p),
            self.inclination_deg.to_radians(),
            u,
        )
    }

    /// Earth-fixed positions of every satellite at `t_s`, into `out` (cleared first).
    pub fn positions(&self, t_s: f64, out: &mut Vec<Vec3>) {
        out.clear();
        let n = self.mean_motion_rad_s();
        let (r, inc) = (self.radius_km(), self.inclination_deg.to_radians());
        let (si, ci) = inc.sin_cos();
        let theta = EARTH_ROTATION_RAD_S * t_s;
        for p in 0..self.planes {
            // Earth-fixed: the node's longitude regresses with the Earth's rotation.
            let (so, co) = (self.raan_rad(p) - theta).sin_cos();
            for s in 0..self.sats_per_plane {
                let (su, cu) = (self.phase_rad(p, s) + n * t_s).sin_cos();
                out.push(Vec3::new(
                    r * (co * cu - so * su * ci),
                    r * (so * cu + co * su * ci),
                    r * su * si,
                ));
            }
        }
    }
}

/// The point at argument of latitude `u` on a circular orbit of radius `r`, node `raan` and
/// inclination `inc` (radians).
pub fn orbit_point(r: f64, raan: f64, inc: f64, u: f64) -> Vec3 {
    let (so, co) = raan.sin_cos();
    let (su, cu) = u.sin_cos();
    let (si, ci) = inc.sin_cos();
    Vec3::new(
        r * (co * cu - so * su * ci),
        r * (so * cu + co * su * ci),
        r * su * si,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_table_6_1() {
        let i = Shell::preset("iridium").unwrap();
        assert_eq!((i.planes, i.sats_per_plane, i.count()), (6, 11, 66));
        assert!((i.seam_separation_deg() - 22.0).abs() < 1e-9);
        assert_eq!(
            (i.altitude_km, i.inclination_deg, i.elevation_mask_deg),
            (780.0, 86.4, 8.2)
        );
        assert!(!i.cross_seam);
        let t = Shell::preset("teledesic").unwrap();
        assert_eq!((t.planes, t.sats_per_plane, t.count()), (12, 24, 288));
        assert!((t.seam_separation_deg() - 15.0).abs() < 1e-9);
        assert_eq!(
            (t.altitude_km, t.inclination_deg, t.elevation_mask_deg),
            (1375.0, 84.7, 40.0)
        );
        assert!(t.cross_seam && t.isl_in_plane_each_side == 2 && t.isl_planes_each_side == 2);
        assert_eq!(Shell::preset("starlink-550").unwrap().count(), 1584);
        assert_eq!(Shell::preset("kuiper-630").unwrap().count(), 1156);
        assert_eq!(Shell::preset("oneweb").unwrap().count(), 648);
        assert!(matches!(
            Shell::preset("globalstar"),
            Err(ConstellationError::UnknownPreset(_))
        ));
    }

    #[test]
    fn kepler_periods() {
        // T = 2π √(a³/μ) with a = 6371 km + altitude: Iridium ≈ 100.3 min (the published
        // "about 100 minutes"), Teledesic ≈ 113.1, Starlink ≈ 95.5, Kuiper ≈ 97.2, OneWeb ≈ 109.3.
        for (name, minutes) in [
            ("iridium", 100.3),
            ("teledesic", 113.1),
            ("starlink-550", 95.5),
            ("kuiper-630", 97.2),
            ("oneweb", 109.3),
        ] {
            let t = Shell::preset(name).unwrap().period_s() / 60.0;
            assert!((t - minutes).abs() < 0.06, "{name}: {t} min");
        }
    }

    #[test]
    fn positions_on_the_sphere_and_periodic() {
        for name in PRESETS {
            let sh = Shell::preset(name).unwrap();
            let mut a = Vec::new();
            sh.positions(1234.5, &mut a);
            assert_eq!(a.len(), sh.count());
            for v in &a {
                assert!((v.norm() - sh.radius_km()).abs() < 1e-6);
                let (lat, _) = v.lat_lon_deg();
                let max = sh.inclination_deg.min(180.0 - sh.inclination_deg);
                assert!(lat.abs() <= max + 1e-6, "{name} lat {lat}");
            }
            // After one period, inertially back to the start.
            let p = sh.period_s();
            let x0 = sh.inertial_position(1, 1, 10.0);
            let x1 = sh.inertial_position(1, 1, 10.0 + p);
            assert!(x0.dist(x1) < 1e-6);
        }
    }

    #[test]
    fn specs_change_altitude_phasing_and_mask() {
        let s = Shell::from_spec("starlink-550, phasing=17, altitude=560, mask=40").unwrap();
        assert_eq!((s.altitude_km, s.elevation_mask_deg), (560.0, 40.0));
        assert_eq!(s.walker_phasing(), Some(17));
        assert!((s.phase_offset_deg - 360.0 * 17.0 / 1584.0).abs() < 1e-12);
        assert_eq!(s.name, "starlink-550,phasing=17,altitude=560,mask=40");
        assert_eq!(
            Shell::preset("starlink-550").unwrap().walker_phasing(),
            Some(1)
        );
        assert_eq!(
            Shell::preset("kuiper-630").unwrap().walker_phasing(),
            Some(1)
        );
        // Iridium's half-spacing stagger is Walker F = 3 of 66.
        assert_eq!(Shell::preset("iridium").unwrap().walker_phasing(), Some(3));
        assert_eq!(
            Shell::from_spec("iridium").unwrap(),
            Shell::preset("iridium").unwrap()
        );
        for (bad, says) in [
            ("starlink-550,phasing=72", "0..71"),
            ("starlink-550,phasing=1.5", "whole number"),
            ("starlink-550,altitude=5", "altitude_km"),
            ("starlink-550,mask=x", "'x' is not a number"),
            ("starlink-550,colour=red", "unknown key 'colour'"),
            ("starlink-550,mask", "KEY=VALUE"),
            ("globalstar,mask=10", "globalstar"),
        ] {
            let e = Shell::from_spec(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn invalid_fields_are_named() {
        let mut s = Shell::preset("iridium").unwrap();
        s.interplane_separation_deg = 40.0;
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("interplane_separation_deg"), "{e}");
        s = Shell::preset("iridium").unwrap();
        s.altitude_km = 10.0;
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("altitude_km"));
    }
}
