//! Output paths given on the command line, checked before any work so that a long run never
//! ends by losing its results, and the one `--json` convention of every subcommand.
//!
//! The rules (docs/cli.md): a file flag (`--json FILE`, `--capture FILE`) needs an existing,
//! writable directory and replaces an existing regular file, as a shell's `>` does, but never
//! a directory; a directory flag (`--out DIR`, `--pcap DIR`) creates the directory when
//! missing and refuses a path that is a file. Errors name the flag and say what is wrong in
//! words.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Standard output, for `--json` given without a file.
pub const STDOUT: &str = "-";

/// Checks a file output path: its directory exists and is writable, and it is not a directory.
pub fn file(flag: &str, path: &Path) -> Result<()> {
    if path.as_os_str() == STDOUT {
        return Ok(());
    }
    let shown = path.display();
    if path.is_dir() {
        bail!("{flag} {shown}: is a directory; {flag} takes a file name");
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.exists() {
        bail!(
            "{flag} {shown}: the directory {} does not exist (create it first)",
            parent.display()
        );
    }
    if !parent.is_dir() {
        bail!(
            "{flag} {shown}: {} is a file, not a directory",
            parent.display()
        );
    }
    // Opening for append changes nothing in an existing file; a new one is removed again.
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| anyhow::anyhow!("{flag} {shown}: cannot write there: {}", words(&e)))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Checks an output prefix (`--out NAME` writing NAME.svg and NAME.png): as [`file`] for each.
pub fn prefix(flag: &str, path: &Path, extensions: &[&str]) -> Result<()> {
    for ext in extensions {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{ext}"));
        file(flag, &PathBuf::from(p))?;
    }
    Ok(())
}

/// Checks a directory output path, creating it (and its parents) when missing.
pub fn dir(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    if path.exists() && !path.is_dir() {
        bail!("{flag} {shown}: is a file, not a directory; {flag} takes a directory (created when missing)");
    }
    std::fs::create_dir_all(path).map_err(|e| {
        anyhow::anyhow!("{flag} {shown}: cannot create the directory: {}", words(&e))
    })?;
    let probe = path.join(format!(".satstp-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        anyhow::anyhow!(
            "{flag} {shown}: cannot write in the directory: {}",
            words(&e)
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// An I/O error in words, without the `(os error N)` suffix.
fn words(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        PermissionDenied => "permission denied".into(),
        NotFound => "a directory on the way does not exist".into(),
        AlreadyExists => "a file is in the way".into(),
        ReadOnlyFilesystem => "the file system is read-only".into(),
        NotADirectory => "a file is in the way where a directory is needed".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// `--json`'s value: standard output or a file.
pub fn json_to_stdout(json: &Option<PathBuf>) -> bool {
    json.as_deref().is_some_and(|p| p.as_os_str() == STDOUT)
}

/// Starts a run with `--json`: checks its file, or, for standard output, sends the text to
/// standard error from now on so that standard output holds only the JSON document.
pub fn json_start(json: &Option<PathBuf>) -> Result<()> {
    match json {
        None => Ok(()),
        Some(_) if json_to_stdout(json) => {
            crate::out::text_to_stderr();
            Ok(())
        }
        Some(p) => file("--json", p),
    }
}

/// Writes `value` as `--json` asks: pretty JSON on standard output or to the file.
pub fn write_json(json: &Option<PathBuf>, value: &impl serde::Serialize) -> Result<()> {
    let Some(path) = json else { return Ok(()) };
    let text = serde_json::to_string_pretty(value)? + "\n";
    if path.as_os_str() == STDOUT {
        crate::out::write_stdout(format_args!("{text}"));
        crate::out::flush();
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("--json: cannot write {}", path.display()))
}
