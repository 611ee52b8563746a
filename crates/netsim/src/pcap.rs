//! Packet capture output: simulated packets written as real IPv4 packets to a classic libpcap
//! file that Wireshark, tcpdump or tshark can read.
//!
//! The file uses link type `LINKTYPE_RAW` (101): every record is an IPv4 packet with no link-layer
//! header. Each simulated [`Packet`] becomes:
//!
//! - an IPv4 header (version 4, no options, DF set, TTL 64, identification = the low 16 bits of
//!   the packet id, a valid header checksum, total length = the packet's `size`);
//! - for [`Payload::Tcp`], protocol 6 and a real TCP header: ports, sequence and acknowledgement
//!   numbers truncated to 32 bits (what a real stack puts on the wire, modulo 2³²), the FIN, SYN,
//!   RST and ACK flags, the window and RFC 2018 SACK blocks. Data bytes are not modelled, so by
//!   default only the headers are captured (`caplen` = headers, `origlen` = full size); with
//!   [`PcapOptions::zero_fill`] the data is captured as zero bytes. The TCP checksum is the one
//!   the segment would have with an all-zero payload, so it verifies in zero-fill mode;
//! - for [`Payload::Stp`], protocol 17, a UDP header with a valid checksum, and the real STP
//!   datagram bytes.
//!
//! Addresses: node `n` is `10.a.b.c` with `a.b.c` the low 24 bits of `n` in network order, so
//! node 3 is 10.0.0.3 and node 258 is 10.0.1.2 (node ids from 2²⁴ on would wrap; simulated
//! topologies are far smaller). Ports are the agents' ports.
//!
//! Timestamps are the virtual time at which the link accepted the packet (what
//! [`Sim::trace_link`] reports), counted from the Unix epoch, in microseconds by default or
//! nanoseconds with [`PcapOptions::nanosecond`].
//!
//! TCP windows: the simulator's windows are byte counts that can exceed 16 bits. The writer
//! encodes them with a fixed window-scale shift ([`PcapOptions::tcp_window_shift`], default 7):
//! SYN segments carry the unscaled window (clamped to 65535) and a Window Scale option with that
//! shift, other segments carry `window >> shift` (clamped), so an analyser that sees the handshake
//! reconstructs the window to within 2^shift bytes. A SYN's header is therefore 4 bytes longer
//! than the simulator counted; its recorded length grows to match when needed.
//!
//! Sizes are bounded: IPv4 cannot express more than 65535 bytes, so larger sizes are clamped,
//! and at most four SACK blocks (what fits in the 40 bytes of options) are encoded.

use crate::packet::{LinkId, NodeId, Packet, Payload};
use crate::sim::{Sim, Time};
use crate::tcp::TcpSegment;
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::rc::Rc;

/// Link type of raw IP packets (no link-layer header) in pcap files.
pub const LINKTYPE_RAW: u32 = 101;
/// Magic number of microsecond-resolution pcap files.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Magic number of nanosecond-resolution pcap files.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Largest IPv4 packet.
pub const MAX_IP_PACKET: u32 = 65_535;

const IP_HDR: usize = crate::packet::IP_HEADER as usize;
const UDP_HDR: usize = crate::packet::UDP_HEADER as usize;
const TCP_HDR: usize = crate::packet::TCP_HEADER as usize;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
/// SACK blocks that fit in the TCP option space (2 NOPs + 2 + 8·4 = 36 of 40 bytes).
const MAX_SACK_BLOCKS: usize = 4;
/// Largest window-scale shift (RFC 7323).
const MAX_WINDOW_SHIFT: u8 = 14;

/// How packets are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapOptions {
    /// Nanosecond timestamps (magic `0xa1b23c4d`) instead of microseconds. The simulator's clock
    /// is in nanoseconds; not every old reader knows this format.
    pub nanosecond: bool,
    /// Capture TCP data as zero bytes (up to `snaplen`) instead of headers only.
    pub zero_fill: bool,
    /// Maximum bytes captured per packet (recorded in the file header); at least 1.
    pub snaplen: u32,
    /// Window-scale shift used to encode TCP windows (at most 14; 0: windows clamped to 65535
    /// and no Window Scale option).
    pub tcp_window_shift: u8,
    /// Flush the underlying writer after this many records (0: only on [`PcapWriter::flush`]
    /// and drop), so that a trace survives a crash of a long run up to the last flush.
    pub flush_every: u32,
}

