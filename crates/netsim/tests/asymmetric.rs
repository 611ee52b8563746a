//! ACK management and striping in scenarios: they do what they claim on a whole path, and bad
//! settings are named.

use netsim::scenario::{run, Scenario};

fn quiet(_: u32, _: u32) {}

/// Three Reno transfers over a 10 Mb/s, 120 ms forward / 24 kb/s return path; `RETURN` and
/// `ACCESS` are the return link's and the gateway's ACK management lines.
const THIN: &str = r#"
name = "thin-{NAME}"
duration = "30s"
seed = 3
[[node]]
name = "src"
[[node]]
name = "gw"
[[node]]
name = "term"
[[link]]
a = "src"
b = "gw"
rate = "1Gbps"
delay = "5ms"
queue_packets = 1000
[link.reverse]
{ACCESS}
[[link]]
a = "gw"
b = "term"
rate = "10Mbps"
delay = "120ms"
queue_packets = 300
[link.reverse]
rate = "24kbps"
queue_packets = 50
{RETURN}
[[flow]]
name = "t"
count = 3
protocol = "tcp"
from = "src"
to = "term"
bottleneck = "gw->term"
[flow.tcp]
variant = "reno"
mss = 1460
rcv_window = "4MB"
byte_counting = {BC}
"#;

fn thin(name: &str, ret: &str, access: &str) -> Scenario {
    Scenario::from_toml(
        &THIN
            .replace("{NAME}", name)
            .replace("{RETURN}", ret)
            .replace("{ACCESS}", access)
            .replace("{BC}", "true"),
    )
    .unwrap()
}

fn total_goodput(s: &Scenario) -> f64 {
    run(s, 2, 1, 2, &quiet)
        .unwrap()
        .flows
        .iter()
        .map(|f| f.goodput_bps.mean)
        .sum()
}

#[test]
fn ack_filtering_on_a_saturated_return_channel_raises_throughput() {
    // Byte counting on both sides: with ACK counting, fewer ACKs also mean slower window
    // growth (003), which hides the gain.
    let plain = total_goodput(&thin("plain", "", ""));
    let filtered = total_goodput(&thin("filter", "ack_filter = true", ""));
    eprintln!("plain {plain:.0} b/s, filtered {filtered:.0} b/s");
    assert!(filtered > 1.2 * plain, "{filtered} vs {plain}");
}

#[test]
fn ack_pacing_keeps_the_forward_queue_from_overflowing() {
    // A fat return channel, a forward queue of 20 packets: plain Reno overflows it in slow
    // start; paced ACKs hold the queue near the threshold, so no data packet is lost. The
    // pacer's link also caps the advertised windows at about a third of the path's
    // bandwidth-delay product plus queue each (pacing bounds the rate, not the window).
    let fat = |access: &str| {
        let s = Scenario::from_toml(
            &THIN
                .replace("{NAME}", "pace")
                .replace("{RETURN}", "")
                .replace("{ACCESS}", access)
                .replace("{BC}", "false")
                .replace("rate = \"24kbps\"", "rate = \"2Mbps\"")
                .replace("queue_packets = 300", "queue_packets = 20"),
        )
        .unwrap();
        let r = run(&s, 1, 1, 1, &quiet).unwrap();
        let drops = r
            .links
            .iter()
            .find(|l| l.name == "gw->term")
            .unwrap()
            .drops_queue
            .mean;
        let goodput: f64 = r.flows.iter().map(|f| f.goodput_bps.mean).sum();
        (drops, goodput)
    };
    let (plain_drops, plain) = fat("");
    let (paced_drops, paced) =
        fat("ack_pacing = { watch = \"gw->term\", threshold_packets = 10 }\nwindow_overwrite = \"110KB\"");
    eprintln!("plain: {plain_drops} drops, {plain:.0} b/s; paced: {paced_drops}, {paced:.0}");
    assert!(plain_drops > 0.0);
    assert_eq!(paced_drops, 0.0);
    assert!(paced > plain);
}

#[test]
fn a_striped_transfer_delivers_every_byte_once() {
    let text = THIN
        .replace("{NAME}", "stripes")
        .replace("{RETURN}", "")
        .replace("{ACCESS}", "")
        .replace("{BC}", "false")
        .replace("count = 3", "bytes = \"3000001\"\nstripes = 5")
        .replace("rate = \"24kbps\"", "rate = \"1Mbps\"");
    let r = run(&Scenario::from_toml(&text).unwrap(), 1, 1, 1, &quiet).unwrap();
    let f = &r.flows[0];
    assert!(
        f.completion_s.is_some(),
        "the striped transfer did not complete"
    );
    let secs = f.completion_s.unwrap().mean;
    // goodput × active time = the bytes delivered, exactly the transfer.
    let bytes = f.goodput_bps.mean * secs / 8.0;
    assert!((bytes - 3_000_001.0).abs() < 1.0, "{bytes}");
}

#[test]
fn bad_ack_management_and_striping_settings_are_named() {
    let err = |text: String| match Scenario::from_toml(&text.replace("{BC}", "false"))
        .and_then(|s| s.build(1).map(|_| ()))
    {
        Ok(()) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    };
    let e = err(THIN.replace("{NAME}", "x").replace("{ACCESS}", "").replace(
        "{RETURN}",
        "ack_filter = true\nred = { min_th = 5.0, max_th = 15.0 }",
    ));
    assert!(e.contains("term->gw") && e.contains("drop-tail"), "{e}");
    let e = err(THIN.replace("{NAME}", "x").replace("{RETURN}", "").replace(
        "{ACCESS}",
        r#"ack_pacing = { watch = "gw->nowhere", threshold_packets = 5 }"#,
    ));
    assert!(
        e.contains("ack_pacing.watch") && e.contains("gw->nowhere"),
        "{e}"
    );
    let e = err(THIN.replace("{NAME}", "x").replace("{RETURN}", "").replace(
        "{ACCESS}",
        r#"ack_pacing = { watch = "gw->term", threshold_packets = 0 }"#,
    ));
    assert!(e.contains("threshold_packets"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace("{RETURN}", "window_overwrite = \"lots\"")
        .replace("{ACCESS}", ""));
    assert!(e.contains("window_overwrite"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace("{RETURN}", "")
        .replace("{ACCESS}", "")
        .replace("count = 3", "stripes = 65"));
    assert!(e.contains("stripes") && e.contains("64"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace("{RETURN}", "")
        .replace("{ACCESS}", "")
        .replace("protocol = \"tcp\"", "protocol = \"stp\"\nstripes = 2")
        .replace(
            "[flow.tcp]\nvariant = \"reno\"\nmss = 1460\nrcv_window = \"4MB\"",
            "",
        ));
    assert!(e.contains("stripes"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace("{RETURN}", "")
        .replace("{ACCESS}", "")
        .replace("count = 3", "stripe_block = \"8KB\""));
    assert!(e.contains("stripe_block") && e.contains("stripes"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace("{RETURN}", "")
        .replace("{ACCESS}", "")
        .replace("count = 3", "stripes = 4\nstripe_block = \"0B\""));
    assert!(e.contains("stripe_block"), "{e}");
    let e = err(THIN
        .replace("{NAME}", "x")
        .replace(
            "{RETURN}",
            "ack_drop_front = true\nred = { min_th = 5.0, max_th = 15.0 }",
        )
        .replace("{ACCESS}", ""));
    assert!(
        e.contains("ack_drop_front") && e.contains("drop-tail"),
        "{e}"
    );
}
