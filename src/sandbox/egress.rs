//! The egress proxy: the one way a sandboxed agent's tools reach the
//! internet, with a policy per group and every decision stored.
//!
//! pincer serves it per group on a Unix socket ([`EgressService`]: the group
//! is the socket it accepted on); inside the sandbox `pincer forward`
//! presents it on the sandbox's loopback as the agent's `HTTP_PROXY` and
//! `HTTPS_PROXY`. It speaks HTTP/1.1: `CONNECT host:port` becomes a plain
//! byte tunnel (TLS is not intercepted), an absolute-form `http://` request is
//! forwarded. Before either, the group's [`Policy`] must allow the name and
//! port (`api-only`, the default, allows nothing: the model is reached
//! through the credential proxy), then the proxy resolves the name itself and
//! connects only to addresses that are not loopback, private, link-local
//! (cloud metadata) or otherwise local, whatever the policy ([`vet_ip`](crate::domain::net::vet_ip)). A
//! refusal is a `403` saying which rule refused and what to change; an
//! unreachable destination a `502`. Each attempt is stored with its bytes
//! (`pincer egress NAME`).

mod policy;
mod resolve;
mod server;
mod service;

pub use policy::{Policy, Refusal, Rule};
pub use resolve::{Resolve, SystemResolver};
pub use server::EgressProxy;
pub use service::EgressService;
