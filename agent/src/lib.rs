//! The Shoal agent shell and CLI: feeds the sans-IO core (`shoal_core`) and executes what it returns.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use shoal_core as core;

pub mod admission;
pub mod agent;
pub mod authority;
pub mod cells;
pub mod dispatch;
pub mod dns;
pub mod exec;
pub mod gossip;
pub mod guard;
pub mod host;
pub mod mesh;
pub mod metrics;
pub mod pki;
pub mod rpc;
pub mod runtime;
pub mod store_db;
pub mod tls;
pub mod transport_stats;
pub mod wire;
