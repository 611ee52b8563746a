//! Receiver state: reassembly of numbered SDs into the byte stream, the gap list reported by
//! STAT, and the reorder-threshold bookkeeping that decides when a hole is reported by USTAT.

use crate::send::sd_charge;
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};

/// How far above the cumulative point an SD may be numbered (half the 24-bit space, halved again
/// for margin); farther SDs are discarded.
pub const MAX_SEQ_SPAN: u64 = 1 << 22;

/// What became of an arriving SD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Accepted (in order or buffered out of order).
    New,
    /// Already received.
    Duplicate,
    /// Discarded: no room in the receive buffer.
    NoRoom,
    /// Discarded: numbered outside the acceptable range (at or after the END, or too far ahead).
    OutOfRange,
}

#[derive(Debug, Clone, Copy)]
struct PendingGap {
    start: u64,
    end: u64,
    /// Value of `arrivals` when the hole was first seen.
    seen_at: u64,
}

/// The receiving half of a connection.
#[derive(Debug)]
pub struct RecvBuffer {
    capacity: u64,
    /// Cumulative point: every SD below it has been received.
    next: u64,
    /// One past the highest SD received.
    highest: u64,
    ready: ReadyBytes,
    /// Sequence number one past the last SD, once END arrived.
    final_seq: Option<u64>,
    max_pending: u32,
    reorder_threshold: u32,
    /// What only a stream with holes needs: taken when the first hole appears, given back once
    /// no hole is left to fill or report (an in-order stream, and an idle one, hold none).
    holes: Option<Box<Holes>>,
}

/// Out-of-order data and the bookkeeping that reports holes.
#[derive(Debug, Default)]
struct Holes {
    out_of_order: BTreeMap<u64, Bytes>,
    ooo_charge: u64,
    pending: VecDeque<PendingGap>,
    /// SDs accepted since this was taken (only differences with `PendingGap::seen_at` count).
    arrivals: u64,
    /// Holes ready to be reported by USTAT.
    ustats: VecDeque<(u64, u64)>,
}

impl Holes {
    fn is_empty(&self) -> bool {
        self.out_of_order.is_empty() && self.pending.is_empty() && self.ustats.is_empty()
    }
}

impl RecvBuffer {
    /// An empty buffer expecting SD `isn` first.
    pub fn new(isn: u64, capacity: u64, reorder_threshold: u32, max_pending: u32) -> Self {
        RecvBuffer {
            capacity,
            next: isn,
            highest: isn,
            ready: ReadyBytes::default(),
            final_seq: None,
            max_pending,
            reorder_threshold: reorder_threshold.max(1),
            holes: None,
        }
    }

    /// The cumulative point N(R).
    pub fn cumulative(&self) -> u64 {
        self.next
    }

    /// Unread in-order bytes.
    pub fn readable(&self) -> usize {
        self.ready.len()
    }

    /// The window advertised to the sender: charged bytes it may have outstanding above N(R).
    pub fn window(&self) -> u64 {
        self.capacity.saturating_sub(self.ready.len() as u64)
    }

    /// Charged bytes of the SDs held out of order.
    fn ooo_charge(&self) -> u64 {
        self.holes.as_ref().map_or(0, |h| h.ooo_charge)
    }

    /// Gives the hole bookkeeping back once nothing is left in it.
    fn release_holes(&mut self) {
        if self.holes.as_ref().is_some_and(|h| h.is_empty()) {
            self.holes = None;
        }
    }

    /// Asserts (debug builds) the buffer's bounds: out-of-order data is only taken within the
    /// capacity, and in all the buffer holds at most one SD beyond it (see `on_sd`).
    pub fn check_bounds(&self) {
        let ooo_charge = self.ooo_charge();
        debug_assert!(
            ooo_charge <= self.capacity,
            "out-of-order charge {} above capacity {}",
            ooo_charge,
            self.capacity
        );
        debug_assert!(
            self.ready.len() as u64 + ooo_charge <= self.capacity + u64::from(u16::MAX),
            "receive buffer holds {} + {} bytes, capacity {}",
            self.ready.len(),
            ooo_charge,
            self.capacity
        );
        debug_assert!(self.next <= self.highest);
        debug_assert!(
            self.next == self.highest || self.holes.is_some(),
            "a hole without its bookkeeping"
        );
    }

