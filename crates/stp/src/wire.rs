//! Every STP packet type on the wire: parse (bounded, never panics) and emit.
//!
//! A datagram is a 12-byte common header followed by the bodies of the packet types named in the
//! header's type field, always in the fixed order BGN, BGNAK, RST, POLL, STAT, USTAT, END, ENDAK,
//! and finally the SD payload, which runs to the end of the datagram. `docs/stp-spec.md` §3 is the
//! normative description; the constants below are the field sizes it gives.

use crate::seq::SEQ_MASK;
use thiserror::Error;

/// The protocol version this implementation speaks.
pub const VERSION: u8 = 1;
/// Bitmap of the versions this implementation supports (bit `v - 1` set for version `v`).
pub const SUPPORTED_VERSIONS: u16 = 1 << (VERSION - 1);
/// Length of the common header.
pub const HEADER_LEN: usize = 12;
/// Length of a BGN body.
pub const BGN_LEN: usize = 16;
/// Length of a BGNAK body.
pub const BGNAK_LEN: usize = 16;
/// Length of a RST body.
pub const RST_LEN: usize = 4;
/// Length of a POLL body.
pub const POLL_LEN: usize = 8;
/// Length of a STAT body without its gap list.
pub const STAT_FIXED_LEN: usize = 20;
/// Length of one gap in a STAT gap list.
pub const GAP_LEN: usize = 6;
/// Length of a USTAT body.
pub const USTAT_LEN: usize = 16;
/// Length of an END body.
pub const END_LEN: usize = 4;
/// Length of an ENDAK body.
pub const ENDAK_LEN: usize = 4;
/// Bytes of a datagram an SD's payload never uses: the header plus room for a POLL, an END and a
/// BGN or BGNAK to ride along, so any SD can be sent (and resent) with them.
pub const SD_RESERVE: usize = HEADER_LEN + POLL_LEN + END_LEN + BGN_LEN;
/// The smallest datagram size an implementation must accept as `max_datagram`.
pub const MIN_DATAGRAM: usize = 256;

/// The set of packet types a datagram carries (the 12-bit type field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Types(u16);

impl Types {
    pub const SD: Types = Types(0x001);
    pub const POLL: Types = Types(0x002);
    pub const STAT: Types = Types(0x004);
    pub const USTAT: Types = Types(0x008);
    pub const BGN: Types = Types(0x010);
    pub const BGNAK: Types = Types(0x020);
    pub const END: Types = Types(0x040);
    pub const ENDAK: Types = Types(0x080);
    pub const RST: Types = Types(0x100);
    const ALL: u16 = 0x1ff;

    /// The empty set.
    pub const fn empty() -> Types {
        Types(0)
    }
    /// The raw 12-bit value.
    pub const fn bits(self) -> u16 {
        self.0
    }
    /// Whether every type in `other` is present.
    pub const fn contains(self, other: Types) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether no type is present.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Adds the types of `other`.
    pub fn insert(&mut self, other: Types) {
        self.0 |= other.0;
    }
}

impl std::ops::BitOr for Types {
    type Output = Types;
    fn bitor(self, rhs: Types) -> Types {
        Types(self.0 | rhs.0)
    }
}

/// Why a datagram was rejected by the parser.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("datagram of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    TooShort(usize),
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u8),
    #[error("reserved bits set in the {0} field")]
    Reserved(&'static str),
    #[error("no packet type set")]
    NoType,
    #[error("checksum mismatch")]
    Checksum,
    #[error("{0} body truncated")]
    Truncated(&'static str),
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// The packet types a datagram says it carries, read from its first two bytes alone (no other
/// check): for a driver that must sort datagrams cheaply before handing them to an endpoint,
/// such as a gateway budgeting new connections. `None` if the datagram is shorter than that.
pub fn peek_types(data: &[u8]) -> Option<Types> {
    let b = data.get(..2)?;
    Some(Types(u16::from_be_bytes([b[0], b[1]]) & 0x0fff))
}

/// The 12-byte common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Protocol version of this datagram.
    pub version: u8,
    /// The packet types carried.
    pub types: Types,
    /// Set when the sender is the connection's initiator (the side that sent BGN).
    pub from_initiator: bool,
    /// Instance number of the connection (7 bits).
    pub instance: u8,
    /// Connection identifier chosen by the initiator.
    pub conn_id: u32,
    /// 24-bit sequence number of the SD carried, or 0 when no SD is carried.
    pub seq: u32,
}

/// BGN: opens a connection (initiator → responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bgn {
    /// First sequence number the initiator will use for SDs.
    pub isn: u32,
    /// Bytes the initiator can buffer from the responder beyond its cumulative point.
    pub rwnd: u32,
    /// Largest datagram the initiator accepts.
    pub max_datagram: u16,
    /// Bitmap of versions the initiator supports.
    pub versions: u16,
    /// Initiator's clock (µs, 32 bits) when this BGN was sent.
    pub timestamp: u32,
}

