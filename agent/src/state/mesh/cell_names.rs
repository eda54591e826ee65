//! One name per host across cells. Inside a cell, chitchat shows a second agent of the same name
//! at start (`mesh::run`); agents of two cells never gossip, so an agent of a mesh of cells asks
//! every other cell it learns of, once, whether a live member there has its name
//! (`Request::NameUsed`). A name in use elsewhere stops the agent with the same error as inside
//! a cell.

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use crate::state::mesh::node::MeshNode;
use crate::wire::api::{Request, Response};

/// Time between two looks for cells not asked yet.
pub const NAMES_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Asks each other cell, once it is known and up, whether a live member there is named as this
/// agent. Returns the conflict, if one is found; runs until the node is dropped otherwise.
pub async fn watch_names(node: Weak<MeshNode>) -> Option<String> {
    let mut asked: BTreeSet<String> = BTreeSet::new();
    loop {
        tokio::time::sleep(NAMES_CHECK_INTERVAL).await;
        let node = node.upgrade()?;
        for cell in node.cells.list() {
            let name = cell.summary.cell.clone();
            if cell.own || cell.down || asked.contains(&name) {
                continue;
            }
            let req = Request::NameUsed {
                name: node.name.clone(),
            };
            let accept = |answer| match answer {
                Response::NameUsed { live } => Ok(live),
                other => Err(other),
            };
            match super::cell_exchange::ask_contacts(&node, &name, &req, accept).await {
                Ok(true) => {
                    return Some(format!(
                        "the name {:?} is already used by a live agent of cell {name}: choose \
                         another --name (or stop that agent first)",
                        node.name
                    ))
                }
                Ok(false) => {
                    asked.insert(name);
                }
                Err(_) => {} // Not answered: asked again at the next look.
            }
        }
    }
}
