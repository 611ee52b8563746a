//! `satstp bench soak`: many concurrent end-to-end connections through the terminal and gateway
//! daemons, each in its own process, and the memory each daemon spends per connection.
//!
//! Four processes on loopback: the gateway and terminal daemons (`satstp gateway` and
//! `satstp terminal` with generated keys and configuration files), an origin (`satstp bench
//! soak-origin`, the load-generation kit's origin) and a client (`satstp bench soak-clients`).
//! Every process raises its open-file limit to the hard limit and logs it. The client opens
//! `--connections` SOCKS5 connections through the terminal, moves `--bytes` bytes on each (an
//! HTTP request, an answer checked byte for byte) and keeps them all open; the bench then reads each daemon's resident memory (`VmRSS` of `/proc/PID/status`) and
//! divides its growth since a single warm-up connection by the number held.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use loadgen::client::{Client, Route};
use netsim::units::parse_bytes;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections the client opens at once.
const OPEN_CONCURRENCY: usize = 64;
/// How long the whole soak may take to bring its connections up.
const OPEN_TIMEOUT: Duration = Duration::from_secs(600);

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

/// A child killed and reaped when dropped.
pub(crate) struct Proc(Child, &'static str);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// The child's process id.
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }

    pub(crate) fn rss_kib(&self) -> Result<u64> {
        let path = format!("/proc/{}/status", self.0.id());
        let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no VmRSS in {path} (the {} exited?)", self.1))
    }

    pub(crate) fn check_running(&mut self) -> Result<()> {
        if let Some(st) = self.0.try_wait()? {
            bail!("the {} exited ({st})", self.1);
        }
        Ok(())
    }
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(loadgen::ports::free_port()?)
}

pub(crate) fn spawn(
    exe: &Path,
    args: &[&str],
    name: &'static str,
    log: Option<&Path>,
) -> Result<Proc> {
    let mut cmd = Command::new(exe);
    cmd.args(args).stdin(Stdio::piped());
    match log {
        Some(l) => {
            let f = std::fs::File::create(l)?;
            cmd.stdout(f.try_clone()?).stderr(f);
        }
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        }
    }
    Ok(Proc(
        cmd.spawn()
            .with_context(|| format!("cannot start the {name}"))?,
        name,
    ))
}

/// Waits for a line starting with `prefix` on a child's output; the line.
fn wait_line(out: &mut BufReader<ChildStdout>, prefix: &str, what: &str) -> Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            bail!("{what} ended before saying '{prefix}'");
        }
        if line.starts_with(prefix) {
            return Ok(line.trim().to_owned());
        }
        if let Some(e) = line.strip_prefix("error:") {
            bail!("{what}: {}", e.trim());
        }
    }
}

#[derive(serde::Serialize)]
struct Figures {
    connections: u32,
    bytes_each: u64,
    open_seconds: f64,
    open_file_limit: u64,
    terminal_rss_kib: (u64, u64),
    gateway_rss_kib: (u64, u64),
    terminal_kib_per_connection: f64,
    gateway_kib_per_connection: f64,
}

