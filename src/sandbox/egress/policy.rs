//! A group's egress policy: which names and ports its agent may reach, and
//! the words a refusal uses to say which rule refused and what to change.
//!
//! - `api-only` (the default): nothing. The model is reached through the
//!   credential proxy, which is not this proxy.
//! - `allowlist`: the names in `allow_domains` (global and the group's own,
//!   together), on ports 80 and 443, or on the port an entry names.
//! - `open`: any name on 80 and 443, plus the name/port pairs listed.
//!
//! How names and entries match is `domain::net`'s. Whatever the policy,
//! addresses are vetted afterwards (`resolve`).

use std::net::IpAddr;

use crate::domain::net::{DomainPattern, Forbidden, Host, NetworkPolicy, DEFAULT_PORTS};
use crate::domain::GroupName;

/// One group's effective policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    group: GroupName,
    network: NetworkPolicy,
    allow: Vec<DomainPattern>,
}

impl Policy {
    pub fn new(group: GroupName, network: NetworkPolicy, allow: Vec<DomainPattern>) -> Policy {
        Policy { group, network, allow }
    }

    /// The group's `network` (else `[sandbox] network`) with the global
    /// `allow_domains` and the group's own together.
    pub fn for_group(config: &crate::config::SandboxConfig, group: &GroupName) -> Policy {
        let own = config.groups.get(group.as_str());
        let network = own.and_then(|g| g.network).unwrap_or(config.network);
        let mut allow = config.allow_domains.clone();
        allow.extend(own.iter().flat_map(|g| g.allow_domains.iter().cloned()));
        Policy { group: group.clone(), network, allow }
    }

    pub fn group(&self) -> &GroupName {
        &self.group
    }

    pub fn network(&self) -> NetworkPolicy {
        self.network
    }

    /// Whether the policy lets the agent ask for `host:port` (before its
    /// addresses are vetted).
    pub fn check(&self, host: &Host, port: u16) -> Result<(), Refusal> {
        let refused = |rule| Refusal { group: self.group.clone(), host: host.clone(), port, rule };
        let naming: Vec<&DomainPattern> = self.allow.iter().filter(|p| p.names(host)).collect();
        match self.network {
            NetworkPolicy::ApiOnly => Err(refused(Rule::ApiOnly)),
            _ if naming.iter().any(|p| p.allows_port(port)) => Ok(()),
            NetworkPolicy::Open if DEFAULT_PORTS.contains(&port) => Ok(()),
            NetworkPolicy::Allowlist if naming.is_empty() => Err(refused(Rule::NotListed)),
            _ => Err(refused(Rule::Port)),
        }
    }
}

/// A request the policy does not let through, and the words for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub group: GroupName,
    pub host: Host,
    pub port: u16,
    pub rule: Rule,
}

/// Which rule refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    ApiOnly,
    NotListed,
    Port,
    /// The name has (or is) an address pincer never connects to.
    Address {
        ip: IpAddr,
        why: Forbidden,
    },
}

impl Refusal {
    /// The short reason stored with the decision.
    pub fn reason(&self) -> String {
        match &self.rule {
            Rule::ApiOnly => "network = \"api-only\"".to_owned(),
            Rule::NotListed => "not in allow_domains".to_owned(),
            Rule::Port => format!("port {} not allowed", self.port),
            Rule::Address { ip, why } => format!("{ip} is {why}"),
        }
    }

