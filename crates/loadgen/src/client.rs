//! How a client reaches the origin: straight across, through a SOCKS5 proxy or through an
//! HTTP CONNECT proxy; optionally with the caller's own way of making the TCP connection (a
//! socket opened inside a network namespace, a congestion control set on it).

use crate::http::HttpConn;
use crate::{http_connect, socks5, Error};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;

/// The path to the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A TCP connection to the origin's address (intercepted on the way or not).
    Direct,
    /// Through the SOCKS5 proxy at this address.
    Socks5(SocketAddr),
    /// Through the HTTP CONNECT proxy at this address.
    HttpConnect(SocketAddr),
}

/// Makes a blocking TCP connection to an address (run on a blocking thread).
pub type Dialer = Arc<dyn Fn(SocketAddr) -> io::Result<std::net::TcpStream> + Send + Sync>;

/// Opens connections to one origin along one route.
#[derive(Clone)]
pub struct Client {
    pub origin: SocketAddr,
    pub route: Route,
    dial: Option<Dialer>,
}

impl Client {
    pub fn new(origin: SocketAddr, route: Route) -> Client {
        Client {
            origin,
            route,
            dial: None,
        }
    }

    /// Makes TCP connections (to the origin or to the proxy) with `dial`.
    pub fn with_dialer(mut self, dial: Dialer) -> Client {
        self.dial = Some(dial);
        self
    }

    /// A TCP connection to `to`, made by the dialer if there is one.
    async fn tcp(&self, to: SocketAddr) -> Result<TcpStream, Error> {
        let s = match &self.dial {
            None => TcpStream::connect(to).await?,
            Some(dial) => {
                let dial = Arc::clone(dial);
                let s = tokio::task::spawn_blocking(move || dial(to))
                    .await
                    .map_err(|e| io::Error::other(format!("dialer: {e}")))??;
                s.set_nonblocking(true)?;
                TcpStream::from_std(s)?
            }
        };
        s.set_nodelay(true)?;
        Ok(s)
    }

    /// A stream to the origin, through the proxy if there is one.
    pub async fn stream(&self) -> Result<TcpStream, Error> {
        match self.route {
            Route::Direct => self.tcp(self.origin).await,
            Route::Socks5(proxy) => {
                let mut s = self.tcp(proxy).await?;
                match socks5::handshake(&mut s, &self.origin.into()).await? {
                    0 => Ok(s),
                    code => Err(Error::SocksRefused(code)),
                }
            }
            Route::HttpConnect(proxy) => {
                let mut s = self.tcp(proxy).await?;
                match http_connect::handshake(&mut s, &self.origin.to_string()).await? {
                    (code, _) if (200..300).contains(&code) => Ok(s),
                    (code, _) => Err(Error::ConnectRefused(code)),
                }
            }
        }
    }

    /// An HTTP connection to the origin.
    pub async fn connect(&self) -> Result<HttpConn<TcpStream>, Error> {
        Ok(HttpConn::new(self.stream().await?))
    }
}
