//! Real satellites from two-line element sets (TLEs), propagated with SGP4 (the `sgp4` crate),
//! and the reverse: TLEs equivalent to a Walker shell (for cross-checking and for tools that
//! read TLEs). Time 0 is the first satellite's epoch; positions are rotated from SGP4's TEME
//! frame to Earth-fixed by the IAU sidereal time (polar motion ignored).

use crate::geo::{Vec3, EARTH_ROTATION_RAD_S, MU_KM3_S2};
use crate::walker::Shell;
use crate::ConstellationError;
use std::f64::consts::PI;

const MINUTES_PER_JULIAN_YEAR: f64 = 365.25 * 1440.0;

/// Satellites read from TLEs, with the link parameters the file cannot carry.
#[derive(Debug, Clone)]
pub struct TleSet {
    pub name: String,
    pub satellites: Vec<TleSatellite>,
    /// Sidereal angle (radians) of the Greenwich meridian at time 0.
    pub gmst0_rad: f64,
    pub elevation_mask_deg: f64,
    /// ISLs of each satellite to its nearest neighbours (no plane structure is assumed).
    pub isls_per_satellite: u32,
    pub max_isl_km: f64,
    pub isl_latitude_threshold_deg: f64,
    /// `(planes, per plane)` from a `PLANES PER_PLANE` count line: the satellites are listed
    /// plane by plane, and each links to its two in-plane neighbours and to the satellite
    /// nearest in phase in each adjacent plane (the +Grid), under the latitude threshold; the
    /// last and first planes link only if they co-rotate (a delta shell, not a star's seam).
    /// Without it, each satellite links to its `isls_per_satellite` nearest.
    pub grid: Option<(u32, u32)>,
    /// With `grid`: for each plane `p`, the offset `k` such that satellite `s` links to
    /// satellite `(s + k) mod per_plane` of plane `p + 1` (mod planes), or `None` when the two
    /// planes do not link. Fixed at parse time from the positions at time 0 (co-rotating planes
    /// keep their relative phase).
    pub grid_shift: Vec<Option<u32>>,
}

/// One satellite.
#[derive(Debug, Clone)]
pub struct TleSatellite {
    pub name: String,
    constants: sgp4::Constants,
    /// Minutes from this satellite's epoch to time 0.
    offset_min: f64,
}

impl TleSatellite {
    /// TEME position (km) at `t_s` after time 0, or `None` when SGP4 cannot propagate (e.g.
    /// the orbit has decayed).
    pub fn teme_position(&self, t_s: f64) -> Option<Vec3> {
        let p = self
            .constants
            .propagate(sgp4::MinutesSinceEpoch(self.offset_min + t_s / 60.0))
            .ok()?;
        Some(Vec3::new(p.position[0], p.position[1], p.position[2]))
    }
}

/// Rotates a TEME vector into the Earth-fixed frame for Greenwich sidereal angle `theta`.
pub fn teme_to_ecef(v: Vec3, theta: f64) -> Vec3 {
    let (s, c) = theta.sin_cos();
    Vec3::new(c * v.x + s * v.y, -s * v.x + c * v.y, v.z)
}

