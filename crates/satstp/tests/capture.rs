//! `--capture` on the daemons: a download through a terminal and a gateway, both capturing;
//! the dissector reads both files. The gateway's full capture decodes field for field like the
//! reference parser and carries the downloaded bytes in clear; the terminal's headers-only
//! capture decodes every datagram's header and bodies, gives the SD lengths, and holds no user
//! data. Skips with a printed reason when tshark is missing.

mod common;
mod tshark;

use common::{satstp, wait_listening, Kill, Loopback};
use std::path::Path;
use std::process::Stdio;

fn daemon_capturing(side: &str, config: &Path, extra: &[&str], log: &Path) -> Kill {
    let mut cmd = satstp();
    cmd.arg(side)
        .arg("--config")
        .arg(config)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    Kill(cmd.spawn().unwrap())
}

#[test]
fn captures_from_both_daemons_are_read_by_the_dissector() {
    let pair = Loopback::new("capture");
    let (dir, gw_config) = (&pair.dir, &pair.gw_config);
    let term_config = pair.write_terminal_config("");
    let gw_pcap = dir.join("gateway.pcap");
    let term_pcap = dir.join("terminal.pcap");
    let gw_arg = gw_pcap.to_str().unwrap();
    let term_arg = term_pcap.to_str().unwrap();
    let gw = daemon_capturing(
        "gateway",
        gw_config,
        &["--capture", gw_arg],
        &dir.join("gw.log"),
    );
    let term = daemon_capturing(
        "terminal",
        &term_config,
        &["--capture", term_arg, "--capture-headers-only"],
        &dir.join("term.log"),
    );
    let socks = pair.socks();
    wait_listening(&[socks]);
    let body = common::pattern(300_000);
    let got = common::download(socks, body.len());
    assert!(got == body, "download through the daemons");
    // Let the last ENDAKs cross, then stop (records are written unbuffered).
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(term);
    drop(gw);

    let gw_bytes = std::fs::read(&gw_pcap).unwrap();
    let term_bytes = std::fs::read(&term_pcap).unwrap();
    // The full capture carries user data in clear; the headers-only one does not.
    let piece = &body[100_000..100_064];
    assert!(gw_bytes.windows(piece.len()).any(|w| w == piece));
    assert!(!term_bytes.windows(piece.len()).any(|w| w == piece));

    if !tshark::available("captures_from_both_daemons_are_read_by_the_dissector") {
        return;
    }
    let (types, _) = tshark::compare(&gw_pcap, &[]);
    for t in [0x001, 0x002, 0x004, 0x010, 0x020] {
        assert!(
            types & t != 0,
            "gateway capture lacks type {t:#x}: {types:#x}"
        );
    }

    // Headers only: every record decodes; SD lengths come from the original length.
    let records = tshark::read_pcap(&term_pcap);
    assert!(
        records.len() > 20,
        "terminal captured {} datagrams",
        records.len()
    );
    let cols = [
        "satstp.type_names",
        "satstp.conn_id",
        "satstp.checksum.status",
        "satstp.payload_len",
        "udp.srcport",
        "udp.dstport",
    ];
    let rows = tshark::fields(&term_pcap, &cols, &[]);
    assert_eq!(rows.len(), records.len());
    let mut sd = 0;
    for (i, (rec, row)) in records.iter().zip(&rows).enumerate() {
        let udp = tshark::udp_payload(&rec.data).unwrap();
        let h = stp::wire::Packet::peek_header(udp).unwrap();
        assert_eq!(
            row[0],
            tshark::type_names(h.types.bits()),
            "frame {}",
            i + 1
        );
        assert_eq!(row[1], format!("0x{:08x}", h.conn_id));
        let ports = [row[4].as_str(), row[5].as_str()];
        assert!(
            ports.contains(&pair.gw_port.to_string().as_str()),
            "frame {}: {ports:?}",
            i + 1
        );
        let wire_len = rec.orig_len as usize - 28;
        if h.types.contains(stp::wire::Types::SD) {
            sd += 1;
            assert_eq!(row[2], "Unverified");
            assert!(udp.len() < wire_len, "payload left out");
            assert_eq!(
                row[3],
                (wire_len - udp.len()).to_string(),
                "frame {}",
                i + 1
            );
        } else {
            assert_eq!(row[2], "Good", "frame {}", i + 1);
        }
    }
    assert!(sd > 0);
    let _ = std::fs::remove_dir_all(dir);
}
