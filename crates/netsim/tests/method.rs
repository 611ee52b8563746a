//! The seeds' method in scenarios: replicate until every flow's standard error is within 5 % of
//! its mean (with a cap), 99 % confidence intervals, utilization in original bits, simplex links
//! and static routes.

use netsim::metrics::{sample_sd, Confidence};
use netsim::scenario::{run_replicated, Replication, Scenario, Summary};

fn quiet(_: u32, _: u32) {}

/// One replication of `sc` (seed 1, one thread).
fn run_once(sc: &Scenario) -> Summary {
    run_replicated(
        sc,
        Replication::Fixed { runs: 1 },
        Confidence::P95,
        1,
        1,
        &quiet,
        None,
    )
    .unwrap()
}

/// A TCP flow over a lossy 2 Mb/s link: runs differ from seed to seed.
const LOSSY: &str = r#"
name = "lossy"
duration = "20s"
runs = "until-5%"
max_runs = 80
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
a = "a"
b = "b"
rate = "2Mbps"
delay = "50ms"
queue_packets = 40
loss = 0.01
[[flow]]
name = "bulk"
protocol = "tcp"
from = "a"
to = "b"
[flow.tcp]
rto_granularity = "0ms"
"#;

fn rel_se(s: &Summary) -> f64 {
    let g = s.flows[0].goodput_bps;
    g.sd / f64::from(s.runs).sqrt() / g.mean
}

#[test]
fn until_rule_stops_at_the_first_replication_count_that_meets_it() {
    let sc = Scenario::from_toml(LOSSY).unwrap();
    let rule = sc.replication().unwrap();
    assert_eq!(
        rule,
        Replication::Until {
            percent: 5.0,
            min_runs: 5,
            max_runs: 80
        }
    );
    let s = run_replicated(&sc, rule, Confidence::P95, 1, 2, &quiet, None).unwrap();
    assert_eq!(s.replication.converged, Some(true));
    assert!(s.runs >= 5 && s.runs < 80, "{} runs", s.runs);
    assert!(rel_se(&s) <= 0.05, "{}", rel_se(&s));
    assert!((s.replication.worst_relative_se - rel_se(&s)).abs() < 1e-12);
    // One replication fewer does not meet the rule (or is below the minimum).
    if s.runs > 5 {
        let fewer = Replication::Fixed { runs: s.runs - 1 };
        let f = run_replicated(&sc, fewer, Confidence::P95, 1, 2, &quiet, None).unwrap();
        assert!(rel_se(&f) > 0.05, "{} runs already met it", s.runs - 1);
    }
    // The thread count does not change which replications run.
    let one = run_replicated(&sc, rule, Confidence::P95, 1, 1, &quiet, None).unwrap();
    assert_eq!(one.runs, s.runs);
    assert_eq!(one.flows[0].goodput_bps, s.flows[0].goodput_bps);
}

#[test]
fn until_rule_reports_when_the_cap_comes_first() {
    let sc = Scenario::from_toml(LOSSY).unwrap();
    let rule = Replication::parse_rule("until-0.01%", 6).unwrap();
    let s = run_replicated(&sc, rule, Confidence::P95, 1, 2, &quiet, None).unwrap();
    assert_eq!(s.runs, 6);
    assert_eq!(s.replication.converged, Some(false));
    assert!(s.replication.worst_relative_se > 0.0001);
    for bad in ["until-5", "until-0%", "until-x%", "many"] {
        let text = LOSSY.replace("\"until-5%\"", &format!("\"{bad}\""));
        let e = Scenario::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains("runs") && e.contains(bad), "{e}");
    }
    let capped = LOSSY.replace("runs = \"until-5%\"", "runs = 3");
    let e = Scenario::from_toml(&capped).unwrap_err().to_string();
    assert!(e.contains("max_runs"), "{e}");
}

#[test]
fn ninety_nine_percent_intervals_in_the_summary() {
    let text = LOSSY
        .replace(
            "runs = \"until-5%\"\nmax_runs = 80",
            "runs = 6\nconfidence = 0.99",
        )
        .replace("duration = \"20s\"", "duration = \"10s\"");
    let sc = Scenario::from_toml(&text).unwrap();
    assert_eq!(sc.confidence().unwrap(), Confidence::P99);
    let rule = sc.replication().unwrap();
    let s = run_replicated(&sc, rule, sc.confidence().unwrap(), 1, 2, &quiet, None).unwrap();
    assert_eq!(s.confidence, 0.99);
    let g = s.flows[0].goodput_bps;
    // n = 6: t(0.995, 5) = 4.032, t(0.975, 5) = 2.571.
    assert!(g.ci > g.ci95);
    assert!((g.ci / g.ci95 - 4.032 / 2.571).abs() < 1e-9);
    assert!((g.ci95 - 2.571 * g.sd / 6f64.sqrt()).abs() < 1e-6 * g.mean);
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["confidence"], 0.99);
    assert_eq!(v["replication"]["rule"], "fixed");
    assert!(v["flows"][0]["goodput_bps"]["ci"].is_number());
    let bad = text.replace("confidence = 0.99", "confidence = 0.9");
    let e = Scenario::from_toml(&bad).unwrap_err().to_string();
    assert!(e.contains("confidence"), "{e}");
    assert!(sample_sd(&[1.0, 3.0]) > 1.41);
}

