//! `backup_gateways` in a terminal's configuration: the terminal daemon's first gateway does not
//! answer, so after its handshake tries the terminal fails over to the backup, and a SOCKS5
//! download through it arrives byte-exact.

mod common;

use common::{daemon, download, pattern, Loopback};
use std::net::UdpSocket;

#[test]
fn terminal_daemon_fails_over_to_a_backup_gateway() {
    let pair = Loopback::new("failover");
    let dir = &pair.dir;
    // A bound UDP socket that never answers stands for a gateway that is down.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    // Primary: the silent one; backup: the real gateway (same key, so no public_key).
    let term_config = pair.keys.write_terminal_config(
        "terminal.toml",
        pair.socks_port,
        silent_port,
        &format!(
            "[[terminal.backup_gateways]]\naddress = \"127.0.0.1:{}\"\n",
            pair.gw_port
        ),
    );
    let _gw = daemon("gateway", &pair.gw_config, None);
    let _term = daemon("terminal", &term_config, Some(&dir.join("terminal.log")));
    let body = pattern(200_000);
    let got = download(pair.socks(), body.len());
    assert!(got == body, "download through the backup gateway");
    let log = std::fs::read_to_string(dir.join("terminal.log")).unwrap_or_default();
    assert!(log.contains("failing over"), "{log}");
    let _ = std::fs::remove_dir_all(dir);
}
