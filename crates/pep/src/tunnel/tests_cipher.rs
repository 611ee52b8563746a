//! The tunnel's two cipher suites (`tunnel_cipher`, docs/tunnel.md "Cipher"): each handshakes
//! and carries data, a terminal falls back from AES-256-GCM to ChaCha20-Poly1305 when the
//! gateway drops the former (as a gateway of an older version does), an older terminal (type-1
//! initiations only) is served by a newer gateway, and two suites of one handshake never make
//! two sessions.

use crate::keys::{generate_keypair, PrivateKey, PublicKey};
use crate::tunnel::wire::{TYPE_DATA, TYPE_INITIATION, TYPE_INITIATION_AESGCM};
use crate::tunnel::{
    Cipher, CipherChoice, Error, Initiator, Opened, Responder, ResponderConfig, DATA_OVERHEAD,
};
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::Instant;

const BOTH: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];
const ADDR: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 4);

struct Pair {
    terminal: (PrivateKey, PublicKey),
    gw_pub: PublicKey,
    gw: Responder,
}

fn pair(gateway: CipherChoice) -> Pair {
    let (gw_priv, gw_pub) = generate_keypair().unwrap();
    let terminal = generate_keypair().unwrap();
    let rng = Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(3));
    let mut gw = Responder::new(gw_priv, [terminal.1], ResponderConfig::default(), rng).unwrap();
    gw.set_cipher(gateway);
    Pair {
        terminal,
        gw_pub,
        gw,
    }
}

/// Sends the terminal's initiations as its driver does (one per retry) until one is answered;
/// `drop_type` names a type the path (an older gateway) discards. Returns the sends needed.
fn handshake(p: &mut Pair, ini: &mut Initiator, drop_type: Option<u8>) -> usize {
    let mut out = Vec::new();
    for sends in 1..=4 {
        let d = ini.initiation_to_send().to_vec();
        if Some(d[0]) == drop_type {
            continue;
        }
        match p.gw.open(Instant::ZERO, &d, ADDR, &mut out) {
            Ok(Opened::Reply { .. }) => {
                let mut empty = Vec::new();
                assert_eq!(ini.open(&out, &mut empty), Ok(Opened::Established));
                return sends;
            }
            Err(Error::Malformed) => continue,
            other => panic!("initiation {sends}: {other:?}"),
        }
    }
    panic!("no initiation answered in 4 sends");
}

/// Data both ways on an established pair; checks the bytes and the overhead.
fn carry(p: &mut Pair, ini: &mut Initiator) {
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    for i in 0..50u32 {
        let up = format!("up {i} {}", "x".repeat(i as usize * 20)).into_bytes();
        ini.seal(&up, &mut wire).unwrap();
        assert_eq!(wire[0], TYPE_DATA);
        assert_eq!(wire.len(), up.len() + DATA_OVERHEAD);
        assert!(matches!(
            p.gw.open(Instant::ZERO, &wire, ADDR, &mut plain),
            Ok(Opened::Data { .. })
        ));
        assert_eq!(plain, up);
        let down = format!("down {i}").into_bytes();
        p.gw.seal_to(ADDR, &down, &mut wire).unwrap();
        assert!(matches!(
            ini.open(&wire, &mut plain),
            Ok(Opened::Data { .. })
        ));
        assert_eq!(plain, down);
    }
    // A flipped bit in the ciphertext fails authentication in either suite.
    ini.seal(b"tamper", &mut wire).unwrap();
    let last = wire.len() - 1;
    wire[last] ^= 1;
    assert_eq!(
        p.gw.open(Instant::ZERO, &wire, ADDR, &mut plain),
        Err(Error::AuthFailed)
    );
}

#[test]
fn each_suite_handshakes_and_carries_data() {
    for (cipher, ty) in [
        (Cipher::ChaCha20Poly1305, TYPE_INITIATION),
        (Cipher::Aes256Gcm, TYPE_INITIATION_AESGCM),
    ] {
        let mut p = pair(CipherChoice::Only(cipher));
        let choice = CipherChoice::Only(cipher);
        let mut ini = Initiator::with_cipher(&p.terminal.0, &p.gw_pub, 11, 1, choice).unwrap();
        assert_eq!(ini.initiation()[0], ty);
        assert_eq!(handshake(&mut p, &mut ini, None), 1, "{cipher:?}");
        assert_eq!(ini.cipher(), Some(cipher));
        assert!(!ini.fell_back());
        carry(&mut p, &mut ini);
    }
}

