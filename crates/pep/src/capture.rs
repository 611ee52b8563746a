//! Capture of the satellite hop for debugging a live link: the STP datagrams the hop sends
//! (before the tunnel seals them) and receives (after the tunnel opens them), written to a
//! classic pcap file with their outer UDP addresses, so that Wireshark with
//! `tools/wireshark/stp.lua` shows the STP exchange that the encryption hides on the wire.
//!
//! The file contains user payload in clear (the SDs carry the relayed TCP bytes): it is created
//! readable by its owner only, and [`CaptureConfig::headers_only`] keeps only the STP header and
//! bodies of each datagram (the record's original length still says how long it was). It is
//! bounded: once [`CaptureConfig::max_bytes`] would be exceeded, further datagrams are counted
//! and not written.
//!
//! Records are raw IP packets (link type 101): an IPv4 header (or IPv6 when either address is
//! IPv6; IPv4 addresses are then mapped), a UDP header with checksum 0, and the STP datagram.
//! Each record goes to the file in one write, unbuffered, so that a capture is complete up to the
//! last datagram whatever way the process ends. Addresses are the socket's own: a gateway bound
//! to `0.0.0.0` appears as `0.0.0.0`.

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Link type of raw IP packets.
const LINKTYPE_RAW: u32 = 101;
/// pcap file header and record header sizes.
const FILE_HEADER: u64 = 24;
const RECORD_HEADER: usize = 16;
/// Smallest size cap: the file header and one small record.
pub const MIN_MAX_BYTES: u64 = 4096;
/// Default size cap, 100 MiB.
#[cfg(test)]
pub(crate) const DEFAULT_MAX_BYTES: u64 = 100 << 20;

/// What to capture and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// The pcap file (created or truncated).
    pub path: PathBuf,
    /// Largest size of the file, bytes (at least [`MIN_MAX_BYTES`]).
    pub max_bytes: u64,
    /// Keep only the STP header and bodies of each datagram, not the SD payload.
    pub headers_only: bool,
}

/// Errors opening a capture.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("capture size cap {0} bytes is below the minimum of {MIN_MAX_BYTES}")]
    TooSmall(u64),
    #[error("cannot create capture file {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
}

/// An open capture file.
pub struct Capture {
    file: File,
    path: PathBuf,
    max_bytes: u64,
    headers_only: bool,
    written: u64,
    records: u64,
    /// Datagrams not written: the cap was reached or a write failed.
    skipped: u64,
    failed: bool,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("path", &self.path)
            .field("records", &self.records)
            .field("skipped", &self.skipped)
            .finish()
    }
}

impl Capture {
    /// Creates the file (mode 0600 on Unix) and writes the pcap header.
    pub fn create(config: &CaptureConfig) -> Result<Capture, CaptureError> {
        if config.max_bytes < MIN_MAX_BYTES {
            return Err(CaptureError::TooSmall(config.max_bytes));
        }
        let create_err = |source| CaptureError::Create {
            path: config.path.display().to_string(),
            source,
        };
        let mut file = open_private(&config.path).map_err(create_err)?;
        let mut hdr = Vec::with_capacity(FILE_HEADER as usize);
        for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, LINKTYPE_RAW] {
            hdr.extend_from_slice(&v.to_le_bytes());
        }
        file.write_all(&hdr).map_err(create_err)?;
        Ok(Capture {
            file,
            path: config.path.clone(),
            max_bytes: config.max_bytes,
            headers_only: config.headers_only,
            written: FILE_HEADER,
            records: 0,
            skipped: 0,
            failed: false,
            buf: Vec::with_capacity(2048),
        })
    }

    /// Datagrams written so far.
    #[cfg(test)]
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Datagrams not written (size cap reached, or a write failed).
    #[cfg(test)]
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Records one STP datagram travelling from `src` to `dst`, stamped with the wall clock.
    pub(crate) fn record(&mut self, src: SocketAddr, dst: SocketAddr, datagram: &[u8]) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.record_at(now.as_secs(), now.subsec_micros(), src, dst, datagram);
    }

    fn record_at(&mut self, secs: u64, micros: u32, src: SocketAddr, dst: SocketAddr, d: &[u8]) {
        if self.failed {
            self.skipped += 1;
            return;
        }
        let keep = if self.headers_only {
            stp_header_len(d)
        } else {
            d.len()
        };
        let v6 = src.is_ipv6() || dst.is_ipv6();
        let ip_len = if v6 { 40 } else { 20 };
        let udp_len = 8 + d.len();
        let orig = ip_len + udp_len;
        let caplen = ip_len + 8 + keep;
        if udp_len > usize::from(u16::MAX) || orig > 65_535 {
            self.skipped += 1;
            return;
        }
        if self.written + (RECORD_HEADER + caplen) as u64 > self.max_bytes {
            if self.skipped == 0 {
                tracing::warn!(
                    path = %self.path.display(),
                    max_bytes = self.max_bytes,
                    "capture file reached its size cap; further datagrams are not captured"
                );
            }
            self.skipped += 1;
            return;
        }
        let b = &mut self.buf;
        b.clear();
        let secs = u32::try_from(secs).unwrap_or(u32::MAX);
        for v in [secs, micros, caplen as u32, orig as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        if v6 {
            b.extend_from_slice(&[0x60, 0, 0, 0]);
            b.extend_from_slice(&(udp_len as u16).to_be_bytes());
            b.extend_from_slice(&[17, 64]);
            b.extend_from_slice(&v6_octets(src.ip()));
            b.extend_from_slice(&v6_octets(dst.ip()));
        } else {
            b.extend_from_slice(&[0x45, 0]);
            b.extend_from_slice(&(orig as u16).to_be_bytes());
            b.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            b.extend_from_slice(&v4_octets(src.ip()));
            b.extend_from_slice(&v4_octets(dst.ip()));
            let sum = ip_checksum(&b[RECORD_HEADER..RECORD_HEADER + 20]);
            b[RECORD_HEADER + 10..RECORD_HEADER + 12].copy_from_slice(&sum.to_be_bytes());
        }
        b.extend_from_slice(&src.port().to_be_bytes());
        b.extend_from_slice(&dst.port().to_be_bytes());
        b.extend_from_slice(&(udp_len as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&d[..keep]);
        match self.file.write_all(b) {
            Ok(()) => {
                self.written += b.len() as u64;
                self.records += 1;
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "capture write failed; capture stopped");
                self.failed = true;
                self.skipped += 1;
            }
        }
    }
}