impl TleSet {
    /// Parses TLEs: two-line sets, or three-line sets whose first line is the name (an
    /// optional leading "0 " is dropped). Errors name the file line and what is wrong.
    ///
    /// The file may start with a count line, as constellation generators write: `N` (the
    /// number of satellites) or `PLANES PER_PLANE` (Hypatia's `tles.txt`; the satellites are
    /// then listed plane by plane, and the ISLs form the +Grid of those planes, see
    /// [`TleSet::grid`]). The count must match the satellites that follow.
    pub fn parse(text: &str, source_name: &str) -> Result<TleSet, ConstellationError> {
        let err = |line: usize, reason: String| ConstellationError::Line {
            source_name: source_name.to_string(),
            line,
            reason,
        };
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end()))
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let header: Option<(usize, Vec<u64>)> = lines.first().and_then(|&(n, l)| {
            let v: Option<Vec<u64>> = l.split_whitespace().map(|x| x.parse().ok()).collect();
            v.filter(|v| (1..=2).contains(&v.len())).map(|v| (n, v))
        });
        let (elements, grid) = match header {
            Some((n, counts)) => match parse_sets(&lines[1..], &err) {
                Ok(e) => {
                    let total: u64 = counts.iter().product();
                    // A lone number may be a three-line set's name (a catalogue number).
                    if total != e.len() as u64 && counts.len() == 1 {
                        if let Ok(x) = parse_sets(&lines, &err) {
                            return TleSet::build(x, None, source_name, &err);
                        }
                    }
                    if total != e.len() as u64 {
                        return Err(err(
                            n,
                            format!(
                                "the count line says {} satellites, but {} follow",
                                counts
                                    .iter()
                                    .map(u64::to_string)
                                    .collect::<Vec<_>>()
                                    .join(" x "),
                                e.len()
                            ),
                        ));
                    }
                    let grid = match counts.as_slice() {
                        [p, s] if *p >= 1 && *s >= 2 => Some((*p as u32, *s as u32)),
                        _ => None,
                    };
                    (e, grid)
                }
                // A lone number may be a three-line set's name (a catalogue number).
                Err(e) if counts.len() == 1 => match parse_sets(&lines, &err) {
                    Ok(x) => (x, None),
                    Err(_) => return Err(e),
                },
                Err(e) => return Err(e),
            },
            None => (parse_sets(&lines, &err)?, None),
        };
        TleSet::build(elements, grid, source_name, &err)
    }

    /// The set of parsed `elements` (with the line numbers of their line 1).
    fn build(
        elements: Vec<(usize, sgp4::Elements)>,
        grid: Option<(u32, u32)>,
        source_name: &str,
        err: &dyn Fn(usize, String) -> ConstellationError,
    ) -> Result<TleSet, ConstellationError> {
        if elements.is_empty() {
            return Err(ConstellationError::Request(format!(
                "{source_name}: no TLEs"
            )));
        }
        let epoch0 = elements[0].1.epoch();
        let mut satellites = Vec::new();
        for (n, e) in &elements {
            let constants = sgp4::Constants::from_elements(e)
                .map_err(|x| err(*n, format!("elements cannot be propagated: {x}")))?;
            satellites.push(TleSatellite {
                name: e
                    .object_name
                    .clone()
                    .unwrap_or_else(|| format!("{}", e.norad_id)),
                constants,
                offset_min: (epoch0 - e.epoch()) * MINUTES_PER_JULIAN_YEAR,
            });
        }
        Ok(TleSet {
            name: source_name.to_string(),
            satellites,
            gmst0_rad: sgp4::iau_epoch_to_sidereal_time(epoch0),
            elevation_mask_deg: 25.0,
            isls_per_satellite: 4,
            max_isl_km: 5000.0,
            isl_latitude_threshold_deg: 70.0,
            grid,
            grid_shift: Vec::new(),
        }
        .with_grid_shifts(&elements))
    }

    /// Fills [`TleSet::grid_shift`]: each plane's partner offset is the one that minimises the
    /// summed distance to the next plane at time 0; the last plane links to the first only
    /// if their orbit normals are about as close as the first two planes' (they co-rotate).
    fn with_grid_shifts(mut self, elements: &[(usize, sgp4::Elements)]) -> TleSet {
        let Some((np, ns)) = self.grid else {
            return self;
        };
        let (np, ns) = (np as usize, ns as usize);
        let mut pos = Vec::new();
        self.positions(0.0, &mut pos);
        let normal = |p: usize| {
            let e = &elements[p * ns].1;
            let (i, o) = (e.inclination.to_radians(), e.right_ascension.to_radians());
            Vec3::new(i.sin() * o.sin(), -i.sin() * o.cos(), i.cos())
        };
        let angle = |a: Vec3, b: Vec3| a.dot(b).clamp(-1.0, 1.0).acos();
        self.grid_shift = (0..np)
            .map(|p| {
                let q = (p + 1) % np;
                if np < 2 || (p + 1 == np && np < 3) {
                    return None;
                }
                if p + 1 == np
                    && angle(normal(p), normal(0)) > 1.5 * angle(normal(0), normal(1)) + 1e-9
                {
                    return None;
                }
                (0..ns)
                    .map(|k| {
                        let d: f64 = (0..ns)
                            .map(|s| pos[p * ns + s].dist(pos[q * ns + (s + k) % ns]))
                            .sum();
                        (d, k as u32)
                    })
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|x| x.1)
            })
            .collect();
        self
    }

    pub fn len(&self) -> usize {
        self.satellites.len()
    }
    pub fn is_empty(&self) -> bool {
        self.satellites.is_empty()
    }

    /// Earth-fixed positions at `t_s`; a satellite SGP4 cannot propagate is placed at the
    /// Earth's centre, where it is never visible and has no ISLs.
    pub fn positions(&self, t_s: f64, out: &mut Vec<Vec3>) {
        out.clear();
        let theta = self.gmst0_rad + EARTH_ROTATION_RAD_S * t_s;
        for s in &self.satellites {
            out.push(
                s.teme_position(t_s)
                    .map_or(Vec3::default(), |v| teme_to_ecef(v, theta)),
            );
        }
    }
}

