//! Where a page load's time goes: the browser's Resource Timing of every fetch (the waterfall)
//! and the load's critical path through the site's references.
//!
//! The critical path starts at the fetch whose response ended last and follows each fetch back
//! to the one it waited for, up to the page: the fetch whose response ended last before it
//! started — its referrer, or what held the browser back from acting on the referrer (a script
//! runs only after the style sheets above it, their imports included, and the scripts before
//! it) — or, for a fetch started while its referrer's response was still arriving (the browser
//! reads references from a partial page), its referrer (`referrer`). Each fetch on the path
//! splits the time from its predecessor's last byte to its own into:
//!
//! - `gap`: predecessor's last byte → the browser starts the fetch (parsing, running scripts,
//!   applying style sheets; negative when the browser found the reference in a response still
//!   arriving);
//! - `queue`: the fetch started → its request went out, less the connection set-up (waiting for
//!   one of the six connections per server to come free);
//! - `connect`: a new connection's set-up as the browser saw it (TCP handshake, or the SOCKS5
//!   exchange with the proxy), up to its TLS handshake;
//! - `tls`: a new connection's TLS handshake (`secureConnectionStart` → `connectEnd`; 0 for
//!   plain HTTP);
//! - `wait`: request → first byte of the response (one round trip across the link for a
//!   request on an open connection, plus whatever the path adds);
//! - `receive`: first → last byte of the response.
//!
//! The last fetch's end to the load event is the `tail`. The parts add up to the load time
//! exactly (the page's own fetch starts at 0), so `load − requests × RTT` is the time the round
//! trips of the dependency chain do not explain.

use std::fmt::Write as _;

/// One fetch as the browser timed it, milliseconds since the navigation started.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetch {
    /// Resource Timing's `initiatorType` (`navigation`, `link`, `script`, `img`, `css`, …).
    pub kind: String,
    /// The URL's path.
    pub path: String,
    pub start_ms: f64,
    pub connect_start_ms: f64,
    /// The TLS handshake's start (0: no TLS, or a reused connection).
    pub secure_start_ms: f64,
    pub connect_end_ms: f64,
    pub request_start_ms: f64,
    pub response_start_ms: f64,
    pub response_end_ms: f64,
}

impl Fetch {
    /// Reads a `satstp-res KIND PATH start connectStart secureConnectionStart connectEnd
    /// requestStart responseStart responseEnd` line (see [`crate::site`]).
    pub fn parse(line: &str) -> Result<Fetch, String> {
        let mut w = line.split_whitespace();
        if w.next() != Some("satstp-res") {
            return Err(format!("not a fetch line: '{line}'"));
        }
        let kind = w.next().ok_or_else(|| format!("no kind in '{line}'"))?;
        let path = w.next().ok_or_else(|| format!("no path in '{line}'"))?;
        let mut t = [0.0f64; 7];
        for (i, slot) in t.iter_mut().enumerate() {
            let v = w
                .next()
                .ok_or_else(|| format!("{} of 7 times in '{line}'", i))?;
            *slot = v
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("'{v}' is not a time in '{line}'"))?;
        }
        if w.next().is_some() {
            return Err(format!("more than 7 times in '{line}'"));
        }
        let [start_ms, connect_start_ms, secure_start_ms, connect_end_ms, request_start_ms, response_start_ms, response_end_ms] =
            t;
        Ok(Fetch {
            kind: kind.to_string(),
            path: path.to_string(),
            start_ms,
            connect_start_ms,
            secure_start_ms,
            connect_end_ms,
            request_start_ms,
            response_start_ms,
            response_end_ms,
        })
    }

    /// Connection set-up before TLS (0 on a reused connection).
    pub fn connect_ms(&self) -> f64 {
        (self.connect_end_ms - self.connect_start_ms - self.tls_ms()).max(0.0)
    }

    /// The TLS handshake of a new connection (0 without TLS or on a reused connection).
    pub fn tls_ms(&self) -> f64 {
        if self.secure_start_ms > 0.0 && self.secure_start_ms >= self.connect_start_ms {
            (self.connect_end_ms - self.secure_start_ms).max(0.0)
        } else {
            0.0
        }
    }

    /// Started → request sent, less the connection set-up (TLS included).
    pub fn queue_ms(&self) -> f64 {
        (self.request_start_ms - self.start_ms - self.connect_ms() - self.tls_ms()).max(0.0)
    }

    /// Request sent → first byte of the response.
    pub fn wait_ms(&self) -> f64 {
        (self.response_start_ms - self.request_start_ms).max(0.0)
    }

    /// First → last byte of the response.
    pub fn receive_ms(&self) -> f64 {
        (self.response_end_ms - self.response_start_ms).max(0.0)
    }
}

