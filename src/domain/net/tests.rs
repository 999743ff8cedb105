//! Tests of the egress rules' words: domain entries, request hosts, and every refused address range in IPv4, IPv6 and IPv4 inside IPv6.

use super::*;

fn pattern(s: &str) -> DomainPattern {
    s.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn host(s: &str) -> Host {
    Host::parse(s).unwrap()
}

fn verdict(ip: &str) -> Result<(), Forbidden> {
    vet_ip(ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}")))
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