/// The two- or three-line sets of `lines` (line number, text), with the line number of each
/// set's line 1.
fn parse_sets(
    lines: &[(usize, &str)],
    err: &dyn Fn(usize, String) -> ConstellationError,
) -> Result<Vec<(usize, sgp4::Elements)>, ConstellationError> {
    let mut elements = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, l) = lines[i];
        let (name, first) = if l.starts_with("1 ") {
            (None, i)
        } else {
            let name = l.trim().strip_prefix("0 ").unwrap_or(l.trim()).to_string();
            (Some(name), i + 1)
        };
        let (Some(&(n1, l1)), Some(&(n2, l2))) = (lines.get(first), lines.get(first + 1)) else {
            return Err(err(n, "incomplete TLE: expected line 1 and line 2".into()));
        };
        if !l1.starts_with("1 ") {
            return Err(err(
                n1,
                format!("expected TLE line 1 (starting '1 '), got '{l1}'"),
            ));
        }
        if !l2.starts_with("2 ") {
            return Err(err(
                n2,
                format!("expected TLE line 2 (starting '2 '), got '{l2}'"),
            ));
        }
        let e =
            sgp4::Elements::from_tle(name.clone(), l1.as_bytes(), l2.as_bytes()).map_err(|e| {
                let (line, reason) = sgp4_error_in_words(&e.to_string(), n1, n2);
                err(line, reason)
            })?;
        elements.push((n1, e));
        i = first + 2;
    }
    Ok(elements)
}

/// The file line and the reason of an SGP4 parse error, whose text says which TLE line
/// ("… on TLE line 2 between characters 68 and 69"): `n1`, `n2` are the file lines of TLE
/// lines 1 and 2.
fn sgp4_error_in_words(text: &str, n1: usize, n2: usize) -> (usize, String) {
    let text = text.strip_prefix("TLE parse error: ").unwrap_or(text);
    for (marker, line, which) in [
        (" on TLE line 1", n1, "TLE line 1"),
        (" on TLE line 2", n2, "TLE line 2"),
        (" (TLE lines mismatch)", n1, "TLE lines 1 and 2"),
    ] {
        if let Some((what, rest)) = text.split_once(marker) {
            let place = rest
                .trim()
                .strip_prefix("between characters ")
                .and_then(|r| r.split_once(" and "))
                .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
                .map_or(String::new(), |(a, b)| format!(", columns {}-{b}", a + 1));
            return (line, format!("{what} ({which}{place})"));
        }
    }
    (n1, text.to_string())
}

fn checksum(line: &str) -> u32 {
    line.bytes()
        .map(|b| match b {
            b'0'..=b'9' => (b - b'0') as u32,
            b'-' => 1,
            _ => 0,
        })
        .sum::<u32>()
        % 10
}

/// One TLE (two lines, with checksums) for a circular orbit: epoch 2000-01-01 12:00 UTC (J2000),
/// no drag.
pub fn circular_tle(
    number: u32,
    inclination_deg: f64,
    raan_deg: f64,
    mean_anomaly_deg: f64,
    revs_per_day: f64,
) -> (String, String) {
    let l1 = format!(
        "1 {:05}U 00000A   00001.50000000  .00000000  00000-0  00000-0 0  999",
        number % 100_000
    );
    let l2 = format!(
        "2 {:05} {:8.4} {:8.4} 0000000 {:8.4} {:8.4} {:11.8}{:5}",
        number % 100_000,
        inclination_deg,
        raan_deg.rem_euclid(360.0),
        0.0,
        mean_anomaly_deg.rem_euclid(360.0),
        revs_per_day,
        1
    );
    let (c1, c2) = (checksum(&l1), checksum(&l2));
    (format!("{l1}{c1}"), format!("{l2}{c2}"))
}