    /// Whether every SD before the END has arrived.
    pub fn is_complete(&self) -> bool {
        self.final_seq == Some(self.next)
    }

    /// The END's final sequence number, once known.
    pub fn final_seq(&self) -> Option<u64> {
        self.final_seq
    }

    /// Records an END; returns false if it contradicts data already received.
    pub fn set_final(&mut self, final_seq: u64) -> bool {
        match self.final_seq {
            Some(f) => f == final_seq,
            None if final_seq < self.highest => false,
            None => {
                self.final_seq = Some(final_seq);
                true
            }
        }
    }

    /// Takes in SD `seq`.
    pub fn on_sd(&mut self, seq: u64, payload: &[u8]) -> Arrival {
        let held = |h: &Holes| h.out_of_order.contains_key(&seq);
        if seq < self.next || self.holes.as_deref().is_some_and(held) {
            return Arrival::Duplicate;
        }
        if seq >= self.next + MAX_SEQ_SPAN || self.final_seq.is_some_and(|f| seq >= f) {
            return Arrival::OutOfRange;
        }
        let charge = sd_charge(payload.len());
        let used = self.ready.len() as u64 + self.ooo_charge();
        // The SD at the cumulative point is always admitted when the reader has room for it, so a
        // buffer full of out-of-order data cannot wedge the stream; and when nothing waits to be
        // read, whatever its size: an SD cut before the sender learned this side's limits (fast
        // start at the initiator's MSS) may exceed the whole buffer, and would otherwise never be
        // taken. The buffer then holds at most one SD beyond its capacity.
        let fits = if seq == self.next {
            self.ready.len() == 0 || self.ready.len() as u64 + charge <= self.capacity
        } else {
            used + charge <= self.capacity
        };
        if !fits {
            return Arrival::NoRoom;
        }
        if let Some(h) = self.holes.as_mut() {
            h.arrivals += 1;
        }
        if seq > self.highest {
            let h = self.holes.get_or_insert_with(|| {
                Box::new(Holes {
                    arrivals: 1,
                    ..Holes::default()
                })
            });
            if h.pending.len() >= self.max_pending as usize {
                h.pending.pop_front();
            }
            h.pending.push_back(PendingGap {
                start: self.highest,
                end: seq,
                seen_at: h.arrivals - 1,
            });
        }
        self.highest = self.highest.max(seq + 1);
        if seq == self.next {
            self.ready.push(payload);
            self.next += 1;
            if let Some(h) = self.holes.as_mut() {
                while let Some(entry) = h.out_of_order.first_entry() {
                    if *entry.key() != self.next {
                        break;
                    }
                    let data = entry.remove();
                    h.ooo_charge -= sd_charge(data.len());
                    self.ready.push(&data);
                    self.next += 1;
                }
            }
        } else {
            let h = self.holes.get_or_insert_with(Box::default);
            h.ooo_charge += charge;
            h.out_of_order.insert(seq, Bytes::copy_from_slice(payload));
        }
        self.check_pending();
        self.release_holes();
        Arrival::New
    }

    fn check_pending(&mut self) {
        loop {
            let Some(h) = self.holes.as_mut() else {
                return;
            };
            let Some(g) = h.pending.front().copied() else {
                return;
            };
            if g.end <= self.next {
                h.pending.pop_front();
                continue;
            }
            if h.arrivals - g.seen_at < u64::from(self.reorder_threshold) {
                return;
            }
            h.pending.pop_front();
            let mut missing = Vec::new();
            self.missing_in(g.start.max(self.next), g.end, usize::MAX, &mut missing);
            let Some(h) = self.holes.as_mut() else {
                return;
            };
            for m in missing {
                if h.ustats.len() >= self.max_pending as usize {
                    h.ustats.pop_front();
                }
                h.ustats.push_back(m);
            }
        }
    }

