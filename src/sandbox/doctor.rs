//! `pincer doctor`: which sandbox modes work on this machine and why not,
//! what `auto` picks, the CLI found, and whether the proxy has a credential;
//! whether the agent's commands are kept out of the CLI (Landlock), and what
//! an unconfined agent can reach.

use std::fmt::Write;
use std::time::Duration;

use super::{confine, mounts, seccomp, Availability, Confinement};
use crate::claude::{self, process::run_tool};
use crate::config::Config;

/// The report, one finding per line. `ok` is false when the default mode
/// cannot start agents.
pub struct Report {
    pub text: String,
    pub ok: bool,
}

/// `; group team: allowlist (3 names)` for each group with a policy of its own.
fn egress_overrides(config: &Config) -> String {
    let mut out = String::new();
    for (group, g) in &config.sandbox.groups {
        if g.network.is_some() || !g.allow_domains.is_empty() {
            let network = g.network.unwrap_or(config.sandbox.network);
            let names = config.sandbox.allow_domains.len() + g.allow_domains.len();
            let _ = write!(out, "; group {group}: {network}, {names} allowed name(s)");
        }
    }
    out
}

/// The seccomp line, and false when it keeps the default mode's groups from starting.
fn seccomp_line(config: &Config, availability: &Availability) -> (String, bool) {
    let bwrap_default = matches!(
        availability.resolve(config.sandbox.mode, config.sandbox.docker_image.as_deref()),
        Ok(Confinement::Bwrap)
    );
    match (&availability.bwrap, config.sandbox.seccomp.0, &availability.features.seccomp) {
        (Err(_), _, _) => ("not used (bwrap does not work here)".to_owned(), true),
        (Ok(()), false, _) => (
            "off by config (sandbox.seccomp = false): code in a bwrap sandbox may try unshare, mount, ptrace, \
             bpf and the like, stopped only by the capabilities bwrap dropped"
                .to_owned(),
            true,
        ),
        (Ok(()), true, Ok(_)) => (
            format!(
                "in force in bwrap sandboxes: {} system calls (io_uring, ptrace, pidfd_getfd among them), clone \
                 with a namespace flag, personality other than the default and the ioctls that type into a \
                 terminal (TIOCSTI, TIOCLINUX) fail with EPERM; clone3 with ENOSYS (so threads fall back to clone)",
                seccomp::denied_count()
            ),
            true,
        ),
        (Ok(()), true, Err(why)) => (
            format!(
                "unavailable: {why}; groups in bwrap will not start (set sandbox.seccomp = false to run them \
                 without it)"
            ),
            !bwrap_default,
        ),
    }
}

fn userns_line(availability: &Availability) -> String {
    match (&availability.bwrap, &availability.features.disable_userns) {
        (Err(_), _) => "not used (bwrap does not work here)".to_owned(),
        (Ok(()), Ok(())) => "disabled in bwrap sandboxes (--disable-userns)".to_owned(),
        (Ok(()), Err(why)) => format!(
            "not disabled in bwrap sandboxes: {why}; the seccomp filter still denies unshare and clone with \
             CLONE_NEWUSER when it is on"
        ),
    }
}

/// The Landlock line: what keeps a sandboxed agent's commands out of the CLI.
fn landlock_line(abi: &Result<i32, String>) -> String {
    const KEPT_OUT: &str = "every shell and git a sandboxed CLI starts runs in a Landlock domain of its own, so \
        the agent's code cannot trace the CLI, open its memory or its descriptors";
    match abi {
        Ok(1) => format!(
            "ABI 1: {KEPT_OUT}; there, moving a file between folders fails with EXDEV (most tools copy instead; \
             Linux 5.19 or later lifts it)"
        ),
        Ok(abi) => format!("ABI {abi}: {KEPT_OUT}"),
        Err(why) => format!(
            "unavailable: {why}. Sandboxed agents' commands are refused (each would run beside the CLI, able to \
             reach into it); chat and file tools work. Boot a kernel with Landlock to run them"
        ),
    }
}

/// What code an unconfined agent runs can reach, given Yama's `ptrace_scope` (`None`: no Yama).
fn unconfined_line(yama: Option<u32>) -> String {
    let reach = match yama {
        None | Some(0) => "it can trace the CLI and pincer and read and write their memory through /proc (nothing \
             here limits that: no Yama ptrace_scope), so forge the CLI's answers and take pincer's credentials"
            .to_owned(),
        Some(scope) => format!(
            "Yama's ptrace_scope {scope} keeps it from tracing the CLI and pincer or opening their memory (they are \
             not its descendants), but nothing else does"
        ),
    };
    format!(
        "code the agent runs is pincer's user's, beside the CLI and pincer: {reach}; it reads pincer.toml, the \
         database and every group's folder, and can message the CLI through the CLI's inbox (2.1.330). Only \
         reopening the CLI's stdin or stdout through /proc/PID/fd fails (they are sockets)"
    )
}

