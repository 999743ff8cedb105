//! What the WhatsApp message handlers hold in common: the client, the
//! ports, intake, and the state of prompts, typing, status messages, the
//! connection's health and the device's role. Touches nothing itself.

use std::sync::Arc;

use super::approvals;
use super::fitness::Fit;
use super::health::Health;
use super::role::Roles;
use super::status::WhatsAppStatus;
use crate::channel::intake::Intake;
use crate::channel::Ports;

/// What the message handlers, the hook and the approval loop share.
pub(super) struct Shared<C> {
    pub client: Arc<C>,
    pub ports: Ports,
    pub intake: Intake,
    pub approvals: Arc<approvals::Waiting>,
    pub typing: crate::channel::typing::Typing,
    /// Status messages and the receipt reaction.
    pub status: Arc<WhatsAppStatus<C>>,
    /// The groups' status messages being kept up to date.
    pub progress: crate::channel::progress::Progress,
    /// Whether the status messages a stopped pincer left were cleaned up.
    pub cleaned: std::sync::atomic::AtomicBool,
    pub health: Health,
    /// Whether this device acts in the chats now, or only stores (a cluster's standby).
    pub roles: Roles,
    /// Whether the device is fit to be a cluster's gateway (its connection).
    pub fit: Fit,
}
