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
pub mod confine;
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

use std::fmt;

pub use isolated::IsolatedHome;
pub use launch::{Launch, Launcher, SandboxError, UNCONFINED_WARNING};

use crate::config::SandboxMode;

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

/// 16 hex digits of the FNV-1a hash of `bytes`: short names derived from
/// paths and group names that stay the same in every pincer version (std's
/// hasher promises no such thing).
pub(crate) fn stable_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    format!("{hash:016x}")
}

/// Whether any group may run in bwrap: the default mode or a group's own is
/// `auto` or `bwrap`. When none may, starting needs no bwrap probe.
pub fn wants_bwrap(sandbox: &crate::config::SandboxConfig) -> bool {
    any_mode(sandbox, &[SandboxMode::Bwrap, SandboxMode::Auto])
}

/// Whether any group may run in Docker: an image is set, and the default mode
/// or a group's own is `auto` or `docker`. When none may, no Docker probe.
pub fn wants_docker(sandbox: &crate::config::SandboxConfig) -> bool {
    sandbox.docker_image.is_some() && any_mode(sandbox, &[SandboxMode::Docker, SandboxMode::Auto])
}

/// Whether the default mode or any group's own is one of `modes`.
fn any_mode(sandbox: &crate::config::SandboxConfig, modes: &[SandboxMode]) -> bool {
    std::iter::once(sandbox.mode).chain(sandbox.groups.values().filter_map(|g| g.mode)).any(|m| modes.contains(&m))
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
    /// Probes bwrap when `probe_bwrap`, and docker only when `probe_docker`
    /// (its probe talks to a daemon and may be slow), all at once: every
    /// probe is a process start, and `pincer chat` waits for them before its
    /// first answer. bwrap's features are probed with bwrap itself (one
    /// sandbox for all where it can) and count only if it works.
    pub async fn probe(probe_bwrap: bool, probe_docker: bool) -> Availability {
        let bwrap = async {
            if !probe_bwrap {
                let why = "not probed: no group's sandbox mode asks for bwrap";
                return (Err(why.to_owned()), bwrap::Features::none(why));
            }
            bwrap::Features::probe_with_bwrap().await
        };
        let docker = async {
            if probe_docker {
                docker::probe().await
            } else {
                Err("not probed".to_owned())
            }
        };
        let ((bwrap, features), docker) = tokio::join!(bwrap, docker);
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
    fn bwrap_is_probed_only_when_a_group_may_run_in_it() {
        use crate::config::{GroupSandbox, SandboxConfig};
        let mut sandbox = SandboxConfig { mode: SandboxMode::None, ..SandboxConfig::default() };
        assert!(!wants_bwrap(&sandbox), "mode none everywhere: no probe");
        let docker = GroupSandbox { mode: Some(SandboxMode::Docker), ..GroupSandbox::default() };
        sandbox.groups.insert("boxed".to_owned(), docker);
        assert!(!wants_bwrap(&sandbox), "docker alone needs no bwrap");
        let bwrap = GroupSandbox { mode: Some(SandboxMode::Bwrap), ..GroupSandbox::default() };
        sandbox.groups.insert("wrapped".to_owned(), bwrap);
        assert!(wants_bwrap(&sandbox), "one group in bwrap");
        for mode in [SandboxMode::Auto, SandboxMode::Bwrap] {
            assert!(wants_bwrap(&SandboxConfig { mode, ..SandboxConfig::default() }), "{mode:?}");
        }
    }

    #[tokio::test]
    async fn an_unwanted_bwrap_is_not_probed_and_resolves_nothing_to_it() {
        let availability = Availability::probe(false, false).await;
        assert!(availability.bwrap.as_ref().is_err_and(|why| why.contains("not probed")), "{availability:?}");
        assert!(availability.features.seccomp.is_err());
        assert_eq!(availability.resolve(SandboxMode::None, None).unwrap(), Confinement::None);
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
}
