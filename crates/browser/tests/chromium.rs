//! Headless Chromium loads the test site from the kit's origin: every object fetched, the
//! browser's timing read back, the browser's own extra requests (`/favicon.ico`) answered 404
//! without failing anything, and a site with a missing object reported as incomplete.
//! Each test runs with every Chromium installed: users have Debian's full `chromium` or its
//! `chromium-headless-shell`, and they behave differently (the full browser asks for a favicon).
//! scripts/install-deps.sh installs both; under CI a missing one fails the test, elsewhere the
//! test runs with what is present and prints what it skipped.

mod common;

use browser::site::PAGE_PATH;
use browser::{BrowserError, Chromium, LoadRequest, Site};
use common::{browsers, site_files, site_request};
use loadgen::origin::{Origin, OriginConfig};
use loadgen::tls::{Alpn, TestPki, TlsOptions};
use std::time::Duration;

fn serve(site: &Site, leave_out: Option<&str>) -> Origin {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    Origin::start_in_thread(
        listener,
        OriginConfig {
            files: Some(site_files(site, leave_out)),
            ..OriginConfig::default()
        },
    )
    .expect("origin")
}

/// The site over HTTPS (TLS 1.3 from a CA made for this test), `alpn` deciding HTTP/2 or
/// HTTP/1.1; the leaf key's hash for the browser's allow-list.
fn serve_tls(site: &Site, alpn: Alpn) -> (Origin, String) {
    let pki = TestPki::generate(&["127.0.0.1".into()]).expect("test CA");
    let options = TlsOptions {
        alpn,
        ..TlsOptions::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let origin = Origin::start_in_thread(
        listener,
        OriginConfig {
            files: Some(site_files(site, None)),
            tls: Some(pki.server_config(options).expect("TLS config")),
            ..OriginConfig::default()
        },
    )
    .expect("origin");
    (origin, pki.spki_sha256().to_string())
}

/// The system's and the user's trust stores: Debian's CA bundle and its hashed links, the
/// local CA directory update-ca-certificates reads, and Chromium's NSS database.
fn trust_stores() -> Vec<std::path::PathBuf> {
    let mut v = vec![
        "/etc/ssl/certs".into(),
        "/usr/local/share/ca-certificates".into(),
        "/usr/share/ca-certificates".into(),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        v.push(std::path::Path::new(&home).join(".pki/nssdb"));
    }
    v
}

/// Every file under `dirs` (links followed) with a hash of its bytes; a missing directory is
/// recorded as missing.
fn snapshot(dirs: &[std::path::PathBuf]) -> Vec<(String, u64)> {
    use std::hash::{Hash, Hasher};
    fn walk(p: &std::path::Path, out: &mut Vec<(String, u64)>) {
        match std::fs::read_dir(p) {
            Ok(entries) => {
                let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
                names.sort();
                for n in names {
                    walk(&n, out);
                }
            }
            Err(_) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                match std::fs::read(p) {
                    Ok(bytes) => bytes.hash(&mut h),
                    Err(e) => e.kind().to_string().hash(&mut h),
                }
                out.push((p.display().to_string(), h.finish()));
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        walk(d, &mut out);
    }
    out
}

/// The site loads over HTTPS, HTTP/1.1 and HTTP/2, in every Chromium, each browser trusting the
/// run's certificate through its command line only (and refusing it without): no system or user
/// trust store is different after the loads.
#[test]
fn the_site_loads_over_https_and_no_trust_store_changes() {
    let before = snapshot(&trust_stores());
    assert!(
        before.len() > 10,
        "no CA bundle under /etc/ssl/certs to watch: {before:?}"
    );
    for chromium in browsers("the_site_loads_over_https_and_no_trust_store_changes") {
        https_loads(&chromium);
    }
    let after = snapshot(&trust_stores());
    let changed: Vec<_> = before
        .iter()
        .filter(|b| !after.contains(b))
        .chain(after.iter().filter(|a| !before.contains(a)))
        .collect();
    assert!(changed.is_empty(), "trust store files changed: {changed:?}");
}

fn https_loads(chromium: &Chromium) {
    let site = Site::standard();
    for (alpn, protocol) in [(Alpn::Http1, "http/1.1"), (Alpn::Http2, "h2")] {
        // Without the key's hash the browser refuses the run's certificate.
        let (untrusted, _) = serve_tls(&site, alpn);
        let mut req = request(&untrusted, &site);
        req.url = format!("https://{}{PAGE_PATH}", untrusted.addr());
        req.timeout = Duration::from_secs(10);
        if let Ok(l) = chromium.load(&req) {
            panic!("an untrusted certificate was accepted: {l:?}");
        }
        let refused = untrusted.errors();
        assert!(
            !refused.is_empty() && refused.iter().all(|e| e.contains("CertificateUnknown")),
            "{refused:?}"
        );

        let (origin, spki) = serve_tls(&site, alpn);
        let mut req = request(&origin, &site);
        req.url = format!("https://{}{PAGE_PATH}", origin.addr());
        req.trust_spki = vec![spki];
        let load = chromium
            .load(&req)
            .unwrap_or_else(|e| panic!("{} over {protocol}: {e}", chromium.path().display()));
        assert_eq!(load.protocol, protocol, "{}", chromium.path().display());
        assert_eq!(load.subresources, site.subresources());
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
        eprintln!(
            "{} over {protocol}: load {:?}, {} connection(s)",
            chromium.path().display(),
            load.load,
            origin.accepted()
        );
    }
}

fn request(origin: &Origin, site: &Site) -> LoadRequest {
    site_request(format!("http://{}{PAGE_PATH}", origin.addr()), site)
}

#[test]
fn the_whole_site_loads_and_the_browser_times_it() {
    for chromium in browsers("the_whole_site_loads_and_the_browser_times_it") {
        whole_site_loads(&chromium);
    }
}

fn whole_site_loads(chromium: &Chromium) {
    let site = Site::standard();
    let origin = serve(&site, None);
    let load = chromium
        .load(&request(&origin, &site))
        .expect("complete load");
    assert_eq!(load.subresources, site.subresources());
    assert!(load.first_byte <= load.dom_content_loaded, "{load:?}");
    assert!(load.dom_content_loaded <= load.load, "{load:?}");
    assert!(
        load.load > Duration::ZERO && load.load < load.wall,
        "{load:?}"
    );
    // The waterfall: every object once, the page first, and a critical path through the site's
    // references whose parts add up to the load time.
    assert_eq!(load.fetches.len(), site.objects().len());
    assert_eq!(load.fetches[0].path, PAGE_PATH);
    let load_ms = load.load.as_secs_f64() * 1000.0;
    let path = browser::waterfall::critical_path(&load.fetches, load_ms, |p| {
        site.referrer(p).map(String::from)
    })
    .expect("critical path");
    assert!(path.requests() >= 2, "{path:?}");
    assert!(
        (path.total_ms() - load_ms).abs() < 1.0,
        "{path:?} vs {load_ms}"
    );
    // One page plus its subresources, each on some connection of the browser's.
    assert!(origin.accepted() >= 1);
    assert!(origin.errors().is_empty(), "{:?}", origin.errors());
    // Whatever else the browser asked for (the full browser's /favicon.ico) was answered 404
    // and counted, and is not one of the site's objects.
    let extra = origin.not_found();
    for line in &extra.first {
        let path = line.split_whitespace().nth(1).unwrap_or("");
        assert!(
            site.objects().iter().all(|o| o.path != path),
            "{line} is a site object answered 404"
        );
    }
    eprintln!(
        "{}: load {:?}, {} request(s) for paths the site does not have: {:?}",
        chromium.path().display(),
        load.load,
        extra.count,
        extra.first
    );
}

#[test]
fn a_missing_object_makes_the_load_incomplete() {
    for chromium in browsers("a_missing_object_makes_the_load_incomplete") {
        missing_object_is_reported(&chromium);
    }
}

fn missing_object_is_reported(chromium: &Chromium) {
    let site = Site::standard();
    let origin = serve(&site, Some("/site/css/theme.css"));
    match chromium.load(&request(&origin, &site)) {
        Err(BrowserError::Incomplete(why)) => {
            assert!(why.contains("answered with an error status"), "{why}");
            assert!(why.contains("imported style sheet"), "{why}");
        }
        other => panic!("expected an incomplete load, got {other:?}"),
    }
}