#[test]
fn the_suites_do_not_open_each_others_data() {
    // The same keys cannot come out of two suites (the protocol name is hashed into the
    // handshake), and a datagram sealed under one suite's session is not opened by another.
    let mut a = pair(CipherChoice::Only(Cipher::Aes256Gcm));
    let mut ini_a = Initiator::with_cipher(
        &a.terminal.0,
        &a.gw_pub,
        5,
        1,
        CipherChoice::Only(Cipher::Aes256Gcm),
    )
    .unwrap();
    handshake(&mut a, &mut ini_a, None);
    let mut c = pair(CipherChoice::Only(Cipher::ChaCha20Poly1305));
    let mut ini_c = Initiator::with_cipher(
        &c.terminal.0,
        &c.gw_pub,
        5,
        1,
        CipherChoice::Only(Cipher::ChaCha20Poly1305),
    )
    .unwrap();
    handshake(&mut c, &mut ini_c, None);
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    a.gw.seal_to(ADDR, b"for a", &mut wire).unwrap();
    assert!(ini_c.open(&wire, &mut plain).is_err());
}

#[test]
fn a_gateway_that_drops_aes_initiations_gets_chacha_at_the_next_retry() {
    // An older gateway does not know type 5 and drops it; one with tunnel_cipher =
    // "chacha20-poly1305" drops it as malformed. A terminal offering both (AES-256-GCM first,
    // as `auto` does with AES instructions) gets a session with the other suite on its second
    // send; its rekeys offer the preferred suite first again, and fall back the same way.
    for (gateway, drop) in [
        (CipherChoice::Auto, Some(TYPE_INITIATION_AESGCM)),
        (CipherChoice::Only(Cipher::ChaCha20Poly1305), None),
    ] {
        let mut p = pair(gateway);
        let mut ini = Initiator::with_ciphers(&p.terminal.0, &p.gw_pub, 21, 1, &BOTH).unwrap();
        assert_eq!(ini.initiation()[0], TYPE_INITIATION_AESGCM);
        assert_eq!(handshake(&mut p, &mut ini, drop), 2, "{gateway:?}");
        assert_eq!(ini.cipher(), Some(Cipher::ChaCha20Poly1305));
        assert_eq!(p.gw.session_count(), 1);
        carry(&mut p, &mut ini);
        ini.rekey(&p.terminal.0, &p.gw_pub, 23, 2).unwrap();
        let mut out = Vec::new();
        let aes = ini.initiation_to_send().to_vec();
        assert_eq!(
            aes[0], TYPE_INITIATION_AESGCM,
            "the rekey offers AES first again"
        );
        if drop.is_none() {
            assert_eq!(
                p.gw.open(Instant::ZERO, &aes, ADDR, &mut out),
                Err(Error::Malformed)
            );
        }
        let chacha = ini.initiation_to_send().to_vec();
        assert!(matches!(
            p.gw.open(Instant::ZERO, &chacha, ADDR, &mut out),
            Ok(Opened::Reply { .. })
        ));
        assert_eq!(ini.open(&out, &mut Vec::new()), Ok(Opened::Rekeyed));
        assert_eq!(ini.cipher(), Some(Cipher::ChaCha20Poly1305));
        assert!(
            !ini.fell_back(),
            "a rekey's session is not rekeyed early again: one extra rekey per session"
        );
        carry(&mut p, &mut ini);
    }
}

#[test]
fn a_session_that_fell_back_after_a_lost_initiation_upgrades_at_its_rekey() {
    // The first (AES-256-GCM) initiation is lost on the way (or the gateway was not up yet):
    // the ChaCha20-Poly1305 one a second later makes the session. The gateway accepts both, so
    // the rekey, which offers AES-256-GCM first again, moves the session to it.
    let mut p = pair(CipherChoice::Auto);
    if !Cipher::aes_in_hardware() {
        // This gateway's `auto` refuses AES-256-GCM: the rekey falls back again.
        p.gw.set_cipher(CipherChoice::Only(Cipher::ChaCha20Poly1305));
    }
    let mut ini = Initiator::with_ciphers(&p.terminal.0, &p.gw_pub, 51, 1, &BOTH).unwrap();
    let _lost = ini.initiation_to_send().to_vec();
    let mut out = Vec::new();
    let chacha = ini.initiation_to_send().to_vec();
    assert!(matches!(
        p.gw.open(Instant::ZERO, &chacha, ADDR, &mut out),
        Ok(Opened::Reply { .. })
    ));
    assert_eq!(ini.open(&out, &mut Vec::new()), Ok(Opened::Established));
    assert_eq!(ini.cipher(), Some(Cipher::ChaCha20Poly1305));
    assert!(ini.fell_back(), "the driver rekeys such a session early");
    carry(&mut p, &mut ini);
    ini.rekey(&p.terminal.0, &p.gw_pub, 53, 2).unwrap();
    let aes = ini.initiation_to_send().to_vec();
    match p.gw.open(Instant::ZERO, &aes, ADDR, &mut out) {
        Ok(Opened::Reply { .. }) => {
            assert!(Cipher::aes_in_hardware());
            assert_eq!(ini.open(&out, &mut Vec::new()), Ok(Opened::Rekeyed));
            assert_eq!(ini.cipher(), Some(Cipher::Aes256Gcm));
            assert!(!ini.fell_back());
        }
        other => {
            assert!(!Cipher::aes_in_hardware(), "{other:?}");
            assert_eq!(other, Err(Error::Malformed));
        }
    }
    carry(&mut p, &mut ini);
}

