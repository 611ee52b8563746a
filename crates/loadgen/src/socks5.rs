//! The SOCKS5 client (RFC 1928, CONNECT without authentication): the exchange encoded and
//! decoded once, driven by an async (tokio) and a blocking flavour.

use crate::Error;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Where the proxy should connect: an address, or a host name it resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Addr(SocketAddr),
    Name(String, u16),
}

impl Dest {
    /// `host` as an IP literal if it is one, else a name.
    pub fn new(host: &str, port: u16) -> Dest {
        match host.parse::<IpAddr>() {
            Ok(ip) => Dest::Addr(SocketAddr::new(ip, port)),
            Err(_) => Dest::Name(host.to_owned(), port),
        }
    }
}

impl From<SocketAddr> for Dest {
    fn from(a: SocketAddr) -> Dest {
        Dest::Addr(a)
    }
}

/// The client's greeting: version 5, one method, "no authentication".
pub const GREETING: [u8; 3] = [5, 1, 0];

/// Checks the proxy's method choice.
pub fn check_method(reply: [u8; 2]) -> Result<(), Error> {
    if reply != [5, 0] {
        return Err(Error::protocol(format!(
            "SOCKS5 method reply {reply:?}, expected [5, 0] (no authentication)"
        )));
    }
    Ok(())
}

/// The CONNECT request for `dest`.
pub fn request(dest: &Dest) -> Result<Vec<u8>, Error> {
    let mut req = vec![5, 1, 0];
    let port = match dest {
        Dest::Addr(SocketAddr::V4(a)) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
            a.port()
        }
        Dest::Addr(SocketAddr::V6(a)) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
            a.port()
        }
        Dest::Name(name, port) => {
            let len = u8::try_from(name.len())
                .ok()
                .filter(|l| *l > 0)
                .ok_or_else(|| {
                    Error::protocol(format!("SOCKS5 host name {name:?}: 1 to 255 bytes"))
                })?;
            req.push(3);
            req.push(len);
            req.extend_from_slice(name.as_bytes());
            *port
        }
    };
    req.extend_from_slice(&port.to_be_bytes());
    Ok(req)
}

/// The reply's first four bytes (VER REP RSV ATYP): the reply code, and how many bytes of bound
/// address and port follow (for a domain name, the length byte is the first of them: call
/// [`name_reply_rest`] with it).
pub fn reply_head(h: [u8; 4]) -> Result<(u8, usize), Error> {
    if h[0] != 5 {
        return Err(Error::protocol(format!("SOCKS5 reply version {}", h[0])));
    }
    let rest = match h[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => 1,
        t => return Err(Error::protocol(format!("SOCKS5 reply address type {t}"))),
    };
    Ok((h[1], rest))
}

/// Bytes after a domain name's length byte in a reply: the name and the port.
pub fn name_reply_rest(len: u8) -> usize {
    usize::from(len) + 2
}

/// The exchange on a connection to the proxy: the reply code (0: connected). A refusal is
/// `Ok(code)`; only a broken exchange is an error.
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    dest: &Dest,
) -> Result<u8, Error> {
    s.write_all(&GREETING).await?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await?;
    check_method(m)?;
    s.write_all(&request(dest)?).await?;
    let mut h = [0u8; 4];
    s.read_exact(&mut h).await?;
    let (code, mut rest) = reply_head(h)?;
    if h[3] == 3 {
        let mut l = [0u8; 1];
        s.read_exact(&mut l).await?;
        rest = name_reply_rest(l[0]);
    }
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip).await?;
    Ok(code)
}

/// Connects to the proxy and through it to `dest` (no Nagle delay): the stream once the proxy
/// reports success, else [`Error::SocksRefused`].
pub async fn connect(
    proxy: SocketAddr,
    dest: impl Into<Dest>,
) -> Result<tokio::net::TcpStream, Error> {
    let mut s = tokio::net::TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    match handshake(&mut s, &dest.into()).await? {
        0 => Ok(s),
        code => Err(Error::SocksRefused(code)),
    }
}

/// The blocking flavour: the same exchange on `std` streams.
pub mod blocking {
    use super::*;

    /// [`super::handshake`] on a blocking stream.
    pub fn handshake<S: Read + Write>(s: &mut S, dest: &Dest) -> Result<u8, Error> {
        s.write_all(&GREETING)?;
        let mut m = [0u8; 2];
        s.read_exact(&mut m)?;
        check_method(m)?;
        s.write_all(&request(dest)?)?;
        let mut h = [0u8; 4];
        s.read_exact(&mut h)?;
        let (code, mut rest) = reply_head(h)?;
        if h[3] == 3 {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            rest = name_reply_rest(l[0]);
        }
        let mut skip = vec![0u8; rest];
        s.read_exact(&mut skip)?;
        Ok(code)
    }

    /// Connects to the proxy (reads time out after `timeout`) and through it to `dest`: the
    /// stream and the reply code.
    pub fn connect(
        proxy: SocketAddr,
        dest: impl Into<Dest>,
        timeout: Duration,
    ) -> Result<(std::net::TcpStream, u8), Error> {
        let mut s = std::net::TcpStream::connect_timeout(&proxy, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        let code = handshake(&mut s, &dest.into())?;
        Ok((s, code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_each_address_type() {
        let v4 = request(&Dest::new("10.1.2.3", 80)).unwrap();
        assert_eq!(v4, [5, 1, 0, 1, 10, 1, 2, 3, 0, 80]);
        let v6 = request(&Dest::new("::1", 443)).unwrap();
        assert_eq!(v6.len(), 4 + 16 + 2);
        assert_eq!(v6[3], 4);
        let name = request(&Dest::new("example.org", 8080)).unwrap();
        assert_eq!(&name[..5], &[5, 1, 0, 3, 11]);
        assert_eq!(&name[5..16], b"example.org");
        assert_eq!(&name[16..], &[0x1f, 0x90]);
        assert!(request(&Dest::Name("x".repeat(256), 1)).is_err());
    }

    #[test]
    fn replies_decode_or_are_refused_as_broken() {
        assert_eq!(reply_head([5, 0, 0, 1]).unwrap(), (0, 6));
        assert_eq!(reply_head([5, 5, 0, 4]).unwrap(), (5, 18));
        assert!(reply_head([4, 0, 0, 1]).is_err());
        assert!(reply_head([5, 0, 0, 9]).is_err());
        assert!(check_method([5, 0xff]).is_err());
    }

    #[test]
    fn the_blocking_exchange_reads_a_name_reply_whole() {
        // A scripted proxy: method choice, then a reply with a bound name, then data.
        let mut script = std::io::Cursor::new(Vec::new());
        let mut answer = vec![5, 0, 5, 0, 0, 3, 4];
        answer.extend_from_slice(b"host");
        answer.extend_from_slice(&[0, 1]);
        answer.extend_from_slice(b"DATA");
        struct Duplex<'a>(&'a [u8], &'a mut std::io::Cursor<Vec<u8>>);
        impl Read for Duplex<'_> {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                Read::read(&mut self.0, b)
            }
        }
        impl Write for Duplex<'_> {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                Write::write(self.1, b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut d = Duplex(&answer, &mut script);
        let code = blocking::handshake(&mut d, &Dest::new("1.2.3.4", 5)).unwrap();
        assert_eq!(code, 0);
        assert_eq!(d.0, b"DATA", "nothing past the reply was consumed");
    }
}
