//! Shared pieces of the tests that run `tools/wireshark/stp.lua` under `tshark`: finding tshark,
//! reading a pcap file independently of the dissector, and decoding each STP datagram with the
//! reference parser (`stp::wire`) into the values the dissector's fields must show.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use stp::wire::{Packet, Types};

/// The dissector under test.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/wireshark/stp.lua")
}

/// Whether tshark can run here; says why `test` skips when it cannot.
pub fn available(test: &str) -> bool {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            testenv::cannot_run(
                test,
                &format!(
                    "tshark --version failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ),
            );
            false
        }
        Err(e) => {
            testenv::cannot_run(
                test,
                &format!("tshark not found ({e}); scripts/install-deps.sh installs it"),
            );
            false
        }
    }
}

/// The fields compared between the dissector and the reference parser, in order.
pub const FIELDS: &[&str] = &[
    "satstp.types",
    "satstp.type_names",
    "satstp.conn_id",
    "satstp.initiator",
    "satstp.instance",
    "satstp.seq",
    "satstp.checksum.status",
    "satstp.bgn.isn",
    "satstp.bgn.rwnd",
    "satstp.bgn.max_datagram",
    "satstp.bgn.versions",
    "satstp.bgn.timestamp",
    "satstp.bgnak.isn",
    "satstp.bgnak.version",
    "satstp.bgnak.rwnd",
    "satstp.bgnak.max_datagram",
    "satstp.bgnak.echo_timestamp",
    "satstp.rst.reason",
    "satstp.rst.detail",
    "satstp.poll.ns",
    "satstp.poll.keepalive",
    "satstp.poll.timestamp",
    "satstp.stat.nr",
    "satstp.stat.partial",
    "satstp.stat.covered_to",
    "satstp.stat.echo_timestamp",
    "satstp.stat.rwnd",
    "satstp.stat.gap_count",
    "satstp.stat.gap_start",
    "satstp.stat.gap_end",
    "satstp.stat.gaps",
    "satstp.ustat.nr",
    "satstp.ustat.rwnd",
    "satstp.ustat.gap_start",
    "satstp.ustat.gap_end",
    "satstp.end.final_seq",
    "satstp.endak.final_seq",
    "satstp.payload_len",
    "satstp.analysis.retransmission",
];

/// Runs tshark with the dissector over `pcap` (plus `extra` arguments) and returns, per frame,
/// the values of `fields` (occurrences joined by ','). Panics with tshark's error on failure.
pub fn fields(pcap: &Path, fields: &[&str], extra: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", script().display()))
        .args(extra)
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"])
        .args(["-E", "aggregator=,"]);
    for f in fields {
        cmd.arg("-e").arg(f);
    }
    let o = cmd.output().expect("run tshark");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tshark failed: {err}");
    assert!(
        !err.contains("Lua: Error") && !err.contains("lua_script"),
        "the dissector did not load: {err}"
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// One record of a pcap file: its link-layer bytes as captured and its original length.
pub struct Record {
    pub data: Vec<u8>,
    pub orig_len: u32,
}

/// Reads a classic little-endian pcap file with link type raw IP (101); panics on anything else.
pub fn read_pcap(path: &Path) -> Vec<Record> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() >= 24, "{}: no pcap header", path.display());
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "{}: magic {magic:#x}",
        path.display()
    );
    let linktype = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(linktype, 101, "{}: link type", path.display());
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let orig_len = u32::from_le_bytes(bytes[at + 12..at + 16].try_into().unwrap());
        let data = bytes[at + 16..at + 16 + caplen].to_vec();
        out.push(Record { data, orig_len });
        at += 16 + caplen;
    }
    assert_eq!(at, bytes.len(), "{}: trailing bytes", path.display());
    out
}

/// The UDP payload of a raw IPv4 or IPv6 packet (no extension headers), if it is UDP.
pub fn udp_payload(ip: &[u8]) -> Option<&[u8]> {
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            (ip[9] == 17).then(|| ip.get(ihl + 8..)).flatten()
        }
        6 => (ip[6] == 17).then(|| ip.get(48..)).flatten(),
        _ => None,
    }
}

fn join<T: ToString>(v: impl IntoIterator<Item = T>) -> String {
    v.into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |x| x.to_string())
}

