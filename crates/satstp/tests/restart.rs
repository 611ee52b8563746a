//! A daemon killed mid-transfer (SIGKILL: no drain, no goodbye) and started again, with the
//! terminal and gateway as separate processes on loopback.
//!
//! - Gateway killed and restarted: the client connection it was carrying ends with a reset,
//!   never a clean end; the terminal notices the new gateway by itself (its probe gets an
//!   unknown-session notice, it re-handshakes and sees a new gateway instance) and new
//!   connections work at once (`tunnel_ops.rs` times both).
//! - Terminal killed and restarted: the gateway frees the dead terminal's connections (its relay,
//!   its STP connection) within the configured dead-peer timeout, as `/status` shows.

mod common;

use common::{daemon, free_port, fresh_dir, http_get, socks_connect, wait_listening, Keys, Kill};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The kit's origin on loopback; see [`ask_endless`].
fn endless_origin() -> loadgen::origin::Origin {
    loadgen::origin::Origin::loopback_in_thread().unwrap()
}

/// Asks the origin on `s` for an endless (a terabyte), slow stream of pattern bytes: 100 kB
/// every 100 ms, until the peer goes away.
fn ask_endless(s: &mut TcpStream) {
    writeln!(s, "S 1000000000000 100000 100").unwrap();
}

struct Setup {
    dir: common::TestDir,
    gw_config: PathBuf,
    term_config: PathBuf,
    socks: SocketAddr,
    gw_metrics: SocketAddr,
}

/// Configuration files for a pair whose STP connections declare the peer dead after 5 s.
fn setup(name: &str) -> Setup {
    let dir = fresh_dir(name);
    let keys = Keys::generate(&dir);
    let (gw_port, socks_port, metrics_port) = (free_port(), free_port(), free_port());
    let gw_config = keys.write_gateway_config(
        "gateway.toml",
        gw_port,
        &format!(
            "metrics_listen = \"127.0.0.1:{metrics_port}\"\n\
             [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n[gateway.stp]\nkeepalive_interval_ms = 1000\ndead_timeout_ms = 5000\n"
        ),
    );
    let term_config = keys.write_terminal_config(
        "terminal.toml",
        socks_port,
        gw_port,
        "[terminal.stp]\nkeepalive_interval_ms = 1000\ndead_timeout_ms = 5000\n",
    );
    Setup {
        socks: format!("127.0.0.1:{socks_port}").parse().unwrap(),
        gw_metrics: format!("127.0.0.1:{metrics_port}").parse().unwrap(),
        dir,
        gw_config,
        term_config,
    }
}

fn start(s: &Setup, side: &str, n: u32) -> Kill {
    let (config, log) = if side == "gateway" {
        (&s.gw_config, s.dir.join(format!("gateway-{n}.log")))
    } else {
        (&s.term_config, s.dir.join(format!("terminal-{n}.log")))
    };
    daemon(side, config, Some(&log))
}

/// A connection through the terminal to `origin` that has received its first bytes.
fn streaming(socks: SocketAddr, origin: SocketAddr) -> TcpStream {
    let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0, "SOCKS connect failed");
    ask_endless(&mut s);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut first = [0u8; 1000];
    s.read_exact(&mut first).unwrap();
    s
}

/// Reads until the connection ends; how it ended.
fn read_to_end(s: &mut TcpStream) -> std::io::Result<usize> {
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(n),
            Ok(k) => n += k,
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn a_killed_gateway_resets_its_connections_and_a_restarted_one_serves_at_once() {
    let s = setup("restart-gateway");
    let o = endless_origin();
    let origin = o.addr();
    let mut gw = start(&s, "gateway", 1);
    let _term = start(&s, "terminal", 1);
    wait_listening(&[s.socks, s.gw_metrics]);
    let mut old = streaming(s.socks, origin);

    // SIGKILL: the gateway's process is gone with all its state; a new one takes its place.
    gw.0.kill().unwrap();
    let _ = gw.0.wait();
    let killed = Instant::now();
    let _gw2 = start(&s, "gateway", 2);
    wait_listening(&[s.gw_metrics]);

    // The connection the dead gateway carried ends with an error, never a clean end.
    let end = read_to_end(&mut old);
    assert!(
        end.is_err(),
        "a connection cut by the gateway's death ended cleanly after {end:?} bytes"
    );
    let e = end.unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
        ),
        "{e}"
    );
    eprintln!(
        "old connection reset {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );

    // The terminal finds the new gateway by itself: a new connection works within seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (mut c, code) = socks_connect(s.socks, "127.0.0.1", origin.port());
        if code == 0 {
            ask_endless(&mut c);
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut first = vec![0u8; 100_000];
            if c.read_exact(&mut first).is_ok() {
                assert!(first == common::pattern(100_000));
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no working connection within 20 s of the restart"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "new connection served {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[test]
fn a_killed_terminals_connections_are_freed_at_the_gateway_within_the_dead_peer_timeout() {
    let s = setup("restart-terminal");
    let o = endless_origin();
    let origin = o.addr();
    let _gw = start(&s, "gateway", 1);
    let mut term = start(&s, "terminal", 1);
    wait_listening(&[s.socks, s.gw_metrics]);
    let _a = streaming(s.socks, origin);
    let _b = streaming(s.socks, origin);
    let status = |key: &str| -> usize {
        let body = http_get(s.gw_metrics, "/status").unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        match key {
            "relays" => v["connections"].as_array().map_or(usize::MAX, Vec::len),
            _ => v["stp"]["connections"]
                .as_u64()
                .map_or(usize::MAX, |n| n as usize),
        }
    };
    assert_eq!(status("relays"), 2, "both connections show at the gateway");

    term.0.kill().unwrap();
    let _ = term.0.wait();
    let killed = Instant::now();
    // Freed within the 5 s dead-peer timeout (plus the relays' reaction and a margin).
    let deadline = killed + Duration::from_secs(12);
    while status("relays") != 0 || status("stp") != 0 {
        assert!(
            Instant::now() < deadline,
            "the gateway still holds the dead terminal's connections 12 s after the kill: {}",
            http_get(s.gw_metrics, "/status").unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let freed = killed.elapsed();
    eprintln!("gateway freed the dead terminal's connections {freed:.1?} after the kill");
    assert!(
        freed >= Duration::from_secs(4),
        "freed before the dead-peer timeout: {freed:?}"
    );

    // A restarted terminal works.
    let _term2 = start(&s, "terminal", 2);
    wait_listening(&[s.socks]);
    let _c = streaming(s.socks, origin);
    let _ = std::fs::remove_dir_all(&s.dir);
}