#[test]
fn original_bit_utilization_leaves_out_retransmissions() {
    let text = LOSSY
        .replace("runs = \"until-5%\"\nmax_runs = 80", "runs = 2")
        .replace("duration = \"20s\"", "duration = \"10s\"");
    let sc = Scenario::from_toml(&text).unwrap();
    let s = run_replicated(
        &sc,
        sc.replication().unwrap(),
        Confidence::P95,
        1,
        2,
        &quiet,
        None,
    )
    .unwrap();
    let ab = s.links.iter().find(|l| l.name == "a->b").unwrap();
    assert!(s.flows[0].retransmissions.mean > 10.0);
    assert!(ab.original_utilization.mean < ab.utilization.mean);
    // The difference is the retransmitted segments (1500 bytes each) over rate × duration.
    let retx_bits = (ab.utilization.mean - ab.original_utilization.mean) * 2e6 * 10.0;
    let segs = retx_bits / (1500.0 * 8.0);
    assert!(
        (segs - s.flows[0].retransmissions.mean).abs() <= 1.0,
        "{segs} vs {}",
        s.flows[0].retransmissions.mean
    );
    assert!(ab.packets.mean > 100.0, "{}", ab.packets.mean);
    // Without loss nothing is retransmitted: both utilizations agree.
    let clean = text
        .replace("loss = 0.01", "")
        .replace("queue_packets = 40", "queue_packets = 1000");
    let clean = Scenario::from_toml(&clean).unwrap();
    let c = run_once(&clean);
    let ab = c.links.iter().find(|l| l.name == "a->b").unwrap();
    assert_eq!(c.flows[0].retransmissions.mean, 0.0);
    assert!(ab.utilization.mean > 0.5);
    assert_eq!(ab.original_utilization, ab.utilization);
}

/// A DirecPC-like path: a one-way satellite downlink, the return over a terrestrial modem.
const SIMPLEX: &str = r#"
name = "direcpc"
duration = "30s"
[[node]]
name = "server"
[[node]]
name = "uplink"
[[node]]
name = "terminal"
[[node]]
name = "isp"
[[link]]
a = "server"
b = "uplink"
rate = "10Mbps"
delay = "10ms"
[[link]]
a = "uplink"
b = "terminal"
simplex = true
rate = "2Mbps"
delay = "250ms"
queue_packets = 60
[[link]]
a = "terminal"
b = "isp"
rate = "50kbps"
delay = "60ms"
[[link]]
a = "isp"
b = "server"
rate = "10Mbps"
delay = "20ms"
[[flow]]
name = "bulk"
protocol = "tcp"
from = "server"
to = "terminal"
bytes = "1MB"
"#;

#[test]
fn simplex_links_carry_one_direction_and_the_return_takes_another_path() {
    let sc = Scenario::from_toml(SIMPLEX).unwrap();
    let s = run_once(&sc);
    let names: Vec<&str> = s.links.iter().map(|l| l.name.as_str()).collect();
    assert!(names.contains(&"uplink->terminal"));
    assert!(!names.contains(&"terminal->uplink"), "{names:?}");
    let f = &s.flows[0];
    assert!(f.completion_s.is_some(), "the transfer did not finish");
    // Data crossed the downlink, ACKs the modem: reverse use is counted on the return path's
    // slowest link.
    let link = |n: &str| s.links.iter().find(|l| l.name == n).unwrap();
    assert!(link("uplink->terminal").packets.mean > 600.0);
    assert!(link("terminal->isp").packets.mean > 300.0);
    assert_eq!(link("server->isp").packets.mean, 0.0);
    assert!(f.reverse_bps.mean > 0.0);
    let both = SIMPLEX.replace(
        "queue_packets = 60\n",
        "queue_packets = 60\n[link.reverse]\nrate = \"1Mbps\"\n",
    );
    let e = Scenario::from_toml(&both).unwrap_err().to_string();
    assert!(
        e.contains("uplink->terminal.reverse") && e.contains("simplex"),
        "{e}"
    );
}

