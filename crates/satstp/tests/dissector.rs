//! The Wireshark dissector (`tools/wireshark/stp.lua`) under tshark: on the pcaps `satstp sim
//! --pcap` writes, every field it decodes equals what the reference parser reads from the same
//! bytes (which are the datagrams the simulator sent), every packet type occurs, and
//! retransmitted SDs are marked; on hand-made datagrams, RST is decoded and a bad checksum and
//! a malformed datagram are flagged. Skips with a printed reason when tshark is missing
//! (`scripts/install-deps.sh` installs it).

mod common;
mod tshark;

use common::{fresh_dir, ok, satstp};
use std::path::Path;
use stp::wire::Types;
use tshark::compare;

/// A short lossy GEO transfer: every packet type of a connection's life, losses reported by
/// USTAT and STAT gap lists, and retransmissions; then a transfer cut by an outage, which ends
/// in a reset.
const SCENARIO: &str = r#"
name = "dissector"
duration = "60s"
runs = 1
seed = 7

[[node]]
name = "server"
[[node]]
name = "router"
[[node]]
name = "client"

# A link is traced where it accepts a packet: SDs lost on the satellite link still show on
# the terrestrial one, next to their retransmissions.
[[link]]
a = "server"
b = "router"
rate = "10Mbps"
delay = "5ms"
queue_packets = 200

[[link]]
a = "router"
b = "client"
rate = "2Mbps"
delay = "250ms"
queue_bytes = "200KB"
loss = 0.03
# The second flow's peer goes silent: after dead_timeout (30 s) its sender gives up with
# RST(Timeout), which the terrestrial link still carries.
outages = [["20s", "38s"]]

[[flow]]
name = "bulk"
protocol = "stp"
from = "server"
to = "client"
bytes = "400KB"

[[flow]]
name = "cut"
protocol = "stp"
from = "server"
to = "client"
bytes = "2MB"
start = "15s"
"#;

#[test]
fn dissector_decodes_the_simulators_pcaps_field_for_field() {
    if !tshark::available("dissector_decodes_the_simulators_pcaps_field_for_field") {
        return;
    }
    let dir = fresh_dir("dissector-sim");
    let file = dir.join("scenario.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let pcaps = dir.join("pcap");
    ok(satstp()
        .arg("sim")
        .arg(&file)
        .arg("--pcap")
        .arg(&pcaps)
        .output()
        .unwrap());
    let mut types = 0;
    let mut retransmissions = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(&pcaps).unwrap() {
        let path = entry.unwrap().path();
        let (t, r) = compare(&path, &[]);
        // The reference implementation's datagrams raise no error or protocol warning.
        for row in tshark::fields(&path, &["_ws.expert.message"], &[]) {
            assert!(
                !row[0].contains("§3.8") && !row[0].contains("Bad checksum"),
                "{}: {row:?}",
                path.display()
            );
        }
        types |= t;
        retransmissions += r;
        files += 1;
    }
    assert_eq!(files, 4, "one pcap per direction of each link");
    for (bit, name) in [
        (Types::SD, "SD"),
        (Types::POLL, "POLL"),
        (Types::STAT, "STAT"),
        (Types::USTAT, "USTAT"),
        (Types::BGN, "BGN"),
        (Types::BGNAK, "BGNAK"),
        (Types::END, "END"),
        (Types::ENDAK, "ENDAK"),
        (Types::RST, "RST"),
    ] {
        assert!(
            types & bit.bits() != 0,
            "no {name} in the simulator's pcaps"
        );
    }
    assert!(retransmissions > 0, "a lossy run retransmits");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `datagrams` as UDP/IPv4 packets from 10.0.0.1:40000 to 10.0.0.2:4433.
fn write_pcap(path: &Path, datagrams: &[Vec<u8>]) {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 101] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (i, d) in datagrams.iter().enumerate() {
        let total = 28 + d.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            i as u8,
            0,
            0,
            64,
            17,
        ];
        ip.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let udp_len = 8 + d.len();
        ip.extend_from_slice(&[
            0x9c,
            0x40,
            0x11,
            0x51,
            (udp_len >> 8) as u8,
            udp_len as u8,
            0,
            0,
        ]);
        ip.extend_from_slice(d);
        for v in [i as u32, 0, total as u32, total as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&ip);
    }
    std::fs::write(path, out).unwrap();
}

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

