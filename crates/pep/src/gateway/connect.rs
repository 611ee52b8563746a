//! The gateway's connect to a destination: outbound socket options, source-address
//! transparency.

use crate::config::TcpOptions;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// How the gateway connects to destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// How long one connect attempt may take.
    pub connect_timeout: Duration,
    /// Connect from the client's own address (IP_TRANSPARENT; needs CAP_NET_ADMIN and return
    /// routing through this host). Used only when the stream header carries the client's
    /// address and the destination is of the same family; otherwise the gateway connects from
    /// its own address.
    pub source_transparent: bool,
}

impl ConnectOptions {
    /// Connects from the gateway's own address with `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> ConnectOptions {
        ConnectOptions {
            connect_timeout,
            source_transparent: false,
        }
    }
}

/// Whether a client's address can be the source of a connection to a server: loopback,
/// unspecified, multicast and link-local addresses cannot (a SOCKS client on the terminal's own
/// loopback, for one), so the gateway connects from its own address for them.
pub(crate) fn routable_source(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_link_local())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// Connects to `dest` with the outbound options `tcp`, from `source`'s IP address (any port)
/// when given.
pub(crate) async fn connect_from(
    dest: SocketAddr,
    source: Option<SocketAddr>,
    tcp: &TcpOptions,
) -> io::Result<TcpStream> {
    let sock = if dest.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    crate::sockopt::apply_tcp_options(&socket2::SockRef::from(&sock), tcp)?;
    let Some(source) = source else {
        let s = sock.connect(dest).await?;
        s.set_nodelay(tcp.nodelay)?;
        return Ok(s);
    };
    crate::sockopt::set_transparent(&socket2::SockRef::from(&sock), dest.is_ipv6())?;
    sock.bind(SocketAddr::new(source.ip(), 0)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot bind to the client's address {}: {e}", source.ip()),
        )
    })?;
    let s = sock.connect(dest).await?;
    s.set_nodelay(tcp.nodelay)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_routable_client_addresses_become_sources() {
        for a in ["192.0.2.2", "10.1.2.3", "2001:db8::2", "fd00::1"] {
            assert!(routable_source(a.parse().unwrap()), "{a}");
        }
        for a in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(!routable_source(a.parse().unwrap()), "{a}");
        }
    }
}
