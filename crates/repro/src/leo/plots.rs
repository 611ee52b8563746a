//! Plots of the LEO tools that the line/bar charts of `crate::plot` do not cover: scatter
//! plots (delay against distance) and map snapshots of satellites and active ISLs on a
//! rectangular projection (like the thesis' figs. 6.2 and 6.3). SVG, rendered to PNG.

use crate::plot::{esc, fmt_num, frame, nice_ticks, render_png};
use crate::{write_file, Result};
use constellation::Snapshot;
use std::fmt::Write as _;
use std::path::Path;

const W: f64 = 820.0;
const H: f64 = 480.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];

fn write(dir: &Path, name: &str, svg: &str) -> Result<()> {
    let p = dir.join(format!("{name}.svg"));
    write_file(&p, svg)?;
    render_png(svg, &dir.join(format!("{name}.png")))
}

/// A scatter plot of point series, axes from 0 to the data's maxima (or the given limits), with
/// the seeds' levels (series index, y) as dashed lines, legend entry "seeds".
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    dir: &Path,
    name: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    y_max: Option<f64>,
    seed_levels: &[(usize, f64)],
) -> Result<()> {
    let (l, r, t, b) = (70.0, 170.0, 45.0, 55.0);
    let (pw, ph) = (W - l - r, H - t - b);
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1e-9, f64::max);
    let ymax = y_max.unwrap_or_else(|| {
        series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .fold(1e-9, f64::max)
            * 1.05
    });
    let xs = |x: f64| l + x / xmax * pw;
    let ys = |y: f64| t + ph - (y / ymax).min(1.0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif" font-size="12"><rect width="{W}" height="{H}" fill="white"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="26" font-size="15" text-anchor="middle">{}</text>"#,
        l + pw / 2.0,
        esc(title)
    );
    for yv in nice_ticks(0.0, ymax) {
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            l + pw,
            l - 6.0,
            ys(yv) + 4.0,
            fmt_num(yv),
            y = ys(yv)
        );
    }
    for xv in nice_ticks(0.0, xmax) {
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            xs(xv),
            t + ph + 18.0,
            fmt_num(xv)
        );
    }
    for (i, (sname, pts)) in series.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        for &(x, y) in pts {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="1.3" fill="{col}" fill-opacity="0.5"/>"#,
                xs(x),
                ys(y)
            );
        }
        let ly = t + 14.0 + i as f64 * 20.0;
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="10" fill="{col}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            W - r + 12.0,
            ly - 9.0,
            W - r + 30.0,
            esc(sname)
        );
    }
    for &(i, y) in seed_levels {
        let _ = write!(
            s,
            r#"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
            l + pw,
            COLORS[i % COLORS.len()],
            y = ys(y)
        );
    }
    if !seed_levels.is_empty() {
        let ly = t + 14.0 + series.len() as f64 * 20.0;
        let _ = write!(
            s,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black" stroke-width="1.5" stroke-dasharray="5 3"/><text x="{:.1}" y="{ly:.1}">seeds</text>"#,
            W - r + 10.0,
            ly - 4.0,
            W - r + 26.0,
            ly - 4.0,
            W - r + 30.0
        );
    }
    frame(&mut s, (l, t, pw, ph), (x_label, H - 14.0), (y_label, 18.0));
    s.push_str("</svg>");
    write(dir, name, &s)
}

/// Coastlines: Natural Earth 1:110m land (public domain) as longitude,latitude polylines;
/// `data/land-110m.txt` says where it comes from and how it was made.
const LAND_110M: &str = include_str!("../../data/land-110m.txt");

/// The coastline polylines of `LAND_110M`, (longitude, latitude) in degrees.
fn coastlines() -> Vec<Vec<(f64, f64)>> {
    LAND_110M
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .filter_map(|p| {
                    let (lon, lat) = p.split_once(',')?;
                    Some((lon.parse().ok()?, lat.parse().ok()?))
                })
                .collect::<Vec<(f64, f64)>>()
        })
        .filter(|v| v.len() >= 2)
        .collect()
}

/// A longitude or latitude as a map label: 120°W, 0°, 30°N.
fn degrees(v: f64, pos: char, neg: char) -> String {
    if v == 0.0 || v.abs() == 180.0 {
        format!("{:.0}°", v.abs())
    } else {
        format!("{:.0}°{}", v.abs(), if v > 0.0 { pos } else { neg })
    }
}

const MAP_W: f64 = 1000.0;
const MAP_H: f64 = 520.0;

/// Satellites (dots) and active ISLs (lines; those crossing the map's edge or a pole are
/// omitted) on an equirectangular longitude/latitude map with coastlines, graticule in degrees
/// and a legend, with the given ground places marked.
pub fn map(
    dir: &Path,
    name: &str,
    title: &str,
    snap: &Snapshot,
    places: &[(String, f64, f64)],
) -> Result<()> {
    write(dir, name, &map_svg(title, snap, places))
}

