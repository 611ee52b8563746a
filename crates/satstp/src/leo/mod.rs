//! `satstp leo …`: LEO constellations (thesis ch. 6) from the command line: the delay trace of
//! a terminal-to-terminal path (`trace`), the presets and cities (`list`), TLEs equivalent to a
//! preset (`tle`), a map of satellites and ISLs (`map`) and the forwarding state (`fstate`).
//! The logic is in the `constellation` crate, which the emulators' `--leo` (`bench::leo::path`)
//! and the LEO reproductions use too.

pub mod bench;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use constellation::geo::{parse_places, place, CITIES};
use constellation::tle::{round_trip_differences, shell_to_tles, TleSet};
use constellation::trace::compute;
use constellation::walker::PRESETS;
use constellation::{AttachPolicy, Constellation, HandoffMode, Routing, Shell, TraceSpec};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum LeoCommand {
    /// Write the one-way delay of a terminal-to-terminal path over time, in the delay-trace
    /// format `emulate net|udp --delay-trace` and scenario links read.
    Trace(Box<TraceArgs>),
    /// List the constellation presets and the built-in cities.
    List,
    /// Write TLEs equivalent to a preset (three-line sets, epoch J2000).
    Tle(TleArgs),
    /// Draw the satellites and active ISLs at an instant (SVG and PNG).
    Map(MapArgs),
    /// Write the forwarding state per time step: every satellite's and ground station's next
    /// hop towards every ground station (joint attachment, min-delay), as CSV of the changes.
    Fstate(Box<FstateArgs>),
}

#[derive(Debug, Args)]
pub struct FstateArgs {
    #[command(flatten)]
    constellation: ConstellationArgs,
    /// Ground stations: a file of 'NAME, LAT, LON' lines (default: --stations-count of the
    /// built-in cities, then seeded random points within 50° of the equator, as `bench leo`).
    #[arg(long)]
    stations: Option<PathBuf>,
    /// Number of ground stations when no --stations file is given.
    #[arg(long, default_value_t = 100)]
    stations_count: usize,
    /// Length covered (e.g. 600s).
    #[arg(long, default_value = "600s", value_parser = parse_seconds)]
    duration: f64,
    /// Time step (e.g. 1s).
    #[arg(long, default_value = "1s", value_parser = parse_seconds)]
    step: f64,
    /// Orbit time of the first step.
    #[arg(long, default_value = "0s", value_parser = parse_seconds)]
    start: f64,
    /// Output CSV (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the node ids: 'id,kind,name,lat_deg,lon_deg' (ground stations' positions;
    /// satellites' at the first step).
    #[arg(long)]
    nodes: Option<PathBuf>,
}

