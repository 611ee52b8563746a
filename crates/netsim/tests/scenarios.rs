//! Scenario files: determinism, and clear errors for bad input.

use netsim::scenario::{run, Scenario, ScenarioError};

const GEO: &str = include_str!("../../../scenarios/geo-stp-bulk.toml");

fn quiet(_: u32, _: u32) {}

#[test]
fn same_scenario_and_seed_give_identical_json() {
    let s = Scenario::from_toml(GEO).unwrap();
    let a = serde_json::to_string(&run(&s, 3, 11, 2, &quiet).unwrap()).unwrap();
    let b = serde_json::to_string(&run(&s, 3, 11, 1, &quiet).unwrap()).unwrap();
    assert_eq!(a, b, "thread count or rerun changed the results");
    let c = serde_json::to_string(&run(&s, 3, 12, 2, &quiet).unwrap()).unwrap();
    assert_ne!(a, c, "a different seed should change something");
}

#[test]
fn the_json_has_the_documented_fields() {
    let s = Scenario::from_toml(GEO).unwrap();
    let v: serde_json::Value = serde_json::to_value(run(&s, 2, 1, 2, &quiet).unwrap()).unwrap();
    let f = &v["flows"][0];
    for k in ["goodput_bps", "fwd_efficiency", "reverse_bps"] {
        assert!(
            f[k]["mean"].is_number() && f[k]["ci95"].is_number(),
            "{k} in {f}"
        );
    }
    assert_eq!(f["name"], "bulk");
    assert_eq!(f["protocol"], "stp");
}

