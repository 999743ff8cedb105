//! pincer: a daemon that gives each chat group one long-lived Claude Code agent.
//!
//! Start reading at [`app`] (wiring and shutdown), then [`router`] (inbound →
//! group session) and [`session`] (one actor per group that owns the CLI child).
//! `ARCHITECTURE.md` at the repository root has the bird's-eye view.

pub mod app;
pub mod backup;
pub mod channel;
pub mod claude;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod control;
pub mod domain;
pub mod endpoint;
pub mod groups;
pub mod lock;
pub mod logging;
pub mod media;
pub mod metrics;
pub mod node;
pub mod outbox;
pub mod private;
pub mod retry;
pub mod router;
pub mod sandbox;
pub mod scheduler;
pub mod service;
pub mod session;
pub mod status;
pub mod store;
pub mod tools;
pub mod workspace;
