//! `satstp gateway` and `satstp terminal` as real processes on loopback: keys from `satstp
//! keygen`, configuration files, a SOCKS5 download through both from a local origin server.

mod common;

use common::{
    daemon, download, free_port, fresh_dir, pattern, satstp, sigterm, socks_connect, wait_exit,
    wait_listening, Keys, Kill, Loopback,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn socks_download_through_terminal_and_gateway_processes() {
    let pair = Loopback::new("daemons");
    let term_config = pair.write_terminal_config("");
    let _gw = daemon("gateway", &pair.gw_config, None);
    let _term = daemon("terminal", &term_config, None);
    // Origin: sends 1 MB to the client, then closes; the download waits for the terminal to
    // listen.
    let body = pattern(1 << 20);
    let got = download(pair.socks(), body.len());
    assert!(
        got == body,
        "download differs ({} of {} bytes)",
        got.len(),
        body.len()
    );
    let _ = std::fs::remove_dir_all(&pair.dir);
}

#[test]
fn bad_configuration_names_the_field() {
    let dir = std::env::temp_dir().join(format!("satstp-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("gateway.toml");
    std::fs::write(&f, "[gateway]\nlisten = \"127.0.0.1:1\"\nprivate_key_file = \"/nonexistent\"\nallowed_terminals = [\"zz\"]\n").unwrap();
    let o = satstp()
        .arg("gateway")
        .arg("--config")
        .arg(&f)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("allowed_terminals") || err.contains("nonexistent"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway and a terminal as processes, the terminal's extra settings in `terminal_extra`.
struct Pair {
    dir: common::TestDir,
    gw: Kill,
    term: Kill,
    socks: SocketAddr,
    metrics: SocketAddr,
}

fn start_pair(name: &str, terminal_extra: &str) -> Pair {
    let dir = fresh_dir(name);
    let keys = Keys::generate(&dir);
    let gw_port = free_port();
    let socks_port = free_port();
    let metrics_port = free_port();
    let gw_config = keys.write_gateway_config(
        "gateway.toml",
        gw_port,
        "shutdown_timeout_s = 5\n[gateway.policy]\nallow = [\"127.0.0.0/8\", \"localhost\"]\n\
         deny = [\"*.denied.example\"]\n",
    );
    let term_config = keys.write_terminal_config(
        "terminal.toml",
        socks_port,
        gw_port,
        &format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\n{terminal_extra}\n"),
    );
    let gw = daemon("gateway", &gw_config, Some(&dir.join("gateway.log")));
    let term = daemon("terminal", &term_config, Some(&dir.join("terminal.log")));
    let socks: SocketAddr = format!("127.0.0.1:{socks_port}").parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    wait_listening(&[metrics, socks]);
    Pair {
        dir,
        gw,
        term,
        socks,
        metrics,
    }
}

impl Pair {
    fn log(&self, side: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{side}.log"))).unwrap_or_default()
    }
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The kit's origin on loopback.
fn origin() -> loadgen::origin::Origin {
    loadgen::origin::Origin::loopback_in_thread().unwrap()
}

/// Asks the origin on `s` for `chunks` chunks of 100 000 pattern bytes, one every 100 ms, then
/// its close (or, with `hold`, the connection kept open after them).
fn ask_slow(s: &mut TcpStream, chunks: usize, hold: bool) {
    let verb = if hold { "H" } else { "S" };
    writeln!(s, "{verb} {} 100000 100", chunks * 100_000).unwrap();
}

#[test]
fn sigterm_lets_a_transfer_finish_then_exits_zero() {
    let mut p = start_pair("drain", "shutdown_timeout_s = 20");
    let o = origin();
    let origin = o.addr();
    let (mut s, code) = socks_connect(p.socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0);
    ask_slow(&mut s, 15, false);
    let mut first = [0u8; 1000];
    s.read_exact(&mut first).unwrap();
    // The terminal's /metrics and /status show the connection in progress.
    let status: serde_json::Value = serde_json::from_str(&http_get(p.metrics, "/status")).unwrap();
    assert_eq!(status["connections"].as_array().map(Vec::len), Some(1));
    assert_eq!(status["connections"][0]["destination"], origin.to_string());
    let signalled = Instant::now();
    sigterm(&p.term.0);
    // Stops accepting at once ...
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(p.socks).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ... while the transfer in progress completes, byte-exact.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    let mut got = first.to_vec();
    got.extend_from_slice(&rest);
    assert!(
        got == pattern(1_500_000),
        "transfer cut ({} bytes)",
        got.len()
    );
    drop(s);
    let st = wait_exit(&mut p.term.0, Duration::from_secs(15)).expect("terminal exits");
    assert!(st.success(), "{st:?}\n{}", p.log("terminal"));
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "did not wait for the full shutdown_timeout_s"
    );
    let log = p.log("terminal");
    assert!(log.contains("satstp terminal started"), "{log}");
    assert!(log.contains("connection closed"), "{log}");
    assert!(log.contains("every connection finished"), "{log}");
    // The gateway drains the same way.
    sigterm(&p.gw.0);
    let st = wait_exit(&mut p.gw.0, Duration::from_secs(10)).expect("gateway exits");
    assert!(st.success(), "{st:?}\n{}", p.log("gateway"));
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn sigterm_cuts_what_is_left_at_the_shutdown_timeout() {
    let mut p = start_pair("cut", "shutdown_timeout_s = 1");
    let o = origin();
    let origin = o.addr();
    let (mut s, code) = socks_connect(p.socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0);
    ask_slow(&mut s, 2, true);
    let mut first = [0u8; 1000];
    s.read_exact(&mut first).unwrap();
    let signalled = Instant::now();
    sigterm(&p.term.0);
    let st = wait_exit(&mut p.term.0, Duration::from_secs(10)).expect("terminal exits");
    let waited = signalled.elapsed();
    assert!(st.success(), "{st:?}\n{}", p.log("terminal"));
    assert!(
        waited >= Duration::from_millis(900),
        "exited before the timeout: {waited:?}"
    );
    // The client's connection was cut, not completed: reading ends early.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(1000 + rest.len() <= 200_000);
    assert!(
        p.log("terminal").contains("shutdown_timeout_s passed"),
        "{}",
        p.log("terminal")
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn metrics_and_host_name_policy_in_the_daemons() {
    // Without fast open (on by default), so the policy refusal comes back as a SOCKS5 code.
    let p = start_pair("metrics", "socks_fast_open = false");
    let o = origin();
    let origin = o.addr();
    // By name, allowed by the gateway's name rule (and its loopback range).
    let (mut s, code) = socks_connect(p.socks, "localhost", origin.port());
    assert_eq!(code, 0);
    ask_slow(&mut s, 3, false);
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got == pattern(300_000));
    drop(s);
    // Denied by a wildcard name rule before any resolution.
    let (_d, code) = socks_connect(p.socks, "www.denied.example", origin.port());
    assert_eq!(code, 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = http_get(p.metrics, "/metrics");
        if text.contains("satstp_connections_active{side=\"terminal\"} 0\n") {
            break text;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        text.contains("satstp_tcp_bytes_total{side=\"terminal\",direction=\"down\"} 300000\n"),
        "{text}"
    );
    assert!(
        text.contains("satstp_connections_refused_total{side=\"terminal\",reason=\"policy\"} 1\n"),
        "{text}"
    );
    // Besides the two above, only the start-up probes of the SOCKS port (closed without a
    // handshake, so refused as protocol errors) were admitted.
    let value = |prefix: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
    };
    let total = value("satstp_connections_total{side=\"terminal\"} ");
    let probes = value("satstp_connections_refused_total{side=\"terminal\",reason=\"protocol\"} ");
    assert_eq!(total, probes + 2, "{text}");
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn bad_log_level_is_named() {
    let o = satstp()
        .args([
            "gateway",
            "--config",
            "/nonexistent.toml",
            "--log-level",
            "info,=[bad",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--log-level"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
