//! Clean closes survive a graceful shutdown: terminal and gateway daemons as separate processes
//! with the UDP link emulator (`geo`: 600 ms round trip) between them, stopped with SIGTERM
//! while closes and the last bytes of a response are still crossing the hop.
//!
//! This is how `satstp bench link` lost runs to `Connection reset by peer` at its origin: it
//! stopped both daemons right after the client closed its six page connections, while those
//! closes were still on their way across the satellite hop. A daemon then exited as soon as its
//! relays had ended — before the stream's last bytes and end had crossed the hop — and whatever
//! was still open was torn down at random (a reset from a relay that ran in time, a FIN from the
//! runtime's teardown). Now a drain also waits for the hop to deliver and have acknowledged every
//! stream's bytes and end, and what is left at `shutdown_timeout_s` is reset, always.

mod common;

use common::{
    daemon, free_port, fresh_dir, satstp, sigterm, socks_connect, wait_exit, wait_listening, Keys,
    Kill,
};
use loadgen::origin::Origin;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The kit's origin on loopback: raw `E` (echo until the peer's end) and `D n`, each
/// connection's end counted and a failed one (a reset) recorded.
fn origin() -> Origin {
    Origin::loopback_in_thread().unwrap()
}

/// Waits up to 10 s until `n` origin connections have ended; the errors they ended with.
fn ends(origin: &Origin, n: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.ended() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(origin.ended(), n, "origin connections ended");
    origin.errors()
}

struct Pair {
    dir: common::TestDir,
    gw: Kill,
    term: Kill,
    _emu: Kill,
    socks: SocketAddr,
}

impl Pair {
    fn log(&self, side: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{side}.log"))).unwrap_or_default()
    }
}

/// Gateway, `satstp emulate udp --profile geo` and terminal, each its own process; both
/// daemons sized for the profile and given `shutdown_timeout_s`.
fn start(name: &str, shutdown_timeout_s: u32) -> Pair {
    let dir = fresh_dir(name);
    let keys = Keys::generate(&dir);
    let (gw_port, emu_port, socks_port) = (free_port(), free_port(), free_port());
    let rates = format!(
        "up_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
         shutdown_timeout_s = {shutdown_timeout_s}\n"
    );
    let gw_config = keys.write_gateway_config(
        "gateway.toml",
        gw_port,
        &format!("{rates}[gateway.policy]\nallow = [\"127.0.0.0/8\"]\n"),
    );
    // Without fast open: a connection then exists at the gateway once the client's SOCKS
    // connect returns, so the test can stop the daemons at a known moment. (With fast open a
    // stream still on its way when the gateway starts draining is refused: a reset, as fast
    // open's refusals are.)
    let term_config = keys.write_terminal_config(
        "terminal.toml",
        socks_port,
        emu_port,
        &format!("{rates}socks_fast_open = false\n"),
    );
    let gw = daemon("gateway", &gw_config, Some(&dir.join("gateway.log")));
    let emu = Kill(
        satstp()
            .args(["emulate", "udp", "--profile", "geo", "--listen"])
            .arg(format!("127.0.0.1:{emu_port}"))
            .arg("--to")
            .arg(format!("127.0.0.1:{gw_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let term = daemon("terminal", &term_config, Some(&dir.join("terminal.log")));
    let socks: SocketAddr = format!("127.0.0.1:{socks_port}").parse().unwrap();
    wait_listening(&[socks]);
    Pair {
        dir,
        gw,
        term,
        _emu: emu,
        socks,
    }
}

/// A SOCKS connection through the pair to the origin's echo that has moved `n` bytes each way
/// and stays open, as a browser leaves a keep-alive connection.
fn fetched(socks: SocketAddr, origin: SocketAddr, n: usize) -> TcpStream {
    let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0, "SOCKS connect failed");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"E\n").unwrap();
    s.write_all(&common::pattern(n)).unwrap();
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).unwrap();
    assert!(got == common::pattern(n));
    s
}

#[test]
fn closes_in_flight_when_sigterm_arrives_reach_the_far_side_as_fins() {
    let mut p = start("drain-inflight", 30);
    let o = origin();
    let origin = o.addr();
    // Twenty keep-alive connections that have each fetched an object, as a browser leaves them.
    let idle: Vec<TcpStream> = (0..20).map(|_| fetched(p.socks, origin, 20_000)).collect();
    // One more asks for a 2 MB response and half-closes at once: the response (which takes
    // more than half a second to cross the 50 Mb/s hop) follows the request's FIN.
    let (mut last, code) = socks_connect(p.socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0);
    last.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    writeln!(last, "D 2000000").unwrap();
    last.shutdown(Shutdown::Write).unwrap();
    // Everything closes at once, and both daemons are told to stop at that very moment.
    drop(idle);
    sigterm(&p.term.0);
    sigterm(&p.gw.0);
    let mut got = Vec::new();
    let read = last.read_to_end(&mut got);
    assert!(read.is_ok(), "the half-closed client was cut: {read:?}");
    assert_eq!(got.len(), 2_000_000, "the response was truncated");
    assert!(
        got == common::pattern(2_000_000),
        "the response was corrupted"
    );
    for side in ["terminal", "gateway"] {
        let child = if side == "terminal" {
            &mut p.term.0
        } else {
            &mut p.gw.0
        };
        let st = wait_exit(child, Duration::from_secs(20)).expect("the daemon exits");
        assert!(st.success(), "{side}: {st:?}\n{}", p.log(side));
        let log = p.log(side);
        assert!(log.contains("every connection finished"), "{side}:\n{log}");
        assert!(!log.contains("drain_timeout"), "{side}:\n{log}");
    }
    let errors = ends(&o, 21);
    assert!(
        errors.is_empty(),
        "every origin connection must end with a FIN: {errors:?}"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn a_drain_that_runs_out_of_time_resets_what_is_left_on_both_sides() {
    let mut p = start("drain-cut", 1);
    let o = origin();
    let origin = o.addr();
    // Connections that stay open through the drain: never a clean end for a cut connection.
    let mut open: Vec<TcpStream> = (0..5).map(|_| fetched(p.socks, origin, 1000)).collect();
    let signalled = Instant::now();
    sigterm(&p.term.0);
    sigterm(&p.gw.0);
    for (side, child) in [("terminal", &mut p.term.0), ("gateway", &mut p.gw.0)] {
        let st = wait_exit(child, Duration::from_secs(15)).expect("the daemon exits");
        assert!(st.success(), "{side}: {st:?}");
    }
    assert!(signalled.elapsed() >= Duration::from_millis(900));
    for s in &mut open {
        let mut rest = Vec::new();
        let r = s.read_to_end(&mut rest);
        assert!(
            matches!(&r, Err(e) if e.kind() == ErrorKind::ConnectionReset),
            "a client connection cut by the drain must read a reset, got {r:?}"
        );
    }
    let errors = ends(&o, 5);
    assert!(
        errors.len() == 5
            && errors
                .iter()
                .all(|e| e.contains("Connection reset by peer")),
        "a connection cut by the drain must reach the origin as a reset: {errors:?}"
    );
    for side in ["terminal", "gateway"] {
        let log = p.log(side);
        assert!(log.contains("shutdown_timeout_s passed"), "{side}:\n{log}");
        assert!(
            log.contains("reason=\"drain_timeout\"") || log.contains("reason=drain_timeout"),
            "{side}:\n{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&p.dir);
}
