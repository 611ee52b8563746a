//! `satstp emulate udp` end to end: it relays and reports, and bad flags get an error naming the
//! flag and a failing exit status.

mod common;

use common::{fails, ok, satstp, EMULATE_UDP};
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn emulate_help_lists_udp() {
    let out = ok(satstp().args(["emulate", "--help"]).output().unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("udp"));
    let out = satstp().args(["--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("emulate"));
}

#[test]
fn bad_values_are_rejected_naming_the_flag() {
    let base = EMULATE_UDP;
    let cases: &[(&[&str], &str)] = &[
        (&["--profile", "meo"], "--profile"),
        (
            &["--profile", "geo", "--down-rate", "3furlongs"],
            "--down-rate",
        ),
        (&["--profile", "geo", "--up-rate", "0bps"], "--up-rate"),
        (&["--profile", "geo", "--delay", "5"], "--delay"),
        (&["--profile", "geo", "--queue", "lots"], "--queue"),
        (&["--profile", "geo", "--queue", "0"], "--queue"),
        (&["--profile", "geo", "--loss", "2"], "--loss"),
        (&["--profile", "geo", "--ber", "1.5"], "--ber"),
        (&["--profile", "geo", "--loss", "NaN"], "--loss"),
        (&["--profile", "geo", "--duration", "forever"], "--duration"),
        (&["--up-rate", "1Mbps", "--delay", "10ms"], "--down-rate"),
    ];
    for (extra, flag) in cases {
        let err = fails(satstp().args(base).args(*extra));
        assert!(err.contains(flag), "{extra:?}: {err}");
    }
    let err = fails(satstp().args([
        "emulate",
        "udp",
        "--listen",
        "nowhere",
        "--to",
        "127.0.0.1:9",
        "--profile",
        "geo",
    ]));
    assert!(err.contains("--listen"), "{err}");
    let err = fails(satstp().args(base).args(["--profile", "meo"]));
    assert!(err.contains("geo-1998"), "{err}");
}

#[test]
fn relays_for_a_duration_and_writes_json() {
    let gateway = UdpSocket::bind("127.0.0.1:0").unwrap();
    gateway
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let json = std::env::temp_dir().join(format!("satstp-emulate-{}.json", std::process::id()));
    let mut child = satstp()
        .args(["emulate", "udp", "--listen", "127.0.0.1:0", "--to"])
        .arg(gateway.local_addr().unwrap().to_string())
        .args([
            "--profile",
            "leo",
            "--delay",
            "10ms",
            "--duration",
            "3s",
            "--json",
        ])
        .arg(&json)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // "relaying terminal side ADDR <-> gateway …"
    let addr = first
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    let terminal = UdpSocket::bind("127.0.0.1:0").unwrap();
    terminal.send_to(b"hello gateway", addr).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = gateway.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello gateway");
    let mut rest = String::new();
    for line in stdout.lines() {
        rest.push_str(&line.unwrap());
        rest.push('\n');
    }
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("up"), "{rest}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["up"]["received_packets"], 1);
    assert_eq!(v["up"]["sent_packets"], 1);
    assert_eq!(v["up"]["sent_bytes"], 13);
    assert_eq!(v["up"]["delay_ns"], 10_000_000);
    assert_eq!(v["up"]["rate_bps"], 15_000_000);
    assert_eq!(v["down"]["rate_bps"], 100_000_000);
    assert_eq!(v["down"]["received_packets"], 0);
    let _ = std::fs::remove_file(json);
}
