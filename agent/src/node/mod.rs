//! The node: what this agent does on its own host. Runtimes that start, stop and probe instances
//! ([`runtime`]), the guard that fences exclusive ones ([`guard`]), exec sessions ([`exec`]),
//! DNS answered from gossip ([`dns`]), and the host loop that turns this node's slice of the
//! placement into running instances ([`host`]).
//!
//! Layer: above [`crate::state`] and everything below it; below [`crate::dispatch`].

pub mod dns;
pub mod exec;
pub mod guard;
pub mod host;
pub mod runtime;
