//! A test-only resolver for pincer's egress proxy: made-up names under
//! `.test` answered with servers on this machine's loopback, vouched for as
//! if they were public addresses. It lives only in the tests; pincer itself
//! has no way to build one. Every other address is vetted by pincer's rule,
//! so a name the test does not vouch for is refused as the real one would be.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use pincer::domain::net::{vet_ip, Forbidden};
use pincer::sandbox::egress::Resolve;

/// Answers made-up names with addresses on this machine, and vouches for the
/// name/address pairs listed as `vouched`; everything else is vetted by
/// pincer's own rule.
#[derive(Default)]
pub struct TestResolver {
    names: HashMap<String, Vec<IpAddr>>,
    vouched: Vec<(String, IpAddr)>,
    pub lookups: AtomicUsize,
}

impl TestResolver {
    pub fn answer(mut self, name: &str, ips: &[&str]) -> Self {
        self.names.insert(name.to_owned(), ips.iter().map(|ip| ip.parse().unwrap()).collect());
        self
    }

    /// `name` stands for the server at `ip`, as a public address would.
    pub fn vouch(mut self, name: &str, ip: &str) -> Self {
        self.vouched.push((name.to_owned(), ip.parse().unwrap()));
        self
    }
}

impl Resolve for TestResolver {
    fn lookup<'a>(&'a self, host: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let found = self.names.get(host).cloned();
        Box::pin(async move { found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name")) })
    }

    fn vet(&self, host: &str, ip: IpAddr) -> Result<(), Forbidden> {
        if self.vouched.iter().any(|(name, vouched)| name == host && *vouched == ip) {
            Ok(())
        } else {
            vet_ip(ip)
        }
    }
}
