//! The one TOML (serde) schema of [`Config`]: the `[terminal.stp]` / `[gateway.stp]` tables of
//! the gateway's files and the `[flow.stp]` tables of the simulator's scenarios are both
//! [`ConfigOptions`], overrides applied to a base configuration. Keys are the engine's field
//! names, units in the name (`max_datagram_bytes`, `recv_buffer_bytes`, `rate_bps`,
//! `pacing_granularity_us`); `*_bps` values are a number or a string with a unit as on the
//! command line (`"5Mbps"`), `*_bytes` values a number or a size (`"4MiB"`, `"64KB"`).
//!
//! The older scenario spellings (`max_datagram`, `recv_buffer`, `rate`, `pacing_granularity`,
//! ...) are rejected with a message naming the new key, so a file written for an older version
//! fails loudly at load instead of running with a default in place of the value it sets.
//!
//! Compiled with the `serde` feature, which adds `serde` and `linkmodel` (for its unit parsers)
//! to the engine's dependencies; the engine itself needs neither.

use crate::config::{Config, ConfigError, CongestionMode, InitialWindow, Profile};
use serde::de::{self, Deserializer, IgnoredAny};
use serde::Deserialize;

/// Congestion controller names accepted in `congestion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CongestionName {
    /// TCP-equivalent window control (the engine's default).
    Window,
    /// A fixed sending rate, `rate_bps`.
    Rate,
}

