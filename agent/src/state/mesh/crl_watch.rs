//! The agent's watch over its authority, every [`WATCH_INTERVAL`]:
//! - `crl.pem` in the --pki directory: adopted when newer, then written to the store;
//! - the store's revocation list ([`crate::identity::crl::STORE_NAME`], replicated from whichever agent was
//!   given it): adopted when newer; when the store holds an older or a bad one, this agent's
//!   newer list is written back (so a stale write cannot carry an older list to new agents);
//! - the adopted list is kept in the data directory, so a restart does not forget it;
//! - this node's certificate file: when it changes (`shoal pki renew`), the identity is reloaded
//!   and the endpoints present the new certificate to new connections.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use shoal_core::store::Body;

use crate::identity::crl::{der_from_pem_or_der, CRL_BYTES_MAX, CRL_FILE, STORE_NAME};
use crate::state::mesh::node::MeshNode;

/// How often the files and the store are looked at. With the store's anti-entropy (300 ms
/// rounds), a list given to one agent is adopted by every agent of a 20-agent mesh in about 2 s.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Where an agent keeps the list it adopted, in its data directory.
const KEPT_FILE: &str = "crl.der";

/// Runs until `node` is dropped.
pub async fn watch(node: Weak<MeshNode>, pki_dir: PathBuf, data_dir: PathBuf, name: String) {
    let kept = data_dir.join(KEPT_FILE);
    // The number of the list in the data directory, and (store entry version, number in force)
    // when the store was last looked at: each round does only what changed since.
    let mut kept_number = None;
    if let (Some(node), Ok(der)) = (node.upgrade(), std::fs::read(&kept)) {
        let _ = node.authority.adopt_crl(&der, "the data directory");
        kept_number = node.authority.crl_number();
    }
    let mut store_seen = None;
    let crl_file = pki_dir.join(CRL_FILE);
    let cert_file = pki_dir.join(format!("{name}.crt"));
    let mut crl_seen = modified(&crl_file);
    let mut cert_seen = modified(&cert_file);
    let mut first = true;
    loop {
        let Some(node) = node.upgrade() else { return };
        // 1. The operator's file (read once at start whatever its age, then when it changes).
        let crl_now = modified(&crl_file);
        if first || crl_now != crl_seen {
            crl_seen = crl_now;
            if crl_now.is_some() {
                from_file(&node, &crl_file).await;
            }
        }
        // 2. The store's copy, when it or the list in force moved.
        let store_now = Some((store_version(&node).await, node.authority.crl_number()));
        if store_now != store_seen && from_store(&node).await {
            store_seen = store_now; // a failed write back is tried again next round
        }
        // 3. Keep what is in force.
        let held = node.authority.crl_number();
        if held.is_some() && held != kept_number {
            if let Some(crl) = node.authority.crl() {
                match write_kept(&kept, &crl.der) {
                    Ok(()) => kept_number = Some(crl.number),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %kept.display(), "keeping the CRL failed")
                    }
                }
            }
        }
        // 4. A renewed certificate.
        let cert_now = modified(&cert_file);
        if cert_now != cert_seen && reload_identity(&node, &pki_dir, &name) {
            cert_seen = cert_now;
        }
        first = false;
        drop(node);
        tokio::time::sleep(WATCH_INTERVAL).await;
    }
}

fn modified(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

async fn from_file(node: &Arc<MeshNode>, path: &Path) {
    let read = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            if bytes.len() > 2 * CRL_BYTES_MAX {
                return Err(format!("{} bytes is too large for a CRL", bytes.len()));
            }
            der_from_pem_or_der(&bytes)
        });
    let der = match read {
        Ok(der) => der,
        Err(why) => {
            tracing::warn!(path = %path.display(), %why, "CRL file unreadable");
            return;
        }
    };
    let from = path.display().to_string();
    if let Ok(true) = node.authority.adopt_crl(&der, &from) {
        publish(node, &der, &format!("{CRL_FILE} of {}", node.name)).await;
    }
}

async fn store_version(node: &MeshNode) -> Option<shoal_core::hlc::Version> {
    node.with_store(|s| s.get(STORE_NAME).map(|e| e.version.clone()))
        .await
}

/// Adopts the store's list, or writes a newer one held here back to the store; false when that
/// write failed.
async fn from_store(node: &Arc<MeshNode>) -> bool {
    let stored = node
        .with_store(|s| s.get(STORE_NAME).map(|e| e.body.clone()))
        .await;
    let held = node.authority.crl();
    let stored_der = match &stored {
        Some(Body::Live(der)) => Some(der.clone()),
        _ => None,
    };
    if let Some(der) = &stored_der {
        if held.as_ref().is_some_and(|h| &h.der == der) {
            return true;
        }
        // A refusal is counted and logged; a newer list held here is written back below.
        if node.authority.adopt_crl(der, "the store").is_ok() {
            return true;
        }
    }
    match held {
        Some(held) => {
            publish(
                node,
                &held.der,
                &format!("{} (the list it holds)", node.name),
            )
            .await
        }
        None => true,
    }
}

/// Writes `der` to the store as the mesh's revocation list, signed by this node, and replicates
/// it. Failures are logged (and false): the next round tries again.
pub async fn publish(node: &Arc<MeshNode>, der: &[u8], by: &str) -> bool {
    match node
        .clone()
        .store_reserved(STORE_NAME, der.to_vec(), by.to_string())
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e.message, "writing the CRL to the store failed; retrying");
            false
        }
    }
}

fn write_kept(path: &Path, der: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, der)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Loads the renewed identity; false when it cannot be used yet (a half-written pair: the key
/// renamed, the certificate not yet), to be retried next round.
fn reload_identity(node: &Arc<MeshNode>, pki_dir: &Path, name: &str) -> bool {
    use crate::identity::pki::{load_identity, SelfIssue};
    let loaded = load_identity(pki_dir, name, SelfIssue::No).map_err(|e| e.to_string());
    match loaded.and_then(|id| node.authority.set_identity(&id).map_err(|e| e.to_string())) {
        Ok(()) => {
            tracing::info!(name, "renewed certificate loaded");
            true
        }
        Err(why) => {
            tracing::warn!(name, %why, "renewed certificate not loaded yet");
            false
        }
    }
}
