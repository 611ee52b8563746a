//! The terminal and gateway daemons of a split contender: this very binary started in the
//! emulator's namespaces with generated keys and configuration files, waited for, stopped
//! gracefully (SIGTERM, drain) and checked.

use super::{
    Contender, Plan, DRAIN_S, GATEWAY_METRICS_PORT, HOP_PORT, SOCKS_PORT, TERMINAL_METRICS_PORT,
    TPROXY_PORT,
};
use crate::error::{Context, Result};
use linkem::{NetEmulator, Side};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("satstp-bench-link-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The terminal and gateway daemons of a split contender; stopped on drop.
pub struct Daemons {
    children: Vec<(&'static str, Child)>,
    dir: TempDir,
}

impl Daemons {
    pub fn start(plan: &Plan, emu: &NetEmulator, contender: Contender) -> Result<Daemons> {
        let stp = contender.stp_hop();
        let fast_open = contender == Contender::SplitStpFastOpen;
        let tproxy = match contender {
            Contender::SplitStpTproxy(quic) => format!(
                "tproxy_listen = \"0.0.0.0:{TPROXY_PORT}\"\nquic = \"{}\"\n",
                quic.as_str()
            ),
            _ => String::new(),
        };
        let dir = TempDir::new()?;
        let (tkey, tpub) = pep::keys::generate_keypair()?;
        let (gkey, gpub) = pep::keys::generate_keypair()?;
        let (tkey_path, _) = pep::keys::write_keypair(&dir.0.join("terminal"), &tkey, &tpub)?;
        let (gkey_path, _) = pep::keys::write_keypair(&dir.0.join("gateway"), &gkey, &gpub)?;
        let (down_bps, up_bps, rtt_ns) = plan.profile.parameters();
        let transport = if stp { "stp" } else { "tcp" };
        let hop = SocketAddrV4::new(Side::Gateway.ipv4(), HOP_PORT);
        let hop_tcp = |side: &str| match contender.tcp_hop() {
            Some(cc) => format!("\n[{side}.hop_tcp]\ncongestion = \"{cc}\"\n"),
            None => String::new(),
        };
        let terminal = format!(
            "[terminal]\n\
             socks_listen = \"127.0.0.1:{SOCKS_PORT}\"\n\
             gateway = \"{hop}\"\n\
             gateway_public_key = \"{gpub}\"\n\
             private_key_file = {tkey:?}\n\
             hop_transport = \"{transport}\"\n\
             up_rate_bps = {up_bps}\n\
             down_rate_bps = {down_bps}\n\
             rtt_ms = {rtt}\n\
             metrics_listen = \"127.0.0.1:{TERMINAL_METRICS_PORT}\"\n\
             socks_fast_open = {fast_open}\n\
             shutdown_timeout_s = {DRAIN_S}\n{tproxy}{extra}",
            tkey = tkey_path.display().to_string(),
            rtt = rtt_ns / 1_000_000,
            extra = hop_tcp("terminal"),
        );
        let gateway = format!(
            "[gateway]\n\
             listen = \"{hop}\"\n\
             private_key_file = {gkey:?}\n\
             allowed_terminals = [\"{tpub}\"]\n\
             hop_transport = \"{transport}\"\n\
             up_rate_bps = {up_bps}\n\
             down_rate_bps = {down_bps}\n\
             rtt_ms = {rtt}\n\
             metrics_listen = \"127.0.0.1:{GATEWAY_METRICS_PORT}\"\n\
             shutdown_timeout_s = {DRAIN_S}\n\
             \n[gateway.policy]\nallow = [\"{origin}/32\"]\n{extra}",
            gkey = gkey_path.display().to_string(),
            rtt = rtt_ns / 1_000_000,
            origin = Side::Gateway.ipv4(),
            extra = hop_tcp("gateway"),
        );
        let mut d = Daemons {
            children: Vec::new(),
            dir,
        };
        for (name, side, text, port) in [
            ("gateway", Side::Gateway, gateway, GATEWAY_METRICS_PORT),
            ("terminal", Side::Terminal, terminal, SOCKS_PORT),
        ] {
            let config = d.dir.0.join(format!("{name}.toml"));
            std::fs::write(&config, text)
                .with_context(|| format!("cannot write {}", config.display()))?;
            let log = std::fs::File::create(d.dir.0.join(format!("{name}.log")))?;
            let mut cmd = emu.command(side, &plan.exe);
            cmd.arg(name)
                .arg("--config")
                .arg(&config)
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            // The daemon dies with this thread (the main one) even if the bench is killed.
            // SAFETY: prctl is async-signal-safe and touches only the child.
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .with_context(|| format!("cannot start the {name} daemon"))?;
            d.children.push((name, child));
            d.wait_listening(name, emu.namespace(side), port, &plan.stop)?;
        }
        Ok(d)
    }

    /// Waits until a daemon accepts TCP on `port` in namespace `ns`.
    fn wait_listening(&mut self, name: &str, ns: &str, port: u16, stop: &AtomicBool) -> Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = linkem::net::in_namespace(ns, move || {
                TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
            })?;
            if up {
                return Ok(());
            }
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| *n == name) {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "the {name} daemon exited ({status}): {}",
                        self.log_tail(name)
                    );
                }
            }
            if Instant::now() > deadline || stop.load(Ordering::SeqCst) {
                bail!(
                    "the {name} daemon did not listen on port {port} within 20 s: {}",
                    self.log_tail(name)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.0.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Stops both daemons gracefully; an error if one had died on its own, did not exit in
    /// time, exited with a failure, or had to reset connections its drain could not finish.
    pub fn stop(mut self) -> Result<()> {
        for (name, child) in self.children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let name = *name;
                bail!(
                    "the {name} daemon exited during the run ({status}): {}",
                    self.log_tail(name)
                );
            }
        }
        let problems = self.shutdown();
        if let Some(p) = problems.first() {
            bail!("{p}");
        }
        Ok(())
    }

    /// SIGTERM to both daemons at once, then up to the drain time and a margin for each to
    /// exit (SIGKILL after that); what went wrong, daemon by daemon.
    fn shutdown(&mut self) -> Vec<String> {
        for (_, child) in self.children.iter_mut() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: SIGTERM to our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(DRAIN_S + 5);
        let mut problems = Vec::new();
        let children = std::mem::take(&mut self.children);
        for (name, mut child) in children {
            let mut status = None;
            while Instant::now() < deadline {
                if let Ok(Some(st)) = child.try_wait() {
                    status = Some(st);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            match status {
                None => {
                    let _ = child.kill();
                    problems.push(format!(
                        "the {name} daemon did not exit within {} s of SIGTERM (killed): {}",
                        DRAIN_S + 5,
                        self.log_tail(name)
                    ));
                }
                Some(st) if !st.success() => problems.push(format!(
                    "the {name} daemon exited with {st} on SIGTERM: {}",
                    self.log_tail(name)
                )),
                Some(_) if self.log_tail(name).contains("shutdown_timeout_s passed") => problems
                    .push(format!(
                        "the {name} daemon's drain ran out of time ({DRAIN_S} s) and reset \
                         connections: {}",
                        self.log_tail(name)
                    )),
                Some(_) => {}
            }
            let _ = child.wait();
        }
        problems
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
