//! The fencing token: a lease's name, its holder and the epoch of the
//! claim. Pure: touches nothing. The SQL that claims a lease, checks it
//! before every fenced write and releases it is `store::cluster::fence`'s.

use crate::domain::{GroupName, Platform};

use super::node_id::NodeId;

/// What every gateway's lease name starts with.
const GATEWAY: &str = "gw:";

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

    /// The lease of the WhatsApp number `number`, if it is one (digits);
    /// `None` for a device that does not know its number (never paired).
    pub fn whatsapp_number(number: &str) -> Option<Self> {
        let digits = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
        digits.then(|| LeaseName::whatsapp(number))
    }

    /// A name read back from the store: a group's, or a Telegram or WhatsApp
    /// gateway's as pincer makes them; `None` for anything else.
    pub fn parse(stored: &str) -> Option<LeaseName> {
        if let Some(bot) = stored.strip_prefix("gw:telegram:") {
            return bot.parse::<i64>().ok().map(LeaseName::telegram);
        }
        if let Some(number) = stored.strip_prefix("gw:whatsapp:") {
            return LeaseName::whatsapp_number(number);
        }
        stored.parse::<GroupName>().ok().map(|group| LeaseName::group(&group))
    }

    /// A gateway's lease (a platform's), not a group's.
    pub fn is_gateway(&self) -> bool {
        self.0.starts_with(GATEWAY)
    }

    /// The chat platform a gateway's lease (`gw:<platform>:…`) serves; `None` for a group's.
    pub fn platform(&self) -> Option<Platform> {
        let mut parts = self.0.strip_prefix(GATEWAY)?.splitn(2, ':');
        match (parts.next().and_then(Platform::parse), parts.next()) {
            (Some(platform), Some(_)) if platform != Platform::Console => Some(platform),
            _ => None,
        }
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

    #[test]
    fn a_whatsapp_number_names_its_lease_and_a_device_without_one_has_none() {
        let lease = LeaseName::whatsapp_number("4915112345678");
        assert_eq!(lease.as_ref().map(LeaseName::as_str), Some("gw:whatsapp:4915112345678"));
        assert_eq!(LeaseName::whatsapp_number(""), None);
        assert_eq!(LeaseName::whatsapp_number("49151:1"), None);
    }

    #[test]
    fn a_stored_name_reads_back_as_the_lease_pincer_made_and_a_gateway_says_its_platform() {
        let team = LeaseName::group(&"team".parse().unwrap());
        for lease in [team.clone(), LeaseName::telegram(7), LeaseName::whatsapp("4915112345678")] {
            assert_eq!(LeaseName::parse(lease.as_str()), Some(lease.clone()));
        }
        for foreign in ["gw:telegram:x", "gw:whatsapp:", "gw:whatsapp:49 1", "gw:signal:1", "not a group"] {
            assert_eq!(LeaseName::parse(foreign), None, "{foreign}");
        }
        assert!(LeaseName::telegram(7).is_gateway() && !team.is_gateway());
        assert_eq!(LeaseName::telegram(7).platform(), Some(Platform::Telegram));
        assert_eq!(LeaseName::whatsapp("4915112345678").platform(), Some(Platform::WhatsApp));
        assert_eq!(team.platform(), None);
        assert_eq!(LeaseName("gw:console:x".into()).platform(), None);
    }
}
