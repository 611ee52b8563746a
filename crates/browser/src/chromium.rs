//! Page loads in headless Chromium, timed by the browser itself.
//!
//! Each load starts a fresh browser process with a fresh, empty profile directory (no cache, no
//! connection or DNS state from an earlier load; [`Chromium::load_in_profile`] uses a profile
//! the caller keeps instead, for a repeat visit) and asks it for the page's DOM once the page has
//! loaded (`--dump-dom`). The test site's page writes its own Navigation Timing figures into the
//! DOM at its load event (see [`crate::site`]), so the time reported is the browser's: from the
//! start of the navigation to the load event, with every connection set-up, proxy exchange and
//! dependent request the browser made in between, and without the browser's start-up.
//!
//! A load counts only when it is complete: every subresource fetched with status 200, every image
//! decoded, every script run and the imported style sheet applied; anything less is an error
//! that says what was missing. Chromium limits itself to six HTTP/1.1 connections per server, as
//! browsers do.
//!
//! Chromium runs with `--no-sandbox` when this process is root (its sandbox refuses root); the
//! page it loads is the site we serve ourselves.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Executable names tried in `PATH`, in order (Debian's `chromium-headless-shell` first).
pub const CANDIDATES: [&str; 5] = [
    "chromium-headless-shell",
    "chromium",
    "chromium-browser",
    "google-chrome-stable",
    "google-chrome",
];

/// Environment variable naming the browser executable explicitly.
pub const ENV_OVERRIDE: &str = "SATSTP_CHROMIUM";

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("no Chromium found: set {ENV_OVERRIDE} or install one of {CANDIDATES:?} (Debian: chromium-headless-shell)")]
    NotFound,
    #[error("{ENV_OVERRIDE}={0} is not an executable file")]
    BadOverride(String),
    #[error("browser {0:?}: not an executable file, nor one of {CANDIDATES:?} found in PATH")]
    NotInstalled(String),
    #[error("could not start {path}: {source}")]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    #[error("profile directory {path}: {source}")]
    Profile {
        path: String,
        source: std::io::Error,
    },
    #[error("page load did not finish within {0:?} (browser stopped)")]
    Timeout(Duration),
    #[error("the browser exited with {status} before reporting the load{stderr}")]
    Exited { status: String, stderr: String },
    #[error("the page reported no load event (is it the satstp test page?){stderr}")]
    NoResult { stderr: String },
    #[error("the page loaded incompletely: {0}")]
    Incomplete(String),
    #[error("unreadable result line from the page: {0}")]
    BadResult(String),
}

/// A Chromium executable.
#[derive(Debug, Clone)]
pub struct Chromium {
    path: PathBuf,
}

/// How to reach the page.
#[derive(Debug, Clone)]
pub struct LoadRequest {
    /// The page's URL.
    pub url: String,
    /// A SOCKS5 proxy every connection goes through (loopback destinations included); `None`
    /// connects directly (the system's proxy settings are ignored either way).
    pub socks5: Option<SocketAddr>,
    /// Run the browser inside this network namespace (`ip netns exec`; needs root).
    pub netns: Option<String>,
    /// Base64 SHA-256 hashes of public keys (SubjectPublicKeyInfo) whose certificates this
    /// browser process accepts although no trusted CA signed them (a test origin's per-run
    /// certificate: `loadgen::tls::TestPki::spki_sha256`). Passed as
    /// `--ignore-certificate-errors-spki-list`; no trust store is touched.
    pub trust_spki: Vec<String>,
    /// The browser is stopped after this long.
    pub timeout: Duration,
    /// Subresources the page must have fetched, and scripts that must have run.
    pub expect_subresources: usize,
    pub expect_scripts: usize,
}

/// One page load, as the browser timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct PageLoad {
    /// Navigation start to the load event (every object fetched, decoded and run).
    pub load: Duration,
    /// Navigation start to DOMContentLoaded (the page parsed, parser-blocking scripts run).
    pub dom_content_loaded: Duration,
    /// Navigation start to the page's first byte.
    pub first_byte: Duration,
    /// Subresources the page fetched.
    pub subresources: usize,
    /// The page's protocol as the browser reports it (`nextHopProtocol`: `http/1.1`, `h2`,
    /// `h3`; empty where the browser does not say).
    pub protocol: String,
    /// Wall time of the whole browser process (start-up and shut-down included).
    pub wall: Duration,
    /// Every fetch's Resource Timing, the page's first (the waterfall).
    pub fetches: Vec<crate::waterfall::Fetch>,
}

