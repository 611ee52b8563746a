//! Per-connection and per-endpoint counters.

use crate::wire::Types;
use std::time::Duration;

/// Packet types in the order used by the per-type counters.
pub const TYPE_NAMES: [(&str, Types); 9] = [
    ("SD", Types::SD),
    ("POLL", Types::POLL),
    ("STAT", Types::STAT),
    ("USTAT", Types::USTAT),
    ("BGN", Types::BGN),
    ("BGNAK", Types::BGNAK),
    ("END", Types::END),
    ("ENDAK", Types::ENDAK),
    ("RST", Types::RST),
];

/// Counts per packet type; a datagram carrying several types counts once for each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeCounts(pub [u64; 9]);

impl TypeCounts {
    /// The count for one type (use a single-type constant such as `Types::STAT`).
    pub fn get(&self, t: Types) -> u64 {
        TYPE_NAMES
            .iter()
            .position(|(_, ty)| *ty == t)
            .map_or(0, |i| self.0[i])
    }
}

/// Statistics of one connection.
#[derive(Debug, Clone, Default)]
pub struct ConnectionStats {
    /// Datagrams and bytes (STP header included, UDP/IP not) sent and received.
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// SD payload bytes sent (retransmissions included) and received (duplicates included).
    pub payload_bytes_sent: u64,
    pub payload_bytes_received: u64,
    /// Packets sent and received, per type.
    pub packets_sent: TypeCounts,
    pub packets_received: TypeCounts,
    /// Datagram bytes sent and received, per type: a datagram's whole length counts toward every
    /// type it carries (so an SD|POLL counts for both SD and POLL).
    pub bytes_sent_by_type: TypeCounts,
    pub bytes_received_by_type: TypeCounts,
    /// Bytes of datagrams sent that carried no SD: this side's pure control traffic. For the
    /// receiving end of a bulk transfer this is the reverse-channel load.
    pub control_bytes_sent: u64,
    pub retransmitted_packets: u64,
    pub retransmitted_bytes: u64,
    /// SDs newly found lost through STAT/USTAT.
    pub losses_detected: u64,
    pub sd_duplicates: u64,
    /// SDs discarded (no buffer room or out of range).
    pub sd_discarded: u64,
    /// Reports that broke a protocol rule and were ignored.
    pub protocol_errors: u64,
    pub keepalives_sent: u64,
    /// POLLs that rode on an SD rather than travelling alone.
    pub polls_piggybacked: u64,
    /// Times the window collapsed because POLLs went unanswered.
    pub window_collapses: u64,
    pub srtt: Duration,
    pub min_rtt: Option<Duration>,
    pub cwnd_bytes: u64,
    pub ssthresh_bytes: u64,
    pub pacing_rate_bps: f64,
    pub bytes_in_flight: u64,
    pub peer_window_bytes: u64,
}

/// One additive counter of [`ConnectionStats`], in the order of [`Counters`]' slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    DatagramsSent,
    DatagramsReceived,
    BytesSent,
    BytesReceived,
    PayloadBytesSent,
    PayloadBytesReceived,
    ControlBytesSent,
    RetransmittedPackets,
    RetransmittedBytes,
    LossesDetected,
    SdDuplicates,
    SdDiscarded,
    ProtocolErrors,
    KeepalivesSent,
    PollsPiggybacked,
    WindowCollapses,
}

/// Slots of [`Counters`]: the sixteen [`Counter`]s, then the four per-type tables.
const SCALARS: usize = 16;
const PACKETS_SENT: usize = SCALARS;
const PACKETS_RECEIVED: usize = PACKETS_SENT + TYPE_NAMES.len();
const BYTES_SENT_BY_TYPE: usize = PACKETS_RECEIVED + TYPE_NAMES.len();
const BYTES_RECEIVED_BY_TYPE: usize = BYTES_SENT_BY_TYPE + TYPE_NAMES.len();
const SLOTS: usize = BYTES_RECEIVED_BY_TYPE + TYPE_NAMES.len();
const _: () = assert!(Counter::WindowCollapses as usize + 1 == SCALARS);
// `Counters::add_types` finds a type's entry by its bit.
const _: () = {
    let mut i = 0;
    while i < TYPE_NAMES.len() {
        assert!(TYPE_NAMES[i].1.bits() == 1 << i);
        i += 1;
    }
};

