//! The Docker command line (`docker run -i --rm …` with the same layout as
//! bwrap) and the cleanup of containers a previous pincer left behind.
//!
//! The container shares the host's network (`--network host`), so the CLI
//! reaches the credential proxy on 127.0.0.1 exactly as in bwrap mode; the
//! proxy never listens on another interface. Containers carry the label
//! [`LABEL`], which is how orphans are found.

use std::path::PathBuf;
use std::time::Duration;

use super::bwrap::{EXTRA, GLOBAL, HOME, WORKSPACE};
use super::mounts::Mount;
use crate::claude::process::run_tool;

/// Marks pincer's agent containers.
pub const LABEL: &str = "pincer.agent";
/// The CLI inside the image (`container/Dockerfile` installs it globally).
pub const CLI_IN_IMAGE: &str = "claude";

/// One agent container, in host paths.
#[derive(Clone, Debug)]
pub struct Plan {
    pub image: String,
    pub group: String,
    /// `uid:gid` the CLI runs as (never 0).
    pub user: String,
    pub group_dir: PathBuf,
    pub global: Option<(PathBuf, bool)>,
    pub home: PathBuf,
    pub extra: Vec<Mount>,
    pub env: Vec<(String, String)>,
    /// The CLI's arguments (the program is [`CLI_IN_IMAGE`]).
    pub cli_args: Vec<String>,
}

/// The container of a group.
pub fn container_name(group: &str) -> String {
    format!("pincer-{group}")
}

/// The arguments of `docker` for `plan`.
pub fn run_args(plan: &Plan) -> Vec<String> {
    let mut a: Vec<String> = vec!["run".into(), "-i".into(), "--rm".into(), "--init".into()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
    push(&["--name", &container_name(&plan.group), "--label", &format!("{LABEL}={}", plan.group)]);
    push(&["--network", "host", "--user", &plan.user, "--cap-drop", "ALL"]);
    push(&["--security-opt", "no-new-privileges", "--tmpfs", "/tmp"]);
    let mut mounts = vec![bind_mount(&plan.group_dir, WORKSPACE, true), bind_mount(&plan.home, HOME, true)];
    if let Some((global, writable)) = &plan.global {
        mounts.push(bind_mount(global, GLOBAL, *writable));
    }
    for m in &plan.extra {
        mounts.push(bind_mount(&m.host, &format!("{EXTRA}/{}", m.name), m.writable));
    }
    for m in &mounts {
        push(&["--mount", m]);
    }
    push(&["--workdir", WORKSPACE]);
    for (k, v) in &plan.env {
        push(&["--env", &format!("{k}={v}")]);
    }
    push(&[&plan.image, CLI_IN_IMAGE]);
    a.extend(plan.cli_args.iter().cloned());
    a
}

/// One `--mount` value. (A host path with a comma would break the syntax;
/// group folders and homes never have one, allowlisted mounts are checked.)
fn bind_mount(host: &std::path::Path, inside: &str, writable: bool) -> String {
    let ro = if writable { "" } else { ",readonly" };
    format!("type=bind,source={},target={inside}{ro}", host.display())
}

/// The arguments that list pincer's containers (running or not).
pub fn list_args() -> Vec<String> {
    ["ps", "--all", "--quiet", "--filter", &format!("label={LABEL}")].map(String::from).to_vec()
}

/// Removes agent containers left by an earlier pincer (killed before their
/// CLI exited). Returns how many were removed.
pub async fn remove_orphans() -> Result<usize, String> {
    let listed = run_tool("docker", &list_args(), Duration::from_secs(30)).await.map_err(|e| e.to_string())?;
    if !listed.status.success() {
        return Err(String::from_utf8_lossy(&listed.stderr).trim().to_owned());
    }
    let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout).split_whitespace().map(str::to_owned).collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let mut args = vec!["rm".to_owned(), "--force".to_owned()];
    args.extend(ids.iter().cloned());
    let removed = run_tool("docker", &args, Duration::from_secs(60)).await.map_err(|e| e.to_string())?;
    if removed.status.success() {
        Ok(ids.len())
    } else {
        Err(String::from_utf8_lossy(&removed.stderr).trim().to_owned())
    }
}

/// Removes the container of `group`, if one is left (errors only logged:
/// usually there is none).
pub async fn remove_container(group: &str) {
    let args = ["rm".to_owned(), "--force".to_owned(), container_name(group)];
    match run_tool("docker", &args, Duration::from_secs(60)).await {
        Ok(out) if out.status.success() => {}
        Ok(out) => tracing::debug!(group, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "no old container"),
        Err(e) => tracing::warn!(group, %e, "cannot remove the group's old container"),
    }
}

/// Whether a Docker engine answers: `docker info`.
pub async fn probe() -> Result<(), String> {
    which::which("docker").map_err(|_| "the `docker` client is not installed".to_owned())?;
    let args = ["info", "--format", "{{.ServerVersion}}"].map(String::from);
    let out = run_tool("docker", &args, Duration::from_secs(15)).await.map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("`docker info` failed: {}", stderr.lines().next().unwrap_or("no engine answers").trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            image: "pincer-agent:2.1.330".into(),
            group: "alpha".into(),
            user: "1000:1000".into(),
            group_dir: "/g/alpha".into(),
            global: Some(("/g/global".into(), false)),
            home: "/d/homes/alpha".into(),
            extra: vec![Mount { host: "/srv/photos".into(), name: "photos".into(), writable: true }],
            env: vec![("ANTHROPIC_API_KEY".into(), "placeholder".into())],
            cli_args: vec!["-p".into(), "--resume=abc".into()],
        }
    }

    #[test]
    fn the_command_line_has_the_sandbox_layout() {
        let a = run_args(&plan());
        let joined = a.join(" ");
        assert!(joined.starts_with("run -i --rm --init --name pincer-alpha --label pincer.agent=alpha"), "{joined}");
        assert!(joined.contains("--network host --user 1000:1000 --cap-drop ALL"), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/g/alpha,target=/workspace/group "), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/d/homes/alpha,target=/home/agent "), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/g/global,target=/workspace/global,readonly"), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/srv/photos,target=/workspace/extra/photos "), "{joined}");
        assert!(joined.contains("--workdir /workspace/group --env ANTHROPIC_API_KEY=placeholder"), "{joined}");
        assert!(joined.ends_with("pincer-agent:2.1.330 claude -p --resume=abc"), "{joined}");
        assert!(!joined.contains("--privileged") && !joined.contains("docker.sock"));
    }

    #[test]
    fn the_image_installs_the_pinned_cli() {
        let dockerfile = include_str!("../../container/Dockerfile");
        let pin = crate::claude::install::PINNED_VERSION;
        assert!(dockerfile.contains(&format!("ARG CLAUDE_VERSION={pin}")), "update container/Dockerfile to {pin}");
        assert!(dockerfile.contains("USER agent"), "the image runs as a non-root user");
    }

    #[test]
    fn orphans_are_found_by_label() {
        assert_eq!(list_args().join(" "), "ps --all --quiet --filter label=pincer.agent");
    }
}