/// BGNAK: accepts a connection (responder → initiator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bgnak {
    /// First sequence number the responder will use for SDs.
    pub isn: u32,
    /// Version chosen for the connection.
    pub version: u8,
    /// Bytes the responder can buffer beyond its cumulative point.
    pub rwnd: u32,
    /// Largest datagram the responder accepts.
    pub max_datagram: u16,
    /// The timestamp of the BGN being answered.
    pub echo_timestamp: u32,
}

/// Reason codes carried by RST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RstReason {
    /// The receiver holds no connection the packet could belong to.
    UnknownConnection,
    /// The responder refused the BGN (listener closed, or a connection limit).
    Refused,
    /// The application aborted the connection; `detail` carries its error code.
    Aborted,
    /// None of the versions offered is supported; `detail` is the supported bitmap.
    UnsupportedVersion,
    /// The peer broke a protocol rule.
    ProtocolViolation,
    /// The peer gave up on the connection because this side stopped answering.
    Timeout,
    /// A code this implementation does not know.
    Other(u8),
}

impl RstReason {
    /// The reason's code on the wire.
    pub fn to_u8(self) -> u8 {
        match self {
            RstReason::UnknownConnection => 1,
            RstReason::Refused => 2,
            RstReason::Aborted => 3,
            RstReason::UnsupportedVersion => 4,
            RstReason::ProtocolViolation => 5,
            RstReason::Timeout => 6,
            RstReason::Other(v) => v,
        }
    }
    fn from_u8(v: u8) -> RstReason {
        match v {
            1 => RstReason::UnknownConnection,
            2 => RstReason::Refused,
            3 => RstReason::Aborted,
            4 => RstReason::UnsupportedVersion,
            5 => RstReason::ProtocolViolation,
            6 => RstReason::Timeout,
            v => RstReason::Other(v),
        }
    }
}

/// RST: aborts a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rst {
    pub reason: RstReason,
    /// Application error code (Aborted) or supported-version bitmap (UnsupportedVersion).
    pub detail: u16,
}

/// POLL: asks the receiver for a STAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll {
    /// N(S): the sequence number of the next new SD the sender will send.
    pub next_seq: u32,
    /// Set on keepalive polls sent while nothing is outstanding.
    pub keepalive: bool,
    /// Sender's clock (µs, 32 bits) when the POLL was sent; echoed by the STAT.
    pub timestamp: u32,
}

/// A list of gaps: half-open ranges `[start, end)` of missing 24-bit sequence numbers.
#[derive(Debug, Clone, Copy)]
pub enum Gaps<'a> {
    /// Gaps as they sit in a received datagram (6 bytes each).
    Wire(&'a [u8]),
    /// Gaps to be emitted.
    List(&'a [(u32, u32)]),
}

impl<'a> Gaps<'a> {
    /// Number of gaps.
    pub fn len(&self) -> usize {
        match self {
            Gaps::Wire(b) => b.len() / GAP_LEN,
            Gaps::List(l) => l.len(),
        }
    }
    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Iterates over the gaps.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        let (wire, list): (&'a [u8], &'a [(u32, u32)]) = match *self {
            Gaps::Wire(b) => (b, &[]),
            Gaps::List(l) => (&[], l),
        };
        wire.chunks_exact(GAP_LEN)
            .map(|c| (u24(&c[0..3]), u24(&c[3..6])))
            .chain(list.iter().copied())
    }
}

