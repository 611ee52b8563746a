//! Charts for reports: line charts (numeric x) and grouped bar charts (categorical x), with
//! labelled axes, a legend and 95 % error bars, written as SVG and rendered to PNG.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// One series of points: (x, y, ± error).
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// How x values are placed.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    Linear,
    Log,
    /// Categories named by these labels; a point's x is the category index.
    Categories(Vec<String>),
}

/// A chart.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut v = Vec::new();
    while t <= hi + step * 1e-9 && v.len() < 20 {
        v.push(t);
        t += step;
    }
    v
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let all: Vec<(f64, f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|p| p.1.is_finite())
            .collect();
        let ymax = all
            .iter()
            .map(|p| p.1 + p.2.max(0.0))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.08;
        let (xlo, xhi, ncat) = match &self.x_axis {
            XAxis::Categories(c) => (0.0, c.len().max(1) as f64, c.len().max(1)),
            _ => {
                let lo = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
                let hi = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
                if lo.is_finite() && hi > lo {
                    (lo, hi, 0)
                } else {
                    (0.0, 1.0, 0)
                }
            }
        };
        let xmap = |x: f64| -> f64 {
            match &self.x_axis {
                XAxis::Log if xlo > 0.0 => LEFT + (x.ln() - xlo.ln()) / (xhi.ln() - xlo.ln()) * pw,
                XAxis::Categories(_) => LEFT + (x + 0.5) / ncat as f64 * pw,
                _ => LEFT + (x - xlo) / (xhi - xlo) * pw,
            }
        };
        let ymap = |y: f64| TOP + ph - (y / ymax) * ph;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif" font-size="12">"#
        );
        let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = write!(
            s,
            r#"<text x="{}" y="28" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            esc(&self.title)
        );
        for t in nice_ticks(0.0, ymax) {
            let y = ymap(t);
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y + 4.0,
                fmt_num(t)
            );
        }
        match &self.x_axis {
            XAxis::Categories(c) => {
                for (i, name) in c.iter().enumerate() {
                    let _ = write!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                        xmap(i as f64),
                        TOP + ph + 18.0,
                        esc(name)
                    );
                }
            }
            XAxis::Log => {
                // Ticks at 1, 2 and 5 times each power of ten, labelled from integers so no
                // rounding noise shows.
                let mut exp = xlo.max(1e-300).log10().floor() as i32;
                while 10f64.powi(exp) <= xhi * 1.0001 && exp < 300 {
                    for m in [1u32, 2, 5] {
                        let v = f64::from(m) * 10f64.powi(exp);
                        if v >= xlo * 0.9999 && v <= xhi * 1.0001 {
                            let x = xmap(v);
                            let label = if (-2..=4).contains(&exp) {
                                fmt_num(v)
                            } else {
                                format!("{m}e{exp}")
                            };
                            let _ = write!(
                                s,
                                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
                                TOP + ph,
                                TOP + ph + 18.0
                            );
                        }
                    }
                    exp += 1;
                }
            }
            XAxis::Linear => {
                for t in nice_ticks(xlo, xhi) {
                    let x = xmap(t);
                    let _ = write!(
                        s,
                        r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                        TOP + ph,
                        TOP + ph + 18.0,
                        fmt_num(t)
                    );
                }
            }
        }
        let _ = write!(
            s,
            r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 22.0,
            esc(&self.x_label)
        );
        let _ = write!(
            s,
            r#"<text transform="translate(20 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        let nser = self.series.len().max(1) as f64;
        for (si, ser) in self.series.iter().enumerate() {
            let col = COLORS[si % COLORS.len()];
            if let XAxis::Categories(_) = self.x_axis {
                let slot = pw / ncat as f64 * 0.8;
                let bw = slot / nser;
                for &(x, y, e) in &ser.points {
                    if !y.is_finite() {
                        continue;
                    }
                    let x0 = xmap(x) - slot / 2.0 + bw * si as f64;
                    let _ = write!(
                        s,
                        r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{col}"/>"#,
                        ymap(y),
                        bw * 0.9,
                        (TOP + ph - ymap(y)).max(0.0)
                    );
                    errbar(&mut s, x0 + bw * 0.45, ymap(y + e), ymap((y - e).max(0.0)));
                }
            } else {
                let pts: Vec<String> = ser
                    .points
                    .iter()
                    .filter(|p| p.1.is_finite())
                    .map(|&(x, y, _)| format!("{:.1},{:.1}", xmap(x), ymap(y)))
                    .collect();
                let _ = write!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="2"/>"#,
                    pts.join(" ")
                );
                for &(x, y, e) in ser.points.iter().filter(|p| p.1.is_finite()) {
                    let _ = write!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{col}"/>"#,
                        xmap(x),
                        ymap(y)
                    );
                    errbar(&mut s, xmap(x), ymap(y + e), ymap((y - e).max(0.0)));
                }
            }
            let ly = TOP + 14.0 + si as f64 * 20.0;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="14" height="10" fill="{col}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                W - RIGHT + 14.0,
                ly - 9.0,
                W - RIGHT + 34.0,
                ly,
                esc(&ser.name)
            );
        }
        s.push_str("</svg>");
        s
    }

    /// Writes `DIR/NAME.svg` and `DIR/NAME.png`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<()> {
        let svg = self.svg();
        let svg_path = dir.join(format!("{name}.svg"));
        std::fs::write(&svg_path, &svg)
            .with_context(|| format!("cannot write {}", svg_path.display()))?;
        let png_path = dir.join(format!("{name}.png"));
        render_png(&svg, &png_path).with_context(|| format!("cannot render {}", png_path.display()))
    }
}

fn errbar(s: &mut String, x: f64, top: f64, bottom: f64) {
    if (bottom - top).abs() < 0.5 {
        return;
    }
    let _ = write!(
        s,
        r#"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="black"/><line x1="{:.1}" y1="{top:.1}" x2="{:.1}" y2="{top:.1}" stroke="black"/><line x1="{:.1}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="black"/>"#,
        x - 4.0,
        x + 4.0,
        x - 4.0,
        x + 4.0
    );
}

pub(crate) fn render_png(svg: &str, path: &Path) -> Result<()> {
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(svg, &opt)?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).context("empty image")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.save_png(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("satstp-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = Chart {
            title: "t".into(),
            x_label: "RTT (ms)".into(),
            y_label: "kb/s".into(),
            x_axis: XAxis::Linear,
            series: vec![Series {
                name: "a".into(),
                points: vec![(20.0, 1000.0, 50.0), (600.0, 400.0, 30.0)],
            }],
        };
        c.write(&dir, "x").unwrap();
        let png = std::fs::read(dir.join("x.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(std::fs::read_to_string(dir.join("x.svg"))
            .unwrap()
            .contains("RTT (ms)"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
