//! `satstp gateway` and `satstp terminal` as real processes on loopback: keys from `satstp
//! keygen`, configuration files, a SOCKS5 download through both from a local origin server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn satstp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_satstp"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn keygen(prefix: &Path) -> String {
    let o = satstp()
        .arg("keygen")
        .arg("--out")
        .arg(prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(prefix.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn socks_download_through_terminal_and_gateway_processes() {
    let dir = std::env::temp_dir().join(format!("satstp-daemons-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tpub = keygen(&dir.join("terminal"));
    let gpub = keygen(&dir.join("gateway"));
    let gw_port = free_port();
    let socks_port = free_port();
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{gw_port}\"\nprivate_key_file = \"{}\"\nallowed_terminals = [\"{tpub}\"]\n[gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
            dir.join("gateway.key").display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("terminal.toml"),
        format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:{socks_port}\"\ngateway = \"127.0.0.1:{gw_port}\"\ngateway_public_key = \"{gpub}\"\nprivate_key_file = \"{}\"\n",
            dir.join("terminal.key").display()
        ),
    )
    .unwrap();
    let _gw = Kill(
        satstp()
            .arg("gateway")
            .arg("--config")
            .arg(dir.join("gateway.toml"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _term = Kill(
        satstp()
            .arg("terminal")
            .arg("--config")
            .arg(dir.join("terminal.toml"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Origin: sends 1 MB to each client, then closes.
    let origin = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    let body = pattern(1 << 20);
    let served = body.clone();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = origin.accept() {
            let _ = s.write_all(&served);
        }
    });
    // Wait for the terminal to listen.
    let proxy: SocketAddr = format!("127.0.0.1:{socks_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut s = loop {
        if let Ok(s) = TcpStream::connect(proxy) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "terminal did not start listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).unwrap();
    assert_eq!(m, [5, 0]);
    let SocketAddr::V4(v4) = origin_addr else {
        unreachable!()
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    assert_eq!(rep[1], 0, "SOCKS reply");
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(
        got == body,
        "download differs ({} of {} bytes)",
        got.len(),
        body.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_configuration_names_the_field() {
    let dir = std::env::temp_dir().join(format!("satstp-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("gateway.toml");
    std::fs::write(&f, "[gateway]\nlisten = \"127.0.0.1:1\"\nprivate_key_file = \"/nonexistent\"\nallowed_terminals = [\"zz\"]\n").unwrap();
    let o = satstp()
        .arg("gateway")
        .arg("--config")
        .arg(&f)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("allowed_terminals") || err.contains("nonexistent"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