fn err(text: &str) -> String {
    match Scenario::from_toml(text) {
        Ok(_) => panic!("accepted a bad scenario"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_input_is_named() {
    let unknown = GEO.replace("rate = \"10Mbps\"", "rate = \"10Mbps\"\ncolour = \"red\"");
    assert!(err(&unknown).contains("colour"), "{}", err(&unknown));
    let unit = GEO.replace("delay = \"5ms\"", "delay = \"5 parsecs\"");
    let e = err(&unit);
    assert!(
        e.contains("server->gateway.delay") && e.contains("parsecs"),
        "{e}"
    );
    let node = GEO.replace("to = \"client\"", "to = \"mars\"");
    assert!(err(&node).contains("unknown node 'mars'"), "{}", err(&node));
    let island = format!("{GEO}\n[[node]]\nname = \"island\"\n")
        .replace("to = \"client\"", "to = \"island\"");
    assert!(
        err(&island).contains("no route from node server to node island"),
        "{}",
        err(&island)
    );
    let proto = GEO.replace("protocol = \"stp\"", "protocol = \"carrier-pigeon\"");
    assert!(err(&proto).contains("unknown protocol"), "{}", err(&proto));
    let stp = GEO.replace(
        "bottleneck = \"gateway->client\"",
        "bottleneck = \"gateway->client\"\n[flow.stp]\npolls_per_rtt = 0",
    );
    assert!(err(&stp).contains("polls_per_rtt"), "{}", err(&stp));
    assert!(matches!(
        Scenario::from_toml("name = 3"),
        Err(ScenarioError::Parse(_))
    ));
}

#[test]
fn ns2_rules_are_named_and_bad_ones_refused() {
    let red = |rule: &str| {
        GEO.replace(
            "delay = \"5ms\"",
            &format!("delay = \"5ms\"\nred = {{ min_th = 5.0, max_th = 15.0, rule = \"{rule}\" }}"),
        )
    };
    Scenario::from_toml(&red("ns2")).unwrap();
    Scenario::from_toml(&red("paper")).unwrap();
    let e = err(&red("ns3"));
    assert!(
        e.contains("server->gateway.red.rule") && e.contains("\"ns2\""),
        "{e}"
    );
    let tcp = |recovery: &str| {
        GEO.replace("protocol = \"stp\"", "protocol = \"tcp\"")
            .replace(
                "bottleneck = \"gateway->client\"",
                &format!(
                    "bottleneck = \"gateway->client\"\n[flow.tcp]\nvariant = \"newreno\"\nrecovery = \"{recovery}\""
                ),
            )
    };
    Scenario::from_toml(&tcp("ns2")).unwrap();
    let e = err(&tcp("ns-3"));
    assert!(e.contains("recovery") && e.contains("\"ns2\""), "{e}");
    let timer = |t: &str, g: &str| {
        tcp("ns2").replace(
            "recovery = \"ns2\"",
            &format!("recovery = \"ns2\"\ntimer = \"{t}\"\nrto_granularity = \"{g}\""),
        )
    };
    Scenario::from_toml(&timer("ns2", "500ms")).unwrap();
    Scenario::from_toml(&timer("bsd", "0ms")).unwrap();
    let e = err(&timer("ns-2", "500ms"));
    assert!(
        e.contains("timer") && e.contains("\"bsd\" or \"ns2\""),
        "{e}"
    );
    let e = err(&timer("ns2", "0ms"));
    assert!(
        e.contains("rto_granularity") && e.contains("ns-2's timer"),
        "{e}"
    );
}

#[test]
fn a_link_replays_a_mahimahi_rate_trace() {
    // One 1500-byte opportunity every 8 ms, repeating every 800 ms: a mean of 1.5 Mb/s, the
    // GEO hop's fixed rate.
    let dir = std::env::temp_dir().join(format!("satstp-rate-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("geo.mahimahi");
    let text: String = (1..=100).map(|k| format!("{}\n", k * 8)).collect();
    std::fs::write(&trace, &text).unwrap();
    let toml = GEO.replace(
        "rate = \"1.5Mbps\"",
        &format!("rate_trace_file = \"{}\"", trace.display()),
    );
    let s = Scenario::from_toml(&toml).unwrap();
    let built = s.build(1).unwrap();
    let id = built.sim.link_by_name("gateway->client").unwrap();
    let cfg = built.sim.links()[id.0 as usize].model.config();
    let want = linkmodel::DeliveryTrace::parse(&text, "t").unwrap();
    assert_eq!(cfg.rate_trace.as_ref(), Some(&want));
    assert_eq!(
        cfg.rate_bps, 1_500_000,
        "the trace's mean stands in for the rate"
    );
    let v: serde_json::Value = serde_json::to_value(run(&s, 1, 1, 1, &quiet).unwrap()).unwrap();
    let goodput = v["flows"][0]["goodput_bps"]["mean"].as_f64().unwrap();
    assert!(
        (0.6e6..1.5e6).contains(&goodput),
        "goodput {goodput} b/s over a 1.5 Mb/s trace"
    );
    // A bad line is named with the key, the file and the line.
    std::fs::write(&trace, "8\n16\nsoon\n").unwrap();
    let e = match Scenario::from_toml(&toml).and_then(|s| s.build(1).map(|_| ())) {
        Ok(()) => panic!("accepted a bad rate trace"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("gateway->client.rate_trace_file") && e.contains("line 3") && e.contains("soon"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A flow's `duration` is a constellation scenario's key: a node scenario refuses it by name.
#[test]
fn a_node_scenario_refuses_a_flow_duration_by_name() {
    let text = format!("{GEO}\nduration = \"5s\"\n");
    let e = Scenario::from_toml(&text).unwrap_err().to_string();
    assert!(e.starts_with("flow bulk.duration:"), "{e}");
    assert!(e.contains("constellation"), "{e}");
}

/// `scenarios/fig4.14-time-sequence.toml` shows what the thesis' figs. 4.14–4.18 show (§4.2.3):
/// Reno falls into a coarse timeout after the slow-start overshoot; NewReno recovers without a
/// timeout and with one window reduction, but one hole per round trip, so for tens of seconds;
/// SACK-Reno halves its window more than once; SACK-NewReno recovers the same burst quickly with
/// one reduction and carries the most.
#[test]
fn fig4_14_time_sequence_shows_the_thesis_variant_behaviours() {
    let s = Scenario::from_toml(include_str!(
        "../../../scenarios/fig4.14-time-sequence.toml"
    ))
    .unwrap();
    let sum = run(&s, 1, s.seed, 1, &quiet).unwrap();
    let flow = |n: &str| sum.flows.iter().find(|f| f.name == n).unwrap();
    let (reno, newreno, sack_reno, sack_newreno) = (
        flow("reno"),
        flow("newreno"),
        flow("sack-reno"),
        flow("sack-newreno"),
    );
    assert!(reno.timeouts.mean >= 1.0, "Reno: no timeout");
    assert_eq!(newreno.timeouts.mean, 0.0);
    assert_eq!(newreno.fast_recoveries.mean, 1.0);
    assert!(sack_reno.fast_recoveries.mean >= 2.0);
    assert_eq!(sack_newreno.timeouts.mean, 0.0);
    assert_eq!(sack_newreno.fast_recoveries.mean, 1.0);
    // Highest sequence sent at time t, from the flow's trace.
    let seq_at = |n: &str, t: f64| {
        sum.series[n]
            .iter()
            .take_while(|p| p[0] <= t)
            .last()
            .map_or(0.0, |p| p[2])
    };
    // Between 12 s and 35 s NewReno is still repairing the overshoot's burst; SACK-NewReno is
    // long past it.
    assert!(seq_at("newreno", 35.0) < 1.5 * seq_at("newreno", 12.0));
    assert!(seq_at("sack-newreno", 35.0) > 3.0 * seq_at("sack-newreno", 12.0));
    let g = |f: &netsim::scenario::FlowSummary| f.goodput_bps.mean;
    assert!(g(sack_newreno) > g(sack_reno) && g(sack_reno) > g(reno));
    assert!(g(sack_newreno) > g(newreno));
}

/// `scenarios/geo-10flow-{tcp,stp}.toml`, the simulator-speed scenario (docs/scaling.md): the two
/// differ only in the protocol, and each runs ten flows that share the 10 Mb/s hop (shortened
/// here to 20 s).
#[test]
fn the_ten_flow_geo_scenarios_share_the_hop_among_ten_flows() {
    let tcp = include_str!("../../../scenarios/geo-10flow-tcp.toml");
    let stp = include_str!("../../../scenarios/geo-10flow-stp.toml");
    assert_eq!(
        tcp.replace("TCP", "STP").replace("tcp", "stp"),
        stp,
        "the two files differ in more than the protocol"
    );
    for (text, protocol) in [(tcp, "tcp"), (stp, "stp")] {
        let s =
            Scenario::from_toml(&text.replace("duration = \"60s\"", "duration = \"20s\"")).unwrap();
        let v: serde_json::Value = serde_json::to_value(run(&s, 1, 1, 1, &quiet).unwrap()).unwrap();
        let flows = v["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 10, "{protocol}");
        let mut total = 0.0;
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(f["name"], format!("bulk-{}", i + 1));
            assert_eq!(f["protocol"], protocol);
            let g = f["goodput_bps"]["mean"].as_f64().unwrap();
            assert!(g > 0.0, "{protocol} flow {i} moved nothing");
            total += g;
        }
        eprintln!("{protocol}: {total:.0} b/s in all over 20 s");
        assert!(
            (3e6..10e6).contains(&total),
            "{protocol}: {total} b/s in all over a 10 Mb/s hop"
        );
    }
}
