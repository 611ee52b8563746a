//! The LAN behind the terminal for the transparent contender: a client namespace joined to the
//! terminal namespace by a veth pair, and the shipped `deploy/nftables-tproxy.nft` loaded in the
//! terminal namespace (its `LAN_IF` set to the veth, its routing commands run), so that the
//! client's connections to the origin's address are handed to the terminal's transparent
//! listener. Removed on drop.

use super::TPROXY_PORT;
use crate::error::{Context, Result};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The shipped rules, as the deployment guide has users load them.
const RULES: &str = include_str!("../../../../deploy/nftables-tproxy.nft");
/// The terminal's LAN interface and the client's end of it.
const LAN_IF: &str = "lan0";
const CLIENT_IF: &str = "lan0c";

fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The client's namespace (`ns`) on a LAN whose router is the terminal namespace.
pub struct Lan {
    pub ns: String,
}

impl Lan {
    pub fn create(terminal_ns: &str) -> Result<Lan> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let ns = format!(
            "satstp-lan-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        run("ip", &["netns", "add", &ns])?;
        let lan = Lan { ns };
        lan.set_up(terminal_ns)
            .context("cannot set up the LAN of the transparent contender")?;
        Ok(lan)
    }

    /// Routes what the terminal does not intercept (QUIC under `quic = "pass"`): the terminal
    /// forwards the LAN's packets and the gateway side routes the LAN's prefix back through the
    /// terminal, as a satellite network routes (or NATs) a terminal's LAN.
    pub fn route(&self, terminal_ns: &str, gateway_ns: &str) -> Result<()> {
        run(
            "ip",
            &[
                "netns",
                "exec",
                terminal_ns,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ],
        )?;
        let via = linkem::Side::Terminal.ipv4().to_string();
        run(
            "ip",
            &[
                "-n",
                gateway_ns,
                "route",
                "replace",
                "192.0.2.0/24",
                "via",
                &via,
            ],
        )
    }

    fn set_up(&self, terminal_ns: &str) -> Result<()> {
        let ip = |ns: &str, args: &str| {
            let mut v = vec!["-n", ns];
            v.extend(args.split_whitespace());
            run("ip", &v)
        };
        let c = self.ns.as_str();
        ip(c, "link set lo up")?;
        ip(
            c,
            &format!("link add {CLIENT_IF} type veth peer name {LAN_IF} netns {terminal_ns}"),
        )?;
        // IPv4 only: no IPv6 link-local address, so no duplicate-address detection finishing
        // seconds after the link came up, which a browser started meanwhile (the full
        // Chromium) takes for a network change and aborts its load (ERR_NETWORK_CHANGED).
        ip(c, &format!("link set {CLIENT_IF} addrgenmode none"))?;
        ip(terminal_ns, &format!("link set {LAN_IF} addrgenmode none"))?;
        ip(c, &format!("addr add 192.0.2.2/24 dev {CLIENT_IF}"))?;
        ip(c, &format!("link set {CLIENT_IF} up"))?;
        ip(terminal_ns, &format!("addr add 192.0.2.1/24 dev {LAN_IF}"))?;
        ip(terminal_ns, &format!("link set {LAN_IF} up"))?;
        ip(c, "route add default via 192.0.2.1")?;

        // The shipped rules with LAN_IF set; the routing commands their comments give.
        let p = pep::nft_rules::prepare("deploy/nftables-tproxy.nft", RULES, Some(LAN_IF))
            .map_err(crate::error::Error::Failed)?;
        if let Some(port) = p.tproxy_port.filter(|&p| p != TPROXY_PORT) {
            bail!("deploy/nftables-tproxy.nft sets TPROXY_PORT {port}, the bench expects {TPROXY_PORT}");
        }
        let file = std::env::temp_dir().join(format!("{}.nft", self.ns));
        std::fs::write(&file, &p.rules)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let loaded = run(
            "ip",
            &[
                "netns",
                "exec",
                terminal_ns,
                "nft",
                "-f",
                &file.to_string_lossy(),
            ],
        );
        let _ = std::fs::remove_file(&file);
        loaded?;
        for r in &p.routing {
            ip(terminal_ns, r)?;
        }
        Ok(())
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = run("ip", &["netns", "del", &self.ns]);
    }
}
