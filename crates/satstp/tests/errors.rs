//! Errors a person reads once: bad input to any subcommand gets one line of context per cause,
//! each cause said once, and a failing exit status. The exact text is pinned.

use std::path::PathBuf;
use std::process::Command;

fn satstp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_satstp"))
}

/// A file a test writes, in a directory of its own that goes when the test is done with it.
struct TestFile(PathBuf);

impl std::ops::Deref for TestFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn file(name: &str, text: &str) -> TestFile {
    let dir = std::env::temp_dir().join(format!("satstp-errors-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    TestFile(p)
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

/// One bad input: the command line (`{dir}` stands for a fresh directory holding `files`),
/// what the error must name, and a phrase of the reason that must appear exactly once.
struct Bad {
    args: &'static str,
    files: &'static [(&'static str, &'static str)],
    names: &'static [&'static str],
    once: &'static str,
}

const TERMINAL: &str =
    "[terminal]\nsocks_listen = \"127.0.0.1:1080\"\ngateway = \"127.0.0.1:4433\"\n\
gateway_public_key = \"2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b\"\n\
private_key_file = \"/nonexistent/terminal.key\"\n";

const SCENARIO: &str = "name = \"s\"\nduration = \"10s\"\nruns = 1\n\
[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\
[[link]]\na = \"a\"\nb = \"b\"\nrate = \"1Mbps\"\ndelay = \"10ms\"\nqueue_packets = 10\n\
[[flow]]\nname = \"f\"\nprotocol = \"stp\"\nfrom = \"a\"\nto = \"b\"\nbytes = \"10KB\"\n";

const TLE: &str = "ISS (ZARYA)\n\
1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927\n\
2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537\n";

/// `text` with `from` replaced by `to` (once), leaked for the static table.
fn edit(text: &str, from: &str, to: &str) -> &'static str {
    assert!(text.contains(from), "{from:?} not in the base text");
    Box::leak(text.replacen(from, to, 1).into_boxed_str())
}

fn terminal_with(extra: &str) -> &'static str {
    Box::leak(format!("{TERMINAL}{extra}").into_boxed_str())
}

/// Words that betray the program's internals instead of the user's vocabulary.
const INTERNALS: [&str; 12] = [
    "u8",
    "u16",
    "u32",
    "u64",
    "i64",
    "f64",
    "usize",
    "untagged",
    "enum",
    "RunsSpec",
    "panicked",
    "backtrace",
];

