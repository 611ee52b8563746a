//! Charts for reports: line charts (numeric x) and grouped bar charts (categorical x), with
//! labelled axes, a legend, error bars that say what they show, and the seeds' figures drawn as
//! their own markers; written as SVG and rendered to PNG.

use crate::{write_file, Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// One series of points: (x, y, ± error).
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// How x values are placed.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum XAxis {
    #[default]
    Linear,
    Log,
    /// Categories named by these labels; a point's x is the category index.
    Categories(Vec<String>),
}

/// A figure the seeds report, drawn beside the series it belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedPoint {
    /// Index of the series in `Chart::series` (its colour; its bar in a bar chart).
    pub series: usize,
    pub x: f64,
    pub y: f64,
}

/// A chart.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
    /// The seeds' figures: hollow diamonds in the series' colour, legend entry "seeds".
    pub seeds: Vec<SeedPoint>,
    /// Levels the seeds give for a whole series (a range's ends, a bound): dashed lines across
    /// the plot in the series' colour, legend entry "seeds".
    pub seed_levels: Vec<(usize, f64)>,
    /// What the error bars show, for the legend (e.g. "95 % CI of the mean over 20 runs");
    /// required as soon as a point has an error.
    pub error_bars: Option<String>,
    /// The values the quantity can physically take (e.g. 0 to 1 for a fraction): error bars are
    /// clipped to them.
    pub y_bounds: (f64, f64),
}

impl Default for Chart {
    fn default() -> Chart {
        Chart {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            x_axis: XAxis::Linear,
            series: Vec::new(),
            seeds: Vec::new(),
            seed_levels: Vec::new(),
            error_bars: None,
            y_bounds: (0.0, f64::INFINITY),
        }
    }
}

