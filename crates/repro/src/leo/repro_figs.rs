//! The LEO reproductions built on random pings: delay against distance (figs. 6.4-6.7), the
//! min-hop penalty (figs. 6.11, 6.12) and geographic forwarding (figs. 6.21, 6.22).

use super::plots;
use super::{percentile, Data, Section};
use crate::plot::{Chart, Series, XAxis};
use crate::Result;
use constellation::experiments::{binned, Bin, Ping};
use constellation::Constellation;
use serde_json::{json, Value};
use std::path::Path;

/// Median over 1000-km bins (with ≥ 30 pings) of the 1st-99th percentile range of `f`.
fn spread_ms(pings: &[Ping], f: impl Fn(&Ping) -> f64) -> f64 {
    let mut bins: Vec<Vec<f64>> = vec![Vec::new(); 21];
    for p in pings {
        bins[((p.distance_km / 1000.0) as usize).min(20)].push(f(p));
    }
    let mut ranges: Vec<f64> = bins
        .iter_mut()
        .filter(|b| b.len() >= 30)
        .map(|b| percentile(b, 0.99) - percentile(b, 0.01))
        .collect();
    percentile(&mut ranges, 0.5)
}

pub(super) fn pings(data: &mut Data, quick: bool, out: &Path) -> Result<Section> {
    let mut s = Section::new("leo-pings");
    let t = data.teledesic(quick)?.clone();
    let i = data.iridium_xs(quick)?.clone();
    let over = t.pings.iter().filter(|p| p.min_delay_ms > 100.0).count() as f64
        / t.pings.len().max(1) as f64;
    let (sd, sh, si) = (
        spread_ms(&t.pings, |p| p.min_delay_ms),
        spread_ms(&t.pings, |p| p.min_hop_ms),
        spread_ms(&i.pings, |p| p.min_delay_ms),
    );
    let lower = |v: &[Ping], f: &dyn Fn(&Ping) -> f64| {
        v.iter()
            .map(|p| f(p) - p.distance_km / 299_792.458 * 1e3)
            .fold(f64::MAX, f64::min)
    };
    s.row(
        "pings (Teledesic / Iridium), uncovered draws",
        "10,000 each",
        format!(
            "{} / {}, {} / {} uncovered",
            t.pings.len(),
            i.pings.len(),
            t.uncovered,
            i.uncovered
        ),
    );
    s.row(
        "Teledesic min-delay pings above 100 ms",
        "< 1 % (fig. 6.5)",
        format!("{:.2} %", over * 100.0),
    );
    s.row("Teledesic min-delay spread at a given distance (median over 1000-km bins of the 1st-99th percentile range)", "≈ 30 ms (§6.3.1)", format!("{sd:.1} ms"));
    s.row(
        "Teledesic min-hop spread (same measure)",
        "a bit more spread, same lower bound (fig. 6.6)",
        format!("{sh:.1} ms"),
    );
    s.row(
        "Iridium (cross-seam ISLs) min-delay spread",
        "higher variability than Teledesic (fig. 6.7)",
        format!("{si:.1} ms"),
    );
    s.row(
        "smallest excess over great-circle/c: Teledesic min-delay, min-hop",
        "same lower bound",
        format!(
            "{:.2} ms, {:.2} ms",
            lower(&t.pings, &|p| p.min_delay_ms),
            lower(&t.pings, &|p| p.min_hop_ms)
        ),
    );
    s.claim(
        "fewer than 1 % of Teledesic min-delay pings exceed 100 ms",
        over < 0.01,
        format!("{:.2} %", over * 100.0),
    );
    s.claim(
        "the delay at a given distance varies by roughly 30 ms (we accept 20-40 ms)",
        (20.0..=40.0).contains(&sd),
        format!("{sd:.1} ms"),
    );
    s.claim(
        "min-hop routing spreads more than min-delay",
        sh >= sd,
        format!("{sh:.1} vs {sd:.1} ms"),
    );
    s.claim(
        "Iridium varies more than Teledesic",
        si > sd,
        format!("{si:.1} vs {sd:.1} ms"),
    );
    let pts = |v: &[Ping], f: &dyn Fn(&Ping) -> f64| {
        v.iter().map(|p| (p.distance_km, f(p))).collect::<Vec<_>>()
    };
    plots::scatter(
        out,
        "leo-pings",
        "One-way delay of random pings",
        "great-circle distance (km)",
        "one-way delay (ms)",
        &[
            ("Teledesic min-delay", pts(&t.pings, &|p| p.min_delay_ms)),
            ("Teledesic min-hop", pts(&t.pings, &|p| p.min_hop_ms)),
            ("Iridium min-delay", pts(&i.pings, &|p| p.min_delay_ms)),
        ],
        Some(150.0),
        // The seeds: fewer than 1 % of Teledesic's min-delay pings exceed 100 ms (fig. 6.5).
        &[(0, 100.0)],
    )?;
    let mut hist = vec![0.0; 30];
    for p in &t.pings {
        hist[((p.min_delay_ms / 5.0) as usize).min(29)] += 1.0;
    }
    Chart {
        title: "Teledesic min-delay one-way delay (histogram, 5 ms bins)".into(),
        x_label: "one-way delay (ms, bin start)".into(),
        y_label: "pings".into(),
        x_axis: XAxis::Linear,
        series: vec![Series {
            name: "Teledesic min-delay".into(),
            points: hist
                .iter()
                .enumerate()
                .map(|(k, &n)| (k as f64 * 5.0, n, 0.0))
                .collect(),
        }],
        ..Chart::default()
    }
    .write(out, "leo-pings-hist")?;
    for name in ["iridium", "teledesic"] {
        let snap = Constellation::preset(name)?.snapshot(0.0);
        plots::map(
            out,
            &format!("leo-map-{name}"),
            &format!("{name}: satellites and active ISLs at t = 0 (figs. 6.2/6.3)"),
            &snap,
            &[],
        )?;
    }
    s.plots = vec![
        "leo-pings".into(),
        "leo-pings-hist".into(),
        "leo-map-iridium".into(),
        "leo-map-teledesic".into(),
    ];
    s.notes.push("Model: terminals drawn uniformly on the sphere, one ping every 2 s of orbit time, each terminal on its highest satellite above the mask (the thesis used the first eligible one found), routes computed on the instantaneous topology (as the thesis' omniscient router).".into());
    s.json = json!({"teledesic_over_100ms": over, "spread_ms": {"teledesic_min_delay": sd, "teledesic_min_hop": sh, "iridium_min_delay": si}});
    Ok(s)
}

