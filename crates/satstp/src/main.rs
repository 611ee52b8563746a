//! `satstp`: the command-line entry point to the satstp tools.

mod bench;
mod bench_flood;
mod bench_gateway;
mod bench_link;
mod bench_soak;
mod bench_sweep;
mod capture_args;
mod check;
mod daemon;
mod demo;
mod demo_engine;
mod emulate;
mod failover;
mod flood;
mod keygen;
mod leo;
mod plot;
mod repro_report;
mod reproduce;
mod shard;
mod signals;
mod sim;
mod summary_table;
mod web_reproduce;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Transport that works over satellite links: the STP protocol engine, its evaluation, and
/// (as they land) the split-connection gateway and link emulators.
#[derive(Debug, Parser)]
#[command(name = "satstp", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run STP over an emulated GEO satellite path (in virtual time) and report what it achieved
    /// and what it cost on the return channel.
    Demo(demo::DemoArgs),
    /// The split-connection gateway's terminal side (user side): SOCKS5 / HTTP CONNECT listeners
    /// relayed over STP on the encrypted satellite hop.
    Terminal(daemon::DaemonArgs),
    /// The split-connection gateway's ground side: serves authorized terminals and connects to
    /// destinations over TCP.
    Gateway(daemon::DaemonArgs),
    /// Run a scenario file (TOML) in the packet simulator and print mean ± 95% CI per flow.
    Sim(sim::SimArgs),
    /// Reproduce the seeds' experiments: JSON, CSV, plots and a report with seeds' figures beside ours.
    Reproduce(reproduce::ReproduceArgs),
    /// Merge the partial results of `sim --shard` / `reproduce --shard` runs into the outputs
    /// of one unsharded run.
    Merge(shard::MergeArgs),
    /// Benchmarks that print figures.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Real-time link emulators on the shared link model.
    #[command(subcommand)]
    Emulate(emulate::EmulateCommand),
    /// LEO constellations (thesis ch. 6): path delay traces, presets, TLEs, maps.
    #[command(subcommand)]
    Leo(leo::LeoCommand),
    /// Make a static key pair for the encrypted satellite hop (terminal or gateway).
    Keygen(keygen::KeygenArgs),
    /// Check a terminal, gateway or scenario file as the daemon (or `sim`) would at start, and
    /// print the effective settings with their units.
    Check(check::CheckArgs),
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Sim(args) => sim::run_sim(&args),
        Command::Terminal(args) => daemon::terminal(&args),
        Command::Gateway(args) => daemon::gateway(&args),
        Command::Reproduce(args) => reproduce::run(&args),
        Command::Merge(args) => shard::merge(&args),
        Command::Bench(cmd) => bench::run(&cmd),
        Command::Emulate(cmd) => emulate::run(&cmd),
        Command::Keygen(args) => keygen::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Leo(cmd) => leo::run(&cmd),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, joined by ": ", each cause said once: a cause whose text its
/// parent's message already holds (a library error that both shows and exposes its source, as
/// a file error shows the I/O error and the TOML parser's excerpt) is not repeated.
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut parent = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out.push_str(&text);
        } else if !parent.contains(text.trim()) {
            out.push_str(": ");
            out.push_str(&text);
        }
        parent = text;
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use anyhow::Context;

    /// A library error that shows its source and also exposes it.
    #[derive(Debug)]
    struct FileError {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for FileError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for FileError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_its_parent_already_shows_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(FileError {
            path: "/x.toml",
            source: io,
        });
        assert_eq!(error_chain(&e), "/x.toml: no such file");
        let e: anyhow::Result<()> = Err(e).context("cannot start the terminal");
        assert_eq!(
            error_chain(&e.unwrap_err()),
            "cannot start the terminal: /x.toml: no such file"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&plain), "outer: inner");
    }
}
