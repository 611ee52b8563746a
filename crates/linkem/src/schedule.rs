//! The delivery schedule of one direction: datagrams the link model has accepted, waiting for
//! their arrival time at the far end, bounded in entries and bytes.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Default bound on the entries waiting in one direction.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
/// Default bound on the payload bytes waiting in one direction (256 MiB).
pub const DEFAULT_MAX_BYTES: usize = 256 * 1024 * 1024;

/// One datagram due at the far end at `at_ns`. `seq` is the order of scheduling, so that
/// datagrams due at the same instant leave in the order they were scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub at_ns: u64,
    pub seq: u64,
    pub data: Vec<u8>,
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at_ns, self.seq).cmp(&(other.at_ns, other.seq))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A min-heap of datagrams keyed by `(at_ns, seq)` with explicit bounds.
#[derive(Debug)]
pub struct Schedule {
    heap: BinaryHeap<Reverse<Due>>,
    next_seq: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl Schedule {
    /// An empty schedule holding at most `max_entries` datagrams and `max_bytes` payload bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Schedule {
            heap: BinaryHeap::new(),
            next_seq: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// Adds a datagram due at `at_ns`; gives it back if either bound would be exceeded.
    pub fn push(&mut self, at_ns: u64, data: Vec<u8>) -> Result<(), Vec<u8>> {
        if self.heap.len() >= self.max_entries
            || self.bytes.saturating_add(data.len()) > self.max_bytes
        {
            return Err(data);
        }
        self.bytes += data.len();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.heap.push(Reverse(Due { at_ns, seq, data }));
        Ok(())
    }

    /// When the earliest datagram is due, if any.
    pub fn next_at(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(d)| d.at_ns)
    }

    /// Removes and returns the earliest datagram if it is due at or before `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Due> {
        if self.next_at()? > now_ns {
            return None;
        }
        let Reverse(due) = self.heap.pop()?;
        self.bytes -= due.data.len();
        Some(due)
    }

    /// Datagrams waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Payload bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_time_order_and_fifo_on_ties() {
        let mut s = Schedule::new(10, 1000);
        s.push(20, vec![1]).unwrap();
        s.push(10, vec![2]).unwrap();
        s.push(20, vec![3]).unwrap();
        s.push(10, vec![4]).unwrap();
        assert_eq!(s.pop_due(5), None);
        let order: Vec<u8> = std::iter::from_fn(|| s.pop_due(100))
            .map(|d| d.data[0])
            .collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn bounds_entries_and_bytes() {
        let mut s = Schedule::new(2, 10);
        s.push(0, vec![0; 4]).unwrap();
        s.push(0, vec![0; 4]).unwrap();
        assert_eq!(s.push(0, vec![9]), Err(vec![9]), "entry bound");
        let mut s = Schedule::new(10, 10);
        s.push(0, vec![0; 8]).unwrap();
        assert!(s.push(0, vec![0; 3]).is_err(), "byte bound");
        assert!(s.push(0, vec![0; 2]).is_ok());
        assert_eq!((s.len(), s.bytes()), (2, 10));
    }
}
