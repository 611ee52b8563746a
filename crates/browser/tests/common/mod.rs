//! What the browser crate's integration tests share.

use browser::{Chromium, LoadRequest, Site};
use loadgen::origin::Files;
use std::sync::Arc;
use std::time::Duration;

/// The two forms Debian ships, both tried.
const FORMS: [&str; 2] = ["chromium", "chromium-headless-shell"];

/// Each installed form; a missing one cannot run `test` (a failure under CI).
pub fn browsers(test: &str) -> Vec<Chromium> {
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

/// The site's objects as the kit's origins serve them, but for `leave_out` (a path) if given.
pub fn site_files(site: &Site, leave_out: Option<&str>) -> Arc<Files> {
    let mut files = Files::new();
    for o in site.objects() {
        if Some(o.path.as_str()) != leave_out {
            files.insert(&o.path, o.content_type, o.body.clone());
        }
    }
    Arc::new(files)
}

/// A load of the test site `site` at `url`: direct (no SOCKS5, no namespace), within 60 s, with
/// the site's subresources and scripts expected, and no extra key trusted.
pub fn site_request(url: String, site: &Site) -> LoadRequest {
    LoadRequest {
        url,
        socks5: None,
        netns: None,
        timeout: Duration::from_secs(60),
        expect_subresources: site.subresources(),
        expect_scripts: site.scripts(),
        trust_spki: Vec::new(),
    }
}
