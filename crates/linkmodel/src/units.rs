//! Quantities written by people — rates, sizes and durations — read the same way everywhere:
//! every command-line flag, the gateway's configuration files and the simulator's scenarios
//! call these parsers, and print with [`format_rate_bps`], [`format_bytes`] and
//! [`format_duration_ns`], which these parsers read back exactly.
//!
//! The rules (docs/units.md):
//! - **Rates**: a bare number is bit/s. A unit is a prefix, `b` (bits) or `B` (bytes), then
//!   `ps` or `/s`: `64kbps`, `1.5Mb/s`, `5MBps`, `5 MB/s` (40 Mbit/s), `1Gibps`. `bit` and
//!   `byte` may be spelled out (`512kbit/s`, `2Mbyte/s`). The case of the `b` is honoured.
//!   Ambiguous forms are refused with a hint: a lower-case `m` (`5mbps` — milli?), a unit
//!   without `b` or `B` (`5M`, `5Mps`), all-capitals `BPS`.
//! - **Sizes**: bytes. A bare number, or a prefix and `B`: `1500B`, `64KB` or `64kB` (×1000),
//!   `64KiB` (×1024), `20MB`, `4MiB`, `1GB`, `1GiB`, `1TB`. A lower-case `b` (bits) is refused.
//! - **Prefixes**: `k`/`K` = 10³, `M` = 10⁶, `G` = 10⁹, `T` = 10¹²; `Ki`, `Mi`, `Gi`, `Ti` =
//!   2¹⁰, 2²⁰, 2³⁰, 2⁴⁰.
//! - **Durations**: a number and one of `ns`, `us` (or `µs`), `ms`, `s`, `min`, `h`, `d`.
//!   A bare number is refused (which unit?), and so is `m` (minutes or milli?).
//! - Numbers are decimal (`1.5`, `2e3`); whitespace between number and unit is allowed; a
//!   negative number is refused. Values are computed exactly (no float rounding) and rounded to
//!   the nearest unit (bit/s, byte, nanosecond).
//!
//! Errors say what was given and what is accepted; [`serde`] deserializers let a
//! configuration key take a number or a string with a unit and report errors in these words.

use std::fmt;
use thiserror::Error;

/// What was being read: picks the words of the error and its list of accepted forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Rate,
    Size,
    Duration,
}

impl Quantity {
    /// The error for `given`, with the reason `why`.
    fn error(self, given: &str, why: String) -> UnitError {
        UnitError {
            quantity: self,
            given: given.to_string(),
            why,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Quantity::Rate => "rate",
            Quantity::Size => "size",
            Quantity::Duration => "duration",
        }
    }

    /// The accepted forms, in words.
    pub fn accepted(self) -> &'static str {
        match self {
            Quantity::Rate => {
                "a rate is a number of bit/s or a number with a unit: bps, kbps, Mbps, Gbps \
                 (bits) or Bps, kBps, MBps, GBps (bytes), `/s` for `ps` (5Mbps, 5 MB/s, 512kbit/s), \
                 Ki/Mi/Gi for powers of 1024"
            }
            Quantity::Size => {
                "a size is a number of bytes or a number with a unit: B, kB (or KB), MB, GB, TB \
                 (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"
            }
            Quantity::Duration => {
                "a duration is a number with a unit: ns, us (or µs), ms, s, min, h or d \
                 (250ms, 1.5s, 2min, 1h)"
            }
        }
    }
}

/// A quantity that could not be read: what was given, why, and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{why}; {}", quantity.accepted())]
pub struct UnitError {
    pub quantity: Quantity,
    pub given: String,
    /// The reason, naming what was given (`'5 furlongs' has an unknown unit 'furlongs'`).
    pub why: String,
}

/// A decimal number, exactly: `mantissa × 10^exp10`.
struct Decimal {
    mantissa: u128,
    exp10: i32,
}