/// What a connection counts as it runs: the additive counters of [`ConnectionStats`] (the rest of
/// it, such as srtt and cwnd, is read from the connection's state when asked for).
///
/// Each counter is the sum of a 16-bit part held in the connection and a 64-bit part behind a box
/// taken when the first 16-bit part would overflow (that part is then moved into the box). An
/// idle connection's few datagrams fit in the 104 bytes of the 16-bit parts, so it holds no
/// counter on the heap; a connection that has moved data (64 KiB) or been kept alive for hours
/// has the box too (416 bytes). Counting stays exact either way.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    narrow: [u16; SLOTS],
    wide: Option<Box<[u64; SLOTS]>>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            narrow: [0; SLOTS],
            wide: None,
        }
    }
}

impl Counters {
    /// Adds `amount` to slot `i` (always below `SLOTS`: the callers' indices are constants).
    #[inline]
    fn add_slot(&mut self, i: usize, amount: u64) {
        let Some(n) = self.narrow.get_mut(i) else {
            return;
        };
        if let Some(sum) = u16::try_from(amount).ok().and_then(|a| n.checked_add(a)) {
            *n = sum;
            return;
        }
        let low = u64::from(std::mem::take(n));
        let wide = self.wide.get_or_insert_with(|| Box::new([0; SLOTS]));
        if let Some(w) = wide.get_mut(i) {
            *w += low + amount;
        }
    }

    fn slot(&self, i: usize) -> u64 {
        let low = self.narrow.get(i).copied().map_or(0, u64::from);
        low + self
            .wide
            .as_ref()
            .and_then(|w| w.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Adds `amount` to the entry of every type `t` holds in the table at `base` (type `i` of
    /// `TYPE_NAMES` is bit `i`).
    fn add_types(&mut self, base: usize, t: Types, amount: u64) {
        let mut bits = t.bits() & ((1 << TYPE_NAMES.len()) - 1);
        while bits != 0 {
            self.add_slot(base + bits.trailing_zeros() as usize, amount);
            bits &= bits - 1;
        }
    }

    fn types(&self, base: usize) -> TypeCounts {
        TypeCounts(std::array::from_fn(|i| self.slot(base + i)))
    }

    /// Adds `amount` to one counter.
    #[inline]
    pub(crate) fn count(&mut self, c: Counter, amount: u64) {
        self.add_slot(c as usize, amount);
    }

    /// The value of one counter.
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.slot(c as usize)
    }

    pub(crate) fn record_sent(&mut self, t: Types, len: usize, payload: usize) {
        self.count(Counter::DatagramsSent, 1);
        self.count(Counter::BytesSent, len as u64);
        self.count(Counter::PayloadBytesSent, payload as u64);
        if !t.contains(Types::SD) {
            self.count(Counter::ControlBytesSent, len as u64);
        }
        self.add_types(PACKETS_SENT, t, 1);
        self.add_types(BYTES_SENT_BY_TYPE, t, len as u64);
    }

    pub(crate) fn record_received(&mut self, t: Types, len: usize, payload: usize) {
        self.count(Counter::DatagramsReceived, 1);
        self.count(Counter::BytesReceived, len as u64);
        self.count(Counter::PayloadBytesReceived, payload as u64);
        self.add_types(PACKETS_RECEIVED, t, 1);
        self.add_types(BYTES_RECEIVED_BY_TYPE, t, len as u64);
    }

    /// The counters as [`ConnectionStats`], with the fields taken from the connection's state
    /// (srtt, cwnd, ...) left at their defaults for the caller to fill in.
    pub(crate) fn to_stats(&self) -> ConnectionStats {
        use Counter as C;
        ConnectionStats {
            datagrams_sent: self.get(C::DatagramsSent),
            datagrams_received: self.get(C::DatagramsReceived),
            bytes_sent: self.get(C::BytesSent),
            bytes_received: self.get(C::BytesReceived),
            payload_bytes_sent: self.get(C::PayloadBytesSent),
            payload_bytes_received: self.get(C::PayloadBytesReceived),
            packets_sent: self.types(PACKETS_SENT),
            packets_received: self.types(PACKETS_RECEIVED),
            bytes_sent_by_type: self.types(BYTES_SENT_BY_TYPE),
            bytes_received_by_type: self.types(BYTES_RECEIVED_BY_TYPE),
            control_bytes_sent: self.get(C::ControlBytesSent),
            retransmitted_packets: self.get(C::RetransmittedPackets),
            retransmitted_bytes: self.get(C::RetransmittedBytes),
            losses_detected: self.get(C::LossesDetected),
            sd_duplicates: self.get(C::SdDuplicates),
            sd_discarded: self.get(C::SdDiscarded),
            protocol_errors: self.get(C::ProtocolErrors),
            keepalives_sent: self.get(C::KeepalivesSent),
            polls_piggybacked: self.get(C::PollsPiggybacked),
            window_collapses: self.get(C::WindowCollapses),
            ..ConnectionStats::default()
        }
    }
}

/// The additive counters of [`ConnectionStats`], summed over many connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionTotals {
    pub connections: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub payload_bytes_sent: u64,
    pub payload_bytes_received: u64,
    pub packets_sent: TypeCounts,
    pub packets_received: TypeCounts,
    pub retransmitted_packets: u64,
    pub retransmitted_bytes: u64,
    pub losses_detected: u64,
}

impl ConnectionTotals {
    /// Adds one connection's counters.
    pub fn add(&mut self, s: &ConnectionStats) {
        self.connections += 1;
        self.datagrams_sent += s.datagrams_sent;
        self.datagrams_received += s.datagrams_received;
        self.bytes_sent += s.bytes_sent;
        self.bytes_received += s.bytes_received;
        self.payload_bytes_sent += s.payload_bytes_sent;
        self.payload_bytes_received += s.payload_bytes_received;
        for (a, b) in self.packets_sent.0.iter_mut().zip(s.packets_sent.0) {
            *a += b;
        }
        for (a, b) in self.packets_received.0.iter_mut().zip(s.packets_received.0) {
            *a += b;
        }
        self.retransmitted_packets += s.retransmitted_packets;
        self.retransmitted_bytes += s.retransmitted_bytes;
        self.losses_detected += s.losses_detected;
    }
}

/// Statistics of an endpoint (datagrams that reached no connection).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub datagrams_received: u64,
    /// Datagrams that failed to parse (truncated, bad checksum, reserved bits...).
    pub malformed: u64,
    /// Datagrams for no known connection.
    pub unknown_connection: u64,
    /// Datagrams of a connection that was already closed (late or duplicated).
    pub late: u64,
    /// Datagrams whose instance number did not match the connection's.
    pub wrong_instance: u64,
    pub accepted: u64,
    /// BGNs refused (listener closed, limits, version).
    pub refused: u64,
    pub stateless_sent: u64,
    /// Stateless answers suppressed by the rate limit.
    pub stateless_suppressed: u64,
    /// Counters of the connections already closed and freed.
    pub closed: ConnectionTotals,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connections_counters_hold_nothing_on_the_heap() {
        let mut c = Counters::default();
        c.record_sent(Types::BGN, 40, 0);
        c.record_received(Types::BGNAK, 40, 0);
        c.record_sent(Types::POLL, 20, 0);
        c.record_received(Types::STAT, 28, 0);
        assert!(c.wide.is_none());
        let s = c.to_stats();
        assert_eq!(
            (s.datagrams_sent, s.bytes_sent, s.control_bytes_sent),
            (2, 60, 60)
        );
        assert_eq!(s.packets_received.get(Types::STAT), 1);
        assert_eq!(s.bytes_received_by_type.get(Types::BGNAK), 40);
    }

