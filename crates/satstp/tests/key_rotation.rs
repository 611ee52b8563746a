//! The gateway's keys changed by SIGHUP, with the daemons as processes (`docs/gateway.md`,
//! "Rotating the gateway's key"): a key rotation under load fails no connection, and a terminal
//! removed from the allow-list loses its open streams at once while another terminal's carry on
//! byte-exact.

mod common;

use common::{
    fresh_dir, keygen, pattern, satstp, sighup, socks_connect, wait_listening, wait_log, Kill,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests here run one at a time: a port `free_port` gave one test may be taken by the
/// other's daemon before it binds.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `satstp gateway --config config` with its log (info) in `log`.
fn gateway(config: &Path, log: &Path) -> Kill {
    Kill(
        satstp()
            .arg("gateway")
            .arg("--config")
            .arg(config)
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// A terminal named `name` (its key `dir/name.key`) towards the gateway on `hop`, pinned to
/// `gateway_pub`, with SOCKS5 on a free port: the process and the SOCKS address once it
/// listens. Opens wait for the gateway's verdict (no SOCKS fast open), 2 s at most.
fn terminal(dir: &Path, name: &str, hop: u16, gateway_pub: &str) -> (Kill, SocketAddr) {
    let socks = common::free_port();
    let conf = dir.join(format!("{name}.toml"));
    std::fs::write(
        &conf,
        format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:{socks}\"\ngateway = \"127.0.0.1:{hop}\"\n\
             gateway_public_key = \"{gateway_pub}\"\nprivate_key_file = \"{name}.key\"\n\
             connect_timeout_s = 2\nsocks_fast_open = false\n"
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    let child = common::daemon("terminal", &conf, Some(&log));
    let addr: SocketAddr = format!("127.0.0.1:{socks}").parse().unwrap();
    wait_listening(&[addr]);
    (child, addr)
}

/// What one terminal's load did in each phase of a test.
#[derive(Default, Debug, Clone)]
struct Tally {
    /// Per phase: downloads completed byte-exact, rounds of the long-lived echo connection,
    /// the bytes both carried; the failures (with why).
    downloads: [u64; 3],
    rounds: [u64; 3],
    bytes: [u64; 3],
    failed: Vec<String>,
}

/// Load through one terminal: a long-lived echo connection (a round every 50 ms, across every
/// phase) and, one after another, connections each downloading `size` bytes and checking them,
/// until `stop`; each result counted in the phase it ended in.
struct Load {
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(socks: SocketAddr, origin: SocketAddr, phase: &Arc<AtomicUsize>, size: usize) -> Load {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let record = {
            let (tally, phase) = (Arc::clone(&tally), Arc::clone(phase));
            move |round: bool, r: Result<u64, String>| {
                let p = phase.load(Ordering::SeqCst);
                let mut t = tally.lock().unwrap();
                match r {
                    Ok(n) => {
                        if round {
                            t.rounds[p] += 1;
                        } else {
                            t.downloads[p] += 1;
                        }
                        t.bytes[p] += n;
                    }
                    Err(e) => t.failed.push(format!("phase {p}: {e}")),
                }
            }
        };
        let mut threads = Vec::new();
        // The long-lived connection: opened once, carried through every SIGHUP.
        let (s2, r2) = (Arc::clone(&stop), record.clone());
        threads.push(std::thread::spawn(move || {
            let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
            if code != 0 {
                return r2(
                    true,
                    Err(format!("long-lived connection refused (SOCKS {code})")),
                );
            }
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"E\n").unwrap();
            let mut round = 0u64;
            while !s2.load(Ordering::SeqCst) {
                let what = format!("round {round} of the long-lived connection\n");
                let mut back = vec![0u8; what.len()];
                let r = s
                    .write_all(what.as_bytes())
                    .and_then(|()| s.read_exact(&mut back));
                match r {
                    Ok(()) if back == what.as_bytes() => r2(true, Ok(what.len() as u64)),
                    Ok(()) => return r2(true, Err(format!("long-lived: round {round} corrupted"))),
                    Err(e) => return r2(true, Err(format!("long-lived: round {round}: {e}"))),
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        }));
        let s3 = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let want = pattern(size);
            while !s3.load(Ordering::SeqCst) {
                record(false, download(socks, origin, &want));
            }
        }));
        Load {
            tally,
            stop,
            threads,
        }
    }

    /// Stops the load (the connections under way finish) and returns its tally.
    fn finish(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let t = self.tally.lock().unwrap().clone();
        t
    }

    /// The tally so far.
    fn tally(&self) -> Tally {
        self.tally.lock().unwrap().clone()
    }
}

/// One connection through `socks` downloading `want.len()` bytes from the kit's origin: the
/// bytes it carried when they all arrived, in order.
fn download(socks: SocketAddr, origin: SocketAddr, want: &[u8]) -> Result<u64, String> {
    let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
    if code != 0 {
        return Err(format!("SOCKS reply {code}"));
    }
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    writeln!(s, "D {}", want.len()).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!(
            "{} bytes arrived, not the {} sent",
            got.len(),
            want.len()
        ));
    }
    Ok(got.len() as u64)
}

