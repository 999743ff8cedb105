//! The control socket: how other `pincer` commands reach a running daemon.
//!
//! `pincer run` listens on `data_dir/pincer.sock` (owner-only, and each peer's
//! uid is checked). `pincer chat NAME` beside a daemon attaches to it there,
//! so the group's one live session answers the terminal too and no second CLI
//! is started; `pincer groups …` and `pincer tasks …` say what they changed,
//! so the daemon acts at once instead of at its next poll. The socket is a
//! convenience on top of the store, never a second source of truth: every
//! change is in the store before the daemon is told.

pub mod client;
mod path;
pub mod server;
pub mod wire;

pub use path::socket_path;