fn flag(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

/// Wireshark's name of a packet type set: the types in the fixed body order, SD first.
pub fn type_names(bits: u16) -> String {
    let order = [
        (0x001, "SD"),
        (0x010, "BGN"),
        (0x020, "BGNAK"),
        (0x100, "RST"),
        (0x002, "POLL"),
        (0x004, "STAT"),
        (0x008, "USTAT"),
        (0x040, "END"),
        (0x080, "ENDAK"),
    ];
    order
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("|")
}

/// The values of [`FIELDS`] for a datagram the reference parser accepts; `retransmission_of`
/// is the frame that first carried this SD, if any.
pub fn expected(p: &Packet<'_>, retransmission_of: Option<usize>) -> Vec<String> {
    let h = &p.header;
    let bgn = p.bgn.as_ref();
    let bgnak = p.bgnak.as_ref();
    let poll = p.poll.as_ref();
    let stat = p.stat.as_ref();
    let ustat = p.ustat.as_ref();
    let gaps: Vec<(u32, u32)> = stat.map(|s| s.gaps.iter().collect()).unwrap_or_default();
    let sd = h.types.contains(stp::wire::Types::SD);
    vec![
        format!("0x{:04x}", h.types.bits()),
        type_names(h.types.bits()),
        format!("0x{:08x}", h.conn_id),
        flag(h.from_initiator),
        h.instance.to_string(),
        h.seq.to_string(),
        "Good".into(),
        opt(bgn.map(|b| b.isn)),
        opt(bgn.map(|b| b.rwnd)),
        opt(bgn.map(|b| b.max_datagram)),
        opt(bgn.map(|b| format!("0x{:04x}", b.versions))),
        opt(bgn.map(|b| b.timestamp)),
        opt(bgnak.map(|b| b.isn)),
        opt(bgnak.map(|b| b.version)),
        opt(bgnak.map(|b| b.rwnd)),
        opt(bgnak.map(|b| b.max_datagram)),
        opt(bgnak.map(|b| b.echo_timestamp)),
        opt(p.rst.map(|r| r.reason.to_u8())),
        opt(p.rst.map(|r| r.detail)),
        opt(poll.map(|x| x.next_seq)),
        opt(poll.map(|x| flag(x.keepalive))),
        opt(poll.map(|x| x.timestamp)),
        opt(stat.map(|s| s.cum)),
        opt(stat.map(|s| flag(s.partial))),
        opt(stat.map(|s| s.covered_to)),
        opt(stat.map(|s| s.echo_timestamp)),
        opt(stat.map(|s| s.rwnd)),
        opt(stat.map(|s| s.gaps.len())),
        join(gaps.iter().map(|g| g.0)),
        join(gaps.iter().map(|g| g.1)),
        gaps.iter()
            .map(|(a, b)| format!("[{a},{b})"))
            .collect::<Vec<_>>()
            .join(" "),
        opt(ustat.map(|u| u.cum)),
        opt(ustat.map(|u| u.rwnd)),
        opt(ustat.map(|u| u.gap_start)),
        opt(ustat.map(|u| u.gap_end)),
        opt(p.end.map(|e| e.final_seq)),
        opt(p.endak.map(|e| e.final_seq)),
        if sd {
            p.payload.len().to_string()
        } else {
            String::new()
        },
        opt(retransmission_of),
    ]
}

/// Compares the dissector with the reference parser frame by frame; returns the union of the
/// type bits seen and the number of retransmissions.
pub fn compare(pcap: &Path, extra: &[&str]) -> (u16, usize) {
    let records = read_pcap(pcap);
    let got = fields(pcap, FIELDS, extra);
    assert_eq!(got.len(), records.len(), "{}: frames", pcap.display());
    let mut first: HashMap<(u32, u8, bool, u32), usize> = HashMap::new();
    let mut types = 0u16;
    let mut retransmissions = 0;
    for (i, (rec, row)) in records.iter().zip(&got).enumerate() {
        let frame = i + 1;
        let Some(udp) = udp_payload(&rec.data) else {
            continue;
        };
        let p =
            Packet::parse(udp).unwrap_or_else(|e| panic!("{} frame {frame}: {e}", pcap.display()));
        types |= p.header.types.bits();
        let mut retx = None;
        if p.header.types.contains(Types::SD) {
            let h = &p.header;
            let key = (h.conn_id, h.instance, h.from_initiator, h.seq);
            match first.get(&key) {
                Some(&f) => {
                    retx = Some(f);
                    retransmissions += 1;
                }
                None => {
                    first.insert(key, frame);
                }
            }
        }
        let want = expected(&p, retx);
        for (k, name) in FIELDS.iter().enumerate() {
            let g = row.get(k).map_or("", String::as_str);
            assert_eq!(
                g,
                want[k],
                "{} frame {frame}: field {name} (types {})",
                pcap.display(),
                type_names(p.header.types.bits())
            );
        }
    }
    (types, retransmissions)
}
