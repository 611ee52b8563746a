//! Headless Chromium loads the test site from the kit's origin: every object fetched, the
//! browser's timing read back, the browser's own extra requests (`/favicon.ico`) answered 404
//! without failing anything, and a site with a missing object reported as incomplete.
//! Each test runs with every Chromium installed: users have Debian's full `chromium` or its
//! `chromium-headless-shell`, and they behave differently (the full browser asks for a favicon).
//! scripts/install-deps.sh installs both; under CI a missing one fails the test, elsewhere the
//! test runs with what is present and prints what it skipped.

use browser::site::PAGE_PATH;
use browser::{BrowserError, Chromium, LoadRequest, Site};
use loadgen::origin::{Files, Origin, OriginConfig};
use std::sync::Arc;
use std::time::Duration;

/// The two forms Debian ships, both tried.
const FORMS: [&str; 2] = ["chromium", "chromium-headless-shell"];

fn browsers(test: &str) -> Vec<Chromium> {
    FORMS
        .iter()
        .filter_map(|name| match Chromium::named(name) {
            Ok(c) => Some(c),
            Err(e) => {
                testenv::cannot_run(&format!("{test} with {name}"), &e.to_string());
                None
            }
        })
        .collect()
}

fn serve(site: &Site, leave_out: Option<&str>) -> Origin {
    let mut files = Files::new();
    for o in site.objects() {
        if Some(o.path.as_str()) != leave_out {
            files.insert(&o.path, o.content_type, o.body.clone());
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    Origin::start_in_thread(
        listener,
        OriginConfig {
            files: Some(Arc::new(files)),
            ..OriginConfig::default()
        },
    )
    .expect("origin")
}

fn request(origin: &Origin, site: &Site) -> LoadRequest {
    LoadRequest {
        url: format!("http://{}{PAGE_PATH}", origin.addr()),
        socks5: None,
        netns: None,
        timeout: Duration::from_secs(60),
        expect_subresources: site.subresources(),
        expect_scripts: site.scripts(),
    }
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
