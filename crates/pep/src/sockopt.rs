//! Every socket option the gateway sets, in one place, as safe wrappers (over `socket2`): the
//! TCP options of the gateway's outbound connections and the split-TCP hop ([`TcpOptions`]),
//! congestion control, transparency (`IP_TRANSPARENT`), resets (`SO_LINGER` 0) and the hop's
//! UDP buffers.

use crate::config::TcpOptions;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::time::Duration;
use thiserror::Error;

/// Why a socket option could not be set; the message starts with the option's field name
/// (`congestion`, `send_buffer_bytes`, ...), for the caller to prefix with its table.
#[derive(Debug, Error)]
pub enum SockoptError {
    #[error("congestion: {name:?} is not available in this kernel (available: {available})")]
    CongestionUnavailable { name: String, available: String },
    #[error("congestion: {name:?} is not permitted to this process (allowed without CAP_NET_ADMIN: {allowed})")]
    CongestionNotPermitted { name: String, allowed: String },
    #[error("congestion: {name:?} was set but the socket reports {got:?}")]
    CongestionNotTaken { name: String, got: String },
    #[error("{field}: {source}")]
    Socket {
        field: &'static str,
        #[source]
        source: io::Error,
    },
}

impl From<SockoptError> for io::Error {
    fn from(e: SockoptError) -> io::Error {
        let kind = match &e {
            SockoptError::Socket { source, .. } => source.kind(),
            SockoptError::CongestionNotPermitted { .. } => io::ErrorKind::PermissionDenied,
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// Buffer sizes the kernel granted (it caps requests at `net.core.wmem_max` / `rmem_max` and
/// reports twice the usable size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantedBuffers {
    pub send_buffer_bytes: usize,
    pub recv_buffer_bytes: usize,
}

fn proc_list(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Sets a TCP socket's congestion control (`TCP_CONGESTION`) and checks that it took.
pub fn set_congestion(sock: &impl std::os::fd::AsFd, name: &str) -> Result<(), SockoptError> {
    let sock = SockRef::from(sock);
    match sock.set_tcp_congestion(name.as_bytes()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SockoptError::CongestionUnavailable {
                name: name.into(),
                available: proc_list("/proc/sys/net/ipv4/tcp_available_congestion_control"),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(SockoptError::CongestionNotPermitted {
                name: name.into(),
                allowed: proc_list("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
            })
        }
        Err(source) => {
            return Err(SockoptError::Socket {
                field: "congestion",
                source,
            })
        }
    }
    let got = sock
        .tcp_congestion()
        .map_err(|source| SockoptError::Socket {
            field: "congestion",
            source,
        })?;
    let got = String::from_utf8_lossy(&got)
        .trim_end_matches('\0')
        .to_string();
    if got != name {
        return Err(SockoptError::CongestionNotTaken {
            name: name.into(),
            got,
        });
    }
    Ok(())
}

/// Sets `o` on a TCP socket: congestion control, buffer sizes and `TCP_NODELAY` (before
/// `connect` or `listen`, so buffer sizes shape the window scale).
pub fn apply_tcp_options(sock: &SockRef<'_>, o: &TcpOptions) -> Result<(), SockoptError> {
    if let Some(name) = &o.congestion {
        set_congestion(&**sock, name)?;
    }
    if let Some(b) = o.send_buffer_bytes {
        sock.set_send_buffer_size(b as usize)
            .map_err(|source| SockoptError::Socket {
                field: "send_buffer_bytes",
                source,
            })?;
    }
    if let Some(b) = o.recv_buffer_bytes {
        sock.set_recv_buffer_size(b as usize)
            .map_err(|source| SockoptError::Socket {
                field: "recv_buffer_bytes",
                source,
            })?;
    }
    sock.set_tcp_nodelay(o.nodelay)
        .map_err(|source| SockoptError::Socket {
            field: "nodelay",
            source,
        })?;
    Ok(())
}

/// Applies `o` to a throwaway socket: whether this kernel and process accept the options, and
/// what buffer sizes it grants.
pub fn check_tcp_options(o: &TcpOptions) -> Result<GrantedBuffers, SockoptError> {
    let sock =
        Socket::new(Domain::IPV4, Type::STREAM, None).map_err(|source| SockoptError::Socket {
            field: "socket",
            source,
        })?;
    apply_tcp_options(&SockRef::from(&sock), o)?;
    Ok(GrantedBuffers {
        send_buffer_bytes: sock.send_buffer_size().unwrap_or(0),
        recv_buffer_bytes: sock.recv_buffer_size().unwrap_or(0),
    })
}

/// Sets `IP_TRANSPARENT` (IPv4 socket) or `IPV6_TRANSPARENT` (IPv6 socket, also covering
/// IPv4-mapped traffic of a dual-stack socket) on `sock`.
pub fn set_transparent(sock: &SockRef<'_>, ipv6: bool) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let r = if ipv6 {
            sock.set_ip_transparent_v6(true)
        } else {
            sock.set_ip_transparent_v4(true)
        };
        r.map_err(|e| {
            let why = if e.kind() == io::ErrorKind::PermissionDenied {
                "IP_TRANSPARENT needs CAP_NET_ADMIN"
            } else {
                "cannot set IP_TRANSPARENT"
            };
            io::Error::new(e.kind(), format!("{why}: {e}"))
        })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (sock, ipv6);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "IP_TRANSPARENT exists only on Linux",
        ))
    }
}

/// Checks that this process may use transparent sockets (for a daemon to fail at start rather
/// than on every connection).
pub fn check_transparent_allowed() -> io::Result<()> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    set_transparent(&SockRef::from(&s), false)
}

/// Ends `tcp` with a reset (RST) instead of a FIN: linger time zero, then close.
pub fn reset(tcp: tokio::net::TcpStream) {
    let _ = SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
    drop(tcp);
}

/// Asks the kernel for `bytes` of receive and send buffer on the hop's UDP socket (it may grant
/// less: `net.core.rmem_max`, `wmem_max`).
pub fn set_udp_buffers(socket: &tokio::net::UdpSocket, bytes: usize) {
    let sref = SockRef::from(socket);
    let _ = sref.set_recv_buffer_size(bytes);
    let _ = sref.set_send_buffer_size(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_congestion_control_is_named() {
        let t = TcpOptions {
            congestion: Some("nosuchcc".into()),
            ..TcpOptions::default()
        };
        let e = check_tcp_options(&t).unwrap_err().to_string();
        assert!(e.starts_with("congestion:"), "{e}");
        assert!(e.contains("nosuchcc"), "{e}");
        // The always-built-in controller works.
        let t = TcpOptions {
            congestion: Some("reno".into()),
            send_buffer_bytes: Some(1 << 20),
            recv_buffer_bytes: Some(1 << 20),
            nodelay: true,
        };
        let g = check_tcp_options(&t).unwrap();
        assert!(g.send_buffer_bytes > 0 && g.recv_buffer_bytes > 0);
    }
}
