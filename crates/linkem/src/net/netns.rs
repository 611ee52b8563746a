//! Network namespaces of the IP-level emulator, through iproute2's `ip netns`, with a lock file
//! per pair so that a later run can tell a crashed run's leftovers from a live run's namespaces.
//!
//! A pair is named `satstp-<tag>-t` (terminal side) and `satstp-<tag>-g` (gateway side), with
//! `<tag>` = `<pid>-<n>` unless the caller chooses one. Before creating the namespaces, a run
//! creates `/run/satstp-linkem/<tag>.lock` and holds an exclusive `flock(2)` on it for its
//! lifetime; the kernel releases the lock when the process dies, however it dies. A namespace
//! with the prefix whose lock can be taken (or whose lock file is missing) belongs to no live
//! run and is deleted by [`clean_stale`].

use super::NetError;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Prefix of every namespace the emulator creates.
pub const NAME_PREFIX: &str = "satstp-";
/// Where the lock files live.
pub const LOCK_DIR: &str = "/run/satstp-linkem";
/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

static NEXT_TAG: AtomicU64 = AtomicU64::new(0);

/// The `ip` binary: the usual locations first, then `PATH`.
pub fn ip_binary() -> PathBuf {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("ip"))
}

/// Runs `ip ARGS…` (with `stdin` fed to it if given) and turns a failure into an error quoting
/// the command and its message.
pub fn run_ip(args: &[&str], stdin: Option<&str>) -> Result<(), NetError> {
    use std::io::Write;
    let describe = || format!("ip {}", args.join(" "));
    let mut child = Command::new(ip_binary())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| NetError::Io {
            what: format!("cannot run '{}' (is iproute2 installed?)", describe()),
            error,
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|error| NetError::Io {
                what: format!("cannot feed '{}'", describe()),
                error,
            })?;
    }
    let out = child.wait_with_output().map_err(|error| NetError::Io {
        what: format!("waiting for '{}'", describe()),
        error,
    })?;
    if !out.status.success() {
        return Err(NetError::Command {
            command: describe(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// The handle file of namespace `name`.
pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Whether namespace `name` exists.
pub fn exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Names of the existing namespaces that start with [`NAME_PREFIX`].
pub fn list_ours() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(NAME_PREFIX))
        .collect();
    names.sort();
    names
}

fn lock_path(tag: &str) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("{tag}.lock"))
}

/// Takes an exclusive lock on `file` without waiting; false if someone holds it.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The tag of one of our namespace names (`satstp-<tag>-t` or `-g`).
fn tag_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    rest.strip_suffix("-t").or_else(|| rest.strip_suffix("-g"))
}

/// Deletes the namespaces (and lock files) of runs that are no longer alive; returns the names
/// of the namespaces deleted.
pub fn clean_stale() -> Result<Vec<String>, NetError> {
    let mut removed = Vec::new();
    for name in list_ours() {
        let Some(tag) = tag_of(&name) else {
            continue;
        };
        let path = lock_path(tag);
        let lock = File::open(&path).ok();
        let stale = match &lock {
            None => true,
            Some(f) => try_lock(f),
        };
        if !stale {
            continue;
        }
        if exists(&name) {
            run_ip(&["netns", "del", &name], None)?;
            removed.push(name.clone());
        }
        let sibling = match name.strip_suffix("-t") {
            Some(base) => format!("{base}-g"),
            None => format!("{}-t", name.trim_end_matches("-g")),
        };
        if exists(&sibling) {
            run_ip(&["netns", "del", &sibling], None)?;
            removed.push(sibling);
        }
        if lock.is_some() {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(removed)
}

/// A pair of namespaces, deleted on [`NsPair::delete`] or drop.
#[derive(Debug)]
pub struct NsPair {
    pub terminal: String,
    pub gateway: String,
    lock: Option<(File, PathBuf)>,
}

impl NsPair {
    /// Creates `satstp-<tag>-t` and `satstp-<tag>-g` (tag: `<pid>-<n>` if `None`).
    pub fn create(tag: Option<&str>) -> Result<NsPair, NetError> {
        let tag = match tag {
            Some(t) => {
                if t.is_empty()
                    || !t
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(NetError::Config(format!(
                        "namespace tag '{t}' must be non-empty ASCII letters, digits, '-' or '_'"
                    )));
                }
                t.to_string()
            }
            None => format!(
                "{}-{}",
                std::process::id(),
                NEXT_TAG.fetch_add(1, Ordering::Relaxed)
            ),
        };
        std::fs::create_dir_all(LOCK_DIR).map_err(|error| NetError::Io {
            what: format!("cannot create {LOCK_DIR}"),
            error,
        })?;
        let path = lock_path(&tag);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|error| NetError::Io {
                what: format!("cannot open {}", path.display()),
                error,
            })?;
        if !try_lock(&file) {
            return Err(NetError::Config(format!(
                "namespace tag '{tag}' is in use by a running emulator"
            )));
        }
        let mut pair = NsPair {
            terminal: format!("{NAME_PREFIX}{tag}-t"),
            gateway: format!("{NAME_PREFIX}{tag}-g"),
            lock: Some((file, path)),
        };
        for name in [pair.terminal.clone(), pair.gateway.clone()] {
            if exists(&name) {
                // Left by a crashed run with the same tag: the lock we hold says it is stale.
                run_ip(&["netns", "del", &name], None)?;
            }
            if let Err(e) = run_ip(&["netns", "add", &name], None) {
                pair.delete_quietly();
                return Err(e);
            }
        }
        Ok(pair)
    }

    /// Deletes both namespaces and releases the lock.
    pub fn delete(mut self) -> Result<(), NetError> {
        let result = self.delete_inner();
        self.lock = None;
        result
    }

    fn delete_inner(&mut self) -> Result<(), NetError> {
        let mut first_err = None;
        for name in [&self.terminal, &self.gateway] {
            if exists(name) {
                if let Err(e) = run_ip(&["netns", "del", name], None) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some((_file, path)) = self.lock.take() {
            if first_err.is_none() {
                let _ = std::fs::remove_file(path);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn delete_quietly(&mut self) {
        let _ = self.delete_inner();
    }
}

impl Drop for NsPair {
    fn drop(&mut self) {
        if self.lock.is_some() {
            self.delete_quietly();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_come_from_both_names() {
        assert_eq!(tag_of("satstp-12-3-t"), Some("12-3"));
        assert_eq!(tag_of("satstp-12-3-g"), Some("12-3"));
        assert_eq!(tag_of("satstp-x"), None);
        assert_eq!(tag_of("other-1-t"), None);
    }
}
