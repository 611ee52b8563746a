//! `satstp leo` end to end: a traced Iridium New York - San Francisco path across the seam is
//! read by the emulators' delay-trace parser, drives `emulate udp`, and drives a simulated STP
//! and TCP transfer in a scenario; `--leo` works; bad input is named.

mod common;

use common::{fails, fresh_dir, ok, satstp, EMULATE_UDP};
use constellation::experiments::step_window;
use constellation::{geo, Constellation};
use linkmodel::Delay;

/// An orbit time from which a 60 s trace holds a seam step of more than 40 ms in its middle.
fn seam_window() -> f64 {
    let c = Constellation::preset("iridium").unwrap();
    let (ny, sf) = (
        geo::place("New York").unwrap(),
        geo::place("San Francisco").unwrap(),
    );
    let (start, at, before, after) =
        step_window(&c, &ny, &sf, 0.04, 60.0).expect("a seam step in a day of Iridium NY-SF");
    assert!((after - before).abs() > 0.04 && (15.0..=45.0).contains(&at));
    start
}

fn scenario(trace: &std::path::Path, flow: &str) -> String {
    format!(
        r#"name = "leo-seam"
duration = "60s"
[[node]]
name = "server"
[[node]]
name = "client"
[[link]]
a = "server"
b = "client"
rate = "1.5Mbps"
delay_trace_file = "{}"
queue_packets = 60
{flow}
"#,
        trace.display()
    )
}

