//! The tunnel end to end, sans-IO: handshakes, data both ways, loss/reordering/duplication,
//! tampering, unknown keys, wrong gateway keys, many terminals, limits, and hostile bytes.

use crate::keys::{generate_keypair, PrivateKey, PublicKey};
use crate::tunnel::{
    Counters, Error, Initiator, KeyTable, Opened, Responder, ResponderConfig, DATA_OVERHEAD,
};
use proptest::prelude::*;
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::Instant;

fn addr(i: u16) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, 1], 40000 + i))
}

fn rng() -> Box<rand_chacha::ChaCha8Rng> {
    Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(7))
}

struct Setup {
    gw_pub: PublicKey,
    gw: Responder,
    terminals: Vec<(PrivateKey, PublicKey)>,
}

fn setup(n: usize, config: ResponderConfig) -> Setup {
    let (gw_priv, gw_pub) = generate_keypair().unwrap();
    let terminals: Vec<_> = (0..n).map(|_| generate_keypair().unwrap()).collect();
    let gw = Responder::new(gw_priv, terminals.iter().map(|t| t.1), config, rng()).unwrap();
    Setup {
        gw_pub,
        gw,
        terminals,
    }
}

/// Runs a handshake for terminal `t`; returns the initiator and the gateway's session index.
fn connect(s: &mut Setup, t: usize, ts: u64) -> (Initiator, u32) {
    let mut ini = Initiator::new(&s.terminals[t].0, &s.gw_pub, 1000 + t as u32, ts).unwrap();
    let mut out = Vec::new();
    let session = match s
        .gw
        .open(Instant::ZERO, ini.initiation(), addr(t as u16), &mut out)
    {
        Ok(Opened::Reply { session }) => session,
        other => panic!("initiation not answered: {other:?}"),
    };
    let mut empty = Vec::new();
    assert_eq!(ini.open(&out, &mut empty), Ok(Opened::Established));
    (ini, session)
}

#[test]
fn handshake_and_data_both_ways() {
    let mut s = setup(1, ResponderConfig::default());
    let (mut ini, session) = connect(&mut s, 0, 1);
    assert!(ini.is_established());
    assert_eq!(s.gw.session_peer(session), Some(&s.terminals[0].1));
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    for i in 0..100u32 {
        let msg = format!("terminal to gateway {i}").into_bytes();
        ini.seal(&msg, &mut wire).unwrap();
        assert_eq!(wire.len(), msg.len() + DATA_OVERHEAD);
        assert!(
            !wire.windows(msg.len()).any(|w| w == msg.as_slice()),
            "plaintext visible"
        );
        assert_eq!(
            s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
            Ok(Opened::Data { session })
        );
        assert_eq!(plain, msg);

        let back = format!("gateway to terminal {i}").into_bytes();
        s.gw.seal_to(addr(0), &back, &mut wire).unwrap();
        assert_eq!(
            ini.open(&wire, &mut plain),
            Ok(Opened::Data { session: 1000 })
        );
        assert_eq!(plain, back);
    }
    // Empty STP datagrams are carried too.
    ini.seal(&[], &mut wire).unwrap();
    assert!(s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain).is_ok());
    assert!(plain.is_empty());
    assert_eq!(s.gw.counters().data_opened, 101);
    assert_eq!(ini.counters().data_opened, 100);
    assert_eq!(s.gw.counters().auth_failures, 0);
}

#[test]
fn seal_before_handshake_fails() {
    let s = setup(1, ResponderConfig::default());
    let mut ini = Initiator::new(&s.terminals[0].0, &s.gw_pub, 1, 1).unwrap();
    assert_eq!(ini.seal(b"x", &mut Vec::new()), Err(Error::NotEstablished));
}

