//! Sharded runs and their merge: `satstp sim --shard I/N` and `satstp reproduce --shard I/N`
//! write partial results, and `satstp merge DIR…` combines them into exactly the JSON (and for
//! reproductions the CSV, plots, report section and verdict) one unsharded run writes.
//! docs/cluster.md shows them on Slurm and Kubernetes.
//!
//! A shard's [`Work`] on a reproduction (see [`crate::plan`]) is either its share of a
//! simulator reproduction's (case, replication) items (`netsim::shard`) or a whole LEO or web
//! reproduction, run into `DIR/NAME.shard-I-of-N/` beside a partial file naming its outputs.

use crate::{report, write_file, Error, Registry, Result, Session, Verdict, Work};
use netsim::scenario::Summary;
use netsim::shard::{ReproPartial, Shard, SimPartial};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A whole reproduction run by one shard: its outputs are the files of `dir` (beside the
/// partial file), its report section and its verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WholePartial {
    pub name: String,
    pub quick: bool,
    pub shard: Shard,
    /// Every reproduction of the selection run whole, on whichever shard: the merge checks
    /// they are all there.
    pub planned: Vec<String>,
    /// The directory of the outputs, relative to the partial file's.
    pub dir: String,
    pub files: Vec<String>,
    pub section: String,
    pub verdict: Verdict,
}

/// A partial result file: `{"kind": "sim" | "reproduction" | "whole", "partial": {...}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", content = "partial", rename_all = "lowercase")]
enum PartialFile {
    Sim(SimPartial),
    Reproduction(ReproPartial),
    Whole(WholePartial),
}

/// Suffix of partial result files.
const SUFFIX: &str = ".partial.json";

fn shard_stem(prefix: &str, name: &str, shard: Shard) -> String {
    format!("{prefix}{name}.shard-{}-of-{}", shard.index, shard.count)
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_partial(dir: &Path, stem: &str, p: &PartialFile) -> Result<PathBuf> {
    create_dir(dir)?;
    let path = dir.join(format!("{stem}{SUFFIX}"));
    write_file(&path, serde_json::to_string(p)?)?;
    Ok(path)
}

/// Writes a `satstp sim --shard I/N` partial result as `DIR/sim-SCENARIO.shard-I-of-N.partial.json`.
pub fn write_sim_partial(out: &Path, partial: SimPartial) -> Result<PathBuf> {
    let stem = shard_stem("sim-", &partial.scenario, partial.shard);
    write_partial(out, &stem, &PartialFile::Sim(partial))
}

/// Does `work` as shard `shard` of `selected`'s plan and writes its partial result to `out`
/// (`NAME.shard-I-of-N.partial.json`, and for a whole reproduction its outputs in
/// `NAME.shard-I-of-N/`); returns the partial file's path. `planned` names every reproduction
/// of the selection run whole (on any shard).
pub fn run_work(
    work: Work,
    planned: &[String],
    s: &mut Session,
    shard: Shard,
    out: &Path,
) -> Result<PathBuf> {
    let e = work.entry();
    let stem = shard_stem("", e.name(), shard);
    match (work, e.sim()) {
        (Work::Part(_), Some((r, template))) => {
            let partial = r.run_shard(template, s.quick, shard, s.threads, s.progress)?;
            write_partial(out, &stem, &PartialFile::Reproduction(partial))
        }
        (Work::Part(_), None) => Err(Error::Experiment(format!(
            "reproduction {} runs whole, it has no share of items",
            e.name()
        ))),
        (Work::Whole(_), _) => {
            let dir = out.join(&stem);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|source| Error::Write {
                    path: dir.clone(),
                    source,
                })?;
            }
            create_dir(&dir)?;
            let verdict = e.run(s, &dir)?;
            let report_path = dir.join("report.md");
            let text = std::fs::read_to_string(&report_path).map_err(|source| Error::Read {
                path: report_path.clone(),
                source,
            })?;
            let section = report::section(&text, e.name()).ok_or_else(|| {
                Error::Experiment(format!("{} wrote no report section", e.name()))
            })?;
            let mut files = Vec::new();
            for f in read_dir(&dir)? {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if name != "report.md" && name != "verdicts.json" {
                    files.push(name.to_string());
                }
            }
            files.sort();
            let whole = WholePartial {
                name: e.name().to_string(),
                quick: s.quick,
                shard,
                planned: planned.to_vec(),
                dir: stem.clone(),
                files,
                section,
                verdict,
            };
            write_partial(out, &stem, &PartialFile::Whole(whole))
        }
    }
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut v = Vec::new();
    for e in rd {
        let e = e.map_err(|source| Error::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        v.push(e.path());
    }
    Ok(v)
}

