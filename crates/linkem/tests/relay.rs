//! The UDP relay end to end on loopback: delay, counters, loss, rate, impairments, bad input.
//! Timing assertions are one-sided or generous so that a loaded machine cannot fail them.

use linkem::{Direction, EmulatorConfig, EmulatorError, EmulatorHandle, UdpEmulator};
use linkmodel::{LinkConfig, Loss, QueueLimit};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::{sleep, timeout, Instant};

const MS: u64 = 1_000_000;
const WAIT: Duration = Duration::from_secs(10);

fn link(rate_bps: u64, delay_ms: u64) -> LinkConfig {
    let mut l = LinkConfig::simple(rate_bps, delay_ms * MS, 1000);
    l.overhead_bytes = 28;
    l
}

async fn bind() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

/// A gateway socket and a relay in front of it.
async fn setup(up: LinkConfig, down: LinkConfig) -> (UdpSocket, UdpSocket, EmulatorHandle) {
    let gateway = bind().await;
    let config = EmulatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        to: gateway.local_addr().unwrap(),
        up,
        down,
        seed: 7,
    };
    let emu = UdpEmulator::start(config).await.unwrap();
    let terminal = bind().await;
    terminal.connect(emu.local_addr()).await.unwrap();
    (terminal, gateway, emu)
}

async fn recv_from(sock: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 70_000];
    let (n, from) = timeout(WAIT, sock.recv_from(&mut buf))
        .await
        .expect("datagram within the test's patience")
        .unwrap();
    buf.truncate(n);
    (buf, from)
}