/// Splits `s` into its number and its unit (trimmed), or says why it cannot.
fn split(s: &str, q: Quantity) -> Result<(Decimal, &str), UnitError> {
    let err = |why: String| q.error(s, why);
    let t = s.trim();
    if t.is_empty() {
        return Err(err(format!("an empty {} was given", q.name())));
    }
    if t.starts_with('-') {
        return Err(err(format!("'{s}' is negative")));
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let bytes = t.as_bytes();
    let mut i = 0;
    let mut mantissa: u128 = 0;
    let mut exp10: i32 = 0;
    let mut digits = 0;
    // Twenty significant digits are kept; further integer digits only scale, further
    // fraction digits are dropped.
    let keep = 10u128.pow(20);
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        if mantissa < keep {
            mantissa = mantissa * 10 + u128::from(bytes[i] - b'0');
        } else {
            exp10 += 1;
        }
        digits += 1;
        i += 1;
    }
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            if mantissa < keep {
                mantissa = mantissa * 10 + u128::from(bytes[i] - b'0');
                exp10 -= 1;
            }
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        return Err(err(format!("'{s}' does not start with a number")));
    }
    // An exponent: `e` or `E`, an optional sign, digits. (`e` starts no unit of ours.)
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        let neg = j < bytes.len() && bytes[j] == b'-';
        if j < bytes.len() && (bytes[j] == b'-' || bytes[j] == b'+') {
            j += 1;
        }
        let start = j;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        if j > start {
            let e: i32 = t[start..j].parse().unwrap_or(i32::MAX).min(100);
            exp10 = exp10.saturating_add(if neg { -e } else { e });
            i = j;
        }
    }
    Ok((Decimal { mantissa, exp10 }, t[i..].trim()))
}

/// `s` read up to its unit, for one parser: errors quote `s`.
struct Reading<'a> {
    s: &'a str,
    quantity: Quantity,
    number: Decimal,
    /// The unit after the number, trimmed (empty when none).
    unit: &'a str,
    /// The number as written (`5` of `5mbps`), for hints.
    n: &'a str,
}

