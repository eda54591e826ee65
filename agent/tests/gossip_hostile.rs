//! A peer that sends a gossip digest naming thousands of nodes (more than one datagram's worth,
//! chitchat's limit for a gossip domain) must not stop an agent's gossip: chitchat 0.11.2
//! computed its reply budget as `65,507 - 1 - own digest`, which overflowed (a panic in a debug
//! build, a reply of unbounded size in a release one) once the agent's own digest grew past it.

use std::net::SocketAddr;
use std::time::Duration;

use chitchat::transport::Transport;
use chitchat::{ChitchatId, ChitchatMessage, Deserializable, Serializable};
use shoal::agent::mem::{mem_setup, start_mem_node, tokio_clock};
use shoal::agent::run::RunningNode;
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;

const BASE_MS: u64 = 1_800_000_000_000;

/// A Syn whose digest lists `ghosts` nodes that do not exist, built through chitchat's own
/// serialization (magic, protocol version, kind, digest, cluster id).
fn flood_syn(ghosts: u16, cluster_id: &str) -> ChitchatMessage {
    let mut bytes = vec![];
    45_139u16.serialize(&mut bytes);
    0u8.serialize(&mut bytes);
    0u8.serialize(&mut bytes);
    ghosts.serialize(&mut bytes);
    for i in 0..ghosts {
        let addr = SocketAddr::from(([10, 9, (i >> 8) as u8, i as u8], 7000));
        ChitchatId::new(format!("ghost-{i:05}"), 1, addr).serialize(&mut bytes);
        for field in [1u64, 0, 5] {
            field.serialize(&mut bytes); // heartbeat, last gc version, max version
        }
    }
    cluster_id.to_string().serialize(&mut bytes);
    ChitchatMessage::deserialize(&mut &bytes[..]).expect("a well-formed Syn")
}

async fn live(node: &RunningNode) -> Vec<String> {
    let members = node.node.members().await;
    members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_digest_of_thousands_of_ghosts_does_not_stop_gossip() {
    let net = MemNetwork::new(11);
    let disks = [MemDisk::new(), MemDisk::new()];
    let mut nodes = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let setup = mem_setup(i, 0, "z");
        nodes.push(
            start_mem_node(&net, setup, disk, tokio_clock(BASE_MS))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(live(&nodes[1]).await, ["n1", "n2"]);

    let rogue = SocketAddr::from(([10, 0, 0, 99], 7000));
    let mut socket = net.transport().open(rogue).await.unwrap();
    let target = mem_setup(0, 0, "z").gossip_addr;
    let syn = flood_syn(3_000, &mem_setup(0, 0, "z").cluster_id);
    assert!(syn.serialized_len() > 65_507, "{}", syn.serialized_len());
    socket.send(target, syn).await.unwrap();

    // n1 now holds 3,000 more node states; it must keep gossiping with n2 and answering.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            live(&nodes[1]).await,
            ["n1", "n2"],
            "n2 lost sight of n1 after the flood"
        );
        assert_eq!(live(&nodes[0]).await, ["n1", "n2"]);
    }
}
