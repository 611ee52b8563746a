//! Accepting clients on a terminal's listener: admission against the side's limits, and the
//! descriptor reserve that lets a client be refused cleanly when the process is out of files.

use crate::metrics::RefusalReason;
use crate::ops::{Conn, Ops};
use crate::stream::canonical_addr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// Pause after a failed `accept` (out of descriptors and the like) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Accepts the next client on `listener` and admits it, until `ops` drains (`None`).
pub(crate) async fn next_client(
    listener: &TcpListener,
    ops: &Arc<Ops>,
) -> Option<(TcpStream, SocketAddr, Result<Conn, RefusalReason>)> {
    let mut refusing = false;
    loop {
        if !refusing {
            ops.descriptor_reserve().refill();
        }
        let accepted = tokio::select! {
            _ = ops.drained() => return None,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((tcp, peer)) if refusing => {
                // Accepted on the reserve's descriptor: answered as refused, then closed.
                let peer = canonical_addr(peer);
                return Some((tcp, peer, Err(RefusalReason::Descriptors)));
            }
            Ok((tcp, peer)) => {
                let peer = canonical_addr(peer);
                let _ = tcp.set_nodelay(true);
                let admitted = ops.admit(None, Some(peer));
                return Some((tcp, peer, admitted));
            }
            // The open-file limit: give up the spare descriptor to accept the client and
            // refuse it (a SOCKS5 or HTTP error instead of a hanging connect).
            Err(e) if crate::fdlimit::is_descriptor_shortage(&e) => {
                ops.log_descriptor_limit("a client's connection");
                ops.metrics().refused(RefusalReason::Descriptors).inc();
                refusing = ops.descriptor_reserve().release();
                if !refusing {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
            // The listener itself is still good: back off instead of spinning.
            Err(_) => tokio::time::sleep(ACCEPT_RETRY).await,
        }
    }
}
