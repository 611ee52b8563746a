//! How fast this host is at the two things a hop daemon spends most of its time on, measured
//! in a fraction of a second before a benchmark starts: sealing datagrams with AES-256-GCM and
//! copying them. Per-GB CPU figures are only comparable between runs on hosts that agree here
//! (the build machine's virtual CPUs have differed by 2× from one day to the next), and the load
//! average says how quiet the host was.

use std::time::{Duration, Instant};

/// The host's reference figures.
#[derive(Debug, Clone, Copy)]
pub struct HostReference {
    /// AES-256-GCM (ring) sealing `datagram` bytes at a time on one core, Gbit/s of plaintext.
    pub seal_gbps: f64,
    /// Copying `datagram` bytes at a time through a 64 MiB region (beyond the caches), one core,
    /// Gbit/s.
    pub copy_gbps: f64,
    /// The datagram size both used, bytes.
    pub datagram: usize,
    /// `/proc/loadavg`'s 1, 5 and 15 minute figures before the measurement.
    pub load: [f64; 3],
    /// `net.core.rmem_max` and `wmem_max`, bytes (`None` where unreadable): the kernel caps a
    /// process's socket buffers there unless it may force them past (the daemons do as root).
    pub socket_max: [Option<u64>; 2],
}

impl HostReference {
    /// The JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "aes_256_gcm_seal_gbps_one_core": self.seal_gbps,
            "copy_gbps_one_core": self.copy_gbps,
            "datagram_bytes": self.datagram,
            "load_average": self.load,
            "net_core_rmem_max": self.socket_max[0],
            "net_core_wmem_max": self.socket_max[1],
        })
    }

    /// One line for a report.
    pub fn line(&self) -> String {
        let max = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |b| b.to_string());
        format!(
            "one core seals {}-byte datagrams (AES-256-GCM) at {:.1} Gbit/s and copies them at {:.1} Gbit/s; load average {:.2} {:.2} {:.2} at the start; net.core.rmem_max {} and wmem_max {} bytes",
            self.datagram,
            self.seal_gbps,
            self.copy_gbps,
            self.load[0],
            self.load[1],
            self.load[2],
            max(self.socket_max[0]),
            max(self.socket_max[1])
        )
    }
}

/// Measures the host for about `each` per figure.
pub fn measure(datagram: usize, each: Duration) -> HostReference {
    let load = load_average();
    HostReference {
        seal_gbps: seal_gbps(datagram, each),
        copy_gbps: copy_gbps(datagram, each),
        datagram,
        load,
        socket_max: [sysctl_u64("rmem_max"), sysctl_u64("wmem_max")],
    }
}

/// `/proc/sys/net/core/NAME` as a number.
fn sysctl_u64(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|f| f.parse::<f64>().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

fn seal_gbps(datagram: usize, each: Duration) -> f64 {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    let Ok(unbound) = UnboundKey::new(&AES_256_GCM, &[7u8; 32]) else {
        return f64::NAN;
    };
    let key = LessSafeKey::new(unbound);
    let mut buf = vec![0x5au8; datagram];
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut counter = 0u64;
    while start.elapsed() < each {
        for _ in 0..256 {
            let mut n = [0u8; 12];
            n[4..].copy_from_slice(&counter.to_be_bytes());
            counter += 1;
            if key
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), &mut buf)
                .is_err()
            {
                return f64::NAN;
            }
            bytes += datagram as u64;
        }
    }
    bytes as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9
}

fn copy_gbps(datagram: usize, each: Duration) -> f64 {
    const REGION: usize = 64 << 20;
    let src = vec![0x33u8; REGION];
    let mut dst = vec![0u8; REGION];
    let chunks = REGION / datagram;
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut i = 0usize;
    while start.elapsed() < each {
        for _ in 0..256 {
            let off = (i % chunks) * datagram;
            dst[off..off + datagram].copy_from_slice(&src[off..off + datagram]);
            i += 1;
            bytes += datagram as u64;
        }
        std::hint::black_box(&mut dst);
    }
    bytes as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_figures_are_measured() {
        let h = measure(1443, Duration::from_millis(20));
        assert!(h.seal_gbps > 0.01 && h.seal_gbps.is_finite(), "{h:?}");
        assert!(h.copy_gbps > 0.01 && h.copy_gbps.is_finite(), "{h:?}");
        assert!(h.load.iter().all(|l| *l >= 0.0), "{h:?}");
        assert!(h.line().contains("1443-byte"));
    }
}