/// "95 % CI of the mean over N runs" (or "over A–B runs" when the cases differ), for
/// `Chart::error_bars`.
pub fn ci_label(confidence: f64, least: u32, most: u32, what: &str) -> String {
    let n = if least == most {
        format!("{most}")
    } else {
        format!("{least}–{most}")
    };
    format!("{:.0} % CI of the mean over {n} {what}", confidence * 100.0)
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const BOTTOM: f64 = 70.0;
const TITLE_SIZE: f64 = 15.0;
const TITLE_LINE: f64 = 19.0;
const LEGEND_LINE: f64 = 15.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The frame of a plot area `w` × `h` at (`left`, `top`), with `x_label` centred below it at
/// height `x_label_y` and `y_label` turned along its left side at `y_label_x`.
pub(crate) fn frame(
    s: &mut String,
    (left, top, w, h): (f64, f64, f64, f64),
    (x_label, x_label_y): (&str, f64),
    (y_label, y_label_x): (&str, f64),
) {
    let _ = write!(
        s,
        r#"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="black"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{x_label_y:.1}" text-anchor="middle">{}</text>"#,
        left + w / 2.0,
        esc(x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate({y_label_x} {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + h / 2.0,
        esc(y_label)
    );
}

/// Width of `text` in pixels at `size`, a generous estimate for DejaVu Sans (whose average
/// glyph is about 0.6 em wide), so that text laid out by it never overflows.
pub(crate) fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.62
}

/// `text` broken at spaces into lines at most `width` pixels wide at `size` (a word longer than
/// a line gets a line of its own).
pub(crate) fn wrap(text: &str, width: f64, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let candidate = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if text_width(&candidate, size) <= width || cur.is_empty() {
            cur = candidate;
        } else {
            lines.push(std::mem::replace(&mut cur, word.to_string()));
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `<text>` lines of `lines` centred on `x`, the first baseline at `y`.
pub(crate) fn text_lines(s: &mut String, lines: &[String], x: f64, y: f64, step: f64, attrs: &str) {
    for (i, l) in lines.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" {attrs}>{}</text>"#,
            y + i as f64 * step,
            esc(l)
        );
    }
}

/// A hollow diamond centred on (x, y): the seeds' marker.
pub(crate) fn diamond(s: &mut String, x: f64, y: f64, col: &str) {
    let r = 5.5;
    let _ = write!(
        s,
        r#"<polygon points="{:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1}" fill="white" stroke="{col}" stroke-width="2"/>"#,
        x - r,
        y - r,
        x + r,
        y + r
    );
}

/// Round tick values from `lo` to `hi` (steps of 1, 2 or 5 times a power of ten).
pub(crate) fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    // (+ 0.0 turns a -0 into 0, which would print as "-0".)
    let mut t = (lo / step).ceil() * step + 0.0;
    let mut v = Vec::new();
    while t <= hi + step * 1e-9 && v.len() < 20 {
        v.push(t);
        t += step;
    }
    v
}

/// A tick label: 1.5M, 20k, 350, 2.5, 0.25.
pub(crate) fn fmt_num(v: f64) -> String {
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

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let title = wrap(&self.title, W - 24.0, TITLE_SIZE);
        let top = 22.0 + TITLE_LINE * title.len() as f64;
        let pw = W - LEFT - RIGHT;
        let ph = H - top - BOTTOM;
        let all: Vec<(f64, f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .chain(self.seeds.iter().map(|p| (p.x, p.y, 0.0)))
            .filter(|p| p.1.is_finite())
            .collect();
        let ytop = self
            .seed_levels
            .iter()
            .map(|l| l.1)
            .filter(|y| y.is_finite())
            .fold(0.0f64, f64::max);
        let (blo, bhi) = self.y_bounds;
        // The axis reaches the highest value (ours, the seeds') and the error bars' tops, but
        // no further than 1.6 times the highest value: a wide interval from a few runs must not
        // flatten every line (its bar is cut at the frame).
        let top_value = all.iter().map(|p| p.1).fold(ytop, f64::max).max(1e-9);
        let ymax = all
            .iter()
            .map(|p| (p.1 + err(p.2)).min(bhi.max(p.1)))
            .fold(top_value, f64::max)
            .min(1.6 * top_value)
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
        // The axis starts at 0, or below it for a quantity that can be negative and is.
        let low_value = all.iter().map(|p| p.1).fold(0.0f64, f64::min);
        let ymin = if blo < 0.0 && low_value < 0.0 {
            low_value * 1.08 - 0.04 * ymax
        } else {
            0.0
        };
        let ymap = |y: f64| top + ph - ((y - ymin) / (ymax - ymin)) * ph;
        // An error bar's ends, clipped to the quantity's physical range and to the axis.
        let bar = |y: f64, e: f64| {
            let e = err(e);
            (
                ymap((y + e).min(bhi.max(y)).min(ymax)),
                ymap((y - e).max(blo.min(y)).max(ymin)),
            )
        };
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif" font-size="12">"#
        );
        let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        text_lines(
            &mut s,
            &title,
            W / 2.0,
            26.0,
            TITLE_LINE,
            &format!(r#"font-size="{TITLE_SIZE}" text-anchor="middle""#),
        );
        for t in nice_ticks(ymin, ymax) {
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
                let slot = pw / ncat as f64;
                for (i, name) in c.iter().enumerate() {
                    text_lines(
                        &mut s,
                        &wrap(name, slot - 4.0, 12.0),
                        xmap(i as f64),
                        top + ph + 18.0,
                        14.0,
                        r#"text-anchor="middle""#,
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
                                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
                                top + ph,
                                top + ph + 18.0
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
                        r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                        top + ph,
                        top + ph + 18.0,
                        fmt_num(t)
                    );
                }
            }
        }
        frame(
            &mut s,
            (LEFT, top, pw, ph),
            (&self.x_label, H - 16.0),
            (&self.y_label, 20.0),
        );
        let nser = self.series.len().max(1) as f64;
        let slot = pw / ncat.max(1) as f64 * 0.8;
        let bw = slot / nser;
        // Where a point of series `si` is drawn (a bar's centre in a bar chart).
        let px = |si: usize, x: f64| -> f64 {
            if let XAxis::Categories(_) = self.x_axis {
                xmap(x) - slot / 2.0 + bw * si as f64 + bw * 0.45
            } else {
                xmap(x)
            }
        };
        let legend_x = W - RIGHT + 14.0;
        let legend_w = RIGHT - 40.0;
        let mut ly = top + 14.0;
        let mut has_bars = false;
        for (si, ser) in self.series.iter().enumerate() {
            let col = COLORS[si % COLORS.len()];
            if let XAxis::Categories(_) = self.x_axis {
                for &(x, y, e) in &ser.points {
                    if !y.is_finite() {
                        continue;
                    }
                    let _ = write!(
                        s,
                        r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{col}"/>"#,
                        px(si, x) - bw * 0.45,
                        ymap(y).min(ymap(0.0)),
                        bw * 0.9,
                        (ymap(0.0) - ymap(y)).abs()
                    );
                    let (t, b) = bar(y, e);
                    has_bars |= errbar(&mut s, px(si, x), t, b, "black");
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
                    let (t, b) = bar(y, e);
                    // In the series' colour, so crossing bars stay apart.
                    has_bars |= errbar(&mut s, xmap(x), t, b, col);
                }
            }
            let lines = wrap(&ser.name, legend_w, 12.0);
            let _ = write!(
                s,
                r#"<rect x="{legend_x:.1}" y="{:.1}" width="14" height="10" fill="{col}"/>"#,
                ly - 9.0
            );
            text_lines(&mut s, &lines, legend_x + 20.0, ly, LEGEND_LINE, "");
            ly += LEGEND_LINE * lines.len() as f64 + 5.0;
        }
        for p in self.seeds.iter().filter(|p| p.y.is_finite()) {
            // On a bar the bar's own colour would not show: black there.
            let col = match self.x_axis {
                XAxis::Categories(_) => "black",
                _ => COLORS[p.series % COLORS.len()],
            };
            diamond(&mut s, px(p.series, p.x), ymap(p.y), col);
        }
        for &(si, y) in self.seed_levels.iter().filter(|l| l.1.is_finite()) {
            let _ = write!(
                s,
                r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
                LEFT + pw,
                COLORS[si % COLORS.len()],
                y = ymap(y)
            );
        }
        // The legend's "seeds" entry (its key drawn before it), and the next entry's line.
        let seeds_entry = |s: &mut String, ly: &mut f64| {
            text_lines(s, &["seeds".into()], legend_x + 20.0, *ly, LEGEND_LINE, "");
            *ly += LEGEND_LINE + 5.0;
        };
        if !self.seed_levels.is_empty() {
            let _ = write!(
                s,
                r#"<line x1="{legend_x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black" stroke-width="1.5" stroke-dasharray="5 3"/>"#,
                legend_x + 16.0,
                y = ly - 4.0
            );
            if self.seeds.is_empty() {
                seeds_entry(&mut s, &mut ly);
            }
        }
        if !self.seeds.is_empty() {
            diamond(&mut s, legend_x + 7.0, ly - 4.0, "black");
            seeds_entry(&mut s, &mut ly);
        }
        if has_bars {
            let what = self
                .error_bars
                .as_deref()
                .unwrap_or("error bars: not explained by the caller");
            errbar(&mut s, legend_x + 7.0, ly - 10.0, ly + 2.0, "black");
            let lines = wrap(what, legend_w, 12.0);
            text_lines(&mut s, &lines, legend_x + 20.0, ly, LEGEND_LINE, "");
        }
        s.push_str("</svg>");
        s
    }

    /// Writes `DIR/NAME.svg` and `DIR/NAME.png`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<()> {
        let svg = self.svg();
        let svg_path = dir.join(format!("{name}.svg"));
        write_file(&svg_path, &svg)?;
        render_png(&svg, &dir.join(format!("{name}.png")))
    }
}

