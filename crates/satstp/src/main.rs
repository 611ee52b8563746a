//! `satstp`: the command-line entry point to the satstp tools.

#[macro_use]
mod out;
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
mod keygen;
mod leo;
mod outpath;
mod progress;
mod reproduce;
mod shard;
mod signals;
mod sim;
mod summary_table;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};
/// The charts, kept at `crate::plot` for the bench code that draws its own.
use repro::plot;
use std::path::PathBuf;
use std::process::ExitCode;

/// What every subcommand shares, shown at the end of `satstp --help`.
const CONVENTIONS: &str = "\
Conventions of every subcommand:
  Units     rates 5Mbps (bits/s) or 5MBps, 5 MB/s (bytes/s); sizes 20MB, 4MiB; durations
            250ms, 1.5s, 2min, 1h, 1d; ambiguous forms such as 5mbps are refused (docs/units.md)
  --json    --json alone (or --json -) prints the results as one JSON document on standard
            output, the text going to standard error; --json FILE writes the document to FILE
  Outputs   output files and directories are checked before any work; an existing file is
            replaced, a directory never; a missing --out directory is created
  Progress  runs longer than a second or two show progress on standard error when it is a
            terminal; --quiet turns it off
  Exit      0 on success, 1 on an error (one line on standard error), 2 on a bad command
            line, 141 when standard output is closed early (| head)";

/// Transport that works over satellite links: the STP protocol engine and its evaluation, the
/// split-connection gateway, link emulators, LEO constellations and the seeds' reproductions.
#[derive(Debug, Parser)]
#[command(name = "satstp", version = env!("SATSTP_VERSION"), long_about = None,
          after_help = CONVENTIONS)]
