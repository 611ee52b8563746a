//! The seeds' experiments as reproductions, behind one interface: a [`Registry`] of
//! [`Entry`]s — the simulator's (`scenarios/reproduce/*.toml`, run by `netsim::reproduce`), the
//! web ones (`web-*`, run by `netsim::web::repro`) and the LEO ones (`leo-*`, geometry from
//! `constellation`, flows from `netsim::leo_net`). Each entry has a name, a title, a source in
//! the seeds and a [`Family`]; [`Entry::run`] runs it (quick or full) and writes its
//! `NAME.json`, `NAME.csv`, plots, its section of `report.md` and its line of `verdicts.json`,
//! returning the [`Verdict`]. [`plan`] splits a selection over shards: the simulator's
//! reproductions by (case, replication) item on every shard, the others whole, each on exactly
//! one shard; [`shard`] writes the partial results and merges them into what one unsharded run
//! writes. `satstp reproduce` and `satstp merge` only parse, call this and print.

pub mod leo;
pub mod plot;
mod report;
pub use report::{summarize, Tally};
pub mod shard;
mod web;

use netsim::reproduce::Reproduction;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What went wrong running, writing or merging a reproduction, named.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot render {path}: {reason}")]
    Render { path: PathBuf, reason: String },
    /// A reproduction's own file is wrong (its TOML, its template).
    #[error("reproduction {file}: {reason}")]
    Definition { file: String, reason: String },
    #[error("unknown reproduction '{0}' (see --list)")]
    Unknown(String),
    /// An experiment could not produce the figures its report needs.
    #[error("{0}")]
    Experiment(String),
    #[error("{0}")]
    Merge(String),
    #[error(transparent)]
    Shard(#[from] netsim::shard::ShardError),
    #[error(transparent)]
    Scenario(#[from] netsim::scenario::ScenarioError),
    #[error(transparent)]
    Web(#[from] netsim::web::repro::WebReproError),
    #[error(transparent)]
    LeoNet(#[from] netsim::leo_net::LeoNetError),
    #[error(transparent)]
    Constellation(#[from] constellation::ConstellationError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `std::fs::write` with the path in the error.
pub(crate) fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, contents).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Which kind of experiment a reproduction is, and so how it is run and sharded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// A simulator scenario template swept over series and points, replicated; sharded by
    /// (case, replication) item.
    Sim,
    /// LEO geometry and flows over a constellation; run whole.
    Leo,
    /// Short transfers and web pages; run whole.
    Web,
}

impl Family {
    /// Whether a shard runs a share of this family's items (else one shard runs it whole).
    pub fn splits_items(self) -> bool {
        self == Family::Sim
    }
}

enum Kind {
    Sim(Box<Reproduction>, &'static str),
    Web(Box<netsim::web::repro::WebRepro>),
    Leo,
}

/// One reproduction of the registry.
pub struct Entry {
    name: String,
    title: String,
    source: String,
    kind: Kind,
}

/// The outcome of a reproduction: whether the seeds' conclusion holds, and each claim checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub name: String,
    pub conclusion_holds: bool,
    pub claims: Vec<bool>,
}

impl Verdict {
    /// The verdict of a reproduction whose claims were checked as `claims`.
    pub fn of(name: &str, holds: bool, claims: &[netsim::reproduce::ClaimResult]) -> Verdict {
        Verdict {
            name: name.to_string(),
            conclusion_holds: holds,
            claims: claims.iter().map(|c| c.holds).collect(),
        }
    }
}

/// What every run of a session shares: quick or full, the worker threads, a progress callback
/// (told the case being run), and data several LEO reproductions use (computed once).
pub struct Session<'a> {
    pub quick: bool,
    pub threads: usize,
    pub progress: &'a (dyn Fn(&str) + Sync),
    leo: leo::Data,
}

impl<'a> Session<'a> {
    pub fn new(quick: bool, threads: usize, progress: &'a (dyn Fn(&str) + Sync)) -> Session<'a> {
        Session {
            quick,
            threads,
            progress,
            leo: leo::Data::default(),
        }
    }
}

impl Entry {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn title(&self) -> &str {
        &self.title
    }
    /// Where in the seeds the experiment comes from.
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn family(&self) -> Family {
        match self.kind {
            Kind::Sim(..) => Family::Sim,
            Kind::Web(_) => Family::Web,
            Kind::Leo => Family::Leo,
        }
    }

    /// Runs the whole reproduction (`s.quick`: the quick variant) and writes its outputs to
    /// `out`: `NAME.json`, `NAME.csv`, plots, its section of `out/report.md` and its line of
    /// `out/verdicts.json` (the file a quick run's verdicts are compared with).
    pub fn run(&self, s: &mut Session, out: &Path) -> Result<Verdict> {
        let t0 = std::time::Instant::now();
        let verdict = match &self.kind {
            Kind::Sim(r, template) => {
                let res = r.run(template, s.quick, s.threads, s.progress)?;
                report::write_outputs(out, r, &res, t0.elapsed().as_secs_f64(), s.quick)?;
                Verdict::of(&res.name, res.conclusion_holds, &res.claims)
            }
            Kind::Web(r) => web::run(r, s.quick, s.threads, out)?,
            Kind::Leo => leo::run(&self.name, &mut s.leo, s.quick, out)?,
        };
        report::record_verdict(&out.join("verdicts.json"), &verdict)?;
        Ok(verdict)
    }

    /// The simulator reproduction and its template (`None` for the other families).
    pub fn sim(&self) -> Option<(&Reproduction, &'static str)> {
        match &self.kind {
            Kind::Sim(r, t) => Some((r, t)),
            _ => None,
        }
    }
}

/// Every reproduction: the simulator's (in file-name order), then the LEO ones, then the web
/// ones — the order of `--list` and of `report.md`.
pub struct Registry {
    entries: Vec<Entry>,
}

impl Registry {
    /// Parses the embedded reproductions.
    pub fn load() -> Result<Registry> {
        let mut entries = Vec::new();
        for (r, template) in report::all()? {
            entries.push(Entry {
                name: r.name.clone(),
                title: r.title.clone(),
                source: r.source.clone(),
                kind: Kind::Sim(Box::new(r), template),
            });
        }
        for (name, title, source) in leo::LIST {
            entries.push(Entry {
                name: name.into(),
                title: title.into(),
                source: source.into(),
                kind: Kind::Leo,
            });
        }
        for r in web::all()? {
            entries.push(Entry {
                name: r.name.clone(),
                title: r.title.clone(),
                source: r.source.clone(),
                kind: Kind::Web(Box::new(r)),
            });
        }
        Ok(Registry { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The entries named (all when `names` is empty), in registry order; an unknown name is an
    /// error naming it.
    pub fn select(&self, names: &[String]) -> Result<Vec<&Entry>> {
        if let Some(n) = names.iter().find(|n| self.get(n).is_none()) {
            return Err(Error::Unknown(n.clone()));
        }
        Ok(self
            .entries
            .iter()
            .filter(|e| names.is_empty() || names.contains(&e.name))
            .collect())
    }
}

/// Every simulator reproduction with its template text (for `satstp bench sim`).
pub fn sim_reproductions() -> Result<Vec<(Reproduction, &'static str)>> {
    report::all()
}

/// What a shard does with one entry of the selection.
#[derive(Clone, Copy)]
pub enum Work<'a> {
    /// Its share of the entry's (case, replication) items (every shard has one).
    Part(&'a Entry),
    /// The whole entry (exactly one shard has it).
    Whole(&'a Entry),
}

impl<'a> Work<'a> {
    pub fn entry(&self) -> &'a Entry {
        match self {
            Work::Part(e) | Work::Whole(e) => e,
        }
    }
}

/// Shard `shard`'s work in `selected`: every entry whose family splits its items as a
/// [`Work::Part`]; of the others, the k-th (in selection order) goes whole to shard k mod N,
/// so the shards' whole entries are disjoint and together are all of them.
pub fn plan<'a>(selected: &[&'a Entry], shard: netsim::shard::Shard) -> Vec<Work<'a>> {
    let mut whole = 0u64;
    let mut work = Vec::new();
    for e in selected {
        if e.family().splits_items() {
            work.push(Work::Part(e));
        } else {
            if shard.owns(whole) {
                work.push(Work::Whole(e));
            }
            whole += 1;
        }
    }
    work
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsim::shard::Shard;
    use std::collections::BTreeSet;

    #[test]
    fn the_registry_has_every_family_and_unique_names() {
        let reg = Registry::load().unwrap();
        let names: BTreeSet<&str> = reg.entries().iter().map(Entry::name).collect();
        assert_eq!(names.len(), reg.entries().len(), "duplicate names");
        for f in [Family::Sim, Family::Leo, Family::Web] {
            assert!(
                reg.entries().iter().any(|e| e.family() == f),
                "no {f:?} reproduction"
            );
        }
        assert_eq!(
            reg.entries()
                .iter()
                .filter(|e| e.family() == Family::Leo)
                .count(),
            leo::LIST.len()
        );
        assert!(matches!(
            reg.select(&["no-such-thing".into()]),
            Err(Error::Unknown(n)) if n == "no-such-thing"
        ));
    }

    /// `--shard I/N` over the whole list: every LEO and web reproduction on exactly one shard,
    /// every simulator one split on all of them, and the union is the whole list.
    #[test]
    fn shards_are_disjoint_and_together_the_whole_list() {
        let reg = Registry::load().unwrap();
        let all = reg.select(&[]).unwrap();
        let whole: Vec<&str> = all
            .iter()
            .filter(|e| !e.family().splits_items())
            .map(|e| e.name())
            .collect();
        assert!(whole.iter().any(|n| n.starts_with("leo-")), "{whole:?}");
        for n in 1..=5u32 {
            let mut seen: Vec<&str> = Vec::new();
            let mut union: BTreeSet<&str> = BTreeSet::new();
            for i in 0..n {
                let work = plan(&all, Shard { index: i, count: n });
                for w in &work {
                    union.insert(w.entry().name());
                    match w {
                        Work::Whole(e) => seen.push(e.name()),
                        Work::Part(e) => assert_eq!(e.family(), Family::Sim),
                    }
                }
                let parts = work.iter().filter(|w| matches!(w, Work::Part(_))).count();
                let sims = all.iter().filter(|e| e.family() == Family::Sim).count();
                assert_eq!(parts, sims, "shard {i}/{n}");
            }
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                seen.len(),
                "a whole entry on two shards of {n}"
            );
            assert_eq!(seen.len(), whole.len(), "N = {n}");
            let everything: BTreeSet<&str> = all.iter().map(|e| e.name()).collect();
            assert_eq!(union, everything, "N = {n}");
        }
        // With as many shards as whole entries, each shard runs one of them.
        let n = whole.len() as u32;
        for i in 0..n {
            let w = plan(&all, Shard { index: i, count: n });
            assert_eq!(w.iter().filter(|w| matches!(w, Work::Whole(_))).count(), 1);
        }
    }
}
