//! Names to addresses, vetted before the egress proxy connects to them.
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

use std::io;
use std::net::IpAddr;

use futures_util::future::BoxFuture;

use crate::domain::net::{vet_ip, Forbidden};

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

#[cfg(test)]
mod tests {
    use super::*;

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
