//! `satstp bench soak`: many concurrent end-to-end connections through the terminal and gateway
//! daemons, each in its own process, and the memory each daemon spends per connection (see
//! `bench::soak`): the flags, the internal origin and client processes, the figures printed.

use anyhow::{bail, Context, Result};
use clap::Args;
use netsim::units::parse_bytes;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SoakBenchArgs {
    /// Concurrent end-to-end connections to hold.
    #[arg(long, default_value_t = 15_000)]
    connections: u32,
    /// Bytes the origin answers on each connection (units such as 1KB accepted).
    #[arg(long, default_value = "1000", value_parser = parse_bytes)]
    bytes: u64,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

/// `satstp bench soak-origin`: the soak's origin (internal).
#[derive(Debug, Args)]
pub struct SoakOriginArgs {
    #[arg(long)]
    listen: SocketAddr,
}

/// `satstp bench soak-clients`: the soak's client process (internal).
#[derive(Debug, Args)]
pub struct SoakClientsArgs {
    #[arg(long)]
    socks: SocketAddr,
    #[arg(long)]
    origin: SocketAddr,
    #[arg(long)]
    connections: u32,
    #[arg(long)]
    bytes: u64,
}

pub fn run(args: &SoakBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    if args.connections == 0 {
        bail!("--connections must be positive");
    }
    let (limit, soft, hard) = bench::soak::raise_open_files()?;
    outln!("satstp bench soak: open-file limit {limit} per process (was {soft}, hard {hard})");
    bench::soak::check(args.connections, limit)?;
    let exe = std::env::current_exe().context("cannot find the satstp binary itself")?;
    let dir = bench::process::daemon_dir("satstp-soak")?;
    let opts = bench::soak::SoakOptions {
        connections: args.connections,
        bytes: args.bytes,
    };
    let result = bench::soak::soak(&opts, &exe, &dir, limit, &mut |w| eprintln!("{w}"));
    for line in bench::process::end_daemon_dir(&dir, result.is_err()) {
        eprintln!("{line}");
    }
    let f = result?;
    outln!("  client: {}", f.client_said);
    outln!(
        "  {} connections held end to end ({} bytes answered on each), opened in {:.1} s",
        f.connections,
        f.bytes_each,
        f.open_seconds
    );
    for (name, (before, after), per) in [
        (
            "terminal",
            f.terminal_rss_kib,
            f.terminal_kib_per_connection,
        ),
        ("gateway", f.gateway_rss_kib, f.gateway_kib_per_connection),
    ] {
        outln!("  {name:<8} RSS {before} KiB with one connection, {after} KiB with all: {per:.1} KiB per connection");
    }
    crate::outpath::write_json(&args.json, &f)?;
    Ok(())
}

/// The soak's origin: the kit's, held connections and all, until the process is killed.
pub fn origin(args: &SoakOriginArgs) -> Result<()> {
    bench::soak::origin(args.listen, || {
        outln!("listening on {}", args.listen);
        crate::out::flush();
    })?;
    Ok(())
}

/// The soak's client: opens the connections through SOCKS5, moves the bytes on each, says
/// `held N` and keeps them until its standard input closes.
pub fn clients(args: &SoakClientsArgs) -> Result<()> {
    let held = match bench::soak::clients(args.socks, args.origin, args.connections, args.bytes) {
        Ok(h) => h,
        Err(e) => {
            let e = anyhow::Error::from(e);
            outln!("error: {e:#}");
            return Err(e);
        }
    };
    outln!("held {} connections", held.conns.len());
    crate::out::flush();
    // Hold until the parent closes our standard input.
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    drop(held);
    Ok(())
}
