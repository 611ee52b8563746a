//! `satstp bench flood`: a legitimate download through the gateway while its hop port is flooded
//! with forged and unwanted datagrams, on loopback (see `bench::flood`): the flags, and the
//! figures printed.

use anyhow::Result;
use bench::flood::{Figures, FloodOptions, Kind};
use clap::Args;
use netsim::units::{parse_bytes, parse_duration_ns};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct FloodBenchArgs {
    /// Datagrams per second the flood aims for, all kinds together.
    #[arg(long, default_value_t = 120_000)]
    rate: u64,
    /// Bytes of each download (units such as 20MB accepted).
    #[arg(long, default_value = "20MB", value_parser = parse_bytes)]
    size: u64,
    /// Connections the authenticated attacker terminal may hold at the gateway.
    #[arg(long, default_value_t = 64)]
    attacker_limit: u32,
    /// Which kinds of flood to send: random, replay, handshake (initiations from unknown keys),
    /// open (stream opens from an authenticated terminal beyond its limit); comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "random,replay,handshake,open"
    )]
    kinds: Vec<KindArg>,
    /// Flood an existing gateway's hop port instead (a loopback address only).
    #[arg(long)]
    target: Option<SocketAddr>,
    /// With --target: the network namespace (`ip netns` name) to send from.
    #[arg(long, requires = "target")]
    netns: Option<String>,
    /// With --target: how long to flood (e.g. 10s).
    #[arg(long, default_value = "10s", value_parser = parse_duration_ns)]
    duration: u64,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// A kind of unwanted traffic (the flag's values; `bench::flood::Kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    Random,
    Replay,
    Handshake,
    Open,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Random => Kind::Random,
            KindArg::Replay => Kind::Replay,
            KindArg::Handshake => Kind::Handshake,
            KindArg::Open => Kind::Open,
        }
    }
}

pub fn run(args: &FloodBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    let opts = FloodOptions {
        rate: args.rate,
        size: args.size,
        attacker_limit: args.attacker_limit,
        kinds: args.kinds.iter().map(|&k| k.into()).collect(),
        netns: args.netns.clone(),
        duration: Duration::from_nanos(args.duration),
    };
    opts.check()?;
    if let Some(target) = args.target {
        let r = bench::flood::flood_target(&opts, target)?;
        outln!(
            "satstp bench flood: {} datagrams to {target} in {:.1} s = {:.0}/s \
             (random {}, unknown-key initiations {}, send errors {}); read the gateway's drops in its \
             /metrics (satstp_auth_failures_total by reason)",
            r.total,
            r.seconds,
            r.total as f64 / r.seconds,
            r.random,
            r.initiations,
            r.errors
        );
        return Ok(());
    }
    let figures = bench::flood::run(&opts)?;
    print_figures(&figures);
    crate::outpath::write_json(&args.json, &figures)?;
    Ok(())
}

fn print_figures(f: &Figures) {
    outln!("satstp bench flood: a {} byte download over the emulated geo link (50 Mb/s down) while the gateway's hop port is flooded from loopback", f.size_bytes);
    outln!(
        "  flood: {:.0} datagrams/s achieved (target {}): random {}, replayed {}, unknown-key initiations {}; send errors {}; attacker stream opens {}",
        f.flood_rate_achieved,
        f.flood_rate_target,
        f.sent_random,
        f.sent_replayed,
        f.sent_initiations,
        f.send_errors,
        f.attacker_opens
    );
    outln!(
        "  goodput: {:.2} Mb/s without the flood, {:.2} Mb/s under it = {:.1} % kept",
        f.baseline_mbps,
        f.flooded_mbps,
        f.goodput_kept * 100.0
    );
    match f.late_handshake_ms {
        Some(ms) => outln!(
            "  a legitimate terminal started during the flood: tunnel up after {ms} ms (bound {} ms)",
            f.late_handshake_bound_ms
        ),
        None => outln!(
            "  a legitimate terminal started during the flood: tunnel NOT up within {} ms",
            f.late_handshake_bound_ms
        ),
    }
    outln!(
        "  process RSS (gateway, terminal, emulator, flooder): {} KiB before the flood, {} KiB after",
        f.rss_before_kib, f.rss_after_kib
    );
    outln!("  gateway drops during the flood, by cause:");
    if let Some(m) = f.drops.as_object() {
        for (k, v) in m {
            outln!("    {k:<32} {v}");
        }
    }
}
