//! The terminal daemon's gateways: one, or with `backup_gateways` the ordered list the hop fails
//! over along (`pep::hop::Security::TerminalFailover`; docs/scaling.md).

use anyhow::{Context, Result};
use pep::config::TerminalConfig;
use pep::keys::PublicKey;
use std::net::SocketAddr;

/// The terminal's gateways: `gateway` (resolved) first, then each backup, resolved here.
pub async fn terminal_gateways(
    cfg: &TerminalConfig,
    gateway: SocketAddr,
    gateway_key: PublicKey,
) -> Result<Vec<(SocketAddr, PublicKey)>> {
    let backups = cfg.backup_gateways()?;
    let mut gateways = vec![(gateway, gateway_key)];
    // The same gateway under its further keys (a key rotation), tried before the backups.
    for key in cfg.further_gateway_keys()? {
        gateways.push((gateway, key));
    }
    if backups.is_empty() {
        return Ok(gateways);
    }
    for (i, (address, key)) in backups.into_iter().enumerate() {
        let field = format!("terminal.backup_gateways[{i}].address");
        let addr = tokio::net::lookup_host(&address)
            .await
            .with_context(|| format!("{field}: cannot resolve {address}"))?
            .find(|a| a.is_ipv6() == gateway.is_ipv6())
            .with_context(|| {
                format!("{field}: {address} has no address of the gateway's family")
            })?;
        gateways.push((addr, key));
    }
    tracing::info!(
        gateways = ?gateways.iter().map(|g| g.0).collect::<Vec<_>>(),
        "terminal: gateways in failover order"
    );
    Ok(gateways)
}