#[test]
fn reordered_accepted_duplicates_and_too_old_rejected() {
    let mut s = setup(1, ResponderConfig::default());
    let (mut ini, _) = connect(&mut s, 0, 1);
    let sealed: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| {
            let mut w = Vec::new();
            ini.seal(&i.to_be_bytes(), &mut w).unwrap();
            w
        })
        .collect();
    let mut plain = Vec::new();
    // Deliver 2999 first, then the rest in reverse order: those within 2048 are accepted.
    let mut order: Vec<usize> = (0..3000).rev().collect();
    order.insert(0, 2999);
    let (mut ok, mut replays) = (0, 0);
    for &i in &order {
        match s.gw.open(Instant::ZERO, &sealed[i], addr(0), &mut plain) {
            Ok(_) => {
                assert_eq!(plain, (i as u32).to_be_bytes());
                ok += 1;
            }
            Err(Error::Replay(n)) => {
                assert!(n == 2999 || n <= 2999 - 2048, "nonce {n}");
                replays += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(ok, 2048);
    assert_eq!(replays, 1 + (3000 - 2048));
    assert_eq!(s.gw.counters().replays, replays as u64);
    // Every accepted datagram replayed is rejected again.
    for w in &sealed[2999 - 100..] {
        assert!(matches!(
            s.gw.open(Instant::ZERO, w, addr(0), &mut plain),
            Err(Error::Replay(_))
        ));
    }
}

#[test]
fn tampered_data_is_rejected_counted_and_changes_nothing() {
    let mut s = setup(1, ResponderConfig::default());
    let (mut ini, session) = connect(&mut s, 0, 1);
    let mut wire = Vec::new();
    ini.seal(b"an STP datagram of some length", &mut wire)
        .unwrap();
    let mut plain = Vec::new();
    let before = *s.gw.counters();
    for i in 0..wire.len() {
        for bit in [0x01u8, 0x80] {
            let mut t = wire.clone();
            t[i] ^= bit;
            let r = s.gw.open(Instant::ZERO, &t, addr(9), &mut plain);
            assert!(r.is_err(), "byte {i} bit {bit:#x} accepted");
            assert!(plain.is_empty());
        }
    }
    let after = *s.gw.counters();
    let rejected = (after.auth_failures + after.unknown_session + after.malformed + after.replays)
        - (before.auth_failures + before.unknown_session + before.malformed + before.replays);
    assert_eq!(rejected, 2 * wire.len() as u64);
    assert!(after.auth_failures > 0 && after.unknown_session > 0 && after.malformed > 0);
    assert_eq!(s.gw.session_count(), 1);
    assert_eq!(
        s.gw.session_for_addr(addr(9)),
        None,
        "forged source address learned"
    );
    // The genuine datagram still opens: the window did not move for the forgeries.
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session })
    );
    // Tampering towards the terminal too.
    s.gw.seal(session, b"reply", &mut wire).unwrap();
    for i in 0..wire.len() {
        let mut t = wire.clone();
        t[i] ^= 0x10;
        assert!(ini.open(&t, &mut plain).is_err());
    }
    assert!(ini.open(&wire, &mut plain).is_ok());
    assert_eq!(plain, b"reply");
}

#[test]
fn tampered_initiation_and_response_are_rejected() {
    // Each forged initiation costs a handshake token; allow more than the 109 forgeries.
    let config = ResponderConfig {
        handshake_burst: 1000,
        ..ResponderConfig::default()
    };
    let mut s = setup(1, config);
    let ini = Initiator::new(&s.terminals[0].0, &s.gw_pub, 5, 1).unwrap();
    let mut out = Vec::new();
    for i in 0..ini.initiation().len() {
        let mut t = ini.initiation().to_vec();
        t[i] ^= 0x04;
        assert!(
            s.gw.open(Instant::ZERO, &t, addr(0), &mut out).is_err(),
            "byte {i}"
        );
    }
    assert_eq!(s.gw.session_count(), 0);
    let mut ini = ini;
    assert!(matches!(
        s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut out),
        Ok(Opened::Reply { .. })
    ));
    for i in 0..out.len() {
        let mut t = out.clone();
        t[i] ^= 0x04;
        assert!(ini.open(&t, &mut Vec::new()).is_err(), "byte {i}");
        assert!(!ini.is_established());
    }
    assert_eq!(ini.open(&out, &mut Vec::new()), Ok(Opened::Established));
    // A duplicated response afterwards is a counted replay.
    assert_eq!(ini.open(&out, &mut Vec::new()), Err(Error::Replay(0)));
}

#[test]
fn unknown_terminal_key_is_rejected_counted_and_creates_no_state() {
    let mut s = setup(1, ResponderConfig::default());
    let (stranger, _) = generate_keypair().unwrap();
    let ini = Initiator::new(&stranger, &s.gw_pub, 1, 1).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        assert_eq!(
            s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut out),
            Err(Error::UnknownKey)
        );
        assert!(out.is_empty());
    }
    assert_eq!(s.gw.counters().unknown_key, 3);
    assert_eq!(s.gw.session_count(), 0);
    assert_eq!(s.gw.session_for_addr(addr(0)), None);
}

#[test]
fn wrong_gateway_key_fails() {
    let mut s = setup(1, ResponderConfig::default());
    let (_, not_the_gateway) = generate_keypair().unwrap();
    let mut ini = Initiator::new(&s.terminals[0].0, &not_the_gateway, 1, 1).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut out),
        Err(Error::AuthFailed)
    );
    assert_eq!(s.gw.counters().auth_failures, 1);
    assert_eq!(s.gw.session_count(), 0);
    // And an impostor gateway holding some other key cannot answer a terminal that expects the
    // real gateway: it cannot even read the initiation.
    let (imp_priv, _) = generate_keypair().unwrap();
    let mut impostor = Responder::new(
        imp_priv,
        [s.terminals[0].1],
        ResponderConfig::default(),
        rng(),
    )
    .unwrap();
    let good = Initiator::new(&s.terminals[0].0, &s.gw_pub, 2, 1).unwrap();
    assert_eq!(
        impostor.open(Instant::ZERO, good.initiation(), addr(0), &mut out),
        Err(Error::AuthFailed)
    );
    // A response from the real gateway to some other handshake does not establish this one.
    let mut other = Initiator::new(&s.terminals[0].0, &s.gw_pub, 1, 2).unwrap();
    s.gw.open(Instant::ZERO, other.initiation(), addr(0), &mut out)
        .unwrap();
    assert_eq!(ini.open(&out, &mut Vec::new()), Err(Error::AuthFailed));
    assert!(!ini.is_established());
    assert_eq!(other.open(&out, &mut Vec::new()), Ok(Opened::Established));
}