impl<'a> Reading<'a> {
    fn new(s: &'a str, quantity: Quantity) -> Result<Reading<'a>, UnitError> {
        let (number, unit) = split(s, quantity)?;
        Ok(Reading {
            s,
            quantity,
            number,
            unit,
            n: unit_number(s),
        })
    }

    fn err(&self, why: String) -> UnitError {
        self.quantity.error(self.s, why)
    }

    /// The number × `mult`, rounded; out of range above `max` (`max_text` in the error).
    fn value(&self, mult: u128, max: u128, max_text: &str) -> Result<u64, UnitError> {
        scale(&self.number, mult, max)
            .map(|v| v as u64)
            .ok_or_else(|| self.err(format!("'{}' is out of range (at most {max_text})", self.s)))
    }
}

/// `d × mult`, rounded to the nearest integer; `None` when above `max`.
fn scale(d: &Decimal, mult: u128, max: u128) -> Option<u128> {
    if d.mantissa == 0 {
        return Some(0);
    }
    let mut v = d.mantissa.checked_mul(mult)?;
    if d.exp10 >= 0 {
        for _ in 0..d.exp10 {
            v = v.checked_mul(10)?;
        }
    } else {
        match 10u128.checked_pow(d.exp10.unsigned_abs()) {
            Some(div) => v = (v + div / 2) / div,
            None => return Some(0),
        }
    }
    (v <= max).then_some(v)
}

/// The multiplier of an SI or binary prefix written at the start of `unit`, and the rest.
/// Lower-case `m` is reported as ambiguous by the callers, not read here.
fn prefix(unit: &str) -> (u128, &str) {
    for (p, m) in [
        ("Ki", 1u128 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ] {
        if let Some(rest) = unit.strip_prefix(p) {
            return (m, rest);
        }
    }
    for (p, m) in [
        ("k", 1_000u128),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ] {
        if let Some(rest) = unit.strip_prefix(p) {
            return (m, rest);
        }
    }
    (1, unit)
}

/// Largest rate read: 10 Tbit/s.
const MAX_RATE_BPS: u128 = 10_000_000_000_000;
/// Largest size read: 1 PB.
const MAX_BYTES: u128 = 1_000_000_000_000_000;
/// Largest duration read: 10 000 days.
const MAX_DURATION_NS: u128 = 10_000 * 86_400 * 1_000_000_000;

/// Parses a rate into bit/s (see the module's rules). Zero is refused: no link has rate 0.
pub fn parse_rate_bps(s: &str) -> Result<u64, UnitError> {
    let r = Reading::new(s, Quantity::Rate)?;
    let (unit, n, err) = (r.unit, r.n, |why: String| r.err(why));
    let mult = if unit.is_empty() {
        1
    } else {
        if unit.starts_with('m') {
            return Err(err(format!(
                "'{s}' is ambiguous: a lower-case 'm' is milli; write {n}Mbps for megabits/s or \
                 {n}MBps for megabytes/s"
            )));
        }
        if unit.chars().all(|c| !c.is_ascii_lowercase()) && unit.contains("PS") {
            return Err(err(format!(
                "'{s}' is ambiguous: in capitals bits and bytes look alike; write {n}Mbps for \
                 bits/s or {n}MBps for bytes/s"
            )));
        }
        let (pmult, rest) = prefix(unit);
        let per_second = rest
            .strip_suffix("ps")
            .or_else(|| rest.strip_suffix("/s"))
            .map(str::trim_end);
        let Some(body) = per_second else {
            if !matches!(rest, "" | "b" | "B" | "bit" | "bits" | "byte" | "bytes") {
                return Err(err(format!("'{s}' has an unknown unit '{unit}'")));
            }
            return Err(err(format!(
                "'{s}' has no per-second unit ('{unit}'): a rate ends in `ps` or `/s`, as \
                 {n}Mbps or {n} MB/s"
            )));
        };
        let per_unit = match body {
            "b" | "bit" | "bits" => 1,
            "B" | "byte" | "bytes" => 8,
            "" => {
                return Err(err(format!(
                    "'{s}' does not say bits or bytes: write {n}Mbps (bits) or {n}MBps (bytes)"
                )))
            }
            _ => return Err(err(format!("'{s}' has an unknown unit '{unit}'"))),
        };
        pmult * per_unit
    };
    let v = r.value(mult, MAX_RATE_BPS, &format_rate_bps(MAX_RATE_BPS as u64))?;
    if v == 0 {
        return Err(err(format!("rate '{s}' is zero; a rate must be positive")));
    }
    Ok(v)
}

/// The number as written in `s`, for hints (`5` of `5mbps`).
fn unit_number(s: &str) -> &str {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    &t[..end]
}

/// Parses a size into bytes (see the module's rules).
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let r = Reading::new(s, Quantity::Size)?;
    let (unit, n, err) = (r.unit, r.n, |why: String| r.err(why));
    let mult = if unit.is_empty() {
        1
    } else {
        if unit.starts_with('m') {
            return Err(err(format!(
                "'{s}' is ambiguous: a lower-case 'm' is milli; write {n}MB (10⁶ bytes) or \
                 {n}MiB (2²⁰ bytes)"
            )));
        }
        let (pmult, rest) = prefix(unit);
        match rest {
            "B" | "byte" | "bytes" => pmult,
            "b" | "bit" | "bits" => {
                return Err(err(format!(
                    "'{s}' is in bits; sizes are in bytes: write {n}{}B",
                    &unit[..unit.len() - rest.len()]
                )))
            }
            "" if pmult > 1 => {
                return Err(err(format!(
                    "'{s}' has a prefix but no `B`: write {n}{unit}B"
                )))
            }
            _ => return Err(err(format!("'{s}' has an unknown unit '{unit}'"))),
        }
    };
    r.value(mult, MAX_BYTES, "1PB")
}

/// Parses a duration into nanoseconds (see the module's rules).
pub fn parse_duration_ns(s: &str) -> Result<u64, UnitError> {
    let r = Reading::new(s, Quantity::Duration)?;
    let (unit, n, err) = (r.unit, r.n, |why: String| r.err(why));
    let mult: u128 = match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "" => {
            return Err(err(format!(
                "'{s}' has no unit: write {n}ms, {n}s or another unit"
            )))
        }
        "m" => {
            return Err(err(format!(
                "'{s}' is ambiguous: write {n}min for minutes or {n}ms for milliseconds"
            )))
        }
        other => return Err(err(format!("'{s}' has an unknown unit '{other}'"))),
    };
    r.value(mult, MAX_DURATION_NS, "10000d")
}

/// `v / div` as a decimal string without trailing zeros (exact).
fn decimal(v: u64, div: u64) -> String {
    let whole = v / div;
    let frac = v % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let f = format!("{frac:0width$}");
    format!("{whole}.{}", f.trim_end_matches('0'))
}

/// The largest of `steps` (descending multipliers with their unit) that `v` is at least, as
/// `decimal` + unit; the last step is the fallback.
fn pick(v: u64, steps: &[(u64, &str)]) -> String {
    for &(m, u) in steps {
        if v >= m {
            return format!("{}{u}", decimal(v, m));
        }
    }
    let (m, u) = steps[steps.len() - 1];
    format!("{}{u}", decimal(v, m))
}

