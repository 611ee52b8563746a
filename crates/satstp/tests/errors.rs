//! Errors a person reads once: bad input to any subcommand gets one line of context per cause,
//! each cause said once, and a failing exit status. The exact text is pinned.

use std::path::PathBuf;
use std::process::Command;

fn satstp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_satstp"))
}

fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("satstp-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `satstp args`, which must fail; its standard error.
fn stderr_of(args: &[&str]) -> String {
    let o = satstp().args(args).output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded");
    String::from_utf8(o.stderr).unwrap()
}

#[test]
fn a_missing_config_file_is_named_once() {
    for side in ["terminal", "gateway"] {
        assert_eq!(
            stderr_of(&[side, "--config", "/nonexistent.toml"]),
            "error: /nonexistent.toml: no such file\n"
        );
    }
    assert_eq!(
        stderr_of(&["sim", "/nonexistent.toml"]),
        "error: cannot read scenario /nonexistent.toml: No such file or directory (os error 2)\n"
    );
}

#[test]
fn a_toml_error_shows_its_excerpt_once() {
    let p = file("bad.toml", "[terminal\nx = 1\n");
    let path = p.display();
    assert_eq!(
        stderr_of(&["terminal", "--config", &p.to_string_lossy()]),
        format!(
            "error: {path}: TOML parse error at line 1, column 10\n  |\n1 | [terminal\n  |          ^\n\
             invalid table header\nexpected `.`, `]`\n"
        )
    );
}

#[test]
fn a_bad_field_value_is_named_once() {
    let p = file("listen.toml", "[gateway]\nlisten = \"nope\"\n");
    let path = p.display();
    assert_eq!(
        stderr_of(&["gateway", "--config", &p.to_string_lossy()]),
        format!(
            "error: {path}: TOML parse error at line 2, column 10\n  |\n2 | listen = \"nope\"\n  \
             |          ^^^^^^\ninvalid socket address syntax\n"
        )
    );
    let p = file(
        "terminals.toml",
        "[gateway]\nlisten = \"127.0.0.1:4433\"\nprivate_key_file = \"/nonexistent.key\"\n\
         allowed_terminals = []\n",
    );
    let path = p.display();
    assert_eq!(
        stderr_of(&["gateway", "--config", &p.to_string_lossy()]),
        format!(
            "error: {path}: gateway.allowed_terminals: empty and no allowed_terminals_file: no \
             terminal could connect\n"
        )
    );
}

#[test]
fn a_bad_flag_names_the_flag_and_the_valid_values() {
    assert_eq!(
        stderr_of(&["bench", "link", "--profile", "mars"]),
        "error: invalid value 'mars' for '--profile <PROFILE>': unknown profile 'mars' (valid \
         profiles: geo, geo-1998, direcpc, leo)\n\nFor more information, try '--help'.\n"
    );
}

#[test]
fn a_bad_scenario_is_named_once() {
    let p = file("scenario.toml", "[topology\n");
    let path = p.display();
    assert_eq!(
        stderr_of(&["sim", &p.to_string_lossy()]),
        format!(
            "error: invalid scenario {path}: scenario file is not valid TOML or has unknown/missing \
             fields: TOML parse error at line 1, column 10\n  |\n1 | [topology\n  |          ^\n\
             invalid table header\nexpected `.`, `]`\n"
        )
    );
}