#[test]
fn a_traced_iridium_seam_crossing_drives_the_emulator_and_a_simulated_transfer() {
    let start = seam_window();
    let dir = fresh_dir("leo");
    let file = dir.join("seam.trace");
    ok(satstp()
        .args([
            "leo",
            "trace",
            "--constellation",
            "iridium",
            "--from",
            "New York",
            "--to",
            "San Francisco",
        ])
        .args([
            "--start",
            &format!("{start}s"),
            "--duration",
            "60s",
            "--step",
            "10ms",
            "--handoff",
            "continuous",
            "--out",
        ])
        .arg(&file)
        .output()
        .unwrap());
    // The emulators' parser (emulate net and udp --delay-trace) accepts it, and it holds the step.
    let Delay::Trace { points, period_ns } = linkmodel::trace::read_delay_trace(&file).unwrap()
    else {
        panic!("not a trace");
    };
    assert_eq!(period_ns, None);
    let step = points
        .windows(2)
        .map(|w| w[1].1.abs_diff(w[0].1))
        .max()
        .unwrap();
    assert!(step > 40_000_000, "largest step {step} ns from {start} s");
    // emulate udp runs on it.
    let out = ok(satstp()
        .args(EMULATE_UDP)
        .args([
            "--up-rate",
            "1.5Mbps",
            "--down-rate",
            "1.5Mbps",
            "--duration",
            "200ms",
            "--delay-trace",
        ])
        .arg(&file)
        .output()
        .unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("traced"));
    // A scenario link takes it: STP and TCP SACK run across the step.
    for flow in [
        "[[flow]]\nname = \"bulk\"\nprotocol = \"stp\"\nfrom = \"server\"\nto = \"client\"",
        "[[flow]]\nname = \"bulk\"\nprotocol = \"tcp\"\nfrom = \"server\"\nto = \"client\"\ntcp = { variant = \"sack-newreno\", rcv_window = \"240KB\" }",
    ] {
        let sc = netsim::scenario::Scenario::from_toml(&scenario(&file, flow)).unwrap();
        let sum = netsim::scenario::run(&sc, 1, 1, 1, &|_, _| {}).unwrap();
        let f = &sum.flows[0];
        assert!(f.goodput_bps.mean > 0.8e6, "{}: {} b/s", f.protocol, f.goodput_bps.mean);
    }
    // A missing file is named.
    let bad = scenario(&dir.join("missing.trace"), "");
    let e = netsim::scenario::Scenario::from_toml(&bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("delay_trace_file") && e.contains("missing.trace"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn leo_flag_of_emulate_udp_and_scenario_leo_field() {
    let out = ok(satstp()
        .args(EMULATE_UDP)
        .args(["--duration", "200ms", "--leo", "teledesic:London:Tokyo"])
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("LEO path London -> Tokyo over teledesic"),
        "{text}"
    );
    let e = fails(
        satstp()
            .args(EMULATE_UDP)
            .args(["--leo", "teledesic:Atlantis:Tokyo"]),
    );
    assert!(e.contains("Atlantis"), "{e}");
    let sc = r#"name = "leo-field"
duration = "10s"
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
a = "a"
b = "b"
rate = "1.5Mbps"
leo = "iridium:New York:San Francisco"
[[flow]]
name = "f"
protocol = "stp"
from = "a"
to = "b"
bytes = "200KB"
"#;
    let s = netsim::scenario::Scenario::from_toml(sc).unwrap();
    let sum = netsim::scenario::run(&s, 1, 1, 1, &|_, _| {}).unwrap();
    assert!(sum.flows[0].completion_s.is_some());
    let e = netsim::scenario::Scenario::from_toml(&sc.replace("iridium:", "globalstar:"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("leo") && e.contains("globalstar"), "{e}");
}

#[test]
fn leo_trace_names_bad_input() {
    for (args, what) in [
        (vec!["--from", "Atlantis", "--to", "SF"], "Atlantis"),
        (
            vec!["--from", "NY", "--to", "SF", "--routing", "fastest"],
            "fastest",
        ),
        (
            vec![
                "--from",
                "NY",
                "--to",
                "SF",
                "--constellation",
                "globalstar",
            ],
            "globalstar",
        ),
        (
            vec!["--from", "NY", "--to", "SF", "--handoff", "sometimes"],
            "--handoff",
        ),
    ] {
        let e = fails(
            satstp()
                .args(["leo", "trace", "--duration", "10s"])
                .args(&args),
        );
        assert!(e.contains(what), "{e}");
    }
    let dir = fresh_dir("leo-tle");
    let tle = dir.join("bad.tle");
    std::fs::write(&tle, "SAT\n1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2928\n2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537\n").unwrap();
    let e = fails(
        satstp()
            .args(["leo", "trace", "--from", "NY", "--to", "SF", "--tle"])
            .arg(&tle),
    )
    .to_lowercase();
    assert!(e.contains("line 2") && e.contains("checksum"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench leo --network --out DIR`: the study's outputs are written and hold together (one row
/// per flow, RTT = data + ACK one-way delays, one ISL row per step); a bad `--variant` is named.
#[test]
fn bench_leo_network_writes_the_study_outputs() {
    // A directory `bench leo` creates.
    let base = fresh_dir("leo-net");
    let dir = base.join("out");
    let out = ok(satstp()
        .args([
            "bench",
            "leo",
            "--network",
            "--terminals",
            "4",
            "--flows",
            "2",
            "--duration",
            "4s",
            "--variant",
            "cubic",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("events/s") && text.contains("ISLs:"),
        "{text}"
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let flows = read("leo-network-flows.csv");
    let rows: Vec<Vec<&str>> = flows
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{flows}");
    for r in &rows {
        assert_eq!(r[0], "cubic");
        let goodput: f64 = r[4].parse().unwrap();
        assert!(goodput > 1e6 && goodput < 10e6, "{flows}");
    }
    let rtt = read("leo-network-rtt.csv");
    assert!(rtt.starts_with("transport,flow,t_s,rtt_ms,fwd_owd_ms,rev_owd_ms\n"));
    let mut n = 0;
    for l in rtt.lines().skip(1) {
        let v: Vec<f64> = l.split(',').skip(1).map(|x| x.parse().unwrap()).collect();
        assert!(
            (v[2] - v[3] - v[4]).abs() < 0.01 && v[3] > 1.0 && v[4] > 1.0,
            "{l}"
        );
        n += 1;
    }
    assert!(n >= 2 * 3, "{rtt}");
    let isl = read("leo-network-isl.csv");
    assert_eq!(isl.lines().count(), 1 + 4, "{isl}");
    assert!(read("leo-network-isl-links.csv").lines().count() > 1);
    for png in [
        "leo-network-rtt.png",
        "leo-network-isl-utilisation.png",
        "leo-network-isl-queue.png",
    ] {
        assert!(
            std::fs::metadata(dir.join(png)).unwrap().len() > 1000,
            "{png}"
        );
    }
    let e = fails(satstp().args(["bench", "leo", "--network", "--variant", "vegas"]));
    assert!(e.contains("--variant") && e.contains("cubic"), "{e}");
    let _ = std::fs::remove_dir_all(&base);
}
