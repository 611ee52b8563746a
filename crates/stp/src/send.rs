//! Sender state: the bounded send buffer, the SDs sent and not yet acknowledged (each with its last
//! send stamp), and the retransmission queue fed only by the receiver's STAT/USTAT reports.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;

/// Writes are merged into the previous chunk while both fit in this many bytes.
const SMALL_CHUNK: usize = 4096;

/// Memory charged for one SD, so that tiny SDs cannot exhaust a receiver (spec §6.3).
pub fn sd_charge(payload_len: usize) -> u64 {
    payload_len.max(64) as u64
}

/// Where an unacknowledged SD stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdState {
    /// Sent, fate unknown; counted in flight.
    InFlight,
    /// Reported missing; queued for retransmission, not counted in flight.
    Lost,
    /// Reported received above the cumulative point; kept only for its sequence slot.
    Received,
    /// Sent before the POLL a STAT answered, but beyond what that STAT covered (a partial STAT
    /// that could not list every hole): it has arrived or been lost, so it is no longer counted
    /// in flight, but its fate is unknown until a later report covers it.
    Unreported,
}

/// One SD above the cumulative acknowledgement point.
#[derive(Debug, Clone)]
pub struct SentSd {
    pub payload: Bytes,
    /// Send stamp of the last transmission (see `Connection::next_stamp`).
    pub last_stamp: u32,
    pub transmissions: u32,
    pub state: SdState,
}

/// Outcome of marking SDs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Marked {
    /// Payload bytes newly known received.
    pub acked_bytes: u64,
}

/// The sending half of a connection.
#[derive(Debug)]
pub struct SendBuffer {
    capacity: u64,
    /// Written, not yet packetized: chunks as the application wrote them. SDs are sliced out of
    /// them without copying (only an SD spanning two chunks is assembled), so a small write into
    /// a large buffer never moves the buffered data.
    pending: VecDeque<Bytes>,
    pending_len: usize,
    sent: VecDeque<SentSd>,
    /// Extended sequence number of `sent[0]`: every SD below it is acknowledged.
    una: u64,
    /// Charged bytes of every SD in `sent`.
    outstanding_charge: u64,
    /// Payload bytes of SDs in state `InFlight`.
    in_flight: u64,
    /// SDs reported lost, in the order to resend them; boxed, and only while there are any.
    // Boxed on purpose: 8 bytes in every connection where a `VecDeque` takes 32.
    #[allow(clippy::box_collection)]
    retx: Option<Box<VecDeque<u64>>>,
}

impl SendBuffer {
    /// An empty buffer whose first SD will be numbered `isn` (extended).
    pub fn new(isn: u64, capacity: u64) -> Self {
        SendBuffer {
            capacity,
            pending: VecDeque::new(),
            pending_len: 0,
            sent: VecDeque::new(),
            una: isn,
            outstanding_charge: 0,
            in_flight: 0,
            retx: None,
        }
    }

    /// Bytes the application may still write.
    pub fn free_space(&self) -> u64 {
        self.capacity
            .saturating_sub(self.pending_len as u64 + self.unacked_payload())
    }

    fn unacked_payload(&self) -> u64 {
        // Bounded by the charge; exact enough for buffer accounting.
        self.outstanding_charge
    }

    /// Copies as much of `data` as fits; returns the number of bytes taken.
    pub fn write(&mut self, data: &[u8]) -> usize {
        self.write_with(data, |n| Bytes::copy_from_slice(&data[..n]))
    }

    /// [`SendBuffer::write`] without copying: keeps a slice of `data` (small writes are still
    /// joined to a small last chunk).
    pub fn write_bytes(&mut self, data: &Bytes) -> usize {
        self.write_with(data, |n| data.slice(..n))
    }

    /// Takes as much of `data` as fits; `whole(n)` makes the chunk of its first `n` bytes.
    fn write_with(&mut self, data: &[u8], whole: impl FnOnce(usize) -> Bytes) -> usize {
        let n = data
            .len()
            .min(usize::try_from(self.free_space()).unwrap_or(usize::MAX));
        if n == 0 {
            return 0;
        }
        // Small writes join a small last chunk (a bounded copy), so tiny writes cannot pile up
        // one chunk each.
        match self.pending.back_mut() {
            Some(last) if last.len() + n <= SMALL_CHUNK => {
                let mut joined = BytesMut::with_capacity(last.len() + n);
                joined.extend_from_slice(last);
                joined.extend_from_slice(&data[..n]);
                *last = joined.freeze();
            }
            _ => self.pending.push_back(whole(n)),
        }
        self.pending_len += n;
        n
    }

