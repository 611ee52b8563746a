//! Splicing one TCP connection and one hop stream: bytes both ways with backpressure, half-closes
//! passed on after every byte, failures turned into resets, idle and drain timeouts.

use crate::hop::{AbortCode, HopReader, HopStream, HopWriter, StreamEvent};
use crate::metrics::{CloseReason, ConnTrack, ConnectionState, RefusalReason};
use crate::ops::Conn;
use crate::stream::{split_verdict, Verdict};
use std::io;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

/// Largest read from a TCP socket towards the hop. 256 KiB (a quarter of the reads) cost the
/// gateway more CPU per byte than 64 KiB on one bulk flow (27 November 2026, `docs/scaling.md`).
const READ_BUF: usize = 64 * 1024;
/// Most chunks from the hop written to the TCP socket in one (vectored) system call.
const WRITE_CHUNKS: usize = 16;
/// A connection's first read buffer towards the hop; it doubles up to [`READ_BUF`] while reads
/// fill it and halves back while they use less than a quarter.
const READ_BUF_MIN: usize = 4 * 1024;

/// How a splice ended badly, and so which side must be told.
enum SpliceError {
    /// The TCP connection failed: the stream is aborted.
    Tcp(io::Error),
    /// The stream failed (reset by the peer, timed out, or the hop is gone): the TCP connection
    /// is reset.
    Hop(io::Error),
    /// The gateway's verdict was a failure (its status byte), or did not come in time (`None`):
    /// the TCP connection is reset and the connection counted as refused.
    Refused(Option<Verdict>),
}

/// Relays bytes between a TCP connection and a hop stream until both directions have ended.
/// `pre_client` are bytes from the stream already received (written to the TCP side first).
///
/// - End of stream passes each way as a half-close, after every earlier byte: EOF from the TCP
///   side shuts the stream's sending half down; the stream's end shuts the TCP write side down
///   once every byte before it was written. The other direction keeps flowing.
/// - A failure on either side ends both directions: a TCP error (a reset by the peer, a failed
///   read or write) aborts the stream with [`AbortCode::TcpFailed`], so the far relay resets its
///   TCP connection in turn; a failed stream, or a hop that is gone, resets the TCP connection
///   (SO_LINGER 0), so its peer reads ECONNRESET and never mistakes a cut transfer for a
///   complete one.
///
/// Counts the bytes each way into `conn`'s record and the side's metrics and, when the side has
/// an idle timeout, closes the connection once no byte has moved either way for that long: the stream is aborted with [`AbortCode::Idle`] and the TCP connection reset, and
/// the close is counted as `idle_timeout`.
pub(crate) async fn splice_tracked(
    tcp: TcpStream,
    stream: HopStream,
    pre_client: Vec<u8>,
    conn: Option<&mut Conn>,
) -> io::Result<(u64, u64)> {
    splice_inner(tcp, stream, pre_client, conn, None).await
}

/// Terminal: [`splice_tracked`] on a stream just opened, before the gateway's verdict (its
/// status byte, the first byte the stream delivers) has come back. The client's bytes cross the
/// hop at once — the gateway holds them in the stream until its connect is done — so a request
/// the client writes after its connection was accepted does not wait a satellite round trip for
/// the verdict before it leaves. A success verdict is consumed and the relay goes on; a failure
/// (or no verdict within `verdict_limit`) resets the client's connection and counts the
/// connection as refused, as a fast-open or transparent terminal reports every failed connect.
pub(crate) async fn splice_before_verdict(
    tcp: TcpStream,
    stream: HopStream,
    conn: &mut Conn,
    verdict_limit: Option<Duration>,
) -> io::Result<(u64, u64)> {
    splice_inner(tcp, stream, Vec::new(), Some(conn), Some(verdict_limit)).await
}

