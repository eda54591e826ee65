//! Transport: how bytes move between agents and to operators. Request/response RPC over QUIC
//! ([`rpc`]), membership gossip and its networks ([`gossip`]), admission of incoming connections
//! ([`admission`]), transport counters ([`stats`]), the OpenMetrics endpoint ([`metrics`]) and the
//! gate the simulator freezes an agent's tasks with ([`freeze`]).
//!
//! Layer: above [`crate::wire`] and [`crate::identity`]; below the state it carries.

pub mod admission;
pub mod freeze;
pub mod gossip;
pub mod metrics;
pub mod rpc;
pub mod stats;
