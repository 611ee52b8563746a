//! Control items a connection owes its peer, in one place: each is set by the event that makes
//! it due (a received datagram, a timer, the application) and cleared by the datagram that
//! carries it (`builder`, spec §6.10).

use crate::wire::Rst;

/// What the next datagrams must carry besides data.
#[derive(Debug, Default)]
pub(super) struct PendingControl {
    /// A RST, sent alone before anything else (the connection has failed or was aborted).
    pub rst: Option<Rst>,
    /// Initiator: the BGN must force a datagram (first send, or its retransmission timer fired).
    /// The BGN body rides on every datagram until the BGNAK arrives, due or not.
    pub bgn: bool,
    /// Responder: a BGNAK must force a datagram (a bare BGN, or a BGN with a POLL, arrived before
    /// the initiator showed it has the BGNAK).
    pub bgnak: bool,
    /// A STAT answering the latest POLL: its timestamp (echoed) and N(S) (extended).
    pub stat: Option<(u32, u64)>,
    /// The receive window opened far enough to announce by a USTAT with an empty gap.
    pub window_update: bool,
    /// An ENDAK: the peer's END arrived, or a POLL or END asked again after every SD arrived.
    pub endak: bool,
}

impl PendingControl {
    /// Whether feedback for the peer's sending half waits (STAT or window update; queued gap
    /// USTATs live in the receive buffer).
    pub fn feedback(&self) -> bool {
        self.stat.is_some() || self.window_update
    }
}