/// Overrides of [`Config`]; every key left out keeps the base configuration's value (the
/// engine's defaults are listed on [`Config`] and in `docs/stp-spec.md` §8). Unknown keys are
/// errors; bad values are named by [`ConfigOptions::apply`] (its error's `field` is the key).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(try_from = "RawOptions")]
pub struct ConfigOptions {
    /// A named set of options applied first ("default" or "thesis", spec §11a); the other
    /// keys override it.
    pub profile: Option<Profile>,
    /// "window" or "rate".
    pub congestion: Option<CongestionName>,
    /// Sending rate with `congestion = "rate"`, bit/s of datagram bytes; required with it.
    pub rate_bps: Option<u64>,
    /// A number of packets (bare or quoted), or "4kss" (RFC 3390).
    pub initial_window: Option<InitialWindow>,
    pub polls_per_rtt: Option<u32>,
    pub poll_every_sds: Option<u32>,
    pub max_datagram_bytes: Option<u16>,
    pub send_buffer_bytes: Option<u32>,
    pub recv_buffer_bytes: Option<u32>,
    pub min_rate_bps: Option<u64>,
    pub max_rate_bps: Option<u64>,
    /// Budget for feedback travelling without data on the return channel, bit/s.
    pub reverse_rate_bps: Option<u64>,
    pub pacing_granularity_us: Option<u32>,
    pub min_poll_interval_ms: Option<u32>,
    pub max_poll_interval_ms: Option<u32>,
    pub poll_miss_threshold: Option<u32>,
    pub small_window_packets: Option<u32>,
    pub reorder_threshold: Option<u32>,
    pub max_pending_gaps: Option<u32>,
    pub initial_rtt_ms: Option<u32>,
    pub handshake_timeout_ms: Option<u32>,
    pub keepalive_interval_ms: Option<u32>,
    pub dead_timeout_ms: Option<u32>,
    /// Window controller: back off when an RTT sample exceeds the smallest by this many ms.
    pub window_rtt_backoff_ms: Option<u32>,
    /// Window controller: send the first flight unpaced.
    pub unpaced_first_flight: Option<bool>,
    /// Window controller: one pacing gain for every phase.
    pub pacing_gain: Option<f64>,
    /// Window controller: the report allowance (spec §7.2a).
    pub report_allowance: Option<bool>,
    /// Pace over min(srtt, 2 · smallest RTT) rather than srtt.
    pub pacing_rtt_cap: Option<bool>,
    /// Window controller: leave slow start when the RTT rises above the smallest (spec §7.2c).
    pub slow_start_delay_exit: Option<bool>,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

impl ConfigOptions {
    /// `base` with every set option applied, then validated; the error's `field` is the key
    /// (`rate_bps` for the rate controller's rate).
    pub fn apply(&self, base: Config) -> Result<Config, ConfigError> {
        let mut c = base;
        if let Some(p) = self.profile {
            p.apply_to(&mut c);
        }
        match (self.congestion, self.rate_bps) {
            (Some(CongestionName::Window), Some(_)) => {
                return Err(bad(
                    "rate_bps",
                    "only meaningful with congestion = \"rate\"",
                ));
            }
            (Some(CongestionName::Window), None) => c.congestion = CongestionMode::Window,
            (Some(CongestionName::Rate), Some(rate_bps)) | (None, Some(rate_bps)) => {
                if self.congestion.is_none() && !matches!(c.congestion, CongestionMode::Rate { .. })
                {
                    return Err(bad("rate_bps", "set without congestion = \"rate\""));
                }
                c.congestion = CongestionMode::Rate { rate_bps };
            }
            (Some(CongestionName::Rate), None) => {
                if !matches!(c.congestion, CongestionMode::Rate { .. }) {
                    return Err(bad("rate_bps", "required with congestion = \"rate\""));
                }
            }
            (None, None) => {}
        }
        if let Some(iw) = self.initial_window {
            c.initial_window = iw;
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = v; } )* };
        }
        macro_rules! set_opt {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = Some(v); } )* };
        }
        set!(
            polls_per_rtt,
            poll_every_sds,
            max_datagram_bytes,
            send_buffer_bytes,
            recv_buffer_bytes,
            pacing_granularity_us,
            min_poll_interval_ms,
            max_poll_interval_ms,
            poll_miss_threshold,
            small_window_packets,
            reorder_threshold,
            max_pending_gaps,
            initial_rtt_ms,
            handshake_timeout_ms,
            keepalive_interval_ms,
            dead_timeout_ms,
            unpaced_first_flight,
            report_allowance,
            pacing_rtt_cap,
            slow_start_delay_exit
        );
        set_opt!(
            min_rate_bps,
            max_rate_bps,
            reverse_rate_bps,
            window_rtt_backoff_ms,
            pacing_gain
        );
        c.validate().map_err(|e| {
            // The engine names the rate controller's rate `congestion.rate_bps`; the key is
            // `rate_bps`.
            let field = if e.field == "congestion.rate_bps" {
                "rate_bps"
            } else {
                e.field
            };
            bad(field, e.reason)
        })?;
        Ok(c)
    }
}

/// A rate in bit/s: a number, or a string with a unit (`"5Mbps"`, `"512kbps"`, `"1.5Mb/s"`).
#[derive(Debug, Clone, Copy)]
struct Rate(u64);

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        linkmodel::units::serde::rate_bps(d).map(Rate)
    }
}

/// A byte count: a number, or a string with a unit (`"64KB"`, `"4MiB"`).
#[derive(Debug, Clone, Copy)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        linkmodel::units::serde::bytes(d).map(Size)
    }
}

/// `initial_window`: packets (bare or quoted) or "4kss".
#[derive(Deserialize)]
#[serde(from = "linkmodel::units::serde::CountOrText")]
enum WindowText {
    Packets(u32),
    Named(String),
}

impl From<linkmodel::units::serde::CountOrText> for WindowText {
    fn from(v: linkmodel::units::serde::CountOrText) -> WindowText {
        match v {
            linkmodel::units::serde::CountOrText::Count(n) => WindowText::Packets(n),
            linkmodel::units::serde::CountOrText::Text(t) => WindowText::Named(t),
        }
    }
}