/// A rate in bit/s for people (`1.5Mbps`); [`parse_rate_bps`] reads it back exactly.
pub fn format_rate_bps(bps: u64) -> String {
    pick(
        bps,
        &[
            (1_000_000_000_000, "Tbps"),
            (1_000_000_000, "Gbps"),
            (1_000_000, "Mbps"),
            (1_000, "kbps"),
            (1, "bps"),
        ],
    )
}

// `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's minimum is 1.85).
#[allow(clippy::manual_is_multiple_of)]
/// A size in bytes for people (`20MB`, `64KiB` when a power of 1024 says it more simply);
/// [`parse_bytes`] reads it back exactly.
pub fn format_bytes(bytes: u64) -> String {
    for (m, u) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= m && bytes % m == 0 && bytes % 1000 != 0 {
            return format!("{}{u}", bytes / m);
        }
    }
    pick(
        bytes,
        &[
            (1_000_000_000_000, "TB"),
            (1_000_000_000, "GB"),
            (1_000_000, "MB"),
            (1_000, "kB"),
            (1, "B"),
        ],
    )
}

#[allow(clippy::manual_is_multiple_of)]
/// A duration in nanoseconds for people (`260ms`, `1.5s`, `2min`); [`parse_duration_ns`]
/// reads it back exactly.
pub fn format_duration_ns(ns: u64) -> String {
    // Minutes, hours and days only when whole, so that the text stays exact and short.
    for (m, u) in [
        (86_400_000_000_000u64, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "min"),
    ] {
        if ns >= m && ns % m == 0 {
            return format!("{}{u}", ns / m);
        }
    }
    pick(
        ns,
        &[
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ],
    )
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Deserializers for configuration keys that take a quantity: a number (in the key's unit:
/// bit/s, bytes, or the unit the caller names) or a string with a unit, with errors in the
/// words of this module (never a serde type name). Use with `#[serde(deserialize_with)]`.
pub mod serde {
    use super::{parse_bytes, parse_duration_ns, parse_rate_bps};
    use ::serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    struct Q {
        /// Reads a string.
        parse: fn(&str) -> Result<u64, super::UnitError>,
        /// A bare number's multiplier into the result's unit (None: numbers refused).
        number_mult: Option<u64>,
        expecting: &'static str,
    }

    impl<'de> Visitor<'de> for Q {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            match self.number_mult {
                Some(m) => v
                    .checked_mul(m)
                    .ok_or_else(|| E::custom(format!("{v} is out of range; {}", self.expecting))),
                None => Err(E::custom(format!("{v} has no unit; {}", self.expecting))),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            if v < 0 {
                return Err(E::custom(format!("{v} is negative; {}", self.expecting)));
            }
            self.visit_u64(v as u64)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            let Some(m) = self.number_mult else {
                return Err(E::custom(format!("{v} has no unit; {}", self.expecting)));
            };
            if !v.is_finite() || v < 0.0 {
                return Err(E::custom(format!("{v} is negative; {}", self.expecting)));
            }
            let r = (v * m as f64).round();
            if r >= u64::MAX as f64 {
                return Err(E::custom(format!(
                    "{v} is out of range; {}",
                    self.expecting
                )));
            }
            Ok(r as u64)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            (self.parse)(v).map_err(E::custom)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<u64, E> {
            Err(E::custom(format!(
                "{v} is not a quantity; {}",
                self.expecting
            )))
        }
    }

    fn read<'de, D: Deserializer<'de>>(d: D, q: Q) -> Result<u64, D::Error> {
        d.deserialize_any(q)
    }

    /// A rate: bit/s as a number, or a string with a unit (`"5Mbps"`, `"5 MB/s"`).
    pub fn rate_bps<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(
            d,
            Q {
                parse: parse_rate_bps,
                number_mult: Some(1),
                expecting: super::Quantity::Rate.accepted(),
            },
        )
    }

    /// A size: bytes as a number, or a string with a unit (`"64KB"`, `"4MiB"`).
    pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(
            d,
            Q {
                parse: parse_bytes,
                number_mult: Some(1),
                expecting: super::Quantity::Size.accepted(),
            },
        )
    }

    /// A duration in nanoseconds: a string with a unit (`"250ms"`); a bare number is refused.
    pub fn duration_ns<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(
            d,
            Q {
                parse: parse_duration_ns,
                number_mult: None,
                expecting: super::Quantity::Duration.accepted(),
            },
        )
    }

    /// A duration in milliseconds for a key named `…_ms`: a number of milliseconds or a
    /// string with a unit (`"600ms"`, `"0.6s"`), rounded to the nearest millisecond.
    pub fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let ns = read(
            d,
            Q {
                parse: parse_duration_ns,
                number_mult: Some(1_000_000),
                expecting: "a number of milliseconds or a duration with a unit: ns, us, ms, s, \
                            min, h or d (600, \"600ms\", \"0.6s\")",
            },
        )?;
        Ok((ns + 500_000) / 1_000_000)
    }

    /// A key that takes a count or a word: `runs = 4` or `runs = "until-5%"`, `initial_window
    /// = 2` or `"4kss"`. Errors say which of the two was expected, never a serde type name.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum CountOrText {
        Count(u32),
        Text(String),
    }

    impl CountOrText {
        /// The value as text (`4`, `4kss`).
        pub fn text(&self) -> String {
            match self {
                CountOrText::Count(n) => n.to_string(),
                CountOrText::Text(t) => t.clone(),
            }
        }
    }

    struct CountOrTextVisitor;

    const COUNT_OR_TEXT: &str = "a whole number from 0 to 4294967295 or a word in quotes";

    impl<'de> Visitor<'de> for CountOrTextVisitor {
        type Value = CountOrText;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(COUNT_OR_TEXT)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<CountOrText, E> {
            u32::try_from(v)
                .map(CountOrText::Count)
                .map_err(|_| E::custom(format!("{v} is too large; expected {COUNT_OR_TEXT}")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<CountOrText, E> {
            if v < 0 {
                return Err(E::custom(format!(
                    "{v} is negative; expected {COUNT_OR_TEXT}"
                )));
            }
            self.visit_u64(v as u64)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<CountOrText, E> {
            Err(E::custom(format!(
                "{v} is not a whole number; expected {COUNT_OR_TEXT}"
            )))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<CountOrText, E> {
            Ok(CountOrText::Text(v.to_string()))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<CountOrText, E> {
            Err(E::custom(format!(
                "{v} is not a count; expected {COUNT_OR_TEXT}"
            )))
        }
    }

    impl<'de> ::serde::Deserialize<'de> for CountOrText {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(CountOrTextVisitor)
        }
    }

    /// [`rate_bps`] for an optional key.
    pub fn opt_rate_bps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        rate_bps(d).map(Some)
    }

    /// [`bytes`] for an optional key.
    pub fn opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        bytes(d).map(Some)
    }

    /// [`duration_ms`] for an optional key.
    pub fn opt_duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        duration_ms(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_honour_bits_and_bytes() {
        assert_eq!(parse_rate_bps("1.5Mbps"), Ok(1_500_000));
        assert_eq!(parse_rate_bps("10 kb/s"), Ok(10_000));
        assert_eq!(parse_rate_bps("9600"), Ok(9600));
        assert_eq!(parse_rate_bps("5 MB/s"), Ok(40_000_000));
        assert_eq!(parse_rate_bps("5MBps"), Ok(40_000_000));
        assert_eq!(parse_rate_bps("64 kB/s"), Ok(512_000));
        assert_eq!(parse_rate_bps("64KBps"), Ok(512_000));
        assert_eq!(parse_rate_bps("512kbit/s"), Ok(512_000));
        assert_eq!(parse_rate_bps("1Kibps"), Ok(1024));
        assert_eq!(parse_rate_bps("1MiBps"), Ok(8 << 20));
        assert_eq!(parse_rate_bps("1e6bps"), Ok(1_000_000));
        assert_eq!(parse_rate_bps("1Gbps"), Ok(1_000_000_000));
    }

    #[test]
    fn ambiguous_rates_are_refused_with_a_hint() {
        let e = parse_rate_bps("5mbps").unwrap_err().to_string();
        assert!(
            e.contains("ambiguous") && e.contains("5Mbps") && e.contains("5MBps"),
            "{e}"
        );
        let e = parse_rate_bps("5MBPS").unwrap_err().to_string();
        assert!(e.contains("ambiguous"), "{e}");
        let e = parse_rate_bps("5M").unwrap_err().to_string();
        assert!(e.contains("per-second"), "{e}");
        let e = parse_rate_bps("5Mps").unwrap_err().to_string();
        assert!(e.contains("bits or bytes"), "{e}");
        let e = parse_rate_bps("3 furlongs").unwrap_err().to_string();
        assert!(e.contains("'3 furlongs' has an unknown unit"), "{e}");
        assert!(e.contains("a rate is"), "{e}");
        assert!(parse_rate_bps("0bps")
            .unwrap_err()
            .to_string()
            .contains("zero"));
        assert!(parse_rate_bps("-5Mbps")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(parse_rate_bps("1e30bps")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
    }

    #[test]
    fn sizes_are_bytes() {
        assert_eq!(parse_bytes("20MB"), Ok(20_000_000));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("64kB"), Ok(64_000));
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_bytes("1500 bytes"), Ok(1500));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        let e = parse_bytes("20Mb").unwrap_err().to_string();
        assert!(e.contains("bits") && e.contains("20MB"), "{e}");
        let e = parse_bytes("20M").unwrap_err().to_string();
        assert!(e.contains("20MB"), "{e}");
        assert!(parse_bytes("20mb")
            .unwrap_err()
            .to_string()
            .contains("ambiguous"));
        assert!(parse_bytes("-1MB").is_err());
    }

    #[test]
    fn durations_from_ns_to_days() {
        assert_eq!(parse_duration_ns("260ms"), Ok(260_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("20µs"), Ok(20_000));
        assert_eq!(parse_duration_ns("2min"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration_ns("1d"), Ok(86_400_000_000_000));
        assert_eq!(parse_duration_ns("0.1ns"), Ok(0));
        let e = parse_duration_ns("5").unwrap_err().to_string();
        assert!(e.contains("no unit") && e.contains("5ms"), "{e}");
        let e = parse_duration_ns("5m").unwrap_err().to_string();
        assert!(e.contains("ambiguous") && e.contains("5min"), "{e}");
        assert!(parse_duration_ns("1000000d").is_err());
    }

    #[test]
    fn printing_is_short() {
        assert_eq!(format_rate_bps(1_500_000), "1.5Mbps");
        assert_eq!(format_rate_bps(9600), "9.6kbps");
        assert_eq!(format_bytes(65_536), "64KiB");
        assert_eq!(format_bytes(20_000_000), "20MB");
        assert_eq!(format_bytes(1500), "1.5kB");
        assert_eq!(format_duration_ns(260_000_000), "260ms");
        assert_eq!(format_duration_ns(3_600_000_000_000), "1h");
        assert_eq!(format_duration_ns(90_000_000_000), "90s");
    }

    #[test]
    fn config_keys_take_numbers_or_text_in_these_words() {
        #[derive(::serde::Deserialize, Debug)]
        struct K {
            #[serde(deserialize_with = "super::serde::rate_bps")]
            r: u64,
        }
        let k: K = toml::from_str("r = \"5 MB/s\"").unwrap();
        assert_eq!(k.r, 40_000_000);
        let k: K = toml::from_str("r = 5000").unwrap();
        assert_eq!(k.r, 5000);
        for (text, says) in [
            ("r = -5", "-5 is negative"),
            ("r = \"5mbps\"", "ambiguous"),
            ("r = true", "true is not a quantity"),
        ] {
            let e = toml::from_str::<K>(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains("a rate is"), "{text}: {e}");
            assert!(!e.contains("enum") && !e.contains("u64"), "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn rates_round_trip(v in 1u64..=MAX_RATE_BPS as u64) {
            prop_assert_eq!(parse_rate_bps(&format_rate_bps(v)), Ok(v));
        }

        #[test]
        fn sizes_round_trip(v in 0u64..=MAX_BYTES as u64) {
            prop_assert_eq!(parse_bytes(&format_bytes(v)), Ok(v));
        }

        #[test]
        fn durations_round_trip(v in 0u64..=MAX_DURATION_NS as u64) {
            prop_assert_eq!(parse_duration_ns(&format_duration_ns(v)), Ok(v));
        }

        #[test]
        fn any_text_gets_an_answer_not_a_panic(s in "\\PC{0,12}") {
            let _ = parse_rate_bps(&s);
            let _ = parse_bytes(&s);
            let _ = parse_duration_ns(&s);
        }

        #[test]
        fn bytes_per_second_are_eight_bits(v in 1u64..1_000_000) {
            prop_assert_eq!(parse_rate_bps(&format!("{v}kBps")), Ok(v * 8000));
            prop_assert_eq!(parse_rate_bps(&format!("{v} kB/s")), Ok(v * 8000));
        }
    }
}
