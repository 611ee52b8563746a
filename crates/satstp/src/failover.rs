//! The terminal daemon's hop security: one gateway, or with `backup_gateways` the ordered list
//! the hop fails over along (`pep::hop::Security::TerminalFailover`; docs/scaling.md).

use anyhow::{Context, Result};
use pep::config::TerminalConfig;
use pep::hop::Security;
use pep::keys::{PrivateKey, PublicKey};
use std::net::SocketAddr;

/// The terminal's `Security`: `gateway` (resolved) first, then each backup, resolved here.
pub async fn terminal_security(
    cfg: &TerminalConfig,
    local: PrivateKey,
    gateway: SocketAddr,
    gateway_key: PublicKey,
) -> Result<Security> {
    let backups = cfg.backup_gateways()?;
    if backups.is_empty() {
        return Ok(Security::Terminal {
            local,
            gateway_key,
            gateway,
        });
    }
    let mut gateways = vec![(gateway, gateway_key)];
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
    Ok(Security::TerminalFailover { local, gateways })
}
