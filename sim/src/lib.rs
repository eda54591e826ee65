//! `shoal-sim`: Shoal's chaos simulator.
//!
//! Two tiers (docs/sim.md): the real-code tier runs real agents (chitchat gossip, the
//! desired-state store, the API, placement) on a simulated network under paused tokio time, one
//! simulation per process; the model tier drives the same placement and reconcile core (one
//! `Reconciler` per host) from a plain discrete-event loop with a gossip-delay model, for meshes
//! of ten thousand hosts.
//!
//! What this crate does not do: it never opens a socket, reads the wall clock inside a run, or
//! draws randomness from anywhere but the run's seed. The process-wide entropy override that
//! makes chitchat and std's hash maps replay lives in the `shoal-sim` binary, not here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod clock;
pub mod host;
pub mod model;
pub mod net;
pub mod report;
pub mod runtime;
pub mod scenario;
pub mod seeds;
pub mod swarm;
pub mod trace;
pub mod world;