/// Declares the table as written ([`RawOptions`]) and its map visitor: each key deserialized
/// with its own type (so the parser's error points at it), the older spellings refused by name,
/// and unknown keys refused listing the current ones only.
macro_rules! raw_options {
    ($($key:ident: $ty:ty),* $(,)?) => {
        #[derive(Default)]
        struct RawOptions {
            $($key: Option<$ty>,)*
        }

        const KEYS: &[&str] = &[$(stringify!($key)),*];

        impl<'de> Deserialize<'de> for RawOptions {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl<'de> de::Visitor<'de> for Visitor {
                    type Value = RawOptions;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a table of STP options")
                    }
                    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawOptions, A::Error> {
                        let mut r = RawOptions::default();
                        while let Some(key) = map.next_key::<String>()? {
                            match key.as_str() {
                                $(stringify!($key) => {
                                    if r.$key.is_some() {
                                        return Err(de::Error::duplicate_field(stringify!($key)));
                                    }
                                    r.$key = Some(map.next_value()?);
                                })*
                                other => {
                                    if let Some((was, now, unit)) =
                                        RENAMED.iter().find(|(was, _, _)| *was == other)
                                    {
                                        return Err(de::Error::custom(format!(
                                            "`{was}` is now spelled `{now}` ({unit}); the STP \
                                             options use the engine's names, units in the name, \
                                             in scenarios and gateway files alike"
                                        )));
                                    }
                                    map.next_value::<IgnoredAny>()?;
                                    return Err(de::Error::unknown_field(other, KEYS));
                                }
                            }
                        }
                        Ok(r)
                    }
                }
                d.deserialize_map(Visitor)
            }
        }
    };
}

raw_options! {
    profile: String,
    congestion: CongestionName,
    rate_bps: Rate,
    initial_window: WindowText,
    polls_per_rtt: u32,
    poll_every_sds: u32,
    max_datagram_bytes: u16,
    send_buffer_bytes: Size,
    recv_buffer_bytes: Size,
    min_rate_bps: Rate,
    max_rate_bps: Rate,
    reverse_rate_bps: Rate,
    pacing_granularity_us: u32,
    min_poll_interval_ms: u32,
    max_poll_interval_ms: u32,
    poll_miss_threshold: u32,
    small_window_packets: u32,
    reorder_threshold: u32,
    max_pending_gaps: u32,
    initial_rtt_ms: u32,
    handshake_timeout_ms: u32,
    keepalive_interval_ms: u32,
    dead_timeout_ms: u32,
    window_rtt_backoff_ms: u32,
    unpaced_first_flight: bool,
    pacing_gain: f64,
    report_allowance: bool,
    pacing_rtt_cap: bool,
    slow_start_delay_exit: bool,
}

/// Older keys and what replaced them.
const RENAMED: [(&str, &str, &str); 8] = [
    ("max_datagram", "max_datagram_bytes", "bytes"),
    (
        "recv_buffer",
        "recv_buffer_bytes",
        "bytes, or a size such as \"4MiB\"",
    ),
    (
        "send_buffer",
        "send_buffer_bytes",
        "bytes, or a size such as \"4MiB\"",
    ),
    ("rate", "rate_bps", "bit/s, or a rate such as \"1.5Mbps\""),
    (
        "reverse_rate",
        "reverse_rate_bps",
        "bit/s, or a rate such as \"800bps\"",
    ),
    (
        "min_rate",
        "min_rate_bps",
        "bit/s, or a rate such as \"1Mbps\"",
    ),
    (
        "max_rate",
        "max_rate_bps",
        "bit/s, or a rate such as \"1Mbps\"",
    ),
    (
        "pacing_granularity",
        "pacing_granularity_us",
        "microseconds",
    ),
];

fn narrow<T: TryFrom<u64>>(v: Option<u64>, key: &str) -> Result<Option<T>, String> {
    v.map(|v| T::try_from(v).map_err(|_| format!("{key}: {v} is too large")))
        .transpose()
}

impl TryFrom<RawOptions> for ConfigOptions {
    type Error = String;