static PROFILES: AtomicU64 = AtomicU64::new(0);

impl Chromium {
    /// The browser named by `SATSTP_CHROMIUM`, or the first of [`CANDIDATES`] in `PATH`.
    pub fn find() -> Result<Chromium, BrowserError> {
        if let Some(p) = std::env::var_os(ENV_OVERRIDE) {
            let path = PathBuf::from(&p);
            return if is_executable(&path) {
                Ok(Chromium { path })
            } else {
                Err(BrowserError::BadOverride(path.display().to_string()))
            };
        }
        CANDIDATES
            .iter()
            .find_map(|name| in_path(name))
            .map(|path| Chromium { path })
            .ok_or(BrowserError::NotFound)
    }

    /// The browser `name_or_path` names: one of [`CANDIDATES`] looked up in `PATH` (e.g.
    /// `chromium` for Debian's full browser, `chromium-headless-shell` for the headless shell),
    /// or the path of an executable.
    pub fn named(name_or_path: &str) -> Result<Chromium, BrowserError> {
        let path = PathBuf::from(name_or_path);
        if name_or_path.contains('/') {
            return if is_executable(&path) {
                Ok(Chromium { path })
            } else {
                Err(BrowserError::NotInstalled(name_or_path.to_owned()))
            };
        }
        in_path(name_or_path)
            .map(|path| Chromium { path })
            .ok_or_else(|| BrowserError::NotInstalled(name_or_path.to_owned()))
    }

    /// Every one of [`CANDIDATES`] installed in `PATH`, in that order (users have either
    /// Debian's `chromium` or its `chromium-headless-shell`, and tests try each present).
    pub fn installed() -> Vec<Chromium> {
        CANDIDATES
            .iter()
            .filter_map(|name| in_path(name))
            .map(|path| Chromium { path })
            .collect()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this is a headless shell (no `--headless` needed) rather than the full browser.
    pub fn is_headless_shell(&self) -> bool {
        self.path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("headless-shell"))
    }

    /// Loads the page once, in a fresh browser with an empty profile.
    pub fn load(&self, req: &LoadRequest) -> Result<PageLoad, BrowserError> {
        self.load_with_flags(req, &[])
    }

