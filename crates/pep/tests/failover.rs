//! A terminal configured with several gateways (`Security::TerminalFailover`) needs at least
//! one. The failover itself (`hop/tests_failover.rs`) is timed against the hop's re-handshake
//! constants, which are not API.

mod common;

use common::hop_config;
use pep::hop::{Hop, Security};
use pep::keys::generate_keypair;
use tokio::net::UdpSocket;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_needs_a_gateway() {
    let (tk, _) = generate_keypair().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let e = Hop::start(
        sock,
        Security::TerminalFailover {
            local: tk,
            gateways: vec![],
        },
        hop_config(1, 1 << 20),
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("at least one gateway"), "{e}");
}
