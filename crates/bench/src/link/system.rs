//! System settings `satstp bench link` changes and reads: host sysctls (put back afterwards),
//! per-namespace TCP settings, congestion controls, and the counters it reads (`RetransSegs`,
//! a daemon's `/metrics`).

use crate::error::{Context, Result};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

/// Host-wide sysctls raised for the benchmark, put back on restore or drop.
#[derive(Default)]
pub struct HostSysctls {
    pub saved: Vec<(String, String, u64)>,
}

impl HostSysctls {
    /// Raises `/proc/sys/<name>` to at least `value`, remembering the old value.
    pub fn raise(&mut self, name: &str, value: u64) -> Result<()> {
        let path = format!("/proc/sys/{name}");
        let old = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_string();
        let current: u64 = old.parse().unwrap_or(0);
        if current < value {
            std::fs::write(&path, value.to_string())
                .with_context(|| format!("cannot set {path}"))?;
        }
        self.saved.push((path, old, current.max(value)));
        Ok(())
    }

    pub fn restore(&mut self) -> Result<()> {
        let mut first_error = None;
        for (path, old, _) in self.saved.drain(..) {
            if let Err(e) = std::fs::write(&path, &old) {
                first_error.get_or_insert(err!("cannot restore {path} to {old}: {e}"));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for HostSysctls {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// Per-namespace TCP settings: buffer limits for autotuning up to `buffer` bytes, and no
/// metrics carried from one connection to the next (each starts from the same state).
pub fn namespace_sysctls(buffer: u64) -> Vec<(&'static str, String)> {
    vec![
        ("net/ipv4/tcp_rmem", format!("4096 131072 {buffer}")),
        ("net/ipv4/tcp_wmem", format!("4096 16384 {buffer}")),
        ("net/ipv4/tcp_no_metrics_save", "1".into()),
    ]
}

pub fn tune_namespace(ns: &str, buffer: u64) -> Result<()> {
    let settings = namespace_sysctls(buffer);
    let name = ns.to_string();
    linkem::net::in_namespace(ns, move || -> Result<()> {
        for (key, value) in &settings {
            let path = format!("/proc/sys/{key}");
            std::fs::write(&path, value)
                .with_context(|| format!("cannot set {path} in namespace {name}"))?;
            let got = std::fs::read_to_string(&path)?;
            let got: Vec<&str> = got.split_whitespace().collect();
            let want: Vec<&str> = value.split_whitespace().collect();
            if got != want {
                bail!("{path} in namespace {name} reads {got:?} after setting {value}");
            }
        }
        Ok(())
    })?
}

/// What an operator of the split-TCP hop sets on the terminal's and the gateway's hosts
/// (`docs/gateway.md`, "Split TCP hop"), here in the namespace `ns`: no slow start after idle,
/// TCP Fast Open for clients and servers, and on the route to the peer's address the initial
/// windows of one bandwidth-delay product each way
/// ([`pep::sizing::HopLink::tcp_route_windows`]).
pub fn tune_tcp_hop_host(ns: &str, peer: Ipv4Addr, link: pep::sizing::HopLink) -> Result<()> {
    let name = ns.to_string();
    linkem::net::in_namespace(ns, move || -> Result<()> {
        for (key, value) in [("tcp_slow_start_after_idle", "0"), ("tcp_fastopen", "3")] {
            let path = format!("/proc/sys/net/ipv4/{key}");
            std::fs::write(&path, value)
                .with_context(|| format!("cannot set {path} in namespace {name}"))?;
        }
        Ok(())
    })??;
    let w = link.tcp_route_windows();
    let args = [
        "-n".to_string(),
        ns.to_string(),
        "route".into(),
        "replace".into(),
        format!("{peer}/32"),
        "dev".into(),
        linkem::net::TUN_NAME.into(),
        "initcwnd".into(),
        w.initcwnd.to_string(),
        "initrwnd".into(),
        w.initrwnd.to_string(),
    ];
    let out = Command::new("ip")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes a congestion control available (loading `tcp_<name>` with modprobe if needed); the
/// error says why it is not.
pub fn ensure_cc(name: &str) -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let available = || {
        std::fs::read_to_string(path)
            .map(|s| s.split_whitespace().any(|c| c == name))
            .unwrap_or(false)
    };
    if available() {
        return Ok(());
    }
    let loaded = Command::new("modprobe")
        .arg(format!("tcp_{name}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    if available() {
        return Ok(());
    }
    let why = match loaded {
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => format!("cannot run modprobe: {e}"),
    };
    Err(format!(
        "{name} is not available in this kernel (modprobe tcp_{name}: {why})"
    ))
}

/// Sets a socket's congestion control (`TCP_CONGESTION`) with pep's safe setter.
pub fn set_congestion(s: &impl AsFd, cc: &str) -> std::io::Result<()> {
    pep::sockopt::set_congestion(s, cc).map_err(std::io::Error::other)
}

/// `Tcp: RetransSegs` of a namespace (`/proc/thread-self/net/snmp` read from inside it).
pub fn retrans_segs(ns: &str) -> Result<u64> {
    let text =
        linkem::net::in_namespace(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp"))??;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        bail!("no Tcp lines in /proc/net/snmp of {ns}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RetransSegs")
        .and_then(|(_, v)| v.parse().ok())
        .context("no RetransSegs in /proc/net/snmp")
}

/// `GET /metrics` from a daemon's metrics port in a namespace, as `name{labels}` → value.
pub fn scrape_metrics(ns: &str, port: u16) -> Result<BTreeMap<String, f64>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let answer = linkem::net::in_namespace(ns, move || crate::process::fetch_metrics(addr))?
        .with_context(|| format!("cannot read /metrics on port {port}"))?;
    Ok(crate::process::parse_metrics(&answer))
}
