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

use crate::error::{Context, Result};
use crate::process::{free_port, spawn, wait_line, Proc};
use loadgen::client::{Client, Route};
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ChildStdout;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections the client opens at once.
const OPEN_CONCURRENCY: usize = 64;
/// How long the whole soak may take to bring its connections up.
const OPEN_TIMEOUT: Duration = Duration::from_secs(600);

/// What `satstp bench soak` was asked for.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Concurrent end-to-end connections to hold.
    pub connections: u32,
    /// Bytes the origin answers on each connection.
    pub bytes: u64,
}

/// What the soak measured (the JSON report).
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    pub connections: u32,
    pub bytes_each: u64,
    pub open_seconds: f64,
    pub open_file_limit: u64,
    pub terminal_rss_kib: (u64, u64),
    pub gateway_rss_kib: (u64, u64),
    pub terminal_kib_per_connection: f64,
    pub gateway_kib_per_connection: f64,
    /// What the client said when it held them all (printed, not in the JSON).
    #[serde(skip)]
    pub client_said: String,
}

/// The open-file limit of this process raised to the hard limit: (limit now, soft before, hard).
pub fn raise_open_files() -> Result<(u64, u64, u64)> {
    let (soft, hard) = pep::fdlimit::raise_nofile_limit()
        .map_err(|e| err!("cannot raise the open-file limit: {e}"))?;
    let limit = pep::fdlimit::nofile_limit()?.0;
    Ok((limit, soft, hard))
}

/// An error when `connections` do not fit the open-file `limit` (or are none).
pub fn check(connections: u32, limit: u64) -> Result<()> {
    // The terminal and the gateway each need a descriptor per connection, plus a few.
    if u64::from(connections) + 100 > limit {
        bail!(
            "--connections {connections}: each daemon needs one descriptor per connection and the open-file \
             limit is {limit} (raise the hard limit, ulimit -Hn)"
        );
    }
    Ok(())
}

/// Runs the soak: the daemons, the origin and the clients started from `exe` (the satstp
/// binary) with their files in `dir`, `connections` held with `bytes` answered on each;
/// `warn` is told of a setting the soak changes.
pub fn soak(
    args: &SoakOptions,
    exe: &Path,
    dir: &Path,
    limit: u64,
    warn: &mut dyn FnMut(String),
) -> Result<Figures> {
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
        warn(format!(
            "  --connections {}: above the default max_connections_per_terminal (16384); \
             the soak raises max_connections and max_connections_per_terminal to {max}",
            args.connections
        ));
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
    let origin_addr = SocketAddr::from(([127, 0, 0, 1], origin));
    let socks_addr = SocketAddr::from(([127, 0, 0, 1], socks));

    let mut o = spawn(
        exe,
        &["bench", "soak-origin", "--listen", &origin_addr.to_string()],
        "origin",
        None,
    )?;
    let mut o_out = o.take_stdout()?;
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
        let out = c.take_stdout()?;
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
        client_said: held,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The soak's origin: the kit's, held connections and all, until the process is killed;
/// `listening` is called once it listens on `listen`.
pub fn origin(listen: SocketAddr, listening: impl FnOnce()) -> Result<()> {
    let _ = pep::fdlimit::raise_nofile_limit();
    runtime()?.block_on(async move {
        let _origin = loadgen::origin::Origin::bind(listen)
            .await
            .with_context(|| format!("the origin cannot listen on {listen}"))?;
        listening();
        std::future::pending::<Result<()>>().await
    })
}

/// Connections the soak's client holds (and the runtime they live on): dropped to close them.
pub struct Held {
    pub conns: Vec<tokio::net::TcpStream>,
    _rt: tokio::runtime::Runtime,
}

/// The soak's client: opens `n` connections to `origin` through the SOCKS5 listener `socks`,
/// moves `bytes` on each (checked) and returns them held.
pub fn clients(socks: SocketAddr, origin: SocketAddr, n: u32, bytes: u64) -> Result<Held> {
    let _ = pep::fdlimit::raise_nofile_limit();
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
                    Ok::<_, loadgen::Error>(conn.into_inner())
                });
                started += 1;
            }
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Err(_) => bail!(
                    "{} of {n} connections open after {OPEN_TIMEOUT:?}",
                    conns.len()
                ),
                Ok(None) => bail!("connection tasks ended early"),
                Ok(Some(r)) => match r.context("connection task")? {
                    Ok(s) => conns.push(s),
                    Err(e) => {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        bail!(
                            "connection {} of {n} failed: {}",
                            conns.len() + 1,
                            crate::chain(&e)
                        );
                    }
                },
            }
        }
        Ok::<_, crate::Error>(conns)
    });
    Ok(Held {
        conns: held?,
        _rt: rt,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn connections_must_fit_the_open_file_limit() {
        assert!(super::check(900, 1024).is_ok());
        let e = super::check(1000, 1024).unwrap_err().to_string();
        assert!(
            e.contains("--connections 1000") && e.contains("ulimit -Hn"),
            "{e}"
        );
    }
}
