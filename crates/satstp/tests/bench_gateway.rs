//! `satstp bench gateway` runs end to end on loopback and reports positive figures.

use std::process::Command;

#[test]
fn bench_gateway_json_has_positive_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_satstp"))
        .args([
            "bench",
            "gateway",
            "--json",
            "--bytes",
            "20MB",
            "--parallel",
            "4",
            "--idle",
            "20",
        ])
        .output()
        .expect("run satstp");
    assert!(
        out.status.success(),
        "satstp bench gateway failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
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
}