/// One fetch on the critical path.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Index into the waterfall.
    pub fetch: usize,
    /// Its predecessor's last byte → the fetch started (the page: its start, 0).
    pub gap_ms: f64,
}

/// The critical path of a load and the sums of its parts (milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct CriticalPath {
    /// From the page to the fetch that ended last.
    pub steps: Vec<Step>,
    pub gap_ms: f64,
    pub queue_ms: f64,
    pub connect_ms: f64,
    /// TLS handshakes of new connections on the path.
    pub tls_ms: f64,
    pub wait_ms: f64,
    pub receive_ms: f64,
    /// Last fetch's end → the load event.
    pub tail_ms: f64,
}

impl CriticalPath {
    /// Sequential requests on the path.
    pub fn requests(&self) -> usize {
        self.steps.len()
    }

    /// The parts' sum (the load time).
    pub fn total_ms(&self) -> f64 {
        self.gap_ms
            + self.queue_ms
            + self.connect_ms
            + self.tls_ms
            + self.wait_ms
            + self.receive_ms
            + self.tail_ms
    }
}

/// The critical path of a load of `load_ms` whose fetches are `fetches` (see the module
/// documentation); `referrer` names the object that references a path (`None` for the page).
/// `None` when there is no fetch or a needed referrer was not fetched.
pub fn critical_path(
    fetches: &[Fetch],
    load_ms: f64,
    referrer: impl Fn(&str) -> Option<String>,
) -> Option<CriticalPath> {
    let last = (0..fetches.len()).max_by(|a, b| {
        fetches[*a]
            .response_end_ms
            .total_cmp(&fetches[*b].response_end_ms)
    })?;
    let mut chain = vec![last];
    let mut at = last;
    loop {
        let start = fetches[at].start_ms;
        let waited_for = (0..fetches.len())
            .filter(|i| *i != at && fetches[*i].response_end_ms <= start)
            .max_by(|a, b| {
                fetches[*a]
                    .response_end_ms
                    .total_cmp(&fetches[*b].response_end_ms)
            });
        at = match waited_for {
            Some(i) => i,
            None => match referrer(&fetches[at].path) {
                Some(parent) => fetches.iter().position(|f| f.path == parent)?,
                None => break,
            },
        };
        if chain.contains(&at) {
            return None;
        }
        chain.push(at);
    }
    chain.reverse();
    let mut path = CriticalPath {
        steps: Vec::new(),
        gap_ms: 0.0,
        queue_ms: 0.0,
        connect_ms: 0.0,
        tls_ms: 0.0,
        wait_ms: 0.0,
        receive_ms: 0.0,
        tail_ms: (load_ms - fetches[last].response_end_ms).max(0.0),
    };
    let mut previous_end = 0.0;
    for i in chain {
        let f = &fetches[i];
        let gap_ms = f.start_ms - previous_end;
        path.gap_ms += gap_ms;
        path.queue_ms += f.queue_ms();
        path.connect_ms += f.connect_ms();
        path.tls_ms += f.tls_ms();
        path.wait_ms += f.wait_ms();
        path.receive_ms += f.receive_ms();
        path.steps.push(Step { fetch: i, gap_ms });
        previous_end = f.response_end_ms;
    }
    Some(path)
}

