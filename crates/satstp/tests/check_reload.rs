//! `satstp check` and SIGHUP, with the daemons as processes: `check` accepts what the daemon
//! starts with, prints the effective settings, and refuses what the daemon refuses with the
//! same one-line error; paths in a file are relative to it; SIGHUP reloads the allowed
//! terminals (their file), the policy and the log level without dropping connections, and a bad
//! file is refused with the running settings kept.

mod common;

use common::{
    free_port, fresh_dir, satstp, sighup, socks_connect, wait_listening, wait_log, Keys, Kill,
};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `satstp check file`: exit status, stdout, stderr.
fn check(file: &Path) -> (bool, String, String) {
    let o = satstp().arg("check").arg(file).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `satstp side --config file` run until it exits (it should fail at once): its stderr.
fn daemon_error(side: &str, file: &Path) -> String {
    let mut child = satstp()
        .arg(side)
        .arg("--config")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_exit(&mut child, Duration::from_secs(20));
    if status.is_none() {
        let _ = child.kill();
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        matches!(status, Some(s) if !s.success()),
        "the {side} started with {}: {err}",
        file.display()
    );
    // The last line is the error (a log line or two may come first).
    err.lines().last().unwrap_or_default().to_string()
}

#[test]
fn check_accepts_what_the_daemon_starts_with_and_refuses_the_same() {
    let dir = fresh_dir("check");
    let keys = Keys::generate(&dir);
    // Relative paths: next to the file, wherever the command runs.
    std::fs::write(
        dir.join("terminals.allow"),
        format!("{}\n", keys.terminal_pub),
    )
    .unwrap();
    let good = dir.join("gateway.toml");
    std::fs::write(
        &good,
        "[gateway]\nlisten = \"127.0.0.1:4433\"\nprivate_key_file = \"gateway.key\"\n\
         allowed_terminals_file = \"terminals.allow\"\n[gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    let (ok, out, err) = check(&good);
    assert!(ok, "{err}");
    assert!(out.contains("gateway configuration, OK"), "{out}");
    assert!(
        out.contains(&format!("public key {}", keys.gateway_pub)),
        "{out}"
    );
    assert!(out.contains("1 key (0 inline, the rest from"), "{out}");
    assert!(
        out.contains("536870912 bytes (512 MiB), admits 131072 idle connections"),
        "{out}"
    );
    assert!(out.contains("300 s"), "{out}");
    // No allocation: the read-ahead bound's floor.
    assert!(
        out.contains("33554432 bytes (32 MiB), 20 ms of this side's send allocation"),
        "{out}"
    );
    // The STP hop's UDP socket buffers as this process gets them: the 32 MiB of receive and
    // 8 MiB of send buffer asked (as root,
    // forced past `net.core.rmem_max` where it is lower), or short of it, said so.
    let buffers = out
        .lines()
        .find(|l| l.trim_start().starts_with("hop UDP socket buffers"))
        .unwrap_or_else(|| panic!("no hop UDP socket buffers line: {out}"));
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            buffers.contains("receive 64.0 MiB, send 16.0 MiB")
                && buffers.contains("the 32.0 MiB and 8.0 MiB asked"),
            "{buffers}"
        );
    } else {
        assert!(buffers.contains("MiB asked"), "{buffers}");
    }

    let terminal = keys.write_terminal_config(
        "terminal.toml",
        1080,
        4433,
        "rtt_ms = 600\nup_rate_bps = \"1Mbps\"\ndown_rate_bps = \"10Mbps\"\n",
    );
    let (ok, out, err) = check(&terminal);
    assert!(ok, "{err}");
    assert!(out.contains("terminal configuration, OK"), "{out}");
    assert!(out.contains("1000000 bit/s (1 Mbit/s)"), "{out}");
    assert!(out.contains("600 ms"), "{out}");

    // Each bad file: check fails with exactly the daemon's error line.
    let bad = [
        (
            "private_key_file = \"gateway.key\"",
            "private_key_file = \"/tmp\"",
            "gateway.private_key_file: /tmp: is a directory",
        ),
        (
            "terminals.allow",
            "missing.allow",
            "gateway.allowed_terminals_file: ",
        ),
        (
            "allow = [\"127.0.0.0/8\"]",
            "allow = [\"127.0.0.0/33\"]",
            "gateway.policy.allow",
        ),
        (
            "[gateway.policy]",
            "log_level = \"info,,=x\"\n[gateway.policy]",
            "gateway.log_level: ",
        ),
    ];
    for (from, to, want) in bad {
        let text = std::fs::read_to_string(&good).unwrap().replace(from, to);
        let file = dir.join("bad-gateway.toml");
        std::fs::write(&file, text).unwrap();
        let (ok, out, err) = check(&file);
        assert!(!ok, "check accepted {to}: {out}");
        let line = err.lines().last().unwrap_or_default().to_string();
        assert!(
            line.starts_with("error: ") && line.contains(want),
            "{to}: {err}"
        );
        assert_eq!(line, daemon_error("gateway", &file), "{to}");
    }
    // Over the daemon's 1 MiB file limit: refused by check as by the daemon (one read, one rule).
    let padded = format!(
        "{}{}",
        "# padding\n".repeat(110_000),
        std::fs::read_to_string(&good).unwrap()
    );
    let file = dir.join("big-gateway.toml");
    std::fs::write(&file, padded).unwrap();
    let (ok, out, err) = check(&file);
    assert!(!ok, "check accepted a 1.1 MB file: {out}");
    let line = err.lines().last().unwrap_or_default().to_string();
    assert!(line.contains("larger than 1048576 bytes"), "{err}");
    assert_eq!(line, daemon_error("gateway", &file));

    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/geo-stp-bulk.toml");
    let (ok, out, err) = check(&scenario);
    assert!(ok, "{err}");
    assert!(out.contains("scenario \"geo-stp-bulk\", OK"), "{out}");
    std::fs::write(dir.join("other.toml"), "x = 1\n").unwrap();
    let (ok, _, err) = check(&dir.join("other.toml"));
    assert!(!ok);
    assert!(err.contains("not a terminal configuration"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An echo through the connection: `what` comes back.
fn echo(s: &mut std::net::TcpStream, what: &[u8]) {
    s.write_all(what).unwrap();
    let mut back = vec![0u8; what.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, what);
}

#[test]
fn sighup_reloads_allowed_terminals_policy_and_log_level_without_dropping_connections() {
    let dir = fresh_dir("reload");
    let keys = Keys::generate(&dir);
    let origin = loadgen::origin::Origin::loopback_in_thread().unwrap();
    let (hop, socks) = (free_port(), free_port());
    let socks_addr: SocketAddr = format!("127.0.0.1:{socks}").parse().unwrap();
    // At first the allowed-terminals file lists another terminal only.
    let other = keygen_other(&dir);
    let allow = dir.join("terminals.allow");
    std::fs::write(&allow, format!("{other}\n")).unwrap();
    let config = |allow_rule: &str, extra: &str| {
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{hop}\"\nprivate_key_file = \"gateway.key\"\n\
             allowed_terminals_file = \"terminals.allow\"\n{extra}\n\
             [gateway.policy]\nallow = [\"{allow_rule}\"]\n"
        )
    };
    let gw_conf = dir.join("gateway.toml");
    std::fs::write(&gw_conf, config("127.0.0.0/8", "")).unwrap();
    let term_conf = keys.write_terminal_config(
        "terminal.toml",
        socks,
        hop,
        "connect_timeout_s = 2\nsocks_fast_open = false\n",
    );
    let gw_log = dir.join("gateway.log");
    let gateway = Kill(
        satstp()
            .arg("gateway")
            .arg("--config")
            .arg(&gw_conf)
            .stderr(std::fs::File::create(&gw_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut at = wait_log(&gw_log, 0, "satstp gateway started");
    let _terminal = common::daemon("terminal", &term_conf, None);
    wait_listening(&[socks_addr]);
    let (_refused, code) = socks_connect(socks_addr, "127.0.0.1", origin.addr().port());
    assert_ne!(
        code, 0,
        "a terminal not in the allowed-terminals file was served"
    );

    // The file gains the terminal: SIGHUP, and it is served.
    std::fs::write(&allow, format!("{other}\n{}\n", keys.terminal_pub)).unwrap();
    sighup(&gateway.0);
    at = wait_log(
        &gw_log,
        at,
        &format!(
            "configuration reloaded: allowed terminals added: {}",
            keys.terminal_pub
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut open = loop {
        let (s, code) = socks_connect(socks_addr, "127.0.0.1", origin.addr().port());
        if code == 0 {
            break s;
        }
        assert!(Instant::now() < deadline, "the terminal is still refused");
        std::thread::sleep(Duration::from_millis(200));
    };
    open.write_all(b"E\n").unwrap();
    echo(&mut open, b"before the reload");
    assert!(
        !std::fs::read_to_string(&gw_log)
            .unwrap()
            .contains("stream accepted"),
        "debug lines at info"
    );

    // The policy no longer allows loopback and the log level is debug: new connections are
    // refused (and logged at debug), the open one carries on.
    std::fs::write(&gw_conf, config("10.0.0.0/8", "log_level = \"debug\"")).unwrap();
    sighup(&gateway.0);
    at = wait_log(
        &gw_log,
        at,
        "configuration reloaded: policy: allow=[\"10.0.0.0/8\"]",
    );
    at = wait_log(&gw_log, at, "log_level \"info\" -> \"debug\"");
    let (_denied, code) = socks_connect(socks_addr, "127.0.0.1", origin.addr().port());
    assert_eq!(
        code, 2,
        "SOCKS5 'not allowed by ruleset' under the new policy"
    );
    at = wait_log(&gw_log, at, "stream accepted");
    echo(&mut open, b"after the reload");

    // A setting that needs a restart is named; a bad file is refused, the running settings
    // stay and the connection carries on.
    std::fs::write(
        &gw_conf,
        config("10.0.0.0/8", "log_level = \"debug\"\nidle_timeout_s = 60"),
    )
    .unwrap();
    sighup(&gateway.0);
    at = wait_log(&gw_log, at, "gateway.idle_timeout_s changed");
    std::fs::write(&gw_conf, config("10.0.0.0/99", "")).unwrap();
    sighup(&gateway.0);
    at = wait_log(
        &gw_log,
        at,
        "reload refused, keeping the running settings: ",
    );
    wait_log(&gw_log, at, "gateway.policy.allow[0]: \"10.0.0.0/99\"");
    let (_denied, code) = socks_connect(socks_addr, "127.0.0.1", origin.addr().port());
    assert_eq!(code, 2, "the running policy stays");
    echo(&mut open, b"after the refused reload");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The public key of a third key pair (a terminal that is not this test's).
fn keygen_other(dir: &Path) -> String {
    common::keygen(&dir.join("other"))
}

#[test]
fn sighup_changes_a_terminals_log_level() {
    let dir = fresh_dir("reload-terminal");
    let keys = Keys::generate(&dir);
    let (hop, socks) = (free_port(), free_port());
    let conf = keys.write_terminal_config("terminal.toml", socks, hop, "log_level = \"warn\"\n");
    let log = dir.join("terminal.log");
    let terminal = Kill(
        satstp()
            .arg("terminal")
            .arg("--config")
            .arg(&conf)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_listening(&[format!("127.0.0.1:{socks}").parse().unwrap()]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("started"), "info lines at warn:\n{text}");
    let edited = std::fs::read_to_string(&conf)
        .unwrap()
        .replace("log_level = \"warn\"", "log_level = \"debug\"");
    std::fs::write(&conf, edited).unwrap();
    sighup(&terminal.0);
    wait_log(
        &log,
        0,
        "configuration reloaded: log_level \"warn\" -> \"debug\"",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
