//! What a transparent terminal does with QUIC (UDP port 443) from its LAN: the `quic` key.
//!
//! A split-TCP PEP cannot touch QUIC: its handshake, congestion control and loss recovery run
//! end to end across the satellite. A terminal in transparent mode therefore chooses:
//!
//! - `pass`: QUIC goes to the satellite link as it is (routed by the host, not through the hop);
//! - `block`: UDP 443 forwarded from the LAN is dropped, so browsers give up on QUIC after their
//!   own timeout and fall back to TCP, which the terminal accelerates;
//! - `reject`: it is answered with ICMP port unreachable, so browsers fall back at once.
//!
//! The terminal applies the choice itself with nftables (it already holds `CAP_NET_ADMIN` for
//! TPROXY): one table, [`TABLE`], replaced as a whole at start ([`ruleset`] is its text, which
//! `docs/quic.md` shows for each policy) and deleted at stop; `pass` installs nothing
//! and deletes a table an earlier run may have left. The rule counts what it dropped or rejected
//! in the named counter [`COUNTER`], which the terminal reads into `/metrics`
//! ([`parse_counter`]).

use serde::Deserialize;
use std::process::{Command, Stdio};
use thiserror::Error;

/// The nftables table (family `inet`) the terminal owns for its QUIC policy.
pub(crate) const TABLE: &str = "satstp_quic";
/// The named counter in [`TABLE`] of UDP 443 packets the policy dropped or rejected.
pub(crate) const COUNTER: &str = "quic_udp443";

/// The terminal's QUIC policy (`quic` in the terminal's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicPolicy {
    /// UDP 443 to the satellite link as it is (default).
    #[default]
    Pass,
    /// Drop UDP 443 from the LAN: browsers fall back to TCP after their QUIC timeout.
    Block,
    /// Answer UDP 443 from the LAN with ICMP port unreachable: browsers fall back at once.
    Reject,
}

impl QuicPolicy {
    pub(crate) const ALL: [QuicPolicy; 3] =
        [QuicPolicy::Pass, QuicPolicy::Block, QuicPolicy::Reject];

    /// The configuration word (`pass`, `block`, `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            QuicPolicy::Pass => "pass",
            QuicPolicy::Block => "block",
            QuicPolicy::Reject => "reject",
        }
    }

    /// What happens to the packets the rule matches, as `/metrics` labels it (`None` for pass,
    /// which installs no rule).
    pub fn verdict(self) -> Option<&'static str> {
        match self {
            QuicPolicy::Pass => None,
            QuicPolicy::Block => Some("dropped"),
            QuicPolicy::Reject => Some("rejected"),
        }
    }

    /// One line for the start-up log.
    pub fn describe(self) -> String {
        match self {
            QuicPolicy::Pass => {
                "pass (UDP 443 from the LAN is routed to the satellite link as it is)".into()
            }
            QuicPolicy::Block => format!(
                "block (UDP 443 forwarded from the LAN is dropped: browsers fall back to TCP \
                 after their QUIC timeout; nftables table inet {TABLE})"
            ),
            QuicPolicy::Reject => format!(
                "reject (UDP 443 forwarded from the LAN is answered ICMP port unreachable: \
                 browsers fall back to TCP at once; nftables table inet {TABLE})"
            ),
        }
    }
}

/// The nftables ruleset (for `nft -f`) that applies `policy`: it replaces [`TABLE`] as a whole
/// (`add` then `delete` makes the replacement work whether or not the table exists). `None` for
/// pass, which needs no rule.
pub(crate) fn ruleset(policy: QuicPolicy) -> Option<String> {
    let verdict = match policy {
        QuicPolicy::Pass => return None,
        QuicPolicy::Block => "drop",
        QuicPolicy::Reject => "reject with icmpx type port-unreachable",
    };
    Some(format!(
        "add table inet {TABLE}\n\
         delete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tcounter {COUNTER} {{\n\
         \t}}\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority filter; policy accept;\n\
         \t\tudp dport 443 counter name \"{COUNTER}\" {verdict}\n\
         \t}}\n\
         }}\n"
    ))
}