#[test]
fn retransmitted_initiation_is_idempotent_and_old_ones_are_replays() {
    let mut s = setup(1, ResponderConfig::default());
    let mut ini = Initiator::new(&s.terminals[0].0, &s.gw_pub, 1, 10).unwrap();
    let mut first = Vec::new();
    let Ok(Opened::Reply { session }) =
        s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut first)
    else {
        panic!()
    };
    for _ in 0..100 {
        let mut again = Vec::new();
        assert_eq!(
            s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut again),
            Ok(Opened::Reply { session })
        );
        assert_eq!(again, first);
    }
    assert_eq!(s.gw.session_count(), 1);
    assert_eq!(s.gw.counters().duplicate_initiations, 100);
    assert_eq!(ini.open(&first, &mut Vec::new()), Ok(Opened::Established));

    // A new handshake with a newer timestamp is accepted; the old initiation, now superseded,
    // is a replay (its timestamp is not newer), as is a new one with an old timestamp.
    let (_ini2, _) = connect(&mut s, 0, 11);
    let mut out = Vec::new();
    assert_eq!(
        s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut out),
        Err(Error::Replay(10))
    );
    let stale = Initiator::new(&s.terminals[0].0, &s.gw_pub, 3, 11).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, stale.initiation(), addr(0), &mut out),
        Err(Error::Replay(11))
    );
    assert_eq!(s.gw.session_count(), 2);
}

#[test]
fn fifty_terminals_have_distinct_sessions_on_one_responder() {
    let mut s = setup(50, ResponderConfig::default());
    let mut tunnels: Vec<(Initiator, u32)> = (0..50).map(|t| connect(&mut s, t, 1)).collect();
    assert_eq!(s.gw.session_count(), 50);
    let mut sessions: Vec<u32> = tunnels.iter().map(|t| t.1).collect();
    sessions.sort_unstable();
    sessions.dedup();
    assert_eq!(sessions.len(), 50);
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    for round in 0..3u8 {
        for (t, (ini, session)) in tunnels.iter_mut().enumerate() {
            let msg = [t as u8, round];
            ini.seal(&msg, &mut wire).unwrap();
            assert_eq!(
                s.gw.open(Instant::ZERO, &wire, addr(t as u16), &mut plain),
                Ok(Opened::Data { session: *session })
            );
            assert_eq!(plain, msg);
            assert_eq!(s.gw.session_peer(*session), Some(&s.terminals[t].1));
            s.gw.seal_to(addr(t as u16), &msg, &mut wire).unwrap();
            assert!(ini.open(&wire, &mut plain).is_ok());
            assert_eq!(plain, msg);
        }
    }
    // A datagram sealed for one terminal's session opens on no other: the index routes it, and
    // readdressed to another session it fails authentication.
    let mut w0 = Vec::new();
    s.gw.seal(tunnels[0].1, b"for terminal 0", &mut w0).unwrap();
    assert!(tunnels[1].0.open(&w0, &mut plain).is_err());
}

#[test]
fn session_limits_are_respected() {
    let config = ResponderConfig {
        max_sessions: 5,
        max_sessions_per_key: 2,
        ..ResponderConfig::default()
    };
    let mut s = setup(8, config);
    // One terminal re-handshaking many times keeps at most two sessions.
    let mut last = None;
    for ts in 1..=20 {
        last = Some(connect(&mut s, 0, ts));
        assert!(s.gw.session_count() <= 2);
    }
    assert_eq!(s.gw.session_count(), 2);
    // The newest session works.
    let (mut ini, session) = last.unwrap();
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    ini.seal(b"x", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session })
    );
    // Other terminals fill up to the total cap; the next is refused and counted.
    for t in 1..=3 {
        connect(&mut s, t, 1);
    }
    assert_eq!(s.gw.session_count(), 5);
    let refused = Initiator::new(&s.terminals[4].0, &s.gw_pub, 9, 1).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        s.gw.open(Instant::ZERO, refused.initiation(), addr(4), &mut out),
        Err(Error::SessionLimit)
    );
    assert_eq!(s.gw.counters().session_limit, 1);
    assert_eq!(s.gw.session_count(), 5);
    // A terminal at its own cap may still re-handshake (it replaces its oldest session).
    connect(&mut s, 0, 100);
    assert_eq!(s.gw.session_count(), 5);
    // Idle sessions expire.
    assert_eq!(
        s.gw.expire_idle(Instant::from_nanos(61_000_000_000), 60_000),
        5
    );
    assert_eq!(s.gw.session_count(), 0);
    connect(&mut s, 4, 1);
}

#[test]
fn handshakes_are_rate_limited() {
    let config = ResponderConfig {
        handshakes_per_second: 10,
        handshake_burst: 5,
        ..ResponderConfig::default()
    };
    let mut s = setup(1, config);
    let (stranger, _) = generate_keypair().unwrap();
    let mut out = Vec::new();
    let mut results = Vec::new();
    for ts in 0..8 {
        let ini = Initiator::new(&stranger, &s.gw_pub, 1, ts).unwrap();
        results.push(s.gw.open(Instant::ZERO, ini.initiation(), addr(0), &mut out));
    }
    assert_eq!(
        results
            .iter()
            .filter(|r| **r == Err(Error::UnknownKey))
            .count(),
        5
    );
    assert_eq!(s.gw.counters().rate_limited, 3);
    // 100 ms later one more token is there.
    let ini = Initiator::new(&s.terminals[0].0, &s.gw_pub, 1, 1).unwrap();
    assert!(s
        .gw
        .open(
            Instant::from_nanos(100_000_000),
            ini.initiation(),
            addr(0),
            &mut out
        )
        .is_ok());
}

