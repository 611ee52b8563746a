//! Chromium loads the test site over HTTP/3 on QUIC from the kit's HTTP/3 origin
//! (`loadgen::h3`): QUIC forced for the origin (`--origin-to-force-quic-on`), the run's own
//! certificate accepted by its key (`--ignore-certificate-errors-spki-list`, the browser
//! process's own allow-list: no trust store is touched). The load must be complete (every
//! object 200, images decoded, scripts run), and the origin must have answered every object of
//! the site over QUIC exactly once and in full, with the site's own byte counts.
//! Both Debian forms (`chromium`, `chromium-headless-shell`) are tried, as tests/chromium.rs does.

mod common;

use browser::site::PAGE_PATH;
use browser::{Chromium, Site};
use common::{browsers, site_files, site_request};
use loadgen::h3::H3Origin;
use loadgen::tls::TestPki;
use std::collections::BTreeMap;

#[test]
fn chromium_loads_the_site_over_http3_byte_exact() {
    for chromium in browsers("chromium_loads_the_site_over_http3_byte_exact") {
        loads_over_quic(&chromium);
    }
}

fn loads_over_quic(chromium: &Chromium) {
    let site = Site::standard();
    let ca = TestPki::generate(&["127.0.0.1".into()]).expect("test CA");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
    let origin =
        H3Origin::start_in_thread(socket, &ca, Some(site_files(&site, None))).expect("origin");
    // The SPKI allow-list comes with the origin's flags.
    let req = site_request(
        format!("https://127.0.0.1:{}{PAGE_PATH}", origin.addr().port()),
        &site,
    );
    let load = chromium
        .load_with_flags(&req, &origin.chromium_flags("127.0.0.1"))
        .unwrap_or_else(|e| {
            panic!(
                "{}: load over HTTP/3 failed: {e}; origin errors {:?}",
                chromium.path().display(),
                origin.errors()
            )
        });
    assert_eq!(load.subresources, site.subresources());
    // QUIC was used: the origin completed QUIC handshakes (one per browser connection; Chromium
    // multiplexes a host's requests on one) and answered every object on them.
    assert!(origin.connections() >= 1, "no QUIC connection");
    let served: BTreeMap<String, Vec<u64>> =
        origin
            .served()
            .into_iter()
            .fold(BTreeMap::new(), |mut m, s| {
                m.entry(s.path).or_default().push(s.bytes);
                m
            });
    for o in site.objects() {
        assert_eq!(
            served.get(&o.path),
            Some(&vec![o.body.len() as u64]),
            "{} must be answered once, in full, over QUIC",
            o.path
        );
    }
    assert_eq!(served.len(), site.objects().len(), "{served:?}");
    // A request Chromium cancelled (it does, as a normal part of loading) is counted, not an
    // error; every object was still answered once, in full, above.
    assert!(origin.errors().is_empty(), "{:?}", origin.errors());
    eprintln!(
        "{}: load over HTTP/3 {:?}, {} QUIC connection(s), {} object(s), not found {:?}, \
         cancelled by the browser {:?}",
        chromium.path().display(),
        load.load,
        origin.connections(),
        served.len(),
        origin.not_found().first,
        origin.cancelled().first
    );
}
