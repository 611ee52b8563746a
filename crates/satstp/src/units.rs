//! Parsing of human-written quantities on the command line (sizes, rates).

/// Parses a byte count such as `1500`, `20MB`, `64KiB` or `1.5GB` (SI and binary suffixes).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!(
            "'{s}' is not a size: expected a number with an optional unit such as 20MB or 64KiB"
        )
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
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
    let bytes = value * mult;
    if !bytes.is_finite() || !(0.0..=1e15).contains(&bytes) {
        return Err(format!("size '{s}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_bytes("20MB"), Ok(20_000_000));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert!(parse_bytes("ten").unwrap_err().contains("not a size"));
        assert!(parse_bytes("5XB")
            .unwrap_err()
            .contains("unknown size unit"));
    }
}