/// The constellation flags shared by the subcommands.
#[derive(Debug, Args)]
pub struct ConstellationArgs {
    /// A preset: iridium, teledesic, starlink-550, kuiper-630, oneweb; optionally with changes,
    /// e.g. starlink-550,phasing=17,altitude=560 (keys altitude, phasing, mask, inclination).
    #[arg(long, default_value = "iridium", conflicts_with = "tle")]
    constellation: String,
    /// Real satellites from a TLE file (SGP4) instead of a preset.
    #[arg(long)]
    tle: Option<PathBuf>,
    /// Elevation mask in degrees (default: the preset's; 25 for TLE input).
    #[arg(long, allow_negative_numbers = true)]
    mask: Option<f64>,
    /// Cross-seam ISLs of a star preset: on or off (default: the preset's).
    #[arg(long)]
    cross_seam: Option<OnOff>,
    /// Latitude above which inter-plane ISLs are off, in degrees (default 70).
    #[arg(long, allow_negative_numbers = true)]
    isl_latitude: Option<f64>,
    /// Altitude of a preset's shell in km (default: the preset's).
    #[arg(long, conflicts_with = "tle")]
    altitude: Option<f64>,
    /// Walker phasing factor F of a preset: each plane's satellites lead the previous plane's
    /// by 360°·F/T (default: the preset's; 1 for the modern shells).
    #[arg(long, conflicts_with = "tle")]
    phasing: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl ConstellationArgs {
    pub fn build(&self) -> Result<Constellation> {
        // The flags' ranges, checked here so that errors name the flag, not the model's field.
        if let Some(m) = self.mask {
            if !(0.0..90.0).contains(&m) {
                bail!("--mask {m}: the elevation mask must be at least 0 and below 90 degrees");
            }
        }
        if let Some(l) = self.isl_latitude {
            if !(0.0..=90.0).contains(&l) {
                bail!("--isl-latitude {l}: must be from 0 to 90 degrees");
            }
        }
        let mut c = match &self.tle {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read TLE file {}", p.display()))?;
                Constellation::Tle(TleSet::parse(&text, &p.display().to_string())?)
            }
            None => Constellation::preset(&self.constellation)?,
        };
        match &mut c {
            Constellation::Walker(s) => {
                if let Some(m) = self.mask {
                    s.elevation_mask_deg = m;
                }
                if let Some(x) = self.cross_seam {
                    s.cross_seam = x == OnOff::On;
                }
                if let Some(l) = self.isl_latitude {
                    s.isl_latitude_threshold_deg = l;
                }
                if let Some(h) = self.altitude {
                    s.altitude_km = h;
                }
                if let Some(f) = self.phasing {
                    s.set_walker_phasing(f as f64).context("--phasing")?;
                }
                s.validate()?;
            }
            Constellation::Tle(t) => {
                if let Some(m) = self.mask {
                    t.elevation_mask_deg = m;
                }
                if let Some(l) = self.isl_latitude {
                    t.isl_latitude_threshold_deg = l;
                }
            }
        }
        Ok(c)
    }
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    constellation: ConstellationArgs,
    /// Source terminal: a built-in city (see `satstp leo list`) or LAT,LON.
    #[arg(long)]
    from: String,
    /// Destination terminal.
    #[arg(long)]
    to: String,
    /// A file of 'NAME, LAT, LON' lines whose names --from and --to may use (looked up before
    /// the built-in cities).
    #[arg(long)]
    places: Option<PathBuf>,
    /// min-delay, min-hop or geographic.
    #[arg(long, default_value = "min-delay")]
    routing: String,
    /// Length of the trace (e.g. 1h, 600s).
    #[arg(long, default_value = "1h", value_parser = parse_seconds, allow_negative_numbers = true)]
    duration: f64,
    /// Sampling step (e.g. 10ms).
    #[arg(long, default_value = "10ms", value_parser = parse_seconds, allow_negative_numbers = true)]
    step: f64,
    /// Orbit time at which the trace starts (e.g. 57600s).
    #[arg(long, default_value = "0s", value_parser = parse_seconds, allow_negative_numbers = true)]
    start: f64,
    /// Which satellites the ends use: highest (each its highest satellite, the thesis'), first
    /// (the first above the mask) or joint (both chosen with the route). Default: highest for
    /// iridium and teledesic, joint for the modern shells and TLE input.
    #[arg(long)]
    attach: Option<String>,
    /// When terminals check their satellite: async (every 5-15 s, the thesis'), async:MIN-MAX
    /// (seconds), sync:INTERVAL (e.g. sync:15s) or continuous. Default: async for iridium and
    /// teledesic, continuous for the others.
    #[arg(long)]
    handoff: Option<String>,
    /// Joint attachment's hysteresis: keep the current pair of satellites at a check unless the
    /// best pair is shorter by more than this (e.g. 2ms).
    #[arg(long, default_value = "0s", value_parser = parse_seconds)]
    switch_margin: f64,
    /// Seed of the handoff timers' dither.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write a line only when the delay moved by at least this much (e.g. 10us).
    #[arg(long, default_value = "10us", value_parser = parse_seconds, allow_negative_numbers = true)]
    min_change: f64,
    /// Output file (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TleArgs {
    /// The preset to convert (with optional changes, e.g. starlink-550,phasing=17).
    #[arg(long, default_value = "iridium")]
    constellation: String,
    /// Output file (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct MapArgs {
    #[command(flatten)]
    constellation: ConstellationArgs,
    /// Orbit time of the snapshot (e.g. 0s).
    #[arg(long, default_value = "0s", value_parser = parse_seconds, allow_negative_numbers = true)]
    time: f64,
    /// Places to mark: a file of 'NAME, LAT, LON' lines.
    #[arg(long)]
    places: Option<PathBuf>,
    /// Output name without extension (writes NAME.svg and NAME.png).
    #[arg(long, default_value = "leo-map")]
    out: PathBuf,
}

/// A duration in seconds, in the units of every duration (`linkmodel::units`: ns … h, d).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    netsim::units::parse_duration_ns(s)
        .map(|ns| ns as f64 / 1e9)
        .map_err(|e| e.to_string())
}

