//! Receive backpressure on loopback (`hop::backpressure`): a terminal whose hop sockets' receive
//! queues fill holds its streams' windows, its peer waits, and every download still arrives
//! whole. The test shrinks the terminal's hop socket buffers (found by their addresses among
//! this process's descriptors) so that a burst of downloads fills a quarter of them at once.

use crate::ops::OpsConfig;
use crate::tests_common::{default_pair, download, origin};
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The descriptor of this process's UDP socket bound to `addr`.
fn udp_socket_at(addr: SocketAddr) -> Option<RawFd> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        // SAFETY: the descriptor stays open while the test runs (the pair holds it); the
        // borrowed reference does not close it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&borrowed);
        let udp = sock.r#type().is_ok_and(|t| t == socket2::Type::DGRAM);
        if udp && sock.local_addr().ok().and_then(|a| a.as_socket()) == Some(addr) {
            return Some(fd);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_whose_receive_queue_fills_holds_the_windows_and_every_download_arrives() {
    let origin = origin().await;
    let p = default_pair(OpsConfig::unlimited()).await;
    let workers = p.term.hop().worker_statuses().await;
    for w in &workers {
        let fd = udp_socket_at(w.local).expect("the terminal's hop socket is open here");
        // SAFETY: as above.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&borrowed);
        // 512 KiB as the kernel counts it: a quarter is about 90 datagrams.
        sock.set_recv_buffer_size(256 << 10).unwrap();
    }
    let loads: Vec<_> = (0..16)
        .map(|i| tokio::spawn(download(p.socks, origin, 4_000_000 + i * 1000)))
        .collect();
    for l in loads {
        assert!(l.await.unwrap(), "a download arrived whole");
    }
    let after = p.term.hop().worker_statuses().await;
    let episodes: u64 = after.iter().map(|w| w.backpressure_episodes).sum();
    let overflows: u64 = after.iter().map(|w| w.socket_overflows).sum();
    eprintln!("{episodes} backpressure episodes, {overflows} receive overflows");
    assert!(
        episodes > 0,
        "64 MB through two 512 KiB receive buffers and the queue never reached a quarter"
    );
    let merged = p
        .term
        .hop()
        .status()
        .await
        .expect("a terminal hop reports its status");
    assert_eq!(merged.backpressure_episodes, episodes);
    // Prometheus shows it.
    let text = crate::tests_common::http_get(p.gw_metrics, "/metrics").await;
    assert!(
        text.contains("satstp_hop_backpressure_episodes_total{side=\"gateway\"} "),
        "{text}"
    );
}
