//! Names to addresses, and which addresses the egress proxy may ever connect to.
//!
//! The proxy resolves every name itself and connects to an address it has
//! vetted, never to a name: the OS never re-resolves, so a DNS answer that
//! changes between the check and the connection (rebinding) cannot reach the
//! host, the LAN or a cloud metadata endpoint.
//!
//! [`Resolve`] is the seam: one object both looks names up and vets what it
//! found. pincer's only implementation is [`SystemResolver`], whose `vet` is
//! [`vet_ip`] and nothing else. A test (in `tests/egress.rs`) implements it to
//! answer made-up names under `.test` with a server on its own loopback, and
//! vouches for exactly those name/address pairs; nothing in pincer builds
//! such a resolver.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures_util::future::BoxFuture;

/// Looks names up and vets the addresses the egress proxy would connect to.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `host` (a name, never an IP literal) has now.
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;

    /// Whether the proxy may connect to `ip`, found for `host` (or given by
    /// the agent as a literal, then `host` is the literal). Production:
    /// exactly [`vet_ip`].
    fn vet(&self, host: &str, ip: IpAddr) -> Result<(), Forbidden>;
}

/// The system's resolver (`getaddrinfo` through tokio), vetting with [`vet_ip`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.map(|a| a.ip()).collect()) })
    }

    fn vet(&self, _host: &str, ip: IpAddr) -> Result<(), Forbidden> {
        vet_ip(ip)
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
mod tests {
    use super::*;

    fn verdict(ip: &str) -> Result<(), Forbidden> {
        vet_ip(ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}")))
    }

    #[test]
    fn public_unicast_is_allowed() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.1.1",
            "169.253.1.1",
            "223.255.255.254",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:1.1.1.1",
            "64:ff9b::808:808",
            "2002:0101:0101::1",
        ] {
            assert_eq!(verdict(ip), Ok(()), "{ip}");
        }
    }

    #[test]
    fn every_local_and_special_range_is_refused_in_v4() {
        use Forbidden::*;
        let cases = [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.0.1", Private),
            ("169.254.169.254", LinkLocal),
            ("169.254.0.1", LinkLocal),
            ("100.64.0.1", SharedNat),
            ("100.127.255.255", SharedNat),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("255.255.255.255", Reserved),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("198.18.0.1", Reserved),
        ];
        for (ip, why) in cases {
            assert_eq!(verdict(ip), Err(why), "{ip}");
        }
    }

    #[test]
    fn every_local_and_special_range_is_refused_in_v6() {
        use Forbidden::*;
        let cases = [
            ("::", Unspecified),
            ("::1", Loopback),
            ("fe80::1", LinkLocal),
            ("febf:ffff::1", LinkLocal),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("ff02::1", Multicast),
            ("fec0::1", Reserved),
            ("100::1", Reserved),
            ("2001:db8::1", Reserved),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Reserved),
            ("64:ff9b:1::1", Reserved),
            ("::1.2.3.4", Reserved),
        ];
        for (ip, why) in cases {
            assert_eq!(verdict(ip), Err(why), "{ip}");
        }
    }

    #[test]
    fn ipv4_inside_ipv6_is_judged_as_the_ipv4_it_carries() {
        use Forbidden::*;
        let cases = [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:0.0.0.0", Unspecified),
            ("::ffff:0:127.0.0.1", Loopback),
            ("::ffff:0:192.168.1.1", Private),
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b::a9fe:a9fe", LinkLocal),
            ("64:ff9b::100.64.0.1", SharedNat),
            ("2002:7f00:1::1", Loopback),
            ("2002:c0a8:101::", Private),
            ("2002:a9fe:a9fe::1", LinkLocal),
            ("2002:e000:1::", Multicast),
        ];
        for (ip, why) in cases {
            assert_eq!(verdict(ip), Err(why), "{ip}");
        }
    }

    #[test]
    fn the_system_resolver_vets_with_the_fixed_rule_only() {
        let r = SystemResolver;
        assert_eq!(r.vet("example.test", "127.0.0.1".parse().unwrap()), Err(Forbidden::Loopback));
        assert_eq!(r.vet("127.0.0.1", "127.0.0.1".parse().unwrap()), Err(Forbidden::Loopback));
        assert_eq!(r.vet("example.test", "1.1.1.1".parse().unwrap()), Ok(()));
    }

    #[tokio::test]
    async fn the_system_resolver_finds_localhost_on_loopback_where_vetting_refuses_it() {
        // localhost is answered from /etc/hosts, no DNS query leaves the machine.
        let found = SystemResolver.lookup("localhost", 80).await.unwrap();
        assert!(!found.is_empty());
        for ip in found {
            assert_eq!(SystemResolver.vet("localhost", ip), Err(Forbidden::Loopback), "{ip}");
        }
    }
}