/// The partial result files among `inputs` (directories are searched, files taken as given),
/// sorted.
pub fn partial_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            for p in read_dir(input)? {
                if p.to_string_lossy().ends_with(SUFFIX) {
                    files.push(p);
                }
            }
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(Error::Merge(format!(
                "{}: no such file or directory",
                input.display()
            )));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(Error::Merge(format!(
            "no partial results (*{SUFFIX}) in the inputs"
        )));
    }
    Ok(files)
}

/// One merged sweep of `satstp sim`.
#[derive(Debug)]
pub struct MergedSim {
    pub name: String,
    pub shards: usize,
    pub summary: Summary,
    /// Where its JSON was written.
    pub path: PathBuf,
}

/// What a merge wrote.
#[derive(Debug)]
pub struct Merged {
    pub sims: Vec<MergedSim>,
    /// The reproductions, in registry order, with the number of partial results of each.
    pub reproductions: Vec<(Verdict, usize)>,
}

/// Merges the partial results in `inputs` into `out`: `SCENARIO.json` per sim sweep, and per
/// reproduction the outputs, report section and verdict an unsharded `satstp reproduce` writes.
pub fn merge(inputs: &[PathBuf], out: &Path) -> Result<Merged> {
    let mut sims: BTreeMap<String, Vec<SimPartial>> = BTreeMap::new();
    let mut parts: BTreeMap<String, Vec<ReproPartial>> = BTreeMap::new();
    let mut wholes: BTreeMap<String, (WholePartial, PathBuf)> = BTreeMap::new();
    for f in partial_files(inputs)? {
        let text = std::fs::read_to_string(&f).map_err(|source| Error::Read {
            path: f.clone(),
            source,
        })?;
        let p: PartialFile = serde_json::from_str(&text).map_err(|e| {
            Error::Merge(format!(
                "{}: not a partial result of satstp ({e})",
                f.display()
            ))
        })?;
        match p {
            PartialFile::Sim(s) => sims.entry(s.scenario.clone()).or_default().push(s),
            PartialFile::Reproduction(r) => parts.entry(r.name.clone()).or_default().push(r),
            PartialFile::Whole(w) => {
                let dir = f.parent().unwrap_or(Path::new(".")).join(&w.dir);
                if let Some((other, _)) = wholes.get(&w.name) {
                    return Err(Error::Merge(format!(
                        "reproduction '{}' was run whole by two shards ({} and {})",
                        w.name, other.shard, w.shard
                    )));
                }
                wholes.insert(w.name.clone(), (w, dir));
            }
        }
    }
    let planned: Vec<String> = wholes
        .values()
        .flat_map(|(w, _)| w.planned.iter().cloned())
        .collect();
    if let Some(n) = planned.iter().find(|n| !wholes.contains_key(*n)) {
        return Err(Error::Merge(format!(
            "partial results are incomplete: no shard's result of reproduction '{n}' (it runs \
             whole on one shard; rerun that shard)"
        )));
    }
    let mut merged = Merged {
        sims: Vec::new(),
        reproductions: Vec::new(),
    };
    for (name, p) in sims {
        let shards = p.len();
        let summary = netsim::shard::merge_sim(p)?;
        let path = out.join(format!("{name}.json"));
        // As `sim --json FILE` writes it (one document and a newline).
        write_file(&path, serde_json::to_string_pretty(&summary)? + "\n")?;
        merged.sims.push(MergedSim {
            name,
            shards,
            summary,
            path,
        });
    }
    if parts.is_empty() && wholes.is_empty() {
        return Ok(merged);
    }
    let registry = Registry::load()?;
    if let Some(n) = parts
        .keys()
        .chain(wholes.keys())
        .find(|n| registry.get(n).is_none())
    {
        return Err(Error::Merge(format!(
            "partial results of reproduction '{n}', which this satstp does not have"
        )));
    }
    for e in registry.entries() {
        if let Some(p) = parts.remove(e.name()) {
            let Some((r, template)) = e.sim() else {
                return Err(Error::Merge(format!(
                    "partial results of reproduction '{}' by items, but it runs whole",
                    e.name()
                )));
            };
            let n = p.len();
            let quick = p.first().is_some_and(|p| p.quick);
            let wall_s: f64 = p.iter().map(|p| p.wall_time_s).sum();
            let res = r.merge(template, p)?;
            report::write_outputs(out, r, &res, wall_s, quick)?;
            let verdict = Verdict::of(&res.name, res.conclusion_holds, &res.claims);
            report::record_verdict(&out.join("verdicts.json"), &verdict)?;
            merged.reproductions.push((verdict, n));
        } else if let Some((w, dir)) = wholes.remove(e.name()) {
            for f in &w.files {
                let (from, to) = (dir.join(f), out.join(f));
                if !from.is_file() {
                    return Err(Error::Merge(format!(
                        "shard {}'s result of reproduction '{}' names {}, which is missing \
                         (copy the directory {} beside its partial file)",
                        w.shard,
                        w.name,
                        from.display(),
                        w.dir
                    )));
                }
                std::fs::copy(&from, &to).map_err(|source| Error::Write {
                    path: to.clone(),
                    source,
                })?;
            }
            report::update_report(&out.join("report.md"), &w.name, &w.section)?;
            report::record_verdict(&out.join("verdicts.json"), &w.verdict)?;
            merged.reproductions.push((w.verdict, 1));
        }
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan, Registry};

    /// A LEO reproduction run whole by a shard merges to the files of an unsharded run; its
    /// outputs' directory missing, the merge says which file and directory.
    #[test]
    fn a_whole_leo_shard_merges_to_the_unsharded_files() {
        let base = std::env::temp_dir().join(format!("repro-shard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (one, parts, merged) = (base.join("one"), base.join("parts"), base.join("merged"));
        for d in [&one, &parts, &merged] {
            std::fs::create_dir_all(d).unwrap();
        }
        let reg = Registry::load().unwrap();
        let selected = reg.select(&["leo-table5.2".into()]).unwrap();
        let mut s = Session::new(true, 2, &|_| {});
        selected[0].run(&mut s, &one).unwrap();
        let planned = vec!["leo-table5.2".to_string()];
        let mut written = Vec::new();
        for i in 0..2 {
            let shard = Shard { index: i, count: 2 };
            for w in plan(&selected, shard) {
                written.push(run_work(w, &planned, &mut s, shard, &parts).unwrap());
            }
        }
        assert_eq!(written.len(), 1, "{written:?}");
        let m = merge(std::slice::from_ref(&parts), &merged).unwrap();
        assert_eq!(m.reproductions.len(), 1);
        for f in ["leo-table5.2.csv", "leo-table5.2.svg", "verdicts.json"] {
            assert_eq!(
                std::fs::read(one.join(f)).unwrap(),
                std::fs::read(merged.join(f)).unwrap(),
                "{f}"
            );
        }
        std::fs::remove_dir_all(parts.join("leo-table5.2.shard-0-of-2")).unwrap();
        let e = merge(&[parts], &base.join("x")).unwrap_err().to_string();
        assert!(
            e.contains("leo-table5.2") && e.contains("leo-table5.2.shard-0-of-2"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
