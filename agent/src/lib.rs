//! The Shoal agent shell and CLI: feeds the sans-IO core (`shoal_core`) and executes what it returns.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use shoal_core as core;

// The layers, bottom up: each module imports only the ones listed before it (checked by
// agent/tests/layering.rs; docs/ARCHITECTURE.md has the map). The CLI, above them all, is
// a module of the binary (main.rs). `ui` (the web UI) sits above `dispatch` and below `agent`,
// which starts it.
pub mod agent;
pub mod dispatch;
pub mod identity;
pub mod node;
pub mod state;
pub mod transport;
pub mod ui;
pub mod wire;