#[test]
fn invalid_config_names_the_field() {
    let (k, _) = generate_keypair().unwrap();
    let config = ResponderConfig {
        max_sessions: 0,
        ..ResponderConfig::default()
    };
    let e = Responder::new(k, [], config, rng()).err().unwrap();
    assert!(e.to_string().contains("max_sessions"), "{e}");
}

#[test]
fn counters_start_at_zero() {
    let s = setup(1, ResponderConfig::default());
    assert_eq!(*s.gw.counters(), Counters::default());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes, and arbitrary bytes behind each valid type byte and a live index, never
    /// panic either side, are always rejected and create no session.
    #[test]
    fn garbage_never_panics_or_creates_state(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        ty in 0u8..5,
    ) {
        let mut s = setup(1, ResponderConfig::default());
        let (mut ini, session) = connect(&mut s, 0, 1);
        let mut out = Vec::new();
        let mut framed = vec![ty];
        framed.extend_from_slice(&session.to_be_bytes());
        framed.extend_from_slice(&data);
        for d in [&data, &framed] {
            prop_assert!(s.gw.open(Instant::ZERO, d, addr(1), &mut out).is_err());
            if d.len() == crate::tunnel::wire::UNKNOWN_SESSION_LEN
                && d[0] == crate::tunnel::wire::TYPE_UNKNOWN_SESSION
                && d == &framed
            {
                // Type 4 with the live index and nothing behind it is not garbage: it is the
                // gateway's unknown-session notice, which the terminal takes as a hint to
                // handshake again (unauthenticated, so it changes nothing else).
                prop_assert_eq!(ini.open(d, &mut out), Ok(Opened::SessionUnknown));
            } else {
                prop_assert!(ini.open(d, &mut out).is_err());
            }
        }
        prop_assert_eq!(s.gw.session_count(), 1);
        prop_assert_eq!(s.gw.session_for_addr(addr(1)), None);
    }
}

/// A rekey, step by step: the old session carries both ways until the new one is up; a
/// datagram the gateway sealed on the old session before it knew opens during the overlap;
/// after it the old session is erased on both sides (its datagrams are refused as of an
/// unknown session) and the gateway keeps only the new one.
#[test]
fn a_rekey_overlaps_the_old_session_then_erases_it_on_both_sides() {
    let overlap_ms = 500;
    let mut s = setup(
        1,
        ResponderConfig {
            rekey_overlap_ms: overlap_ms,
            ..ResponderConfig::default()
        },
    );
    let (mut ini, old) = connect(&mut s, 0, 1);
    let (mut wire, mut plain, mut resp) = (Vec::new(), Vec::new(), Vec::new());
    ini.rekey(&s.terminals[0].0, &s.gw_pub, 2001, 2).unwrap();
    assert!(ini.rekeying() && ini.is_established());
    // While the rekey is under way, the old session still seals.
    ini.seal(b"before", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session: old })
    );
    let t1 = Instant::from_nanos(1_000_000);
    let Ok(Opened::Reply { session: new }) = s.gw.open(t1, ini.initiation(), addr(0), &mut resp)
    else {
        panic!("rekey initiation refused");
    };
    assert_ne!(new, old);
    assert_eq!(s.gw.counters().rekeys, 1);
    // The gateway keeps replying on the old session until the terminal uses the new one.
    let mut late = Vec::new();
    s.gw.seal_to(addr(0), b"in flight", &mut late).unwrap();
    assert_eq!(ini.open(&resp, &mut plain), Ok(Opened::Rekeyed));
    assert!(!ini.rekeying() && ini.has_previous());
    assert_eq!(
        ini.open(&late, &mut plain),
        Ok(Opened::Data { session: 1000 })
    );
    assert_eq!(plain, b"in flight");
    // The terminal now seals on the new session; the gateway answers on it.
    ini.seal(b"after", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(t1, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session: new })
    );
    s.gw.seal_to(addr(0), b"new", &mut wire).unwrap();
    assert_eq!(
        ini.open(&wire, &mut plain),
        Ok(Opened::Data { session: 2001 })
    );
    assert_eq!(s.gw.session_count(), 2);
    // The overlap passes: the terminal erases its old session, the gateway its own.
    s.gw.seal(old, b"too late", &mut late).unwrap();
    ini.erase_previous();
    assert!(!ini.has_previous());
    assert_eq!(
        ini.open(&late, &mut plain),
        Err(Error::UnknownSession(1000))
    );
    let t2 = Instant::from_nanos((1 + overlap_ms) * 1_000_000);
    ini.seal(b"later", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(t2, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session: new })
    );
    assert_eq!(s.gw.session_count(), 1);
    assert!(s.gw.seal(old, b"x", &mut late).is_err());
}

