//! A repeat visit in a kept profile ([`Chromium::load_in_profile`]): a browser that reached an
//! origin over HTTP/3 before goes for QUIC first on its next visit, and when UDP is then refused
//! (nothing listens: ICMP port unreachable, a terminal's `quic = "reject"`) or dropped (a socket
//! that never answers, as `quic = "block"` drops) it falls back to HTTP/2 over TCP and the page
//! completes. Everything on loopback: the QUIC origin and the TCP origin (HTTP/2 over TLS, its
//! `Alt-Svc` advertising the QUIC one) share a port number, with the run's test CA accepted by
//! its key only (no trust store touched).
//!
//! Debian's full `chromium` keeps the origin's Alt-Svc in its profile; `chromium-headless-shell`
//! keeps no network state at all, which is why `satstp bench link` refuses it for its
//! block/reject cells: that is checked here too, so the refusal is lifted if it ever changes.

mod common;

use browser::site::PAGE_PATH;
use browser::{Chromium, LoadRequest, Site};
use common::{browsers, site_files, site_request};
use loadgen::h3::H3Origin;
use loadgen::origin::{Origin, OriginConfig};
use loadgen::tls::{Alpn, TestPki, TlsOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A directory removed on drop.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_repeat_visitor_that_knew_http3_falls_back_to_http2_when_quic_is_refused_or_dropped() {
    let test =
        "a_repeat_visitor_that_knew_http3_falls_back_to_http2_when_quic_is_refused_or_dropped";
    for chromium in browsers(test) {
        for drop_quic in [false, true] {
            repeat_visit(&chromium, drop_quic);
        }
    }
}

fn repeat_visit(chromium: &Chromium, drop_quic: bool) {
    let name = format!(
        "{} ({})",
        chromium.path().display(),
        if drop_quic { "dropped" } else { "refused" }
    );
    let site = Site::standard();
    let files = site_files(&site, None);
    let ca = TestPki::generate(&["127.0.0.1".into()]).expect("test CA");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
    let port = udp.local_addr().expect("UDP address").port();
    let tcp = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind TCP on the same port");
    let h3 = H3Origin::start_in_thread(udp, &ca, Some(Arc::clone(&files))).expect("QUIC origin");
    let tls = ca
        .server_config(TlsOptions {
            alpn: Alpn::Http2,
            resumption: true,
            early_data: false,
        })
        .expect("TLS");
    let tcp_origin = Origin::start_in_thread(
        tcp,
        OriginConfig {
            on_accept: None,
            files: Some(files),
            alt_svc: Some(h3.alt_svc()),
            tls: Some(tls),
        },
    )
    .expect("TCP origin");
    let req = LoadRequest {
        trust_spki: vec![ca.spki_sha256().to_string()],
        ..site_request(format!("https://127.0.0.1:{port}{PAGE_PATH}"), &site)
    };
    let profile = Dir(std::env::temp_dir().join(format!(
        "satstp-browser-repeat-{}-{port}",
        std::process::id()
    )));
    // The first visit, over QUIC (forced: the test CA is accepted over QUIC only for a forced
    // origin).
    let first = chromium
        .load_in_profile(&req, &h3.chromium_flags("127.0.0.1"), &profile.0)
        .unwrap_or_else(|e| panic!("{name}: first visit: {e}"));
    assert_eq!(first.protocol, "h3", "{name}: first visit");
    let state = std::fs::read_to_string(profile.0.join("Default/Network Persistent State"))
        .unwrap_or_default();
    if chromium.is_headless_shell() {
        assert!(
            !state.contains("alternative_service"),
            "{name}: the headless shell now keeps Alt-Svc; bench link may stop refusing it: {state}"
        );
        return;
    }
    assert!(
        state.contains("alternative_service") && state.contains(&format!("\"port\":{port}")),
        "{name}: the profile kept no Alt-Svc for the origin: {state:?}"
    );

    // QUIC goes away: refused (the port closed) or dropped (a socket that reads and never
    // answers, counting what the browser sent).
    drop(h3);
    let sent = Arc::new(AtomicU64::new(0));
    let sink = if drop_quic {
        // The origin's runtime lets its socket go in the background: wait for the port.
        let mut tries = 0;
        let s = loop {
            match std::net::UdpSocket::bind(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{name}: rebind UDP {port}: {e}"),
            }
        };
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        Some(s)
    } else {
        None
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = sink.map(|s| {
        let (sent, done) = (Arc::clone(&sent), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !done.load(Ordering::SeqCst) {
                if s.recv(&mut buf).is_ok() {
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    });
    let before = tcp_origin.accepted();
    let t = Instant::now();
    let repeat = chromium.load_in_profile(&req, &[], &profile.0);
    let took = t.elapsed();
    done.store(true, Ordering::SeqCst);
    if let Some(r) = reader {
        let _ = r.join();
    }
    let repeat = repeat.unwrap_or_else(|e| panic!("{name}: repeat visit: {e}"));
    assert_eq!(
        repeat.protocol, "h2",
        "{name}: the fallback is HTTP/2 over TCP"
    );
    assert!(tcp_origin.accepted() > before, "{name}: no TCP connection");
    assert!(
        tcp_origin.errors().is_empty(),
        "{name}: {:?}",
        tcp_origin.errors()
    );
    if drop_quic {
        // It went for QUIC first: its packets reached the socket that never answers.
        assert!(
            sent.load(Ordering::SeqCst) > 0,
            "{name}: the repeat visit sent no QUIC"
        );
    }
    eprintln!(
        "{name}: first visit {:?} over h3; repeat visit {:?} over h2 ({} QUIC packet(s) dropped; browser {took:?})",
        first.load,
        repeat.load,
        sent.load(Ordering::SeqCst)
    );
}
