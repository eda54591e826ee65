//! Identity: who a peer is and what it may do. The cluster's PKI (certificates, keys, names,
//! roles), the TLS configurations and verifiers built from it, and the authority that holds the
//! live trust roots, the revocation list and the per-node caps.
//!
//! Layer: the bottom of the shell; it imports nothing of it. Every layer above (wire, transport,
//! state, node, dispatch, agent, the CLI) may import it.

pub mod authority;
pub mod crl;
pub mod names;
pub mod pki;
pub mod tls;
