//! A revoked terminal loses its sessions on every worker of the gateway (`workers = 2` on both
//! sides). The workers' own statuses (connections on every worker, the metrics their sums, the
//! limits and the send allocation shared) are read in `src/stack/tests_workers.rs`. The other
//! suites run with several workers too: `SATSTP_TEST_WORKERS=2 cargo test -p pep --test hop`.

mod common;

use common::{default_pair, download, origin};
use pep::ops::OpsConfig;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_terminal_loses_its_sessions_on_every_worker() {
    let origin = origin().await;
    let p = default_pair(OpsConfig::unlimited()).await;
    assert!(download(p.socks, origin, 1000).await);
    assert!(download(p.socks, origin, 1000).await);
    let change = p.gw.set_allowed_terminals(vec![]).await;
    assert_eq!(change.removed, vec![p.terminal_key]);
    // Every connection from now on fails, whichever worker it goes to.
    for _ in 0..4 {
        assert!(
            !download(p.socks, origin, 1000).await,
            "a revoked terminal got through"
        );
    }
    // Allowed again, both workers' sessions come back.
    p.gw.set_allowed_terminals(vec![p.terminal_key]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ok = 0;
    while ok < 4 && Instant::now() < deadline {
        if download(p.socks, origin, 1000).await {
            ok += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(ok, 4, "the terminal is back on every worker");
}
