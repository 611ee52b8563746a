//! Datagram decoding: any bytes either parse or are rejected, never panic; whatever parses
//! re-encodes to a datagram that parses to the same packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stp::wire::Packet;

fuzz_target!(|data: &[u8]| {
    let _ = Packet::peek_header(data);
    if let Ok(p) = Packet::parse(data) {
        let mut out = Vec::new();
        p.emit(&mut out);
        let q = Packet::parse(&out).expect("re-encoded packet parses");
        assert_eq!(p.types(), q.types());
        assert_eq!(p.payload, q.payload);
    }
});