/// Rotating the gateway's key under load: while terminals send, the gateway takes a next key;
/// a terminal that knows only the new key connects, an old-key terminal rekeys during the
/// changeover, the new key is promoted; no session fails and no datagram is refused at any
/// step; only then do new initiations to the old key fail.
#[test]
fn rotating_the_gateway_key_under_load_fails_no_session() {
    let mut s = setup(2, ResponderConfig::default());
    let (new_priv, new_pub) = generate_keypair().unwrap();
    let old_pub = s.gw_pub;
    let (mut a, _) = connect(&mut s, 0, 1);
    let mut plain = Vec::new();
    let mut ms = 0u64;
    // Each round: every live terminal sends a datagram and gets one back.
    let traffic = |s: &mut Setup, ts: &mut [(&mut Initiator, u16)], ms: &mut u64| {
        let (mut wire, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..50 {
            *ms += 1;
            let now = Instant::from_nanos(*ms * 1_000_000);
            for (ini, port) in ts.iter_mut() {
                ini.seal(b"up", &mut wire).unwrap();
                assert!(matches!(
                    s.gw.open(now, &wire, addr(*port), &mut plain),
                    Ok(Opened::Data { .. })
                ));
                s.gw.seal_to(addr(*port), b"down", &mut wire).unwrap();
                assert!(matches!(
                    ini.open(&wire, &mut plain),
                    Ok(Opened::Data { .. })
                ));
            }
        }
    };
    traffic(&mut s, &mut [(&mut a, 0)], &mut ms);
    // 1. The gateway also accepts its next key.
    s.gw.set_next_key(Some(new_priv));
    traffic(&mut s, &mut [(&mut a, 0)], &mut ms);
    // 2. A terminal configured with the new key connects; the old-key one rekeys meanwhile.
    s.gw_pub = new_pub;
    let (mut b, _) = connect(&mut s, 1, 1);
    a.rekey(&s.terminals[0].0, &old_pub, 3001, 2).unwrap();
    let mut resp = Vec::new();
    let now = Instant::from_nanos(ms * 1_000_000);
    assert!(matches!(
        s.gw.open(now, a.initiation(), addr(0), &mut resp),
        Ok(Opened::Reply { .. })
    ));
    assert_eq!(a.open(&resp, &mut plain), Ok(Opened::Rekeyed));
    traffic(&mut s, &mut [(&mut a, 0), (&mut b, 1)], &mut ms);
    // 3. Terminal a moves to the new key (a rekey addressed to it), then the key is promoted.
    a.rekey(&s.terminals[0].0, &new_pub, 3003, 3).unwrap();
    assert!(matches!(
        s.gw.open(now, a.initiation(), addr(0), &mut resp),
        Ok(Opened::Reply { .. })
    ));
    assert_eq!(a.open(&resp, &mut plain), Ok(Opened::Rekeyed));
    assert!(s.gw.promote_next_key());
    traffic(&mut s, &mut [(&mut a, 0), (&mut b, 1)], &mut ms);
    let c = *s.gw.counters();
    assert_eq!(
        (c.auth_failures, c.replays, c.unknown_session),
        (0, 0, 0),
        "{c:?}"
    );
    // Now the old key is refused, the new one accepted.
    let late = Initiator::new(&s.terminals[0].0, &old_pub, 5001, 9).unwrap();
    assert_eq!(
        s.gw.open(now, late.initiation(), addr(0), &mut resp),
        Err(Error::AuthFailed)
    );
    let fresh = Initiator::new(&s.terminals[1].0, &new_pub, 5003, 9).unwrap();
    assert!(matches!(
        s.gw.open(now, fresh.initiation(), addr(1), &mut resp),
        Ok(Opened::Reply { .. })
    ));
}

/// A stolen terminal key (terminal 0's, in the attacker's hands) gives its holder terminal 0's
/// identity and nothing more: it cannot read terminal 1's datagrams (not with a session of its
/// own, not by trying them under its own keys), cannot inject into terminal 1's session, and
/// every session it makes belongs to terminal 0's key, so whatever it opens is attributed (and
/// limited, and revocable) as terminal 0.
#[test]
fn a_stolen_terminal_key_cannot_read_or_act_as_another_terminal() {
    let mut s = setup(2, ResponderConfig::default());
    let (mut victim, victim_session) = connect(&mut s, 1, 1);
    let (mut wire, mut plain, mut resp) = (Vec::new(), Vec::new(), Vec::new());
    // The attacker makes its own session with the stolen key (from its own address).
    let mut thief = Initiator::new(&s.terminals[0].0, &s.gw_pub, 1001, 5).unwrap();
    let Ok(Opened::Reply {
        session: thief_session,
    }) =
        s.gw.open(Instant::ZERO, thief.initiation(), addr(9), &mut resp)
    else {
        panic!("the stolen key is a valid key");
    };
    assert_eq!(thief.open(&resp, &mut plain), Ok(Opened::Established));
    assert_eq!(s.gw.session_peer(thief_session), Some(&s.terminals[0].1));
    // Terminal 1's traffic, both ways, as an on-path attacker records it.
    victim.seal(b"secret upstream", &mut wire).unwrap();
    let up = wire.clone();
    s.gw.seal_to(addr(1), b"secret downstream", &mut wire)
        .unwrap();
    let down = wire.clone();
    // Readdressed to the thief's own session, its keys do not open them.
    let mut readdressed = down.clone();
    readdressed[1..5].copy_from_slice(&1001u32.to_be_bytes());
    assert_eq!(thief.open(&readdressed, &mut plain), Err(Error::AuthFailed));
    assert!(plain.is_empty());
    // Sealed under the thief's session and sent to terminal 1's gateway index: refused.
    thief
        .seal(b"open a stream as terminal 1", &mut wire)
        .unwrap();
    wire[1..5].copy_from_slice(&victim_session.to_be_bytes());
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(9), &mut plain),
        Err(Error::AuthFailed)
    );
    // A recorded datagram of terminal 1 replayed from elsewhere opens once at most (it was
    // never delivered here, so once), and never as the thief's session.
    assert_eq!(
        s.gw.open(Instant::ZERO, &up, addr(9), &mut plain),
        Ok(Opened::Data {
            session: victim_session
        })
    );
    assert_eq!(
        s.gw.open(Instant::ZERO, &up, addr(9), &mut plain),
        Err(Error::Replay(0))
    );
    // Terminal 1's session is intact and still its own.
    assert_eq!(s.gw.session_peer(victim_session), Some(&s.terminals[1].1));
    victim.seal(b"still mine", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(1), &mut plain),
        Ok(Opened::Data {
            session: victim_session
        })
    );
}

