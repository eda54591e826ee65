//! The mesh: node records in gossip, the API, anti-entropy of the desired-state store, and the
//! agent process that wires them over QUIC.

pub mod api;
pub mod build;
pub mod data;
mod get;
pub mod history;
pub mod mem;
pub mod metrics;
pub mod node;
pub mod page;
pub mod record;
pub mod rollback;
pub mod run;
pub mod skew;
pub mod sync;
pub mod upgrade;
pub mod view;
