//! What the browser crate's integration tests share.

use browser::Chromium;

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