    /// Asserts (debug builds) the buffer's bounds: the bytes it holds (unsent, plus those in
    /// flight) never exceed its capacity, and what is in flight is part of what is outstanding.
    pub fn check_bounds(&self) {
        debug_assert!(
            self.pending_len as u64 + self.in_flight <= self.capacity,
            "send buffer holds {} unsent + {} in flight bytes, capacity {}",
            self.pending_len,
            self.in_flight,
            self.capacity
        );
        debug_assert!(self.in_flight <= self.outstanding_charge);
    }

    /// Bytes written but not yet packetized.
    pub fn unsent(&self) -> usize {
        self.pending_len
    }

    /// Takes the first `n` (≤ `pending_len`) unsent bytes.
    fn take_pending(&mut self, n: usize) -> Bytes {
        self.pending_len -= n;
        if let Some(front) = self.pending.front_mut() {
            if front.len() > n {
                return front.split_to(n);
            }
            if front.len() == n {
                return self.pending.pop_front().unwrap_or_default();
            }
        }
        let mut out = BytesMut::with_capacity(n);
        while out.len() < n {
            let Some(front) = self.pending.front_mut() else {
                break;
            };
            let k = (n - out.len()).min(front.len());
            out.extend_from_slice(&front[..k]);
            front.advance(k);
            if front.is_empty() {
                self.pending.pop_front();
            }
        }
        out.freeze()
    }

    /// The next new sequence number.
    pub fn next_seq(&self) -> u64 {
        self.una + self.sent.len() as u64
    }

    /// The cumulative acknowledgement point.
    pub fn una(&self) -> u64 {
        self.una
    }

    /// Whether any SD awaits acknowledgement.
    pub fn has_outstanding(&self) -> bool {
        !self.sent.is_empty()
    }

    /// Charged bytes above the cumulative point.
    pub fn outstanding_charge(&self) -> u64 {
        self.outstanding_charge
    }

    /// Payload bytes in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Number of SDs above the cumulative point.
    pub fn outstanding_count(&self) -> u64 {
        self.sent.len() as u64
    }

    /// Takes up to `max` bytes of new data as the next SD, stamped `stamp`; returns its sequence
    /// number and payload length. The payload stays here ([`Self::get`]): the datagram borrows
    /// it rather than holding a reference count of its own.
    pub fn packetize(&mut self, max: usize, stamp: u32) -> Option<(u64, usize)> {
        if self.pending_len == 0 || max == 0 {
            return None;
        }
        let n = self.pending_len.min(max);
        let payload = self.take_pending(n);
        let seq = self.next_seq();
        self.outstanding_charge += sd_charge(n);
        self.in_flight += n as u64;
        self.sent.push_back(SentSd {
            payload,
            last_stamp: stamp,
            transmissions: 1,
            state: SdState::InFlight,
        });
        // The next SD's payload is copied into its datagram soon (one datagram's work from
        // now); ask for it to be brought into the cache now, so that copy does not wait on memory.
        if let Some(next) = self.pending.front() {
            crate::cache::prefetch(next.as_ptr(), next.len().min(max));
        }
        Some((seq, n))
    }

    /// Length of the next new SD if `max` bytes fit in a datagram.
    pub fn next_new_len(&self, max: usize) -> usize {
        self.pending_len.min(max)
    }

