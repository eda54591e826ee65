//! State: what agents agree on. The on-disk desired-state store ([`store_db`]), this agent's
//! cell and the cells it knows ([`cells`]), and the mesh ([`mesh`]): node records in gossip,
//! anti-entropy of the store, the mesh version, and the processes that keep them.
//!
//! Layer: above [`crate::transport`], [`crate::identity`] and [`crate::wire`]; below the node.

pub mod cells;
pub mod mesh;
pub mod store_db;