struct Cli {
    /// No progress lines on standard error (they are shown only when it is a terminal).
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The split-connection gateway end to end on loopback, in real time, with a report
    /// (--engine: the STP engine alone, in virtual time).
    ///
    /// An origin, a gateway, an emulated satellite link and a terminal in one unprivileged
    /// process; a client fetches a large object and a web page through the terminal and the
    /// demo reports goodput against the link, the page load time and what each direction
    /// carried. --engine runs one STP transfer over the seeds' 1.5 Mb/s GEO path in virtual
    /// time instead.
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
    /// Print a shell completion script, generated from these definitions
    /// (e.g. `satstp completions bash > /etc/bash_completion.d/satstp`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), generated from these definitions (`satstp man > satstp.1;
    /// man ./satstp.1`); with --out DIR, write satstp.1 and one page per subcommand there.
    Man {
        /// Directory for satstp.1 and satstp-SUBCOMMAND.1 (created when missing).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "satstp", &mut buf);
    out!("{}", String::from_utf8_lossy(&buf));
    Ok(())
}

fn man(out: &Option<PathBuf>) -> Result<()> {
    let cmd = Cli::command();
    match out {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut buf)?;
            out!("{}", String::from_utf8_lossy(&buf));
        }
        Some(dir) => {
            outpath::dir("--out", dir)?;
            clap_mangen::generate_to(cmd, dir)?;
            eprintln!("wrote the manual pages to {}", dir.display());
        }
    }
    Ok(())
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
        Command::Completions { shell } => completions(shell),
        Command::Man { out } => man(&out),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    progress::set_quiet(cli.quiet);
    match run(cli) {
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

/// Every `satstp …` command line in the documentation parses with the definitions above: the
/// subcommand exists, its flags exist and their values are accepted (units, profiles, ranges
/// that the parser checks). Lines come from shell blocks (`satstp`, `sudo satstp`, `cargo run
/// --release --`, with `\` continuations) and from inline code that starts with `satstp `;
/// synopses with `[optional]`, `A|B` or `…` parts are not command lines and are left out.
#[cfg(test)]
mod docs_commands {
    use super::Cli;
    use clap::Parser;
    use std::path::{Path, PathBuf};

    fn doc_files() -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("README.md"), root.join("deploy/README.md")];
        for e in std::fs::read_dir(root.join("docs")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
        files
    }

    /// Splits a shell line into words (quotes honoured), up to the first shell operator or
    /// comment.
    fn words(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut quote = None;
        let mut in_word = false;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        out.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                }
                (None, c) => {
                    cur.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            out.push(cur);
        }
        let stop = out
            .iter()
            .position(|w| {
                matches!(w.as_str(), "|" | "&&" | "||" | ";" | "&" | "#")
                    || w.starts_with('>')
                    || w.starts_with("2>")
            })
            .unwrap_or(out.len());
        out.truncate(stop);
        out
    }

    /// The arguments after `satstp` of a command line, if it is one: it starts with `satstp`
    /// (or a path to it, or `sudo satstp`), or with `cargo run --release --`.
    fn satstp_args(line: &str) -> Option<Vec<String>> {
        let w = words(line);
        let w: &[String] = match w.first().map(String::as_str) {
            Some("sudo") => &w[1..],
            _ => &w,
        };
        let start = if w
            .first()
            .is_some_and(|x| x == "satstp" || x.ends_with("/satstp"))
        {
            1
        } else if w.len() >= 4 && w[..4] == ["cargo", "run", "--release", "--"] {
            4
        } else {
            return None;
        };
        let args = w[start..].to_vec();
        (!args.is_empty()).then_some(args)
    }

    /// Parses `args`; a line from prose (`inline`) names a subcommand or a flag rather than
    /// being a complete command: `--help` is added, so that the subcommand and its flags are
    /// checked but not the arguments a complete line needs, and a flag named last without its
    /// value is checked by clap's own "a value is required for '--flag'".
    fn check(args: &[String], inline: bool) -> Result<(), String> {
        use clap::error::ErrorKind::*;
        let mut argv: Vec<String> = std::iter::once("satstp".to_string())
            .chain(args.iter().cloned())
            .collect();
        if inline {
            argv.push("--help".into());
        }
        match Cli::try_parse_from(&argv) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
            {
                Ok(())
            }
            Err(e) if inline && e.to_string().contains("a value is required for") => {
                let mut shorter = args.to_vec();
                shorter.pop();
                check(&shorter, true)
            }
            Err(e) => Err(e.to_string().lines().next().unwrap_or("").to_string()),
        }
    }

    fn command_lines(text: &str) -> Vec<(usize, String, bool)> {
        let mut out = Vec::new();
        let mut in_block = false;
        let mut pending: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") {
                in_block = !in_block;
                continue;
            }
            if in_block {
                let (no, mut acc) = pending.take().unwrap_or((n + 1, String::new()));
                acc.push_str(trimmed.trim_end_matches('\\'));
                acc.push(' ');
                if trimmed.ends_with('\\') {
                    pending = Some((no, acc));
                } else {
                    out.push((no, acc, false));
                }
                continue;
            }
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 && span.starts_with("satstp ") {
                    out.push((n + 1, span.to_string(), true));
                }
            }
        }
        out
    }

    fn is_synopsis(line: &str) -> bool {
        line.contains('[')
            || line.contains('…')
            || line.contains("...")
            || line.contains('<')
            || words(line).iter().any(|w| w.contains('|') && w.len() > 1)
    }

    #[test]
    fn every_command_line_in_the_docs_parses() {
        let mut checked = 0;
        let mut failures = Vec::new();
        for f in doc_files() {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line, inline) in command_lines(&text) {
                if is_synopsis(&line) {
                    continue;
                }
                let Some(args) = satstp_args(&line) else {
                    continue;
                };
                checked += 1;
                if let Err(e) = check(&args, inline) {
                    failures.push(format!("{}:{n}: {}\n  {e}", f.display(), line.trim()));
                }
            }
        }
        assert!(checked >= 30, "only {checked} command lines found");
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn the_checker_sees_a_wrong_flag() {
        let lines = command_lines(
            "run `satstp leo trace --nope 3`, `satstp leo trac`, `satstp sim --pcapp` or\n\
             ```sh\nsatstp demo \\\n  --profile mars\nsatstp sim --max-runs many x.toml\n```\n",
        );
        assert_eq!(lines.len(), 5);
        for (_, l, inline) in lines {
            let args = satstp_args(&l).unwrap();
            assert!(check(&args, inline).is_err(), "{l}");
        }
        // Mentions of a subcommand or of a flag without its value are fine.
        for ok in [
            "satstp terminal",
            "satstp sim --pcap",
            "satstp leo trace --mask 10",
        ] {
            let args = satstp_args(ok).unwrap();
            assert_eq!(check(&args, true), Ok(()), "{ok}");
        }
    }
}
