//! What this linked device does on WhatsApp besides receiving: on one
//! machine everything; on a cluster node (issue 36) everything only while it
//! holds the number's gateway lease (`gw:whatsapp:<number>`), and otherwise
//! nothing but storing what arrives and marking it read. Touches nothing.
//!
//! Every node of a cluster links its own companion device of the number, so
//! each receives every message and stores it (the store refuses the second
//! copy by message id). Anything a message causes in the chat (the receipt
//! reaction, typing, a status message, a command's answer, `/chatid`) is the
//! holder's alone, so the chat sees it once. Read receipts are the
//! exception: they tell WhatsApp which messages the *account* read (never a
//! message in the chat, and a second one changes nothing), and a device that
//! sends none is reported to stop getting group messages, which would leave
//! a standby node deaf when it must take over.

use std::sync::{Arc, Mutex};

/// Which part this device plays now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// One machine: the device does everything, as it always did.
    Alone,
    /// A cluster node holding the number's lease: it sends.
    Holder,
    /// A cluster node without the lease: it stores what arrives, no more.
    Standby,
}

impl Role {
    /// Whether a message this device stored (or a command it read) gets
    /// its effects in the chat from this device.
    pub fn acts(self) -> bool {
        self != Role::Standby
    }

    /// Whether a message stored already gets them too. On one machine a
    /// second copy is WhatsApp's redelivery of one already acted on; on a
    /// cluster it is most often the same message stored first by another
    /// node, which did not act on it: the holder does, whoever stored it.
    /// (Each effect is idempotent: one reaction per message, one typing loop
    /// and one status message per group.)
    pub fn acts_on_copy(self) -> bool {
        self == Role::Holder
    }

    /// Whether it marks what it receives read: every device does (see the module's doc).
    pub fn marks_read(self) -> bool {
        true
    }
}

/// The role, changed by the gateway's rounds and read by the message handlers.
#[derive(Clone, Debug)]
pub(super) struct Roles(Arc<Mutex<Role>>);

impl Default for Roles {
    fn default() -> Roles {
        Roles(Arc::new(Mutex::new(Role::Alone)))
    }
}

impl Roles {
    pub fn now(&self) -> Role {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set(&self, role: Role) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = role;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_holder_or_a_lone_device_acts_and_every_device_marks_read() {
        assert!(Role::Alone.acts() && !Role::Alone.acts_on_copy());
        assert!(Role::Holder.acts() && Role::Holder.acts_on_copy());
        assert!(!Role::Standby.acts() && !Role::Standby.acts_on_copy());
        assert!([Role::Alone, Role::Holder, Role::Standby].iter().all(|r| r.marks_read()));
    }

    #[test]
    fn a_device_is_alone_until_a_gateway_round_says_otherwise() {
        let roles = Roles::default();
        assert_eq!(roles.now(), Role::Alone);
        roles.set(Role::Standby);
        assert_eq!(roles.clone().now(), Role::Standby);
    }
}
