//! The process's open-file limit (`RLIMIT_NOFILE`): raising it to the hard limit at start, telling
//! a descriptor shortage apart from other socket errors, and a spare descriptor kept in reserve so
//! a listener that hit the limit can still accept a client to refuse it properly (a SOCKS5 reply
//! instead of a connection left hanging in the kernel's backlog).

use std::io;
use std::sync::Mutex;

/// The soft and hard open-file limits.
// `rlim_t` is 64 bits here but not on every target.
#[allow(clippy::unnecessary_cast)]
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r.rlim_cur as u64, r.rlim_max as u64))
}

/// Raises the soft open-file limit to the hard one; returns (before, after).
#[allow(clippy::unnecessary_cast)]
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let (soft, hard) = nofile_limit()?;
    if soft < hard {
        let r = libc::rlimit {
            rlim_cur: hard as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct we pass it.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((soft, nofile_limit()?.0))
}

/// Whether `e` says the process (EMFILE) or the system (ENFILE) has no descriptor left.
pub(crate) fn is_descriptor_shortage(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// One descriptor held back for the moment the limit is reached.
#[derive(Debug, Default)]
pub(crate) struct Reserve {
    spare: Mutex<Option<std::fs::File>>,
}

impl Reserve {
    /// Takes the spare descriptor if it is not held (a no-op while the limit is still reached).
    pub(crate) fn refill(&self) {
        let mut g = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = std::fs::File::open("/dev/null").ok();
        }
    }

    /// Frees the spare descriptor for one use; false if there was none.
    pub(crate) fn release(&self) -> bool {
        let mut g = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        g.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_errors_are_told_apart() {
        assert!(is_descriptor_shortage(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(is_descriptor_shortage(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!is_descriptor_shortage(&io::Error::from_raw_os_error(
            libc::ECONNREFUSED
        )));
    }

    #[test]
    fn the_reserve_holds_one_descriptor_and_gives_it_up_once() {
        let r = Reserve::default();
        assert!(!r.release());
        r.refill();
        assert!(r.release());
        assert!(!r.release());
        let (soft, hard) = nofile_limit().unwrap();
        assert!(soft <= hard);
    }
}