/// Yama's `ptrace_scope`, when the kernel has Yama.
fn yama_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse().ok()
}

pub async fn report(config: &Config) -> Report {
    let mut out = Lines::default();
    cli_lines(config, &mut out).await;
    let availability = Availability::probe(true, true).await;
    probe_lines(config, &availability, &mut out);
    mode_lines(config, &availability, &mut out);
    out.line(format!("proxy credential: {}; upstream {}", credential(config), config.anthropic.upstream()));
    if let Some(path) = &config.sandbox.mounts_file {
        mounts_line(config, path, &availability, &mut out);
    }
    out.line(crate::private::doctor_line(config));
    Report { text: out.text, ok: out.ok }
}

/// The report as it is written: its lines, and whether all is well so far.
struct Lines {
    text: String,
    ok: bool,
}

impl Default for Lines {
    fn default() -> Lines {
        Lines { text: String::new(), ok: true }
    }
}

impl Lines {
    fn line(&mut self, line: impl std::fmt::Display) {
        let _ = writeln!(self.text, "{line}");
    }

    fn failed(&mut self, line: impl std::fmt::Display) {
        self.ok = false;
        self.line(line);
    }
}

/// The CLI found, its version against the tested range, its locked settings.
async fn cli_lines(config: &Config, out: &mut Lines) {
    match claude::resolve_program(config) {
        Ok(program) => {
            let version = run_tool(&program.display().to_string(), &["--version".to_owned()], Duration::from_secs(30))
                .await
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_else(|e| format!("--version failed: {e}"));
            let note = claude::install::range_note(&version);
            out.line(format!("CLI: {} ({version}), {note}", program.display()));
            out.line(format!("CLI settings: {}", claude::settings_report(&config.claude)));
        }
        Err(e) => out.failed(format!("CLI: not found: {e}")),
    }
}

/// What the machine offers: bwrap, seccomp, user namespaces, Landlock, Docker.
fn probe_lines(config: &Config, availability: &Availability, out: &mut Lines) {
    let works = |r: &Result<(), String>| match r {
        Ok(()) => "works".to_owned(),
        Err(why) => format!("does not work: {why}"),
    };
    out.line(format!("bwrap: {}", works(&availability.bwrap)));
    let (seccomp, seccomp_ok) = seccomp_line(config, availability);
    out.ok &= seccomp_ok;
    out.line(format!("seccomp: {seccomp}"));
    out.line(format!("userns: {}", userns_line(availability)));
    out.line(format!("landlock: {}", landlock_line(&confine::landlock_abi())));
    let wrapper = format!("wrapper: {}", confine::wrapper::summary());
    match confine::wrapper::linking(confine::wrapper::STAGE0) {
        Ok(confine::wrapper::Linking::Static) => out.line(wrapper),
        _ => out.failed(wrapper),
    }
    out.line(format!("git: {}", confine::git::summary()));
    let docker = match (&availability.docker, &config.sandbox.docker_image) {
        (Ok(()), None) => "an engine answers, but sandbox.docker_image is not set".to_owned(),
        (Ok(()), Some(image)) => format!("works (image {image})"),
        (Err(why), _) => format!("does not work: {why}"),
    };
    out.line(format!("docker: {docker}"));
}

