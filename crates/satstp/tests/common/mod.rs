//! Shared pieces of the tests that run the `satstp` binary: spawning it, its daemons' keys and
//! configuration files, waiting for their listeners, and a SOCKS5 client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `satstp` binary under test.
pub fn satstp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_satstp"))
}

/// `satstp emulate udp` listening on a free loopback port and relaying to loopback's discard
/// port: the arguments before a test's link flags.
pub const EMULATE_UDP: [&str; 6] = [
    "emulate",
    "udp",
    "--listen",
    "127.0.0.1:0",
    "--to",
    "127.0.0.1:9",
];

/// `o`, which must be a success: if it is not, the test fails showing its standard output and
/// error.
pub fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Runs `cmd`, which must fail without a panic; its standard error.
pub fn fails(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{cmd:?} succeeded: {err}");
    assert!(!err.contains("panicked"), "{cmd:?}: {err}");
    err
}

/// Whether this machine can run the IP-level emulator (root, /dev/net/tun); says why `test`
/// skips when it cannot.
pub fn supported(test: &str) -> bool {
    match linkem::net::check_support() {
        Ok(()) => true,
        Err(e) => {
            testenv::cannot_run(test, &e.to_string());
            false
        }
    }
}

/// A child process killed and reaped when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free at the time of asking, outside the ephemeral range
/// ([`loadgen::ports::free_port`]).
pub fn free_port() -> u16 {
    loadgen::ports::free_port().unwrap()
}

