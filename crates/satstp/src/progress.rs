//! Progress of long runs on standard error: one line rewritten in place, "demo: large object
//! … 4 s", so that a run of more than a couple of seconds is never silent. Shown only when
//! standard error is a terminal and `--quiet` was not given; never on standard output, which
//! carries the results.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static QUIET: AtomicBool = AtomicBool::new(false);
/// A progress line is on the screen (cleared before any text is written).
static SHOWN: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress lines.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether progress lines are shown (a terminal on standard error and no `--quiet`).
pub fn enabled() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// Writes `text` over the current progress line (nothing when progress is off).
pub fn show(text: &str) {
    if enabled() {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r{text}\x1b[K");
        let _ = e.flush();
        SHOWN.store(true, Ordering::Relaxed);
    }
}

/// Clears the progress line if one is shown: called before text is written.
pub fn clear_if_shown() {
    if SHOWN.swap(false, Ordering::Relaxed) {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K");
        let _ = e.flush();
    }
}

/// A line of news on standard error ("fig3-tcp-variants: done in 12.0 s"), kept in the log
/// whether or not it is a terminal; only `--quiet` silences it.
pub fn note(text: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        clear_if_shown();
        eprintln!("{text}");
    }
}

/// Clears the progress line (nothing when progress is off).
pub fn clear() {
    clear_if_shown();
}

/// A progress line that ticks by itself: "LABEL: PHASE … N s", redrawn twice a second by a
/// thread until dropped (then cleared). For runs whose steps cannot report as they go.
pub struct Ticker {
    phase: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts ticking with `label` (nothing is shown when progress is off).
    pub fn start(label: &str) -> Ticker {
        let phase = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = enabled().then(|| {
            let (phase, stop, label) = (phase.clone(), stop.clone(), label.to_string());
            std::thread::spawn(move || {
                let started = Instant::now();
                // The first line after a second: short runs stay silent.
                let mut next = Duration::from_secs(1);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    if started.elapsed() < next {
                        continue;
                    }
                    next += Duration::from_millis(500);
                    let p = phase.lock().map(|p| p.clone()).unwrap_or_default();
                    let sep = if p.is_empty() { "" } else { ": " };
                    show(&format!(
                        "{label}{sep}{p} … {:.0} s",
                        started.elapsed().as_secs_f64()
                    ));
                }
                clear();
            })
        });
        Ticker {
            phase,
            stop,
            thread,
        }
    }

    /// Names what the run is doing now.
    pub fn phase(&self, text: &str) {
        if let Ok(mut p) = self.phase.lock() {
            *p = text.to_string();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
