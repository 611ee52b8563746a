//! The benchmarks' child processes (the daemons, the soak's origin and clients: this very
//! binary started with other arguments) and what is read of them and of this process: resident
//! memory, CPU time, a daemon's `/metrics`.

use crate::error::{Context, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A child killed and reaped when dropped.
pub struct Proc(Child, &'static str);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// The child's standard output (when it was started without a log file), taken once.
    pub fn take_stdout(&mut self) -> Result<BufReader<ChildStdout>> {
        let out = self
            .0
            .stdout
            .take()
            .with_context(|| format!("{} output", self.1))?;
        Ok(BufReader::new(out))
    }

    /// The child's resident memory, KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> Result<u64> {
        self.status_kib("VmRSS")
    }

    /// A KiB figure of the child's `/proc/PID/status` (`VmRSS`, `VmHWM`, ...).
    pub fn status_kib(&self, field: &str) -> Result<u64> {
        let path = format!("/proc/{}/status", self.0.id());
        let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {field} in {path} (the {} exited?)", self.1))
    }

    /// An error when the child has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(st) = self.0.try_wait()? {
            bail!("the {} exited ({st})", self.1);
        }
        Ok(())
    }

    /// User plus system CPU time of the child so far (all its threads, those ended included),
    /// seconds: the kernel's per-process CPU clock (`clock_getcpuclockid`, nanoseconds), else
    /// `utime` and `stime` of `/proc/PID/stat` in clock ticks (10 ms: a short run's figure can
    /// round to zero).
    pub fn cpu_seconds(&self) -> Result<f64> {
        if let Some(s) = process_cpu_clock(self.id()) {
            return Ok(s);
        }
        let path = format!("/proc/{}/stat", self.id());
        let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // Fields after the command name (which may hold spaces) in parentheses: state is field
        // 3, utime 14 and stime 15.
        let rest = s
            .rsplit_once(')')
            .map(|(_, r)| r)
            .with_context(|| format!("no command name in {path}"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| -> Result<f64> {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .map(|v| v as f64)
                .with_context(|| format!("no field {} in {path}", i + 3))
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if hz <= 0 {
            bail!("sysconf(_SC_CLK_TCK) failed");
        }
        Ok((tick(11)? + tick(12)?) / hz as f64)
    }
}

/// The CPU time of process `pid` so far from its CPU-time clock, seconds; None where the kernel
/// offers no such clock for it.
fn process_cpu_clock(pid: u32) -> Option<f64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t through a valid pointer.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// A loopback TCP port free now.
pub fn free_port() -> Result<u16> {
    // Below the ephemeral range: a thousand parallel downloads once took a terminal's port
    // between its choice and the terminal's bind (`loadgen::ports`).
    Ok(loadgen::ports::free_port()?)
}

/// Starts `exe` with `args` as the process called `name`; its output to `log`, else piped.
pub fn spawn(exe: &Path, args: &[&str], name: &'static str, log: Option<&Path>) -> Result<Proc> {
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
pub fn wait_line(out: &mut BufReader<ChildStdout>, prefix: &str, what: &str) -> Result<String> {
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

/// A fresh directory for the keys, configuration files and logs of a run's daemons:
/// `<temp>/<name>-<pid>`.
pub fn daemon_dir(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// After a run of the daemons as processes in `dir`: on failure, the ends of their logs (they
/// say why), as lines to print; then the directory is removed unless `SATSTP_KEEP` is set.
pub fn end_daemon_dir(dir: &Path, failed: bool) -> Vec<String> {
    let mut lines = Vec::new();
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
                lines.push(format!("  {}: {l}", side.as_deref().unwrap_or("daemon")));
            }
        }
    }
    if std::env::var_os("SATSTP_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    lines
}

/// Reads a daemon's `/metrics` (plain HTTP on loopback): each sample line's name with its
/// labels and its value.
pub fn scrape(addr: SocketAddr) -> Result<BTreeMap<String, f64>> {
    let text = fetch_metrics(addr)
        .with_context(|| format!("cannot read the gateway's /metrics at {addr}"))?;
    Ok(parse_metrics(&text))
}

/// The whole HTTP answer of `GET /metrics` at `addr` (five seconds to connect, five per read).
pub fn fetch_metrics(addr: SocketAddr) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

/// The samples of a `/metrics` answer (headers, then the Prometheus text format): each sample
/// line's name with its labels, and its value; comments and unparsable lines left out.
pub fn parse_metrics(answer: &str) -> BTreeMap<String, f64> {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// User plus system CPU time of this process so far, in seconds.
pub fn cpu_seconds() -> Result<f64> {
    // SAFETY: getrusage only writes the struct we pass it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        bail!("getrusage failed: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Resident set size of this process, KiB (VmRSS of /proc/self/status).
pub fn rss_kib() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS line in /proc/self/status")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_child_s_cpu_time_is_read_in_nanoseconds_not_ticks() {
        // A child that spins for about 30 ms of CPU: /proc's 10 ms ticks would give 0.02-0.04 s;
        // the CPU clock gives a figure between, and a sleeping child's figure stays put.
        let child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 5",
            ])
            .spawn()
            .unwrap();
        let c = super::Proc(child, "spinner");
        let start = std::time::Instant::now();
        let mut last = 0.0;
        while start.elapsed() < std::time::Duration::from_secs(4) {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let now = c.cpu_seconds().unwrap();
            if now > 0.0 && now == last {
                break;
            }
            last = now;
        }
        let cpu = super::process_cpu_clock(c.id()).expect("a CPU clock for the child");
        assert!(cpu > 0.0, "{cpu}");
        // Not a whole number of 10 ms ticks: the figure has sub-tick resolution.
        let ticks = cpu * 100.0;
        assert!(
            (ticks - ticks.round()).abs() > 1e-6,
            "{cpu} s is a whole number of ticks"
        );
    }

    #[test]
    fn metrics_samples_are_read_with_their_labels() {
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n\
            # HELP satstp_hop_datagrams_total Datagrams.\n\
            # TYPE satstp_hop_datagrams_total counter\n\
            satstp_hop_datagrams_total{direction=\"down\"} 42\n\
            satstp_tunnel_handshakes_total{result=\"ok\"} 3.5\n\
            broken_line_without_value\n";
        let m = super::parse_metrics(answer);
        assert_eq!(m.len(), 2);
        assert_eq!(m["satstp_hop_datagrams_total{direction=\"down\"}"], 42.0);
        assert_eq!(m["satstp_tunnel_handshakes_total{result=\"ok\"}"], 3.5);
        assert!(super::parse_metrics("no headers end").is_empty());
    }
}
