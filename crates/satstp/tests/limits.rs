//! A terminal at its open-file limit: new clients are refused cleanly (SOCKS5 reply 1, a log
//! line naming the limit and its value, `satstp_connections_refused_total{reason="descriptors"}`)
//! while the connections already established keep working.

mod common;

use common::{free_port, satstp, socks_connect, wait_listening, Kill, Loopback};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// The terminal's open-file limit (soft and hard) in this test.
const NOFILE: u64 = 64;

/// The kit's origin on loopback; the connections use its echo (`E`).
fn origin() -> loadgen::origin::Origin {
    loadgen::origin::Origin::loopback_in_thread().unwrap()
}

/// Whether `n` pattern bytes come back through the echo on `s` (whose first call sends `E`).
fn fetch(s: &mut TcpStream, n: usize, first: bool) -> bool {
    if first && s.write_all(b"E\n").is_err() {
        return false;
    }
    if s.write_all(&common::pattern(n)).is_err() {
        return false;
    }
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).is_ok() && got == common::pattern(n)
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

#[test]
fn at_the_open_file_limit_new_clients_are_refused_and_established_ones_carry_on() {
    let pair = Loopback::new("nofile");
    let (dir, socks_port, metrics_port) = (&pair.dir, pair.socks_port, free_port());
    // Without fast open, so a refusal is a SOCKS5 reply the client can read.
    let term_config = pair.write_terminal_config(&format!(
        "socks_fast_open = false\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n"
    ));
    let _gw = common::daemon("gateway", &pair.gw_config, None);
    let log = dir.join("terminal.log");
    let mut cmd = satstp();
    cmd.args(["terminal", "--config"])
        .arg(&term_config)
        .args(["--log-level", "info"])
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: setrlimit only affects the child, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: NOFILE as libc::rlim_t,
                rlim_max: NOFILE as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let term = Kill(cmd.spawn().unwrap());
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", term.0.id())).map_or(0, |d| d.count());
    let socks: SocketAddr = format!("127.0.0.1:{socks_port}").parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    wait_listening(&[socks, metrics]);
    let o = origin();
    let origin = o.addr();

    // Open connections until the terminal refuses one.
    let mut open = Vec::new();
    let refused_code = loop {
        assert!(
            open.len() < NOFILE as usize,
            "{} connections open under a limit of {NOFILE} descriptors",
            open.len()
        );
        let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
        if code != 0 {
            break code;
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(
            fetch(&mut s, 1000, true),
            "an admitted connection must work"
        );
        open.push(s);
    };
    assert_eq!(
        refused_code, 1,
        "a refusal at the limit is SOCKS5 general failure"
    );
    assert!(
        open.len() > 10,
        "only {} connections before the limit",
        open.len()
    );

    // The established connections are unaffected.
    for s in &mut open {
        assert!(
            fetch(s, 5000, false),
            "an established connection broke at the limit"
        );
    }
    // Counted, and logged with the limit's value.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = http_get(metrics, "/metrics");
        if text
            .contains("satstp_connections_refused_total{side=\"terminal\",reason=\"descriptors\"} ")
        {
            let line = text
                .lines()
                .find(|l| l.contains("reason=\"descriptors\""))
                .unwrap_or_default()
                .to_owned();
            let n: u64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if n >= 1 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no descriptors refusal counted:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("RLIMIT_NOFILE = {NOFILE}")),
        "the log must name the limit and its value:\n{text}"
    );
    // Room again once connections close: a new one is admitted.
    // Room again once connections close: new ones are admitted.
    open.truncate(open.len() - 10);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
        if code == 0 {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            assert!(fetch(&mut s, 1000, true));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection admitted within 10 s after 10 others closed ({} descriptors open)",
            fds()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("admitted again after {attempts} attempt(s)");
    let _ = std::fs::remove_dir_all(dir);
}