impl PartialEq for Gaps<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for Gaps<'_> {}

/// STAT: the receiver's complete state, answering a POLL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat<'a> {
    /// N(R): every SD before this sequence number has been received.
    pub cum: u32,
    /// Set when the gap list was cut short to fit the datagram.
    pub partial: bool,
    /// The report covers sequence numbers below this one: SDs in `[cum, covered_to)` outside
    /// every gap have been received.
    pub covered_to: u32,
    /// The timestamp of the POLL being answered.
    pub echo_timestamp: u32,
    /// Bytes the receiver can accept beyond `cum`.
    pub rwnd: u32,
    /// Missing SDs, lowest first.
    pub gaps: Gaps<'a>,
}

/// USTAT: an unsolicited report of one newly detected gap, or (empty gap) a window update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ustat {
    /// N(R), as in STAT.
    pub cum: u32,
    /// Bytes the receiver can accept beyond `cum`.
    pub rwnd: u32,
    /// First missing sequence number.
    pub gap_start: u32,
    /// One past the last missing sequence number; equal to `gap_start` for a window update.
    pub gap_end: u32,
}

/// END: the sender will send no SD at or after `final_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub final_seq: u32,
}

/// ENDAK: every SD before `final_seq` has been received and the END is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndAck {
    pub final_seq: u32,
}

/// A whole datagram: header and the body of every packet type it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    pub header: Header,
    pub bgn: Option<Bgn>,
    pub bgnak: Option<Bgnak>,
    pub rst: Option<Rst>,
    pub poll: Option<Poll>,
    pub stat: Option<Stat<'a>>,
    pub ustat: Option<Ustat>,
    pub end: Option<End>,
    pub endak: Option<EndAck>,
    /// SD payload; empty unless the SD type is set.
    pub payload: &'a [u8],
}

fn u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}
fn u16_at(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn u32_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn put_u24(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&(v & SEQ_MASK).to_be_bytes()[1..4]);
}

/// Takes `len` bytes from the front of `rest`, or reports which body was truncated.
fn take<'a>(rest: &mut &'a [u8], len: usize, what: &'static str) -> Result<&'a [u8], WireError> {
    if rest.len() < len {
        return Err(WireError::Truncated(what));
    }
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Ok(head)
}

/// RFC 1071 one's-complement sum over `data`, not yet complemented.
fn ones_complement_sum(data: &[u8]) -> u16 {
    sum_with(data, bulk_sum)
}

/// The one's-complement sum of `data`, its bulk (a multiple of 16 bytes) summed by `bulk`.
///
/// RFC 1071 §2(B): the one's-complement sum does not depend on byte order. The bulk is summed as
/// native-endian 32-bit words (no byte swap per word, which compilers vectorize), folded to 16
/// bits and swapped once; the tail (under 16 bytes) is summed big-endian. Both parts are zero
/// only for all-zero bytes, so the fold yields the same value as a big-endian word-by-word sum
/// (see `the_fast_sum_matches_the_word_by_word_sum`).
fn sum_with(data: &[u8], bulk: fn(&[u8]) -> u64) -> u16 {
    let split = data.len() - data.len() % 16;
    let (head, rem) = data.split_at(split);
    let mut folded = fold16(bulk(head)) as u16;
    if cfg!(target_endian = "little") {
        folded = folded.swap_bytes();
    }
    let mut sum = u64::from(folded);
    let mut pairs = rem.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    fold16(sum) as u16
}

/// Native-endian 32-bit words of `data` (whole words; the caller passes 16-byte chunks) summed
/// in 64 bits: a plain reduction, which compilers turn into zero-extending vector adds.
/// No overflow below 2^32 words of input.
#[inline(always)]
fn lanes_sum(data: &[u8]) -> u64 {
    data.chunks_exact(4)
        .map(|w| u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .sum()
}

/// [`lanes_sum`] compiled for AVX2 (twice the bytes per instruction of the SSE2 baseline).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_sum_avx2(data: &[u8]) -> u64 {
    lanes_sum(data)
}