/// The waterfall as a table (fetches in the order they started) and the critical path with its
/// parts, `rtt_ms` the path's round trip.
pub fn render(fetches: &[Fetch], path: Option<&CriticalPath>, load_ms: f64, rtt_ms: f64) -> String {
    let mut order: Vec<usize> = (0..fetches.len()).collect();
    order.sort_by(|a, b| fetches[*a].start_ms.total_cmp(&fetches[*b].start_ms));
    let on_path = |i: usize| path.is_some_and(|p| p.steps.iter().any(|s| s.fetch == i));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<2}{:<24} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "path", "kind", "start", "queue", "connect", "tls", "wait", "receive", "end"
    );
    for i in order {
        let f = &fetches[i];
        let _ = writeln!(
            out,
            "  {:<2}{:<24} {:<10} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            if on_path(i) { "*" } else { "" },
            f.path.trim_start_matches("/site/"),
            f.kind,
            f.start_ms,
            f.queue_ms(),
            f.connect_ms(),
            f.tls_ms(),
            f.wait_ms(),
            f.receive_ms(),
            f.response_end_ms
        );
    }
    match path {
        Some(p) => {
            let names: Vec<&str> = p
                .steps
                .iter()
                .map(|s| fetches[s.fetch].path.trim_start_matches("/site/"))
                .collect();
            let _ = writeln!(
                out,
                "  critical path (*): {} — {} requests; load {:.0} ms = gap {:.0} + queue {:.0} + connect {:.0} + tls {:.0} + wait {:.0} + receive {:.0} + tail {:.0}",
                names.join(" → "),
                p.requests(),
                load_ms,
                p.gap_ms,
                p.queue_ms,
                p.connect_ms,
                p.tls_ms,
                p.wait_ms,
                p.receive_ms,
                p.tail_ms
            );
            let rounds = p.requests() as f64 * rtt_ms;
            let _ = writeln!(
                out,
                "  {} requests × RTT {:.0} ms = {:.0} ms; not explained by them: {:.0} ms (wait beyond one RTT per request: {:.0} ms)",
                p.requests(),
                rtt_ms,
                rounds,
                load_ms - rounds,
                p.wait_ms - rounds
            );
        }
        None => {
            let _ = writeln!(out, "  (no critical path: a referrer was not fetched)");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(path: &str, t: [f64; 6]) -> Fetch {
        Fetch {
            kind: "x".into(),
            path: path.into(),
            start_ms: t[0],
            connect_start_ms: t[1],
            secure_start_ms: 0.0,
            connect_end_ms: t[2],
            request_start_ms: t[3],
            response_start_ms: t[4],
            response_end_ms: t[5],
        }
    }

    fn referrer(path: &str) -> Option<String> {
        match path {
            "/a.css" | "/img.svg" => Some("/index.html".into()),
            "/b.css" => Some("/a.css".into()),
            _ => None,
        }
    }

    #[test]
    fn a_line_parses_and_bad_lines_are_errors() {
        let f = Fetch::parse("satstp-res link /site/css/main.css 610.5 0 0 0 700 1300 1310.2")
            .expect("parses");
        assert_eq!(f.kind, "link");
        assert_eq!(f.path, "/site/css/main.css");
        assert_eq!(f.queue_ms(), 700.0 - 610.5);
        assert_eq!(f.wait_ms(), 600.0);
        for bad in [
            "satstp-load x",
            "satstp-res link /a 1 2 3 4 5 6",
            "satstp-res link /a 1 2 3 4 5 6 7 8",
            "satstp-res link /a 1 2 3 4 5 6 x",
            "satstp-res link /a 1 2 3 4 5 6 -7",
        ] {
            assert!(Fetch::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_path_follows_referrers_from_the_last_fetch_and_its_parts_add_up() {
        let fetches = vec![
            // The page: a new connection of 600 ms, a 600 ms request, 10 ms of body.
            fetch("/index.html", [0.0, 0.0, 600.0, 600.0, 1200.0, 1210.0]),
            // Started 20 ms after the page ended, queued 100 ms behind another request.
            fetch("/a.css", [1230.0, 0.0, 0.0, 1330.0, 1930.0, 1940.0]),
            // Ends later than b.css but is not its referrer's child: not on b.css's path.
            fetch("/img.svg", [1231.0, 0.0, 0.0, 1231.0, 1831.0, 2000.0]),
            fetch("/b.css", [1945.0, 0.0, 0.0, 1945.0, 2545.0, 2550.0]),
        ];
        let p = critical_path(&fetches, 2600.0, referrer).expect("path");
        let chain: Vec<usize> = p.steps.iter().map(|s| s.fetch).collect();
        assert_eq!(chain, vec![0, 1, 3]);
        assert_eq!(p.requests(), 3);
        assert_eq!(p.connect_ms, 600.0);
        assert_eq!(p.queue_ms, 100.0);
        assert_eq!(p.wait_ms, 1800.0);
        assert_eq!(p.receive_ms, 25.0);
        assert_eq!(p.gap_ms, 20.0 + 5.0);
        assert_eq!(p.tail_ms, 50.0);
        assert_eq!(p.total_ms(), 2600.0);
        let text = render(&fetches, Some(&p), 2600.0, 600.0);
        assert!(
            text.contains("index.html → /a.css → /b.css — 3 requests"),
            "{text}"
        );
        assert!(text.contains("not explained by them: 800 ms"), "{text}");
    }

    #[test]
    fn a_fetch_waits_for_what_ended_last_before_it_started() {
        // A script referenced by the page runs only once a style sheet imported by another has
        // arrived; what it inserts is fetched then. The path goes through the style sheets.
        let referrer = |p: &str| match p {
            "/a.css" | "/s.js" => Some("/index.html".to_string()),
            "/b.css" => Some("/a.css".to_string()),
            "/w.js" => Some("/s.js".to_string()),
            _ => None,
        };
        let fetches = vec![
            fetch("/index.html", [0.0, 0.0, 0.0, 0.0, 600.0, 620.0]),
            // Both found while the page arrived.
            fetch("/a.css", [610.0, 0.0, 0.0, 621.0, 1221.0, 1225.0]),
            fetch("/s.js", [611.0, 0.0, 0.0, 621.0, 1221.0, 1230.0]),
            fetch("/b.css", [1226.0, 0.0, 0.0, 1226.0, 1826.0, 1830.0]),
            fetch("/w.js", [1835.0, 0.0, 0.0, 1835.0, 2435.0, 2440.0]),
        ];
        let p = critical_path(&fetches, 2450.0, referrer).expect("path");
        let chain: Vec<usize> = p.steps.iter().map(|s| s.fetch).collect();
        assert_eq!(chain, vec![0, 1, 3, 4]);
        assert_eq!(p.gap_ms, 0.0 + (610.0 - 620.0) + 1.0 + 5.0);
        assert_eq!(p.total_ms(), 2450.0);
    }

    #[test]
    fn a_tls_handshake_is_split_from_the_connection_set_up() {
        // TCP (or SOCKS5) 0–600 ms, TLS 600–1200 ms, the request one round trip more.
        let f = Fetch::parse("satstp-res navigation /index.html 0 0 600 1200 1200 1800 1810")
            .expect("parses");
        assert_eq!(f.connect_ms(), 600.0);
        assert_eq!(f.tls_ms(), 600.0);
        assert_eq!(f.queue_ms(), 0.0);
        let fetches = [f];
        let p = critical_path(&fetches, 1900.0, |_| None).expect("path");
        assert_eq!((p.connect_ms, p.tls_ms, p.wait_ms), (600.0, 600.0, 600.0));
        assert_eq!(p.total_ms(), 1900.0);
        let text = render(&fetches, Some(&p), 1900.0, 600.0);
        assert!(text.contains("connect 600 + tls 600 + wait 600"), "{text}");
    }

    #[test]
    fn a_missing_referrer_gives_no_path() {
        let fetches = vec![fetch("/b.css", [0.0, 0.0, 0.0, 0.0, 600.0, 610.0])];
        assert!(critical_path(&fetches, 700.0, referrer).is_none());
        assert!(critical_path(&[], 700.0, referrer).is_none());
    }
}