/// An error bar's half-width: none where the quantity has no interval (NaN, e.g. fairness of
/// the means).
fn err(e: f64) -> f64 {
    if e.is_finite() {
        e.max(0.0)
    } else {
        0.0
    }
}

/// Draws an error bar from `top` to `bottom` (pixels); false (nothing drawn) when it is too
/// short to see.
fn errbar(s: &mut String, x: f64, top: f64, bottom: f64, col: &str) -> bool {
    if (bottom - top).abs() < 0.5 {
        return false;
    }
    let _ = write!(
        s,
        r#"<g class="err" stroke="{col}"><line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/><line x1="{:.1}" y1="{top:.1}" x2="{:.1}" y2="{top:.1}"/><line x1="{:.1}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}"/></g>"#,
        x - 4.0,
        x + 4.0,
        x - 4.0,
        x + 4.0
    );
    true
}

/// Renders `svg` to the PNG file `path`.
pub fn render_png(svg: &str, path: &Path) -> Result<()> {
    let fail = |reason: String| Error::Render {
        path: path.to_path_buf(),
        reason,
    };
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| fail(e.to_string()))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| fail("empty image".into()))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.save_png(path).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "t".into(),
            x_label: "RTT (ms)".into(),
            y_label: "kb/s".into(),
            series: vec![Series {
                name: "a".into(),
                points: vec![(20.0, 1000.0, 50.0), (600.0, 400.0, 30.0)],
            }],
            error_bars: Some("95 % CI of the mean over 20 runs".into()),
            ..Chart::default()
        }
    }

    /// The (y1, y2) of every error bar's line in the plot area (the legend's sample bar is
    /// right of the plot).
    fn black_lines(svg: &str) -> Vec<(f64, f64)> {
        let attr = |l: &str, k: &str| -> f64 {
            let a = l.find(&format!(" {k}=\"")).unwrap() + k.len() + 3;
            l[a..a + l[a..].find('"').unwrap()].parse().unwrap()
        };
        svg.split(r#"<g class="err""#)
            .skip(1)
            .flat_map(|g| g[..g.find("</g>").unwrap()].split("<line").skip(1))
            .filter(|l| attr(l, "x1") < W - RIGHT + 8.0)
            .map(|l| (attr(l, "y1"), attr(l, "y2")))
            .collect()
    }

    /// The words of every `<text>`, joined by spaces (legend entries wrap over lines).
    fn texts(svg: &str) -> String {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(&t[t.find('>')? + 1..t.find("</text>")?]))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn writes_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("satstp-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        chart().write(&dir, "x").unwrap();
        let png = std::fs::read(dir.join("x.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(std::fs::read_to_string(dir.join("x.svg"))
            .unwrap()
            .contains("RTT (ms)"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_seeds_figures_are_drawn_with_a_legend_entry() {
        let plain = chart().svg();
        assert!(!plain.contains(">seeds<"));
        let mut c = chart();
        c.seeds = vec![SeedPoint {
            series: 0,
            x: 300.0,
            y: 1500.0,
        }];
        let svg = c.svg();
        assert!(svg.contains(">seeds</text>"), "{svg}");
        assert_eq!(svg.matches("<polygon").count(), 2, "marker and legend");
        // A seed above every measured value still fits: the axis grows to it.
        assert!(svg.contains(">1500</text>") || svg.contains(">1600</text>"));
        let mut c = chart();
        c.seed_levels = vec![(0, 900.0)];
        assert!(c.svg().contains(">seeds</text>"));
    }

    #[test]
    fn long_titles_wrap_within_the_image() {
        let mut c = chart();
        c.title = "HTTP transfers at 600 ms RTT, initial window 1: TCP, T/TCP and STP latency \
                   and packets per transfer"
            .into();
        let svg = c.svg();
        let lines: Vec<&str> = svg
            .split(r#"font-size="15" text-anchor="middle">"#)
            .skip(1)
            .map(|t| &t[..t.find("</text>").unwrap()])
            .collect();
        assert!(lines.len() >= 2, "{lines:?}");
        for l in &lines {
            assert!(text_width(l, 15.0) <= W - 24.0, "{l}");
        }
        assert_eq!(
            lines.join(" ").replace("&amp;", "&"),
            c.title.replace("  ", " ")
        );
        // Centred on the image, so neither end is cut.
        assert!(svg.contains(&format!(
            r#"<text x="{:.1}" y="26.0" font-size="15""#,
            W / 2.0
        )));
    }

    #[test]
    fn error_bars_are_labelled_and_stay_within_physical_bounds() {
        let mut c = chart();
        // A mean of 2 ± 5: the bar must not run below zero (the plot's bottom edge).
        c.series[0].points = vec![(1.0, 2.0, 5.0), (2.0, 10.0, 1.0)];
        let svg = c.svg();
        assert!(
            texts(&svg).contains("95 % CI of the mean over 20 runs"),
            "{svg}"
        );
        let bottom = H - BOTTOM;
        let bars = black_lines(&svg);
        assert!(!bars.is_empty());
        for (a, b) in bars {
            assert!(
                a <= bottom + 0.05 && b <= bottom + 0.05,
                "{a} {b} > {bottom}"
            );
        }
        // No interval (NaN) draws no bar; an interval far wider than the values is cut at the
        // frame without flattening the values.
        let mut n = chart();
        n.series[0].points = vec![(1.0, 0.8, f64::NAN), (2.0, 0.5, 40.0)];
        let svg = n.svg();
        let bars = black_lines(&svg);
        assert_eq!(bars.len(), 3, "{bars:?}");
        let top = 22.0 + TITLE_LINE;
        for (a, b) in bars {
            assert!(
                a >= top - 0.05 && b >= top - 0.05,
                "{a} {b} above the frame {top}"
            );
        }
        assert!(svg.contains(">1.2</text>") || svg.contains(">1.0</text>"));
        // A difference that may be negative gets an axis below zero, and stays in the frame.
        let mut d = chart();
        d.y_bounds = (f64::NEG_INFINITY, f64::INFINITY);
        d.series[0].points = vec![(1.0, -0.4, 0.0), (2.0, 5.0, 0.0)];
        let svg = d.svg();
        assert!(!svg.contains(">-0</text>"), "{svg}");
        let circles: Vec<f64> = svg
            .split("<circle")
            .skip(1)
            .map(|c| {
                let a = c.find(" cy=\"").unwrap() + 5;
                c[a..a + c[a..].find('"').unwrap()].parse().unwrap()
            })
            .collect();
        assert!(circles.iter().all(|&y| y <= bottom), "{circles:?}");
        // A fraction of 0.9 ± 0.3 stops at 1.
        let mut f = chart();
        f.y_bounds = (0.0, 1.0);
        f.series[0].points = vec![(1.0, 0.9, 0.3), (2.0, 0.5, 0.0)];
        let svg = f.svg();
        let top_of_bar = black_lines(&svg)
            .iter()
            .map(|l| l.0.min(l.1))
            .fold(f64::MAX, f64::min);
        // y of the value 1.0 on this chart: ymax = 1.0 × 1.08.
        let top = 22.0 + TITLE_LINE;
        let ph = H - top - BOTTOM;
        let y_of_one = top + ph - ph / 1.08;
        assert!(
            (top_of_bar - y_of_one).abs() < 0.2,
            "{top_of_bar} vs {y_of_one}"
        );
    }
}