/// Parses a --handoff value.
pub fn parse_handoff(s: &str) -> Result<HandoffMode> {
    let bad = || {
        anyhow::anyhow!(
            "--handoff '{s}': expected async, async:MIN-MAX, sync:INTERVAL or continuous"
        )
    };
    let (kind, arg) = s.split_once(':').map_or((s, None), |(a, b)| (a, Some(b)));
    match (kind, arg) {
        ("async", None) => Ok(HandoffMode::THESIS),
        ("async", Some(r)) => {
            let (a, b) = r.split_once('-').ok_or_else(bad)?;
            let (min_s, max_s): (f64, f64) = (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            );
            if !(min_s > 0.0 && max_s >= min_s) {
                bail!("--handoff '{s}': need 0 < MIN <= MAX");
            }
            Ok(HandoffMode::Async { min_s, max_s })
        }
        ("sync", Some(i)) => {
            let interval_s =
                parse_seconds(i).map_err(|e| anyhow::anyhow!("--handoff '{s}': {e}"))?;
            if interval_s <= 0.0 {
                bail!("--handoff '{s}': the interval must be positive");
            }
            Ok(HandoffMode::Sync { interval_s })
        }
        ("continuous", None) => Ok(HandoffMode::Continuous),
        _ => Err(bad()),
    }
}

pub fn run(cmd: &LeoCommand) -> Result<()> {
    match cmd {
        LeoCommand::Trace(a) => trace(a),
        LeoCommand::List => {
            outln!("constellations:");
            for p in PRESETS {
                let s = Shell::preset(p)?;
                outln!(
                    "  {:<13} {:>4} satellites, {} planes x {}, {} km, {}°, mask {}°, period {:.1} min",
                    p,
                    s.count(),
                    s.planes,
                    s.sats_per_plane,
                    s.altitude_km,
                    s.inclination_deg,
                    s.elevation_mask_deg,
                    s.period_s() / 60.0
                );
            }
            outln!("cities:");
            for (n, la, lo) in CITIES {
                outln!("  {n:<14} {la:>9.4} {lo:>10.4}");
            }
            Ok(())
        }
        LeoCommand::Tle(a) => {
            if let Some(p) = &a.out {
                crate::outpath::file("--out", p)?;
            }
            let shell = Shell::from_spec(&a.constellation)?;
            write_out(a.out.as_ref(), &shell_to_tles(&shell))?;
            // What the file cannot carry, so that routing over it read back differs.
            let diffs = round_trip_differences(&shell);
            if diffs.is_empty() {
                eprintln!(
                    "read back with --tle, these TLEs route as the preset does (same +Grid, mask \
                     and attachment); positions differ by SGP4's perturbations (docs/leo.md)"
                );
            } else {
                eprintln!("read back with --tle, routing differs from the preset's:");
                for d in diffs {
                    eprintln!("  - {d}");
                }
            }
            Ok(())
        }
        LeoCommand::Fstate(a) => fstate_cmd(a),
        LeoCommand::Map(a) => {
            crate::outpath::prefix("--out", &a.out, &["svg", "png"])?;
            let c = a.constellation.build()?;
            let snap = c.snapshot(a.time);
            let places = match &a.places {
                Some(p) => {
                    let text = std::fs::read_to_string(p)
                        .with_context(|| format!("cannot read {}", p.display()))?;
                    parse_places(&text, &p.display().to_string())?
                        .into_iter()
                        .map(|p| (p.name, p.lat_deg, p.lon_deg))
                        .collect()
                }
                None => Vec::new(),
            };
            let dir = a
                .out
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(PathBuf::from("."), PathBuf::from);
            let name = a
                .out
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("leo-map");
            repro::leo::plots::map(
                &dir,
                name,
                &format!("{} at t = {} s", c.name(), a.time),
                &snap,
                &places,
            )?;
            eprintln!("wrote {}.svg and {}.png", a.out.display(), a.out.display());
            Ok(())
        }
    }
}

fn write_out(out: Option<&PathBuf>, text: &str) -> Result<()> {
    match out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            out!("{text}");
            Ok(())
        }
    }
}

fn trace(a: &TraceArgs) -> Result<()> {
    let c = a.constellation.build()?;
    let routing: Routing = a.routing.parse()?;
    let user = match &a.places {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read places file {}", p.display()))?;
            parse_places(&text, &p.display().to_string())?
        }
        None => Vec::new(),
    };
    let (from, to) = (lookup(&user, &a.from)?, lookup(&user, &a.to)?);
    let mut spec = TraceSpec::new(from, to, routing, a.duration, a.step);
    spec.start_s = a.start;
    spec.handoff = a.handoff.as_deref().map(parse_handoff).transpose()?;
    spec.policy = a
        .attach
        .as_deref()
        .map(|x| x.parse::<AttachPolicy>().context("--attach"))
        .transpose()?;
    spec.switch_margin_s = a.switch_margin;
    spec.seed = a.seed;
    if let Some(p) = &a.out {
        crate::outpath::file("--out", p)?;
    }
    let ticker = crate::progress::Ticker::start("leo trace");
    ticker.phase(&format!("{} -> {}", spec.from.name, spec.to.name));
    let tr = compute(&c, &spec)?;
    drop(ticker);
    let text = tr.to_text(a.min_change);
    write_out(a.out.as_ref(), &text)?;
    if let (Some(lo), Some(hi)) = (tr.delays().reduce(f64::min), tr.delays().reduce(f64::max)) {
        let handoffs = tr
            .events
            .iter()
            .filter(|e| e.1.starts_with("handoff"))
            .count();
        eprintln!(
            "{} -> {} over {}: one-way {:.2}..{:.2} ms, {} handoffs, {} outages{}",
            spec.from.name,
            spec.to.name,
            c.name(),
            lo * 1e3,
            hi * 1e3,
            handoffs,
            tr.outages().len(),
            tr.largest_step().map_or(String::new(), |(t, x, y)| format!(
                ", largest step {:+.2} ms at {t:.1} s",
                (y - x) * 1e3
            ))
        );
    } else {
        bail!(
            "no path at all between {} and {} over {}",
            spec.from.name,
            spec.to.name,
            c.name()
        );
    }
    Ok(())
}

