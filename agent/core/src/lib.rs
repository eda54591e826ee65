//! Shoal's sans-IO core.
//!
//! Everything here is a pure function or a state machine of its inputs: workload specs and their
//! validation, and deterministic placement. The crate does no I/O, reads no clock and spawns
//! nothing: time and randomness arrive as arguments. That is what lets the simulator replay any run
//! and what makes placement identical bit for bit on every agent.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// The clippy.toml beside this crate refuses clocks, files, sockets, threads and random hashers by
// path; printing goes through std's macros, which it cannot see, hence these lints.
#![warn(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

pub mod cells;
pub mod claims;
pub mod constraint;
pub mod hlc;
pub mod instance;
pub mod memo;
pub mod placement;
pub mod ports;
pub mod reconcile;
pub mod resources;
pub mod rollout;
pub mod spec;
pub mod stable_hash;
pub mod stacking;
pub mod store;
pub mod upgrade;
pub mod verdict;
pub mod version;

pub use constraint::{Constraint, ConstraintOp};
pub use resources::Resources;