    /// [`Chromium::load`] with further command-line `flags` for this browser process only
    /// (e.g. `loadgen::h3::H3Origin::chromium_flags`: QUIC forced for an origin and its per-run
    /// certificate accepted by its key).
    pub fn load_with_flags(
        &self,
        req: &LoadRequest,
        flags: &[String],
    ) -> Result<PageLoad, BrowserError> {
        let profile = std::env::temp_dir().join(format!(
            "satstp-chromium-{}-{}",
            std::process::id(),
            PROFILES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&profile).map_err(|source| BrowserError::Profile {
            path: profile.display().to_string(),
            source,
        })?;
        let result = self.load_in(req, flags, &profile);
        let _ = std::fs::remove_dir_all(&profile);
        result
    }

    /// [`Chromium::load_with_flags`] in the profile directory `profile`, which the caller keeps:
    /// what the browser learned on an earlier load there and wrote to the profile (Debian's
    /// `chromium`: the origin's `Alt-Svc`, that QUIC worked, the round trip measured) is known
    /// to this one, as for a user's repeat visit. The headless shell writes no such state (checked
    /// in `tests/repeat_visit.rs`); whether TLS sessions carry over is not checked (Chromium's
    /// session cache is an in-memory one). The HTTP cache stays
    /// off (`--disk-cache-size=1`): objects are fetched again.
    pub fn load_in_profile(
        &self,
        req: &LoadRequest,
        flags: &[String],
        profile: &Path,
    ) -> Result<PageLoad, BrowserError> {
        std::fs::create_dir_all(profile).map_err(|source| BrowserError::Profile {
            path: profile.display().to_string(),
            source,
        })?;
        self.load_in(req, flags, profile)
    }

    fn load_in(
        &self,
        req: &LoadRequest,
        flags: &[String],
        profile: &Path,
    ) -> Result<PageLoad, BrowserError> {
        let mut cmd = match &req.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.path);
                c
            }
            None => Command::new(&self.path),
        };
        if !self.is_headless_shell() {
            cmd.arg("--headless");
        }
        if running_as_root() {
            cmd.arg("--no-sandbox");
        }
        cmd.arg(format!("--user-data-dir={}", profile.display()))
            .args([
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-default-apps",
                "--disable-sync",
                "--metrics-recording-only",
                "--disk-cache-size=1",
            ])
            .arg(format!("--timeout={}", req.timeout.as_millis()));
        match req.socks5 {
            Some(proxy) => {
                cmd.arg(format!("--proxy-server=socks5://{proxy}"));
                // Chromium never proxies loopback unless told so.
                cmd.arg("--proxy-bypass-list=<-loopback>");
            }
            None => {
                cmd.arg("--no-proxy-server");
            }
        }
        cmd.args(flags);
        if !req.trust_spki.is_empty() {
            cmd.arg(format!(
                "--ignore-certificate-errors-spki-list={}",
                req.trust_spki.join(",")
            ));
        }
        cmd.arg("--dump-dom").arg(&req.url);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());

        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|source| BrowserError::Spawn {
            path: self.path.display().to_string(),
            source,
        })?;
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let out_reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(o) = stdout.as_mut() {
                let _ = o.read_to_string(&mut s);
            }
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.read_to_string(&mut s);
            }
            s
        });
        // The browser's own --timeout dumps what it has; this one is the backstop.
        let deadline = started + req.timeout + Duration::from_secs(15);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(BrowserError::Timeout(req.timeout));
                }
            }
        };
        let wall = started.elapsed();
        let out = out_reader.join().unwrap_or_default();
        let err = err_reader.join().unwrap_or_default();
        let Some(line) = out
            .lines()
            .find_map(|l| l.find("satstp-load ").map(|i| &l[i..]))
        else {
            if out.contains("satstp-pending") {
                return Err(BrowserError::Timeout(req.timeout));
            }
            let stderr = stderr_tail(&err);
            return Err(if status.success() {
                BrowserError::NoResult { stderr }
            } else {
                BrowserError::Exited {
                    status: status.to_string(),
                    stderr,
                }
            });
        };
        let line = line.split('<').next().unwrap_or(line);
        let mut load = parse_result(line, req, wall)?;
        load.fetches = parse_fetches(&out)?;
        Ok(load)
    }
}

/// The page's `satstp-res` lines (its waterfall), in the page's order.
fn parse_fetches(dom: &str) -> Result<Vec<crate::waterfall::Fetch>, BrowserError> {
    dom.lines()
        .filter_map(|l| l.find("satstp-res ").map(|i| &l[i..]))
        .map(|l| {
            let l = l.split('<').next().unwrap_or(l);
            crate::waterfall::Fetch::parse(l).map_err(BrowserError::BadResult)
        })
        .collect()
}

/// Reads the page's result line and checks that the load was complete.
fn parse_result(line: &str, req: &LoadRequest, wall: Duration) -> Result<PageLoad, BrowserError> {
    let field = |key: &str| -> Result<f64, BrowserError> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| BrowserError::BadResult(format!("no {key} in '{line}'")))?
            .parse::<f64>()
            .map_err(|_| BrowserError::BadResult(format!("{key} is not a number in '{line}'")))
    };
    let ms = |key: &str| -> Result<Duration, BrowserError> {
        let v = field(key)?;
        if v.is_finite() && v >= 0.0 {
            Ok(Duration::from_secs_f64(v / 1000.0))
        } else {
            Err(BrowserError::BadResult(format!(
                "{key}={v} is not a time in '{line}'"
            )))
        }
    };
    let count = |key: &str| -> Result<usize, BrowserError> { Ok(field(key)?.max(0.0) as usize) };
    let load = PageLoad {
        load: ms("load_ms")?,
        dom_content_loaded: ms("dcl_ms")?,
        first_byte: ms("ttfb_ms")?,
        subresources: count("resources")?,
        protocol: line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("proto="))
            .unwrap_or("")
            .to_string(),
        wall,
        fetches: Vec::new(),
    };
    let mut missing = Vec::new();
    let failed = count("failed")?;
    if failed > 0 {
        missing.push(format!(
            "{failed} subresource(s) answered with an error status"
        ));
    }
    let broken = count("broken_images")?;
    if broken > 0 {
        missing.push(format!("{broken} image(s) not loaded"));
    }
    if load.subresources != req.expect_subresources {
        missing.push(format!(
            "{} of {} subresources fetched",
            load.subresources, req.expect_subresources
        ));
    }
    let scripts = count("scripts")?;
    if scripts != req.expect_scripts {
        missing.push(format!("{scripts} of {} scripts ran", req.expect_scripts));
    }
    if count("css")? != 1 {
        missing.push("the imported style sheet did not apply".to_string());
    }
    if missing.is_empty() {
        Ok(load)
    } else {
        Err(BrowserError::Incomplete(missing.join("; ")))
    }
}

