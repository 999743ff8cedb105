//! The words of the egress rules, shared by the config that states them and
//! the proxy that enforces them: a group's [`NetworkPolicy`], its
//! `allow_domains` entries ([`DomainPattern`]), the host an agent asks for
//! ([`Host`]), and which addresses pincer never connects to, whatever the
//! policy ([`vet_ip`]). Pure: no lookup, no socket (those are
//! `sandbox::egress`'s).
//!
//! Names match case-insensitively with a trailing dot ignored; `*.example.com`
//! matches every name below `example.com` (any depth), not `example.com`
//! itself. An `allow_domains` entry that is an address pincer never connects
//! to is refused when the config is read, with the reason [`vet_ip`] gives.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
    pub fn names(&self, host: &Host) -> bool {
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

    /// Whether this entry lets `port` through: its own port, else [`DEFAULT_PORTS`].
    pub fn allows_port(&self, port: u16) -> bool {
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

/// Why an address is never connected to, whatever the group's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forbidden {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: the host's own services.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`: the LAN.
    Private,
    /// `169.254/16` (cloud metadata at 169.254.169.254), `fe80::/10`.
    LinkLocal,
    /// `100.64/10`: carrier-grade NAT, often a provider's internal network.
    SharedNat,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `240/4` with the broadcast address, `192.0.0/24`, `198.18/15`, and
    /// IPv6 outside global unicast or in a tunnel form pincer does not unwrap.
    Reserved,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Forbidden::Unspecified => "an unspecified address",
            Forbidden::Loopback => "a loopback address (the host's own services)",
            Forbidden::Private => "a private address (the local network)",
            Forbidden::LinkLocal => "a link-local address (where cloud metadata endpoints live)",
            Forbidden::SharedNat => "a carrier-grade NAT address (a provider's internal network)",
            Forbidden::Multicast => "a multicast address",
            Forbidden::Reserved => "a reserved or special-purpose address",
        })
    }
}

/// Whether `ip` may be connected to at all: only public unicast addresses.
/// IPv4 written inside IPv6 (mapped, translated, NAT64, 6to4) is judged as
/// the IPv4 address it carries.
pub fn vet_ip(ip: IpAddr) -> Result<(), Forbidden> {
    match ip {
        IpAddr::V4(v4) => vet_v4(v4),
        IpAddr::V6(v6) => vet_v6(v6),
    }
}

fn vet_v4(ip: Ipv4Addr) -> Result<(), Forbidden> {
    let [a, b, c, _] = ip.octets();
    match (a, b, c) {
        (0, _, _) => Err(Forbidden::Unspecified),
        (127, _, _) => Err(Forbidden::Loopback),
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Err(Forbidden::Private),
        (169, 254, _) => Err(Forbidden::LinkLocal),
        (100, 64..=127, _) => Err(Forbidden::SharedNat),
        (224..=239, _, _) => Err(Forbidden::Multicast),
        (240..=255, _, _) | (192, 0, 0) | (198, 18..=19, _) => Err(Forbidden::Reserved),
        _ => Ok(()),
    }
}

fn vet_v6(ip: Ipv6Addr) -> Result<(), Forbidden> {
    if ip.is_unspecified() {
        return Err(Forbidden::Unspecified);
    }
    if ip.is_loopback() {
        return Err(Forbidden::Loopback);
    }
    if let Some(v4) = carried_v4(ip) {
        return vet_v4(v4);
    }
    let s = ip.segments();
    match s[0] {
        0xfe80..=0xfebf => Err(Forbidden::LinkLocal),
        0xfc00..=0xfdff => Err(Forbidden::Private),
        0xff00..=0xffff => Err(Forbidden::Multicast),
        // Teredo hides the IPv4 address it reaches, and is gone from the
        // internet anyway; documentation addresses route nowhere.
        0x2001 if s[1] == 0 || s[1] == 0x0db8 => Err(Forbidden::Reserved),
        // Only global unicast (2000::/3) is the internet; everything else is
        // local, deprecated (site-local, IPv4-compatible) or special.
        0x2000..=0x3fff => Ok(()),
        _ => Err(Forbidden::Reserved),
    }
}

/// The IPv4 address an IPv6 one stands for: `::ffff:a.b.c.d` (mapped, how a
/// dual-stack socket reaches IPv4), `::ffff:0:a.b.c.d` (translated),
/// `64:ff9b::a.b.c.d` (NAT64, what DNS64 answers), `2002:aabb:ccdd::/48` (6to4).
fn carried_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