impl Default for PcapOptions {
    fn default() -> Self {
        PcapOptions {
            nanosecond: false,
            zero_fill: false,
            snaplen: MAX_IP_PACKET,
            tcp_window_shift: 7,
            flush_every: 256,
        }
    }
}

/// The IPv4 address of a node: `10.a.b.c` from the low 24 bits of its id.
pub fn node_ip(node: NodeId) -> [u8; 4] {
    let [_, a, b, c] = node.0.to_be_bytes();
    [10, a, b, c]
}

/// One's-complement sum of `data` as big-endian 16-bit words (odd length padded with zero),
/// added to `acc`, not yet folded.
fn sum16(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits and complements it: the Internet checksum.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Sum of the IPv4 pseudo-header used by the TCP and UDP checksums.
fn pseudo_sum(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u64 {
    let acc = sum16(0, &src);
    let acc = sum16(acc, &dst);
    acc + u64::from(proto) + u64::from(len)
}

fn put_u16(buf: &mut Vec<u8>, v: u16) {
    buf.extend_from_slice(&v.to_be_bytes());
}

fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// TCP options of a segment: Window Scale on SYNs (when `shift > 0`), then SACK blocks.
fn tcp_options(seg: &TcpSegment, shift: u8, out: &mut Vec<u8>) {
    if seg.syn && shift > 0 {
        out.extend_from_slice(&[1, 3, 3, shift]);
    }
    let blocks = &seg.sack[..seg.sack.len().min(MAX_SACK_BLOCKS)];
    if !blocks.is_empty() {
        // Two NOPs align the blocks on 32-bit words, as RFC 2018 suggests.
        out.extend_from_slice(&[1, 1, 5, (2 + 8 * blocks.len()) as u8]);
        for &(start, end) in blocks {
            put_u32(out, start as u32);
            put_u32(out, end as u32);
        }
    }
}

/// Encodes `pkt` as an IPv4 packet into `out` (cleared first) and returns its original length
/// (the IPv4 total length). `out` receives what would be captured before the snap length is
/// applied: headers, plus the STP datagram or, with `zero_fill`, TCP data as zeros. It never
/// grows beyond [`MAX_IP_PACKET`] bytes.
pub fn encode(pkt: &Packet, opts: &PcapOptions, out: &mut Vec<u8>) -> u32 {
    out.clear();
    let src = node_ip(pkt.src.node);
    let dst = node_ip(pkt.dst.node);
    let shift = opts.tcp_window_shift.min(MAX_WINDOW_SHIFT);
    // Transport header (and UDP data) first, after a placeholder for the IPv4 header.
    out.resize(IP_HDR, 0);
    let (proto, total) = match &pkt.payload {
        Payload::Tcp(seg) => {
            let mut options = Vec::with_capacity(40);
            tcp_options(seg, shift, &mut options);
            let hdr_len = TCP_HDR + options.len();
            let total = pkt.size.max((IP_HDR + hdr_len) as u32).min(MAX_IP_PACKET);
            let mut flags = 0u8;
            if seg.fin {
                flags |= 0x01;
            }
            if seg.syn {
                flags |= 0x02;
            }
            if seg.rst {
                flags |= 0x04;
            }
            if seg.ack_flag {
                flags |= 0x10;
            }
            // RFC 7323: the window of a SYN is never scaled.
            let window = if seg.syn {
                seg.window
            } else {
                seg.window >> shift
            };
            put_u16(out, pkt.src.port);
            put_u16(out, pkt.dst.port);
            put_u32(out, seg.seq as u32);
            put_u32(out, if seg.ack_flag { seg.ack as u32 } else { 0 });
            out.push(((hdr_len / 4) as u8) << 4);
            out.push(flags);
            put_u16(out, window.min(0xffff) as u16);
            put_u16(out, 0); // checksum, below
            put_u16(out, 0); // urgent pointer
            out.extend_from_slice(&options);
            let seg_len = (total as usize - IP_HDR) as u16;
            // Zero data adds nothing to the sum: the checksum covers the segment's full length.
            let sum = sum16(pseudo_sum(src, dst, PROTO_TCP, seg_len), &out[IP_HDR..]);
            let ck = fold(sum);
            out[IP_HDR + 16..IP_HDR + 18].copy_from_slice(&ck.to_be_bytes());
            if opts.zero_fill {
                let fill = (total as usize).min(opts.snaplen.max(1) as usize);
                if out.len() < fill {
                    out.resize(fill, 0);
                }
            }
            (PROTO_TCP, total)
        }
        Payload::Stp(bytes) => {
            let max_data = MAX_IP_PACKET as usize - IP_HDR - UDP_HDR;
            let data = &bytes[..bytes.len().min(max_data)];
            let udp_len = (UDP_HDR + data.len()) as u16;
            let total = pkt
                .size
                .max((IP_HDR + usize::from(udp_len)) as u32)
                .min(MAX_IP_PACKET);
            put_u16(out, pkt.src.port);
            put_u16(out, pkt.dst.port);
            put_u16(out, udp_len);
            put_u16(out, 0);
            out.extend_from_slice(data);
            let sum = sum16(pseudo_sum(src, dst, PROTO_UDP, udp_len), &out[IP_HDR..]);
            // A computed zero is sent as all ones (zero means "no checksum").
            let ck = match fold(sum) {
                0 => 0xffff,
                ck => ck,
            };
            out[IP_HDR + 6..IP_HDR + 8].copy_from_slice(&ck.to_be_bytes());
            (PROTO_UDP, total)
        }
    };
    let mut ip = [0u8; IP_HDR];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&(pkt.id as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let ck = fold(sum16(0, &ip));
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    out[..IP_HDR].copy_from_slice(&ip);
    total
}

/// Writes simulated packets to a classic pcap stream.
///
/// The first I/O error is kept ([`PcapWriter::error`]) and every later write fails, so a full
/// disk costs the rest of the trace, never the run. Buffered data is flushed every
/// [`PcapOptions::flush_every`] records and when the writer is dropped.
pub struct PcapWriter<W: Write> {
    out: W,
    opts: PcapOptions,
    records: u64,
    unflushed: u32,
    buf: Vec<u8>,
    failed: Option<io::Error>,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` with default options and writes its header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::create_with(path, PcapOptions::default())
    }

    /// Creates (or truncates) the file at `path` and writes its header.
    pub fn create_with(path: impl AsRef<Path>, opts: PcapOptions) -> io::Result<Self> {
        PcapWriter::new(BufWriter::new(File::create(path)?), opts)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W, opts: PcapOptions) -> io::Result<Self> {
        if opts.snaplen == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "pcap snaplen must be at least 1",
            ));
        }
        let magic = if opts.nanosecond {
            MAGIC_NANOS
        } else {
            MAGIC_MICROS
        };
        let mut hdr = [0u8; 24];
        hdr[0..4].copy_from_slice(&magic.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay zero.
        hdr[16..20].copy_from_slice(&opts.snaplen.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&hdr)?;
        Ok(PcapWriter {
            out,
            opts,
            records: 0,
            unflushed: 0,
            buf: Vec::with_capacity(256),
            failed: None,
        })
    }

    /// Appends one record: `pkt` seen at virtual time `time` (nanoseconds). Timestamps beyond
    /// the 32-bit seconds field (year 2106) saturate.
    pub fn write(&mut self, time: Time, pkt: &Packet) -> io::Result<()> {
        if let Some(e) = &self.failed {
            return Err(io::Error::new(
                e.kind(),
                format!("pcap writer failed earlier: {e}"),
            ));
        }
        let orig = encode(pkt, &self.opts, &mut self.buf);
        let caplen = self.buf.len().min(self.opts.snaplen as usize);
        let secs = u32::try_from(time / 1_000_000_000).unwrap_or(u32::MAX);
        let sub_ns = (time % 1_000_000_000) as u32;
        let frac = if self.opts.nanosecond {
            sub_ns
        } else {
            sub_ns / 1_000
        };
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&frac.to_le_bytes());
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&orig.to_le_bytes());
        let mut result = self
            .out
            .write_all(&rec)
            .and_then(|()| self.out.write_all(&self.buf[..caplen]));
        if result.is_ok() {
            self.records += 1;
            self.unflushed += 1;
            if self.opts.flush_every > 0 && self.unflushed >= self.opts.flush_every {
                result = self.flush();
            }
        }
        if let Err(e) = &result {
            self.failed = Some(io::Error::new(e.kind(), e.to_string()));
        }
        result
    }

    /// Flushes buffered records to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.unflushed = 0;
        self.out.flush()
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The first I/O error met, if any.
    pub fn error(&self) -> Option<&io::Error> {
        self.failed.as_ref()
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }
}

impl<W: Write> Drop for PcapWriter<W> {
    fn drop(&mut self) {
        // Nowhere to report an error from here; `flush` reports it to callers that care.
        let _ = self.out.flush();
    }
}

/// A pcap writer shared between a simulation's tracer and the caller.
pub type SharedPcapWriter = Rc<RefCell<PcapWriter<BufWriter<File>>>>;

/// Writes every packet that `link` accepts to a new pcap file at `path`, with default options.
/// The file is complete once the simulation is dropped (or after a later tracer replaces this
/// one on the same link).
pub fn attach(sim: &mut Sim, link: LinkId, path: &Path) -> io::Result<()> {
    attach_with(sim, link, path, PcapOptions::default()).map(|_| ())
}

/// Like [`attach`], with options, returning the writer so the caller can flush it, count its
/// records or check its error while the simulation lives. Records traced while the caller holds
/// a borrow of the writer are skipped.
pub fn attach_with(
    sim: &mut Sim,
    link: LinkId,
    path: &Path,
    opts: PcapOptions,
) -> io::Result<SharedPcapWriter> {
    if link.0 as usize >= sim.links().len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no link {} to trace", link.0),
        ));
    }
    let writer = Rc::new(RefCell::new(PcapWriter::create_with(path, opts)?));
    let traced = Rc::clone(&writer);
    sim.trace_link(
        link,
        Box::new(move |time, pkt| {
            if let Ok(mut w) = traced.try_borrow_mut() {
                // Errors are kept in the writer (see `PcapWriter::error`).
                let _ = w.write(time, pkt);
            }
        }),
    );
    Ok(writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Addr, Direction, FlowId};
    use crate::sim::{Agent, Ctx, MS};
    use linkmodel::LinkConfig;
    use std::any::Any;

    fn addr(node: u32, port: u16) -> Addr {
        Addr {
            node: NodeId(node),
            port,
        }
    }

    fn packet(id: u64, size: u32, payload: Payload) -> Packet {
        Packet {
            id,
            src: addr(1, 5000),
            dst: addr(258, 80),
            flow: FlowId(0),
            direction: Direction::Forward,
            size,
            payload,
            retransmission: false,
        }
    }

    fn tcp(seg: TcpSegment) -> Payload {
        Payload::Tcp(seg)
    }

    struct Record {
        secs: u32,
        frac: u32,
        orig: u32,
        data: Vec<u8>,
    }

    /// Parses a little-endian classic pcap file: (magic, snaplen, linktype, records).
    fn parse(file: &[u8]) -> (u32, u32, u32, Vec<Record>) {
        let le = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        assert!(file.len() >= 24);
        assert_eq!(&file[4..8], &[2, 0, 4, 0], "version 2.4");
        let mut records = Vec::new();
        let mut at = 24;
        while at < file.len() {
            assert!(at + 16 <= file.len(), "truncated record header");
            let caplen = le(file, at + 8) as usize;
            let orig = le(file, at + 12);
            assert!(caplen as u32 <= orig);
            assert!(at + 16 + caplen <= file.len(), "truncated record");
            records.push(Record {
                secs: le(file, at),
                frac: le(file, at + 4),
                orig,
                data: file[at + 16..at + 16 + caplen].to_vec(),
            });
            at += 16 + caplen;
        }
        (le(file, 0), le(file, 16), le(file, 20), records)
    }

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn check_ip(d: &[u8], proto: u8, total: u16) {
        assert_eq!(d[0], 0x45);
        assert_eq!(be16(d, 2), total);
        assert_eq!(d[9], proto);
        assert_eq!(&d[12..16], &[10, 0, 0, 1]);
        assert_eq!(&d[16..20], &[10, 0, 1, 2]);
        assert_eq!(fold(sum16(0, &d[..20])), 0, "IPv4 header checksum");
    }

    fn to_vec_writer(opts: PcapOptions, pkts: &[(Time, Packet)]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), opts).unwrap();
        for (t, p) in pkts {
            w.write(*t, p).unwrap();
        }
        assert_eq!(w.records(), pkts.len() as u64);
        w.get_ref().clone()
    }

    fn syn_ack() -> Packet {
        packet(
            0x1_0007,
            44,
            tcp(TcpSegment {
                seq: (1 << 32) + 5,
                ack: 1,
                ack_flag: true,
                syn: true,
                window: 1_000_000,
                ..TcpSegment::default()
            }),
        )
    }

    fn sack_ack() -> Packet {
        let seg = TcpSegment {
            seq: 1,
            ack: 1001,
            ack_flag: true,
            window: 1 << 20,
            sack: vec![(3001, 4001), (2001, 2501)],
            ..TcpSegment::default()
        };
        let size = 40 + seg.option_bytes();
        packet(2, size, tcp(seg))
    }

    fn stp() -> Packet {
        let bytes: Vec<u8> = (0..=200u8).collect();
        packet(3, 28 + 201, Payload::Stp(bytes))
    }

    #[test]
    fn header_records_and_ip() {
        let pkts = [(1_234_567_890, syn_ack()), (2 * MS, sack_ack()), (0, stp())];
        let file = to_vec_writer(PcapOptions::default(), &pkts);
        let (magic, snaplen, linktype, recs) = parse(&file);
        assert_eq!(magic, MAGIC_MICROS);
        assert_eq!(&file[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(snaplen, 65_535);
        assert_eq!(linktype, LINKTYPE_RAW);
        assert_eq!(recs.len(), 3);
        assert_eq!((recs[0].secs, recs[0].frac), (1, 234_567));
        assert_eq!((recs[1].secs, recs[1].frac), (0, 2_000));
        // SYN: 20 + 20 + 4 (window scale) captured, size as given.
        check_ip(&recs[0].data, PROTO_TCP, 44);
        assert_eq!(
            be16(&recs[0].data, 4),
            7,
            "identification = low 16 bits of the id"
        );
        assert_eq!((recs[0].data.len(), recs[0].orig), (44, 44));
        check_ip(&recs[1].data, PROTO_TCP, 60);
        check_ip(&recs[2].data, PROTO_UDP, 229);
    }

    #[test]
    fn tcp_header_flags_window_and_sack() {
        let file = to_vec_writer(PcapOptions::default(), &[(0, syn_ack()), (0, sack_ack())]);
        let (_, _, _, recs) = parse(&file);
        let t = &recs[0].data[20..];
        assert_eq!((be16(t, 0), be16(t, 2)), (5000, 80));
        assert_eq!(be32(t, 4), 5, "sequence number modulo 2^32");
        assert_eq!(be32(t, 8), 1);
        assert_eq!(t[12] >> 4, 6, "data offset: 24 bytes");
        assert_eq!(t[13], 0x12, "SYN|ACK");
        assert_eq!(be16(t, 14), 0xffff, "SYN window unscaled, clamped");
        assert_eq!(&t[20..24], &[1, 3, 3, 7], "NOP + window scale 7");

        let t = &recs[1].data[20..];
        assert_eq!(t[13], 0x10, "ACK");
        assert_eq!(be16(t, 14), ((1 << 20) >> 7) as u16);
        assert_eq!(t[12] >> 4, 10, "data offset: 20 + 20 bytes of options");
        let mut sack = vec![1, 1, 5, 18];
        for v in [3001u32, 4001, 2001, 2501] {
            sack.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(&t[20..], &sack[..]);

        let fin_rst = packet(
            9,
            40,
            tcp(TcpSegment {
                fin: true,
                rst: true,
                ..TcpSegment::default()
            }),
        );
        let mut buf = Vec::new();
        encode(&fin_rst, &PcapOptions::default(), &mut buf);
        assert_eq!(buf[20 + 13], 0x05, "FIN|RST");
        assert_eq!(be32(&buf, 28), 0, "no ACK flag: acknowledgement zero");
    }

    #[test]
    fn tcp_checksum_verifies_with_zero_fill() {
        let seg = TcpSegment {
            seq: 7,
            len: 1000,
            ack: 3,
            ack_flag: true,
            window: 65_535,
            sack: vec![(10, 20)],
            ..TcpSegment::default()
        };
        let size = 40 + seg.option_bytes() + 1000;
        let pkt = packet(4, size, tcp(seg));
        let opts = PcapOptions {
            zero_fill: true,
            ..PcapOptions::default()
        };
        let (_, _, _, recs) = parse(&to_vec_writer(opts, &[(0, pkt.clone())]));
        let d = &recs[0].data;
        assert_eq!(d.len() as u32, size, "whole packet captured");
        let sum = sum16(
            pseudo_sum(
                node_ip(NodeId(1)),
                node_ip(NodeId(258)),
                PROTO_TCP,
                (size - 20) as u16,
            ),
            &d[20..],
        );
        assert_eq!(fold(sum), 0, "TCP checksum");
        // Headers only by default.
        let (_, _, _, recs) = parse(&to_vec_writer(PcapOptions::default(), &[(0, pkt)]));
        assert_eq!((recs[0].data.len(), recs[0].orig), (52, size));
    }

    #[test]
    fn udp_carries_the_datagram() {
        let (_, _, _, recs) = parse(&to_vec_writer(PcapOptions::default(), &[(0, stp())]));
        let d = &recs[0].data;
        assert_eq!(d.len(), 229);
        let u = &d[20..];
        assert_eq!((be16(u, 0), be16(u, 2)), (5000, 80));
        assert_eq!(be16(u, 4), 8 + 201, "UDP length");
        assert_eq!(&u[8..], &(0..=200u8).collect::<Vec<_>>()[..]);
        let sum = sum16(
            pseudo_sum(node_ip(NodeId(1)), node_ip(NodeId(258)), PROTO_UDP, 209),
            u,
        );
        assert_eq!(fold(sum), 0, "UDP checksum");
    }

    #[test]
    fn snaplen_nanoseconds_and_bounds() {
        let opts = PcapOptions {
            nanosecond: true,
            snaplen: 30,
            ..PcapOptions::default()
        };
        let huge = packet(5, u32::MAX, Payload::Stp(vec![0xab; 70_000]));
        let many_sacks = packet(
            6,
            0,
            tcp(TcpSegment {
                syn: true,
                sack: (0..10).map(|i| (i * 100, i * 100 + 50)).collect(),
                window: u64::MAX,
                ..TcpSegment::default()
            }),
        );
        let file = to_vec_writer(
            opts,
            &[
                (u64::MAX, huge.clone()),
                (1_000_000_123, many_sacks.clone()),
            ],
        );
        let (magic, snaplen, _, recs) = parse(&file);
        assert_eq!((magic, snaplen), (MAGIC_NANOS, 30));
        assert_eq!(recs[0].secs, u32::MAX, "saturated");
        assert_eq!((recs[0].data.len(), recs[0].orig), (30, 65_535));
        assert_eq!((recs[1].secs, recs[1].frac), (1, 123));
        let mut buf = Vec::new();
        assert_eq!(encode(&huge, &opts, &mut buf), 65_535);
        assert_eq!(buf.len(), 65_535);
        assert_eq!(be16(&buf, 24), 65_515, "UDP length bounded");
        // Window scale (4) + NOPs and SACK with four blocks (36) = 40 bytes of options.
        let orig = encode(&many_sacks, &opts, &mut buf);
        assert_eq!((orig, buf.len()), (80, 80));
        assert_eq!(buf[32] >> 4, 15);
        assert_eq!(buf[20 + 27], 2 + 8 * 4);
        assert!(PcapWriter::new(Vec::new(), PcapOptions { snaplen: 0, ..opts }).is_err());
    }

    struct Failing(usize);
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 < buf.len() {
                return Err(io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn errors_are_kept() {
        let mut w = PcapWriter::new(Failing(24 + 16 + 44), PcapOptions::default()).unwrap();
        w.write(0, &syn_ack()).unwrap();
        assert!(w.write(0, &syn_ack()).is_err());
        assert!(w.error().is_some());
        assert!(w.write(0, &syn_ack()).is_err(), "stays failed");
        assert_eq!(w.records(), 1);
    }

    /// Sends `n` STP-like datagrams to node 1 port 9 at start.
    struct Blaster(u32);
    impl Agent for Blaster {
        fn start(&mut self, ctx: &mut Ctx<'_>) {
            for i in 0..self.0 {
                ctx.send(
                    7,
                    addr(1, 9),
                    FlowId(0),
                    Direction::Forward,
                    28 + 100,
                    Payload::Stp(vec![i as u8; 100]),
                );
            }
        }
        fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("netsim-pcap-{}-{name}.pcap", std::process::id()))
    }

    #[test]
    fn attach_traces_a_link_and_flushes_on_drop() {
        let path = temp_path("attach");
        let mut sim = Sim::new(1);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        // Room for 20 of the 300 packets sent at once.
        let (ab, _) = sim
            .add_duplex(a, b, LinkConfig::simple(10_000_000, 10 * MS, 20))
            .unwrap();
        sim.compute_routes();
        sim.add_agent(a, 7, 0, Box::new(Blaster(300))).unwrap();
        assert!(attach(&mut sim, LinkId(99), &path).is_err(), "unknown link");
        attach(&mut sim, ab, &path).unwrap();
        sim.run_until(SEC_TEST);
        drop(sim);
        let file = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let (_, _, _, recs) = parse(&file);
        assert_eq!(recs.len(), 20, "accepted packets only");
        for r in &recs {
            check_udp_between_a_and_b(&r.data);
        }
    }

    const SEC_TEST: Time = crate::sim::SEC;

    fn check_udp_between_a_and_b(d: &[u8]) {
        assert_eq!(fold(sum16(0, &d[..20])), 0);
        assert_eq!(&d[12..16], &[10, 0, 0, 0]);
        assert_eq!(&d[16..20], &[10, 0, 0, 1]);
        assert_eq!(be16(d, 20 + 4), 108);
    }

    #[test]
    fn attach_with_shares_the_writer() {
        let path = temp_path("shared");
        let mut sim = Sim::new(1);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        let (ab, _) = sim
            .add_duplex(a, b, LinkConfig::simple(10_000_000, 10 * MS, 1000))
            .unwrap();
        sim.compute_routes();
        sim.add_agent(a, 7, 0, Box::new(Blaster(5))).unwrap();
        let opts = PcapOptions {
            flush_every: 0,
            ..PcapOptions::default()
        };
        let w = attach_with(&mut sim, ab, &path, opts).unwrap();
        sim.run_until(SEC_TEST);
        assert_eq!(w.borrow().records(), 5);
        w.borrow_mut().flush().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(parse(&file).3.len(), 5);
        drop(sim);
        drop(w);
        let _ = std::fs::remove_file(&path);
    }
}