#[test]
fn static_routes_override_shortest_paths_per_direction() {
    // With a duplex downlink, data would go server->uplink->terminal; a route at the server
    // sends it via the ISP instead, while the ACKs keep the shortest path back.
    let forced = SIMPLEX.replace("simplex = true\n", "").replace(
        "[[flow]]",
        "[[route]]\nat = \"server\"\nto = \"terminal\"\nvia = \"server->isp\"\n\n[[flow]]",
    );
    let sc = Scenario::from_toml(&forced).unwrap();
    let s = run_once(&sc);
    let link = |n: &str| s.links.iter().find(|l| l.name == n).unwrap();
    // (The data now crosses the 50 kb/s modem link: about 100 packets in 30 s.)
    assert!(link("server->isp").packets.mean > 50.0);
    assert!(link("isp->terminal").packets.mean > 50.0);
    assert_eq!(link("server->uplink").packets.mean, 0.0);
    // ACKs still take the shortest path back (terminal->uplink->server).
    assert!(link("terminal->uplink").packets.mean > 20.0);
    let wrong = forced.replace("via = \"server->isp\"", "via = \"isp->terminal\"");
    let e = Scenario::from_toml(&wrong).unwrap_err().to_string();
    assert!(e.contains("does not leave node 'server'"), "{e}");
    let looped = forced.replace(
        "[[flow]]",
        "[[route]]\nat = \"isp\"\nto = \"terminal\"\nvia = \"isp->server\"\n\n[[flow]]",
    );
    let e = Scenario::from_toml(&looped).unwrap_err().to_string();
    assert!(e.contains("loop"), "{e}");
}

#[test]
fn tcp_options_count_and_queue_convention_in_scenarios() {
    let base = LOSSY.replace("runs = \"until-5%\"\nmax_runs = 80\n", "");
    let with = |opts: &str| base.replace("rto_granularity = \"0ms\"", opts);
    // Every exposed option is accepted; an integer initial window too.
    let ok = with(
        "initial_window = 3\nsend_buffer = \"64KB\"\ninitial_ssthresh = \"32KB\"\n\
         delayed_ack_timeout = \"100ms\"\ndupack_threshold = 2\ninitial_rto = \"3s\"\n\
         max_rto = \"30s\"",
    );
    Scenario::from_toml(&ok).unwrap();
    Scenario::from_toml(&with("initial_window = \"4kss\"")).unwrap();
    // Errors name the key as written, not the model's field.
    let e = Scenario::from_toml(&with("rcv_window = \"10B\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("flow bulk.tcp.rcv_window") && !e.contains("recv_buffer_bytes"),
        "{e}"
    );
    let e = Scenario::from_toml(&with("initial_window = 0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("initial_window"), "{e}");
    let e = Scenario::from_toml(&with("dupack_threshold = 0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("tcp.dupack_threshold"), "{e}");
    // count: identical flows NAME-1 … NAME-N.
    let three = base.replace("name = \"bulk\"", "name = \"bulk\"\ncount = 3");
    let sc = Scenario::from_toml(&three).unwrap();
    let s = run_once(&sc);
    let names: Vec<&str> = s.flows.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["bulk-1", "bulk-2", "bulk-3"]);
    assert!(s.fairness.is_some());
    // queue_waiting_only: ns-2's convention, one more packet in this model's terms.
    let q = |extra: &str| {
        let t = base.replace("queue_packets = 40", &format!("queue_packets = 40{extra}"));
        let built = Scenario::from_toml(&t).unwrap().build(1).unwrap();
        built.sim.links()[0].model.config().queue
    };
    assert_eq!(q(""), linkmodel::QueueLimit::Packets(40));
    assert_eq!(
        q("\nqueue_waiting_only = true"),
        linkmodel::QueueLimit::Packets(41)
    );
}

#[test]
fn stp_errors_name_the_scenario_key() {
    let text = SIMPLEX.replace("protocol = \"tcp\"", "protocol = \"stp\"")
        + "[flow.stp]\nrecv_buffer_bytes = \"1KB\"\n";
    let e = Scenario::from_toml(&text).unwrap_err().to_string();
    assert!(e.contains("flow bulk.stp.recv_buffer_bytes"), "{e}");
    // The spelling of older versions is refused, naming the key that replaced it.
    let old = SIMPLEX.replace("protocol = \"tcp\"", "protocol = \"stp\"")
        + "[flow.stp]\nrecv_buffer = \"1MB\"\n";
    let e = Scenario::from_toml(&old).unwrap_err().to_string();
    assert!(
        e.contains("`recv_buffer` is now spelled `recv_buffer_bytes`"),
        "{e}"
    );
}
