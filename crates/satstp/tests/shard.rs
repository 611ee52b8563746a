//! Sharded runs: N separate `satstp sim --shard I/N` processes merged by `satstp merge` give
//! byte for byte the JSON one unsharded `satstp sim` writes; the same for a reproduction
//! (JSON, CSV, plots and report section), except the wall time each output states, with the
//! LEO reproductions dealt whole to one shard each; and the merge refuses an incomplete set of
//! shards, naming the missing one.

mod common;

use common::{fails, fresh_dir, ok, satstp};
use std::path::{Path, PathBuf};

/// Two flows sharing a lossy GEO hop: every figure of the summary (fairness, drops,
/// completions) depends on the seed.
const SCENARIO: &str = r#"
name = "shard-identity"
duration = "20s"
runs = 5
seed = 11

[[node]]
name = "server"
[[node]]
name = "client"

[[link]]
a = "server"
b = "client"
rate = "2Mbps"
delay = "250ms"
queue_bytes = "100KB"
loss = 0.01

[[flow]]
name = "stp"
protocol = "stp"
from = "server"
to = "client"
bytes = "300KB"

[[flow]]
name = "tcp"
protocol = "tcp"
from = "server"
to = "client"
bytes = "300KB"
"#;

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// [`SCENARIO`] written to `dir` and run unsharded: the scenario file and the JSON written.
fn unsharded_sim(dir: &Path) -> (PathBuf, PathBuf) {
    let file = dir.join("s.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let one = dir.join("one.json");
    ok(satstp()
        .arg("sim")
        .arg(&file)
        .arg("--json")
        .arg(&one)
        .output()
        .unwrap());
    (file, one)
}

/// `satstp merge PARTS --out OUT`, which must succeed.
fn merge(parts: &Path, out: &Path) {
    ok(satstp()
        .arg("merge")
        .arg(parts)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap());
}

/// `satstp merge` of only `files` of `parts` (copied to `dir/lone`: a shard's results missing),
/// which must fail; its error.
fn merge_without(dir: &Path, parts: &Path, files: &[String]) -> String {
    let lone = dir.join("lone");
    std::fs::create_dir_all(&lone).unwrap();
    for f in files {
        std::fs::copy(parts.join(f), lone.join(f)).unwrap();
    }
    fails(
        satstp()
            .arg("merge")
            .arg(&lone)
            .arg("--out")
            .arg(dir.join("x")),
    )
}

/// The file `name` of `a` and of `b` are the same text but for the wall time they state; the
/// text of `a`'s.
fn same_but_wall_time(a: &Path, b: &Path, name: &str) -> String {
    let (a, b) = (read(&a.join(name)), read(&b.join(name)));
    let (a, b) = (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
    assert_eq!(
        without_wall_time(&a),
        without_wall_time(&b),
        "{name} differs"
    );
    a
}

#[test]
fn sharded_sim_merges_to_the_unsharded_json_byte_for_byte() {
    let dir = fresh_dir("shard-sim");
    let (file, one) = unsharded_sim(&dir);
    let parts = dir.join("parts");
    // Three processes at once, as an array job runs them.
    let children: Vec<_> = (0..3)
        .map(|i| {
            satstp()
                .arg("sim")
                .arg(&file)
                .arg("--shard")
                .arg(format!("{i}/3"))
                .arg("--shard-out")
                .arg(&parts)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // Without shard 1 the merge names what is missing.
    let files = [0, 2].map(|i| format!("sim-shard-identity.shard-{i}-of-3.partial.json"));
    let err = merge_without(&dir, &parts, &files);
    assert!(err.contains("1/3"), "{err}");

    let merged = dir.join("merged");
    merge(&parts, &merged);
    let a = read(&one);
    let b = read(&merged.join("shard-identity.json"));
    assert!(
        a == b,
        "merged JSON differs:\n{}\n---\n{}",
        String::from_utf8_lossy(&a),
        String::from_utf8_lossy(&b)
    );
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(v["runs"], 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The wall time a reproduction's outputs state (JSON `wall_time_s`, the report's "wall time
/// N s") is the one thing a merge cannot reproduce: it is replaced by a marker.
fn without_wall_time(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("\"wall_time_s\"") {
                "\"wall_time_s\": <wall>,".to_string()
            } else if let Some(i) = l.find("wall time ") {
                format!("{}wall time <wall>", &l[..i])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sharded_reproduction_merges_to_the_unsharded_outputs() {
    let name = "fig5.7-ber";
    let dir = fresh_dir("shard-repro");
    let one = dir.join("one");
    ok(satstp()
        .args(["reproduce", name, "--quick", "--out"])
        .arg(&one)
        .output()
        .unwrap());
    let parts = dir.join("parts");
    let children: Vec<_> = (0..2)
        .map(|i| {
            satstp()
                .args(["reproduce", name, "--quick", "--shard"])
                .arg(format!("{i}/2"))
                .arg("--out")
                .arg(&parts)
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let merged = dir.join("merged");
    merge(&parts, &merged);
    for file in [format!("{name}.csv"), format!("{name}.svg")] {
        assert!(
            read(&one.join(&file)) == read(&merged.join(&file)),
            "{file} differs"
        );
    }
    for file in [format!("{name}.json"), "report.md".to_string()] {
        let a = same_but_wall_time(&one, &merged, &file);
        assert!(a.contains("wall"), "{file} states a wall time");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--shard` splits the LEO and web reproductions too: each runs whole on exactly one shard
/// (the k-th of the selection on shard k mod N), the simulator's are split by item on both, and
/// the merge gives the unsharded outputs and verdicts; without one shard's results it names the
/// reproduction missing.
#[test]
fn sharded_leo_reproductions_run_on_one_shard_each_and_merge_to_the_unsharded_outputs() {
    let names = ["fig5.7-ber", "leo-joint-attachment", "leo-table5.2"];
    let dir = fresh_dir("shard-leo");
    let one = dir.join("one");
    ok(satstp()
        .arg("reproduce")
        .args(names)
        .args(["--quick", "--out"])
        .arg(&one)
        .output()
        .unwrap());
    let parts = dir.join("parts");
    for i in 0..2 {
        ok(satstp()
            .arg("reproduce")
            .args(names)
            .args(["--quick", "--shard"])
            .arg(format!("{i}/2"))
            .arg("--out")
            .arg(&parts)
            .output()
            .unwrap());
    }
    // In --list order the LEO ones are joint-attachment (shard 0), then table5.2 (shard 1).
    for (name, i) in [("leo-joint-attachment", 0), ("leo-table5.2", 1)] {
        for j in 0..2 {
            let p = parts.join(format!("{name}.shard-{j}-of-2.partial.json"));
            assert_eq!(p.is_file(), i == j, "{}", p.display());
        }
    }
    for j in 0..2 {
        assert!(parts
            .join(format!("fig5.7-ber.shard-{j}-of-2.partial.json"))
            .is_file());
    }
    // Shard 1's LEO result missing: the merge names it.
    let files = [
        "fig5.7-ber.shard-0-of-2.partial.json",
        "fig5.7-ber.shard-1-of-2.partial.json",
        "leo-joint-attachment.shard-0-of-2.partial.json",
    ]
    .map(String::from);
    let err = merge_without(&dir, &parts, &files);
    assert!(err.contains("leo-table5.2"), "{err}");

    let merged = dir.join("merged");
    merge(&parts, &merged);
    for name in names {
        for file in [format!("{name}.csv"), format!("{name}.svg")] {
            assert!(
                read(&one.join(&file)) == read(&merged.join(&file)),
                "{file} differs"
            );
        }
        same_but_wall_time(&one, &merged, &format!("{name}.json"));
    }
    same_but_wall_time(&one, &merged, "report.md");
    let v = |d: &Path| -> serde_json::Value {
        serde_json::from_slice(&read(&d.join("verdicts.json"))).unwrap()
    };
    assert_eq!(v(&one), v(&merged));
    assert_eq!(v(&one).as_object().unwrap().len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `deploy/cluster/satstp-shard.sh` takes its shard from a Slurm array task, a Kubernetes
/// Indexed Job pod or plain variables; three tasks of a sweep (one of each kind) merge to the
/// unsharded JSON.
#[test]
fn the_cluster_shard_script_reads_slurm_and_kubernetes_indices() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("deploy/cluster/satstp-shard.sh");
    let dir = fresh_dir("shard-script");
    let (file, one) = unsharded_sim(&dir);
    let parts = dir.join("parts");
    let envs: [&[(&str, &str)]; 3] = [
        &[
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ],
        &[("JOB_COMPLETION_INDEX", "1"), ("SATSTP_SHARDS", "3")],
        &[("SATSTP_SHARD_INDEX", "2"), ("SATSTP_SHARDS", "3")],
    ];
    for env in envs {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(&script).arg(&parts).arg("sim").arg(&file);
        cmd.env("SATSTP", env!("CARGO_BIN_EXE_satstp"));
        for v in [
            "SLURM_ARRAY_TASK_ID",
            "SLURM_ARRAY_TASK_MIN",
            "SLURM_ARRAY_TASK_COUNT",
            "JOB_COMPLETION_INDEX",
            "SATSTP_SHARD_INDEX",
            "SATSTP_SHARDS",
        ] {
            cmd.env_remove(v);
        }
        cmd.envs(env.iter().copied());
        ok(cmd.output().unwrap());
    }
    let merged = dir.join("merged");
    merge(&parts, &merged);
    assert!(read(&one) == read(&merged.join("shard-identity.json")));
    // An array that does not start at 0 is refused with the reason.
    let o = std::process::Command::new("bash")
        .arg(&script)
        .arg(&parts)
        .arg("sim")
        .arg(&file)
        .env("SATSTP", env!("CARGO_BIN_EXE_satstp"))
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "3")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--array=0-"));
    let _ = std::fs::remove_dir_all(&dir);
}
