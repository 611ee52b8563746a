//! The shipped nftables files (`deploy/nftables-tproxy.nft`, `deploy/nftables-gateway-transparent.nft`)
//! made ready to load as the deployment guide has users load them: `define LAN_IF` set to the
//! interface in use, and the `ip -4/-6 rule|route` commands that the files' comments give
//! collected to run after `nft -f`. Pure text work, shared by `bench link`'s transparent
//! contender and the TPROXY namespace test.

/// A rules file ready for `nft -f`, and what goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRules {
    /// The file's text with `define LAN_IF` replaced (when asked).
    pub rules: String,
    /// The routing commands the comments give, without the leading `ip ` (e.g. `-4 rule add …`).
    pub routing: Vec<String>,
    /// The value of `define TPROXY_PORT`, if the file has one.
    pub tproxy_port: Option<u16>,
}

/// Prepares `text` (the contents of the file called `name`, for messages), setting `LAN_IF` to
/// `lan_if` when given. Errors name the file and what is wrong with it.
pub fn prepare(name: &str, text: &str, lan_if: Option<&str>) -> Result<PreparedRules, String> {
    let mut out = PreparedRules {
        rules: String::with_capacity(text.len()),
        routing: Vec::new(),
        tproxy_port: None,
    };
    let mut lan_set = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("define TPROXY_PORT = ") {
            let v = v.trim();
            out.tproxy_port = Some(
                v.parse::<u16>()
                    .map_err(|_| format!("{name}: TPROXY_PORT {v:?} is not a port"))?,
            );
        }
        if let (Some(lan), true) = (lan_if, t.starts_with("define LAN_IF = ")) {
            out.rules.push_str(&format!("define LAN_IF = \"{lan}\"\n"));
            lan_set = true;
            continue;
        }
        let cmd = t.trim_start_matches('#').trim();
        if cmd.starts_with("ip -4 ") || cmd.starts_with("ip -6 ") {
            out.routing.push(cmd.trim_start_matches("ip ").to_string());
        }
        out.rules.push_str(line);
        out.rules.push('\n');
    }
    if lan_if.is_some() && !lan_set {
        return Err(format!("{name} has no `define LAN_IF` line to set"));
    }
    if out.routing.is_empty() {
        return Err(format!("{name} gives no `ip -4/-6 rule|route` commands"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_the_lan_and_collects_routing_and_port() {
        let text = "define LAN_IF = \"eth1\"\ndefine TPROXY_PORT = 7001\n\
                    # ip -4 rule add fwmark 1 lookup 100\n#   ip -6 route add local ::/0 dev lo table 100\n\
                    table inet t {}\n";
        let p = prepare("x.nft", text, Some("lan0")).unwrap();
        assert!(p.rules.starts_with("define LAN_IF = \"lan0\"\n"));
        assert!(!p.rules.contains("eth1"));
        assert!(p.rules.contains("table inet t {}"));
        assert_eq!(
            p.routing,
            [
                "-4 rule add fwmark 1 lookup 100",
                "-6 route add local ::/0 dev lo table 100"
            ]
        );
        assert_eq!(p.tproxy_port, Some(7001));
    }

    #[test]
    fn errors_name_the_file_and_the_fault() {
        let e = prepare("a.nft", "table inet t {}\n", Some("lan0")).unwrap_err();
        assert!(e.contains("a.nft") && e.contains("LAN_IF"), "{e}");
        let e = prepare("b.nft", "define LAN_IF = \"x\"\n", None).unwrap_err();
        assert!(e.contains("b.nft") && e.contains("ip -4/-6"), "{e}");
        let e = prepare("c.nft", "define TPROXY_PORT = 99999\n", None).unwrap_err();
        assert!(e.contains("c.nft") && e.contains("not a port"), "{e}");
    }

    #[test]
    fn the_shipped_files_prepare() {
        for (name, lan) in [
            ("nftables-tproxy.nft", Some("lan0")),
            ("nftables-gateway-transparent.nft", None),
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy")
                .join(name);
            let text = std::fs::read_to_string(&path).unwrap();
            prepare(name, &text, lan).unwrap();
        }
    }
}