#[test]
fn auto_offers_aes_first_only_with_aes_instructions() {
    let p = pair(CipherChoice::Auto);
    let mut ini = Initiator::new(&p.terminal.0, &p.gw_pub, 25, 1).unwrap();
    let sent: Vec<u8> = (0..3).map(|_| ini.initiation_to_send()[0]).collect();
    if Cipher::aes_in_hardware() {
        assert_eq!(
            sent,
            [
                TYPE_INITIATION_AESGCM,
                TYPE_INITIATION,
                TYPE_INITIATION_AESGCM
            ]
        );
    } else {
        assert_eq!(sent, [TYPE_INITIATION; 3]);
    }
}

#[test]
fn an_older_terminal_is_served_by_a_newer_gateway() {
    // A terminal of the version before the AES suite sends type-1 ChaCha20-Poly1305
    // initiations only: what `tunnel_cipher = "chacha20-poly1305"` sends.
    let mut p = pair(CipherChoice::Auto);
    let old = CipherChoice::Only(Cipher::ChaCha20Poly1305);
    let mut ini = Initiator::with_cipher(&p.terminal.0, &p.gw_pub, 31, 1, old).unwrap();
    for _ in 0..3 {
        assert_eq!(
            ini.initiation_to_send()[0],
            TYPE_INITIATION,
            "one suite only"
        );
    }
    assert_eq!(handshake(&mut p, &mut ini, None), 1);
    assert_eq!(ini.cipher(), Some(Cipher::ChaCha20Poly1305));
    carry(&mut p, &mut ini);
}

#[test]
fn both_suites_of_one_handshake_make_one_session() {
    // A response lost: the terminal's next send is its other suite, with the same timestamp.
    // The gateway drops it as the same handshake offered again (no second session, and not
    // counted as a replay: it is none), and answers the first suite's initiation again from
    // its cache.
    let mut p = pair(CipherChoice::Auto);
    let mut ini = Initiator::with_ciphers(&p.terminal.0, &p.gw_pub, 41, 1, &BOTH).unwrap();
    let first = ini.initiation_to_send().to_vec();
    let second = ini.initiation_to_send().to_vec();
    assert_eq!(
        (first[0], second[0]),
        (TYPE_INITIATION_AESGCM, TYPE_INITIATION)
    );
    let mut out = Vec::new();
    if !Cipher::aes_in_hardware() {
        // `auto` at a gateway without AES instructions accepts ChaCha20-Poly1305 only.
        assert_eq!(
            p.gw.open(Instant::ZERO, &first, ADDR, &mut out),
            Err(Error::Malformed)
        );
        assert_eq!(handshake(&mut p, &mut ini, None), 2);
        assert_eq!(ini.cipher(), Some(Cipher::ChaCha20Poly1305));
        return;
    }
    assert!(matches!(
        p.gw.open(Instant::ZERO, &first, ADDR, &mut out),
        Ok(Opened::Reply { .. })
    ));
    assert_eq!(
        p.gw.open(Instant::ZERO, &second, ADDR, &mut Vec::new()),
        Err(Error::OtherSuite)
    );
    assert_eq!(p.gw.session_count(), 1);
    assert_eq!(p.gw.counters().replays, 0);
    assert_eq!(p.gw.sessions_by_cipher()[Cipher::Aes256Gcm.index()], 1);
    assert_eq!(p.gw.sessions_by_cipher().iter().sum::<u64>(), 1);
    // The same bytes from another address are a replay, as is an older timestamp.
    let elsewhere = SocketAddr::new(ADDR.ip(), 5);
    assert_eq!(
        p.gw.open(Instant::ZERO, &second, elsewhere, &mut Vec::new()),
        Err(Error::Replay(1))
    );
    assert_eq!(p.gw.counters().replays, 1);
    let third = ini.initiation_to_send().to_vec();
    assert_eq!(third, first, "each suite's initiation bytes never change");
    let mut reply = Vec::new();
    assert!(matches!(
        p.gw.open(Instant::ZERO, &third, ADDR, &mut reply),
        Ok(Opened::Reply { .. })
    ));
    assert_eq!(reply, out);
    assert_eq!(ini.open(&reply, &mut Vec::new()), Ok(Opened::Established));
    assert_eq!(ini.cipher(), Some(Cipher::Aes256Gcm));
    carry(&mut p, &mut ini);
}
