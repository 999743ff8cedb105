//! The WhatsApp channel: pincer as a linked device of a WhatsApp account
//! (whatsapp-rust), serving registered groups as the Telegram channel does.
//! The crate's types stop here: the core sees `ChatAddress`, `Inbound` and
//! outbox rows.
//!
//! - Inbound messages are taken in the crate's **durability hook**, before
//!   WhatsApp is acknowledged: each is stored (as a message for the agent, or
//!   as context) or refused as a second copy (by chat, sender and id), and only
//!   then does the hook return. If storing fails the hook fails, nothing is
//!   acknowledged, and WhatsApp delivers the message again later.
//! - Connection events (connected, disconnected, logged out, banned,
//!   replaced) are logged and stored for `pincer whatsapp status` and
//!   `pincer doctor`; a watchdog warns when a connected session stays silent.
//! - `channel::delivery` drains the WhatsApp outbox through [`outbound`];
//!   while WhatsApp is unreachable or logged out, replies wait there.
//! - Approvals are text: a code to answer (see [`approvals`]).
//! - Progress: [`WhatsAppStatus`] shows a slow turn's status message (edited
//!   in place, or reposted at most once a minute when edits fail), and an
//!   engaging message gets the receipt reaction.
//!
//! The adapter is generic over [`WaClient`], so the tests run it with a fake
//! client and feed it the crate's real event types.

mod adapter;
mod approvals;
mod client;
mod commands;
mod error;
mod event;
mod fitness;
pub mod format;
mod health;
mod inbound;
pub mod link;
mod media;
mod outbound;
mod role;
mod shared;
mod status;

pub use adapter::{Hook, ServeOptions, WhatsApp};
pub use client::{MediaRef, OwnIds, Real, WaClient, WaError, WaMediaKind};
pub use error::TakeError;
pub use media::WaFiles;
pub use status::{WhatsAppStatus, EDIT_WINDOW, REPOST_EVERY, STATUS_EVERY, STATUS_TIMEOUT, STOP_HINT};
