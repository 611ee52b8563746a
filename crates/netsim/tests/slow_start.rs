//! STP's delay-based slow-start exit (`slow_start_delay_exit`, spec §7.2c) on a whole path: a
//! LEO-like hop whose queue holds more than the bandwidth-delay product (as a terminal's or a
//! ground station's deep buffer does), where a slow start that runs until a loss fills the queue
//! and then loses up to half a window at once.

use netsim::scenario::{run, Scenario};

fn quiet(_: u32, _: u32) {}

/// One 4 MB STP transfer over 10 Mb/s, 60 ms RTT (a BDP of 75 KB) with a 100-packet queue
/// (150 KB, 120 ms).
const PATH: &str = r#"
name = "slow-start"
duration = "20s"
seed = 5
[[node]]
name = "server"
[[node]]
name = "gateway"
[[node]]
name = "terminal"
[[link]]
a = "server"
b = "gateway"
rate = "1Gbps"
delay = "5ms"
queue_packets = 1000
[[link]]
a = "gateway"
b = "terminal"
rate = "10Mbps"
delay = "25ms"
queue_packets = 100
[[flow]]
name = "stp"
protocol = "stp"
from = "server"
to = "terminal"
bottleneck = "gateway->terminal"
bytes = "4MB"
[flow.stp]
slow_start_delay_exit = {EXIT}
"#;

fn transfer(exit: bool) -> (f64, f64) {
    let s = Scenario::from_toml(&PATH.replace("{EXIT}", &exit.to_string())).unwrap();
    let r = run(&s, 2, 1, 2, &quiet).unwrap();
    let f = &r.flows[0];
    (f.goodput_bps.mean, f.retransmissions.mean)
}

#[test]
fn the_delay_exit_avoids_the_slow_start_overshoot_without_slowing_the_transfer() {
    let (loss_goodput, loss_retx) = transfer(false);
    let (delay_goodput, delay_retx) = transfer(true);
    eprintln!(
        "loss-only exit: {loss_goodput:.0} b/s, {loss_retx:.0} retransmissions; \
         delay exit: {delay_goodput:.0} b/s, {delay_retx:.0} retransmissions"
    );
    assert!(
        loss_retx >= 20.0,
        "the path must make slow start overshoot: {loss_retx}"
    );
    assert!(
        delay_retx < loss_retx / 2.0,
        "{delay_retx} vs {loss_retx} retransmissions"
    );
    assert!(
        delay_goodput >= 0.95 * loss_goodput,
        "{delay_goodput} vs {loss_goodput} b/s"
    );
}

#[test]
fn a_bad_value_is_named_with_its_key() {
    let text = PATH.replace("{EXIT}", "\"yes\"");
    let e = Scenario::from_toml(&text).unwrap_err().to_string();
    assert!(e.contains("slow_start_delay_exit: invalid type"), "{e}");
}