/// A reload of the gateway's key files (`Responder::set_keys`): handshakes to the keys it now
/// holds are answered, to the key it dropped refused; a session made under the dropped key
/// carries on both ways.
#[test]
fn set_keys_replaces_the_static_keys_and_keeps_live_sessions() {
    let mut s = setup(2, ResponderConfig::default());
    let old_pub = s.gw_pub;
    let (old_priv_again, _) = generate_keypair().unwrap();
    let (new_priv, new_pub) = generate_keypair().unwrap();
    let (mut a, session) = connect(&mut s, 0, 1);
    assert_eq!(s.gw.public_keys(), vec![old_pub]);
    // The key files now hold a new current key and a next one; the old key is gone.
    let other_pub = old_priv_again.public_key().unwrap();
    s.gw.set_keys(new_priv, Some(old_priv_again));
    assert_eq!(s.gw.public_keys(), vec![new_pub, other_pub]);
    let (mut wire, mut plain, mut resp) = (Vec::new(), Vec::new(), Vec::new());
    a.seal(b"still here", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session })
    );
    assert_eq!(plain, b"still here");
    s.gw.seal_to(addr(0), b"and back", &mut wire).unwrap();
    assert!(matches!(a.open(&wire, &mut plain), Ok(Opened::Data { .. })));
    let late = Initiator::new(&s.terminals[1].0, &old_pub, 7001, 5).unwrap();
    assert_eq!(
        s.gw.open(Instant::ZERO, late.initiation(), addr(1), &mut resp),
        Err(Error::AuthFailed)
    );
    for (key, ts) in [(new_pub, 6), (other_pub, 7)] {
        let fresh = Initiator::new(&s.terminals[1].0, &key, 7003, ts).unwrap();
        assert!(matches!(
            s.gw.open(Instant::ZERO, fresh.initiation(), addr(1), &mut resp),
            Ok(Opened::Reply { .. })
        ));
    }
}

/// Revocation (`Responder::set_allowed` without a key): at once the revoked terminal's
/// datagrams open nothing and its handshakes are refused as an unknown key; its session still
/// seals for `REVOKED_LINGER` (the resets of its connections), then it is erased. The other
/// terminal is untouched.
#[test]
fn a_revoked_terminal_opens_nothing_at_once_and_its_session_is_erased_after_the_linger() {
    let mut s = setup(2, ResponderConfig::default());
    let (mut kept, kept_session) = connect(&mut s, 0, 1);
    let (mut gone, gone_session) = connect(&mut s, 1, 1);
    let t0 = Instant::from_nanos(1_000_000_000);
    let (added, removed) = s.gw.set_allowed(t0, [s.terminals[0].1]);
    assert_eq!((added, removed), (vec![], vec![s.terminals[1].1]));
    assert!(s.gw.session_revoked(gone_session));
    assert!(!s.gw.session_revoked(kept_session));
    let (mut wire, mut plain, mut resp) = (Vec::new(), Vec::new(), Vec::new());
    gone.seal(b"after the revocation", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(t0, &wire, addr(1), &mut plain),
        Err(Error::UnknownSession(gone_session))
    );
    assert!(plain.is_empty());
    // Its resets still leave, sealed under the lingering session.
    s.gw.seal_to(addr(1), b"reset", &mut wire).unwrap();
    assert!(matches!(
        gone.open(&wire, &mut plain),
        Ok(Opened::Data { .. })
    ));
    let again = Initiator::new(&s.terminals[1].0, &s.gw_pub, 8001, 9).unwrap();
    assert_eq!(
        s.gw.open(t0, again.initiation(), addr(1), &mut resp),
        Err(Error::UnknownKey)
    );
    let erase_at = t0 + crate::tunnel::REVOKED_LINGER;
    assert_eq!(s.gw.next_revoked_expiry(), Some(erase_at));
    assert_eq!(s.gw.expire_revoked(t0), 0);
    assert_eq!(s.gw.expire_revoked(erase_at), 1);
    assert_eq!(s.gw.session_count(), 1);
    assert!(s.gw.seal_to(addr(1), b"late", &mut wire).is_err());
    assert_eq!(s.gw.next_revoked_expiry(), None);
    kept.seal(b"kept", &mut wire).unwrap();
    assert_eq!(
        s.gw.open(erase_at, &wire, addr(0), &mut plain),
        Ok(Opened::Data {
            session: kept_session
        })
    );
}

