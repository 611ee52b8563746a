//! `satstp emulate net` end to end: a command on the terminal side with a gateway-side command,
//! its exit status and the JSON counters; the interactive mode stopped by SIGTERM; a killed run's
//! namespaces cleaned by the next; bad flags and trace files named in the error. The tests that
//! create namespaces need root and /dev/net/tun and say why they skip without them.

mod common;

use common::{ok, satstp, supported};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("satstp-emulate-net-{}-{name}", std::process::id()))
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

const SMALL: [&str; 6] = [
    "--up-rate",
    "10Mbps",
    "--down-rate",
    "20Mbps",
    "--delay",
    "5ms",
];

#[test]
fn runs_a_command_on_the_terminal_side_and_reports() {
    if !supported("runs_a_command_on_the_terminal_side_and_reports") {
        return;
    }
    let stats = tmp("cmd.json");
    let gw_out = tmp("gw.txt");
    // The gateway side records its address; the terminal side prints its own, then exits 3.
    let out = satstp()
        .args(["emulate", "net", "--profile", "geo", "--stats"])
        .arg(&stats)
        .arg("--gateway-cmd")
        .arg(format!("ip -o addr show dev sat0 > {}", gw_out.display()))
        .args([
            "--",
            "sh",
            "-c",
            "sleep 0.3; ip -o addr show dev sat0; exit 3",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stdout.contains("198.18.0.1/24"), "{stdout}");
    assert!(!stdout.contains("198.18.0.2"), "{stdout}");
    let gw = std::fs::read_to_string(&gw_out).unwrap();
    assert!(
        gw.contains("198.18.0.2/24") && gw.contains("2001:2::2/64"),
        "{gw}"
    );
    assert!(stderr.contains("50.000 Mb/s, one-way 300.0 ms"), "{stderr}");
    let v = json(&stats);
    assert_eq!(v["command_exit_code"], 3);
    assert_eq!(v["down"]["rate_bps"], 50_000_000);
    assert_eq!(v["up"]["delay_ns"], 300_000_000);
    assert_eq!(v["down"]["queue_bytes"], 3_750_000);
    for field in [
        "written_packets",
        "dropped_queue",
        "dropped_error",
        "late_max_ns",
    ] {
        assert!(v["up"][field].is_u64(), "{field}: {v}");
    }
    let t = v["terminal_namespace"].as_str().unwrap().to_string();
    assert!(!linkem::net::list_ours().contains(&t), "torn down");
    let _ = std::fs::remove_file(stats);
    let _ = std::fs::remove_file(gw_out);
}

/// Reads the emulator's standard error until the interactive banner; returns the namespaces.
fn wait_ready(child: &mut Child) -> (String, String) {
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut names = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("emulated link up: terminal side ") {
            let t = rest.split_whitespace().next().unwrap().to_string();
            let g = rest
                .split("gateway side ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            names = Some((t, g));
        }
        if line.starts_with("running until Ctrl-C") {
            break;
        }
    }
    // Keep draining so the emulator never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    names.expect("banner with the namespaces")
}

fn kill(child: &Child, sig: libc::c_int) {
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

#[test]
fn interactive_mode_carries_traffic_and_stops_on_sigterm() {
    if !supported("interactive_mode_carries_traffic_and_stops_on_sigterm") {
        return;
    }
    let stats = tmp("interactive.json");
    let mut child = satstp()
        .args(["emulate", "net"])
        .args(SMALL)
        .arg("--stats")
        .arg(&stats)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (t, g) = wait_ready(&mut child);
    assert!(linkem::net::list_ours().contains(&t));
    let server = linkem::net::in_namespace(&g, || UdpSocket::bind("198.18.0.2:9000"))
        .unwrap()
        .unwrap();
    let client = linkem::net::in_namespace(&t, || UdpSocket::bind("198.18.0.1:0"))
        .unwrap()
        .unwrap();
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sent = Instant::now();
    for i in 0..5u8 {
        client
            .send_to(&[i; 100], SocketAddr::from(([198, 18, 0, 2], 9000)))
            .unwrap();
    }
    let mut buf = [0u8; 200];
    for i in 0..5u8 {
        let (n, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 100]);
        server.send_to(&buf[..n], from).unwrap();
    }
    for i in 0..5u8 {
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 100]);
    }
    assert!(sent.elapsed() >= Duration::from_millis(10), "5 ms each way");
    kill(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!linkem::net::list_ours().contains(&t));
    assert!(!linkem::net::list_ours().contains(&g));
    let v = json(&stats);
    assert_eq!(v["command_exit_code"], serde_json::Value::Null);
    for dir in ["up", "down"] {
        assert!(v[dir]["written_packets"].as_u64().unwrap() >= 5, "{v}");
        assert!(v[dir]["written_bytes"].as_u64().unwrap() >= 5 * 128, "{v}");
        assert_eq!(v[dir]["dropped_packets"], 0);
    }
    let _ = std::fs::remove_file(stats);
}

#[test]
fn a_killed_run_is_cleaned_up_by_the_next() {
    if !supported("a_killed_run_is_cleaned_up_by_the_next") {
        return;
    }
    let mut child = satstp()
        .args(["emulate", "net"])
        .args(SMALL)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (t, g) = wait_ready(&mut child);
    kill(&child, libc::SIGKILL);
    child.wait().unwrap();
    let ours = linkem::net::list_ours();
    assert!(
        ours.contains(&t) && ours.contains(&g),
        "left behind by the crash"
    );
    ok(satstp()
        .args(["emulate", "net"])
        .args(SMALL)
        .args(["--", "true"])
        .output()
        .unwrap());
    let ours = linkem::net::list_ours();
    assert!(!ours.contains(&t) && !ours.contains(&g), "{ours:?}");
}

#[test]
fn bad_flags_and_trace_files_are_named() {
    let bad_trace = tmp("bad-delay.txt");
    std::fs::write(&bad_trace, "0 300\n1000 abc\n").unwrap();
    let bad_rate = tmp("bad-rate.txt");
    std::fs::write(&bad_rate, "5\n3\n").unwrap();
    let bt = bad_trace.to_str().unwrap();
    let br = bad_rate.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--profile", "meo"], "unknown profile 'meo'"),
        (vec!["--up-rate", "1Mbps", "--delay", "5ms"], "--down-rate"),
        (vec!["--profile", "geo", "--delay-trace", bt], "line 2"),
        (
            vec!["--profile", "geo", "--delay-trace", "/nonexistent/d.txt"],
            "/nonexistent/d.txt",
        ),
        (vec!["--profile", "geo", "--down-rate-trace", br], "line 2"),
        (
            vec!["--profile", "geo", "--gilbert-elliott", "0.1,0.2"],
            "--gilbert-elliott",
        ),
        (vec!["--profile", "geo", "--outage", "5s"], "--outage"),
        (
            vec!["--profile", "geo", "--queue-packets", "0"],
            "--queue-packets",
        ),
        (vec!["--profile", "geo", "--loss", "1.5"], "--loss"),
        (
            vec!["--profile", "geo", "--delay", "1ms", "--delay-trace", bt],
            "--delay",
        ),
    ];
    for (extra, needle) in cases {
        let out = satstp()
            .args(["emulate", "net"])
            .args(&extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
    let _ = std::fs::remove_file(bad_trace);
    let _ = std::fs::remove_file(bad_rate);
}
