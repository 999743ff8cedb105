//! Channel adapters: where inbound messages come from and replies go. Each
//! adapter translates its own wire types into [`crate::domain`] types at the edge.

pub mod console;
pub mod telegram;