    fn try_from(r: RawOptions) -> Result<Self, String> {
        let initial_window = match r.initial_window {
            None => None,
            Some(WindowText::Packets(n)) => Some(InitialWindow::Packets(n)),
            Some(WindowText::Named(s)) if s.eq_ignore_ascii_case("4kss") => {
                Some(InitialWindow::FourKss)
            }
            // A count in quotes, as a scenario's TCP `initial_window` also allows.
            Some(WindowText::Named(s)) if s.parse::<u32>().is_ok() => {
                s.parse().ok().map(InitialWindow::Packets)
            }
            Some(WindowText::Named(s)) => {
                return Err(format!(
                    "initial_window: {s:?} is not a number of packets or \"4kss\""
                ))
            }
        };
        let profile = match r.profile {
            None => None,
            Some(name) => Some(Profile::from_name(&name).ok_or_else(|| {
                format!(
                    "profile: {name:?} is not a profile; accepted: {}",
                    Profile::NAMES.join(", ")
                )
            })?),
        };
        Ok(ConfigOptions {
            profile,
            congestion: r.congestion,
            rate_bps: r.rate_bps.map(|x| x.0),
            initial_window,
            polls_per_rtt: r.polls_per_rtt,
            poll_every_sds: r.poll_every_sds,
            max_datagram_bytes: r.max_datagram_bytes,
            send_buffer_bytes: narrow(r.send_buffer_bytes.map(|x| x.0), "send_buffer_bytes")?,
            recv_buffer_bytes: narrow(r.recv_buffer_bytes.map(|x| x.0), "recv_buffer_bytes")?,
            min_rate_bps: r.min_rate_bps.map(|x| x.0),
            max_rate_bps: r.max_rate_bps.map(|x| x.0),
            reverse_rate_bps: r.reverse_rate_bps.map(|x| x.0),
            pacing_granularity_us: r.pacing_granularity_us,
            min_poll_interval_ms: r.min_poll_interval_ms,
            max_poll_interval_ms: r.max_poll_interval_ms,
            poll_miss_threshold: r.poll_miss_threshold,
            small_window_packets: r.small_window_packets,
            reorder_threshold: r.reorder_threshold,
            max_pending_gaps: r.max_pending_gaps,
            initial_rtt_ms: r.initial_rtt_ms,
            handshake_timeout_ms: r.handshake_timeout_ms,
            keepalive_interval_ms: r.keepalive_interval_ms,
            dead_timeout_ms: r.dead_timeout_ms,
            window_rtt_backoff_ms: r.window_rtt_backoff_ms,
            unpaced_first_flight: r.unpaced_first_flight,
            pacing_gain: r.pacing_gain,
            report_allowance: r.report_allowance,
            pacing_rtt_cap: r.pacing_rtt_cap,
            slow_start_delay_exit: r.slow_start_delay_exit,
        })
    }
}

/// A TOML error as a person reads it, for every file in this schema's family (the gateway's
/// configuration, the simulator's scenarios): an unknown key is pointed at itself, not at its
/// table's header (where the TOML parser points), and Rust type names in the parser's message
/// are put in words with their range (`expected u16` → `expected a whole number from 0 to
/// 65535`). `shown` is the parser's own text, returned unchanged when neither applies.
pub fn toml_error_in_words(
    text: &str,
    shown: &str,
    message: &str,
    span: Option<std::ops::Range<usize>>,
) -> String {
    let worded = type_names_in_words(message);
    let key_span = span.clone().and_then(|sp| {
        let key = message.strip_prefix("unknown field `")?.split('`').next()?;
        find_key(text, sp.start, key)
    });
    if worded == message && key_span.is_none() {
        return shown.to_string();
    }
    match key_span.or(span) {
        Some(sp) => render(text, &worded, sp),
        None => worded,
    }
}