pub fn run(args: &SoakBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    if args.connections == 0 {
        bail!("--connections must be positive");
    }
    let (soft, hard) = pep::fdlimit::raise_nofile_limit()
        .map_err(|e| anyhow!("cannot raise the open-file limit: {e}"))?;
    let limit = pep::fdlimit::nofile_limit()?.0;
    outln!("satstp bench soak: open-file limit {limit} per process (was {soft}, hard {hard})");
    // The terminal and the gateway each need a descriptor per connection, plus a few.
    if u64::from(args.connections) + 100 > limit {
        bail!(
            "--connections {}: each daemon needs one descriptor per connection and the open-file \
             limit is {limit} (raise the hard limit, ulimit -Hn)",
            args.connections
        );
    }
    let exe = std::env::current_exe().context("cannot find the satstp binary itself")?;
    let dir = std::env::temp_dir().join(format!("satstp-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = soak(args, &exe, &dir, limit);
    end_daemon_dir(&dir, result.is_err());
    let f = result?;
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

fn soak(args: &SoakBenchArgs, exe: &Path, dir: &Path, limit: u64) -> Result<Figures> {
    let (tk, tp) = pep::keys::generate_keypair()?;
    let (gk, gp) = pep::keys::generate_keypair()?;
    let (tkey, _) = pep::keys::write_keypair(&dir.join("terminal"), &tk, &tp)?;
    let (gkey, _) = pep::keys::write_keypair(&dir.join("gateway"), &gk, &gp)?;
    let (hop, socks, origin) = (free_port()?, free_port()?, free_port()?);
    // The daemons run with the default limits (no allocation, the default memory cap and
    // connection counts: admission counts what connections buffer, not a reservation). Only a
    // soak larger than the default per-terminal count (16,384) raises the counts, and says so.
    let max = args.connections + 1000;
    let limits = if max > 16_384 {
        eprintln!(
            "  --connections {}: above the default max_connections_per_terminal (16384); \
             the soak raises max_connections and max_connections_per_terminal to {max}",
            args.connections
        );
        format!("max_connections = {max}\nmax_connections_per_terminal = {max}\n")
    } else {
        String::new()
    };
    let gateway = format!(
        "[gateway]\nlisten = \"127.0.0.1:{hop}\"\nprivate_key_file = {gkey:?}\n\
         allowed_terminals = [\"{tp}\"]\nidle_timeout_s = 3600\n\
         [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n[gateway.limits]\n{limits}",
        gkey = gkey.display().to_string(),
        tp = tp.to_hex()
    );
    let terminal = format!(
        "[terminal]\nsocks_listen = \"127.0.0.1:{socks}\"\ngateway = \"127.0.0.1:{hop}\"\n\
         gateway_public_key = \"{gp}\"\nprivate_key_file = {tkey:?}\nidle_timeout_s = 3600\n\
         [terminal.limits]\n{limits}",
        tkey = tkey.display().to_string(),
        gp = gp.to_hex()
    );
    let (gconf, tconf) = (dir.join("gateway.toml"), dir.join("terminal.toml"));
    std::fs::write(&gconf, gateway)?;
    std::fs::write(&tconf, terminal)?;
    let origin_addr: SocketAddr = format!("127.0.0.1:{origin}").parse()?;
    let socks_addr: SocketAddr = format!("127.0.0.1:{socks}").parse()?;

    let mut o = spawn(
        exe,
        &["bench", "soak-origin", "--listen", &origin_addr.to_string()],
        "origin",
        None,
    )?;
    let mut o_out = BufReader::new(o.0.stdout.take().context("origin output")?);
    wait_line(&mut o_out, "listening", "the origin")?;
    let g = spawn(
        exe,
        &[
            "gateway",
            "--config",
            &gconf.to_string_lossy(),
            "--log-level",
            "warn",
        ],
        "gateway",
        Some(&dir.join("gateway.log")),
    )?;
    let t = spawn(
        exe,
        &[
            "terminal",
            "--config",
            &tconf.to_string_lossy(),
            "--log-level",
            "warn",
        ],
        "terminal",
        Some(&dir.join("terminal.log")),
    )?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(socks_addr).is_err() {
        if Instant::now() > deadline {
            bail!("the terminal does not listen on {socks_addr} after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut procs = [o, g, t];
    let clients = |n: u32| -> Result<(Proc, BufReader<ChildStdout>)> {
        let mut c = spawn(
            exe,
            &[
                "bench",
                "soak-clients",
                "--socks",
                &socks_addr.to_string(),
                "--origin",
                &origin_addr.to_string(),
                "--connections",
                &n.to_string(),
                "--bytes",
                &args.bytes.to_string(),
            ],
            "client",
            None,
        )?;
        let out = BufReader::new(c.0.stdout.take().context("client output")?);
        Ok((c, out))
    };
    // One connection first: the tunnel is up, and every daemon has its steady baseline.
    let (warm, mut warm_out) = clients(1)?;
    wait_line(&mut warm_out, "held", "the warm-up client")?;
    std::thread::sleep(Duration::from_millis(500));
    let before = (procs[2].rss_kib()?, procs[1].rss_kib()?);
    let t0 = Instant::now();
    let (c, mut c_out) = clients(args.connections)?;
    let held = wait_line(&mut c_out, "held", "the client")?;
    let open_seconds = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(1));
    for p in procs.iter_mut() {
        p.check_running()?;
    }
    let after = (procs[2].rss_kib()?, procs[1].rss_kib()?);
    outln!("  client: {held}");
    drop((c, warm));
    let n = f64::from(args.connections);
    Ok(Figures {
        connections: args.connections,
        bytes_each: args.bytes,
        open_seconds,
        open_file_limit: limit,
        terminal_rss_kib: (before.0, after.0),
        gateway_rss_kib: (before.1, after.1),
        terminal_kib_per_connection: after.0.saturating_sub(before.0) as f64 / n,
        gateway_kib_per_connection: after.1.saturating_sub(before.1) as f64 / n,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The soak's origin: the kit's, held connections and all, until the process is killed.
pub fn origin(args: &SoakOriginArgs) -> Result<()> {
    let _ = pep::fdlimit::raise_nofile_limit();
    runtime()?.block_on(async move {
        let _origin = loadgen::origin::Origin::bind(args.listen)
            .await
            .with_context(|| format!("the origin cannot listen on {}", args.listen))?;
        outln!("listening on {}", args.listen);
        crate::out::flush();
        std::future::pending::<Result<()>>().await
    })
}

/// The soak's client: opens the connections through SOCKS5, moves the bytes on each, says
/// `held N` and keeps them until its standard input closes.
pub fn clients(args: &SoakClientsArgs) -> Result<()> {
    let _ = pep::fdlimit::raise_nofile_limit();
    let (socks, origin, n, bytes) = (args.socks, args.origin, args.connections, args.bytes);
    let rt = runtime()?;
    let held = rt.block_on(async move {
        let failures = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut conns = Vec::with_capacity(n as usize);
        let mut set = tokio::task::JoinSet::new();
        let mut started = 0u32;
        let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
        while conns.len() < n as usize {
            while started < n && set.len() < OPEN_CONCURRENCY {
                set.spawn(async move {
                    let client = Client::new(origin, Route::Socks5(socks));
                    let mut conn = client.connect().await?;
                    conn.get(0, bytes).await?;
                    anyhow::Ok(conn.into_inner())
                });
                started += 1;
            }
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Err(_) => bail!(
                    "{} of {n} connections open after {OPEN_TIMEOUT:?}",
                    conns.len()
                ),
                Ok(None) => bail!("connection tasks ended early"),
                Ok(Some(r)) => match r? {
                    Ok(s) => conns.push(s),
                    Err(e) => {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        bail!("connection {} of {n} failed: {e:#}", conns.len() + 1);
                    }
                },
            }
        }
        anyhow::Ok(conns)
    });
    let conns = match held {
        Ok(c) => c,
        Err(e) => {
            outln!("error: {e:#}");
            return Err(e);
        }
    };
    outln!("held {} connections", conns.len());
    crate::out::flush();
    // Hold until the parent closes our standard input.
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    drop(conns);
    drop(rt);
    Ok(())
}

/// After a run of the daemons as processes in `dir`: on failure, the ends of their logs (they say
/// why); then the directory is removed unless `SATSTP_KEEP` is set.
pub(crate) fn end_daemon_dir(dir: &std::path::Path, failed: bool) {
    if failed {
        // `terminal.log`, or `terminal0.log`… with several terminals: the last lines of each.
        let mut logs: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        for path in logs {
            let side = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            for l in tail.iter().rev() {
                eprintln!("  {}: {l}", side.as_deref().unwrap_or("daemon"));
            }
        }
    }
    if std::env::var_os("SATSTP_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