/// What `sandbox.mode` (and each group's own mode) resolves to here, and the
/// network and reach that leaves the agent.
fn mode_lines(config: &Config, availability: &Availability, out: &mut Lines) {
    let image = config.sandbox.docker_image.as_deref();
    let network = match availability.resolve(config.sandbox.mode, image) {
        Ok(Confinement::Bwrap | Confinement::Docker) => format!(
            "none of its own: each agent has a network namespace with only its own loopback; the model is \
             reached through the credential proxy's Unix socket, the internet through the egress proxy \
             (sandbox.network = {}{})",
            config.sandbox.network,
            egress_overrides(config)
        ),
        Ok(Confinement::None) | Err(_) => {
            "the host's: without a sandbox the agent reaches whatever pincer can".to_owned()
        }
    };
    let any_none = std::iter::once(config.sandbox.mode)
        .chain(config.sandbox.groups.values().filter_map(|g| g.mode))
        .any(|mode| matches!(availability.resolve(mode, image), Ok(Confinement::None)));
    match availability.resolve(config.sandbox.mode, image) {
        Ok(Confinement::None) => {
            out.line(format!("sandbox.mode = {} -> none: {}", config.sandbox.mode, super::UNCONFINED_WARNING))
        }
        Ok(c) => out.line(format!("sandbox.mode = {} -> {c}", config.sandbox.mode)),
        Err(e) => out.failed(format!("sandbox.mode = {}: {e}", config.sandbox.mode)),
    }
    out.line(format!("network: {network}"));
    if any_none {
        out.line(format!("unconfined: {}", unconfined_line(yama_scope())));
    }
    for (group, settings) in &config.sandbox.groups {
        if let Some(mode) = settings.mode {
            let resolved = availability.resolve(mode, image).map_or_else(|e| e.to_string(), |c| c.to_string());
            out.line(format!("group {group}: mode {mode} -> {resolved}"));
        }
    }
}

/// Where the credential proxy's credential comes from.
fn credential(config: &Config) -> &'static str {
    if config.anthropic.api_key.is_some() {
        "anthropic.api_key"
    } else if config.anthropic.oauth_token.is_some() {
        "anthropic.oauth_token"
    } else if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        "ANTHROPIC_API_KEY from the environment"
    } else if std::env::var_os("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
        "CLAUDE_CODE_OAUTH_TOKEN from the environment"
    } else {
        "none: sandboxed agents cannot reach the API (set [anthropic] api_key)"
    }
}

/// Whether the mount allowlist reads, and how its mounts will be bound.
fn mounts_line(config: &Config, path: &std::path::Path, availability: &Availability, out: &mut Lines) {
    let protected = mounts::Protected(vec![config.data_dir.clone(), config.groups_dir.clone()]);
    match mounts::load(path, &protected, &config.groups_dir) {
        Ok(_) => {
            let how = match (&availability.bwrap, &availability.features.bind_fd) {
                (Ok(()), Ok(())) => "bound in bwrap by the descriptor opened at each launch (--bind-fd)".to_owned(),
                (Ok(()), Err(why)) => format!("bound in bwrap by path, checked at each launch: {why}"),
                (Err(_), _) => "checked at each launch".to_owned(),
            };
            out.line(format!("mount allowlist {}: valid; {how}", path.display()));
        }
        Err(e) => out.failed(format!("mount allowlist: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_landlock_line_says_what_it_keeps_out_and_what_is_lost_without_it() {
        let line = landlock_line(&Ok(7));
        assert!(line.starts_with("ABI 7: ") && line.contains("cannot trace the CLI, open its memory"), "{line}");
        assert!(!line.contains("EXDEV"), "{line}");
        assert!(landlock_line(&Ok(1)).contains("EXDEV"), "ABI 1 cannot allow moves between folders");
        let line = landlock_line(&Err("this kernel has no Landlock".into()));
        assert!(line.starts_with("unavailable: this kernel has no Landlock"), "{line}");
        assert!(line.contains("commands are refused") && line.contains("kernel with Landlock"), "{line}");
    }

    #[test]
    fn the_wrapper_line_says_it_is_static_and_what_that_keeps_out() {
        let line = confine::wrapper::summary();
        assert!(line.starts_with("static (") && line.contains("no program interpreter"), "{line}");
        assert!(line.contains("before any library code runs") && line.contains("LD_PRELOAD"), "{line}");
    }

    #[test]
    fn the_git_line_says_what_is_pinned() {
        let line = confine::git::summary();
        assert!(line.contains("safe.bareRepository=explicit") && line.contains("core.fsmonitor"), "{line}");
        assert!(line.contains("core.hooksPath") && line.contains("filter, diff and merge driver"), "{line}");
    }

    #[test]
    fn the_unconfined_line_names_what_the_agent_reaches_by_this_kernels_yama() {
        for yama in [None, Some(0)] {
            let line = unconfined_line(yama);
            assert!(line.contains("can trace the CLI and pincer and read and write their memory"), "{line}");
            assert!(line.contains("take pincer's credentials") && line.contains("every group's folder"), "{line}");
        }
        let line = unconfined_line(Some(1));
        assert!(line.contains("ptrace_scope 1 keeps it from tracing"), "{line}");
        assert!(line.contains("inbox") && line.contains("they are sockets"), "{line}");
    }
}