/// Serde's type names in words.
fn type_names_in_words(message: &str) -> String {
    let mut out = message.to_string();
    for (name, words) in [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u64", "a whole number, 0 or more"),
        ("usize", "a whole number, 0 or more"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        let pattern = format!("expected {name}");
        let mut from = 0;
        while let Some(i) = out[from..].find(&pattern).map(|i| i + from) {
            let end = i + pattern.len();
            if out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                from = end;
                continue;
            }
            out.replace_range(i..end, &format!("expected {words}"));
            from = i;
        }
    }
    if let Some(i) = out.find("data did not match any variant of untagged enum") {
        out.replace_range(i.., "the value has none of the forms this key accepts");
    }
    out
}

/// The span of `key` as written in the table that starts at byte `table_start`: the first line
/// of that table (up to the next header) that assigns it.
fn find_key(text: &str, table_start: usize, key: &str) -> Option<std::ops::Range<usize>> {
    let line_start = text.get(..table_start)?.rfind('\n').map_or(0, |i| i + 1);
    let mut offset = line_start;
    for (n, line) in text[line_start..].split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if n > 0 && trimmed.starts_with('[') {
            return None;
        }
        let indent = line.len() - trimmed.len();
        for candidate in [key.to_string(), format!("\"{key}\"")] {
            if let Some(rest) = trimmed.strip_prefix(candidate.as_str()) {
                if rest.trim_start().starts_with(['=', '.']) {
                    let start = offset + indent;
                    return Some(start..start + candidate.len());
                }
            }
        }
        offset += line.len();
    }
    None
}

