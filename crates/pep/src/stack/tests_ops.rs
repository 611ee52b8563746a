//! Operations on loopback: limits refuse cleanly and are counted, `/metrics` and `/status`
//! reflect a real transfer, idle connections are closed, host-name policy rules are enforced at
//! the gateway, and the outbound TCP options are applied.

use crate::tests_common as common;

use common::{
    gateway_stack, hop_config, http_get, loopback_stp, pattern, policy, socks_connect_to,
};

use crate::config::TcpOptions;
use crate::keys::generate_keypair;
use crate::ops::{Ops, OpsConfig};
use crate::socks::SocksAuth;
use crate::stack::{SocksListener, TerminalHop, TerminalOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The kit's origin: "D n\n" → n pattern bytes, then close; "E\n" → echoes until EOF.
async fn origin() -> SocketAddr {
    common::origin().await
}

struct Setup {
    socks: SocketAddr,
    http: SocketAddr,
    term_metrics: SocketAddr,
    gw_metrics: SocketAddr,
    term_ops: Arc<Ops>,
    gw_ops: Arc<Ops>,
    _stacks: (crate::Terminal, crate::Gateway),
}

struct Options {
    term: OpsConfig,
    gw: OpsConfig,
    allow: Vec<String>,
    deny: Vec<String>,
    tcp: TcpOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            term: OpsConfig::unlimited(),
            gw: OpsConfig::unlimited(),
            allow: vec!["127.0.0.0/8".into()],
            deny: vec![],
            tcp: TcpOptions::default(),
        }
    }
}

async fn setup(o: Options) -> Setup {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let gw = gateway_stack(
        gk,
        vec![tp],
        hop_config(2, 1 << 20),
        policy(o.allow, o.deny),
        o.gw,
        o.tcp,
    )
    .await;
    let mut t = TerminalOptions::new(
        tk,
        gw.hop_addr(),
        gp,
        TerminalHop::Stp(Box::new(loopback_stp(&hop_config(1, 1 << 20)))),
        1 << 20,
    );
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    t.socks = Some(SocksListener {
        listen: local,
        auth: SocksAuth::None,
        fast_open: false,
    });
    t.http_connect = Some(local);
    t.metrics_listen = Some(local);
    t.ops = o.term;
    let term = crate::Terminal::start(t).await.unwrap();
    Setup {
        socks: term.socks_addr().unwrap(),
        http: term.http_connect_addr().unwrap(),
        term_metrics: term.metrics_addr().unwrap(),
        gw_metrics: gw.metrics_addr().unwrap(),
        term_ops: Arc::clone(term.ops()),
        gw_ops: Arc::clone(gw.ops()),
        _stacks: (term, gw),
    }
}

/// SOCKS5 CONNECT (no authentication) to an address or a name, the reply within 20 s; returns
/// the stream and the reply code.
async fn socks_connect(proxy: SocketAddr, host: &str, port: u16) -> (TcpStream, u8) {
    tokio::time::timeout(Duration::from_secs(20), socks_connect_to(proxy, host, port))
        .await
        .expect("SOCKS reply in time")
}

/// The value of the sample `name{side="…",labels}` in a Prometheus text, labels given as
/// `key="value"` pairs after the side.
fn sample(text: &str, name: &str, labels: &str) -> f64 {
    let prefix = format!("{name}{{");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let (l, v) = rest.rsplit_once("} ").unwrap();
        let extra = l.split_once(',').map_or("", |(_, e)| e);
        if extra == labels {
            return v.parse().unwrap();
        }
    }
    panic!("no sample {name}{{{labels}}} in\n{text}");
}