/// Waits until `done` holds for the relay's counters (or the test's patience runs out).
async fn wait_for(emu: &EmulatorHandle, done: impl Fn(&linkem::EmulatorStats) -> bool) {
    let start = Instant::now();
    while !done(&emu.stats()) {
        assert!(
            start.elapsed() < WAIT,
            "counters never settled: {:?}",
            emu.stats()
        );
        sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_both_ways_with_the_configured_delay() {
    let (terminal, gateway, emu) = setup(link(10_000_000, 100), link(10_000_000, 50)).await;
    let t0 = Instant::now();
    terminal.send(b"ping").await.unwrap();
    let (data, relay) = recv_from(&gateway).await;
    let up = t0.elapsed();
    assert_eq!(data, b"ping");
    assert_eq!(relay, emu.gateway_side_addr());
    assert!(up >= Duration::from_millis(100), "{up:?}");
    assert!(up < Duration::from_millis(300), "{up:?}");
    let t1 = Instant::now();
    gateway.send_to(b"pong", relay).await.unwrap();
    let (data, from) = recv_from(&terminal).await;
    let down = t1.elapsed();
    assert_eq!(data, b"pong");
    assert_eq!(from, emu.local_addr());
    assert!(down >= Duration::from_millis(50), "{down:?}");
    assert!(down < Duration::from_millis(250), "{down:?}");
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_packets_and_bytes_per_direction() {
    let (terminal, gateway, emu) = setup(link(100_000_000, 1), link(100_000_000, 1)).await;
    for _ in 0..10 {
        terminal.send(&[1u8; 100]).await.unwrap();
    }
    let mut relay = None;
    for _ in 0..10 {
        let (data, from) = recv_from(&gateway).await;
        assert_eq!(data, [1u8; 100]);
        relay = Some(from);
    }
    let relay = relay.unwrap();
    for _ in 0..4 {
        gateway.send_to(&[2u8; 300], relay).await.unwrap();
    }
    for _ in 0..4 {
        assert_eq!(recv_from(&terminal).await.0, [2u8; 300]);
    }
    let s = emu.shutdown().await;
    assert_eq!((s.up.received_packets, s.up.received_bytes), (10, 1000));
    assert_eq!((s.up.sent_packets, s.up.sent_bytes), (10, 1000));
    assert_eq!(s.up.link.offered_packets, 10);
    assert_eq!(
        s.up.link.offered_bytes,
        10 * 128,
        "payload + 28 bytes of overhead"
    );
    assert_eq!(s.up.link.delivered_packets, 10);
    assert_eq!((s.down.received_packets, s.down.received_bytes), (4, 1200));
    assert_eq!((s.down.sent_packets, s.down.sent_bytes), (4, 1200));
    assert_eq!(s.down.link.delivered_bytes, 4 * 328);
    assert_eq!((s.up.dropped(), s.down.dropped()), (0, 0));
    assert_eq!((s.up.in_flight, s.down.in_flight), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_of_one_drops_everything_and_counts_it() {
    let mut up = link(10_000_000, 1);
    up.loss = Loss::Random { p: 1.0 };
    let (terminal, gateway, emu) = setup(up, link(10_000_000, 1)).await;
    for _ in 0..20 {
        terminal.send(b"lost").await.unwrap();
    }
    wait_for(&emu, |s| s.up.received_packets == 20).await;
    let mut buf = [0u8; 16];
    assert!(
        timeout(Duration::from_millis(200), gateway.recv_from(&mut buf))
            .await
            .is_err(),
        "nothing may arrive"
    );
    let s = emu.shutdown().await;
    assert_eq!(s.up.link.dropped_error, 20);
    assert_eq!(s.up.dropped(), 20);
    assert_eq!((s.up.link.delivered_packets, s.up.sent_packets), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_spreads_a_burst() {
    const N: u64 = 20;
    const SIZE: u64 = 1000;
    const RATE: u64 = 1_000_000;
    let mut up = link(RATE, 0);
    up.queue = QueueLimit::Packets(100);
    let (terminal, gateway, emu) = setup(up, link(RATE, 0)).await;
    let t0 = Instant::now();
    for i in 0..N {
        let mut d = vec![0u8; SIZE as usize];
        d[0] = i as u8;
        terminal.send(&d).await.unwrap();
    }
    for i in 0..N {
        let (data, _) = recv_from(&gateway).await;
        assert_eq!(data[0], i as u8, "FIFO order");
    }
    let elapsed = t0.elapsed();
    let floor = Duration::from_nanos(N * SIZE * 8 * 1_000_000_000 / RATE);
    assert!(elapsed >= floor, "{elapsed:?} < {floor:?}");
    let s = emu.shutdown().await;
    assert_eq!(s.up.sent_packets, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_tail_queue_limits_a_burst() {
    // 1 kb/s (4 s per packet): nothing leaves during the burst; a 3-packet queue keeps 3 of 10.
    let mut up = link(1_000, 0);
    up.queue = QueueLimit::Packets(3);
    let (terminal, _gateway, emu) = setup(up, link(1_000, 0)).await;
    for _ in 0..10 {
        terminal.send(&[0u8; 500]).await.unwrap();
    }
    wait_for(&emu, |s| s.up.received_packets == 10).await;
    let s = emu.shutdown().await;
    assert_eq!(s.up.link.delivered_packets, 3);
    assert_eq!(s.up.link.dropped_queue, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_flips_one_bit_and_duplication_sends_twice() {
    let mut up = link(10_000_000, 1);
    up.corrupt_p = 1.0;
    up.duplicate_p = 1.0;
    let (terminal, gateway, emu) = setup(up, link(10_000_000, 1)).await;
    let sent = vec![0x5au8; 64];
    terminal.send(&sent).await.unwrap();
    for _ in 0..2 {
        let (got, _) = recv_from(&gateway).await;
        let flipped: u32 = got
            .iter()
            .zip(&sent)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!((got.len(), flipped), (64, 1));
    }
    let s = emu.shutdown().await;
    assert_eq!((s.up.link.corrupted, s.up.link.duplicated), (1, 1));
    assert_eq!(s.up.sent_packets, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_and_empty_datagrams_pass_intact() {
    let (terminal, gateway, emu) = setup(link(1_000_000_000, 0), link(1_000_000_000, 0)).await;
    // 65 507 bytes: the largest UDP payload over IPv4.
    let big: Vec<u8> = (0..65_507u32).map(|i| (i % 251) as u8).collect();
    terminal.send(&big).await.unwrap();
    assert_eq!(recv_from(&gateway).await.0, big);
    terminal.send(&[]).await.unwrap();
    assert_eq!(recv_from(&gateway).await.0, Vec::<u8>::new());
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_gateway_may_send_down() {
    let (terminal, gateway, emu) = setup(link(10_000_000, 0), link(10_000_000, 0)).await;
    terminal.send(b"hello").await.unwrap();
    let (_, relay) = recv_from(&gateway).await;
    let stranger = bind().await;
    stranger.send_to(b"spoof", relay).await.unwrap();
    wait_for(&emu, |s| s.down.ignored_foreign == 1).await;
    gateway.send_to(b"real", relay).await.unwrap();
    assert_eq!(recv_from(&terminal).await.0, b"real");
    let s = emu.shutdown().await;
    assert_eq!(s.down.received_packets, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_link_names_direction_and_field() {
    let mut up = link(10_000_000, 0);
    up.loss = Loss::Random { p: 1.5 };
    let config = EmulatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        to: "127.0.0.1:9".parse().unwrap(),
        up,
        down: link(10_000_000, 0),
        seed: 1,
    };
    match UdpEmulator::start(config).await {
        Err(EmulatorError::Link { direction, source }) => {
            assert_eq!(direction, Direction::Up);
            assert_eq!(source.field, "loss");
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("accepted an invalid link"),
    }
}