    /// Pushes the missing ranges within `[from, to)` onto `out`, at most `limit` of them; returns
    /// false if the list was cut short.
    fn missing_in(&self, from: u64, to: u64, limit: usize, out: &mut Vec<(u64, u64)>) -> bool {
        let mut cursor = from.max(self.next);
        if cursor >= to {
            // Filled meanwhile (a queued USTAT range the cumulative point has passed).
            return true;
        }
        let held = self
            .holes
            .as_deref()
            .map(|h| h.out_of_order.range(cursor..to));
        for (&seq, _) in held.into_iter().flatten() {
            if seq > cursor {
                if out.len() >= limit {
                    return false;
                }
                out.push((cursor, seq));
            }
            cursor = seq + 1;
        }
        if cursor < to {
            if out.len() >= limit {
                return false;
            }
            out.push((cursor, to));
        }
        true
    }

    /// The gap list for a STAT answering a POLL whose N(S) is `poll_next` (extended): every
    /// missing range below max(highest, poll_next), lowest first, at most `limit`. Returns the
    /// gaps, the end of the range the report covers, and whether it was cut short.
    pub fn stat_report(&self, poll_next: u64, limit: usize) -> (Vec<(u64, u64)>, u64, bool) {
        let upto = self.highest.max(poll_next).max(self.next);
        let mut gaps = Vec::new();
        let complete = self.missing_in(self.next, upto, limit, &mut gaps);
        if complete {
            (gaps, upto, false)
        } else {
            let covered = gaps.last().map_or(self.next, |g| g.1);
            (gaps, covered, true)
        }
    }

    /// The next hole to report by USTAT: the first still-missing run of a queued range (the rest
    /// stays queued), dropping ranges filled meanwhile.
    pub fn pop_ustat(&mut self) -> Option<(u64, u64)> {
        while let Some((s, e)) = self.holes.as_mut().and_then(|h| h.ustats.pop_front()) {
            let mut runs = Vec::with_capacity(1);
            self.missing_in(s.max(self.next), e, 1, &mut runs);
            if let Some(&(a, b)) = runs.first() {
                if b < e {
                    if let Some(h) = self.holes.as_mut() {
                        h.ustats.push_front((b, e));
                    }
                }
                self.release_holes();
                return Some((a, b));
            }
        }
        self.release_holes();
        None
    }

    /// Forgets queued USTATs (a STAT with the full gap list is going out).
    pub fn clear_ustats(&mut self) {
        if let Some(h) = self.holes.as_mut() {
            h.ustats.clear();
        }
        self.release_holes();
    }

    /// Whether a USTAT is queued.
    pub fn has_ustat(&self) -> bool {
        self.holes.as_ref().is_some_and(|h| !h.ustats.is_empty())
    }

    /// Copies readable bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        self.ready.read(buf)
    }

    /// Takes up to `max` readable bytes without copying.
    pub fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        self.ready.read_chunk(max)
    }

    /// Drops all readable bytes (the application closed its read side).
    pub fn discard_readable(&mut self) -> usize {
        let n = self.ready.len();
        self.ready = ReadyBytes::default();
        n
    }
}

/// Largest block the in-order bytes are gathered in.
const READY_BLOCK_MAX: usize = 64 * 1024;
/// First block of a stream (blocks double up to [`READY_BLOCK_MAX`] as data keeps coming).
const READY_BLOCK_MIN: usize = 4 * 1024;

/// In-order bytes not yet read, gathered in blocks that are never reallocated: arriving SDs
/// are copied once into the block being filled, and readers take whole blocks or parts of them
/// without copying. A stream that has been read to the end holds no block.
#[derive(Debug, Default)]
struct ReadyBytes {
    /// Filled blocks, oldest first.
    full: VecDeque<Bytes>,
    /// The block being filled (its spare capacity takes the next bytes).
    filling: BytesMut,
    len: usize,
    /// Capacity of the last block started (for an exact block: of the block it stands for).
    last_block: usize,
    /// `filling` is a block of exactly the bytes pushed into an empty stream: their number, and
    /// the capacity of the block they would otherwise have started.
    exact: Option<(usize, usize)>,
}

