//! `hop_transport` in the daemons: one `satstp gateway` serving the STP hop and the split-TCP
//! hop at once (`hop_transport = "both"`), one `satstp terminal` on each, a SOCKS5 download
//! through both; and a congestion control the kernel lacks named by its field.

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

fn daemon(side: &str, config: &Path) -> Kill {
    Kill(
        satstp()
            .arg(side)
            .arg("--config")
            .arg(config)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Downloads `body` from a one-shot origin through the SOCKS5 proxy at `proxy`.
fn download(proxy: SocketAddr, body: &[u8]) -> Vec<u8> {
    let origin = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    let served = body.to_vec();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = origin.accept() {
            let _ = s.write_all(&served);
        }
    });
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
    got
}

#[test]
fn one_gateway_serves_stp_and_tcp_terminals() {
    let dir = std::env::temp_dir().join(format!("satstp-tcphop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tpub = keygen(&dir.join("terminal"));
    let gpub = keygen(&dir.join("gateway"));
    let gw_port = free_port();
    std::fs::write(
        dir.join("gateway.toml"),
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{gw_port}\"\nprivate_key_file = \"{}\"\n\
             allowed_terminals = [\"{tpub}\"]\nhop_transport = \"both\"\n\
             up_rate_bps = 5000000\ndown_rate_bps = 50000000\nrtt_ms = 600\n\
             [gateway.hop_tcp]\ncongestion = \"reno\"\n\
             [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
            dir.join("gateway.key").display()
        ),
    )
    .unwrap();
    let _gw = daemon("gateway", &dir.join("gateway.toml"));
    let mut terms = Vec::new();
    let mut proxies = Vec::new();
    for transport in ["stp", "tcp"] {
        let socks_port = free_port();
        let file = dir.join(format!("terminal-{transport}.toml"));
        std::fs::write(
            &file,
            format!(
                "[terminal]\nsocks_listen = \"127.0.0.1:{socks_port}\"\n\
                 gateway = \"127.0.0.1:{gw_port}\"\ngateway_public_key = \"{gpub}\"\n\
                 private_key_file = \"{}\"\nhop_transport = \"{transport}\"\n",
                dir.join("terminal.key").display()
            ),
        )
        .unwrap();
        terms.push(daemon("terminal", &file));
        proxies.push((transport, SocketAddr::from(([127, 0, 0, 1], socks_port))));
    }
    let body: Vec<u8> = (0..1usize << 20).map(|i| (i * 7 + i / 251) as u8).collect();
    for (transport, proxy) in proxies {
        let got = download(proxy, &body);
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
    let dir = std::env::temp_dir().join(format!("satstp-tcphop-cc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _ = keygen(&dir.join("terminal"));
    let gpub = keygen(&dir.join("gateway"));
    let file = dir.join("terminal.toml");
    std::fs::write(
        &file,
        format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:{}\"\ngateway = \"127.0.0.1:9\"\n\
             gateway_public_key = \"{gpub}\"\nprivate_key_file = \"{}\"\n\
             hop_transport = \"tcp\"\n[terminal.hop_tcp]\ncongestion = \"nosuchcc\"\n",
            free_port(),
            dir.join("terminal.key").display()
        ),
    )
    .unwrap();
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
