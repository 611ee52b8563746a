//! The polar-orbit geometry of the thesis' §6.5.3 ("Routing in Polar Regions", "Problems at
//! the Seams"): where the two counter-rotating planes of a star shell cross (Fig 6.20), and which
//! satellites form the polar regions that its geographic routing treats specially (Fig 6.18).

use crate::geo::Vec3;
use crate::topology::inter_plane_partner;
use crate::walker::{Shell, ShellKind};

/// Latitude (degrees) at which two planes of inclination `inclination_deg` whose ascending nodes
/// are `node_gap_deg` short of 180° apart cross: the seam planes of a star shell, Fig 6.20's
/// relationship, tan φ = tan i · sin(δ/2) with δ the seam separation (for a purely polar shell
/// they cross at the pole).
pub fn seam_crossing_latitude_deg(inclination_deg: f64, seam_separation_deg: f64) -> f64 {
    let i = inclination_deg.to_radians();
    let half = (seam_separation_deg / 2.0).to_radians();
    (i.tan() * half.sin()).atan().to_degrees().abs()
}

/// The same latitude found geometrically: the line where the orbital planes of the shell's
/// first and last plane intersect (cross product of their normals), for a star shell.
pub fn seam_crossing_latitude_geometric_deg(shell: &Shell) -> Option<f64> {
    if shell.kind != ShellKind::Star || shell.planes < 2 {
        return None;
    }
    let i = shell.inclination_deg.to_radians();
    let normal = |p: u32| {
        let o = shell.raan_rad(p);
        Vec3 {
            x: o.sin() * i.sin(),
            y: -o.cos() * i.sin(),
            z: i.cos(),
        }
    };
    let (a, b) = (normal(0), normal(shell.planes - 1));
    let d = Vec3 {
        x: a.y * b.z - a.z * b.y,
        y: a.z * b.x - a.x * b.z,
        z: a.x * b.y - a.y * b.x,
    };
    Some((d.z.abs() / d.norm()).asin().to_degrees())
}

/// The polar regions of a shell at one instant (§6.5.3, Fig 6.18): POLAR satellites have one
/// or more of their inter-plane ISLs turned off (either end above the shell's ISL latitude
/// threshold; the missing side of a seam plane does not count), POLAR BORDER satellites are
/// the in-plane neighbours of POLAR satellites that are not POLAR themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolarRegions {
    pub polar: Vec<u32>,
    pub border: Vec<u32>,
    /// Of `polar` and `border`, those in the northern hemisphere.
    pub north: usize,
}

impl PolarRegions {
    /// Satellites in both regions.
    pub fn size(&self) -> usize {
        self.polar.len() + self.border.len()
    }
}

/// The polar regions of `shell` given every satellite's latitude (degrees, index
/// `plane × sats_per_plane + slot`, as [`crate::Snapshot::lat_deg`]).
pub fn polar_regions(shell: &Shell, lat_deg: &[f64]) -> PolarRegions {
    let (np, ns) = (shell.planes, shell.sats_per_plane);
    let n = (np * ns) as usize;
    let thr = shell.isl_latitude_threshold_deg;
    let low = |i: u32| lat_deg.get(i as usize).is_some_and(|l| l.abs() <= thr);
    let mut polar = vec![false; n];
    for p in 0..np {
        for d in 1..=shell.isl_planes_each_side {
            let q = p + d;
            if q >= np && shell.kind == ShellKind::Star {
                continue; // across the seam: not an inter-plane ISL
            }
            for s in 0..ns {
                let a = p * ns + s;
                let b = (q % np) * ns + inter_plane_partner(shell, p, s, q);
                if !(low(a) && low(b)) {
                    polar[a as usize] = true;
                    polar[b as usize] = true;
                }
            }
        }
    }
    let mut border = Vec::new();
    for a in 0..n as u32 {
        if polar[a as usize] {
            continue;
        }
        let (p, s) = (a / ns, a % ns);
        let next = p * ns + (s + 1) % ns;
        let prev = p * ns + (s + ns - 1) % ns;
        if polar[next as usize] || polar[prev as usize] {
            border.push(a);
        }
    }
    let polar: Vec<u32> = (0..n as u32).filter(|&a| polar[a as usize]).collect();
    let north = polar
        .iter()
        .chain(&border)
        .filter(|&&a| lat_deg.get(a as usize).is_some_and(|&l| l > 0.0))
        .count();
    PolarRegions {
        polar,
        border,
        north,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Constellation;

    #[test]
    fn teledesic_seam_planes_cross_near_54_degrees_and_formula_matches_geometry() {
        let t = Shell::preset("teledesic").unwrap();
        let f = seam_crossing_latitude_deg(t.inclination_deg, t.seam_separation_deg());
        let g = seam_crossing_latitude_geometric_deg(&t).unwrap();
        assert!((f - g).abs() < 1e-9, "{f} vs {g}");
        assert!((54.0..55.0).contains(&f), "{f}");
        // A purely polar shell crosses at the pole; a lower inclination lower down.
        assert!((seam_crossing_latitude_deg(90.0, 15.0) - 90.0).abs() < 1e-9);
        assert!(seam_crossing_latitude_deg(80.0, 15.0) < f);
    }

    #[test]
    fn polar_regions_hold_the_high_satellites_and_their_in_plane_borders() {
        let sh = Shell::preset("iridium").unwrap();
        let snap = Constellation::Walker(sh.clone()).snapshot(0.0);
        let r = polar_regions(&sh, &snap.lat_deg);
        for (i, l) in snap.lat_deg.iter().enumerate() {
            if l.abs() > sh.isl_latitude_threshold_deg {
                assert!(r.polar.contains(&(i as u32)), "sat {i} at {l}");
            }
        }
        // Every polar satellite is above the threshold or linked to one above it, and every
        // border satellite below it.
        for &b in &r.border {
            assert!(snap.lat_deg[b as usize].abs() <= sh.isl_latitude_threshold_deg);
        }
        assert!(r.size() > 0 && r.size() < 66, "{}", r.size());
    }
}
