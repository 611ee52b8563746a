//! The receiving half of a connection: reassembly of data and FIN, the offered window (free
//! receive buffer), SACK blocks per RFC 2018, and in-order delivery to the application.

use super::ranges::RangeSet;
use std::collections::VecDeque;

/// Most separate out-of-order ranges kept; data that would need more is dropped (the sender
/// retransmits it).
const MAX_OOO_RANGES: usize = 1024;
/// How many blocks of recent out-of-order arrivals are remembered for ordering SACK blocks.
const RECENT_BLOCKS: usize = 16;

/// What one arriving segment did to the receive state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Bytes that became deliverable in order.
    pub in_order_bytes: u64,
    /// It carried new data beyond a hole.
    pub out_of_order: bool,
    /// It advanced the in-order point while out-of-order data was waiting.
    pub filled_hole: bool,
    /// It carried nothing new.
    pub duplicate: bool,
    /// The FIN became in order with this segment.
    pub fin: bool,
}

/// Receive state of one connection.
#[derive(Debug, Clone)]
pub struct Receiver {
    /// Sequence number of the first data byte.
    start: u64,
    /// Next data byte expected in order.
    data_nxt: u64,
    /// Next byte the application reads.
    read_pos: u64,
    buffer: u64,
    window_cap: u64,
    ooo: RangeSet,
    /// Starts of recent out-of-order arrivals, most recent first, one per block.
    recent: VecDeque<u64>,
    fin_seq: Option<u64>,
    fin_received: bool,
}

impl Receiver {
    /// Expects data from `first_seq`, with `buffer` bytes of receive buffer and the offered
    /// window capped at `window_cap`.
    pub fn new(first_seq: u64, buffer: u64, window_cap: u64) -> Self {
        Receiver {
            start: first_seq,
            data_nxt: first_seq,
            read_pos: first_seq,
            buffer,
            window_cap,
            ooo: RangeSet::new(MAX_OOO_RANGES),
            recent: VecDeque::new(),
            fin_seq: None,
            fin_received: false,
        }
    }

    /// The cumulative acknowledgement: next sequence number expected (FIN included).
    pub fn rcv_nxt(&self) -> u64 {
        self.data_nxt.saturating_add(u64::from(self.fin_received))
    }

    /// The offered window: free receive buffer (in-order unread data occupies the buffer).
    pub fn window(&self) -> u64 {
        let unread = self.data_nxt - self.read_pos;
        self.buffer.saturating_sub(unread).min(self.window_cap)
    }

    /// Processes the data `[seq, seq + len)` and possibly a FIN right after it.
    pub fn on_data(&mut self, seq: u64, len: u64, fin: bool) -> Arrival {
        let mut arrival = Arrival::default();
        let end = seq.saturating_add(len);
        let right_edge = self.data_nxt.saturating_add(self.window());
        let start = seq.max(self.data_nxt);
        let stop = end.min(right_edge);
        let had_ooo = !self.ooo.is_empty();
        let before = self.data_nxt;
        if start < stop {
            if start == self.data_nxt {
                self.data_nxt = stop;
                while let Some((s, e)) = self.ooo.first() {
                    if s > self.data_nxt {
                        break;
                    }
                    self.data_nxt = self.data_nxt.max(e);
                    self.ooo.remove_below(self.data_nxt);
                }
                arrival.in_order_bytes = self.data_nxt - before;
                arrival.filled_hole = had_ooo;
            } else {
                arrival.out_of_order = true;
                // A refused insert (too many ranges) drops the data; the ACK still goes out.
                self.ooo.insert(start, stop);
            }
        } else if len > 0 && seq > self.data_nxt && seq < right_edge {
            // Out-of-order data we already hold.
            arrival.out_of_order = true;
        }
        if arrival.out_of_order {
            // One anchor per block: the block of this arrival moves to the front.
            if let Some((s, e)) = self.ooo.containing(start) {
                self.recent.retain(|&a| a < s || a >= e);
            }
            self.recent.push_front(start);
            self.recent.truncate(RECENT_BLOCKS);
        }
        self.recent.retain(|&a| a >= self.data_nxt);
        if fin && end <= right_edge && self.fin_seq.is_none() {
            self.fin_seq = Some(end);
        }
        if !self.fin_received && self.fin_seq == Some(self.data_nxt) && self.ooo.is_empty() {
            self.fin_received = true;
            arrival.fin = true;
        }
        arrival.duplicate = arrival.in_order_bytes == 0 && !arrival.out_of_order && !arrival.fin;
        arrival
    }

    /// Up to `max` SACK blocks: the block holding the most recent out-of-order arrival first,
    /// then the blocks of earlier arrivals, most recent first (RFC 2018 §4).
    pub fn sack_blocks(&self, max: usize) -> Vec<(u64, u64)> {
        let mut blocks = Vec::with_capacity(max);
        for &anchor in &self.recent {
            if blocks.len() >= max {
                break;
            }
            if let Some(b) = self.ooo.containing(anchor) {
                if !blocks.contains(&b) {
                    blocks.push(b);
                }
            }
        }
        blocks
    }