/// [`lanes_sum`] with the widest vectors the CPU has.
fn bulk_sum(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { lanes_sum_avx2(data) };
    }
    lanes_sum(data)
}

/// Folds a sum of 16-bit words to 16 bits with end-around carry (zero only if `sum` is zero).
fn fold16(mut sum: u64) -> u64 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

impl<'a> Packet<'a> {
    /// A packet with the given header and no bodies.
    pub fn new(header: Header) -> Packet<'a> {
        Packet {
            header,
            bgn: None,
            bgnak: None,
            rst: None,
            poll: None,
            stat: None,
            ustat: None,
            end: None,
            endak: None,
            payload: &[],
        }
    }

    /// Reads only the header, without checking the checksum or bodies (used for demultiplexing
    /// before the full parse).
    pub fn peek_header(data: &[u8]) -> Result<Header, WireError> {
        if data.len() < HEADER_LEN {
            return Err(WireError::TooShort(data.len()));
        }
        let vt = u16_at(&data[0..2]);
        let version = (vt >> 12) as u8;
        let types = vt & 0x0fff;
        if version != VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        if types & !Types::ALL != 0 {
            return Err(WireError::Reserved("type"));
        }
        if types == 0 {
            return Err(WireError::NoType);
        }
        let seq = u24(&data[9..12]);
        if types & Types::SD.0 == 0 && seq != 0 {
            return Err(WireError::Invalid("sequence number without SD"));
        }
        Ok(Header {
            version,
            types: Types(types),
            from_initiator: data[8] & 0x80 != 0,
            instance: data[8] & 0x7f,
            conn_id: u32_at(&data[4..8]),
            seq,
        })
    }

    /// Parses and validates a whole datagram.
    pub fn parse(data: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let header = Self::peek_header(data)?;
        if ones_complement_sum(data) != 0xffff {
            return Err(WireError::Checksum);
        }
        Self::parse_bodies(data, header)
    }

    /// As [`Self::parse`] without verifying the checksum (spec §3.3, "inside an authenticating
    /// carrier"): for a datagram whose every byte a carrier has already authenticated, such as
    /// satstp's tunnel, whose AEAD tag covers the whole STP datagram and rejects any change the
    /// checksum would catch. Every other check of §3.14 applies.
    pub fn parse_authenticated(data: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let header = Self::peek_header(data)?;
        Self::parse_bodies(data, header)
    }

    /// The bodies and payload after a checked header (§3.14 rules 7-10).
    fn parse_bodies(data: &'a [u8], header: Header) -> Result<Packet<'a>, WireError> {
        let t = header.types;
        let mut p = Packet::new(header);
        let mut rest = &data[HEADER_LEN..];
        if t.contains(Types::BGN) {
            let b = take(&mut rest, BGN_LEN, "BGN")?;
            if b[3] != 0 {
                return Err(WireError::Reserved("BGN flags"));
            }
            p.bgn = Some(Bgn {
                isn: u24(&b[0..3]),
                rwnd: u32_at(&b[4..8]),
                max_datagram: u16_at(&b[8..10]),
                versions: u16_at(&b[10..12]),
                timestamp: u32_at(&b[12..16]),
            });
        }
        if t.contains(Types::BGNAK) {
            let b = take(&mut rest, BGNAK_LEN, "BGNAK")?;
            p.bgnak = Some(Bgnak {
                isn: u24(&b[0..3]),
                version: b[3],
                rwnd: u32_at(&b[4..8]),
                max_datagram: u16_at(&b[8..10]),
                echo_timestamp: u32_at(&b[12..16]),
            });
        }
        if t.contains(Types::RST) {
            let b = take(&mut rest, RST_LEN, "RST")?;
            p.rst = Some(Rst {
                reason: RstReason::from_u8(b[0]),
                detail: u16_at(&b[2..4]),
            });
        }
        if t.contains(Types::POLL) {
            let b = take(&mut rest, POLL_LEN, "POLL")?;
            if b[3] & !0x01 != 0 {
                return Err(WireError::Reserved("POLL flags"));
            }
            p.poll = Some(Poll {
                next_seq: u24(&b[0..3]),
                keepalive: b[3] & 0x01 != 0,
                timestamp: u32_at(&b[4..8]),
            });
        }
        if t.contains(Types::STAT) {
            let b = take(&mut rest, STAT_FIXED_LEN, "STAT")?;
            if b[3] & !0x01 != 0 {
                return Err(WireError::Reserved("STAT flags"));
            }
            let ngaps = usize::from(u16_at(&b[16..18]));
            let gaps = take(&mut rest, ngaps * GAP_LEN, "STAT gap list")?;
            p.stat = Some(Stat {
                cum: u24(&b[0..3]),
                partial: b[3] & 0x01 != 0,
                covered_to: u24(&b[4..7]),
                echo_timestamp: u32_at(&b[8..12]),
                rwnd: u32_at(&b[12..16]),
                gaps: Gaps::Wire(gaps),
            });
        }
        if t.contains(Types::USTAT) {
            let b = take(&mut rest, USTAT_LEN, "USTAT")?;
            p.ustat = Some(Ustat {
                cum: u24(&b[0..3]),
                rwnd: u32_at(&b[4..8]),
                gap_start: u24(&b[8..11]),
                gap_end: u24(&b[12..15]),
            });
        }
        if t.contains(Types::END) {
            let b = take(&mut rest, END_LEN, "END")?;
            p.end = Some(End {
                final_seq: u24(&b[0..3]),
            });
        }
        if t.contains(Types::ENDAK) {
            let b = take(&mut rest, ENDAK_LEN, "ENDAK")?;
            p.endak = Some(EndAck {
                final_seq: u24(&b[0..3]),
            });
        }
        if t.contains(Types::SD) {
            if rest.is_empty() {
                return Err(WireError::Invalid("SD without payload"));
            }
            p.payload = rest;
        } else if !rest.is_empty() {
            return Err(WireError::Invalid("trailing bytes"));
        }
        Ok(p)
    }

    /// The encoded length of this packet.
    pub fn encoded_len(&self) -> usize {
        let mut n = HEADER_LEN;
        n += self.bgn.map_or(0, |_| BGN_LEN);
        n += self.bgnak.map_or(0, |_| BGNAK_LEN);
        n += self.rst.map_or(0, |_| RST_LEN);
        n += self.poll.map_or(0, |_| POLL_LEN);
        n += self
            .stat
            .map_or(0, |s| STAT_FIXED_LEN + s.gaps.len() * GAP_LEN);
        n += self.ustat.map_or(0, |_| USTAT_LEN);
        n += self.end.map_or(0, |_| END_LEN);
        n += self.endak.map_or(0, |_| ENDAK_LEN);
        n + self.payload.len()
    }

    /// The type field implied by which bodies are present.
    pub fn types(&self) -> Types {
        let mut t = Types::empty();
        let parts = [
            (self.bgn.is_some(), Types::BGN),
            (self.bgnak.is_some(), Types::BGNAK),
            (self.rst.is_some(), Types::RST),
            (self.poll.is_some(), Types::POLL),
            (self.stat.is_some(), Types::STAT),
            (self.ustat.is_some(), Types::USTAT),
            (self.end.is_some(), Types::END),
            (self.endak.is_some(), Types::ENDAK),
            (!self.payload.is_empty(), Types::SD),
        ];
        for (present, ty) in parts {
            if present {
                t.insert(ty);
            }
        }
        t
    }

    /// Appends the encoded datagram to `buf` and returns its length. The type field is derived
    /// from the bodies present (the header's `types` is ignored); the checksum is computed.
    pub fn emit(&self, buf: &mut Vec<u8>) -> usize {
        self.emit_with(buf, true)
    }

    /// As [`Self::emit`]; with `checksum` false the checksum field is left zero (spec §3.3,
    /// "inside an authenticating carrier"), for [`fill_checksum`] to complete where needed.
    pub fn emit_with(&self, buf: &mut Vec<u8>, checksum: bool) -> usize {
        let start = buf.len();
        let h = &self.header;
        let types = self.types();
        let seq = if types.contains(Types::SD) { h.seq } else { 0 };
        buf.extend_from_slice(&((u16::from(VERSION) << 12) | types.0).to_be_bytes());
        buf.extend_from_slice(&[0, 0]);
        buf.extend_from_slice(&h.conn_id.to_be_bytes());
        buf.push((u8::from(h.from_initiator) << 7) | (h.instance & 0x7f));
        put_u24(buf, seq);
        if let Some(b) = &self.bgn {
            put_u24(buf, b.isn);
            buf.push(0);
            buf.extend_from_slice(&b.rwnd.to_be_bytes());
            buf.extend_from_slice(&b.max_datagram.to_be_bytes());
            buf.extend_from_slice(&b.versions.to_be_bytes());
            buf.extend_from_slice(&b.timestamp.to_be_bytes());
        }
        if let Some(b) = &self.bgnak {
            put_u24(buf, b.isn);
            buf.push(b.version);
            buf.extend_from_slice(&b.rwnd.to_be_bytes());
            buf.extend_from_slice(&b.max_datagram.to_be_bytes());
            buf.extend_from_slice(&[0, 0]);
            buf.extend_from_slice(&b.echo_timestamp.to_be_bytes());
        }
        if let Some(r) = &self.rst {
            buf.extend_from_slice(&[r.reason.to_u8(), 0]);
            buf.extend_from_slice(&r.detail.to_be_bytes());
        }
        if let Some(p) = &self.poll {
            put_u24(buf, p.next_seq);
            buf.push(u8::from(p.keepalive));
            buf.extend_from_slice(&p.timestamp.to_be_bytes());
        }
        if let Some(s) = &self.stat {
            put_u24(buf, s.cum);
            buf.push(u8::from(s.partial));
            put_u24(buf, s.covered_to);
            buf.push(0);
            buf.extend_from_slice(&s.echo_timestamp.to_be_bytes());
            buf.extend_from_slice(&s.rwnd.to_be_bytes());
            let n = u16::try_from(s.gaps.len()).unwrap_or(u16::MAX);
            buf.extend_from_slice(&n.to_be_bytes());
            buf.extend_from_slice(&[0, 0]);
            for (a, b) in s.gaps.iter().take(usize::from(n)) {
                put_u24(buf, a);
                put_u24(buf, b);
            }
        }
        if let Some(u) = &self.ustat {
            put_u24(buf, u.cum);
            buf.push(0);
            buf.extend_from_slice(&u.rwnd.to_be_bytes());
            put_u24(buf, u.gap_start);
            buf.push(0);
            put_u24(buf, u.gap_end);
            buf.push(0);
        }
        if let Some(e) = &self.end {
            put_u24(buf, e.final_seq);
            buf.push(0);
        }
        if let Some(e) = &self.endak {
            put_u24(buf, e.final_seq);
            buf.push(0);
        }
        buf.extend_from_slice(self.payload);
        if checksum {
            fill_checksum(&mut buf[start..]);
        }
        buf.len() - start
    }
}