/// Why the policy could not be applied or read.
#[derive(Debug, Error)]
pub enum QuicPolicyError {
    #[error("cannot run `nft` (install nftables): {0}")]
    NoNft(std::io::Error),
    #[error(
        "nft refused the rules (the terminal needs CAP_NET_ADMIN and a kernel with nftables): {0}"
    )]
    Refused(String),
    #[error("unreadable counter from nft: {0:?}")]
    BadCounter(String),
}

/// Runs `nft` with `args`, `input` on its standard input; its standard output.
fn nft(args: &[&str], input: Option<&str>) -> Result<String, QuicPolicyError> {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(QuicPolicyError::NoNft)?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| QuicPolicyError::Refused(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| QuicPolicyError::Refused(e.to_string()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(QuicPolicyError::Refused(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

/// Applies `policy` in this network namespace: installs its table, or for pass deletes a table
/// an earlier run left (there being none is fine, and so is a missing `nft` then).
pub fn apply(policy: QuicPolicy) -> Result<(), QuicPolicyError> {
    match ruleset(policy) {
        Some(rules) => nft(&["-f", "-"], Some(&rules)).map(|_| ()),
        None => {
            remove();
            Ok(())
        }
    }
}

/// Deletes [`TABLE`] if it exists (at stop, and before pass).
pub(crate) fn remove() {
    let _ = nft(&["delete", "table", "inet", TABLE], None);
}

/// The packets [`COUNTER`] has counted, read with `nft list counter`.
pub fn read_counter() -> Result<u64, QuicPolicyError> {
    parse_counter(&nft(&["list", "counter", "inet", TABLE, COUNTER], None)?)
}

/// The packet count in `nft list counter`'s output (`packets N bytes M`).
pub(crate) fn parse_counter(text: &str) -> Result<u64, QuicPolicyError> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" {
            return words
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| QuicPolicyError::BadCounter(text.to_owned()));
        }
    }
    Err(QuicPolicyError::BadCounter(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_has_its_rule_and_pass_none() {
        assert_eq!(ruleset(QuicPolicy::Pass), None);
        let block = ruleset(QuicPolicy::Block).unwrap();
        assert!(block.contains("udp dport 443 counter name \"quic_udp443\" drop\n"));
        let reject = ruleset(QuicPolicy::Reject).unwrap();
        assert!(reject.contains("reject with icmpx type port-unreachable\n"));
        for r in [&block, &reject] {
            assert!(r.starts_with("add table inet satstp_quic\ndelete table inet satstp_quic\n"));
            assert!(r.contains("hook forward"));
        }
    }

    #[test]
    fn the_docs_show_the_rules_the_terminal_installs() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/quic.md"),
        )
        .unwrap();
        for p in [QuicPolicy::Block, QuicPolicy::Reject] {
            let rules = ruleset(p).unwrap();
            assert!(doc.contains(&rules), "docs/quic.md lacks\n{rules}");
        }
    }

    #[test]
    fn the_counter_is_read_from_nft_output() {
        let out = "table inet satstp_quic {\n\tcounter quic_udp443 {\n\t\tpackets 17 bytes 21000\n\t}\n}\n";
        assert_eq!(parse_counter(out).unwrap(), 17);
        assert!(parse_counter("table inet satstp_quic {}").is_err());
        assert!(parse_counter("packets many").is_err());
    }

    #[test]
    fn config_words_read_back() {
        for p in QuicPolicy::ALL {
            #[derive(Deserialize)]
            struct T {
                quic: QuicPolicy,
            }
            let t: T = toml::from_str(&format!("quic = \"{}\"", p.as_str())).unwrap();
            assert_eq!(t.quic, p);
        }
    }
}
