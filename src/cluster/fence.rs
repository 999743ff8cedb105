//! The fencing token: a lease's name, its holder and the epoch of the
//! claim. Pure: touches nothing. The SQL that claims a lease, checks it
//! before every fenced write and releases it is `store::cluster::fence`'s.

use crate::domain::GroupName;

use super::node_id::NodeId;

/// The name of a lease: a group's own name, or a gateway's `gw:` name. Group
/// names have no `:`, so the two never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseName(String);

impl LeaseName {
    pub fn group(group: &GroupName) -> Self {
        Self(group.as_str().to_owned())
    }

    /// The lease of one Telegram bot: only its holder polls, sets the webhook
    /// and sends.
    pub fn telegram(bot_id: i64) -> Self {
        Self(format!("gw:telegram:{bot_id}"))
    }

    /// The lease of one WhatsApp number (digits of the phone number).
    pub fn whatsapp(number: &str) -> Self {
        Self(format!("gw:whatsapp:{number}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Proof of one claim: valid while `leases` still holds this lease for this
/// node at this epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub lease: LeaseName,
    pub node: NodeId,
    pub epoch: i64,
}

impl Fence {
    /// The parameters of the store's fence check and release, in order.
    pub fn params(&self) -> (&str, &str, i64) {
        (self.lease.as_str(), self.node.as_str(), self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_of_groups_and_gateways_never_collide() {
        let group: GroupName = "family".parse().unwrap();
        assert_eq!(LeaseName::group(&group).as_str(), "family");
        assert_eq!(LeaseName::telegram(123456).as_str(), "gw:telegram:123456");
        assert_eq!(LeaseName::whatsapp("4915112345678").as_str(), "gw:whatsapp:4915112345678");
        assert!("gw:x".parse::<GroupName>().is_err(), "a group named like a gateway lease");
    }
}