/// Computes and writes the checksum of an STP datagram (spec §3.3), whatever its field held; a
/// datagram shorter than the header is left as it is.
pub fn fill_checksum(datagram: &mut [u8]) {
    if datagram.len() < HEADER_LEN {
        return;
    }
    datagram[2..4].fill(0);
    let sum = !ones_complement_sum(datagram);
    datagram[2..4].copy_from_slice(&sum.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            version: VERSION,
            types: Types::empty(),
            from_initiator: true,
            instance: 0x55,
            conn_id: 0xdead_beef,
            seq: 0,
        }
    }

    fn roundtrip(p: &Packet<'_>) {
        let mut buf = Vec::new();
        let n = p.emit(&mut buf);
        assert_eq!(n, buf.len());
        assert_eq!(n, p.encoded_len());
        let q = Packet::parse(&buf).expect("parses");
        let mut expected = *p;
        expected.header.types = p.types();
        if !p.types().contains(Types::SD) {
            expected.header.seq = 0;
        }
        assert_eq!(q, expected);
    }

    /// The checksum as first written: big-endian 16-bit words added one by one.
    fn word_by_word_sum(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        let mut pairs = data.chunks_exact(2);
        for p in &mut pairs {
            sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
        }
        if let [last] = pairs.remainder() {
            sum += u64::from(*last) << 8;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn the_fast_sum_matches_the_word_by_word_sum() {
        let mut x: u32 = 0x1234_5678;
        let mut data = Vec::new();
        for len in 0..600usize {
            data.clear();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                data.push(x as u8);
            }
            assert_eq!(
                ones_complement_sum(&data),
                word_by_word_sum(&data),
                "len {len}"
            );
            assert_eq!(
                sum_with(&data, lanes_sum),
                word_by_word_sum(&data),
                "portable, len {len}"
            );
            for fill in [0x00u8, 0xff, 0x80, 0x01] {
                let same = vec![fill; len];
                assert_eq!(
                    ones_complement_sum(&same),
                    word_by_word_sum(&same),
                    "{fill:#x} × {len}"
                );
            }
        }
        let big = vec![0xffu8; 9000];
        assert_eq!(ones_complement_sum(&big), word_by_word_sum(&big));
    }

    #[test]
    fn peek_types_reads_what_parse_reads() {
        let mut p = Packet::new(header());
        p.bgn = Some(Bgn {
            isn: 1,
            rwnd: 2,
            max_datagram: 1400,
            versions: 1,
            timestamp: 3,
        });
        let mut buf = Vec::new();
        p.emit(&mut buf);
        assert_eq!(
            peek_types(&buf),
            Some(Packet::parse(&buf).unwrap().header.types)
        );
        assert!(peek_types(&buf).unwrap().contains(Types::BGN));
        assert_eq!(peek_types(&buf[..1]), None);
    }

    #[test]
    fn every_type_roundtrips_alone_and_combined() {
        let payload = [7u8; 33];
        let gaps = [(5u32, 9u32), (0xfffff0, 0x000002)];
        let mut sd = Packet::new(Header {
            seq: 0xabcdef,
            ..header()
        });
        sd.payload = &payload;
        roundtrip(&sd);
        let mut poll = sd;
        poll.poll = Some(Poll {
            next_seq: 0x123456,
            keepalive: true,
            timestamp: 99,
        });
        roundtrip(&poll);
        let mut bgn = poll;
        bgn.bgn = Some(Bgn {
            isn: 1,
            rwnd: 1 << 30,
            max_datagram: 1452,
            versions: 1,
            timestamp: 7,
        });
        roundtrip(&bgn);
        let mut ack = Packet::new(Header {
            from_initiator: false,
            ..header()
        });
        ack.bgnak = Some(Bgnak {
            isn: 3,
            version: 1,
            rwnd: 5,
            max_datagram: 1400,
            echo_timestamp: 7,
        });
        ack.stat = Some(Stat {
            cum: 4,
            partial: true,
            covered_to: 11,
            echo_timestamp: 8,
            rwnd: 1000,
            gaps: Gaps::List(&gaps),
        });
        roundtrip(&ack);
        let mut ustat = Packet::new(header());
        ustat.ustat = Some(Ustat {
            cum: 1,
            rwnd: 2,
            gap_start: 3,
            gap_end: 4,
        });
        roundtrip(&ustat);
        let mut end = Packet::new(header());
        end.end = Some(End { final_seq: 77 });
        end.endak = Some(EndAck { final_seq: 78 });
        roundtrip(&end);
        let mut rst = Packet::new(header());
        rst.rst = Some(Rst {
            reason: RstReason::Aborted,
            detail: 42,
        });
        roundtrip(&rst);
        let mut other = rst;
        other.rst = Some(Rst {
            reason: RstReason::Other(200),
            detail: 0,
        });
        roundtrip(&other);
    }

    #[test]
    fn sd_overhead_is_twelve_bytes() {
        let payload = [1u8; 1000];
        let mut sd = Packet::new(Header { seq: 1, ..header() });
        sd.payload = &payload;
        assert_eq!(sd.encoded_len(), 1012);
    }

    /// An SD of 40 bytes with a POLL, emitted.
    fn sd_with_poll() -> Vec<u8> {
        let payload = [0x5au8; 40];
        let mut p = Packet::new(Header { seq: 9, ..header() });
        p.payload = &payload;
        p.poll = Some(Poll {
            next_seq: 10,
            keepalive: false,
            timestamp: 1234,
        });
        let mut buf = Vec::new();
        p.emit(&mut buf);
        buf
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let buf = sd_with_poll();
        for bit in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Packet::parse(&b).is_err(), "flip of bit {bit} accepted");
        }
    }

    /// Inside an authenticating carrier the checksum alone is not verified: a wrong checksum
    /// field passes `parse_authenticated` (same packet as the intact datagram) and fails `parse`,
    /// while truncation and reserved bits are still refused.
    #[test]
    fn authenticated_parse_skips_only_the_checksum() {
        let buf = sd_with_poll();
        let intact = Packet::parse(&buf).unwrap();
        assert_eq!(Packet::parse_authenticated(&buf).unwrap(), intact);
        let mut bad_sum = buf.clone();
        bad_sum[2] ^= 0x10;
        assert_eq!(Packet::parse(&bad_sum), Err(WireError::Checksum));
        assert_eq!(Packet::parse_authenticated(&bad_sum).unwrap(), intact);
        // POLL's reserved flag bits (byte 3 of its body, after the 12-byte header).
        let mut reserved = buf.clone();
        reserved[HEADER_LEN + 3] |= 0x80;
        assert!(Packet::parse_authenticated(&reserved).is_err());
        for len in 0..HEADER_LEN + POLL_LEN {
            assert!(
                Packet::parse_authenticated(&buf[..len]).is_err(),
                "truncation to {len} accepted"
            );
        }
    }

    /// A datagram emitted without its checksum has a zero field, and `fill_checksum` makes it
    /// exactly the datagram `emit` writes (whatever the field held before).
    #[test]
    fn an_unsummed_datagram_is_completed_by_fill_checksum() {
        let payload: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        let mut p = Packet::new(Header { seq: 3, ..header() });
        p.payload = &payload;
        let mut summed = Vec::new();
        p.emit(&mut summed);
        let mut bare = vec![9u8; 5];
        let n = p.emit_with(&mut bare, false);
        assert_eq!(n, summed.len());
        assert_eq!(&bare[5 + 2..5 + 4], &[0, 0]);
        assert_eq!(Packet::parse(&bare[5..]), Err(WireError::Checksum));
        fill_checksum(&mut bare[5..]);
        assert_eq!(&bare[5..], &summed[..]);
        bare[5 + 2] ^= 0xff;
        fill_checksum(&mut bare[5..]);
        assert_eq!(&bare[5..], &summed[..]);
        let mut short = [1u8; 11];
        fill_checksum(&mut short);
        assert_eq!(short, [1u8; 11]);
    }

    #[test]
    fn every_truncation_is_rejected() {
        let gaps = [(1u32, 2u32), (4, 6)];
        let mut p = Packet::new(header());
        p.stat = Some(Stat {
            cum: 1,
            partial: false,
            covered_to: 9,
            echo_timestamp: 0,
            rwnd: 0,
            gaps: Gaps::List(&gaps),
        });
        p.end = Some(End { final_seq: 9 });
        let mut buf = Vec::new();
        p.emit(&mut buf);
        for len in 0..buf.len() {
            assert!(
                Packet::parse(&buf[..len]).is_err(),
                "truncation to {len} accepted"
            );
        }
    }

    #[test]
    fn rejects_bad_headers() {
        assert_eq!(Packet::parse(&[]), Err(WireError::TooShort(0)));
        let mut buf = Vec::new();
        let mut p = Packet::new(header());
        p.end = Some(End { final_seq: 1 });
        p.emit(&mut buf);
        let mut v2 = buf.clone();
        v2[0] = 0x20 | (v2[0] & 0x0f);
        assert_eq!(Packet::parse(&v2), Err(WireError::UnsupportedVersion(2)));
        let mut reserved = buf.clone();
        reserved[0] |= 0x08;
        assert_eq!(Packet::parse(&reserved), Err(WireError::Reserved("type")));
        let mut extra = buf.clone();
        extra.extend_from_slice(&[0, 0]);
        assert!(Packet::parse(&extra).is_err());
    }
}