/// `verdict`: `None` when the stream is open already; `Some(limit)` when its first byte is the
/// gateway's verdict, awaited for at most `limit` (when given).
async fn splice_inner(
    mut tcp: TcpStream,
    stream: HopStream,
    pre_client: Vec<u8>,
    mut conn: Option<&mut Conn>,
    verdict: Option<Option<Duration>>,
) -> io::Result<(u64, u64)> {
    let idle = conn.as_ref().and_then(|c| c.ops().config().idle_timeout);
    if let Some(c) = conn.as_ref() {
        c.track().set_stream(stream.id());
        c.track().set_state(ConnectionState::Open);
        c.track().touch();
    }
    let (hw, hr) = stream.split();
    let outcome = {
        let tracked = conn.as_deref();
        let (rd, wr) = tcp.split();
        let relay = async {
            tokio::try_join!(
                tcp_to_hop(rd, &hw, tracked),
                hop_to_tcp(hr, wr, &pre_client, tracked, verdict)
            )
        };
        match tracked {
            Some(c) => tokio::select! {
                r = relay => Ok(r),
                _ = idle_watch(c.track(), idle) => Err(CloseReason::IdleTimeout),
                _ = c.ops().cut_called() => Err(CloseReason::DrainTimeout),
            },
            None => Ok(relay.await),
        }
    };
    let close = |conn: &mut Option<&mut Conn>, reason| {
        if let Some(c) = conn.as_deref_mut() {
            c.track().set_state(ConnectionState::Closing);
            c.set_close_reason(reason);
        }
    };
    let (reason, e) = match outcome {
        Ok(Ok(counts)) => {
            close(&mut conn, CloseReason::Done);
            return Ok(counts);
        }
        // After a stream failure the hop has forgotten the stream and the abort below is a
        // no-op; after a TCP failure it resets the connection across the hop.
        Ok(Err(SpliceError::Tcp(e))) => (CloseReason::TcpReset, e),
        Ok(Err(SpliceError::Hop(e))) => (CloseReason::HopReset, e),
        Ok(Err(SpliceError::Refused(code))) => {
            if let Some(c) = conn.as_deref_mut() {
                c.refuse(code.map_or(RefusalReason::Timeout, RefusalReason::for_verdict));
            }
            // The gateway has ended its side after the code; ending ours closes the stream at
            // both hops (bytes the client sent meanwhile are discarded there). Without a code
            // the terminal gives up: the stream is aborted, so it is not carried on to the
            // gateway after the client was told (at-most-once opens).
            match code {
                Some(_) => hw.shutdown().await,
                None => hw.abort(AbortCode::Expired).await,
            }
            crate::sockopt::reset(tcp);
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                match code {
                    Some(code) => format!("the gateway answered: {code}"),
                    None => "no answer from the gateway in time".to_string(),
                },
            ));
        }
        Err(reason) => {
            let what = if reason == CloseReason::IdleTimeout {
                "idle in both directions"
            } else {
                "the shutdown timeout passed while draining"
            };
            (reason, io::Error::new(io::ErrorKind::TimedOut, what))
        }
    };
    close(&mut conn, reason);
    let code = match reason {
        CloseReason::IdleTimeout => AbortCode::Idle,
        CloseReason::DrainTimeout => AbortCode::DrainTimeout,
        _ => AbortCode::TcpFailed,
    };
    hw.abort(code).await;
    crate::sockopt::reset(tcp);
    Err(e)
}

/// Completes once `track` has seen no byte either way for `limit`.
/// Never completes without a limit.
async fn idle_watch(track: &ConnTrack, limit: Option<Duration>) {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    loop {
        let idle = track.idle_for();
        if idle >= limit {
            return;
        }
        tokio::time::sleep(limit - idle).await;
    }
}

async fn tcp_to_hop(
    rd: ReadHalf<'_>,
    hw: &HopWriter,
    conn: Option<&Conn>,
) -> Result<u64, SpliceError> {
    // A read buffer exists only while the socket has bytes: it is allocated (and charged to the
    // side's memory budget, waiting for room when the cap is reached) once the socket is
    // readable, and handed to the hop without copying with its charge, which returns when STP
    // has sent them and had them acknowledged. An idle connection holds none. A full read
    // doubles the next, one using less than a quarter halves it; a read filling less than half
    // its buffer is copied into one of its size, so the bytes in flight hold no empty room.
    // On an STP hop with a read-ahead bound the read waits, before that, for room in the
    // stream's share of it (`hop::read_ahead`); what the read did not fill is given back, the
    // rest returns as STP sends it.
    let tcp: &TcpStream = rd.as_ref();
    let read_ahead = hw.read_ahead().cloned();
    let memory = conn.map(|c| std::sync::Arc::clone(c.ops().memory()));
    let mut size = READ_BUF_MIN;
    let mut total = 0u64;
    loop {
        tcp.readable().await.map_err(SpliceError::Tcp)?;
        let room = match &read_ahead {
            Some(slot) => slot.acquire(size as u64).await as usize,
            None => size,
        };
        let unread = |n: usize| {
            if let Some(slot) = &read_ahead {
                slot.release(room.saturating_sub(n) as u64);
            }
        };
        let charge = match &memory {
            Some(m) => Some(m.charge(room as u64).await),
            None => None,
        };
        let mut buf = bytes::BytesMut::with_capacity(room);
        let n = match tcp.try_read_buf(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                unread(0);
                continue;
            }
            Err(e) => {
                unread(0);
                return Err(SpliceError::Tcp(e));
            }
        };
        unread(n);
        if n == 0 {
            hw.shutdown().await;
            if let Some(c) = conn {
                c.track().set_state(ConnectionState::HalfClosed);
            }
            return Ok(total);
        }
        if let Some(c) = conn {
            c.add_bytes(c.directions().0, n as u64);
        }
        size = if n == size {
            (size * 2).min(READ_BUF)
        } else if n < size / 4 {
            (size / 2).max(READ_BUF_MIN)
        } else {
            size
        };
        // A buffer mostly empty is not kept for a few bytes: they move to one of their size.
        let copied = n < room / 2;
        let data = if copied {
            bytes::Bytes::copy_from_slice(&buf)
        } else {
            buf.freeze()
        };
        let data = match charge {
            Some(mut c) => {
                if copied {
                    c.shrink_to(n as u64);
                }
                c.attach(data)
            }
            None => data,
        };
        hw.write_bytes(data)
            .await
            .map_err(|e| SpliceError::Hop(io::Error::new(io::ErrorKind::ConnectionAborted, e)))?;
        total += n as u64;
    }
}

