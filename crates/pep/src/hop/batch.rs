//! Sealed datagrams gathered to leave in one system call (segmentation offload where the kernel
//! offers it).

use super::udp_batch::{MAX_BATCH_BYTES, MAX_SEGMENTS};
use std::net::SocketAddr;

/// long except possibly the last (which then closes the batch).
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) dest: Option<SocketAddr>,
    pub(crate) segment: usize,
    pub(crate) count: usize,
    pub(crate) bytes: Vec<u8>,
    /// The last datagram was shorter than `segment`: nothing may follow it.
    closed: bool,
}

impl Batch {
    /// Whether a datagram of `len` bytes to `dest` may join.
    pub(crate) fn fits(&self, dest: SocketAddr, len: usize) -> bool {
        match self.dest {
            None => true,
            Some(d) => {
                d == dest
                    && !self.closed
                    && len <= self.segment
                    && self.count < MAX_SEGMENTS
                    && self.bytes.len() + len <= MAX_BATCH_BYTES
            }
        }
    }

    pub(crate) fn push(&mut self, dest: SocketAddr, datagram: &[u8]) {
        if self.dest.is_none() {
            self.dest = Some(dest);
            self.segment = datagram.len();
        } else if datagram.len() < self.segment {
            self.closed = true;
        }
        self.count += 1;
        self.bytes.extend_from_slice(datagram);
    }

    /// Whether no further datagram can join.
    pub(crate) fn full(&self) -> bool {
        self.closed
            || self.count >= MAX_SEGMENTS
            || self.bytes.len() + self.segment > MAX_BATCH_BYTES
    }

    pub(crate) fn clear(&mut self) {
        self.dest = None;
        self.segment = 0;
        self.count = 0;
        self.bytes.clear();
        self.closed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    pub(crate) fn a_batch_holds_equal_datagrams_to_one_destination_then_one_shorter() {
        let a: SocketAddr = ([127, 0, 0, 1], 1).into();
        let b: SocketAddr = ([127, 0, 0, 1], 2).into();
        let mut batch = Batch::default();
        assert!(batch.fits(a, 1481));
        batch.push(a, &[1; 1481]);
        assert!(batch.fits(a, 1481));
        assert!(!batch.fits(b, 1481), "another destination");
        assert!(!batch.fits(a, 1482), "longer than the segment");
        batch.push(a, &[2; 1481]);
        batch.push(a, &[3; 100]);
        assert!(batch.full(), "a shorter datagram ends the batch");
        assert!(!batch.fits(a, 100));
        assert_eq!(
            (batch.count, batch.segment, batch.bytes.len()),
            (3, 1481, 3062)
        );
        batch.clear();
        assert!(batch.fits(b, 9000));
        // Bounded by the kernel's limits on segments and bytes.
        for _ in 0..MAX_SEGMENTS {
            assert!(batch.fits(b, 10));
            batch.push(b, &[0; 10]);
        }
        assert!(batch.full() && !batch.fits(b, 10));
        batch.clear();
        while batch.fits(b, 1481) {
            batch.push(b, &[0; 1481]);
        }
        assert!(batch.bytes.len() <= MAX_BATCH_BYTES && batch.full());
    }
}