/// A test's scratch directory: removed when the test that made it passes, kept (with its logs and
/// configs) when it fails, so a failure can be read afterwards.
pub struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for the failed test: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// An empty directory `satstp-{name}-{pid}` under the temporary directory, removed when the test
/// passes ([`TestDir`]).
pub fn fresh_dir(name: &str) -> TestDir {
    let dir = std::env::temp_dir().join(format!("satstp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TestDir(dir)
}

/// `satstp keygen --out prefix`; the public key it wrote.
pub fn keygen(prefix: &Path) -> String {
    let o = satstp()
        .arg("keygen")
        .arg("--out")
        .arg(prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(prefix.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

/// The first `n` bytes of the load-generation kit's pattern (object 0): what the kit origin's
/// raw `D n` answers.
pub fn pattern(n: usize) -> Vec<u8> {
    loadgen::pattern::bytes(0, n)
}

/// A terminal's and a gateway's key pairs from `satstp keygen`, in `dir` as `terminal.key`,
/// `terminal.pub`, `gateway.key` and `gateway.pub`.
pub struct Keys {
    pub dir: PathBuf,
    pub terminal_pub: String,
    pub gateway_pub: String,
}

impl Keys {
    pub fn generate(dir: &Path) -> Keys {
        Keys {
            dir: dir.to_path_buf(),
            terminal_pub: keygen(&dir.join("terminal")),
            gateway_pub: keygen(&dir.join("gateway")),
        }
    }

    /// Writes `dir/name`: a gateway listening on loopback port `port` with its key, serving
    /// the terminal's key, then `extra` (more `[gateway]` settings, then sections). Its path.
    pub fn write_gateway_config(&self, name: &str, port: u16, extra: &str) -> PathBuf {
        let file = self.dir.join(name);
        std::fs::write(
            &file,
            format!(
                "[gateway]\nlisten = \"127.0.0.1:{port}\"\nprivate_key_file = \"{}\"\n\
                 allowed_terminals = [\"{}\"]\n{extra}",
                self.dir.join("gateway.key").display(),
                self.terminal_pub
            ),
        )
        .unwrap();
        file
    }

    /// Writes `dir/name`: a terminal with SOCKS5 on loopback port `socks_port` and its key,
    /// towards the gateway at loopback port `gateway_port` with the gateway's key, then `extra`.
    /// Its path.
    pub fn write_terminal_config(
        &self,
        name: &str,
        socks_port: u16,
        gateway_port: u16,
        extra: &str,
    ) -> PathBuf {
        let file = self.dir.join(name);
        std::fs::write(
            &file,
            format!(
                "[terminal]\nsocks_listen = \"127.0.0.1:{socks_port}\"\n\
                 gateway = \"127.0.0.1:{gateway_port}\"\ngateway_public_key = \"{}\"\n\
                 private_key_file = \"{}\"\n{extra}",
                self.gateway_pub,
                self.dir.join("terminal.key").display()
            ),
        )
        .unwrap();
        file
    }
}

/// The `[gateway.policy]` the daemon tests give their gateway: every loopback address may be
/// reached, nothing else.
pub const LOOPBACK_POLICY: &str = "[gateway.policy]\nallow = [\"127.0.0.0/8\"]\n";

/// A terminal and a gateway about to run on loopback: a fresh `dir` with both key pairs, a port
/// for each, and the gateway's `gateway.toml` written (with [`LOOPBACK_POLICY`]).
pub struct Loopback {
    pub dir: TestDir,
    pub keys: Keys,
    pub gw_port: u16,
    pub socks_port: u16,
    pub gw_config: PathBuf,
}

impl Loopback {
    /// The pair in `fresh_dir(name)`.
    pub fn new(name: &str) -> Loopback {
        let dir = fresh_dir(name);
        let keys = Keys::generate(&dir);
        let gw_port = free_port();
        let socks_port = free_port();
        let gw_config = keys.write_gateway_config("gateway.toml", gw_port, LOOPBACK_POLICY);
        Loopback {
            dir,
            keys,
            gw_port,
            socks_port,
            gw_config,
        }
    }

    /// Writes `terminal.toml`: the terminal on `socks_port` towards this gateway, then `extra`.
    pub fn write_terminal_config(&self, extra: &str) -> PathBuf {
        self.keys
            .write_terminal_config("terminal.toml", self.socks_port, self.gw_port, extra)
    }

    /// The terminal's SOCKS5 address.
    pub fn socks(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.socks_port))
    }
}

/// `satstp side --config config` running; its log (at level debug) goes to `log`, or nowhere.
pub fn daemon(side: &str, config: &Path, log: Option<&Path>) -> Kill {
    let mut cmd = satstp();
    cmd.arg(side).arg("--config").arg(config);
    match log {
        Some(log) => cmd
            .arg("--log-level")
            .arg("debug")
            .stderr(std::fs::File::create(log).unwrap()),
        None => cmd.stderr(Stdio::null()),
    };
    Kill(cmd.spawn().unwrap())
}

/// Waits up to 20 s until every one of `addrs` accepts connections.
pub fn wait_listening(addrs: &[SocketAddr]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while addrs.iter().any(|a| TcpStream::connect(a).is_err()) {
        assert!(
            Instant::now() < deadline,
            "terminal did not start listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SOCKS5 CONNECT (the kit's blocking client) through `proxy` to `host:port` (an IP address
/// or a name), reads timing out after 30 s; returns the stream and the reply code.
pub fn socks_connect(proxy: SocketAddr, host: &str, port: u16) -> (TcpStream, u8) {
    let dest = loadgen::socks5::Dest::new(host, port);
    loadgen::socks5::blocking::connect(proxy, dest, Duration::from_secs(30)).unwrap()
}

/// Downloads `n` bytes ([`pattern`]) from the kit's origin through the SOCKS5 proxy at
/// `proxy`, once it listens; what arrived before the end of stream.
pub fn download(proxy: SocketAddr, n: usize) -> Vec<u8> {
    let origin = loadgen::origin::Origin::loopback_in_thread().unwrap();
    wait_listening(&[proxy]);
    let (mut s, code) = socks_connect(proxy, "127.0.0.1", origin.addr().port());
    assert_eq!(code, 0, "SOCKS reply");
    writeln!(s, "D {n}").unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    got
}

/// SIGTERM to `child` (spawned by the test and not yet waited for).
pub fn sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid we spawned and still own (not yet waited for).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// Waits up to `limit` for `child` to exit; its status.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET path` on a daemon's metrics listener (`/metrics`, `/status`); the body, or `None` when
/// the listener cannot be reached or answers nothing whole within 5 s.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// Waits up to 15 s until `log` holds `what` (after `from` bytes); the position after it.
pub fn wait_log(log: &Path, from: usize, what: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(at) = text.get(from..).and_then(|t| t.find(what)) {
            return from + at + what.len();
        }
        assert!(Instant::now() < deadline, "no {what:?} in the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP to `child` (spawned by the test and not yet waited for): a daemon reloads.
pub fn sighup(child: &std::process::Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid we spawned and still own (not yet waited for).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}