/// The gateway's verdict, the stream's first byte; the bytes that came with it.
async fn await_verdict(hr: &mut HopReader) -> Result<Vec<u8>, SpliceError> {
    loop {
        match hr.recv().await {
            Some(StreamEvent::Data(b)) => match split_verdict(&b) {
                None => continue,
                Some((Verdict::Connected, rest)) => return Ok(rest.to_vec()),
                Some((code, _)) => return Err(SpliceError::Refused(Some(code))),
            },
            // Ended or failed without a verdict: what `terminal::open` reports as a general
            // failure.
            _ => return Err(SpliceError::Refused(Some(Verdict::Failed))),
        }
    }
}

async fn hop_to_tcp(
    mut hr: HopReader,
    mut wr: WriteHalf<'_>,
    pre: &[u8],
    conn: Option<&Conn>,
    verdict: Option<Option<Duration>>,
) -> Result<u64, SpliceError> {
    let count = |n: usize| {
        if let Some(c) = conn {
            c.add_bytes(c.directions().1, n as u64);
        }
    };
    let with_verdict = match verdict {
        None => Vec::new(),
        Some(None) => await_verdict(&mut hr).await?,
        Some(Some(limit)) => tokio::time::timeout(limit, await_verdict(&mut hr))
            .await
            .map_err(|_| SpliceError::Refused(None))??,
    };
    let pre: &[u8] = if with_verdict.is_empty() {
        pre
    } else {
        &with_verdict
    };
    wr.write_all(pre).await.map_err(SpliceError::Tcp)?;
    count(pre.len());
    let mut total = pre.len() as u64;
    let mut chunks: Vec<bytes::Bytes> = Vec::with_capacity(WRITE_CHUNKS);
    loop {
        let mut next = hr.recv().await;
        // Chunks already waiting behind this one leave with it, in one vectored write.
        while let Some(StreamEvent::Data(b)) = next {
            chunks.push(b);
            next = if chunks.len() < WRITE_CHUNKS {
                hr.try_recv()
            } else {
                None
            };
        }
        if !chunks.is_empty() {
            let n = write_all_chunks(&mut wr, &mut chunks)
                .await
                .map_err(SpliceError::Tcp)?;
            count(n);
            total += n as u64;
            if next.is_none() {
                continue;
            }
        }
        match next {
            // Taken by the loop above.
            Some(StreamEvent::Data(_)) => {}
            Some(StreamEvent::Finished) => {
                wr.shutdown().await.map_err(SpliceError::Tcp)?;
                if let Some(c) = conn {
                    c.track().set_state(ConnectionState::HalfClosed);
                }
                return Ok(total);
            }
            Some(StreamEvent::Failed(e)) => {
                return Err(SpliceError::Hop(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    e,
                )));
            }
            None => {
                return Err(SpliceError::Hop(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "hop closed",
                )))
            }
        }
    }
}

/// Writes every byte of `chunks` (in order, emptying it) with vectored writes; returns how many.
async fn write_all_chunks(
    wr: &mut WriteHalf<'_>,
    chunks: &mut Vec<bytes::Bytes>,
) -> io::Result<usize> {
    let mut written = 0;
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<io::IoSlice<'_>> = chunks
            .get(first..)
            .unwrap_or_default()
            .iter()
            .map(|c| io::IoSlice::new(c))
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        written += n;
        while let Some(c) = chunks.get_mut(first) {
            if n < c.len() {
                let rest = c.slice(n..);
                *c = rest;
                break;
            }
            n -= c.len();
            first += 1;
        }
    }
    chunks.clear();
    Ok(written)
}