    /// The text the agent gets with the 403: what refused and what an operator would change.
    pub fn explain(&self) -> String {
        let section = format!("[sandbox.groups.{}] in pincer.toml", self.group);
        let (host, port) = (&self.host, self.port);
        let name = host.to_string();
        let what = format!("pincer's egress proxy refused {host}:{port} for group \"{}\"", self.group);
        match &self.rule {
            Rule::ApiOnly => format!(
                "{what}: the group's network policy is \"api-only\" (no internet for tools, the model only). \
                 To let it through, set network = \"allowlist\" and allow_domains = [\"{name}\"] in {section}."
            ),
            Rule::NotListed => {
                let entry = if DEFAULT_PORTS.contains(&port) { name } else { format!("{name}:{port}") };
                format!("{what}: it is not in the group's allowlist. To let it through, add \"{entry}\" to allow_domains in {section}.")
            }
            Rule::Port => format!(
                "{what}: only ports 80 and 443 are allowed unless an entry names the port. \
                 To let it through, add \"{name}:{port}\" to allow_domains in {section}."
            ),
            Rule::Address { ip, why } => format!(
                "{what}: it is or resolves to {ip}, {why}. pincer never connects to loopback, private, \
                 link-local or other local addresses, whatever the policy."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(s: &str) -> DomainPattern {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn policy(network: NetworkPolicy, allow: &[&str]) -> Policy {
        Policy::new("team".parse().unwrap(), network, allow.iter().map(|s| pattern(s)).collect())
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    fn rule(p: &Policy, h: &str, port: u16) -> Option<Rule> {
        p.check(&host(h), port).err().map(|r| r.rule)
    }

    #[test]
    fn a_wildcard_matches_subdomains_at_any_depth_but_not_the_name_itself() {
        let p = policy(NetworkPolicy::Allowlist, &["*.github.com"]);
        assert_eq!(rule(&p, "api.github.com", 443), None);
        assert_eq!(rule(&p, "a.b.GITHUB.com.", 443), None);
        assert_eq!(rule(&p, "github.com", 443), Some(Rule::NotListed));
        assert_eq!(rule(&p, "evilgithub.com", 443), Some(Rule::NotListed));
        assert_eq!(rule(&p, "github.com.evil.test", 443), Some(Rule::NotListed));
    }

    #[test]
    fn names_match_exactly_case_and_trailing_dot_aside() {
        let p = policy(NetworkPolicy::Allowlist, &["github.com", "203.0.113.7"]);
        assert_eq!(rule(&p, "GitHub.com.", 443), None);
        assert_eq!(rule(&p, "github.com", 80), None);
        assert_eq!(rule(&p, "api.github.com", 443), Some(Rule::NotListed));
        assert_eq!(rule(&p, "203.0.113.7", 443), None);
        assert_eq!(rule(&p, "203.0.113.8", 443), Some(Rule::NotListed));
        assert_eq!(rule(&p, "[2001:4860::1]", 443), Some(Rule::NotListed));
    }

    #[test]
    fn ports_are_80_and_443_unless_an_entry_names_one() {
        let p = policy(NetworkPolicy::Allowlist, &["github.com", "example.test:8443"]);
        assert_eq!(rule(&p, "github.com", 22), Some(Rule::Port));
        assert_eq!(rule(&p, "example.test", 8443), None);
        // An entry with a port allows that port only.
        assert_eq!(rule(&p, "example.test", 443), Some(Rule::Port));
        let open = policy(NetworkPolicy::Open, &["example.test:8443"]);
        assert_eq!(rule(&open, "anything.test", 443), None);
        assert_eq!(rule(&open, "1.1.1.1", 80), None);
        assert_eq!(rule(&open, "anything.test", 8443), Some(Rule::Port));
        assert_eq!(rule(&open, "example.test", 8443), None);
    }

    #[test]
    fn api_only_refuses_even_what_is_listed() {
        let p = policy(NetworkPolicy::ApiOnly, &["github.com"]);
        assert_eq!(rule(&p, "github.com", 443), Some(Rule::ApiOnly));
    }

    #[test]
    fn a_refusal_names_the_rule_and_the_change_that_would_allow_it() {
        let p = policy(NetworkPolicy::Allowlist, &["github.com"]);
        let text = p.check(&host("Example.com"), 443).unwrap_err().explain();
        assert!(text.contains("add \"example.com\" to allow_domains in [sandbox.groups.team]"), "{text}");
        let text = p.check(&host("other.test"), 8443).unwrap_err().explain();
        assert!(text.contains("add \"other.test:8443\""), "{text}");
        let text = p.check(&host("github.com"), 22).unwrap_err().explain();
        assert!(text.contains("add \"github.com:22\""), "{text}");
        let text = policy(NetworkPolicy::ApiOnly, &[]).check(&host("github.com"), 443).unwrap_err().explain();
        assert!(text.contains("\"api-only\"") && text.contains("network = \"allowlist\""), "{text}");
    }

    #[test]
    fn a_group_adds_its_own_names_and_may_choose_its_own_policy() {
        let config: crate::config::SandboxConfig = toml_config(
            "network = \"allowlist\"\nallow_domains = [\"pypi.org\"]\n\
             [groups.team]\nallow_domains = [\"github.com\"]\n[groups.open]\nnetwork = \"open\"\n",
        );
        let team = Policy::for_group(&config, &"team".parse().unwrap());
        assert_eq!(team.network(), NetworkPolicy::Allowlist);
        assert_eq!(rule(&team, "github.com", 443), None);
        assert_eq!(rule(&team, "pypi.org", 443), None);
        let other = Policy::for_group(&config, &"other".parse().unwrap());
        assert_eq!(rule(&other, "github.com", 443), Some(Rule::NotListed));
        let open = Policy::for_group(&config, &"open".parse().unwrap());
        assert_eq!(open.network(), NetworkPolicy::Open);
        let default = Policy::for_group(&Default::default(), &"team".parse().unwrap());
        assert_eq!(default.network(), NetworkPolicy::ApiOnly);
    }

    fn toml_config(text: &str) -> crate::config::SandboxConfig {
        use figment::providers::{Format, Toml};
        figment::Figment::from(Toml::string(text)).extract().unwrap()
    }
}