    #[test]
    fn counters_stay_exact_past_their_16_bit_parts() {
        let mut c = Counters::default();
        for _ in 0..70_000 {
            c.record_sent(Types::SD | Types::POLL, 1500, 1400);
        }
        c.record_received(Types::STAT | Types::ENDAK, 40, 0);
        c.count(Counter::ProtocolErrors, 3);
        c.count(Counter::RetransmittedBytes, 5_000_000_000);
        c.count(Counter::RetransmittedBytes, 7);
        assert!(c.wide.is_some());
        let s = c.to_stats();
        assert_eq!(s.datagrams_sent, 70_000);
        assert_eq!(s.bytes_sent, 70_000 * 1500);
        assert_eq!(s.payload_bytes_sent, 70_000 * 1400);
        assert_eq!(s.control_bytes_sent, 0);
        assert_eq!(s.packets_sent.get(Types::SD), 70_000);
        assert_eq!(s.packets_sent.get(Types::POLL), 70_000);
        assert_eq!(s.packets_sent.get(Types::STAT), 0);
        assert_eq!(s.bytes_sent_by_type.get(Types::POLL), 70_000 * 1500);
        assert_eq!(s.packets_received.get(Types::ENDAK), 1);
        assert_eq!(s.bytes_received_by_type.get(Types::STAT), 40);
        assert_eq!(s.protocol_errors, 3);
        assert_eq!(s.retransmitted_bytes, 5_000_000_007);
        assert_eq!(s.datagrams_received, 1);
    }
}
