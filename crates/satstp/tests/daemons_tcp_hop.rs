//! `hop_transport` in the daemons: one `satstp gateway` serving the STP hop and the split-TCP
//! hop at once (`hop_transport = "both"`), one `satstp terminal` on each, a SOCKS5 download
//! through both; and a congestion control the kernel lacks named by its field.

mod common;

use common::{daemon, download, free_port, fresh_dir, pattern, satstp, Keys};
use std::net::SocketAddr;

#[test]
fn one_gateway_serves_stp_and_tcp_terminals() {
    let dir = fresh_dir("tcphop");
    let keys = Keys::generate(&dir);
    let gw_port = free_port();
    let gw_config = keys.write_gateway_config(
        "gateway.toml",
        gw_port,
        "hop_transport = \"both\"\n\
         up_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
         [gateway.hop_tcp]\ncongestion = \"reno\"\n\
         [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
    );
    let _gw = daemon("gateway", &gw_config, None);
    let mut terms = Vec::new();
    let mut proxies = Vec::new();
    for transport in ["stp", "tcp"] {
        let socks_port = free_port();
        let file = keys.write_terminal_config(
            &format!("terminal-{transport}.toml"),
            socks_port,
            gw_port,
            &format!("hop_transport = \"{transport}\"\n"),
        );
        terms.push(daemon("terminal", &file, None));
        proxies.push((transport, SocketAddr::from(([127, 0, 0, 1], socks_port))));
    }
    let body = pattern(1 << 20);
    for (transport, proxy) in proxies {
        let got = download(proxy, body.len());
        assert!(
            got == body,
            "{transport} hop: download differs ({} of {} bytes)",
            got.len(),
            body.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_congestion_control_names_the_field() {
    let dir = fresh_dir("tcphop-cc");
    let keys = Keys::generate(&dir);
    let file = keys.write_terminal_config(
        "terminal.toml",
        free_port(),
        9,
        "hop_transport = \"tcp\"\n[terminal.hop_tcp]\ncongestion = \"nosuchcc\"\n",
    );
    let o = satstp()
        .arg("terminal")
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("terminal.hop_tcp.congestion") && err.contains("nosuchcc"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