/// The parser's layout: where, the line, carets under the span, the message.
fn render(text: &str, message: &str, span: std::ops::Range<usize>) -> String {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = text[line_start..line_end].trim_end_matches('\r');
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let width = text
        .get(start..span.end.min(line_end).max(start))
        .map_or(1, |s| s.chars().count().max(1));
    let gutter = " ".repeat(line_no.to_string().len());
    format!(
        "TOML parse error at line {line_no}, column {column}\n{gutter} |\n{line_no} | {line}\n\
         {gutter} | {}{}\n{message}\n",
        " ".repeat(column - 1),
        "^".repeat(width)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_errors_point_at_the_key_and_name_no_rust_type() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: u16,
            #[serde(default)]
            b: u32,
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct F {
            t: T,
        }
        let words = |text: &str| {
            let e = toml::from_str::<F>(text).unwrap_err();
            toml_error_in_words(text, &e.to_string(), e.message(), e.span())
        };
        let e = words("[t]\na = 1\nbogus = 2\n");
        assert!(e.contains("line 3, column 1"), "{e}");
        assert!(e.contains("3 | bogus = 2\n  | ^^^^^\n"), "{e}");
        let e = words("[t]\na = 100000\n");
        assert!(e.contains("expected a whole number from 0 to 65535"), "{e}");
        assert!(!e.contains("u16"), "{e}");
        let e = words("[t]\na = 1\nb = \"600ms\"\n");
        assert!(
            e.contains("expected a whole number from 0 to 4294967295"),
            "{e}"
        );
        // Nothing to change: the parser's text as it was.
        let text = "[t\n";
        let e = toml::from_str::<F>(text).unwrap_err();
        assert_eq!(
            toml_error_in_words(text, &e.to_string(), e.message(), e.span()),
            e.to_string()
        );
    }

    fn parse(text: &str) -> Result<ConfigOptions, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn keys_are_the_engine_names_and_take_units() {
        let o = parse(
            "max_datagram_bytes = 1200\nrecv_buffer_bytes = \"64KiB\"\nsend_buffer_bytes = 100000\n\
             reverse_rate_bps = \"800bps\"\nmax_rate_bps = 5000000\ninitial_window = \"4KSS\"\n\
             pacing_granularity_us = 500",
        )
        .unwrap();
        let c = o.apply(Config::default()).unwrap();
        assert_eq!(c.max_datagram_bytes, 1200);
        assert_eq!(c.recv_buffer_bytes, 65_536);
        assert_eq!(c.send_buffer_bytes, 100_000);
        assert_eq!(c.reverse_rate_bps, Some(800));
        assert_eq!(c.max_rate_bps, Some(5_000_000));
        assert_eq!(c.initial_window, InitialWindow::FourKss);
        assert_eq!(c.pacing_granularity_us, 500);
        let o = parse("initial_window = \"3\"").unwrap();
        assert_eq!(o.initial_window, Some(InitialWindow::Packets(3)));
        let c = parse("congestion = \"rate\"\nrate_bps = \"1.5Mbps\"")
            .unwrap()
            .apply(Config::default())
            .unwrap();
        assert_eq!(
            c.congestion,
            CongestionMode::Rate {
                rate_bps: 1_500_000
            }
        );
    }

    #[test]
    fn the_thesis_profile_is_applied_first_and_keys_override_it() {
        let c = parse("profile = \"thesis\"\nrecv_buffer_bytes = \"64KiB\"")
            .unwrap()
            .apply(Config::default())
            .unwrap();
        assert_eq!(c.pacing_gain, Some(1.0));
        assert_eq!(c.pacing_granularity_us, 10_000);
        assert!(!c.report_allowance && !c.pacing_rtt_cap);
        assert_eq!(c.initial_window, InitialWindow::Packets(1));
        assert_eq!(c.recv_buffer_bytes, 65_536);
        let c = parse("profile = \"thesis\"\ninitial_window = \"4kss\"\nreport_allowance = true")
            .unwrap()
            .apply(Config::default())
            .unwrap();
        assert_eq!(
            c.initial_window,
            InitialWindow::FourKss,
            "a key beats the profile"
        );
        assert!(c.report_allowance);
        let e = parse("profile = \"seeds\"").unwrap_err();
        assert!(
            e.contains("profile: \"seeds\" is not a profile; accepted: default, thesis"),
            "{e}"
        );
    }

    #[test]
    fn older_spellings_name_the_new_key() {
        for (old, new) in [
            ("max_datagram = 1000", "max_datagram_bytes"),
            ("recv_buffer = \"64KB\"", "recv_buffer_bytes"),
            ("rate = \"1Mbps\"", "rate_bps"),
            ("pacing_granularity = \"1ms\"", "pacing_granularity_us"),
        ] {
            let e = parse(old).unwrap_err();
            assert!(e.contains(&format!("is now spelled `{new}`")), "{old}: {e}");
        }
        let e = parse("max_datagram_byte = 1000").unwrap_err();
        assert!(e.contains("unknown field `max_datagram_byte`"), "{e}");
        assert!(
            e.contains("`max_datagram_bytes`") && !e.contains("`max_datagram`"),
            "the keys listed are the current ones: {e}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let field = |text: &str| {
            parse(text)
                .unwrap()
                .apply(Config::default())
                .unwrap_err()
                .field
        };
        assert_eq!(field("max_datagram_bytes = 10"), "max_datagram_bytes");
        assert_eq!(field("polls_per_rtt = 0"), "polls_per_rtt");
        assert_eq!(field("pacing_gain = 0.5"), "pacing_gain");
        let c = parse("pacing_gain = 1.0")
            .unwrap()
            .apply(Config::default())
            .unwrap();
        assert_eq!(c.pacing_gain, Some(1.0));
        assert_eq!(field("congestion = \"rate\""), "rate_bps");
        assert_eq!(
            field("congestion = \"window\"\nrate_bps = 1000000"),
            "rate_bps"
        );
        assert_eq!(field("congestion = \"rate\"\nrate_bps = 10"), "rate_bps");
        let e = parse("recv_buffer_bytes = \"8GB\"").unwrap_err();
        assert!(
            e.contains("recv_buffer_bytes: 8000000000 is too large"),
            "{e}"
        );
        let e = parse("initial_window = \"huge\"").unwrap_err();
        assert!(e.contains("initial_window"), "{e}");
        let e = parse("reverse_rate_bps = \"5Mbs\"").unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
    }
}
