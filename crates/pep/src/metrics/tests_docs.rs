//! Every metric a reader finds in the documentation is one the daemons export: each
//! `satstp_…` name in README.md, docs/*.md and deploy/*.md appears in the `/metrics` text of
//! the terminal or the gateway (`Metrics::prometheus_text`, what `/metrics` serves).

use crate::metrics::{Metrics, Side};
use std::collections::BTreeSet;
use std::path::Path;

fn documented_names() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "deploy"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    let mut names = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("satstp_") {
            let before = rest[..i].chars().next_back();
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            // `satstp_` alone is the prefix, spoken of as such.
            if end > "satstp_".len()
                && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/')
            {
                names.insert(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    names
}

#[test]
fn every_metric_named_in_the_docs_is_exported() {
    let mut exported = BTreeSet::new();
    for side in [Side::Terminal, Side::Gateway] {
        let m = Metrics::new(side);
        // The QUIC policy's lines appear once a transparent terminal has one.
        if side == Side::Terminal {
            m.set_quic_policy(crate::quic_policy::QuicPolicy::Block);
        }
        for line in m.prometheus_text().lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                exported.insert(rest.split(' ').next().unwrap_or("").to_string());
            }
        }
    }
    let mut documented = documented_names();
    // Not metrics: the nftables table the terminal's QUIC policy installs (docs/quic.md).
    documented.remove("satstp_quic");
    assert!(documented.len() >= 10, "{documented:?}");
    let missing: Vec<_> = documented.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "named in the docs but not exported: {missing:?}"
    );
}
