//! The web UI (`shoal agent --ui ADDR`): read-only pages of the mesh as this agent sees it,
//! server-rendered HTML with a little vanilla JavaScript that follows server-sent events.
//!
//! Layered above [`crate::dispatch`]: every page is built from [`Api`] answers asked with a
//! read-only identity ([`source`]), so a page shows exactly what `shoal ... --role reader` would
//! see, secrets redacted by the API. It writes nothing, forwards nothing of its own, and holds
//! the API weakly: a stopped agent is not kept alive by an open browser.
//!
//! [`server`] accepts connections (plain HTTP on loopback only; TLS with a client certificate of
//! the cluster elsewhere), [`pages`] renders, [`live`] streams changes to bounded clients.
//! docs/ui.md.
//!
//! **Architecture Invariant:** the UI never answers from a role above `reader`, and every
//! buffer it keeps for a browser is bounded ([`live::CLIENT_BUFFER_MESSAGES`],
//! [`live::CLIENTS_MAX`], [`server::CONNECTIONS_MAX`]).

mod html;
pub mod live;
mod pages;
mod routes;
pub mod server;
mod source;

pub use server::{check_addr, serve, UiListener, UiTls};

use crate::dispatch::Api;

/// The API a page reads from, weakly held.
pub(crate) type WeakApi = std::sync::Weak<Api>;
