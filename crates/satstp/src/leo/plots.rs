//! Plots of the LEO tools that the line/bar charts of `crate::plot` do not cover: scatter
//! plots (delay against distance) and map snapshots of satellites and active ISLs on a
//! rectangular projection (like the thesis' figs. 6.2 and 6.3). SVG, rendered to PNG.

use crate::plot::render_png;
use anyhow::{Context, Result};
use constellation::Snapshot;
use std::fmt::Write as _;
use std::path::Path;

const W: f64 = 820.0;
const H: f64 = 480.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];

fn write(dir: &Path, name: &str, svg: &str) -> Result<()> {
    let p = dir.join(format!("{name}.svg"));
    std::fs::write(&p, svg).with_context(|| format!("cannot write {}", p.display()))?;
    let png = dir.join(format!("{name}.png"));
    render_png(svg, &png).with_context(|| format!("cannot render {}", png.display()))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A scatter plot of point series, axes from 0 to the data's maxima (or the given limits).
pub fn scatter(
    dir: &Path,
    name: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    y_max: Option<f64>,
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
    for k in 0..=5 {
        let (xv, yv) = (xmax * k as f64 / 5.0, ymax * k as f64 / 5.0);
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            l + pw,
            l - 6.0,
            ys(yv) + 4.0,
            yv,
            y = ys(yv)
        );
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.0}</text>"##,
            xs(xv),
            t + ph + 18.0,
            xv
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
    let _ = write!(
        s,
        r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        l + pw / 2.0,
        H - 14.0,
        esc(x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text></svg>"#,
        t + ph / 2.0,
        esc(y_label)
    );
    write(dir, name, &s)
}

/// Satellites (dots) and active ISLs (lines; those crossing the map's edge or a pole are
/// omitted) on a
/// longitude/latitude map, with the given ground places marked.
pub fn map(
    dir: &Path,
    name: &str,
    title: &str,
    snap: &Snapshot,
    places: &[(String, f64, f64)],
) -> Result<()> {
    let (l, t) = (50.0, 40.0);
    let (pw, ph) = (W - 2.0 * l, H - t - 40.0);
    let xs = |lon: f64| l + (lon + 180.0) / 360.0 * pw;
    let ys = |lat: f64| t + (90.0 - lat) / 180.0 * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif" font-size="11"><rect width="{W}" height="{H}" fill="white"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="24" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    for lat in [-60.0, -30.0, 0.0, 30.0, 60.0] {
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{lat}</text>"##,
            l + pw,
            l - 4.0,
            ys(lat) + 4.0,
            y = ys(lat)
        );
    }
    for lon in [-135.0, -90.0, -45.0, 0.0, 45.0, 90.0, 135.0] {
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{t}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{lon}</text>"##,
            t + ph,
            t + ph + 14.0,
            x = xs(lon)
        );
    }
    for &(a, b) in &snap.edges {
        let (la1, lo1, la2, lo2) = (
            snap.lat_deg[a as usize],
            snap.lon_deg[a as usize],
            snap.lat_deg[b as usize],
            snap.lon_deg[b as usize],
        );
        // Links that cross the map's edge or pass over a pole would streak across the map.
        if (lo1 - lo2).abs() > 90.0 {
            continue;
        }
        let _ = write!(
            s,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1f77b4" stroke-width="0.8"/>"##,
            xs(lo1),
            ys(la1),
            xs(lo2),
            ys(la2)
        );
    }
    for i in 0..snap.len() {
        let _ = write!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="#d62728"/>"##,
            xs(snap.lon_deg[i]),
            ys(snap.lat_deg[i])
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
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">longitude (deg); latitude (deg) vertical; {} satellites, {} active ISLs</text></svg>"#,
        W / 2.0,
        H - 8.0,
        snap.len(),
        snap.edges.len()
    );
    write(dir, name, &s)
}
