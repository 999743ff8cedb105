//! What makes this `pincer run` one node of several (`[cluster] enabled`, a
//! shared PostgreSQL `[store] url`). A node is one incarnation of a
//! `NodeId` with a row in `nodes` that it keeps alive (`membership`); while
//! it is registered it claims the groups placement gives it, taking over
//! what their last holder left in flight (`claims`), hears other nodes'
//! work through LISTEN (`hints`), and before it stops hands everything it
//! holds to the others at turn boundaries (`drain`). Its CLIs run only under
//! its leases and die at its deadline by themselves.
//!
//! The rooms of a node, each a floor apart so no cycle closes:
//! - `crate::cluster`: the pure decisions (who a node is, its lease clocks,
//!   placement, claim rounds, ghosts, the fence, the PostgreSQL bounds). The
//!   config and the store need them, so they stand below both.
//! - `crate::store::cluster`: the cluster's statements, reached through
//!   `Store::cluster()` (none on SQLite).
//! - here: the node's tasks, which run those decisions over the store and
//!   the router, each with typed errors and no `anyhow`.
//! - `app::node`: the wiring only: starts these with the engine's parts.
//!
//! On one machine nothing here starts.

mod claims;
pub mod drain;
mod hints;
mod membership;

pub use claims::ClaimLoop;
pub use drain::{others_alive, DrainPort, NodeDrain};
pub use hints::run as listen_for_hints;
pub use membership::{Membership, MembershipConfig, NodeState};
