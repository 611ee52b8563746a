//! Quantities written by people: sizes (`20MB`, `64KiB`), rates (`1.5Mbps`, `10kbps`) and
//! durations (`260ms`, `1.5s`). Errors say what was expected.

fn split_number(s: &str) -> Result<(f64, String), String> {
    let t = s.trim();
    let end = t
        .find(|c: char| {
            !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')
        })
        .unwrap_or(t.len());
    // Do not swallow a unit that starts with 'e'/'E' (none of ours do).
    let (num, unit) = t.split_at(end);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' does not start with a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("'{s}' is not a non-negative number"));
    }
    Ok((value, unit.trim().to_ascii_lowercase()))
}

fn checked(value: f64, max: f64, s: &str) -> Result<u64, String> {
    if value > max {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(value.round() as u64)
}

/// Parses a byte count: `1500`, `1500B`, `20KB`, `20MB`, `1GB` (powers of 1000) or `64KiB`,
/// `4MiB`, `1GiB` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{s}' (use B, KB, MB, GB, KiB, MiB or GiB)"
            ))
        }
    };
    checked(v * mult, 1e15, s)
}

/// Parses a rate in bits per second: `9600`, `64kbps`, `1.5Mbps`, `10Gbps` (also `kb/s`,
/// `Mb/s`, `bps`).
pub fn parse_rate_bps(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.replace("/s", "ps").as_str() {
        "" | "bps" | "bitps" => 1.0,
        "kbps" | "kbitps" => 1e3,
        "mbps" | "mbitps" => 1e6,
        "gbps" | "gbitps" => 1e9,
        other => {
            return Err(format!(
                "unknown rate unit '{other}' in '{s}' (use bps, kbps, Mbps or Gbps)"
            ))
        }
    };
    let r = checked(v * mult, 1e13, s)?;
    if r == 0 {
        return Err(format!("rate '{s}' must be positive"));
    }
    Ok(r)
}

/// Parses a duration into nanoseconds: `250ms`, `1.5s`, `20us`, `100ns`, `2min`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "min" => 60e9,
        "" => {
            return Err(format!(
                "duration '{s}' needs a unit (ns, us, ms, s or min)"
            ))
        }
        other => {
            return Err(format!(
                "unknown duration unit '{other}' in '{s}' (use ns, us, ms, s or min)"
            ))
        }
    };
    checked(v * mult, 1e18, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rates_durations() {
        assert_eq!(parse_bytes("20MB"), Ok(20_000_000));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_rate_bps("1.5Mbps"), Ok(1_500_000));
        assert_eq!(parse_rate_bps("10 kb/s"), Ok(10_000));
        assert_eq!(parse_duration_ns("260ms"), Ok(260_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert!(parse_duration_ns("5").unwrap_err().contains("needs a unit"));
        assert!(parse_rate_bps("3 furlongs")
            .unwrap_err()
            .contains("unknown rate unit"));
        assert!(parse_bytes("-1MB").is_err());
        assert!(parse_rate_bps("0bps").is_err());
    }
}
