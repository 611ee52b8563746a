//! A TUN device opened inside a network namespace: `/dev/net/tun` plus the `TUNSETIFF` ioctl,
//! in layer-3 mode without the packet-information header (each read or write is one whole IP
//! packet), non-blocking.
//!
//! The device lives in the namespace of the thread that creates it, so [`Tun::open_in`] creates
//! it from a short-lived thread that has first joined the target namespace with `setns(2)`; the
//! descriptor then works from any thread. The device disappears when the descriptor is closed.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// `struct ifreq` as `TUNSETIFF` reads it: the interface name, the flags, and the rest of the
/// union, padded to the kernel's 40 bytes.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
}

/// Runs `f` on a fresh thread that has joined the network namespace whose handle is the file
/// `ns_path` (e.g. `/run/netns/NAME`). Sockets and devices created by `f` belong to that
/// namespace.
pub fn in_netns<T, F>(ns_path: &Path, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let ns = File::open(ns_path)?;
    std::thread::Builder::new()
        .name("linkem-netns".into())
        .spawn(move || {
            // SAFETY: `ns` is an open descriptor of a namespace file; setns only changes this
            // thread's network namespace, which ends with the thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })?
        .join()
        .map_err(|_| io::Error::other("the thread running in the namespace panicked"))?
}

impl Tun {
    /// Creates the TUN device `name` (at most 15 bytes) in the namespace `ns_path`.
    pub fn open_in(ns_path: &Path, name: &str) -> io::Result<Tun> {
        let name = name.to_string();
        in_netns(ns_path, move || Tun::open(&name))?
    }

    /// Creates the TUN device `name` in the calling thread's namespace.
    pub fn open(name: &str) -> io::Result<Tun> {
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        let bytes = cname.as_bytes_with_nul();
        if bytes.len() > libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name '{name}' is longer than 15 bytes"),
            ));
        }
        // SAFETY: a plain open(2) of a NUL-terminated path; the result is checked.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        for (dst, src) in req.name.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `IfReq` lays out (40 bytes).
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun { fd })
    }

    /// The descriptor, for polling.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads one packet; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: reads at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::read(self.raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Writes one packet into the namespace's network stack.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        // SAFETY: reads `packet.len()` bytes from `packet`.
        let n = unsafe { libc::write(self.raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<super::IfReq>(), 40);
    }
}