fn bad_inputs() -> Vec<Bad> {
    let t = |extra: &str| -> &'static [(&'static str, &'static str)] {
        Box::leak(Box::new([("t.toml", terminal_with(extra))]))
    };
    let sc = |from: &str, to: &str| -> &'static [(&'static str, &'static str)] {
        Box::leak(Box::new([("s.toml", edit(SCENARIO, from, to))]))
    };
    let tle = |from: &str, to: &str| -> &'static [(&'static str, &'static str)] {
        Box::leak(Box::new([("x.tle", edit(TLE, from, to))]))
    };
    let file =
        |name: &'static str, text: &'static str| -> &'static [(&'static str, &'static str)] {
            Box::leak(Box::new([(name, text)]))
        };
    vec![
        // Gateway configuration files.
        Bad { args: "terminal --config {dir}/t.toml", files: t("down_rate_bps = -5\n"), names: &["t.toml", "down_rate_bps", "line 6"], once: "-5 is negative" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("down_rate_bps = \"5mbps\"\n"), names: &["down_rate_bps", "5Mbps", "5MBps"], once: "is ambiguous" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("up_rate_bps = \"3 furlongs\"\n"), names: &["up_rate_bps", "furlongs", "kbps"], once: "unknown unit" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("rtt_ms = \"600\"\n"), names: &["rtt_ms", "600ms"], once: "has no unit" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("rtt_ms = true\n"), names: &["rtt_ms", "milliseconds"], once: "true is not a quantity" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("bogus_key = 1\n"), names: &["line 6, column 1", "6 | bogus_key = 1\n  | ^^^^^^^^^"], once: "unknown field `bogus_key`" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("[terminal.stp]\nmax_datagram_bytes = 100000\n"), names: &["max_datagram_bytes", "100000"], once: "expected a whole number from 0 to 65535" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("idle_timeout_s = -1\n"), names: &["idle_timeout_s", "-1"], once: "expected a whole number from 0 to 4294967295" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("idle_timeout_s = 0\n"), names: &["terminal.idle_timeout_s"], once: "must be positive" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("connect_timeout_s = 99999\n"), names: &["terminal.connect_timeout_s"], once: "must be from 1 to 3600" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("[terminal.stp]\nreverse_rate_bps = \"64Kb\"\n"), names: &["reverse_rate_bps", "ps"], once: "no per-second unit" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("[terminal.limits]\nmax_connections = -1\n"), names: &["max_connections", "-1"], once: "expected a whole number from 0 to 4294967295" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("quic = \"drop\"\n"), names: &["quic", "drop", "`pass`", "`block`", "`reject`"], once: "expected one of" },
        Bad { args: "terminal --config {dir}/t.toml", files: t("quic = \"block\"\n"), names: &["terminal.quic", "tproxy_listen"], once: "acts on traffic the terminal routes in transparent mode" },
        Bad { args: "gateway --config {dir}/g.toml", files: file("g.toml", "[gateway]\nlisten = \"nope\"\n"), names: &["g.toml", "listen"], once: "invalid socket address" },
        Bad { args: "terminal --config {dir}/missing.toml", files: &[], names: &["missing.toml"], once: "no such file" },
        // Scenarios.
        Bad { args: "sim {dir}/s.toml", files: sc("runs = 1", "runs = -3"), names: &["s.toml", "runs = -3", "line 3"], once: "-3 is negative" },
        Bad { args: "sim {dir}/s.toml", files: sc("duration = \"10s\"", "duration = \"0s\""), names: &["duration", "120s"], once: "is zero" },
        Bad { args: "sim {dir}/s.toml", files: sc("duration = \"10s\"", "duration = \"10\""), names: &["duration", "10ms"], once: "has no unit" },
        Bad { args: "sim {dir}/s.toml", files: sc("duration = \"10s\"", "duration = \"5m\""), names: &["duration", "5min"], once: "ambiguous" },
        Bad { args: "sim {dir}/s.toml", files: sc("rate = \"1Mbps\"", "rate = \"1.5mbps\""), names: &["rate", "1.5Mbps"], once: "ambiguous" },
        Bad { args: "sim {dir}/s.toml", files: sc("rate = \"1Mbps\"", "rate = \"fast\""), names: &["rate", "fast"], once: "does not start with a number" },
        Bad { args: "sim {dir}/s.toml", files: sc("delay = \"10ms\"", "delay = \"-10ms\""), names: &["delay"], once: "is negative" },
        Bad { args: "sim {dir}/s.toml", files: sc("queue_packets = 10", "queue_bytes = \"100Kb\""), names: &["queue_bytes", "100KB"], once: "sizes are in bytes" },
        Bad { args: "sim {dir}/s.toml", files: sc("queue_packets = 10", "queue_packets = 10\nbogus = 1"), names: &["bogus = 1\n   | ^^^^^"], once: "unknown field `bogus`" },
        Bad { args: "sim {dir}/s.toml", files: sc("bytes = \"10KB\"", "bytes = \"10 MB/s\""), names: &["bytes", "MB/s"], once: "unknown unit" },
        Bad { args: "sim {dir}/s.toml", files: sc("runs = 1", "runs = 1\nmax_runs = 5"), names: &["max_runs"], once: "only applies to a rule" },
        Bad { args: "sim {dir}/s.toml", files: sc("runs = 1", "runs = 2.5"), names: &["runs"], once: "2.5 is not a whole number" },
        Bad { args: "sim {dir}/s.toml", files: file("s.toml", "[topology\n"), names: &["s.toml", "line 1"], once: "invalid table header" },
        // Traces.
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --down-rate 1Mbps --up-rate 1Mbps --delay-trace {dir}/d.txt --duration 1s", files: file("d.txt", "0 300\nabc def\n"), names: &["d.txt", "2"], once: "abc" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --down-rate 1Mbps --up-rate 1Mbps --delay-trace {dir}/d.txt --duration 1s", files: file("d.txt", "0 300\n1000 -5\n"), names: &["d.txt", "2"], once: "-5" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --down-rate 1Mbps --up-rate 1Mbps --delay-trace {dir}/missing.txt --duration 1s", files: &[], names: &["missing.txt"], once: "missing.txt" },
        // TLEs.
        Bad { args: "leo trace --tle {dir}/x.tle --from 0,0 --to 10,10 --duration 1s", files: tle("0  2927", "0  2928"), names: &["x.tle line 2", "TLE line 1"], once: "checksum" },
        Bad { args: "leo trace --tle {dir}/x.tle --from 0,0 --to 10,10 --duration 1s", files: tle("15.72125391563537", "15.7"), names: &["x.tle line 3", "TLE line 2"], once: "length" },
        Bad { args: "leo trace --tle {dir}/x.tle --from 0,0 --to 10,10 --duration 1s", files: tle("2 25544  51.6416", "9 25544  51.6416"), names: &["x.tle line 3"], once: "expected TLE line 2" },
        Bad { args: "leo trace --tle {dir}/x.tle --from 0,0 --to 10,10 --duration 1s", files: file("x.tle", "ISS\n"), names: &["x.tle line 1"], once: "incomplete TLE" },
        // Flags.
        Bad { args: "leo trace --mask 95 --from London --to Paris", files: &[], names: &["--mask 95", "90"], once: "elevation mask" },
        Bad { args: "leo trace --from Nowhere --to London", files: &[], names: &["Nowhere", "satstp leo list"], once: "unknown place" },
        Bad { args: "leo trace --from London --to Paris --duration 5", files: &[], names: &["--duration", "5ms"], once: "has no unit" },
        Bad { args: "demo --engine --loss -0.1", files: &[], names: &["--loss", "-0.1", "0.5"], once: "--loss" },
        Bad { args: "demo --engine --profile leo", files: &[], names: &["--engine", "--profile"], once: "cannot be used with" },
        Bad { args: "sim --shard 3/2 {dir}/s.toml", files: sc("runs = 1", "runs = 4"), names: &["--shard", "3/2"], once: "I = 3 is not below N = 2" },
        Bad { args: "sim --max-runs 0 {dir}/s.toml", files: sc("runs = 1", "runs = \"until-5%\""), names: &["--max-runs 0"], once: "at least 1 run" },
        Bad { args: "sim --runs 0 {dir}/s.toml", files: sc("runs = 1", "runs = 1"), names: &["--runs 0", "10000"], once: "--runs" },
        Bad { args: "sim --confidence 0.9 {dir}/s.toml", files: sc("runs = 1", "runs = 1"), names: &["--confidence", "0.95", "0.99"], once: "got 0.9" },
        Bad { args: "sim --json /nonexistent/x.json {dir}/s.toml", files: sc("runs = 1", "runs = 1"), names: &["--json", "/nonexistent"], once: "does not exist" },
        Bad { args: "sim --json {dir} {dir}/s.toml", files: sc("runs = 1", "runs = 1"), names: &["--json"], once: "is a directory" },
        Bad { args: "reproduce --out /etc/hostname table5.1-geo", files: &[], names: &["--out /etc/hostname", "directory"], once: "is a file" },
        Bad { args: "merge --out /etc/hostname {dir}", files: &[], names: &["--out /etc/hostname"], once: "is a file" },
        Bad { args: "leo map --out /nonexistent/dir/map", files: &[], names: &["--out", "/nonexistent/dir"], once: "does not exist" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --profile geo --duration 0s", files: &[], names: &["--duration 0s"], once: "a run must last" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --down-rate 5mbps", files: &[], names: &["--down-rate", "5Mbps", "5MBps"], once: "ambiguous" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --profile geo --delay 1m", files: &[], names: &["--delay", "1min"], once: "ambiguous" },
        Bad { args: "emulate udp --listen 127.0.0.1:0 --to 127.0.0.1:9 --profile geo --loss -0.1 --duration 1s", files: &[], names: &["--loss", "-0.1"], once: "between 0 and 1" },
        Bad { args: "bench link --size 20Mb", files: &[], names: &["--size", "20MB"], once: "sizes are in bytes" },
        Bad { args: "bench link --profile mars", files: &[], names: &["--profile", "geo, geo-1998, direcpc, leo"], once: "unknown profile 'mars'" },
        Bad { args: "terminal --config {dir}/t.toml --capture {dir}/c.pcap --capture-max-mib 0", files: t(""), names: &["--capture-max-mib 0", "1 MiB"], once: "at least" },
        Bad { args: "terminal --config {dir}/t.toml --capture {dir} ", files: t(""), names: &["--capture"], once: "is a directory" },
    ]
}