/// TLEs equivalent to a Walker shell at the J2000 epoch: same planes, phases and mean motion,
/// with right ascensions shifted by the sidereal angle at the epoch so that time 0 of the
/// shell and of the TLEs coincide. Returned as text: a `PLANES PER_PLANE` count line (so that
/// [`TleSet::parse`] rebuilds the +Grid), then three-line sets plane by plane.
pub fn shell_to_tles(shell: &Shell) -> String {
    let gmst0 = sgp4::iau_epoch_to_sidereal_time(0.0).to_degrees();
    let revs = shell.mean_motion_rad_s() * 86_400.0 / (2.0 * PI);
    let mut out = format!("{} {}\n", shell.planes, shell.sats_per_plane);
    for p in 0..shell.planes {
        for s in 0..shell.sats_per_plane {
            let n = p * shell.sats_per_plane + s + 1;
            let (l1, l2) = circular_tle(
                n,
                shell.inclination_deg,
                shell.raan_rad(p).to_degrees() + gmst0,
                shell.phase_rad(p, s).to_degrees(),
                revs,
            );
            out.push_str(&format!("{}-P{}-S{}\n{l1}\n{l2}\n", shell.name, p, s));
        }
    }
    out
}

/// What the TLEs of [`shell_to_tles`], read back with [`TleSet::parse`], cannot carry of
/// `shell`, so that routing over them differs from routing over the preset (empty when only
/// the SGP4-versus-circular-orbit position difference remains).
pub fn round_trip_differences(shell: &Shell) -> Vec<String> {
    let mut out = Vec::new();
    if shell.elevation_mask_deg != 25.0 {
        out.push(format!(
            "TLE input uses a 25° mask: add --mask {} for the preset's",
            shell.elevation_mask_deg
        ));
    }
    if shell.isl_latitude_threshold_deg != 70.0 {
        out.push(format!(
            "TLE input turns inter-plane ISLs off above 70°: add --isl-latitude {}",
            shell.isl_latitude_threshold_deg
        ));
    }
    if shell.isl_in_plane_each_side > 1 || shell.isl_planes_each_side > 1 {
        out.push(format!(
            "TLE input has the +Grid (1 ISL each way in plane, 1 to each adjacent plane); the \
             preset has {} in plane and {} plane(s) each side",
            shell.isl_in_plane_each_side, shell.isl_planes_each_side
        ));
    }
    if shell.kind == crate::walker::ShellKind::Star && shell.cross_seam {
        out.push("TLE input has no cross-seam ISLs; the preset has them".into());
    }
    let half = 180.0 / shell.sats_per_plane as f64;
    if (shell.phase_offset_deg.rem_euclid(2.0 * half) - half).abs() < 1e-9 {
        out.push(
            "the planes are staggered by half a slot: both neighbours of the next plane are \
             equally near, and TLE input may pair them otherwise than the preset's alternating \
             rule"
                .into(),
        );
    }
    if shell.thesis_model {
        out.push(
            "TLE input defaults to the joint attachment with continuous handoff, the preset to \
             the thesis' (highest, async): give --attach highest --handoff async to compare"
                .into(),
        );
    }
    out
}

