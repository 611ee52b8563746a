//! `--capture FILE.pcap` of `satstp terminal` and `satstp gateway`: copies the hop's STP
//! datagrams, in clear, to a pcap file for debugging a live link (`pep::capture`;
//! docs/wireshark.md). Off by default; the file holds the users' payload unless
//! `--capture-headers-only`.

use anyhow::{bail, Result};
use clap::Args;
use pep::capture::{Capture, CaptureConfig};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Write every STP datagram of the satellite hop, after decryption, with its UDP addresses,
    /// to this pcap file (read it with tools/wireshark/stp.lua). SENSITIVE: it contains the
    /// users' data in clear unless --capture-headers-only. Off by default.
    #[arg(long, value_name = "FILE.pcap")]
    capture: Option<PathBuf>,
    /// Size cap of the capture file, MiB; datagrams beyond it are not written.
    #[arg(long, value_name = "MIB", default_value_t = 100, requires = "capture")]
    capture_max_mib: u64,
    /// Keep only the STP header and bodies of each datagram, not the SD payload (user data).
    #[arg(long, requires = "capture")]
    capture_headers_only: bool,
}

impl CaptureArgs {
    /// Checks the flags before any work: the cap in MiB and the file's place.
    pub fn check(&self) -> Result<()> {
        let Some(path) = &self.capture else {
            return Ok(());
        };
        let min_mib = pep::capture::MIN_MAX_BYTES.div_ceil(1 << 20);
        if self.capture_max_mib < min_mib {
            bail!(
                "--capture-max-mib {}: the capture file's cap must be at least {min_mib} MiB",
                self.capture_max_mib
            );
        }
        crate::outpath::file("--capture", path)
    }

    /// Opens the capture file when `--capture` was given; `stp_hop` says whether this side runs
    /// an STP hop (the split-TCP hop has nothing to capture).
    pub fn open(&self, side: &str, stp_hop: bool) -> Result<Option<Capture>> {
        let Some(path) = &self.capture else {
            return Ok(None);
        };
        if !stp_hop {
            bail!("--capture: {side}.hop_transport is \"tcp\"; only the STP hop can be captured");
        }
        self.check()?;
        let max_bytes = self.capture_max_mib.saturating_mul(1 << 20);
        let c = Capture::create(&CaptureConfig {
            path: path.clone(),
            max_bytes,
            headers_only: self.capture_headers_only,
        })
        .map_err(|e| anyhow::anyhow!("--capture: {e}"))?;
        tracing::warn!(
            path = %path.display(),
            max_mib = self.capture_max_mib,
            headers_only = self.capture_headers_only,
            "capturing the hop's STP datagrams in clear{}",
            if self.capture_headers_only { " (headers only)" } else { ": the file contains user data" }
        );
        Ok(Some(c))
    }
}
