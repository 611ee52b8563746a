//! SOCKS5 fast open with a request written later than the terminal waits for early bytes
//! ([`crate::terminal::socks5::SOCKS_EARLY_DATA_WAIT`], not API): client → terminal → emulated
//! GEO link → gateway → local origin server, on loopback. The other SOCKS5 suites are
//! `tests/socks_e2e.rs`.

use crate::tests_common::{assert_reset, closed_port, fetch_1000, geo_pair, origin, socks_connect};
use std::time::Instant;
use tokio::io::AsyncWriteExt;

/// SOCKS5 fast open over GEO with a client that writes its request later than the terminal waits
/// for early bytes (as a browser may, with a connection it opened before it had a request for
/// it): the request crosses the hop at once instead of waiting for the gateway's verdict, so its
/// answer comes one round trip after it was written, not two; a refused connect still resets
/// the client after it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_open_requests_written_late_do_not_wait_for_the_verdict() {
    let origin = origin().await;
    let st = geo_pair(true).await;
    let late = crate::terminal::socks5::SOCKS_EARLY_DATA_WAIT * 20;
    for round in 0..2 {
        let (mut s, code) = socks_connect(st.socks, origin).await;
        assert_eq!(code, 0);
        tokio::time::sleep(late).await;
        let t0 = Instant::now();
        fetch_1000(&mut s).await;
        // The first connection brings the tunnel up; the second is timed.
        if round == 1 {
            let took = t0.elapsed().as_secs_f64();
            eprintln!("request written {late:?} after the SOCKS5 reply: answered in {took:.2} s");
            assert!(
                took < 0.9,
                "one round trip after the request expected, took {took:.2} s"
            );
        }
    }
    let (mut s, code) = socks_connect(st.socks, closed_port().await).await;
    assert_eq!(code, 0, "fast open answers before the verdict");
    tokio::time::sleep(late).await;
    s.write_all(b"D 1000\n").await.unwrap();
    assert_reset(&mut s).await;
}