/// Bytes of the STP header and bodies (everything but the SD payload); the 12-byte common
/// header alone when the datagram does not parse.
fn stp_header_len(d: &[u8]) -> usize {
    match stp::wire::Packet::parse(d) {
        Ok(p) => d.len() - p.payload.len(),
        Err(_) => d.len().min(stp::wire::HEADER_LEN),
    }
}

fn v4_octets(ip: IpAddr) -> [u8; 4] {
    match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
    }
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn ip_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = hdr
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its mode through open(2): tighten it.
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<File> {
    File::create(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stp::wire::{Header, Packet, Poll, Types};

    fn datagram(payload: &[u8]) -> Vec<u8> {
        let mut types = Types::SD;
        types.insert(Types::POLL);
        let mut p = Packet::new(Header {
            version: stp::wire::VERSION,
            types,
            from_initiator: true,
            instance: 3,
            conn_id: 0x0102_0304,
            seq: 9,
        });
        p.poll = Some(Poll {
            next_seq: 10,
            keepalive: false,
            timestamp: 77,
        });
        p.payload = payload;
        let mut buf = Vec::new();
        p.emit(&mut buf);
        buf
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("pep-capture-{name}-{}", std::process::id()))
    }

    #[test]
    fn records_hold_ip_udp_and_the_datagram_and_respect_the_cap() {
        let path = temp("cap");
        let mut c = Capture::create(&CaptureConfig {
            path: path.clone(),
            max_bytes: MIN_MAX_BYTES,
            headers_only: false,
        })
        .unwrap();
        let d = datagram(&[0xab; 100]);
        let src: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let dst: SocketAddr = "198.51.100.2:4433".parse().unwrap();
        for _ in 0..40 {
            c.record_at(1, 2, src, dst, &d);
        }
        let per = (RECORD_HEADER + 28 + d.len()) as u64;
        let fit = (MIN_MAX_BYTES - FILE_HEADER) / per;
        assert_eq!(c.records(), fit);
        assert_eq!(c.skipped(), 40 - fit);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, FILE_HEADER + fit * per);
        let rec = &bytes[24 + 16..24 + 16 + 28 + d.len()];
        assert_eq!(ip_checksum(&rec[..20]), 0, "valid IPv4 header checksum");
        assert_eq!(&rec[12..16], &[192, 0, 2, 1]);
        assert_eq!(&rec[16..20], &[198, 51, 100, 2]);
        assert_eq!(&rec[20..22], &5000u16.to_be_bytes());
        assert_eq!(&rec[22..24], &4433u16.to_be_bytes());
        assert_eq!(&rec[28..], &d[..]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn headers_only_drops_the_payload_but_keeps_its_length() {
        let path = temp("hdr");
        let mut c = Capture::create(&CaptureConfig {
            path: path.clone(),
            max_bytes: DEFAULT_MAX_BYTES,
            headers_only: true,
        })
        .unwrap();
        let d = datagram(b"secret user bytes");
        c.record_at(
            0,
            0,
            "[2001:db8::1]:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            &d,
        );
        let bytes = std::fs::read(&path).unwrap();
        let caplen = u32::from_le_bytes(bytes[32..36].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(bytes[36..40].try_into().unwrap()) as usize;
        assert_eq!(caplen, 40 + 8 + 12 + 8, "IPv6, UDP, STP header and POLL");
        assert_eq!(orig, 40 + 8 + d.len());
        assert!(!bytes.windows(6).any(|w| w == b"secret"));
        assert_eq!(
            &bytes[40 + 24..40 + 40],
            &v6_octets("127.0.0.1".parse().unwrap())
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_tiny_cap_is_refused() {
        let e = Capture::create(&CaptureConfig {
            path: temp("tiny"),
            max_bytes: 100,
            headers_only: false,
        })
        .unwrap_err();
        assert!(e.to_string().contains("below the minimum"), "{e}");
    }
}
