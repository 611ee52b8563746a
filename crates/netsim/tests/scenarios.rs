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