fn map_svg(title: &str, snap: &Snapshot, places: &[(String, f64, f64)]) -> String {
    let title_lines = crate::plot::wrap(title, MAP_W - 24.0, 15.0);
    let (l, t) = (70.0, 30.0 + 19.0 * title_lines.len() as f64);
    // Two degrees of longitude per degree of latitude: an equirectangular map.
    let ph = MAP_H - t - 70.0;
    let pw = 2.0 * ph;
    let xs = |lon: f64| l + (lon + 180.0) / 360.0 * pw;
    let ys = |lat: f64| t + (90.0 - lat) / 180.0 * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{MAP_W}" height="{MAP_H}" viewBox="0 0 {MAP_W} {MAP_H}" font-family="DejaVu Sans, sans-serif" font-size="11"><rect width="{MAP_W}" height="{MAP_H}" fill="white"/>"#
    );
    crate::plot::text_lines(
        &mut s,
        &title_lines,
        MAP_W / 2.0,
        24.0,
        19.0,
        r#"font-size="15" text-anchor="middle""#,
    );
    for k in 0..=6 {
        let lat = -90.0 + 30.0 * f64::from(k);
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            l + pw,
            l - 5.0,
            ys(lat) + 4.0,
            degrees(lat, 'N', 'S'),
            y = ys(lat)
        );
    }
    for k in 0..=12 {
        let lon = -180.0 + 30.0 * f64::from(k);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{t}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            t + ph,
            t + ph + 15.0,
            degrees(lon, 'E', 'W'),
            x = xs(lon)
        );
    }
    for line in coastlines() {
        let pts: Vec<String> = line
            .iter()
            .map(|&(lon, lat)| format!("{:.1},{:.1}", xs(lon), ys(lat)))
            .collect();
        let _ = write!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#8c8c8c" stroke-width="0.8"/>"##,
            pts.join(" ")
        );
    }
    let mut drawn = 0;
    for &(a, b) in &snap.edges {
        let (Some(&la1), Some(&lo1), Some(&la2), Some(&lo2)) = (
            snap.lat_deg.get(a as usize),
            snap.lon_deg.get(a as usize),
            snap.lat_deg.get(b as usize),
            snap.lon_deg.get(b as usize),
        ) else {
            continue;
        };
        // Links that cross the map's edge or pass over a pole would streak across the map.
        if (lo1 - lo2).abs() > 90.0 {
            continue;
        }
        drawn += 1;
        let _ = write!(
            s,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1f77b4" stroke-width="0.8"/>"##,
            xs(lo1),
            ys(la1),
            xs(lo2),
            ys(la2)
        );
    }
    for (la, lo) in snap.lat_deg.iter().zip(&snap.lon_deg) {
        let _ = write!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="#d62728"/>"##,
            xs(*lo),
            ys(*la)
        );
    }
    for (n, la, lo) in places {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="6" height="6" fill="#2ca02c"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            xs(*lo) - 3.0,
            ys(*la) - 3.0,
            xs(*lo) + 5.0,
            ys(*la) - 4.0,
            esc(n)
        );
    }
    let _ = write!(
        s,
        r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">longitude</text><text transform="translate(20 {:.1}) rotate(-90)" text-anchor="middle" font-size="12">latitude</text>"#,
        l + pw / 2.0,
        t + ph + 33.0,
        t + ph / 2.0
    );
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{} satellites, {} active ISLs ({} drawn: links across the 180° meridian or over a pole are left out); coastlines: Natural Earth 1:110m</text>"##,
        l + pw / 2.0,
        MAP_H - 12.0,
        snap.len(),
        snap.edges.len(),
        drawn
    );
    // Legend, right of the map.
    let (lx, mut ly) = (l + pw + 16.0, t + 14.0);
    let mut entry = |s: &mut String, mark: String, label: &str| {
        s.push_str(&mark.replace("{Y}", &format!("{:.1}", ly - 4.0)));
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{ly:.1}">{}</text>"#,
            lx + 22.0,
            esc(label)
        );
        ly += 18.0;
    };
    entry(
        &mut s,
        format!(
            r##"<circle cx="{:.1}" cy="{{Y}}" r="3" fill="#d62728"/>"##,
            lx + 8.0
        ),
        "satellite",
    );
    entry(
        &mut s,
        format!(
            r##"<line x1="{lx:.1}" y1="{{Y}}" x2="{:.1}" y2="{{Y}}" stroke="#1f77b4" stroke-width="1.5"/>"##,
            lx + 16.0
        ),
        "active ISL",
    );
    if !places.is_empty() {
        entry(
            &mut s,
            format!(
                r##"<rect x="{:.1}" y="{{Y}}" width="7" height="7" fill="#2ca02c" transform="translate(0 -3.5)"/>"##,
                lx + 4.5
            ),
            "ground place",
        );
    }
    entry(
        &mut s,
        format!(
            r##"<line x1="{lx:.1}" y1="{{Y}}" x2="{:.1}" y2="{{Y}}" stroke="#8c8c8c" stroke-width="1.5"/>"##,
            lx + 16.0
        ),
        "coastline",
    );
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coastline_data_parses_into_plausible_polylines() {
        let c = coastlines();
        assert_eq!(c.len(), 128);
        let points: usize = c.iter().map(Vec::len).sum();
        assert!(points > 5000, "{points}");
        for &(lon, lat) in c.iter().flatten() {
            assert!((-180.0..=180.0).contains(&lon) && (-90.0..=90.0).contains(&lat));
        }
        // No segment jumps across the map (cut at the 180th meridian).
        for l in &c {
            for w in l.windows(2) {
                assert!((w[0].0 - w[1].0).abs() <= 180.0);
            }
        }
    }

    #[test]
    fn the_map_has_a_legend_coastlines_and_axes_in_degrees() {
        let snap = constellation::Constellation::preset("iridium")
            .unwrap()
            .snapshot(0.0);
        let svg = map_svg(
            "iridium at t = 0 s",
            &snap,
            &[("New York".into(), 40.7, -74.0)],
        );
        for want in [
            ">satellite<",
            ">active ISL<",
            ">ground place<",
            ">coastline<",
            ">longitude<",
            ">latitude<",
            ">60°N<",
            ">30°S<",
            ">120°W<",
            ">90°E<",
            ">New York<",
        ] {
            assert!(svg.contains(want), "no {want}");
        }
        assert!(svg.matches("<polyline").count() >= 128);
        assert!(svg.contains(&format!("{} satellites", snap.len())));
    }
}