#[test]
fn dissector_decodes_rst_and_flags_bad_checksums_and_malformed_datagrams() {
    if !tshark::available("dissector_decodes_rst_and_flags_bad_checksums_and_malformed_datagrams") {
        return;
    }
    let dir = fresh_dir("dissector-vectors");
    // docs/stp-spec.md Appendix A.1-A.4.
    let sd_poll = hex("10 03 2a b1 de ad be ef d5 00 00 09 00 00 0a 00 00 00 04 d2 68 65 6c 6c 6f");
    let stat = hex("10 04 ea 84 de ad be ef 55 00 00 00 00 00 01 00 00 00 0a 00 00 00 04 d2 00 01 00 00 00 01 00 00 00 00 03 00 00 05");
    let bgn =
        hex("10 10 72 7c de ad be ef d5 00 00 00 00 00 01 00 00 40 00 00 05 ac 00 01 00 00 03 e8");
    let rst = hex("11 00 fb 61 de ad be ef 55 00 00 00 01 00 00 00");
    let mut bad_checksum = sd_poll.clone();
    bad_checksum[3] ^= 0x01;
    let mut trailing = rst.clone();
    trailing.push(0);
    let pcap = dir.join("vectors.pcap");
    write_pcap(
        &pcap,
        &[
            sd_poll.clone(),
            stat.clone(),
            bgn.clone(),
            rst.clone(),
            bad_checksum,
            trailing,
        ],
    );
    // The valid ones decode field for field.
    let valid = dir.join("valid.pcap");
    write_pcap(&valid, &[sd_poll, stat, bgn, rst]);
    let (types, _) = compare(&valid, &[]);
    assert_eq!(types, 0x003 | 0x004 | 0x010 | 0x100);

    let cols = [
        "satstp.type_names",
        "satstp.checksum.status",
        "_ws.expert.message",
    ];
    let heur = tshark::fields(&pcap, &cols, &[]);
    assert_eq!(heur[3][0], "RST");
    assert!(heur[3][2].contains("UnknownConnection"), "{:?}", heur[3]);
    assert_eq!(heur[4][1], "Bad");
    assert!(
        heur[4][2].contains("Bad checksum 0x2ab0, should be 0x2ab1"),
        "{:?}",
        heur[4]
    );
    // A datagram with bytes after its last body is not STP to the heuristic ...
    assert_eq!(heur[5][0], "", "{:?}", heur[5]);
    // ... but decoded, and flagged, when the port is STP's.
    let by_port = tshark::fields(&pcap, &cols, &["-o", "satstp.udp_ports:4433"]);
    assert_eq!(by_port[5][0], "RST");
    assert!(by_port[5][2].contains("trailing bytes"), "{:?}", by_port[5]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A STAT from the responder with N(R) = `nr`, Covered To = `covered` and these gaps.
fn stat(nr: u32, covered: u32, gaps: &[(u32, u32)]) -> Vec<u8> {
    let mut p = stp::wire::Packet::new(stp::wire::Header {
        version: stp::wire::VERSION,
        types: Types::STAT,
        from_initiator: false,
        instance: 1,
        conn_id: 7,
        seq: 0,
    });
    p.stat = Some(stp::wire::Stat {
        cum: nr,
        partial: false,
        covered_to: covered,
        echo_timestamp: 5,
        rwnd: 1000,
        gaps: stp::wire::Gaps::List(gaps),
    });
    let mut buf = Vec::new();
    p.emit(&mut buf);
    buf
}

#[test]
fn dissector_flags_gap_lists_that_break_the_spec() {
    if !tshark::available("dissector_flags_gap_lists_that_break_the_spec") {
        return;
    }
    let dir = fresh_dir("dissector-gaps");
    let pcap = dir.join("gaps.pcap");
    let cases: [(Vec<u8>, Option<&str>); 6] = [
        (stat(10, 20, &[(10, 12), (15, 16)]), None),
        // Across the 24-bit wrap: still ascending in serial arithmetic.
        (stat(0xff_fffe, 3, &[(0xff_fffe, 1)]), None),
        (stat(10, 20, &[(11, 12)]), Some("does not start at N(R)")),
        (stat(10, 20, &[(10, 14), (13, 15)]), Some("gap 2 overlaps")),
        (stat(10, 20, &[(10, 10)]), Some("gap 1 is empty")),
        (stat(10, 20, &[(10, 21)]), Some("beyond Covered To")),
    ];
    let datagrams: Vec<Vec<u8>> = cases.iter().map(|c| c.0.clone()).collect();
    write_pcap(&pcap, &datagrams);
    let rows = tshark::fields(&pcap, &["satstp.stat.gaps", "_ws.expert.message"], &[]);
    for (i, (row, (_, want))) in rows.iter().zip(&cases).enumerate() {
        match want {
            None => assert!(!row[1].contains("§3.8"), "frame {}: {row:?}", i + 1),
            Some(w) => assert!(
                row[1].contains("Gap list breaks spec §3.8") && row[1].contains(w),
                "frame {}: {row:?}",
                i + 1
            ),
        }
    }
    assert_eq!(rows[1][0], "[16777214,1)");
    let _ = std::fs::remove_dir_all(&dir);
}
