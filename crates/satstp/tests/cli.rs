//! The `satstp` binary end to end: reproductions write everything they promise; bad input gets a
//! clear error and a failing exit status.

use std::path::PathBuf;
use std::process::Command;

fn satstp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_satstp"))
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("satstp-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn reproduce_quick_writes_report_data_and_plots_for_every_name() {
    let out = temp_dir("reproduce");
    let list = satstp().args(["reproduce", "--list"]).output().unwrap();
    assert!(list.status.success());
    let names: Vec<String> = String::from_utf8(list.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    for want in [
        "table5.1-geo",
        "table5.2-leo",
        "fig3-tcp-variants",
        "fig4-competing",
        "fig7-split-tcp",
        "fig9-split-stp",
        "fig5.7-ber",
        "asym-return",
        "web-table4.2",
        "web-table5.3",
        "web-table5.4",
        "web-http-versions",
        "web-thin-return",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from --list: {names:?}"
        );
    }
    let run = satstp()
        .args(["reproduce", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for n in &names {
        if n.starts_with("leo-") {
            // LEO reproductions (docs/leo.md): figures and checked claims, not flows.
            for ext in ["json", "csv", "svg", "png"] {
                assert!(out.join(format!("{n}.{ext}")).exists(), "{n}.{ext} missing");
            }
            assert!(report.contains(&format!("## {n} — ")), "report lacks {n}");
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join(format!("{n}.json"))).unwrap(),
            )
            .unwrap();
            assert!(
                !v["claims"].as_array().unwrap().is_empty(),
                "{n}: no claims"
            );
            assert!(
                !v["figures"].as_array().unwrap().is_empty(),
                "{n}: no figures"
            );
            continue;
        }
        if n.starts_with("web-") {
            // Short-transfer reproductions (docs/scenarios.md): rows of metrics, seeds beside
            // them, checked claims.
            for ext in ["json", "csv", "svg", "png"] {
                assert!(out.join(format!("{n}.{ext}")).exists(), "{n}.{ext} missing");
            }
            assert!(report.contains(&format!("## {n} — ")), "report lacks {n}");
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join(format!("{n}.json"))).unwrap(),
            )
            .unwrap();
            let rows = v["rows"].as_array().unwrap();
            assert!(!rows.is_empty(), "{n}: no rows");
            for r in rows {
                let m = r["metrics"].as_object().unwrap();
                assert!(!m.is_empty(), "{n}: {r}");
                assert!(m.values().all(|x| x["mean"].is_number()), "{n}: {r}");
            }
            assert!(
                !v["claims"].as_array().unwrap().is_empty(),
                "{n}: no claims"
            );
            continue;
        }
        for ext in ["json", "csv", "svg", "png"] {
            let p = out.join(format!("{n}.{ext}"));
            assert!(
                p.exists() && std::fs::metadata(&p).unwrap().len() > 0,
                "{} missing",
                p.display()
            );
        }
        assert!(report.contains(&format!("## {n} — ")), "report lacks {n}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("{n}.json"))).unwrap())
                .unwrap();
        let flows = v["flows"].as_array().unwrap();
        assert!(!flows.is_empty());
        for f in flows {
            for k in ["goodput_bps", "fwd_efficiency", "reverse_bps"] {
                assert!(
                    f[k]["mean"].is_number() && f[k]["ci95"].is_number(),
                    "{n}: {k} in {f}"
                );
            }
            assert!(f["name"].is_string() && f["protocol"].is_string());
        }
        assert!(v["conclusion_holds"].is_boolean());
    }
    // Where the seeds give a figure, it sits beside ours.
    let t51: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("table5.1-geo.json")).unwrap())
            .unwrap();
    let stp = t51["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "STP @ one-way")
        .unwrap();
    assert_eq!(stp["seed"]["goodput_bps"], 672300.0);
    // A quick run reaches the full run's verdicts (recorded from `satstp reproduce` without
    // --quick in scenarios/reproduce/full-verdicts.json), claim by claim.
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scenarios/reproduce/full-verdicts.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let quick: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdicts.json")).unwrap()).unwrap();
    let recorded = recorded.as_object().unwrap();
    for want in [
        "table5.2-leo",
        "fig3-tcp-variants",
        "fig9-split-stp",
        "fig5.7-ber",
    ] {
        assert!(
            recorded.contains_key(want),
            "no full-run verdict for {want}"
        );
    }
    for (name, full) in recorded {
        assert_eq!(
            &quick[name], full,
            "{name}: quick verdicts differ from the full run's"
        );
    }
    // Running one name again replaces its section and keeps the others.
    let again = satstp()
        .args(["reproduce", "fig5.7-ber", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(again.status.success());
    let report2 = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert_eq!(report2.matches("## fig5.7-ber — ").count(), 1);
    assert!(report2.contains("## table5.1-geo — "));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_input_is_reported_clearly() {
    let dir = temp_dir("bad");
    let f = dir.join("bad.toml");
    std::fs::write(&f, "name = \"x\"\nduration = \"10 fortnights\"\n[[node]]\nname = \"a\"\n[[link]]\na = \"a\"\nb = \"a\"\nrate = \"1Mbps\"\n").unwrap();
    let o = satstp().arg("sim").arg(&f).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fortnights") || err.contains("duration"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let o = satstp()
        .args(["reproduce", "no-such-experiment"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown reproduction"));
    let o = satstp().args(["demo", "--loss", "2"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--loss"));
    let o = satstp()
        .args(["bench", "engine", "--payload", "10"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's main command, made smaller: the gateway demo over the emulated GEO link finishes,
/// verifies every byte and reports what the README promises.
#[test]
fn gateway_demo_runs_and_reports() {
    let o = satstp()
        .args(["demo", "--size", "3MB", "--objects", "8", "--seed", "2"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "demo failed: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for want in [
        "object of 3000000 bytes",
        "every byte verified",
        "% of the 50.0 Mb/s downlink",
        "web page: 8 objects",
        "emulated link: down",
        "gateway STP:",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = satstp()
        .args(["demo", "--profile", "mars"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--profile"));
}

/// The engine-only demo is still there and deterministic.
#[test]
fn engine_demo_is_deterministic() {
    let run = || {
        satstp()
            .args(["demo", "--engine", "--size", "1MB"])
            .output()
            .unwrap()
    };
    let (a, b) = (run(), run());
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    assert!(String::from_utf8_lossy(&a.stdout).contains("every byte verified"));
}

#[test]
fn sim_replicates_until_the_rule_and_reports_99_percent_intervals() {
    let dir = temp_dir("until");
    let f = dir.join("lossy.toml");
    std::fs::write(
        &f,
        "name = \"lossy\"\nduration = \"10s\"\n[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\
         [[link]]\na = \"a\"\nb = \"b\"\nrate = \"2Mbps\"\ndelay = \"50ms\"\nloss = 0.01\n\
         [[flow]]\nname = \"bulk\"\nprotocol = \"tcp\"\nfrom = \"a\"\nto = \"b\"\n",
    )
    .unwrap();
    let json = dir.join("out.json");
    let o = satstp()
        .arg("sim")
        .arg(&f)
        .args([
            "--runs",
            "until-5%",
            "--max-runs",
            "30",
            "--confidence",
            "0.99",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("99% CI") && out.contains("original-bit"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["confidence"], 0.99);
    assert_eq!(v["replication"]["rule"], "until");
    assert_eq!(v["replication"]["max_runs"], 30);
    let runs = v["runs"].as_u64().unwrap();
    assert!((5..=30).contains(&runs), "{runs}");
    assert!(v["links"][0]["original_utilization"]["mean"].is_number());
    let bad = satstp()
        .arg("sim")
        .arg(&f)
        .args(["--runs", "until-forever"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("until-forever"));
    let _ = std::fs::remove_dir_all(&dir);
}
