//! Sealed datagrams gathered to leave in one system call (segmentation offload where the kernel
//! offers it).

use super::udp_batch::{MAX_BATCH_BYTES, MAX_SEGMENTS};
use std::net::SocketAddr;

/// Sealed datagrams to one destination, all `segment` bytes long except possibly the last
/// (which then closes the batch). The hop core appends each new datagram to `bytes` where it
/// is built and sealed ([`super::core::HopCore::poll_transmit_append`]); [`Batch::commit`] then
/// counts it in; one that cannot join waits, uncommitted, while the batch before it leaves
/// ([`Batch::clear`] keeps it).
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) dest: Option<SocketAddr>,
    pub(crate) segment: usize,
    pub(crate) count: usize,
    /// The batch's datagrams, then possibly one more appended and not yet committed.
    pub(crate) bytes: Vec<u8>,
    /// Bytes of `bytes` that are committed datagrams.
    len: usize,
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
                    && self.len + len <= MAX_BATCH_BYTES
            }
        }
    }

    /// Appends a datagram and commits it (it must fit).
    #[cfg(test)]
    pub(crate) fn push(&mut self, dest: SocketAddr, datagram: &[u8]) {
        self.bytes.truncate(self.len);
        self.bytes.extend_from_slice(datagram);
        self.commit(dest);
    }

    /// The committed bytes (what leaves in one send).
    pub(crate) fn committed(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    /// Bytes appended after the committed datagrams (the next datagram, not yet counted).
    pub(crate) fn tail_len(&self) -> usize {
        self.bytes.len() - self.len
    }

    /// Counts the datagram appended after the committed ones (all of `bytes` from there) into
    /// the batch, to `dest`; it must fit ([`Self::fits`] with its length).
    pub(crate) fn commit(&mut self, dest: SocketAddr) {
        let n = self.tail_len();
        if self.dest.is_none() {
            self.dest = Some(dest);
            self.segment = n;
        } else if n < self.segment {
            self.closed = true;
        }
        self.count += 1;
        self.len = self.bytes.len();
    }

    /// Drops the datagram appended after the committed ones.
    pub(crate) fn drop_tail(&mut self) {
        self.bytes.truncate(self.len);
    }

    /// Whether no further datagram can join.
    pub(crate) fn full(&self) -> bool {
        self.closed || self.count >= MAX_SEGMENTS || self.len + self.segment > MAX_BATCH_BYTES
    }

    /// Empties the committed datagrams (they were sent), keeping an uncommitted tail, moved to
    /// the front.
    pub(crate) fn clear(&mut self) {
        self.bytes.drain(..self.len);
        self.dest = None;
        self.segment = 0;
        self.count = 0;
        self.len = 0;
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
            (batch.count, batch.segment, batch.committed().len()),
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

    /// The hop appends each datagram where it is sealed: one that cannot join stays behind the
    /// committed ones while they leave, and is the front of the next batch.
    #[test]
    fn a_datagram_appended_waits_for_the_batch_before_it() {
        let a: SocketAddr = ([127, 0, 0, 1], 1).into();
        let b: SocketAddr = ([127, 0, 0, 1], 2).into();
        let mut batch = Batch::default();
        batch.push(a, &[1; 100]);
        batch.push(a, &[2; 100]);
        batch.bytes.extend_from_slice(&[3; 80]);
        assert_eq!(batch.tail_len(), 80);
        assert!(!batch.fits(b, batch.tail_len()), "another destination");
        assert_eq!(batch.committed(), &[[1u8; 100], [2; 100]].concat()[..]);
        batch.clear();
        assert_eq!(
            (batch.count, batch.committed().len(), batch.tail_len()),
            (0, 0, 80)
        );
        assert!(batch.fits(b, 80));
        batch.commit(b);
        assert_eq!(
            (batch.dest, batch.segment, batch.committed()),
            (Some(b), 80, &[3u8; 80][..])
        );
        // A tail dropped (a handshake datagram sent on its own) leaves the batch as it was.
        batch.bytes.extend_from_slice(&[9; 109]);
        batch.drop_tail();
        assert_eq!((batch.count, batch.bytes.len()), (1, 80));
    }
}
