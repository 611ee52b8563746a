//! Scenarios as data: a TOML description of topology, flows, protocols and their options,
//! duration and replications (`docs/scenarios.md` documents the format), turned into a `Sim`,
//! run (replications in parallel, each deterministic per seed) and summarised per flow.
//!
//! The parts: [`schema`] (the file's tables as serde types), [`validate`] (checks, and the keys
//! turned into the models' configurations), [`build`] (one replication's `Sim`), [`run`]
//! (replications, in parallel) and [`stats`] (per-run figures and their summary).

use crate::sim::SimError;

mod build;
mod run;
mod schema;
mod stats;
mod validate;

pub use build::*;
pub use run::*;
pub use schema::*;
pub use stats::*;

/// A scenario error, naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario file is not valid TOML or has unknown/missing fields: {0}")]
    Parse(String),
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    #[error(transparent)]
    Sim(#[from] SimError),
}

fn field(field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

fn unit<T, E: std::fmt::Display>(name: &str, r: Result<T, E>) -> Result<T, ScenarioError> {
    r.map_err(|e| field(name, e.to_string()))
}
