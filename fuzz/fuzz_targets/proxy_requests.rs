//! The gateway's request parsers for intercepted TCP connections: SOCKS5 greeting,
//! username/password and CONNECT request (`pep::socks`), the binary target encoding the hop
//! carries (`Target::decode`/`encode`), and the HTTP proxy head (`pep::http_connect`: CONNECT,
//! and absolute-form requests rewritten for forwarding). Checks:
//! no panic; a parser never claims more bytes than it was given; a complete message parses the
//! same from any longer buffer and is reported incomplete (not an error) for every shorter
//! prefix; whatever target parses re-encodes to bytes that decode to the same target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pep::http_connect::{head_end, parse_authority, parse_head, Request, MAX_HEAD_LEN};
use pep::socks::{parse_greeting, parse_request, parse_user_pass, SocksError};
use pep::stream::Target;

fn roundtrip(t: &Target) {
    let mut enc = Vec::new();
    t.encode(&mut enc);
    let (back, n) = Target::decode(&enc).expect("an encoded target decodes");
    assert_eq!(&back, t);
    assert_eq!(n, enc.len());
}

/// Checks a prefix parser's consistency on `buf`.
fn prefix_parser<T: PartialEq + std::fmt::Debug>(
    buf: &[u8],
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, SocksError>,
) -> Option<T> {
    match parse(buf) {
        Ok(Some((v, n))) => {
            assert!(
                n <= buf.len() && n > 0,
                "claimed {n} of {} bytes",
                buf.len()
            );
            let exact = parse(&buf[..n]).expect("the message alone parses");
            assert_eq!(exact, Some((v, n)), "same message alone");
            for cut in 0..n {
                assert!(
                    matches!(parse(&buf[..cut]), Ok(None)),
                    "a prefix of {cut} bytes of a valid message is not reported incomplete"
                );
            }
            exact.map(|(v, _)| v)
        }
        Ok(None) => None,
        Err(_) => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, buf)) = data.split_first() else {
        return;
    };
    match mode % 5 {
        0 => {
            prefix_parser(buf, parse_greeting);
        }
        1 => {
            prefix_parser(buf, parse_user_pass);
        }
        2 => {
            if let Some(t) = prefix_parser(buf, parse_request) {
                roundtrip(&t);
            }
        }
        3 => {
            if let Ok((t, n)) = Target::decode(buf) {
                assert!(n <= buf.len());
                roundtrip(&t);
            }
        }
        _ => {
            let buf = &buf[..buf.len().min(MAX_HEAD_LEN)];
            if let Some(end) = head_end(buf) {
                assert!(end <= buf.len());
                // The head found in a longer buffer is the head of the buffer cut at its end.
                assert_eq!(head_end(&buf[..end]), Some(end));
                if let Ok(request) = parse_head(&buf[..end]) {
                    // A forwarded request's head is one complete head, without control
                    // characters but its line ends (nothing smuggled into the destination).
                    if let Request::Forward { head, .. } = &request {
                        assert_eq!(head_end(head), Some(head.len()));
                        for (i, &b) in head.iter().enumerate() {
                            match b {
                                b'\r' => assert_eq!(head.get(i + 1), Some(&b'\n')),
                                b'\n' => assert_eq!(i.checked_sub(1).map(|p| head[p]), Some(b'\r')),
                                b => assert!(!b.is_ascii_control() || b == b'\t', "byte {b:#x}"),
                            }
                        }
                    }
                    let t = request.target().clone();
                    roundtrip(&t);
                    // What parsed as an authority prints back as one that parses the same.
                    let printed = match &t {
                        Target::Ip(std::net::SocketAddr::V6(a)) => {
                            format!("[{}]:{}", a.ip(), a.port())
                        }
                        other => other.to_string(),
                    };
                    assert_eq!(parse_authority(&printed).ok(), Some(t));
                }
            }
            if let Ok(s) = std::str::from_utf8(buf) {
                if let Ok(t) = parse_authority(s) {
                    roundtrip(&t);
                }
            }
        }
    }
});
