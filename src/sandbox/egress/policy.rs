//! A group's egress policy: which names and ports its agent may reach, and
//! the words a refusal uses to say which rule refused and what to change.
//!
//! - `api-only` (the default): nothing. The model is reached through the
//!   credential proxy, which is not this proxy.
//! - `allowlist`: the names in `allow_domains` (global and the group's own,
//!   together), on ports 80 and 443, or on the port an entry names.
//! - `open`: any name on 80 and 443, plus the name/port pairs listed.
//!
//! Names match case-insensitively with a trailing dot ignored; `*.example.com`
//! matches every name below `example.com` (any depth), not `example.com`
//! itself. Whatever the policy, addresses are vetted afterwards (`resolve`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::resolve::vet_ip;
use crate::domain::GroupName;

/// `network = "api-only" | "allowlist" | "open"`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkPolicy {
    /// No internet for the agent's tools; only the model, through the credential proxy.
    #[default]
    ApiOnly,
    /// Only the names in `allow_domains`.
    Allowlist,
    /// Any public destination on ports 80 and 443.
    Open,
}

impl fmt::Display for NetworkPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkPolicy::ApiOnly => "api-only",
            NetworkPolicy::Allowlist => "allowlist",
            NetworkPolicy::Open => "open",
        })
    }
}

/// The ports every allowed name may be reached on without naming a port.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One `allow_domains` entry: `example.com`, `*.example.com` (subdomains
/// only), or either with `:port`; an IPv4 address may stand for a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DomainPattern {
    /// Below this name, not the name itself.
    wildcard: bool,
    /// Lower case, no trailing dot.
    name: String,
    /// The one port this entry allows; `None`: [`DEFAULT_PORTS`].
    port: Option<u16>,
}

/// Why an `allow_domains` entry was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("allow_domains entry {entry:?} {problem}")]
pub struct PatternError {
    entry: String,
    problem: String,
}

impl DomainPattern {
    /// Whether this entry names `host` (ports aside).
    fn names(&self, host: &Host) -> bool {
        match host {
            Host::Name(name) if self.wildcard => {
                name.len() > self.name.len() + 1
                    && name.ends_with(self.name.as_str())
                    && name.as_bytes()[name.len() - self.name.len() - 1] == b'.'
            }
            Host::Name(name) => *name == self.name,
            Host::Ip(IpAddr::V4(ip)) => !self.wildcard && self.name == ip.to_string(),
            Host::Ip(IpAddr::V6(_)) => false,
        }
    }

    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

impl FromStr for DomainPattern {
    type Err = PatternError;

    fn from_str(entry: &str) -> Result<DomainPattern, PatternError> {
        let bad = |problem: &str| PatternError { entry: entry.to_owned(), problem: problem.to_owned() };
        let lowered = entry.trim().to_ascii_lowercase();
        if lowered.contains("://") || lowered.contains('/') {
            return Err(bad("is a URL: write only the name, e.g. \"example.com\""));
        }
        let (host, port) = match lowered.split_once(':') {
            Some((host, port)) => {
                let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
                    bad("has a bad port: write \"example.com:8443\" (one port, 1-65535; IPv6 literals are not taken)")
                })?;
                (host, Some(port))
            }
            None => (lowered.as_str(), None),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if host == "*" {
            return Err(bad("would allow every name: use network = \"open\" for that"));
        }
        if !is_dns_name(name) {
            return Err(bad(
                "is not a domain name: write \"example.com\", \"*.example.com\" (its subdomains) or \"example.com:8443\"",
            ));
        }
        if let Ok(ip) = name.parse::<Ipv4Addr>() {
            if let Err(why) = vet_ip(IpAddr::V4(ip)) {
                return Err(bad(&format!("is {why}: pincer never connects there, whatever the policy")));
            }
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return Err(bad("is the host itself: pincer never connects there, whatever the policy"));
        }
        Ok(DomainPattern { wildcard, name: name.to_owned(), port })
    }
}

impl TryFrom<String> for DomainPattern {
    type Error = PatternError;

    fn try_from(entry: String) -> Result<DomainPattern, PatternError> {
        entry.parse()
    }
}

impl From<DomainPattern> for String {
    fn from(p: DomainPattern) -> String {
        p.to_string()
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Labels of letters, digits, `-` and `_` (some real names have one), 1-63
/// bytes each, 253 in all, at least one label.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Where the agent asked to go, as the proxy reads it from the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// Lower case, no trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// A request's host that is neither an IP address nor a domain name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a host name or IP address")]
pub struct BadHost(pub String);

impl Host {
    /// From the host part of a request's authority (`[…]` around IPv6).
    pub fn parse(given: &str) -> Result<Host, BadHost> {
        if let Some(v6) = given.strip_prefix('[').and_then(|g| g.strip_suffix(']')) {
            return v6.parse().map(Host::Ip).map_err(|_| BadHost(given.to_owned()));
        }
        if let Ok(ip) = given.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(ip)));
        }
        let lowered = given.to_ascii_lowercase();
        let name = lowered.strip_suffix('.').unwrap_or(&lowered);
        if is_dns_name(name) {
            Ok(Host::Name(name.to_owned()))
        } else {
            Err(BadHost(given.to_owned()))
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

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
    pub fn for_group(config: &crate::sandbox::SandboxConfig, group: &GroupName) -> Policy {
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
        why: super::resolve::Forbidden,
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
    fn entries_are_normalized_and_bad_ones_say_why() {
        assert_eq!(pattern(" GitHub.COM. ").to_string(), "github.com");
        assert_eq!(pattern("*.GitHub.com:8443").to_string(), "*.github.com:8443");
        assert_eq!(pattern("203.0.113.7").to_string(), "203.0.113.7");
        for (bad, says) in [
            ("exa mple.com", "not a domain name"),
            ("", "not a domain name"),
            ("*", "network = \"open\""),
            ("a.*.com", "not a domain name"),
            ("example.com:0", "bad port"),
            ("example.com:99999", "bad port"),
            ("https://example.com", "is a URL"),
            ("example.com/path", "is a URL"),
            ("[::1]:443", "bad port"),
            ("10.0.0.1", "private"),
            ("169.254.169.254", "link-local"),
            ("localhost", "the host itself"),
            ("db.localhost:5432", "the host itself"),
        ] {
            let err = bad.parse::<DomainPattern>().unwrap_err().to_string();
            assert!(err.contains(says) && err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
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
    fn request_hosts_parse_as_names_or_addresses() {
        assert_eq!(host("Example.COM."), Host::Name("example.com".into()));
        assert_eq!(host("10.0.0.1"), Host::Ip("10.0.0.1".parse().unwrap()));
        assert_eq!(host("[::ffff:127.0.0.1]"), Host::Ip("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!(host("[::1]").to_string(), "[::1]");
        // Odd IPv4 spellings are names to the proxy: vetted once resolved, like any name.
        assert_eq!(host("127.1"), Host::Name("127.1".into()));
        for bad in ["", "a b", "exa/mple", "[nope]", "::1", "a..b"] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_group_adds_its_own_names_and_may_choose_its_own_policy() {
        let config: crate::sandbox::SandboxConfig = toml_config(
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

    fn toml_config(text: &str) -> crate::sandbox::SandboxConfig {
        use figment::providers::{Format, Toml};
        figment::Figment::from(Toml::string(text)).extract().unwrap()
    }
}