impl ReadyBytes {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.filling.capacity() - self.filling.len() < data.len() {
            if self.len == 0 {
                // Nothing unread (a reader keeping pace takes every SD before the next comes): a
                // block of exactly these bytes, which the reader then takes whole and the
                // allocation with it (`read_chunk`), rather than a large block allocated and
                // freed per SD.
                let block = self.next_block().max(data.len());
                self.filling = BytesMut::with_capacity(data.len());
                self.exact = Some((data.len(), block));
            } else if let Some((size, would)) = self.exact.take() {
                // The reader fell behind after all: its bytes move into the block it would have
                // had from the start (less what was read of it), so it is handed the same chunks
                // as it was then; if that block would not have held these bytes either, they
                // start the next.
                let read = size - self.filling.len();
                if size + data.len() <= would {
                    let mut grown = BytesMut::with_capacity(would - read);
                    grown.extend_from_slice(&self.filling);
                    self.filling = grown;
                } else {
                    self.full.push_back(self.filling.split().freeze());
                    self.filling = BytesMut::with_capacity(self.next_block().max(data.len()));
                }
            } else {
                if !self.filling.is_empty() {
                    self.full.push_back(self.filling.split().freeze());
                }
                self.filling = BytesMut::with_capacity(self.next_block().max(data.len()));
            }
        }
        self.filling.extend_from_slice(data);
        self.len += data.len();
        // The next SD goes where this one ended: have its lines ready (`crate::cache`).
        let spare = self.filling.spare_capacity_mut();
        crate::cache::prefetch(spare.as_ptr().cast(), spare.len().min(data.len()));
    }

    /// The capacity of the next block (twice the last, within bounds), noted as the last.
    fn next_block(&mut self) -> usize {
        self.last_block = (self.last_block * 2).clamp(READY_BLOCK_MIN, READY_BLOCK_MAX);
        self.last_block
    }

    /// Takes up to `max` bytes (at most one block's worth) without copying.
    fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        if self.len == 0 || max == 0 {
            return None;
        }
        let chunk = match self.full.front_mut() {
            Some(front) if front.len() <= max => self.full.pop_front()?,
            Some(front) => front.split_to(max),
            None if max >= self.filling.len() => {
                // Drained: the block goes with the chunk rather than stay while idle (taken
                // whole, an exactly filled block becomes the chunk without a shared count).
                self.exact = None;
                std::mem::take(&mut self.filling).freeze()
            }
            None => self.filling.split_to(max).freeze(),
        };
        self.len -= chunk.len();
        Some(chunk)
    }

    /// Copies up to `buf.len()` bytes into `buf`; returns how many.
    fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(chunk) = self.read_chunk(buf.len() - n) else {
                break;
            };
            buf[n..n + chunk.len()].copy_from_slice(&chunk);
            n += chunk.len();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf() -> RecvBuffer {
        RecvBuffer::new(10, 1 << 20, 3, 16)
    }

    #[test]
    fn reassembles_in_order() {
        let mut r = buf();
        assert_eq!(r.on_sd(11, b"world"), Arrival::New);
        assert_eq!(r.on_sd(10, b"hello "), Arrival::New);
        assert_eq!(r.on_sd(10, b"hello "), Arrival::Duplicate);
        let mut out = [0u8; 32];
        let n = r.read(&mut out);
        assert_eq!(&out[..n], b"hello world");
        assert_eq!(r.cumulative(), 12);
    }

    #[test]
    fn ustat_after_reorder_threshold_once_per_gap() {
        let mut r = buf();
        r.on_sd(10, b"a");
        r.on_sd(12, b"c"); // hole at 11, 1 later arrival
        assert_eq!(r.pop_ustat(), None);
        r.on_sd(13, b"d");
        assert_eq!(r.pop_ustat(), None);
        r.on_sd(14, b"e"); // third arrival above the hole
        assert_eq!(r.pop_ustat(), Some((11, 12)));
        r.on_sd(15, b"f");
        assert_eq!(r.pop_ustat(), None, "one USTAT per gap");
    }

    #[test]
    fn queued_ustat_passed_by_the_cumulative_point_is_dropped() {
        let mut r = buf();
        r.on_sd(10, b"a");
        for s in 12..=14 {
            r.on_sd(s, b"x"); // hole at 11, queued for USTAT after the third arrival
        }
        assert!(r.has_ustat());
        // The hole fills and the stream moves past the queued range before the USTAT is sent.
        r.on_sd(11, b"b");
        r.on_sd(15, b"y");
        r.on_sd(16, b"z");
        assert_eq!(r.cumulative(), 17);
        assert_eq!(r.pop_ustat(), None);
        assert!(!r.has_ustat());
    }

    #[test]
    fn ready_bytes_cross_blocks_in_order() {
        let mut r = ReadyBytes::default();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let sd: Vec<u8> = (0..1400).map(|k| (i * 7 + k) as u8).collect();
            r.push(&sd);
            want.extend_from_slice(&sd);
        }
        assert_eq!(r.len(), want.len());
        let mut got = Vec::new();
        let mut small = [0u8; 999];
        let n = r.read(&mut small);
        got.extend_from_slice(&small[..n]);
        while let Some(c) = r.read_chunk(READY_BLOCK_MAX) {
            assert!(c.len() <= READY_BLOCK_MAX);
            got.extend_from_slice(&c);
        }
        assert_eq!(got, want);
        assert_eq!(r.len(), 0);
        assert_eq!(r.filling.capacity(), 0, "a drained stream holds no block");
    }

    /// The blocks as they were before a stream read as fast as it arrives got blocks of exactly
    /// one SD: a new block, twice the last, whenever the bytes did not fit.
    #[derive(Default)]
    struct BlocksBefore {
        full: std::collections::VecDeque<Bytes>,
        filling: BytesMut,
        len: usize,
        last_block: usize,
    }

    impl BlocksBefore {
        fn push(&mut self, data: &[u8]) {
            if data.is_empty() {
                return;
            }
            if self.filling.capacity() - self.filling.len() < data.len() {
                if !self.filling.is_empty() {
                    self.full.push_back(self.filling.split().freeze());
                }
                let block = (self.last_block * 2).clamp(READY_BLOCK_MIN, READY_BLOCK_MAX);
                self.last_block = block;
                self.filling = BytesMut::with_capacity(block.max(data.len()));
            }
            self.filling.extend_from_slice(data);
            self.len += data.len();
        }

        fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
            if self.len == 0 || max == 0 {
                return None;
            }
            let chunk = match self.full.front_mut() {
                Some(front) if front.len() <= max => self.full.pop_front()?,
                Some(front) => front.split_to(max),
                None => {
                    let n = max.min(self.filling.len());
                    let chunk = self.filling.split_to(n).freeze();
                    if self.filling.is_empty() {
                        self.filling = BytesMut::new();
                    }
                    chunk
                }
            };
            self.len -= chunk.len();
            Some(chunk)
        }
    }

    /// Whatever the sizes pushed and read, and however far the reader falls behind, the reader
    /// is handed the same chunks (bytes and boundaries) as with the blocks before, and a drained
    /// stream holds no block.
    #[test]
    fn exact_blocks_hand_out_the_chunks_the_doubling_blocks_did() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{RngCore, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut now = ReadyBytes::default();
            let mut before = BlocksBefore::default();
            let mut next = 0u8;
            for _ in 0..400 {
                let r = rng.next_u32();
                if r % 3 != 0 {
                    let size = match r % 7 {
                        0 => 1 + r as usize % 16,
                        1 => 3000 + r as usize % 70_000,
                        _ => 500 + r as usize % 1000,
                    };
                    let data: Vec<u8> = (0..size)
                        .map(|_| {
                            next = next.wrapping_add(1);
                            next
                        })
                        .collect();
                    now.push(&data);
                    before.push(&data);
                } else {
                    let reads = 1 + rng.next_u32() % 3;
                    for _ in 0..reads {
                        let max = match rng.next_u32() % 4 {
                            0 => 1 + rng.next_u32() as usize % 2000,
                            _ => usize::MAX,
                        };
                        let (a, b) = (now.read_chunk(max), before.read_chunk(max));
                        assert_eq!(a, b, "seed {seed}");
                    }
                }
                assert_eq!(now.len(), before.len);
                if now.len() == 0 {
                    assert_eq!(now.filling.capacity(), 0, "a drained stream holds no block");
                }
            }
            while let Some(a) = now.read_chunk(usize::MAX) {
                assert_eq!(Some(a), before.read_chunk(usize::MAX), "seed {seed}");
            }
            assert_eq!(before.len, 0);
        }
    }

    #[test]
    fn reordering_below_threshold_reports_nothing() {
        let mut r = buf();
        r.on_sd(11, b"b");
        r.on_sd(10, b"a");
        r.on_sd(12, b"c");
        r.on_sd(13, b"d");
        assert_eq!(r.pop_ustat(), None);
    }

    #[test]
    fn stat_report_lists_all_gaps_and_truncates() {
        let mut r = buf();
        for s in [10, 12, 14, 15, 18] {
            r.on_sd(s, b"x");
        }
        let (gaps, covered, partial) = r.stat_report(20, 10);
        assert_eq!(gaps, vec![(11, 12), (13, 14), (16, 18), (19, 20)]);
        assert_eq!((covered, partial), (20, false));
        let (gaps, covered, partial) = r.stat_report(20, 2);
        assert_eq!(gaps, vec![(11, 12), (13, 14)]);
        assert_eq!((covered, partial), (14, true));
    }

    #[test]
    fn window_and_capacity_are_enforced() {
        let mut r = RecvBuffer::new(0, 200, 3, 16);
        assert_eq!(r.on_sd(1, &[0u8; 100]), Arrival::New);
        assert_eq!(r.on_sd(2, &[0u8; 100]), Arrival::New);
        assert_eq!(r.on_sd(3, &[0u8; 1]), Arrival::NoRoom);
        assert_eq!(
            r.on_sd(0, &[0u8; 100]),
            Arrival::New,
            "the next in-order SD always fits"
        );
        assert_eq!(r.window(), 0);
        let mut sink = [0u8; 300];
        assert_eq!(r.read(&mut sink), 300);
        assert_eq!(r.window(), 200);
        assert_eq!(r.on_sd(MAX_SEQ_SPAN + 3, b"x"), Arrival::OutOfRange);
    }

    #[test]
    fn an_in_order_sd_larger_than_the_buffer_is_taken_once_the_reader_emptied_it() {
        // A fast-start SD cut at the initiator's MSS (1412) reaching a responder whose buffer is
        // two of its own small SDs (2 × 216): the fault sweep found this stalling for ever.
        let mut r = RecvBuffer::new(0, 432, 3, 16);
        assert_eq!(r.on_sd(0, &[1u8; 300]), Arrival::New);
        assert_eq!(
            r.on_sd(1, &[2u8; 1412]),
            Arrival::NoRoom,
            "reader not done yet"
        );
        let mut sink = [0u8; 2000];
        assert_eq!(r.read(&mut sink), 300);
        assert_eq!(r.on_sd(1, &[2u8; 1412]), Arrival::New);
        assert_eq!(r.window(), 0);
        assert_eq!(r.on_sd(2, &[3u8; 10]), Arrival::NoRoom);
        assert_eq!(r.read(&mut sink), 1412);
        assert_eq!(r.window(), 432);
    }

    #[test]
    fn end_bounds_the_stream() {
        let mut r = buf();
        r.on_sd(10, b"a");
        assert!(r.set_final(11));
        assert!(r.is_complete());
        assert_eq!(r.on_sd(11, b"b"), Arrival::OutOfRange);
        assert!(!r.set_final(12), "a second END must agree");
    }
}