fn bins_json(b: &[Bin]) -> Value {
    json!(b.iter().map(|x| json!({"from_km": x.lo_km, "n": x.n, "mean_ms": x.mean, "sd_ms": x.sd, "max_ms": x.max})).collect::<Vec<_>>())
}

/// Average (± one standard deviation) and maximum per distance bin of each set, with the
/// seeds' levels (series index: 2k is set k's average, 2k + 1 its maximum) and the quantity's
/// physical bounds.
fn bin_chart(
    out: &Path,
    name: &str,
    title: &str,
    y: &str,
    sets: &[(&str, &[Bin])],
    seed_levels: Vec<(usize, f64)>,
    y_bounds: (f64, f64),
) -> Result<()> {
    let mut series = Vec::new();
    for (n, b) in sets {
        series.push(Series {
            name: format!("{n}: average"),
            points: b.iter().map(|x| (x.lo_km / 1000.0, x.mean, x.sd)).collect(),
        });
        series.push(Series {
            name: format!("{n}: maximum"),
            points: b.iter().map(|x| (x.lo_km / 1000.0, x.max, 0.0)).collect(),
        });
    }
    Chart {
        title: title.into(),
        x_label: "terminal separation (1000s of km, bin start)".into(),
        y_label: y.into(),
        x_axis: XAxis::Linear,
        series,
        seed_levels,
        error_bars: Some("± 1 standard deviation of the pings in the bin".into()),
        y_bounds,
        ..Chart::default()
    }
    .write(out, name)
}

pub(super) fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    s / n.max(1) as f64
}

pub(super) fn hop_penalty(data: &mut Data, quick: bool, out: &Path) -> Result<Section> {
    let mut s = Section::new("leo-hop-penalty");
    let t = data.teledesic(quick)?.clone();
    let i = data.iridium_xs(quick)?.clone();
    let pen = |p: &Ping| Some(p.min_hop_ms - p.min_delay_ms);
    let (bt, bi) = (binned(&t.pings, 1000.0, pen), binned(&i.pings, 1000.0, pen));
    let worst_mean = |b: &[Bin]| {
        b.iter()
            .filter(|x| x.n >= 30)
            .map(|x| x.mean)
            .fold(0.0, f64::max)
    };
    let maxv = |b: &[Bin]| b.iter().map(|x| x.max).fold(0.0, f64::max);
    let (mt, mi) = (
        mean(t.pings.iter().map(|p| p.min_hop_ms - p.min_delay_ms)),
        mean(i.pings.iter().map(|p| p.min_hop_ms - p.min_delay_ms)),
    );
    s.row(
        "Teledesic: mean penalty; worst bin mean; maximum",
        "generally below 10 ms on average; maximum quite high (fig. 6.11)",
        format!("{mt:.2} ms; {:.2} ms; {:.1} ms", worst_mean(&bt), maxv(&bt)),
    );
    s.row(
        "Iridium (cross-seam ISLs): same",
        "not as large as Teledesic (fig. 6.12)",
        format!("{mi:.2} ms; {:.2} ms; {:.1} ms", worst_mean(&bi), maxv(&bi)),
    );
    s.claim("the average penalty of min-hop routing is below 10 ms at every distance (bins with ≥ 30 pings)", worst_mean(&bt) < 10.0 && worst_mean(&bi) < 10.0, format!("worst bins {:.2} / {:.2} ms", worst_mean(&bt), worst_mean(&bi)));
    s.claim(
        "the maximum penalty is far above the average (≥ 3x)",
        maxv(&bt) >= 3.0 * mt && maxv(&bi) >= 3.0 * mi,
        format!(
            "{:.1} vs {mt:.2} ms; {:.1} vs {mi:.2} ms",
            maxv(&bt),
            maxv(&bi)
        ),
    );
    s.claim(
        "Iridium's penalties are smaller than Teledesic's (fewer candidate paths)",
        mi < mt,
        format!("{mi:.2} vs {mt:.2} ms"),
    );
    bin_chart(
        out,
        "leo-hop-penalty",
        "Min-hop minus min-delay one-way delay",
        "delay difference (ms)",
        &[("Teledesic", &bt), ("Iridium", &bi)],
        // The seeds: "generally below 10 ms on average" (fig. 6.11).
        vec![(0, 10.0)],
        // Min-delay is the least delay: the penalty is never negative.
        (0.0, f64::INFINITY),
    )?;
    s.plots = vec!["leo-hop-penalty".into()];
    s.notes.push("Same pings as leo-pings; binned by great-circle distance (1000 km bins; error bars one standard deviation). Min-hop ties go to the lowest-numbered satellite settled first, not to the lower delay.".into());
    s.json = json!({"teledesic": bins_json(&bt), "iridium": bins_json(&bi)});
    Ok(s)
}

