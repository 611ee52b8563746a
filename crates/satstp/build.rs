//! Puts the git commit the binary was built from into `satstp --version` (`SATSTP_VERSION`):
//! "0.1.0 (commit 1a2b3c4d5e6f)", or "0.1.0 (commit unknown)" when the source is not a git
//! checkout or git cannot be run (a source tarball, no git installed).

use std::path::Path;
use std::process::Command;

fn main() {
    version();
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