    /// The SD at extended sequence `seq`, if still unacknowledged.
    pub fn get(&self, seq: u64) -> Option<&SentSd> {
        let i = usize::try_from(seq.checked_sub(self.una)?).ok()?;
        self.sent.get(i)
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut SentSd> {
        let i = usize::try_from(seq.checked_sub(self.una)?).ok()?;
        self.sent.get_mut(i)
    }

    /// Length of the first SD in the retransmission queue that still needs sending, discarding
    /// queue entries that no longer do.
    pub fn next_retx_len(&mut self) -> Option<usize> {
        // Nothing queued (nearly always): no queue to drop.
        self.retx.as_ref()?;
        while let Some(seq) = self.retx.as_ref().and_then(|q| q.front().copied()) {
            match self.get(seq) {
                Some(sd) if sd.state == SdState::Lost => return Some(sd.payload.len()),
                _ => {
                    if let Some(q) = self.retx.as_mut() {
                        q.pop_front();
                    }
                }
            }
        }
        self.retx = None;
        None
    }

    /// Sequence number of the next SD to retransmit, if any.
    pub fn next_retx_seq(&mut self) -> Option<u64> {
        self.next_retx_len()?;
        self.retx.as_ref().and_then(|q| q.front().copied())
    }

    /// Payload length of the SD at `seq` if it is lost (queued for retransmission).
    pub fn lost_len(&self, seq: u64) -> Option<usize> {
        self.get(seq)
            .filter(|sd| sd.state == SdState::Lost)
            .map(|sd| sd.payload.len())
    }

    /// Takes the lost SD `seq` out of the retransmission queue (usually its head) for sending,
    /// restamping it; returns its sequence number and payload length (the payload stays here).
    pub fn pop_retx(&mut self, seq: u64, stamp: u32) -> Option<(u64, usize)> {
        self.lost_len(seq)?;
        if let Some(q) = self.retx.as_mut() {
            if q.front() == Some(&seq) {
                q.pop_front();
            } else if let Some(i) = q.iter().position(|&x| x == seq) {
                q.remove(i);
            }
        }
        let sd = self.get_mut(seq)?;
        sd.state = SdState::InFlight;
        sd.last_stamp = stamp;
        sd.transmissions += 1;
        let len = sd.payload.len();
        self.in_flight += len as u64;
        Some((seq, len))
    }

    /// Whether a retransmission is waiting.
    pub fn has_retx(&mut self) -> bool {
        self.next_retx_len().is_some()
    }

    /// Advances the cumulative point to `cum` (extended, at most `next_seq`).
    pub fn ack_cumulative(&mut self, cum: u64) -> Marked {
        let mut m = Marked::default();
        while self.una < cum {
            let Some(sd) = self.sent.pop_front() else {
                break;
            };
            self.una += 1;
            let len = sd.payload.len() as u64;
            self.outstanding_charge -= sd_charge(sd.payload.len());
            match sd.state {
                SdState::InFlight => {
                    self.in_flight -= len;
                    m.acked_bytes += len;
                }
                SdState::Lost | SdState::Unreported => m.acked_bytes += len,
                SdState::Received => {}
            }
        }
        m
    }

    /// Marks SDs in `[from, to)` as received.
    pub fn mark_received(&mut self, from: u64, to: u64) -> Marked {
        let mut m = Marked::default();
        let start = from.max(self.una);
        for seq in start..to.min(self.next_seq()) {
            let Some(sd) = self.get_mut(seq) else { break };
            let len = sd.payload.len() as u64;
            match sd.state {
                SdState::InFlight => {
                    sd.state = SdState::Received;
                    self.in_flight -= len;
                    m.acked_bytes += len;
                }
                SdState::Lost | SdState::Unreported => {
                    sd.state = SdState::Received;
                    m.acked_bytes += len;
                }
                SdState::Received => {}
            }
        }
        m
    }

    /// Takes the InFlight SDs from `from` on whose last transmission is stamped at or before
    /// `echo` out of flight (state Unreported). Stops at the first SD sent only once and stamped
    /// after `echo`: every later new SD left later still.
    pub fn mark_unreported(
        &mut self,
        from: u64,
        echo: u32,
        at_or_before: impl Fn(u32, u32) -> bool,
    ) {
        let start = from.max(self.una);
        for seq in start..self.next_seq() {
            let Some(sd) = self.get_mut(seq) else { break };
            if !at_or_before(sd.last_stamp, echo) {
                if sd.transmissions == 1 {
                    break;
                }
                continue;
            }
            if sd.state == SdState::InFlight {
                sd.state = SdState::Unreported;
                let len = sd.payload.len() as u64;
                self.in_flight -= len;
            }
        }
    }

    /// Marks the SD at `seq` lost and queues it for retransmission if `eligible` says its last
    /// transmission has had time to arrive. Returns the lost SD's last stamp when newly marked.
    pub fn mark_lost(&mut self, seq: u64, eligible: impl Fn(&SentSd) -> bool) -> Option<u32> {
        let sd = self.get_mut(seq)?;
        let was_in_flight = match sd.state {
            SdState::InFlight => true,
            SdState::Unreported => false,
            SdState::Lost | SdState::Received => return None,
        };
        if !eligible(sd) {
            return None;
        }
        sd.state = SdState::Lost;
        let stamp = sd.last_stamp;
        if was_in_flight {
            self.in_flight -= sd.payload.len() as u64;
        }
        self.retx.get_or_insert_with(Box::default).push_back(seq);
        Some(stamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packetizes as the connection does and returns the new SD's payload as kept.
    fn take(s: &mut SendBuffer, max: usize, stamp: u32) -> Option<(u64, Bytes)> {
        let (seq, len) = s.packetize(max, stamp)?;
        let payload = s.get(seq)?.payload.clone();
        assert_eq!(payload.len(), len);
        Some((seq, payload))
    }

    #[test]
    fn packetize_ack_and_retransmit() {
        let mut s = SendBuffer::new(100, 10_000);
        assert_eq!(s.write(&[1u8; 2500]), 2500);
        let (a, pa) = take(&mut s, 1000, 1).unwrap();
        let (b, _) = take(&mut s, 1000, 2).unwrap();
        let (c, pc) = take(&mut s, 1000, 3).unwrap();
        assert_eq!((a, b, c), (100, 101, 102));
        assert_eq!((pa.len(), pc.len()), (1000, 500));
        assert_eq!(s.in_flight(), 2500);
        assert_eq!(s.mark_lost(101, |_| true), Some(2));
        assert_eq!(s.mark_lost(101, |_| true), None, "already queued");
        assert_eq!(s.in_flight(), 1500);
        assert_eq!(s.mark_received(102, 103).acked_bytes, 500);
        assert_eq!(s.pop_retx(101, 9).map(|(q, _)| q), Some(101));
        assert_eq!(s.get(101).unwrap().transmissions, 2);
        assert_eq!(s.ack_cumulative(103).acked_bytes, 2000);
        assert!(!s.has_outstanding());
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.outstanding_charge(), 0);
    }

    #[test]
    fn written_bytes_are_kept_without_copying_up_to_the_free_space() {
        let mut s = SendBuffer::new(0, 3000);
        let data = Bytes::from((0..5000u32).map(|i| i as u8).collect::<Vec<u8>>());
        assert_eq!(s.write_bytes(&data), 3000, "only what fits");
        let (_, p) = take(&mut s, 1000, 1).unwrap();
        assert_eq!(&p[..], &data[..1000]);
        assert_eq!(p.as_ptr(), data.as_ptr(), "a slice of the caller's buffer");
        assert_eq!(s.write_bytes(&data.slice(3000..)), 0, "full");
    }

    #[test]
    fn unreported_sds_leave_flight_and_a_later_report_settles_them() {
        let le = |a: u32, b: u32| a <= b;
        let mut s = SendBuffer::new(0, 100_000);
        s.write(&[0u8; 5000]);
        for stamp in [1, 1, 2, 2, 3] {
            take(&mut s, 1000, stamp).unwrap();
        }
        assert_eq!(s.in_flight(), 5000);
        // A partial STAT answering the POLL stamped 2 covered only up to SD 1.
        s.mark_unreported(1, 2, le);
        assert_eq!(
            s.in_flight(),
            2000,
            "SDs 1..=3 were sent before the POLL; SD 4 after"
        );
        assert_eq!(s.get(1).unwrap().state, SdState::Unreported);
        assert_eq!(s.get(4).unwrap().state, SdState::InFlight);
        // A later report: SD 1 arrived, SD 2 is missing, SD 3 arrived.
        assert_eq!(s.mark_received(1, 2).acked_bytes, 1000);
        assert_eq!(s.mark_lost(2, |_| true), Some(2));
        assert_eq!(
            s.in_flight(),
            2000,
            "an Unreported SD found lost was not in flight"
        );
        assert_eq!(s.next_retx_seq(), Some(2));
        assert_eq!(
            s.ack_cumulative(4).acked_bytes,
            3000,
            "SDs 0, 2 (lost) and 3"
        );
        assert_eq!(s.in_flight(), 1000);
    }

    #[test]
    fn sds_span_write_boundaries_exactly() {
        let mut s = SendBuffer::new(0, 10_000);
        s.write(b"abc");
        s.write(b"defgh");
        s.write(b"i");
        let (_, a) = take(&mut s, 4, 0).unwrap();
        let (_, b) = take(&mut s, 4, 0).unwrap();
        let (_, c) = take(&mut s, 4, 0).unwrap();
        assert_eq!(
            (&a[..], &b[..], &c[..]),
            (&b"abcd"[..], &b"efgh"[..], &b"i"[..])
        );
        assert_eq!(s.unsent(), 0);
        assert!(take(&mut s, 4, 0).is_none());
    }

    #[test]
    fn write_is_bounded() {
        let mut s = SendBuffer::new(0, 1000);
        assert_eq!(s.write(&[0u8; 1500]), 1000);
        assert_eq!(s.write(&[0u8; 10]), 0);
        take(&mut s, 400, 0);
        assert_eq!(s.free_space(), 0);
        s.ack_cumulative(1);
        assert_eq!(s.free_space(), 400);
    }

    #[test]
    fn ineligible_loss_is_ignored_and_received_skips_retx() {
        let mut s = SendBuffer::new(0, 10_000);
        s.write(&[0u8; 2000]);
        take(&mut s, 1000, 5);
        take(&mut s, 1000, 6);
        assert_eq!(s.mark_lost(0, |sd| sd.last_stamp < 5), None);
        assert!(s.mark_lost(1, |_| true).is_some());
        s.mark_received(1, 2);
        assert!(!s.has_retx(), "a queued SD reported received is not resent");
    }
}
