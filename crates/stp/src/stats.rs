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
    fn add(&mut self, t: Types, amount: u64) {
        for (i, (_, ty)) in TYPE_NAMES.iter().enumerate() {
            if t.contains(*ty) {
                self.0[i] += amount;
            }
        }
    }
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

/// What a connection counts as it runs: the additive counters of [`ConnectionStats`] (the rest of
/// it, such as srtt and cwnd, is read from the connection's state when asked for). The four
/// per-type tables (288 bytes) live behind a box taken on the first datagram, so that a
/// connection's own struct stays within 1 KiB (`tests/idle_memory.rs`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub payload_bytes_sent: u64,
    pub payload_bytes_received: u64,
    pub control_bytes_sent: u64,
    pub retransmitted_packets: u64,
    pub retransmitted_bytes: u64,
    pub losses_detected: u64,
    pub sd_duplicates: u64,
    pub sd_discarded: u64,
    pub protocol_errors: u64,
    pub keepalives_sent: u64,
    pub polls_piggybacked: u64,
    pub window_collapses: u64,
    by_type: Option<Box<TypeTables>>,
}

/// The per-type counters of [`ConnectionStats`].
#[derive(Debug, Clone, Default)]
struct TypeTables {
    packets_sent: TypeCounts,
    packets_received: TypeCounts,
    bytes_sent_by_type: TypeCounts,
    bytes_received_by_type: TypeCounts,
}

impl Counters {
    pub(crate) fn record_sent(&mut self, t: Types, len: usize, payload: usize) {
        self.datagrams_sent += 1;
        self.bytes_sent += len as u64;
        self.payload_bytes_sent += payload as u64;
        if !t.contains(Types::SD) {
            self.control_bytes_sent += len as u64;
        }
        let tables = self.by_type.get_or_insert_with(Box::default);
        tables.packets_sent.add(t, 1);
        tables.bytes_sent_by_type.add(t, len as u64);
    }

    pub(crate) fn record_received(&mut self, t: Types, len: usize, payload: usize) {
        self.datagrams_received += 1;
        self.bytes_received += len as u64;
        self.payload_bytes_received += payload as u64;
        let tables = self.by_type.get_or_insert_with(Box::default);
        tables.packets_received.add(t, 1);
        tables.bytes_received_by_type.add(t, len as u64);
    }

    /// The counters as [`ConnectionStats`], with the fields taken from the connection's state
    /// (srtt, cwnd, ...) left at their defaults for the caller to fill in.
    pub(crate) fn to_stats(&self) -> ConnectionStats {
        let tables = self.by_type.as_deref().cloned().unwrap_or_default();
        ConnectionStats {
            datagrams_sent: self.datagrams_sent,
            datagrams_received: self.datagrams_received,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            payload_bytes_sent: self.payload_bytes_sent,
            payload_bytes_received: self.payload_bytes_received,
            packets_sent: tables.packets_sent,
            packets_received: tables.packets_received,
            bytes_sent_by_type: tables.bytes_sent_by_type,
            bytes_received_by_type: tables.bytes_received_by_type,
            control_bytes_sent: self.control_bytes_sent,
            retransmitted_packets: self.retransmitted_packets,
            retransmitted_bytes: self.retransmitted_bytes,
            losses_detected: self.losses_detected,
            sd_duplicates: self.sd_duplicates,
            sd_discarded: self.sd_discarded,
            protocol_errors: self.protocol_errors,
            keepalives_sent: self.keepalives_sent,
            polls_piggybacked: self.polls_piggybacked,
            window_collapses: self.window_collapses,
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