fn fstate_cmd(a: &FstateArgs) -> Result<()> {
    use std::io::Write as _;
    let c = a.constellation.build()?;
    if !(a.step > 0.0 && a.duration > 0.0) {
        bail!("--step and --duration must be positive");
    }
    let steps = (a.duration / a.step).floor() as u64 + 1;
    if steps > 10_000_000 {
        bail!(
            "--duration {} s in --step {} s is more than 10 million steps; use a larger step",
            a.duration,
            a.step
        );
    }
    let stations = match &a.stations {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read ground stations file {}", p.display()))?;
            parse_places(&text, &p.display().to_string())?
        }
        None => {
            if a.stations_count < 1 {
                bail!("--stations-count must be at least 1");
            }
            constellation::geo::stations(a.stations_count)
        }
    };
    if stations.is_empty() {
        bail!("no ground stations");
    }
    let positions: Vec<_> = stations.iter().map(|p| p.position()).collect();
    if let Some(np) = &a.nodes {
        let t = constellation::fstate::nodes_csv(&c, &stations, a.start);
        std::fs::write(np, t).with_context(|| format!("cannot write {}", np.display()))?;
    }
    let started = std::time::Instant::now();
    let mut out: Box<dyn std::io::Write> = match &a.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let r = constellation::fstate::run(&c, &positions, a.start, steps, a.step, &mut out)
        .context("cannot write the forwarding state")?;
    out.flush().context("cannot write the forwarding state")?;
    eprintln!(
        "{}: {} satellites, {} ground stations, {} steps of {} s: {} lines of changes in {:.2} s; mean one-way {:.2} ms over {} station pairs with a path",
        c.name(),
        c.count(),
        stations.len(),
        r.steps,
        a.step,
        r.lines,
        started.elapsed().as_secs_f64(),
        r.sum_delay_s / r.paths.max(1) as f64 * 1e3,
        r.paths
    );
    for (p, &u) in stations.iter().zip(&r.uncovered_steps) {
        if u > 0 {
            eprintln!(
                "  {} sees no satellite above the mask at {u} of {} steps",
                p.name, r.steps
            );
        }
    }
    Ok(())
}

/// A place named in `user` (case ignored), else a built-in city or LAT,LON.
fn lookup(user: &[constellation::Place], name: &str) -> Result<constellation::Place> {
    match user
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name.trim()))
    {
        Some(p) => Ok(p.clone()),
        None => Ok(place(name)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_handoff_flags() {
        assert_eq!(parse_seconds("1h").unwrap(), 3600.0);
        assert_eq!(parse_seconds("10ms").unwrap(), 0.01);
        assert!(parse_seconds("10").is_err());
        assert!(parse_seconds("xh").is_err());
        assert_eq!(parse_handoff("async").unwrap(), HandoffMode::THESIS);
        assert_eq!(
            parse_handoff("sync:10s").unwrap(),
            HandoffMode::Sync { interval_s: 10.0 }
        );
        assert_eq!(
            parse_handoff("async:2-4").unwrap(),
            HandoffMode::Async {
                min_s: 2.0,
                max_s: 4.0
            }
        );
        assert!(parse_handoff("sometimes").is_err());
        assert!(parse_handoff("async:4-2").is_err());
    }

    #[test]
    fn user_places_come_before_cities() {
        let user = parse_places("Home, 10, 20\nLondon, 1, 2\n", "f").unwrap();
        assert_eq!(lookup(&user, "home").unwrap().lat_deg, 10.0);
        assert_eq!(lookup(&user, "London").unwrap().lat_deg, 1.0);
        assert_eq!(lookup(&user, "Tokyo").unwrap().name, "Tokyo");
        assert!(lookup(&user, "Atlantis").is_err());
    }
}