/// The last lines of the browser's standard error that are not its usual complaints about the
/// missing desktop bus, for error messages.
fn stderr_tail(err: &str) -> String {
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains("dbus") && !l.contains("Floss") && !l.trim().is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(5)..];
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its last messages: {}", tail.join(" | "))
    }
}

/// The first executable `name` in `PATH`.
fn in_path(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(name))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> LoadRequest {
        LoadRequest {
            url: "http://127.0.0.1:1/site/index.html".into(),
            socks5: None,
            netns: None,
            timeout: Duration::from_secs(5),
            expect_subresources: 21,
            expect_scripts: 3,
            trust_spki: Vec::new(),
        }
    }

    #[test]
    fn a_complete_result_line_parses() {
        let line = "satstp-load load_ms=1834.5 dcl_ms=1200.0 ttfb_ms=610.2 resources=21 failed=0 broken_images=0 scripts=3 css=1 proto=h2";
        let l = parse_result(line, &req(), Duration::from_secs(3)).expect("complete");
        assert_eq!(l.protocol, "h2");
        assert_eq!(l.load, Duration::from_secs_f64(1.8345));
        assert_eq!(l.first_byte, Duration::from_secs_f64(0.6102));
        assert_eq!(l.subresources, 21);
    }

    #[test]
    fn an_incomplete_load_says_what_is_missing() {
        let line = "satstp-load load_ms=900 dcl_ms=800 ttfb_ms=600 resources=19 failed=1 broken_images=2 scripts=2 css=0";
        let e = parse_result(line, &req(), Duration::ZERO)
            .expect_err("incomplete")
            .to_string();
        for part in [
            "1 subresource(s) answered with an error status",
            "2 image(s) not loaded",
            "19 of 21 subresources fetched",
            "2 of 3 scripts ran",
            "imported style sheet",
        ] {
            assert!(e.contains(part), "{e}");
        }
    }

    #[test]
    fn the_waterfall_lines_are_read_from_the_dom() {
        let dom = "<pre id=\"satstp-waterfall\">satstp-res navigation /site/index.html 0.0 1.0 0.0 600.0 600.5 1201.0 1210.0\n\
                   satstp-res link /site/css/main.css 1215.0 0.0 0.0 0.0 1215.2 1815.0 1820.0</pre>";
        let f = parse_fetches(dom).expect("parses");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].kind, "navigation");
        assert_eq!(f[1].path, "/site/css/main.css");
        assert_eq!(f[1].response_end_ms, 1820.0);
        assert!(matches!(
            parse_fetches("satstp-res img /x 1 2"),
            Err(BrowserError::BadResult(_))
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for line in [
            "satstp-load",
            "satstp-load load_ms=abc",
            "satstp-load load_ms=-5 dcl_ms=1 ttfb_ms=1 resources=21 failed=0 broken_images=0 scripts=3 css=1",
            "satstp-load load_ms=NaN dcl_ms=1 ttfb_ms=1 resources=21 failed=0 broken_images=0 scripts=3 css=1",
        ] {
            assert!(matches!(
                parse_result(line, &req(), Duration::ZERO),
                Err(BrowserError::BadResult(_))
            ));
        }
    }
}
