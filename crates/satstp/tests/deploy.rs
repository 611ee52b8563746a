//! The shipped deployment files hold together: the systemd units pass `systemd-analyze verify`
//! (with the binary under test at their `ExecStart` path) and their documentation URL is a file
//! the install instructions put there; the daemons' container image builds from this repository
//! without downloading anything but crates and Debian packages, and its compose file runs a
//! terminal and a gateway joined by `satstp emulate udp` with commands the binary accepts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const UNITS: [&str; 2] = ["satstp-terminal.service", "satstp-gateway.service"];

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let dir = common::fresh_dir("units");
    let exe = env!("CARGO_BIN_EXE_satstp");
    let mut files = Vec::new();
    for unit in UNITS {
        let text = read(&format!("deploy/{unit}"));
        assert!(text.contains("ExecStart=/usr/local/bin/satstp "), "{unit}");
        let file = dir.join(unit);
        std::fs::write(&file, text.replace("/usr/local/bin/satstp", exe)).unwrap();
        files.push(file);
    }
    let out = match Command::new("systemd-analyze")
        .arg("verify")
        .args(&files)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            testenv::cannot_run(
                "systemd_units_pass_systemd_analyze_verify",
                &format!("no systemd-analyze ({e})"),
            );
            return;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_units_documentation_is_installed_by_the_instructions() {
    let readme = read("deploy/README.md");
    let containerfile = read("deploy/container/Containerfile");
    for unit in UNITS {
        let text = read(&format!("deploy/{unit}"));
        let doc = text
            .lines()
            .find_map(|l| l.strip_prefix("Documentation=file://"))
            .unwrap_or_else(|| panic!("{unit}: no Documentation=file:// line"));
        // The install instructions of the unit and of deploy/README.md create it, from a
        // file of the repository; so does the image.
        let install = format!("install -D -m 0644 deploy/README.md {doc}");
        assert!(text.contains(&install), "{unit} does not say `{install}`");
        assert!(
            readme.contains(&install),
            "deploy/README.md does not say `{install}`"
        );
        assert!(
            containerfile.contains(&format!("COPY deploy/README.md {doc}")),
            "the image lacks {doc}"
        );
        assert!(doc.ends_with("/deploy/README.md"));
        // Reload is the daemon's SIGHUP, after a check of the file.
        assert!(
            text.contains("ExecReload=/bin/kill -HUP $MAINPID"),
            "{unit}"
        );
    }
}

#[test]
fn the_container_builds_from_the_repository_and_compose_runs_the_daemons() {
    let containerfile = read("deploy/container/Containerfile");
    // Nothing fetched but crates (cargo) and Debian packages (apt-get).
    for fetch in ["curl ", "wget ", "git clone", "ADD http"] {
        assert!(
            !containerfile.contains(fetch),
            "the Containerfile runs {fetch:?}"
        );
    }
    assert!(containerfile.contains("cargo build --release --locked -p satstp"));
    for line in containerfile.lines() {
        if let Some(rest) = line.strip_prefix("COPY ") {
            if rest.starts_with("--from") || rest.starts_with(". ") {
                continue;
            }
            let mut parts: Vec<&str> = rest.split_whitespace().collect();
            parts.pop();
            for source in parts {
                assert!(
                    repo().join(source).exists(),
                    "COPY {source}: not in the repository"
                );
            }
        }
    }
    let compose = read("deploy/container/compose.yaml");
    assert!(compose.contains("dockerfile: deploy/container/Containerfile"));
    // Each service's command, as the binary under test parses it (`--help` appended, so
    // nothing runs): the gateway, the terminal and the UDP link emulator between them.
    let mut seen = Vec::new();
    for line in compose.lines() {
        let Some(cmd) = line.trim().strip_prefix("command: [") else {
            continue;
        };
        // A command may continue on the next line; the services' are on one or two.
        let start = compose.find(line).unwrap();
        let rest = &compose[start..];
        let end = rest.find(']').unwrap();
        let list = &rest[rest.find('[').unwrap() + 1..end];
        let args: Vec<String> = list
            .split(',')
            .map(|a| a.trim().trim_matches('"').to_string())
            .filter(|a| !a.is_empty())
            .collect();
        assert_eq!(args.first().map(String::as_str), Some("satstp"), "{cmd}");
        let sub: Vec<&str> = args[1..]
            .iter()
            .map(String::as_str)
            .take_while(|a| !a.starts_with("--"))
            .collect();
        let out = common::satstp().args(&sub).arg("--help").output().unwrap();
        assert!(out.status.success(), "satstp {sub:?} --help failed");
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            assert!(help.contains(flag.as_str()), "satstp {sub:?} has no {flag}");
        }
        seen.push(sub.join(" "));
    }
    seen.sort();
    assert_eq!(seen, ["emulate udp", "gateway", "terminal"], "{compose}");
    // The terminal reaches the gateway through the emulator, which forwards to the gateway.
    assert!(compose.contains("\"--to\", \"gateway:4433\""));
    let setup = read("deploy/container/setup.sh");
    assert!(setup.contains("gateway = \"link:4433\""));
}