/// Whether a connection through `socks` is refused (an open must fail while the gateway
/// does not accept the terminal's pinned key).
fn refused(socks: SocketAddr, origin: SocketAddr) -> bool {
    let (_s, code) = socks_connect(socks, "127.0.0.1", origin.port());
    code != 0
}

/// A gateway on `hop` with these key files, serving `terminals`.
fn gateway_config(file: &Path, hop: u16, key: &str, next: Option<&str>, terminals: &[&str]) {
    let next = next.map_or(String::new(), |n| {
        format!("next_private_key_file = \"{n}\"\n")
    });
    let allowed: Vec<String> = terminals.iter().map(|k| format!("\"{k}\"")).collect();
    std::fs::write(
        file,
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{hop}\"\nprivate_key_file = \"{key}\"\n{next}\
             allowed_terminals = [{}]\n[gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
            allowed.join(", ")
        ),
    )
    .unwrap();
}

#[test]
fn rotating_the_gateway_key_by_sighup_under_load_fails_no_connection() {
    let _serial = serial();
    let dir = fresh_dir("key-rotation");
    let old_pub = keygen(&dir.join("gateway-old"));
    let new_pub = keygen(&dir.join("gateway-new"));
    let (a, b, probe) = (
        keygen(&dir.join("a")),
        keygen(&dir.join("b")),
        keygen(&dir.join("probe")),
    );
    let origin = loadgen::origin::Origin::loopback_in_thread().unwrap();
    let o = origin.addr();
    let hop = common::free_port();
    let conf = dir.join("gateway.toml");
    let log = dir.join("gateway.log");
    let terminals = [a.as_str(), b.as_str(), probe.as_str()];
    gateway_config(&conf, hop, "gateway-old.key", None, &terminals);
    let gw = gateway(&conf, &log);
    let mut at = wait_log(&log, 0, "satstp gateway started");

    // Phase 0: the old key only. Terminal A is pinned to it and carries load; a terminal
    // pinned to the new key is refused.
    let phase = Arc::new(AtomicUsize::new(0));
    let (_ta, socks_a) = terminal(&dir, "a", hop, &old_pub);
    let load_a = Load::start(socks_a, o, &phase, 256 * 1024);
    {
        let (_p, socks_p) = terminal(&dir, "probe", hop, &new_pub);
        assert!(
            refused(socks_p, o),
            "the new key was accepted before the rotation"
        );
    }
    at = wait_log(
        &log,
        at,
        "failed authentication: the terminal's gateway_public_key",
    );
    std::thread::sleep(Duration::from_secs(2));

    // A bad next key file: the reload is refused in one line naming the file, the running key
    // stays, and the load carries on.
    let missing = dir.join("gateway-missing.key");
    gateway_config(&conf, hop, "gateway-old.key", missing.to_str(), &terminals);
    sighup(&gw.0);
    at = wait_log(&log, at, "reload refused, keeping the running settings: ");
    at = wait_log(
        &log,
        at,
        &format!(
            "gateway.next_private_key_file: {}: no such file",
            missing.display()
        ),
    );

    // Phase 1: SIGHUP with next_private_key_file: both keys. Terminal B, pinned to the new
    // key, starts and carries load beside A.
    gateway_config(
        &conf,
        hop,
        "gateway-old.key",
        Some("gateway-new.key"),
        &terminals,
    );
    // `satstp check` shows both keys before the reload applies them.
    let checked = satstp().arg("check").arg(&conf).output().unwrap();
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{out}");
    assert!(out.contains(&format!("(public key {old_pub})")), "{out}");
    assert!(
        out.contains(&format!(
            "gateway-new.key (public key {new_pub}; a key rotation"
        )),
        "{out}"
    );
    sighup(&gw.0);
    at = wait_log(
        &log,
        at,
        &format!(
            "configuration reloaded: gateway keys: handshakes now accepted to {old_pub} \
             (private_key_file), {new_pub} (next_private_key_file)"
        ),
    );
    phase.store(1, Ordering::SeqCst);
    let (_tb, socks_b) = terminal(&dir, "b", hop, &new_pub);
    let load_b = Load::start(socks_b, o, &phase, 256 * 1024);
    std::thread::sleep(Duration::from_secs(3));

    // Phase 2: SIGHUP with the new key only. B carries on; A's live session (made under the
    // old key) carries on too; a fresh handshake under the old key is refused.
    gateway_config(&conf, hop, "gateway-new.key", None, &terminals);
    sighup(&gw.0);
    wait_log(
        &log,
        at,
        &format!(
            "configuration reloaded: gateway keys: handshakes now accepted to {new_pub} \
             (private_key_file); no longer to {old_pub}"
        ),
    );
    phase.store(2, Ordering::SeqCst);
    {
        let (_p, socks_p) = terminal(&dir, "probe", hop, &old_pub);
        assert!(
            refused(socks_p, o),
            "the old key was accepted after the rotation"
        );
    }
    let before = load_a.tally().downloads[2];
    std::thread::sleep(Duration::from_secs(2));
    let a = load_a.finish();
    let b = load_b.finish();
    eprintln!("terminal A (old key): {a:?}\nterminal B (new key): {b:?}");

    assert!(
        a.failed.is_empty(),
        "terminal A's connections failed: {:?}",
        a.failed
    );
    assert!(
        b.failed.is_empty(),
        "terminal B's connections failed: {:?}",
        b.failed
    );
    let carried = |t: &Tally, p: usize| t.downloads[p] > 0 && t.rounds[p] > 0 && t.bytes[p] > 0;
    for p in 0..3 {
        assert!(
            carried(&a, p),
            "terminal A did not carry both kinds in phase {p}"
        );
    }
    assert!(
        a.downloads[2] > before,
        "terminal A's live session stopped after the promotion"
    );
    assert_eq!(b.downloads[0] + b.rounds[0], 0);
    for p in 1..3 {
        assert!(
            carried(&b, p),
            "terminal B did not carry both kinds in phase {p}"
        );
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An echo round on `s`: `what` comes back.
fn echo(s: &mut TcpStream, what: &[u8]) {
    s.write_all(what).unwrap();
    let mut back = vec![0u8; what.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, what);
}

/// An echo connection through `socks` to the kit's origin, checked with one round.
fn echo_stream(socks: SocketAddr, origin: SocketAddr) -> TcpStream {
    let (mut s, code) = socks_connect(socks, "127.0.0.1", origin.port());
    assert_eq!(code, 0, "SOCKS reply");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"E\n").unwrap();
    echo(&mut s, b"open");
    s
}

/// A file of terminal keys, one a line.
fn allow_file(file: &PathBuf, keys: &[&str]) {
    std::fs::write(
        file,
        keys.iter().map(|k| format!("{k}\n")).collect::<String>(),
    )
    .unwrap();
}

/// How long after a revoking SIGHUP the revoked terminal's open streams must have ended.
const REVOKED_WITHIN: Duration = Duration::from_secs(1);

#[test]
fn revoking_a_terminal_by_sighup_ends_its_streams_at_once_and_spares_the_other() {
    let _serial = serial();
    let dir = fresh_dir("revocation");
    let gateway_pub = keygen(&dir.join("gateway"));
    let (kept, revoked) = (keygen(&dir.join("kept")), keygen(&dir.join("revoked")));
    let origin = loadgen::origin::Origin::loopback_in_thread().unwrap();
    let o = origin.addr();
    let hop = common::free_port();
    let allow = dir.join("terminals.allow");
    allow_file(&allow, &[&kept, &revoked]);
    let conf = dir.join("gateway.toml");
    std::fs::write(
        &conf,
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{hop}\"\nprivate_key_file = \"gateway.key\"\n\
             allowed_terminals_file = \"terminals.allow\"\n\
             [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n"
        ),
    )
    .unwrap();
    let log = dir.join("gateway.log");
    let gw = gateway(&conf, &log);
    let at = wait_log(&log, 0, "satstp gateway started");
    let (_tk, socks_k) = terminal(&dir, "kept", hop, &gateway_pub);
    let (_tr, socks_r) = terminal(&dir, "revoked", hop, &gateway_pub);

    // Two open streams each; the kept terminal also has a download under way, paced to last
    // about 3 s (64 KiB every 25 ms), across the SIGHUP.
    let mut kept_streams = [echo_stream(socks_k, o), echo_stream(socks_k, o)];
    let revoked_streams = [echo_stream(socks_r, o), echo_stream(socks_r, o)];
    let size = 8 << 20;
    let (mut big, code) = socks_connect(socks_k, "127.0.0.1", o.port());
    assert_eq!(code, 0);
    big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    writeln!(big, "S {size} 65536 25").unwrap();
    let mut first = vec![0u8; 1 << 20];
    big.read_exact(&mut first).unwrap();
    let download = std::thread::spawn(move || {
        let mut rest = Vec::new();
        big.read_to_end(&mut rest).map(|_| [first, rest].concat())
    });

    // The revoked terminal's streams wait in a read: they end when the gateway drops them.
    let ended: Vec<_> = revoked_streams
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                let r = s.read(&mut b);
                (Instant::now(), format!("{r:?}"))
            })
        })
        .collect();

    allow_file(&allow, &[&kept]);
    let hup = Instant::now();
    sighup(&gw.0);
    wait_log(
        &log,
        at,
        &format!("configuration reloaded: allowed terminals removed: {revoked}"),
    );
    for (i, t) in ended.into_iter().enumerate() {
        let (when, how) = t.join().unwrap();
        let after = when.duration_since(hup);
        eprintln!("revoked terminal's stream {i} ended {after:?} after the SIGHUP: {how}");
        assert!(
            how == "Ok(0)" || how.starts_with("Err"),
            "stream {i}: {how} (it still carried bytes)"
        );
        assert!(
            after <= REVOKED_WITHIN,
            "stream {i} ended {after:?} after the SIGHUP (bound {REVOKED_WITHIN:?})"
        );
    }

    // Its new connections are refused, and the gateway's log names its key.
    assert!(
        refused(socks_r, o),
        "the revoked terminal opened a connection"
    );
    wait_log(&log, 0, &format!("from terminal key {revoked} ("));
    wait_log(&log, 0, "which is not in allowed_terminals");

    // The kept terminal's streams carry on byte-exact.
    for (i, s) in kept_streams.iter_mut().enumerate() {
        echo(s, format!("stream {i} after the revocation").as_bytes());
    }
    let got = download.join().unwrap().unwrap();
    assert!(
        got == pattern(size),
        "the kept terminal's download arrived {} bytes, not byte-exact",
        got.len()
    );
    assert!(
        download_ok(socks_k, o),
        "the kept terminal cannot open a new connection"
    );
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether a new 1 MiB download through `socks` arrives byte-exact.
fn download_ok(socks: SocketAddr, origin: SocketAddr) -> bool {
    download(socks, origin, &pattern(1 << 20)).is_ok()
}
