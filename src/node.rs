//! What makes this `pincer run` one node of several (`[cluster] enabled`, a
//! shared PostgreSQL `[store] url`). A node is one incarnation of a
//! `NodeId` with a row in `nodes` that it keeps alive (`membership`); while
//! it is registered it claims the groups placement gives it, taking over
//! what their last holder left in flight (`claims`), hears other nodes'
//! work through LISTEN (`hints`), serves a platform only while it holds its
//! gateway lease (`gateway`), runs the chat commands handed to the groups
//! it holds (`commands`), carries tool approvals between a group's node and
//! the gateway's (`approvals`), and before it stops hands everything it
//! holds to the others at turn boundaries (`drain`). Its CLIs run only under
//! its leases and die at its deadline by themselves.
//!
//! The rooms of a node, each a floor apart so no cycle closes:
//! - `crate::cluster`: the pure decisions (who a node is, its lease clocks,
//!   placement, claim rounds, ghosts, the fence, the PostgreSQL bounds). The
//!   config and the store need them, so they stand below both.
//! - `crate::store::cluster`: the cluster's statements, reached through
//!   `Store::cluster()` (none on SQLite).
//! - here: the node's tasks, which run those decisions over the store, the
//!   router and the channels' `Ports`, each with typed errors and no
//!   `anyhow`. A task is handed back as a value (`ClaimLoop`,
//!   `CommandTaker`, `approvals::Asking`, `Gateway`) for the wiring to
//!   spawn; nothing here names `crate::app`.
//! - `app::node`: the wiring only: makes these with the engine's parts and
//!   spawns them as the daemon's services.
//!
//! On one machine nothing here starts.

pub mod approvals;
mod claims;
mod commands;
pub mod drain;
pub mod gateway;
mod hints;
mod membership;

pub use claims::ClaimLoop;
pub use commands::CommandTaker;
pub use drain::{others_alive, DrainPort, NodeDrain};
pub use gateway::Gateway;
pub use hints::{look_at_outbox, run as listen_for_hints};
pub use membership::{Membership, MembershipConfig, NodeState};
