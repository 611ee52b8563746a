//! No upward imports in `pep` (`docs/architecture.md`, "The layers of `crates/pep`"): reads
//! every source file, collects the crate modules it names (`crate::x`, `crate::{x, y}`, and
//! `super::` from a file below the top level), and checks them against the layer rules of the
//! stream protocol's path: `stream` below everything, the client parsers on it alone, `hop`
//! below the relay, `splice` below the sides, the sides apart, `stack` on top.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Source files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The crate paths a line of code names, as their first two segments ("gateway::policy").
fn named(code: &str, own_top: &str, nested: bool, out: &mut BTreeSet<String>) {
    let mut add = |path: &str| {
        let mut it = path
            .split("::")
            .map(|s| s.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_')));
        if let Some(first) = it.next().filter(|s| !s.is_empty()) {
            match it.next().filter(|s| !s.is_empty()) {
                Some(second) => out.insert(format!("{first}::{second}")),
                None => out.insert(first.to_string()),
            };
        }
    };
    for (prefix, base) in [("crate::", ""), ("super::", own_top)] {
        if prefix == "super::" && !nested {
            continue;
        }
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            rest = &rest[i + prefix.len()..];
            let join = |p: &str| {
                if base.is_empty() {
                    p.to_string()
                } else {
                    format!("{base}::{p}")
                }
            };
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for p in group[..end].split(',') {
                    add(&join(p.trim()));
                }
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                add(&join(&rest[..end]));
            }
        }
    }
}

/// Whether a module may not name a crate path.
type Banned = Box<dyn Fn(&str) -> bool>;

#[test]
fn no_module_of_pep_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // Module (top-level, or "top::sub") → what it names.
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let parts: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let top = parts[0].clone();
        let nested = parts.len() > 1;
        let text = std::fs::read_to_string(f).unwrap();
        let entry = uses.entry(top.clone()).or_default();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            named(code, &top, nested, entry);
        }
    }
    let top_of = |p: &str| p.split("::").next().unwrap_or(p).to_string();
    // Each rule: the module, and the modules it must not name (`*`: any but those allowed).
    let only = |allowed: &[&str]| -> Banned {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        Box::new(move |p: &str| !allowed.contains(&top_of(p)))
    };
    let none_of = |banned: &[&str]| -> Banned {
        let banned: Vec<String> = banned.iter().map(|s| s.to_string()).collect();
        // `gateway::policy` is configuration (sans-IO, read by `config`), not the serving side.
        Box::new(move |p: &str| p != "gateway::policy" && banned.contains(&top_of(p)))
    };
    let rules: Vec<(&str, Banned)> = vec![
        ("stream", only(&["stream"])),
        ("socks", only(&["socks", "stream"])),
        ("http_connect", only(&["http_connect", "stream"])),
        (
            "hop",
            none_of(&[
                "splice",
                "terminal",
                "gateway",
                "stack",
                "socks",
                "http_connect",
            ]),
        ),
        (
            "splice",
            none_of(&["terminal", "gateway", "stack", "socks", "http_connect"]),
        ),
        ("terminal", none_of(&["gateway", "stack"])),
        // The hop's security, sans-IO, one layer: the tunnel and the keys (which take the
        // tunnel's Noise parameters) name nothing else.
        ("tunnel", only(&["tunnel", "keys", "fast_hash"])),
        ("keys", only(&["keys", "tunnel"])),
        // Hash-map aliases below every layer (any may use them); they name nothing.
        ("fast_hash", only(&["fast_hash"])),
        // Configuration is read by the daemons and the stack, and names none of what runs.
        (
            "config",
            none_of(&[
                "stack",
                "terminal",
                "gateway",
                "splice",
                "socks",
                "http_connect",
                "ops",
                "metrics",
                "sockopt",
                "http_endpoint",
            ]),
        ),
        (
            "gateway",
            none_of(&["terminal", "stack", "socks", "http_connect"]),
        ),
    ];
    let mut wrong = Vec::new();
    for (module, banned) in &rules {
        let named = uses
            .get(*module)
            .unwrap_or_else(|| panic!("no module {module} in pep"));
        for p in named.iter().filter(|p| top_of(p) != *module) {
            if banned(p) {
                wrong.push(format!("{module} names crate::{p}"));
            }
        }
    }
    // Nothing but the crate root and `setup` (a configuration made into the stack's options,
    // the top layer) names the assembled stack.
    for (module, named) in &uses {
        let above = ["stack", "lib", "setup"].contains(&module.as_str());
        if !above && named.iter().any(|p| top_of(p) == "stack") {
            wrong.push(format!("{module} names crate::stack"));
        }
    }
    assert!(wrong.is_empty(), "upward imports: {wrong:#?}");
    // The check sees what it should: splice names the stream protocol and the hop.
    let splice = &uses["splice"];
    assert!(splice.iter().any(|p| p.starts_with("stream")), "{splice:?}");
    assert!(splice.iter().any(|p| p.starts_with("hop")), "{splice:?}");
    assert!(uses["terminal"].iter().any(|p| p.starts_with("splice")));
}

/// The sans-IO parts, which `netsim` runs in virtual time: the hop core names no driver of
/// the hop (`handle`, `stp`, `tcp`) and none of them, nor the stream protocol, names tokio.
#[test]
fn the_sans_io_parts_name_no_driver_and_no_tokio() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("hop/core.rs"), src.join("keys.rs")];
    for dir in ["stream", "tunnel"] {
        sources(&src.join(dir), &mut files);
    }
    let mut wrong = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with("//"));
        for line in code {
            let drivers = ["handle", "stp", "tcp"].iter().any(|d| {
                line.contains(&format!("super::{d}")) || line.contains(&format!("hop::{d}"))
            });
            if line.contains("tokio") || (f.ends_with("hop/core.rs") && drivers) {
                wrong.push(format!("{}: {line}", f.display()));
            }
        }
    }
    assert!(files.len() >= 6, "{files:?}");
    assert!(
        wrong.is_empty(),
        "sans-IO code names a driver or tokio: {wrong:#?}"
    );
}

#[test]
fn the_check_catches_an_upward_import() {
    let mut out = BTreeSet::new();
    named(
        "c.refuse(code.map_or(x, crate::terminal::refusal_for));",
        "splice",
        false,
        &mut out,
    );
    named("use crate::{splice, terminal};", "x", false, &mut out);
    named(
        "use super::accept::next_client;",
        "terminal",
        true,
        &mut out,
    );
    assert_eq!(
        out.into_iter().collect::<Vec<_>>(),
        [
            "splice",
            "terminal",
            "terminal::accept",
            "terminal::refusal_for"
        ]
    );
}
