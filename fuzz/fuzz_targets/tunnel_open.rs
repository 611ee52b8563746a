//! The tunnel's datagram opening (`pep::tunnel`), both sides: arbitrary bytes, and mutated copies
//! of genuine initiations, responses and sealed data datagrams, fed to the gateway's
//! `Responder::open` and the terminal's `Initiator::open`. Checks: no panic; a datagram that is
//! not byte-identical to a genuine one never opens as data or completes a handshake; and a
//! rejected datagram changes no state (the genuine datagrams still open afterwards, with the
//! right contents).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pep::keys::PrivateKey;
use pep::tunnel::{Initiator, Opened, Responder, ResponderConfig};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::Instant;

const INDEX: u32 = 0x0102_0304;

struct Pair {
    gw: Responder,
    term: Initiator,
    from: SocketAddr,
    out: Vec<u8>,
}

fn pair() -> Pair {
    let gw_key = PrivateKey::from_bytes([0x11; 32]);
    let term_key = PrivateKey::from_bytes([0x22; 32]);
    let gw = Responder::new(
        gw_key.clone(),
        [term_key.public_key().expect("public key")],
        ResponderConfig::default(),
        Box::new(ChaCha8Rng::seed_from_u64(9)),
    )
    .expect("responder");
    let term = Initiator::new(
        &term_key,
        &gw_key.public_key().expect("public key"),
        INDEX,
        1,
    )
    .expect("initiator");
    Pair {
        gw,
        term,
        from: "192.0.2.7:4000".parse().expect("address"),
        out: Vec::new(),
    }
}

fn now() -> Instant {
    Instant::from_nanos(1_000_000_000)
}

/// Applies the input's mutations to `genuine`: (position, xor) pairs, then an optional
/// truncation or extension chosen by the first byte.
fn mutate(genuine: &[u8], ops: &[u8]) -> Vec<u8> {
    let mut m = genuine.to_vec();
    let Some((&shape, pairs)) = ops.split_first() else {
        return m;
    };
    for p in pairs.chunks(2) {
        if let [pos, x] = *p {
            if !m.is_empty() {
                let i = usize::from(pos) % m.len();
                m[i] ^= x;
            }
        }
    }
    match shape % 4 {
        1 => m.truncate(usize::from(shape / 4) % (m.len() + 1)),
        2 => m.extend(std::iter::repeat_n(shape, usize::from(shape / 4))),
        _ => {}
    }
    m
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut p = pair();
    let initiation = p.term.initiation().to_vec();
    match mode % 4 {
        // Raw bytes at both sides, before and after the handshake.
        0 => {
            let _ = p.gw.open(now(), rest, p.from, &mut p.out);
            let _ = p.term.open(rest, &mut p.out);
            establish(&mut p, &initiation);
            for piece in rest.split(|&b| b == 0xfe) {
                let _ = p.gw.open(now(), piece, p.from, &mut p.out);
                let _ = p.term.open(piece, &mut p.out);
            }
            // Whatever arrived, the session still works.
            data_both_ways(&mut p);
        }
        // Mutated initiation at the gateway: accepted only if byte-identical.
        1 => {
            let m = mutate(&initiation, rest);
            let r = p.gw.open(now(), &m, p.from, &mut p.out);
            if matches!(r, Ok(Opened::Reply { .. })) {
                assert_eq!(m, initiation, "a forged initiation was answered");
                return;
            }
            assert_eq!(
                p.gw.session_count(),
                0,
                "a rejected initiation made a session"
            );
            establish(&mut p, &initiation);
            data_both_ways(&mut p);
        }
        // Mutated response at the terminal: establishes only if byte-identical.
        2 => {
            let response = reply(&mut p, &initiation);
            let m = mutate(&response, rest);
            let r = p.term.open(&m, &mut p.out);
            if matches!(r, Ok(Opened::Established)) {
                assert_eq!(m, response, "a forged response established the session");
            } else {
                assert!(!p.term.is_established(), "a rejected response established");
                let r = p.term.open(&response, &mut p.out);
                assert_eq!(
                    r,
                    Ok(Opened::Established),
                    "genuine response after a forged one"
                );
            }
            data_both_ways(&mut p);
        }
        // Mutated sealed data datagrams, both directions.
        _ => {
            establish(&mut p, &initiation);
            let session = p.gw.session_for_addr(p.from).expect("session");
            let up_plain = b"stp datagram up".to_vec();
            let down_plain = b"stp datagram down, a bit longer".to_vec();
            let mut up = Vec::new();
            p.term.seal(&up_plain, &mut up).expect("seal up");
            let mut down = Vec::new();
            p.gw.seal(session, &down_plain, &mut down)
                .expect("seal down");
            let mu = mutate(&up, rest);
            if let Ok(Opened::Data { .. }) = p.gw.open(now(), &mu, p.from, &mut p.out) {
                assert_eq!(mu, up, "a forged data datagram opened at the gateway");
                assert_eq!(p.out, up_plain);
            } else {
                let r = p.gw.open(now(), &up, p.from, &mut p.out);
                assert_eq!(r, Ok(Opened::Data { session }), "genuine after forged (up)");
                assert_eq!(p.out, up_plain);
            }
            let md = mutate(&down, rest);
            if let Ok(Opened::Data { .. }) = p.term.open(&md, &mut p.out) {
                assert_eq!(md, down, "a forged data datagram opened at the terminal");
                assert_eq!(p.out, down_plain);
            } else {
                let r = p.term.open(&down, &mut p.out);
                assert!(
                    matches!(r, Ok(Opened::Data { .. })),
                    "genuine after forged (down): {r:?}"
                );
                assert_eq!(p.out, down_plain);
            }
            // Replays of the genuine datagrams are refused.
            assert!(
                p.gw.open(now(), &up, p.from, &mut p.out).is_err(),
                "replay up opened"
            );
            assert!(
                p.term.open(&down, &mut p.out).is_err(),
                "replay down opened"
            );
        }
    }
});

/// The gateway's answer to the genuine initiation.
fn reply(p: &mut Pair, initiation: &[u8]) -> Vec<u8> {
    let r = p.gw.open(now(), initiation, p.from, &mut p.out);
    assert!(
        matches!(r, Ok(Opened::Reply { .. })),
        "genuine initiation: {r:?}"
    );
    p.out.clone()
}

fn establish(p: &mut Pair, initiation: &[u8]) {
    let response = reply(p, initiation);
    let r = p.term.open(&response, &mut p.out);
    assert_eq!(r, Ok(Opened::Established), "genuine response");
}

/// One fresh datagram each way opens with the right contents.
fn data_both_ways(p: &mut Pair) {
    let session = p.gw.session_for_addr(p.from).expect("session");
    let mut sealed = Vec::new();
    p.term.seal(b"fresh up", &mut sealed).expect("seal up");
    let r = p.gw.open(now(), &sealed, p.from, &mut p.out);
    assert_eq!(r, Ok(Opened::Data { session }));
    assert_eq!(p.out, b"fresh up");
    p.gw.seal(session, b"fresh down", &mut sealed)
        .expect("seal down");
    let r = p.term.open(&sealed, &mut p.out);
    assert!(matches!(r, Ok(Opened::Data { .. })), "{r:?}");
    assert_eq!(p.out, b"fresh down");
}
