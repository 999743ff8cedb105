//! `[sandbox]` and `[anthropic]`: how each group's CLI is confined and which
//! credential the proxy puts on its requests. `sandbox` reads them; they live
//! here so that the config, read before anything else, needs nothing above it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
use crate::domain::net::{DomainPattern, NetworkPolicy};

/// What an operator asks for.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// bwrap where it works, else docker when `docker_image` is set, else none.
    #[default]
    Auto,
    Bwrap,
    Docker,
    None,
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Docker => "docker",
            SandboxMode::None => "none",
        })
    }
}

/// `[sandbox]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// The agent image for docker mode (see `container/Dockerfile`). Unset:
    /// `auto` never picks docker, and `docker` is refused.
    pub docker_image: Option<String>,
    /// The mount allowlist (extra host folders per group). Must lie outside
    /// every group folder. Unset: no extra mounts.
    pub mounts_file: Option<PathBuf>,
    /// What the agents' tools may reach through the egress proxy, for groups
    /// that do not say: `api-only` (nothing but the model), `allowlist`, `open`.
    pub network: NetworkPolicy,
    /// Names every group may reach under `allowlist` (`*.example.com` for its
    /// subdomains, `:port` for a port beyond 80 and 443); a group's own list adds to it.
    pub allow_domains: Vec<DomainPattern>,
    /// The pincer binary bound read-only into each sandbox to run `pincer
    /// forward`, its way to the egress proxy. Unset: this pincer's own binary.
    pub pincer_binary: Option<PathBuf>,
    /// Run bwrap sandboxes under pincer's seccomp filter (`sandbox::seccomp`).
    /// On unless set to false; when it cannot be applied here, bwrap groups do not start.
    pub seccomp: DefaultOn,
    /// Per-group overrides, keyed by group name.
    pub groups: BTreeMap<String, GroupSandbox>,
}

/// A switch that is on unless the config says `false`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct DefaultOn(pub bool);

impl Default for DefaultOn {
    fn default() -> Self {
        DefaultOn(true)
    }
}

/// `[sandbox.groups.<name>]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct GroupSandbox {
    /// This group's mode instead of `sandbox.mode`.
    pub mode: Option<SandboxMode>,
    /// Run the CLI with `--dangerously-skip-permissions` (no tool prompts).
    /// Only inside a sandbox: refused when the group's mode resolves to none.
    pub skip_permissions: bool,
    /// `groups/global` is mounted read-write for this group although it is not the main one.
    pub writes_global: bool,
    /// This group's `network` instead of `sandbox.network`.
    pub network: Option<NetworkPolicy>,
    /// Names this group may reach besides `sandbox.allow_domains`.
    pub allow_domains: Vec<DomainPattern>,
}

/// `[anthropic]`: the credential the proxy puts on the agent's requests, and
/// where it sends them. Each falls back to pincer's environment
/// (`ANTHROPIC_API_KEY`, `CLAUDE_CODE_OAUTH_TOKEN`, `ANTHROPIC_BASE_URL`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AnthropicConfig {
    pub api_key: Option<Secret>,
    pub oauth_token: Option<Secret>,
    /// The upstream Messages API. Unset: `ANTHROPIC_BASE_URL`, else Anthropic's.
    pub base_url: Option<String>,
}

/// Anthropic's API, where the proxy forwards by default.
pub const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

impl AnthropicConfig {
    /// The upstream the proxy forwards to.
    pub fn upstream(&self) -> String {
        self.base_url
            .clone()
            .or_else(|| std::env::var("ANTHROPIC_BASE_URL").ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned())
    }
}

impl SandboxConfig {
    /// The mode `group` asks for.
    pub fn requested(&self, group: &str) -> SandboxMode {
        self.groups.get(group).and_then(|g| g.mode).unwrap_or(self.mode)
    }

    pub fn group(&self, group: &str) -> GroupSandbox {
        self.groups.get(group).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