    /// Whether out-of-order data is waiting.
    pub fn has_out_of_order(&self) -> bool {
        !self.ooo.is_empty()
    }

    /// In-order bytes the application has not read yet.
    pub fn readable(&self) -> u64 {
        self.data_nxt - self.read_pos
    }

    /// Hands up to `max` in-order bytes to the application.
    pub fn read(&mut self, max: u64) -> u64 {
        let n = self.readable().min(max);
        self.read_pos += n;
        n
    }

    /// Whether the peer's FIN arrived (in order).
    pub fn fin_received(&self) -> bool {
        self.fin_received
    }

    /// Whether the FIN arrived and the application read everything before it.
    pub fn finished(&self) -> bool {
        self.fin_received && self.readable() == 0
    }

    /// Total data bytes received in order.
    pub fn data_received(&self) -> u64 {
        self.data_nxt - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1000;

    #[test]
    fn reassembles_and_acknowledges_in_order() {
        let mut r = Receiver::new(1, 100 * M, u64::MAX);
        let a = r.on_data(1, M, false);
        assert_eq!(a.in_order_bytes, M);
        assert!(!a.out_of_order && !a.filled_hole && !a.duplicate);
        // Segment 3 before segment 2.
        let a = r.on_data(1 + 2 * M, M, false);
        assert!(a.out_of_order);
        assert_eq!(r.rcv_nxt(), 1 + M);
        let a = r.on_data(1 + M, M, false);
        assert!(a.filled_hole);
        assert_eq!(a.in_order_bytes, 2 * M);
        assert_eq!(r.rcv_nxt(), 1 + 3 * M);
        let a = r.on_data(1, M, false);
        assert!(a.duplicate);
        assert_eq!(r.readable(), 3 * M);
    }

    #[test]
    fn sack_blocks_most_recent_first() {
        let mut r = Receiver::new(0, 100 * M, u64::MAX);
        r.on_data(0, M, false);
        // Lost: 1, 3, 5. Arrive: 2, 4, 6, 7.
        r.on_data(2 * M, M, false);
        assert_eq!(r.sack_blocks(3), vec![(2 * M, 3 * M)]);
        r.on_data(4 * M, M, false);
        assert_eq!(r.sack_blocks(3), vec![(4 * M, 5 * M), (2 * M, 3 * M)]);
        r.on_data(6 * M, M, false);
        r.on_data(7 * M, M, false);
        assert_eq!(
            r.sack_blocks(3),
            vec![(6 * M, 8 * M), (4 * M, 5 * M), (2 * M, 3 * M)]
        );
        assert_eq!(r.sack_blocks(2), vec![(6 * M, 8 * M), (4 * M, 5 * M)]);
        // Retransmitted 3 arrives: block 2..5 now holds the most recent arrival.
        r.on_data(3 * M, M, false);
        assert_eq!(r.sack_blocks(3), vec![(2 * M, 5 * M), (6 * M, 8 * M)]);
        // 1 fills the first hole: the in-order point jumps to 5.
        let a = r.on_data(M, M, false);
        assert!(a.filled_hole);
        assert_eq!(r.rcv_nxt(), 5 * M);
        assert_eq!(r.sack_blocks(3), vec![(6 * M, 8 * M)]);
        r.on_data(5 * M, M, false);
        assert_eq!(r.rcv_nxt(), 8 * M);
        assert!(r.sack_blocks(3).is_empty());
    }

    #[test]
    fn a_growing_block_does_not_push_older_blocks_out() {
        let mut r = Receiver::new(0, 1000 * M, u64::MAX);
        r.on_data(M, M, false);
        r.on_data(3 * M, M, false);
        for i in 5..40 {
            r.on_data(i * M, M, false);
        }
        assert_eq!(
            r.sack_blocks(3),
            vec![(5 * M, 40 * M), (3 * M, 4 * M), (M, 2 * M)]
        );
    }

    #[test]
    fn window_is_free_buffer_and_data_beyond_is_dropped() {
        let mut r = Receiver::new(0, 4 * M, u64::MAX);
        assert_eq!(r.window(), 4 * M);
        r.on_data(0, 3 * M, false);
        assert_eq!(r.window(), M);
        // Only 1000 of these 2000 bytes fit.
        let a = r.on_data(3 * M, 2 * M, false);
        assert_eq!(a.in_order_bytes, M);
        assert_eq!(r.window(), 0);
        assert_eq!(r.read(2500), 2500);
        assert_eq!(r.window(), 2500);
        let capped = Receiver::new(0, 1 << 20, 65_535);
        assert_eq!(capped.window(), 65_535);
    }

    #[test]
    fn fin_counts_once_all_data_is_in() {
        let mut r = Receiver::new(0, 10 * M, u64::MAX);
        let a = r.on_data(M, M, true);
        assert!(a.out_of_order && !a.fin);
        assert!(!r.fin_received());
        let a = r.on_data(0, M, false);
        assert!(a.fin && a.filled_hole);
        assert_eq!(r.rcv_nxt(), 2 * M + 1);
        assert!(!r.finished());
        r.read(u64::MAX);
        assert!(r.finished());
    }
}