pub(super) fn geographic(data: &mut Data, quick: bool, out: &Path) -> Result<Section> {
    let mut s = Section::new("leo-geographic");
    let t = data.teledesic(quick)?.clone();
    let failed = t.pings.iter().filter(|p| p.geographic_failed).count();
    let vs_hop = |p: &Ping| p.geographic_ms.map(|g| g - p.min_hop_ms);
    let vs_delay = |p: &Ping| p.geographic_ms.map(|g| g - p.min_delay_ms);
    let (bh, bd) = (
        binned(&t.pings, 1000.0, vs_hop),
        binned(&t.pings, 1000.0, vs_delay),
    );
    let far: Vec<&Ping> = t
        .pings
        .iter()
        .filter(|p| p.distance_km >= 5000.0 && p.geographic_ms.is_some())
        .collect();
    let (mh, md) = (
        mean(far.iter().filter_map(|p| vs_hop(p))),
        mean(far.iter().filter_map(|p| vs_delay(p))),
    );
    let maxd = bd.iter().map(|x| x.max).fold(0.0, f64::max);
    let fr = failed as f64 / t.pings.len().max(1) as f64;
    s.row(
        "mean penalty vs min-hop (pairs ≥ 5000 km apart)",
        "no more than about 3 ms (fig. 6.21)",
        format!("{mh:.2} ms"),
    );
    s.row(
        "mean penalty vs min-delay (pairs ≥ 5000 km apart)",
        "roughly 5-10 ms (fig. 6.22)",
        format!("{md:.2} ms"),
    );
    s.row(
        "largest penalty vs min-delay",
        "up to ≈ 55 ms, near the poles",
        format!("{maxd:.1} ms"),
    );
    s.row(
        "packets dropped at dead ends",
        "robustness not adequate; dead ends at the seam (§6.5.4)",
        format!("{failed} of {} ({:.2} %)", t.pings.len(), fr * 100.0),
    );
    s.claim(
        "geographic forwarding is comparable to min-hop on average (≤ 3 ms; we accept ≤ 5 ms)",
        mh <= 5.0,
        format!("{mh:.2} ms"),
    );
    s.claim(
        "geographic forwarding is a few ms worse than min-delay on average (we accept 2-12 ms)",
        (2.0..=12.0).contains(&md),
        format!("{md:.2} ms"),
    );
    s.claim(
        "some packets pay far more (maximum ≥ 20 ms)",
        maxd >= 20.0,
        format!("{maxd:.1} ms"),
    );
    bin_chart(
        out,
        "leo-geographic",
        "Geographic forwarding minus shortest-path delay (Teledesic)",
        "delay difference (ms)",
        &[("vs min-hop", &bh), ("vs min-delay", &bd)],
        // The seeds: about 3 ms above min-hop, 5-10 ms above min-delay on average, up to
        // about 55 ms (figs. 6.21, 6.22).
        vec![(0, 3.0), (2, 5.0), (2, 10.0), (3, 55.0)],
        // Min-delay is the least delay; min-hop is not, so that difference may be negative.
        (f64::NEG_INFINITY, f64::INFINITY),
    )?;
    s.plots = vec!["leo-geographic".into()];
    s.notes.push("Hybrid protocol as §6.5.2 describes: greedy great-circle forwarding, local min-hop routing within 2 hops of the destination's satellite (3 above 45° latitude), POLAR satellites heading along their plane to the nearer POLAR BORDER satellite; a packet with no closer neighbour is dropped (not counted in the averages).".into());
    s.json =
        json!({"vs_min_hop": bins_json(&bh), "vs_min_delay": bins_json(&bd), "dead_ends": failed});
    Ok(s)
}