/// Handshake of `key` from `from` with `gw`; the established initiator and the session index.
fn handshake_at(
    gw: &mut Responder,
    gw_pub: &PublicKey,
    key: &PrivateKey,
    from: SocketAddr,
    ts: u64,
    now: Instant,
) -> (Initiator, u32) {
    let mut ini = Initiator::new(key, gw_pub, 7, ts).unwrap();
    let mut out = Vec::new();
    let session = match gw.open(now, ini.initiation(), from, &mut out) {
        Ok(Opened::Reply { session }) => session,
        other => panic!("initiation not answered: {other:?}"),
    };
    assert_eq!(ini.open(&out, &mut Vec::new()), Ok(Opened::Established));
    (ini, session)
}

/// What `gw` makes of a data datagram `ini` seals, sent from `from` at `now`.
fn send_data(gw: &mut Responder, ini: &mut Initiator, from: SocketAddr, now: Instant) -> Opened {
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    ini.seal(b"data", &mut wire).unwrap();
    match gw.open(now, &wire, from, &mut plain) {
        Ok(o) => o,
        Err(e) => panic!("data from {from} refused: {e}"),
    }
}

#[test]
fn workers_sharing_a_key_table_hold_the_per_key_limit_and_replay_protection_together() {
    // A gateway of two workers: one key, one allow-list, one table. Three terminals share a key
    // (a cloned configuration) and the source-port steering spreads them over both workers.
    let (gw_priv, gw_pub) = generate_keypair().unwrap();
    let (t_priv, t_pub) = generate_keypair().unwrap();
    let table = KeyTable::new();
    let mut workers: Vec<Responder> = (0..2u64)
        .map(|i| {
            let rng = Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(i));
            let mut r =
                Responder::new(gw_priv.clone(), [t_pub], ResponderConfig::default(), rng).unwrap();
            r.join(&table);
            r
        })
        .collect();
    let now = Instant::ZERO;
    let (mut a, _) = handshake_at(&mut workers[0], &gw_pub, &t_priv, addr(1), 1, now);
    let (mut b, _) = handshake_at(&mut workers[1], &gw_pub, &t_priv, addr(2), 2, now);
    assert!(matches!(
        send_data(&mut workers[0], &mut a, addr(1), now),
        Opened::Data { .. }
    ));
    // The third session of the key (max_sessions_per_key = 2) evicts the oldest, held by the
    // other worker: its next datagram finds no session.
    let (mut c, _) = handshake_at(&mut workers[1], &gw_pub, &t_priv, addr(3), 3, now);
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    a.seal(b"data", &mut wire).unwrap();
    assert!(matches!(
        workers[0].open(now, &wire, addr(1), &mut plain),
        Err(Error::UnknownSession(_))
    ));
    assert_eq!(workers[0].session_count(), 0);
    for (ini, from) in [(&mut b, addr(2)), (&mut c, addr(3))] {
        assert!(matches!(
            send_data(&mut workers[1], ini, from, now),
            Opened::Data { .. }
        ));
    }
    // An initiation accepted by one worker is a replay at the other (another source port).
    let mut out = Vec::new();
    assert_eq!(
        workers[0].open(now, c.initiation(), addr(9), &mut out),
        Err(Error::Replay(3))
    );
}

#[test]
fn sessions_of_one_key_from_two_addresses_are_two_tunnels_not_a_rekey() {
    // A terminal with two workers (or two terminals sharing a key) holds a session from each
    // address: the newer one's traffic does not retire the older one.
    let mut s = setup(1, ResponderConfig::default());
    let key = s.terminals[0].0.clone();
    let t0 = Instant::ZERO;
    let (mut first, one) = handshake_at(&mut s.gw, &s.gw_pub, &key, addr(1), 1, t0);
    let (mut second, two) = handshake_at(&mut s.gw, &s.gw_pub, &key, addr(2), 2, t0);
    assert_eq!(
        send_data(&mut s.gw, &mut second, addr(2), t0),
        Opened::Data { session: two }
    );
    // Well past the rekey overlap (10 s) both still carry data.
    for secs in [5u64, 20, 40] {
        let now = Instant::from_nanos(secs * 1_000_000_000);
        assert_eq!(
            send_data(&mut s.gw, &mut first, addr(1), now),
            Opened::Data { session: one }
        );
        assert_eq!(
            send_data(&mut s.gw, &mut second, addr(2), now),
            Opened::Data { session: two }
        );
    }
    assert_eq!(s.gw.session_count(), 2);
}

