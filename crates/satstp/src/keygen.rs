//! `satstp keygen`: makes a static key pair for the encrypted satellite hop (a terminal's or the
//! gateway's) and writes it to `PREFIX.key` (private, mode 0600) and `PREFIX.pub`, or prints it.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Write PREFIX.key (private, mode 0600) and PREFIX.pub (public) instead of printing both.
    /// Existing files are never overwritten.
    #[arg(long, value_name = "PREFIX")]
    out: Option<PathBuf>,
}

pub fn run(args: &KeygenArgs) -> Result<()> {
    let (private, public) = pep::keys::generate_keypair().context("generating a key pair")?;
    match &args.out {
        Some(prefix) => {
            let (key, publ) = pep::keys::write_keypair(prefix, &private, &public)?;
            outln!("private key: {}", key.display());
            outln!("public key:  {} ({public})", publ.display());
        }
        None => {
            outln!("private {}", private.to_hex());
            outln!("public  {public}");
        }
    }
    Ok(())
}
