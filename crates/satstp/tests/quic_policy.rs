//! `satstp terminal` applies its QUIC policy (`quic = "reject"`, docs/quic.md) in a network
//! namespace of the test's own: the nftables table is installed at start, the choice is logged
//! and shown in `/metrics` with its packet counter, and the table is gone after SIGTERM.
//! (That the rules catch a browser's QUIC and that the page falls back to TCP is tested with
//! Chromium in crates/pep/tests/tproxy.rs.) Needs root, `ip` and `nft`.

mod common;

use common::{fresh_dir, sigterm, wait_exit, Keys};
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `ip netns exec ns args…`; its standard output, or its error output as the error.
fn in_ns(ns: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A namespace deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces and nftables need it)".into());
    }
    for (tool, arg) in [("ip", "-V"), ("nft", "--version"), ("curl", "--version")] {
        if Command::new(tool).arg(arg).output().is_err() {
            return Some(format!(
                "`{tool}` is not installed (scripts/install-deps.sh)"
            ));
        }
    }
    None
}

#[test]
fn the_terminal_installs_logs_and_counts_its_quic_policy() {
    let test = "the_terminal_installs_logs_and_counts_its_quic_policy";
    if let Some(why) = cannot_run() {
        testenv::cannot_run(test, &why);
        return;
    }
    let ns = Netns(format!("quicpol-{}", std::process::id()));
    let made = Command::new("ip").args(["netns", "add", &ns.0]).status();
    assert!(made.is_ok_and(|s| s.success()), "ip netns add {}", ns.0);
    in_ns(&ns.0, &["ip", "link", "set", "lo", "up"]).expect("lo up");

    let dir = fresh_dir("quic-policy");
    let keys = Keys::generate(&dir);
    let config = keys.write_terminal_config(
        "terminal.toml",
        1080,
        4433,
        "metrics_listen = \"127.0.0.1:9100\"\ntproxy_listen = \"[::]:12345\"\nquic = \"reject\"\n",
    );
    // The daemon runs in the namespace: `ip netns exec` executes it in place, so killing the
    // child kills the terminal.
    let satstp = env!("CARGO_BIN_EXE_satstp");
    let log = dir.join("terminal.log");
    let mut term = {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.0, satstp, "terminal", "--config"])
            .arg(&config)
            .args(["--log-level", "debug"])
            .stderr(std::fs::File::create(&log).unwrap());
        common::Kill(cmd.spawn().unwrap())
    };

    let metrics = |path: &str| {
        in_ns(
            &ns.0,
            &[
                "curl",
                "-s",
                "-m",
                "5",
                &format!("http://127.0.0.1:9100{path}"),
            ],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        if let Ok(t) = metrics("/metrics") {
            if t.contains("satstp_quic_policy") {
                break t;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no QUIC policy in /metrics; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        text.contains("satstp_quic_policy{side=\"terminal\",policy=\"reject\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("satstp_quic_policy{side=\"terminal\",policy=\"block\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("satstp_quic_packets_total{side=\"terminal\",verdict=\"rejected\"} 0\n"),
        "{text}"
    );
    let table = in_ns(&ns.0, &["nft", "list", "table", "inet", "satstp_quic"])
        .expect("the terminal installed its table");
    assert!(
        table.contains("udp dport 443 counter name \"quic_udp443\" reject"),
        "{table}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains(
            "quic=reject (UDP 443 forwarded from the LAN is answered ICMP port unreachable"
        ),
        "{logged}"
    );

    sigterm(&term.0);
    let status = wait_exit(&mut term.0, Duration::from_secs(20)).expect("terminal exits");
    assert!(status.success(), "{status}");
    assert!(
        in_ns(&ns.0, &["nft", "list", "table", "inet", "satstp_quic"]).is_err(),
        "the table outlived the terminal"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