#[test]
fn every_bad_input_gets_one_error_in_the_users_words() {
    let cases = bad_inputs();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("satstp-bad-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in c.files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let d = dir.to_string_lossy();
        let args: Vec<String> = c
            .args
            .split_whitespace()
            .map(|a| a.replace("{dir}", &d))
            .collect();
        let o = satstp()
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        // The checks read the message with the test's own directory taken out: its name holds
        // the process id, which may contain what a case counts (`-5` in `satstp-bad-530-30`).
        let said = err.replace(d.as_ref(), "{dir}");
        let mut wrong = Vec::new();
        if o.status.success() {
            wrong.push("succeeded".to_string());
        }
        if o.status.code() == Some(101) || err.contains("panicked") {
            wrong.push("panicked".to_string());
        }
        for n in c.names {
            if !said.contains(n) {
                wrong.push(format!("does not name {n:?}"));
            }
        }
        let times = said.matches(c.once).count();
        if times != 1 {
            wrong.push(format!("says {:?} {times} times", c.once));
        }
        if said.matches("error:").count() != 1 {
            wrong.push("not exactly one error".to_string());
        }
        for w in INTERNALS {
            let found = said.match_indices(w).any(|(j, _)| {
                let before = said[..j].chars().next_back();
                let after = said[j + w.len()..].chars().next();
                !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == '_')
                    && !after.is_some_and(|a| a.is_ascii_alphanumeric() || a == '_')
            });
            if found {
                wrong.push(format!("leaks {w:?}"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!("satstp {}: {}\n{err}", c.args, wrong.join("; ")));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