/// Polls `f` until it holds or 10 s pass.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_follow_a_transfer() {
    let origin = origin().await;
    let s = setup(Options::default()).await;
    const N: usize = 2_000_000;

    // An echo connection, held open while we look: 1 MB each way through it.
    const E: usize = 1_000_000;
    let (echo, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    let client_addr = echo.local_addr().unwrap().to_string();
    let (mut er, mut ew) = echo.into_split();
    let writer = tokio::spawn(async move {
        ew.write_all(b"E\n").await.unwrap();
        ew.write_all(&pattern(3, E)).await.unwrap();
        ew
    });
    let mut back = vec![0u8; E];
    er.read_exact(&mut back).await.unwrap();
    assert!(back == pattern(3, E), "echo differs");
    let ew = writer.await.unwrap();

    let status: serde_json::Value =
        serde_json::from_str(&http_get(s.term_metrics, "/status").await).unwrap();
    let conns = status["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{status}");
    let c = &conns[0];
    assert_eq!(c["destination"], format!("127.0.0.1:{}", origin.port()));
    assert_eq!(c["client"], client_addr, "{status}");
    assert_eq!(c["state"], "open");
    assert_eq!(c["bytes_up"], E as u64 + 2);
    assert_eq!(c["bytes_down"], E as u64);
    assert!(c["age_s"].as_f64().unwrap() > 0.0);
    assert!(
        c["srtt_ms"].as_f64().unwrap() > 0.0,
        "a transfer measures srtt: {c}"
    );
    assert!(c["cwnd_bytes"].as_u64().unwrap() > 0, "{c}");
    let gstatus: serde_json::Value =
        serde_json::from_str(&http_get(s.gw_metrics, "/status").await).unwrap();
    let g = &gstatus["connections"][0];
    assert_eq!(g["destination"], c["destination"]);
    assert_eq!(g["client"], c["client"], "the v2 header carries the client");
    assert_eq!(g["terminal"].as_str().map(str::len), Some(64));
    assert_eq!(g["bytes_up"], c["bytes_up"]);

    // With data both ways, each side POLLed and answered the other's POLLs with STATs.
    let tm = http_get(s.term_metrics, "/metrics").await;
    let gm = http_get(s.gw_metrics, "/metrics").await;
    for (m, peer) in [(&tm, &gm), (&gm, &tm)] {
        let stat_sent = sample(m, "satstp_stp_packets_sent_total", "type=\"stat\"");
        let stat_recv = sample(peer, "satstp_stp_packets_received_total", "type=\"stat\"");
        assert!(stat_sent > 0.0, "{m}");
        assert!(stat_recv > 0.0 && stat_recv <= stat_sent, "{peer}");
        assert!(sample(m, "satstp_stp_packets_sent_total", "type=\"poll\"") > 0.0);
        assert!(sample(m, "satstp_stp_packets_sent_total", "type=\"sd\"") > 0.0);
        // Every payload byte crossed the hop inside a datagram with headers.
        for dir in ["up", "down"] {
            let hop = sample(m, "satstp_hop_bytes_total", &format!("direction=\"{dir}\""));
            assert!(hop > E as f64, "{dir}: {hop}");
        }
        assert_eq!(sample(m, "satstp_stp_connections", ""), 1.0);
        let srtt = sample(m, "satstp_stp_srtt_seconds", "stat=\"max\"");
        assert!(srtt > 0.0 && srtt < 5.0, "{srtt}");
        assert!(sample(m, "satstp_stp_cwnd_bytes", "stat=\"sum\"") > 0.0);
    }
    assert_eq!(
        sample(&tm, "satstp_hop_established", ""),
        1.0,
        "the tunnel is up"
    );

    // A download, byte-exact.
    let (mut d, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    d.write_all(format!("D {N}\n").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    d.read_to_end(&mut got).await.unwrap();
    assert!(
        got == pattern(0, N),
        "download differs ({} bytes)",
        got.len()
    );
    drop(d);
    drop(ew);
    drop(er);
    let (t, g) = (s.term_ops.metrics(), s.gw_ops.metrics());
    eventually("both connections to close on both sides", || {
        t.connections_active.get() == 0 && g.connections_active.get() == 0
    })
    .await;

    let tm = http_get(s.term_metrics, "/metrics").await;
    let gm = http_get(s.gw_metrics, "/metrics").await;
    let req = format!("D {N}\n").len() as f64;
    for m in [&tm, &gm] {
        assert_eq!(sample(m, "satstp_connections_total", ""), 2.0);
        assert_eq!(sample(m, "satstp_connections_active", ""), 0.0);
        assert_eq!(
            sample(m, "satstp_tcp_bytes_total", "direction=\"down\""),
            (N + E) as f64
        );
        assert_eq!(
            sample(m, "satstp_tcp_bytes_total", "direction=\"up\""),
            req + (E + 2) as f64
        );
        assert!(sample(m, "satstp_hop_bytes_total", "direction=\"down\"") > (N + E) as f64);
        assert_eq!(
            sample(m, "satstp_connections_refused_total", "reason=\"policy\""),
            0.0
        );
        assert_eq!(
            sample(m, "satstp_connections_closed_total", "reason=\"done\""),
            2.0,
            "{m}"
        );
        assert_eq!(sample(m, "satstp_memory_reserved_bytes", ""), 0.0);
    }
    let status: serde_json::Value =
        serde_json::from_str(&http_get(s.term_metrics, "/status").await).unwrap();
    assert_eq!(status["connections"].as_array().map(Vec::len), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_limits_refuse_cleanly_and_count() {
    let origin = origin().await;
    let s = setup(Options {
        term: OpsConfig {
            max_connections: 2,
            max_connections_per_terminal: 2,
            ..OpsConfig::unlimited()
        },
        ..Options::default()
    })
    .await;
    let (mut a, ca) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    let (b, cb) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!((ca, cb), (0, 0));
    // Third: SOCKS5 general failure, then the connection ends.
    let (mut c, cc) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(cc, 1);
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
    // HTTP CONNECT at the limit: 503.
    let mut h = TcpStream::connect(s.http).await.unwrap();
    h.write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", origin.port()).as_bytes())
        .await
        .unwrap();
    let mut resp = String::new();
    h.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    let m = s.term_ops.metrics();
    assert_eq!(
        m.refused(crate::metrics::RefusalReason::ConnectionLimit)
            .get(),
        2
    );
    assert_eq!(m.connections_total.get(), 2);
    // The connections admitted still work.
    a.write_all(b"E\nping").await.unwrap();
    let mut back = [0u8; 4];
    a.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
    // Room again once one ends.
    drop(b);
    eventually("a slot to free", || m.connections_active.get() == 1).await;
    let (_d, cd) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(cd, 0);
    let text = http_get(s.term_metrics, "/metrics").await;
    assert_eq!(
        sample(
            &text,
            "satstp_connections_refused_total",
            "reason=\"connection_limit\""
        ),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_limits_per_terminal_and_memory() {
    let origin = origin().await;
    // Per terminal: one connection.
    let s = setup(Options {
        gw: OpsConfig {
            max_connections: 10,
            max_connections_per_terminal: 1,
            ..OpsConfig::unlimited()
        },
        ..Options::default()
    })
    .await;
    let (_a, ca) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    let (_b, cb) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!((ca, cb), (0, 1), "the gateway refuses the second");
    let g = s.gw_ops.metrics();
    assert_eq!(
        g.refused(crate::metrics::RefusalReason::TerminalLimit)
            .get(),
        1
    );
    // The terminal saw the gateway's refusal as a failed connect.
    let t = s.term_ops.metrics();
    eventually("the terminal to count the refusal", || {
        t.refused(crate::metrics::RefusalReason::ConnectFailed)
            .get()
            == 1
    })
    .await;
}

/// The old admission reserved every connection's whole relay budget (about 5 MiB), so the
/// default `memory_cap_bytes` admitted about 120 connections; admission by use admits far more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_limits_admit_hundreds_of_connections() {
    const N: usize = 600;
    let _ = crate::fdlimit::raise_nofile_limit();
    let origin = origin().await;
    let defaults = crate::ops::OpsConfig::from_limits(&crate::config::Limits::default(), 300, 30);
    let s = setup(Options {
        term: defaults.clone(),
        gw: defaults,
        ..Options::default()
    })
    .await;
    let mut open = Vec::with_capacity(N);
    for _ in 0..N {
        let (mut c, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
        assert_eq!(code, 0, "connection {} refused", open.len());
        c.write_all(b"E\n").await.unwrap();
        open.push(c);
    }
    eventually("every connection open at the gateway", || {
        s.gw_ops.open_connections() as usize == N
    })
    .await;
    // Every connection carries bytes both ways, all at once.
    for (i, c) in open.iter_mut().enumerate() {
        c.write_all(format!("{i:05}").as_bytes()).await.unwrap();
    }
    for (i, c) in open.iter_mut().enumerate() {
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(back, format!("{i:05}").as_bytes());
    }
    for m in [s.term_ops.metrics(), s.gw_ops.metrics()] {
        assert_eq!(m.refused(crate::metrics::RefusalReason::Memory).get(), 0);
    }
    assert!(s.gw_ops.reserved_bytes() <= crate::config::Limits::default().memory_cap_bytes);
}

/// Clients that ask for much and read nothing: their bytes pile up in the relays (at the
/// gateway, in STP's send buffer too, which holds the relay's buffers until they are
/// acknowledged), and the memory in use on both sides stays within the cap; while it is full new connections are
/// refused (reason `memory`); when the clients read, every byte arrives and the memory returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_slow_readers_cannot_exceed_the_cap() {
    const READERS: usize = 24;
    const EACH: usize = 8 << 20;
    const CAP: u64 = 12 << 20;
    let origin = origin().await;
    let capped = OpsConfig {
        memory_cap_bytes: CAP,
        ..OpsConfig::unlimited()
    };
    let s = setup(Options {
        term: capped.clone(),
        gw: capped,
        ..Options::default()
    })
    .await;
    // Slow readers until the memory is full and one is refused.
    let mut readers = Vec::new();
    let mut refused_early = false;
    for _ in 0..READERS {
        // A small receive buffer, so the bytes wait in the relays rather than in the kernel.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let c = sock.connect(s.socks).await.unwrap();
        let (mut c, code) = common::socks_handshake_to(c, "127.0.0.1", origin.port())
            .await
            .unwrap();
        if code != 0 {
            refused_early = true;
            break;
        }
        c.write_all(format!("D {EACH}\n").as_bytes()).await.unwrap();
        readers.push(c);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!readers.is_empty(), "no slow reader admitted");
    // Watch both sides' memory while the flood piles up.
    let (mut peak_t, mut peak_g) = (0u64, 0u64);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        peak_t = peak_t.max(s.term_ops.reserved_bytes());
        peak_g = peak_g.max(s.gw_ops.reserved_bytes());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!(
        "{} slow readers admitted; memory in use at most {peak_t} bytes (terminal), \
         {peak_g} bytes (gateway) of {CAP}",
        readers.len()
    );
    assert!(
        peak_t <= CAP && peak_g <= CAP,
        "peaks {peak_t} and {peak_g} bytes"
    );
    assert!(
        peak_t.max(peak_g) >= CAP / 2,
        "the flood filled the buffers (peaks {peak_t} and {peak_g} bytes of {CAP})"
    );
    // While the buffers are full new clients are refused (a few may fit in the last chunk's
    // room first), and the refusal says why.
    if !refused_early {
        let mut late = Vec::new();
        for _ in 0..32 {
            let (c, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
            late.push(c);
            if code != 0 {
                break;
            }
        }
        assert!(
            late.len() < 32,
            "32 connections admitted over a full memory cap"
        );
    }
    let refused = s
        .term_ops
        .metrics()
        .refused(crate::metrics::RefusalReason::Memory)
        .get()
        + s.gw_ops
            .metrics()
            .refused(crate::metrics::RefusalReason::Memory)
            .get();
    assert!(refused >= 1);
    // The clients read at last: every byte arrives, in order.
    let want = pattern(0, EACH);
    let mut tasks = Vec::new();
    for mut c in readers {
        let want = want.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(EACH);
            c.read_to_end(&mut got).await.unwrap();
            assert!(
                got == want,
                "a reader got {} bytes, not the pattern",
                got.len()
            );
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("the readers finish")
            .unwrap();
    }
    eventually("the memory to return", || {
        s.term_ops.reserved_bytes() == 0 && s.gw_ops.reserved_bytes() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connection_is_reset_and_counted() {
    let origin = origin().await;
    let s = setup(Options {
        term: OpsConfig {
            idle_timeout: Some(Duration::from_millis(800)),
            ..OpsConfig::unlimited()
        },
        ..Options::default()
    })
    .await;
    let (mut c, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    // Activity keeps it open past the timeout.
    c.write_all(b"E\n").await.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        c.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).await.unwrap();
    }
    // Then silence: the terminal resets it.
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
        .await
        .expect("closed within the idle timeout");
    let e = r.expect_err("an idle connection is reset, not closed normally");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(started.elapsed() >= Duration::from_millis(600));
    let m = s.term_ops.metrics();
    assert_eq!(m.closed(crate::metrics::CloseReason::IdleTimeout).get(), 1);
    // The gateway's side of it is torn down as well.
    let g = s.gw_ops.metrics();
    eventually("the gateway to close its side", || {
        g.connections_active.get() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_name_rules_are_enforced_at_the_gateway() {
    let origin = origin().await;
    let port = origin.port();
    // Denied by name before resolution.
    let s = setup(Options {
        deny: vec!["LOCALHOST".into()],
        ..Options::default()
    })
    .await;
    let (_c, code) = socks_connect(s.socks, "localhost", port).await;
    assert_eq!(code, 2, "not allowed by policy");
    assert_eq!(
        s.gw_ops
            .metrics()
            .refused(crate::metrics::RefusalReason::Policy)
            .get(),
        1
    );
    // The same address by number passes (the rule is about the name).
    let (_c, code) = socks_connect(s.socks, "127.0.0.1", port).await;
    assert_eq!(code, 0);

    // An allowed name does not lift the loopback default ...
    let s = setup(Options {
        allow: vec!["localhost".into()],
        ..Options::default()
    })
    .await;
    let (_c, code) = socks_connect(s.socks, "localhost", port).await;
    assert_eq!(code, 2);
    // ... and with the loopback range allowed too, the name works, while other names are
    // outside the allow-list.
    let s = setup(Options {
        allow: vec!["localhost".into(), "127.0.0.0/8".into()],
        ..Options::default()
    })
    .await;
    let (mut c, code) = socks_connect(s.socks, "localhost", port).await;
    assert_eq!(code, 0);
    c.write_all(b"D 1000\n").await.unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, pattern(0, 1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_tcp_options_are_applied() {
    assert!(crate::sockopt::check_tcp_options(&TcpOptions {
        congestion: Some("nosuchcc".into()),
        ..TcpOptions::default()
    })
    .is_err());
    let origin = origin().await;
    // A congestion control the kernel lacks makes every outbound connect fail: the option is
    // set on the gateway's socket before it connects.
    let s = setup(Options {
        tcp: TcpOptions {
            congestion: Some("nosuchcc".into()),
            ..TcpOptions::default()
        },
        ..Options::default()
    })
    .await;
    let (_c, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 1);
    assert_eq!(
        s.gw_ops
            .metrics()
            .refused(crate::metrics::RefusalReason::ConnectFailed)
            .get(),
        1
    );
    // Options the kernel accepts leave the path working.
    let s = setup(Options {
        tcp: TcpOptions {
            congestion: Some("reno".into()),
            send_buffer_bytes: Some(1 << 20),
            recv_buffer_bytes: Some(1 << 20),
            nodelay: false,
            max_pacing_rate_bps: Some(8_000_000),
        },
        ..Options::default()
    })
    .await;
    let (mut c, code) = socks_connect(s.socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    c.write_all(b"D 100000\n").await.unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).await.unwrap();
    assert!(got == pattern(0, 100_000));
}

/// `curl -x http://TERMINAL URL …`: runs curl through the terminal's HTTP listener; the HTTP
/// status and the body. `None` when curl is missing (and the test may not run).
async fn curl_via(proxy: SocketAddr, url: &str, extra: &[&str]) -> Option<(String, Vec<u8>)> {
    let out_file = std::env::temp_dir().join(format!(
        "pep-curl-{}-{}",
        std::process::id(),
        url.len() + extra.len()
    ));
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "--max-time", "20", "-o"])
        .arg(&out_file)
        .args(["-w", "%{http_code}", "-x", &format!("http://{proxy}"), url])
        .args(extra);
    let out = match tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run curl: {e}"),
    };
    let body = std::fs::read(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    Some((String::from_utf8_lossy(&out.stdout).into_owned(), body))
}

/// Plain HTTP forward proxying (`http_proxy=`, `curl -x`): a GET and a POST in absolute form go
/// through the hop to the origin and back intact; the gateway's policy applies as to CONNECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_requests_are_forwarded_with_curl_x() {
    let origin = origin().await;
    let s = setup(Options {
        allow: vec!["127.0.0.1/32".into()],
        ..Options::default()
    })
    .await;
    let url = format!("http://127.0.0.1:{}/bytes/300000/3", origin.port());
    let Some((code, body)) = curl_via(s.http, &url, &[]).await else {
        testenv::cannot_run("plain_http_requests_are_forwarded_with_curl_x", "no curl");
        return;
    };
    assert_eq!(code, "200");
    assert!(
        body == pattern(3, 300_000),
        "{} bytes, not the pattern",
        body.len()
    );
    // A POST with a body: the origin checks every byte.
    let upload = std::env::temp_dir().join(format!("pep-curl-upload-{}", std::process::id()));
    std::fs::write(&upload, pattern(5, 200_000)).unwrap();
    let url = format!("http://127.0.0.1:{}/upload/200000/5", origin.port());
    let data = format!("@{}", upload.display());
    let (code, _) = curl_via(s.http, &url, &["--data-binary", &data, "-H", "Expect:"])
        .await
        .unwrap();
    let _ = std::fs::remove_file(&upload);
    assert_eq!(code, "200", "the origin saw the body intact");
    // The gateway's policy: 127.0.0.2 is not allowed.
    let url = format!("http://127.0.0.2:{}/bytes/10", origin.port());
    let (code, body) = curl_via(s.http, &url, &[]).await.unwrap();
    assert_eq!(code, "403");
    assert!(body.is_empty());
    let refused = s
        .gw_ops
        .metrics()
        .refused(crate::metrics::RefusalReason::Policy)
        .get();
    assert_eq!(refused, 1);
    // A request that names no destination is still refused by the proxy itself.
    let mut c = TcpStream::connect(s.http).await.unwrap();
    c.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
}
