//! `satstp bench gateway` runs end to end on loopback and reports positive figures, the CPU
//! time of the terminal, the gateway (each its own process) and the load generator apart.

mod common;

use common::{fails, ok, satstp};

/// `satstp bench gateway --json` with `args`: its JSON report.
fn bench_gateway(args: &[&str]) -> serde_json::Value {
    let out = ok(satstp()
        .args(["bench", "gateway", "--json"])
        .args(args)
        .output()
        .unwrap());
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn bench_gateway_json_has_positive_figures() {
    let v = bench_gateway(&["--bytes", "20MB", "--parallel", "4", "--idle", "20"]);
    for field in [
        "single_flow_gbps",
        "parallel_gbps",
        "parallel_connections",
        "cpu_s_per_gb",
        "bytes",
        "idle_conn_kib",
    ] {
        let x = v[field].as_f64().unwrap_or(-1.0);
        assert!(x > 0.0, "{field} should be positive, got {}", v[field]);
    }
    assert_eq!(v["bytes"].as_u64(), Some(20_000_000));
    for run in ["single_flow_cpu_s_per_gb", "parallel_cpu_s_per_gb"] {
        for process in ["terminal", "gateway", "loadgen"] {
            let x = v[run][process].as_f64().unwrap_or(-1.0);
            assert!(
                x > 0.0 && x < 1000.0,
                "{run}.{process} should be a CPU-s/GB figure, got {}",
                v[run][process]
            );
        }
    }
    // The daemons' figures are their own: the sum is what `cpu_s_per_gb` reports.
    let sum = v["single_flow_cpu_s_per_gb"]["terminal"].as_f64().unwrap()
        + v["single_flow_cpu_s_per_gb"]["gateway"].as_f64().unwrap();
    assert!((v["cpu_s_per_gb"].as_f64().unwrap() - sum).abs() < 1e-9);
    // The gateway's /metrics was read around the single flow: 20 MB in 1443-byte datagrams.
    let sent = v["single_flow_gateway_datagrams_sent"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        sent >= 13_000,
        "the gateway sent {sent} datagrams for 20 MB"
    );
    // The same counters around the parallel run, with what they are made of: datagrams of
    // about the hop's size (1443 bytes and the tunnel's header), STATs answering POLLs.
    let par = &v["parallel_gateway_hop"];
    let n = par["datagrams_sent"].as_u64().unwrap_or(0);
    assert!(
        n >= 13_000,
        "the gateway sent {n} datagrams for 20 MB: {par}"
    );
    let size = par["bytes_per_datagram_sent"].as_f64().unwrap_or(0.0);
    assert!(
        (1000.0..=1500.0).contains(&size),
        "{size} bytes per datagram: {par}"
    );
    assert!(
        par["bytes_sent"].as_u64().unwrap_or(0) >= 20_000_000,
        "{par}"
    );
    assert!(par["polls_sent"].as_u64().unwrap_or(0) > 0, "{par}");
    // Both daemons are this version: they exchanged capabilities when their session came up,
    // before either run, so the tunnel computed no STP checksum in either (a handful at most,
    // should a session be renewed during a run).
    for run in ["single_flow_gateway_hop", "parallel_gateway_hop"] {
        for side in ["gateway", "terminal"] {
            let n = v[run][format!("{side}_stp_checksums_filled")].as_u64();
            assert!(
                n.is_some_and(|n| n <= 10),
                "{run}: {side} computed {n:?}: {}",
                v[run]
            );
        }
    }
    // The peak memory is at least what the daemon held with its idle connections.
    let gw = &v["gateway_rss_kib"];
    assert!(
        v["gateway_peak_rss_kib"].as_u64().unwrap_or(0) >= gw[1].as_u64().unwrap_or(u64::MAX),
        "{v}"
    );
    assert_eq!(v["memory_cap_bytes"], serde_json::Value::Null);
}

/// `--workers 2 --terminals 3`: three terminal daemons (three keys, three sessions) and a
/// gateway of two workers carry the parallel run; the gateway counted the three sessions.
#[test]
fn bench_gateway_with_workers_and_several_terminals() {
    let v = bench_gateway(&[
        "--bytes",
        "6MB",
        "--parallel",
        "6",
        "--idle",
        "10",
        "--workers",
        "2",
        "--terminals",
        "3",
        "--memory-cap",
        "64MiB",
    ]);
    assert_eq!(v["workers"].as_u64(), Some(2));
    assert_eq!(v["memory_cap_bytes"].as_u64(), Some(64 << 20));
    assert_eq!(v["terminals"].as_u64(), Some(3));
    assert!(v["parallel_gbps"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
    let hs = v["gateway_tunnel_handshakes"].as_u64().unwrap_or(0);
    assert!(hs >= 3, "one session per terminal: {hs} handshakes");
    // An executable that is not satstp (a shell script that answers `--version` otherwise).
    let dir = common::fresh_dir("bench-gateway-exe");
    let other = dir.join("other");
    std::fs::write(&other, "#!/bin/sh\necho other 1.0\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let other = other.to_string_lossy().to_string();
    for bad in [
        ["--workers", "0"],
        ["--terminals", "201"],
        ["--memory-cap", "1MiB"],
        ["--gateway-exe", "/nonexistent/satstp"],
        ["--terminal-exe", other.as_str()],
    ] {
        let err = fails(satstp().args(["bench", "gateway"]).args(bad));
        assert!(err.contains(bad[0]), "{err}");
        if bad[0].ends_with("-exe") {
            assert!(
                err.contains(bad[1]) && err.contains("satstp binary"),
                "{err}"
            );
        }
    }
}

/// A normal start of two-worker daemons logs nothing an operator would take for a fault: the
/// terminal's workers handshake at once with one key and neither is refused as a replay at the
/// gateway, and the bench's readiness probes (`GET /metrics`) are not refused connections.
#[test]
fn bench_gateway_start_logs_no_refusal() {
    let tmp = std::env::temp_dir().join(format!("satstp-test-bench-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    ok(satstp()
        .args([
            "bench",
            "gateway",
            "--json",
            "--bytes",
            "4MB",
            "--parallel",
            "2",
        ])
        .args(["--idle", "4", "--workers", "2"])
        .env("TMPDIR", &tmp)
        .env("SATSTP_KEEP", "1")
        .env("SATSTP_BENCH_LOG", "info")
        .output()
        .unwrap());
    let dir = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("satstp-bench-gateway-"))
        .expect("the daemons' directory, kept");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let (gateway, terminal) = (read("gateway.log"), read("terminal0.log"));
    assert!(gateway.contains("satstp gateway started"), "{gateway}");
    assert_eq!(
        terminal.matches("tunnel up").count(),
        2,
        "one tunnel per worker:\n{terminal}"
    );
    for (name, log) in [("gateway", &gateway), ("terminal", &terminal)] {
        for line in log.lines() {
            assert!(
                !line.contains("refused") && !line.contains("replayed"),
                "{name} log: {line}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
