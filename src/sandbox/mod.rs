//! How a group's CLI is confined: `none`, `bwrap` (bubblewrap) or `docker`,
//! and the credential proxy that keeps pincer's API credential outside.
//!
//! `mode = "auto"` resolves once at startup from what works on this machine
//! ([`Availability`]): bubblewrap where it works, else Docker when an image is
//! configured, else `none` with a warning. A group can ask for its own mode.
//! [`Launcher`] turns a group and its resume id into the [`SpawnSpec`] that
//! `claude::process` starts: the CLI's own command, wrapped in `bwrap …` or
//! `docker run …`, with an environment built from an allowlist.
//!
//! [`SpawnSpec`]: crate::claude::process::SpawnSpec

pub mod bwrap;
pub mod docker;
pub mod doctor;
pub mod egress;
pub mod env;
pub mod forward;
mod isolated;
mod launch;
pub mod mounts;
pub mod proxy;
pub mod seccomp;
mod socket;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use isolated::IsolatedHome;
pub use launch::{Launch, Launcher, SandboxError, UNCONFINED_WARNING};

use crate::config::Secret;
use egress::{DomainPattern, NetworkPolicy};

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

/// What a group's CLI actually runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    Bwrap,
    Docker,
    None,
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Confinement::Bwrap => "bwrap",
            Confinement::Docker => "docker",
            Confinement::None => "none",
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

/// 16 hex digits of the FNV-1a hash of `bytes`: short names derived from
/// paths and group names that stay the same in every pincer version (std's
/// hasher promises no such thing).
pub(crate) fn stable_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    format!("{hash:016x}")
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

/// Which confinements work on this machine, and why not.
#[derive(Clone, Debug)]
pub struct Availability {
    pub bwrap: Result<(), String>,
    pub docker: Result<(), String>,
    /// What the installed bwrap adds (seccomp, `--disable-userns`, `--bind-fd`).
    pub features: bwrap::Features,
}

impl Availability {
    /// Probes bwrap always, and docker only when `probe_docker` (its probe
    /// talks to a daemon and may be slow).
    pub async fn probe(probe_docker: bool) -> Availability {
        let bwrap = bwrap::probe().await;
        let features = match &bwrap {
            Ok(()) => bwrap::Features::probe().await,
            Err(_) => bwrap::Features::none("bwrap does not work here"),
        };
        let docker = if probe_docker { docker::probe().await } else { Err("not probed".to_owned()) };
        Availability { bwrap, docker, features }
    }

    /// Resolves what a group asked for. An explicit mode that does not work is
    /// an error (never a silent fallback to none); `auto` falls back.
    pub fn resolve(&self, asked: SandboxMode, docker_image: Option<&str>) -> Result<Confinement, SandboxError> {
        match asked {
            SandboxMode::None => Ok(Confinement::None),
            SandboxMode::Bwrap => match &self.bwrap {
                Ok(()) => Ok(Confinement::Bwrap),
                Err(why) => Err(SandboxError::Unavailable { mode: "bwrap", why: why.clone() }),
            },
            SandboxMode::Docker => match (&self.docker, docker_image) {
                (_, None) => Err(SandboxError::Unavailable {
                    mode: "docker",
                    why: "sandbox.docker_image is not set (build container/Dockerfile, then set it)".to_owned(),
                }),
                (Ok(()), Some(_)) => Ok(Confinement::Docker),
                (Err(why), Some(_)) => Err(SandboxError::Unavailable { mode: "docker", why: why.clone() }),
            },
            SandboxMode::Auto => Ok(if self.bwrap.is_ok() {
                Confinement::Bwrap
            } else if docker_image.is_some() && self.docker.is_ok() {
                Confinement::Docker
            } else {
                Confinement::None
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail(bwrap: bool, docker: bool) -> Availability {
        let r = |ok: bool| if ok { Ok(()) } else { Err("missing".to_owned()) };
        Availability { bwrap: r(bwrap), docker: r(docker), features: bwrap::Features::none("not probed") }
    }

    #[test]
    fn auto_prefers_bwrap_then_a_configured_docker_then_none() {
        let image = Some("pincer-agent");
        assert_eq!(avail(true, true).resolve(SandboxMode::Auto, image).unwrap(), Confinement::Bwrap);
        assert_eq!(avail(false, true).resolve(SandboxMode::Auto, image).unwrap(), Confinement::Docker);
        assert_eq!(avail(false, true).resolve(SandboxMode::Auto, None).unwrap(), Confinement::None);
        assert_eq!(avail(false, false).resolve(SandboxMode::Auto, image).unwrap(), Confinement::None);
    }

    #[test]
    fn an_explicit_mode_that_does_not_work_is_an_error() {
        let err = avail(false, true).resolve(SandboxMode::Bwrap, None).unwrap_err().to_string();
        assert!(err.contains("bwrap") && err.contains("missing"), "{err}");
        let err = avail(true, true).resolve(SandboxMode::Docker, None).unwrap_err().to_string();
        assert!(err.contains("docker_image"), "{err}");
        assert_eq!(avail(false, false).resolve(SandboxMode::None, None).unwrap(), Confinement::None);
    }

    #[test]
    fn network_keys_parse_and_a_bad_entry_names_its_key() {
        use figment::providers::{Format, Serialized, Toml};
        let load = |text: &str| {
            let figment = figment::Figment::from(Serialized::defaults(crate::config::Config::default()));
            crate::config::Config::from_figment(figment.merge(Toml::string(text)))
        };
        let c = load(
            "[sandbox]\nallow_domains = [\"pypi.org\"]\n\
             [sandbox.groups.team]\nnetwork = \"allowlist\"\nallow_domains = [\"*.GitHub.com\", \"example.com:8443\"]\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.network, NetworkPolicy::ApiOnly, "the default");
        let team = c.sandbox.group("team");
        assert_eq!(team.network, Some(NetworkPolicy::Allowlist));
        let listed: Vec<String> = team.allow_domains.iter().map(ToString::to_string).collect();
        assert_eq!(listed, ["*.github.com", "example.com:8443"]);
        let err = load("[sandbox.groups.team]\nallow_domains = [\"exa mple.com\"]\n").unwrap_err().to_string();
        assert!(err.contains("allow_domains") && err.contains("team") && err.contains("exa mple.com"), "{err}");
        let err = load("[sandbox]\nallow_domains = [\"169.254.169.254\"]\n").unwrap_err().to_string();
        assert!(err.contains("allow_domains") && err.contains("link-local"), "{err}");
        let err = load("[sandbox]\nnetwork = \"everything\"\n").unwrap_err().to_string();
        assert!(err.contains("network") && err.contains("api-only"), "{err}");
    }

    #[test]
    fn seccomp_is_on_unless_the_config_says_false() {
        use figment::providers::{Format, Serialized, Toml};
        let load = |text: &str| {
            let figment = figment::Figment::from(Serialized::defaults(crate::config::Config::default()));
            crate::config::Config::from_figment(figment.merge(Toml::string(text))).unwrap()
        };
        assert_eq!(load("").sandbox.seccomp, DefaultOn(true));
        assert_eq!(load("[sandbox]\nseccomp = false\n").sandbox.seccomp, DefaultOn(false));
    }

    #[test]
    fn groups_override_the_default_mode() {
        let mut config = SandboxConfig::default();
        config.groups.insert("a".into(), GroupSandbox { mode: Some(SandboxMode::None), ..Default::default() });
        assert_eq!(config.requested("a"), SandboxMode::None);
        assert_eq!(config.requested("b"), SandboxMode::Auto);
    }
}
