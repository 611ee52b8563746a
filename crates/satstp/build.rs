//! Embeds every reproduction under `scenarios/reproduce/` (a `NAME.toml` and the scenario
//! template it names) into the binary, so `satstp reproduce` works from any directory; and puts
//! the git commit the binary was built from into `satstp --version` (`SATSTP_VERSION`):
//! "0.1.0 (commit 1a2b3c4d5e6f)", or "0.1.0 (commit unknown)" when the source is not a git
//! checkout or git cannot be run (a source tarball, no git installed).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

fn main() {
    version();
    reproductions();
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn version() {
    let version = env!("CARGO_PKG_VERSION");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    let text = match &commit {
        Some(c) => format!("{version} (commit {c})"),
        None => format!("{version} (commit unknown)"),
    };
    println!("cargo:rustc-env=SATSTP_VERSION={text}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it names (a commit).
    // Only files that exist: cargo reruns a script every build for a missing one.
    if commit.is_some() {
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for name in watch {
            if let Some(p) = git(&["rev-parse", "--git-path", &name]) {
                if Path::new(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
        }
    }
}

fn reproductions() {
    // Read at run time: `env!` would bake in the directory the build script was compiled in,
    // so a target directory copied from another checkout would embed that checkout's files.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("../../scenarios/reproduce");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut entries: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let p = e.path();
            println!("cargo:rerun-if-changed={}", p.display());
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if name.ends_with(".toml") && !name.ends_with(".template.toml") {
                entries.push(name);
            }
        }
    }
    entries.sort();
    let mut out = String::from("/// (file name, contents) of every reproduction and template.\npub const FILES: &[(&str, &str)] = &[\n");
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut all: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        all.sort();
        for p in all {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let _ = writeln!(
                out,
                "    ({name:?}, include_str!({:?})),",
                p.display().to_string()
            );
        }
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("reproductions.rs");
    std::fs::write(dest, out).expect("write reproductions.rs");
}
