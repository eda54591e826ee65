//! The mesh: node records in gossip, the API, anti-entropy of the desired-state store, and the
//! agent process that wires them over QUIC.

pub mod build;
pub mod capabilities;
pub mod cell_exchange;
pub mod cell_names;
pub mod crl_watch;
pub mod data;
mod get;
pub mod history;
pub mod metrics;
pub mod node;
pub mod record;
pub mod rollback;
pub mod skew;
pub mod sync;
pub mod upgrade;
pub mod verdicts;
pub mod view;
