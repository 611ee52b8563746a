//! The benchmarks' one error type: what failed, in the user's words, with the cause kept as its
//! source (the binary prints the chain as `what: cause`).

use std::fmt::Display;

/// A benchmark's failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operation failed: `what` names it (a file, a namespace, a daemon, a step), `source`
    /// is why.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A check failed or a setting was refused; the message says which and what is accepted.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Net(#[from] linkem::NetError),
    #[error(transparent)]
    Emulator(#[from] linkem::EmulatorError),
    #[error(transparent)]
    Load(#[from] loadgen::Error),
    #[error(transparent)]
    Browser(#[from] browser::BrowserError),
    #[error(transparent)]
    Key(#[from] pep::keys::KeyError),
    #[error(transparent)]
    QuicPolicy(#[from] pep::quic_policy::QuicPolicyError),
    #[error(transparent)]
    Scenario(#[from] netsim::scenario::ScenarioError),
    #[error(transparent)]
    Constellation(#[from] constellation::ConstellationError),
    #[error(transparent)]
    StpConfig(#[from] stp::ConfigError),
    #[error(transparent)]
    StpConnect(#[from] stp::ConnectError),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Says what failed, keeping the cause as the source (as `anyhow::Context` does).
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
    fn with_context<S: Display>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Box<dyn std::error::Error + Send + Sync>>> Context<T>
    for std::result::Result<T, E>
{
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what.to_string(),
            source: e.into(),
        })
    }
    fn with_context<S: Display>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what().to_string(),
            source: e.into(),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Display) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what.to_string()))
    }
    fn with_context<S: Display>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what().to_string()))
    }
}

/// An error and its causes on one line, `what: cause: cause` (as the binary prints them).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Returns early with [`Error::Failed`] and a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::Failed(format!($($arg)*)))
    };
}

/// An [`Error::Failed`] with a formatted message.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::error::Error::Failed(format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_cause_as_the_chain() {
        let io: std::io::Result<()> = Err(std::io::Error::other("disk full"));
        let e = io.context("cannot write /tmp/x").unwrap_err();
        assert_eq!(e.to_string(), "cannot write /tmp/x");
        assert_eq!(chain(&e), "cannot write /tmp/x: disk full");
        let none: Option<u8> = None;
        assert_eq!(
            none.context("no VmRSS").unwrap_err().to_string(),
            "no VmRSS"
        );
    }
}