/// The hop's data path seals each STP datagram where STP wrote it (behind room for the header,
/// after the datagrams already batched) and opens received ones where they lie: the same bytes
/// on the wire as sealing into a fresh buffer, the batch before it untouched, and a datagram
/// tampered with or replayed refused and counted as before.
#[test]
fn sealing_and_opening_in_place_match_the_copying_path() {
    use crate::tunnel::wire::DATA_HEADER_LEN;
    let mut s = setup(1, ResponderConfig::default());
    let (mut ini, session) = connect(&mut s, 0, 1);
    let mut batch = vec![0xAB; 300];
    for (i, msg) in [&b"first"[..], &[7u8; 1400][..], b""]
        .into_iter()
        .enumerate()
    {
        // Sealed in place at the end of the batch, from the terminal.
        let start = batch.len();
        batch.extend_from_slice(&[0; DATA_HEADER_LEN]);
        batch.extend_from_slice(msg);
        ini.seal_in_place(&mut batch, start).unwrap();
        assert_eq!(
            &batch[..300],
            &[0xAB; 300][..],
            "the batch before it is untouched"
        );
        assert_eq!(batch.len() - start, msg.len() + DATA_OVERHEAD);
        let mut wire = batch[start..].to_vec();
        // Opened in place at the gateway: the STP datagram is the range given.
        let (opened, range) =
            s.gw.open_in_place(Instant::ZERO, &mut wire, addr(0))
                .unwrap();
        assert_eq!(opened, Opened::Data { session });
        assert_eq!(&wire[range], msg, "datagram {i}");
        // Replayed: refused, whichever path opens it.
        let mut again = batch[start..].to_vec();
        assert_eq!(
            s.gw.open_in_place(Instant::ZERO, &mut again, addr(0)),
            Err(Error::Replay(i as u64))
        );
        let mut plain = Vec::new();
        assert!(s
            .gw
            .open(Instant::ZERO, &batch[start..], addr(0), &mut plain)
            .is_err());
        // Back, sealed in place by the gateway, opened in place by the terminal; a flipped
        // bit fails authentication and changes nothing.
        let mut back = vec![0; DATA_HEADER_LEN];
        back.extend_from_slice(msg);
        s.gw.seal_to_in_place(addr(0), &mut back, 0, false).unwrap();
        let mut bad = back.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(ini.open_in_place(&mut bad), Err(Error::AuthFailed));
        let (opened, range) = ini.open_in_place(&mut back).unwrap();
        assert_eq!(opened, Opened::Data { session: 1000 });
        assert_eq!(&back[range], msg);
    }
    assert_eq!(s.gw.counters().data_opened, 3);
    assert_eq!(ini.counters().data_opened, 3);
    assert_eq!(ini.counters().auth_failures, 3, "one flipped bit a round");
    // Anything but a data datagram is not opened in place (the hop hands it to `open`).
    let mut initiation = ini.initiation().to_vec();
    assert_eq!(ini.open_in_place(&mut initiation), Err(Error::Malformed));
}

/// Capabilities: each end's datagram is opened on its session and noted there (nothing else is
/// delivered); a replayed one is refused; a tampered one fails authentication; sealed
/// bytes that are not a capabilities plaintext are malformed. Data sealed afterwards still
/// opens (one nonce sequence for both).
#[test]
fn capabilities_are_noted_on_the_session_and_guarded_like_data() {
    use crate::tunnel::wire::{TYPE_CAPABILITIES, TYPE_DATA};
    let mut s = setup(1, ResponderConfig::default());
    let (mut ini, session) = connect(&mut s, 0, 1);
    assert!(!ini.peer_skips_stp_checksum(), "nothing announced yet");
    let caps = ini.capabilities_datagram().unwrap();
    assert_eq!(caps.len(), 37);
    assert_eq!(caps[0], TYPE_CAPABILITIES);
    let mut out = Vec::new();
    assert_eq!(
        s.gw.open(Instant::ZERO, &caps, addr(0), &mut out),
        Ok(Opened::Capabilities { session })
    );
    assert!(out.is_empty());
    assert_eq!(
        s.gw.open(Instant::ZERO, &caps, addr(0), &mut out),
        Err(Error::Replay(0))
    );
    let reply = s.gw.capabilities_datagram(session).unwrap();
    let mut tampered = reply.clone();
    tampered[20] ^= 1;
    assert_eq!(ini.open(&tampered, &mut out), Err(Error::AuthFailed));
    assert!(!ini.peer_skips_stp_checksum());
    assert!(matches!(
        ini.open(&reply, &mut out),
        Ok(Opened::Capabilities { .. })
    ));
    assert!(ini.peer_skips_stp_checksum());
    // Data sealed as type 3 but relabelled type 7: its plaintext is not capabilities.
    let (mut wire, mut plain) = (Vec::new(), Vec::new());
    ini.seal(&[0x10; 8], &mut wire).unwrap();
    wire[0] = TYPE_CAPABILITIES;
    assert_eq!(wire.len(), 37);
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Err(Error::Malformed)
    );
    // And data still flows on the same nonce sequence.
    ini.seal(b"after", &mut wire).unwrap();
    assert_eq!(wire[0], TYPE_DATA);
    assert_eq!(
        s.gw.open(Instant::ZERO, &wire, addr(0), &mut plain),
        Ok(Opened::Data { session })
    );
    assert_eq!(plain, b"after");
}