/// Semi-major axis (km) of a mean motion given in revolutions per day (Kepler).
pub fn semi_major_axis_km(revs_per_day: f64) -> f64 {
    let n = revs_per_day * 2.0 * PI / 86_400.0;
    (MU_KM3_S2 / (n * n)).cbrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISS: &str = "ISS (ZARYA)\n1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927\n2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537\n";

    #[test]
    fn parses_three_and_two_line_sets() {
        let t = TleSet::parse(ISS, "iss.tle").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.satellites[0].name, "ISS (ZARYA)");
        let two: String = ISS.lines().skip(1).map(|l| format!("{l}\n")).collect();
        let t2 = TleSet::parse(&two, "x").unwrap();
        assert_eq!(t2.satellites[0].name, "25544");
        let mut v = Vec::new();
        t.positions(0.0, &mut v);
        let r = v[0].norm();
        assert!((6600.0..6800.0).contains(&r), "ISS radius {r}");
    }

    #[test]
    fn errors_name_line_and_problem() {
        let bad_sum = ISS.replace("0  2927", "0  2928");
        let e = TleSet::parse(&bad_sum, "iss.tle").unwrap_err().to_string();
        assert!(
            e.contains("iss.tle line 2") && e.to_lowercase().contains("checksum"),
            "{e}"
        );
        let e = TleSet::parse(
            "ISS\n1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927\n",
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("f line 1") && e.contains("incomplete"), "{e}");
        let e = TleSet::parse("X\n1 25544U\nfoo\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("line 2"), "{e}");
        let short = ISS.replace("15.72125391563537", "15.7");
        let e = TleSet::parse(&short, "f").unwrap_err().to_string();
        // TLE line 2 of a three-line set is the file's third line.
        assert!(
            e.contains("f line 3") && e.to_lowercase().contains("length"),
            "{e}"
        );
        let two: String = ISS.lines().skip(1).map(|l| format!("{l}\n")).collect();
        let e = TleSet::parse(&two.replace("0  2927", "0  2928"), "g")
            .unwrap_err()
            .to_string();
        assert!(e.contains("g line 1") && e.contains("TLE line 1"), "{e}");
        assert!(TleSet::parse("\n\n", "f").is_err());
    }

    #[test]
    fn a_leading_count_line_is_accepted_and_checked() {
        let two = format!("{ISS}{}", ISS.replace("ISS (ZARYA)", "ISS again"));
        let t = TleSet::parse(&format!("2\n{two}"), "f").unwrap();
        assert_eq!((t.len(), t.grid), (2, None));
        let e = TleSet::parse(&format!("3\n{two}"), "f")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f line 1") && e.contains("3") && e.contains("2 follow"),
            "{e}"
        );
        // Hypatia's `PLANES PER_PLANE` line.
        let t = TleSet::parse(&format!("1 2\n{two}"), "f").unwrap();
        assert_eq!(t.grid, Some((1, 2)));
        let e = TleSet::parse(&format!("2 2\n{two}"), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 x 2") && e.contains("2 follow"), "{e}");
        // A lone number that is a set's name (a catalogue number) still reads as a name.
        let t = TleSet::parse(&ISS.replace("ISS (ZARYA)", "25544"), "f").unwrap();
        assert_eq!(t.satellites[0].name, "25544");
    }

    /// `satstp leo tle` output read back: a delta shell gets exactly the preset's +Grid, and a
    /// path over it the preset's delays (to SGP4's perturbations).
    #[test]
    fn starlink_tles_read_back_route_as_the_preset() {
        use crate::{geo::place, trace, Constellation, Routing, TraceSpec};
        let sh = Shell::preset("starlink-550").unwrap();
        assert!(round_trip_differences(&sh).is_empty());
        let t = TleSet::parse(&shell_to_tles(&sh), "s.tle").unwrap();
        assert_eq!(t.grid, Some((72, 22)));
        let (w, c) = (Constellation::Walker(sh), Constellation::Tle(t));
        for at in [0.0, 300.0] {
            assert_eq!(w.snapshot(at).edges, c.snapshot(at).edges, "at {at} s");
        }
        let spec = TraceSpec::new(
            place("NY").unwrap(),
            place("LA").unwrap(),
            Routing::MinDelay,
            300.0,
            5.0,
        );
        let mean = |c: &Constellation| {
            let tr = trace::compute(c, &spec).unwrap();
            tr.delays().sum::<f64>() / tr.delays().count() as f64
        };
        let (a, b) = (mean(&w), mean(&c));
        assert!((a - b).abs() < 3e-4, "preset {a} s, TLEs {b} s");
        // What a star preset's file cannot carry is said.
        let d = round_trip_differences(&Shell::preset("teledesic").unwrap());
        assert!(
            d.iter().any(|x| x.contains("cross-seam")) && d.iter().any(|x| x.contains("--mask 40"))
        );
        let t = TleSet::parse(&shell_to_tles(&Shell::preset("iridium").unwrap()), "i").unwrap();
        // Iridium's seam: the last plane does not link to the first.
        assert_eq!(t.grid_shift.len(), 6);
        assert!(t.grid_shift[..5].iter().all(Option::is_some) && t.grid_shift[5].is_none());
    }

    #[test]
    fn generated_tles_parse_with_valid_checksums() {
        let sh = Shell::preset("iridium").unwrap();
        let text = shell_to_tles(&sh);
        let t = TleSet::parse(&text, "iridium.tle").unwrap();
        assert_eq!(t.len(), 66);
        let a = semi_major_axis_km(sh.mean_motion_rad_s() * 86_400.0 / (2.0 * PI));
        assert!((a - sh.radius_km()).abs() < 1e-6);
    }
}
