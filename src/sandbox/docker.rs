//! The Docker command line (`docker run -i --rm …` with the same layout as
//! bwrap) and the cleanup of containers a killed pincer left behind.
//!
//! The container has no network (`--network none`), as bwrap's sandbox: the
//! CLI reaches the model through the credential proxy's Unix socket, and the
//! tools the internet through the group's egress proxy socket, both mounted
//! at the same paths as in bwrap. The forwarder that presents the egress
//! proxy on the container's loopback is the image's own (`node
//! /opt/pincer/forward.mjs`, from `container/`).
//!
//! As in bwrap, the static wrapper is mounted read-only as the CLI's shell
//! and `git` (`confine.rs`), so every command confines itself from the CLI
//! before it runs, whatever the image's C library; as `git` it goes on in
//! pincer's binary, mounted at `/opt/pincer/pincer`, which does run in the
//! image, so the image's C library must be as new as the one pincer was
//! built against (`node:22-bookworm-slim` for a Debian 12 build) for git to
//! run. A binary that cannot run there runs no git. Docker's default seccomp
//! profile allows Landlock's calls from Docker 23.0 on.
//!
//! Every process gets a container of its own name ([`container_name`]), so
//! starting one never touches another: an isolated scheduled run beside the
//! group's session, or a second pincer on another data directory. Containers
//! carry two labels: [`LABEL`] (the group) and [`DATA_LABEL`] (a hash of the
//! data directory, [`data_label`]). At startup, with the data directory's lock
//! held, every container labelled with this data directory is an orphan of a
//! killed pincer, and only those are removed.
//!
//! The environment (the placeholder key among it) goes through an env file
//! ([`EnvFile`], 0600 in the owner-only `data_dir/run/docker-env`), never the
//! command line, which every local user can read in `ps`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bwrap::{API_SOCKET, EGRESS_LISTEN, EGRESS_SOCKET, EXTRA, GLOBAL, HOME, PINCER_BIN, WORKSPACE};
use super::confine;
use super::mounts::Mount;
use crate::claude::process::run_tool;

/// Marks pincer's agent containers; the value is the group.
pub const LABEL: &str = "pincer.agent";
/// The data directory a container belongs to; the value is [`data_label`].
pub const DATA_LABEL: &str = "pincer.data";
/// The CLI inside the image (`container/Dockerfile` installs it globally).
pub const CLI_IN_IMAGE: &str = "claude";
/// The egress forwarder inside the image (`container/forward.mjs`).
pub const FORWARDER_IN_IMAGE: &str = "/opt/pincer/forward.mjs";

/// One agent container, in host paths.
#[derive(Clone, Debug)]
pub struct Plan {
    pub image: String,
    pub group: String,
    /// The container's name, from [`container_name`].
    pub name: String,
    /// The data directory's [`data_label`].
    pub data: String,
    /// `uid:gid` the CLI runs as (never 0).
    pub user: String,
    pub group_dir: PathBuf,
    pub global: Option<(PathBuf, bool)>,
    pub home: PathBuf,
    pub extra: Vec<Mount>,
    /// The container's environment, written by [`EnvFile::write`].
    pub env_file: PathBuf,
    /// The CLI's arguments (the program is [`CLI_IN_IMAGE`]).
    pub cli_args: Vec<String>,
    /// The credential proxy's socket, mounted at [`API_SOCKET`].
    pub api_socket: PathBuf,
    /// The group's egress proxy socket, mounted at [`EGRESS_SOCKET`].
    pub egress: Option<PathBuf>,
    /// pincer's binary, mounted read-only at [`PINCER_BIN`]: git's pins after the wrapper.
    pub pincer: PathBuf,
    /// The wrapper's static binary, mounted read-only under each of
    /// [`confine::NAMES`] in [`confine::DIR`].
    pub wrapper: PathBuf,
}

/// A new container name for one process of `group`: `pincer-<group>-<8 hex>`.
pub fn container_name(group: &str) -> String {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("pincer-{group}-{}", &unique[..8])
}

/// The value of [`DATA_LABEL`] for `data_dir`: 16 hex digits of the FNV-1a
/// hash of its canonical path, the same in every pincer version (std's
/// hasher promises no such thing), so orphans are found after an upgrade.
pub fn data_label(data_dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_owned());
    super::stable_hash(path.as_os_str().as_bytes())
}

/// The arguments of `docker` for `plan`.
pub fn run_args(plan: &Plan) -> Vec<String> {
    let mut a: Vec<String> = vec!["run".into(), "-i".into(), "--rm".into(), "--init".into()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
    push(&["--name", &plan.name, "--label", &format!("{LABEL}={}", plan.group)]);
    push(&["--label", &format!("{DATA_LABEL}={}", plan.data)]);
    push(&["--network", "none", "--user", &plan.user, "--cap-drop", "ALL"]);
    push(&["--security-opt", "no-new-privileges", "--tmpfs", "/tmp"]);
    let mut mounts = vec![
        bind_mount(&plan.group_dir, WORKSPACE, true),
        bind_mount(&plan.home, HOME, true),
        // Connecting to a socket is not writing it: read-only is enough.
        bind_mount(&plan.api_socket, API_SOCKET, false),
    ];
    if let Some(socket) = &plan.egress {
        mounts.push(bind_mount(socket, EGRESS_SOCKET, false));
    }
    if let Some((global, writable)) = &plan.global {
        mounts.push(bind_mount(global, GLOBAL, *writable));
    }
    for m in &plan.extra {
        mounts.push(bind_mount(&m.host, &format!("{EXTRA}/{}", m.name), m.writable));
    }
    // Every shell and git the CLI starts confines itself first (`CLAUDE_CODE_SHELL`, `PATH`).
    for name in confine::NAMES {
        mounts.push(bind_mount(&plan.wrapper, &format!("{}/{name}", confine::DIR), false));
    }
    mounts.push(bind_mount(&plan.pincer, PINCER_BIN, false));
    for m in &mounts {
        push(&["--mount", m]);
    }
    push(&["--workdir", WORKSPACE]);
    push(&["--env-file", &plan.env_file.display().to_string()]);
    push(&[&plan.image]);
    if plan.egress.is_some() {
        // The forwarder lives as long as the container (`--init` reaps and
        // ends it); the CLI takes the shell's place and its stdio.
        let script = format!("node {FORWARDER_IN_IMAGE} {EGRESS_LISTEN} {EGRESS_SOCKET} & exec \"$@\"");
        push(&["/bin/sh", "-c", &script, "pincer-sandbox"]);
    }
    push(&[CLI_IN_IMAGE]);
    a.extend(plan.cli_args.iter().cloned());
    a
}

/// The folder of the containers' env files, inside `data_dir/run`.
pub const ENV_DIR: &str = "docker-env";

/// Why a container's environment cannot be written to its env file.
#[derive(Debug, thiserror::Error)]
pub enum EnvFileError {
    #[error(
        "the environment variable {name} cannot be passed to a Docker container: its value holds a line \
         break, and Docker's --env-file has no quoting. Remove the line break (or the variable) from \
         [claude] env in pincer.toml"
    )]
    LineBreak { name: String },
    #[error(
        "`{name}` cannot be passed to a Docker container: Docker's --env-file takes only names without `=`, \
         white space, line breaks or a leading `#`. Rename it in [claude] env in pincer.toml"
    )]
    BadName { name: String },
    #[error("cannot write the container's env file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The text of an env file: `NAME=value` a line. Docker reads the value
/// verbatim up to the line's end (no quotes, no escapes; a `\r` before the
/// end is dropped), so a value with a line break is refused, never split.
pub fn env_file_text(env: &[(String, String)]) -> Result<String, EnvFileError> {
    let mut text = String::new();
    for (name, value) in env {
        let bad_name = name.is_empty()
            || name.starts_with('#')
            || name.contains('=')
            || name.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad_name {
            return Err(EnvFileError::BadName { name: name.clone() });
        }
        if value.contains(['\n', '\r', '\0']) {
            return Err(EnvFileError::LineBreak { name: name.clone() });
        }
        text.push_str(&format!("{name}={value}\n"));
    }
    Ok(text)
}

/// One container's env file, removed when dropped: it lives as long as the
/// CLI process it was written for.
#[derive(Debug)]
pub struct EnvFile {
    path: PathBuf,
}

impl EnvFile {
    /// Writes `env` to `run/docker-env/<name>.env`, mode 0600 (the folder 0700).
    pub fn write(run: &Path, name: &str, env: &[(String, String)]) -> Result<EnvFile, EnvFileError> {
        let text = env_file_text(env)?;
        let dir = run.join(ENV_DIR);
        let path = dir.join(format!("{name}.env"));
        let io = |source| EnvFileError::Io { path: path.clone(), source };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(io)?;
        // A new name each process: an existing file is an error, never reused.
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(io)?;
        // From here on a failure still removes the file (on drop).
        let written = EnvFile { path: path.clone() };
        file.write_all(text.as_bytes()).map_err(io)?;
        Ok(written)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for EnvFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), %e, "cannot remove a container's env file");
        }
    }
}

/// Removes the env files a killed pincer left (call it with the data
/// directory's lock held: then no container of this pincer is starting).
pub fn remove_stale_env_files(run: &Path) {
    let Ok(entries) = std::fs::read_dir(run.join(ENV_DIR)) else { return };
    for entry in entries.flatten() {
        if let Err(e) = std::fs::remove_file(entry.path()) {
            tracing::warn!(path = %entry.path().display(), %e, "cannot remove an old container env file");
        }
    }
}
/// One `--mount` value. (A host path with a comma would break the syntax;
/// group folders and homes never have one, allowlisted mounts are checked.)
fn bind_mount(host: &std::path::Path, inside: &str, writable: bool) -> String {
    let ro = if writable { "" } else { ",readonly" };
    format!("type=bind,source={},target={inside}{ro}", host.display())
}

/// The arguments that list the containers (running or not) of the data
/// directory labelled `data`; filters on two labels must both match.
pub fn list_args(data: &str) -> Vec<String> {
    let (agent, this_data) = (format!("label={LABEL}"), format!("label={DATA_LABEL}={data}"));
    ["ps", "--all", "--quiet", "--filter", &agent, "--filter", &this_data].map(String::from).to_vec()
}

/// The arguments that remove the container `name` (or ids), running or not.
pub fn remove_args(names: &[String]) -> Vec<String> {
    let mut args = vec!["rm".to_owned(), "--force".to_owned()];
    args.extend(names.iter().cloned());
    args
}

/// Removes the agent containers of the data directory labelled `data` (call
/// it with the directory's lock held: then they are all orphans of a killed
/// pincer). Returns how many were removed.
pub async fn remove_orphans(data: &str) -> Result<usize, String> {
    let listed = run_tool("docker", &list_args(data), Duration::from_secs(30)).await.map_err(|e| e.to_string())?;
    if !listed.status.success() {
        return Err(String::from_utf8_lossy(&listed.stderr).trim().to_owned());
    }
    let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout).split_whitespace().map(str::to_owned).collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let removed = run_tool("docker", &remove_args(&ids), Duration::from_secs(60)).await.map_err(|e| e.to_string())?;
    if removed.status.success() {
        Ok(ids.len())
    } else {
        Err(String::from_utf8_lossy(&removed.stderr).trim().to_owned())
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
            image: "pincer-agent:2.1.332".into(),
            group: "alpha".into(),
            name: "pincer-alpha-0a1b2c3d".into(),
            data: "00112233deadbeef".into(),
            user: "1000:1000".into(),
            group_dir: "/g/alpha".into(),
            global: Some(("/g/global".into(), false)),
            home: "/d/homes/alpha".into(),
            extra: vec![Mount {
                host: "/srv/photos".into(),
                name: "photos".into(),
                writable: true,
                identity: crate::sandbox::mounts::Identity { dev: 1, ino: 2 },
            }],
            env_file: "/d/run/docker-env/pincer-alpha-0a1b2c3d.env".into(),
            cli_args: vec!["-p".into(), "--resume=abc".into()],
            api_socket: "/d/run/api.sock".into(),
            egress: None,
            pincer: "/usr/local/bin/pincer".into(),
            wrapper: "/d/run/confine-0123".into(),
        }
    }

    #[test]
    fn the_command_line_has_the_sandbox_layout() {
        let a = run_args(&plan());
        let joined = a.join(" ");
        let head = "run -i --rm --init --name pincer-alpha-0a1b2c3d --label pincer.agent=alpha \
                    --label pincer.data=00112233deadbeef --network none";
        assert!(joined.starts_with(head), "{joined}");
        assert!(joined.contains("--network none --user 1000:1000 --cap-drop ALL"), "{joined}");
        // No capability, none regained through a setuid binary; the engine's default seccomp profile stays on.
        assert!(joined.contains("--security-opt no-new-privileges"), "{joined}");
        assert!(!joined.contains("seccomp=unconfined") && !joined.contains("--cap-add"), "{joined}");
        assert!(
            joined.contains("--mount type=bind,source=/d/run/api.sock,target=/run/pincer/api.sock,readonly"),
            "{joined}"
        );
        assert!(joined.contains("--mount type=bind,source=/g/alpha,target=/workspace/group "), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/d/homes/alpha,target=/home/agent "), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/g/global,target=/workspace/global,readonly"), "{joined}");
        assert!(joined.contains("--mount type=bind,source=/srv/photos,target=/workspace/extra/photos "), "{joined}");
        // The CLI's shell and git: the static wrapper, which confines each command from the CLI,
        // with pincer's binary beside it for git's pins.
        for name in ["bash", "git"] {
            let wrapper =
                format!("--mount type=bind,source=/d/run/confine-0123,target=/opt/pincer/confine/{name},readonly");
            assert!(joined.contains(&wrapper), "{joined}");
        }
        let pincer = "--mount type=bind,source=/usr/local/bin/pincer,target=/opt/pincer/pincer,readonly";
        assert!(joined.contains(pincer), "{joined}");
        assert!(
            joined.contains("--workdir /workspace/group --env-file /d/run/docker-env/pincer-alpha-0a1b2c3d.env "),
            "{joined}"
        );
        assert!(!a.iter().any(|x| x == "--env" || x == "-e"), "no variable on the command line: {joined}");
        assert!(joined.ends_with("pincer-agent:2.1.332 claude -p --resume=abc"), "{joined}");
        assert!(!joined.contains("--privileged") && !joined.contains("docker.sock"));
        assert!(!joined.contains("egress"), "no egress proxy given: {joined}");
    }

    #[test]
    fn the_egress_forwarder_runs_before_the_cli_in_the_container() {
        let mut p = plan();
        p.egress = Some("/d/run/egress/alpha.sock".into());
        let a = run_args(&p);
        let joined = a.join(" ");
        assert!(
            joined
                .contains("--mount type=bind,source=/d/run/egress/alpha.sock,target=/run/pincer/egress.sock,readonly"),
            "{joined}"
        );
        let image = a.iter().position(|x| x == "pincer-agent:2.1.332").unwrap();
        let script = "node /opt/pincer/forward.mjs 127.0.0.1:3128 /run/pincer/egress.sock & exec \"$@\"";
        assert_eq!(a[image + 1..image + 6], ["/bin/sh", "-c", script, "pincer-sandbox", "claude"]);
        assert!(joined.ends_with("claude -p --resume=abc"), "{joined}");
    }

    #[test]
    fn the_environment_goes_to_a_private_file_and_never_to_argv() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let env = vec![
            ("ANTHROPIC_API_KEY".to_owned(), "pincer-placeholder-0123".to_owned()),
            ("NOTE".to_owned(), "a=b \"quoted\" # not a comment ".to_owned()),
        ];
        let file = EnvFile::write(&run, "pincer-alpha-0a1b2c3d", &env).unwrap();
        let path = run.join("docker-env/pincer-alpha-0a1b2c3d.env");
        assert_eq!(file.path(), path);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&run.join(ENV_DIR)), 0o700);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "ANTHROPIC_API_KEY=pincer-placeholder-0123\nNOTE=a=b \"quoted\" # not a comment \n");

        let args = run_args(&Plan { env_file: file.path().to_owned(), ..plan() });
        assert!(!args.join(" ").contains("pincer-placeholder-0123"), "{args:?}");
        assert!(args.windows(2).any(|w| w[0] == "--env-file" && w[1] == path.display().to_string()), "{args:?}");

        assert!(EnvFile::write(&run, "pincer-alpha-0a1b2c3d", &env).is_err(), "a name is never reused");
        drop(file);
        assert!(!path.exists(), "the file goes with its process");
    }

    #[test]
    fn a_value_docker_would_split_or_a_bad_name_is_refused() {
        let one = |name: &str, value: &str| env_file_text(&[(name.to_owned(), value.to_owned())]);
        for value in ["two\nlines", "carriage\rreturn", "nul\0"] {
            let e = one("NOTE", value).unwrap_err();
            assert!(matches!(e, EnvFileError::LineBreak { ref name } if name == "NOTE"), "{value:?}: {e}");
            assert!(e.to_string().contains("[claude] env"), "{e}");
        }
        for name in ["", "A=B", "WITH SPACE", "#COMMENT", "TAB\t"] {
            assert!(matches!(one(name, "v"), Err(EnvFileError::BadName { .. })), "{name:?}");
        }
        assert_eq!(one("EMPTY", "").unwrap(), "EMPTY=\n");
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        assert!(EnvFile::write(&run, "c1", &[("NOTE".into(), "x\ny".into())]).is_err());
        assert!(!run.join("docker-env/c1.env").exists(), "nothing is written for a refused environment");
    }

    #[test]
    fn env_files_left_by_a_killed_pincer_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let left = EnvFile::write(&run, "c1", &[]).unwrap();
        std::mem::forget(left);
        remove_stale_env_files(&run);
        assert!(!run.join("docker-env/c1.env").exists());
        remove_stale_env_files(&dir.path().join("nowhere"));
    }

    #[test]
    fn the_image_installs_the_pinned_cli() {
        let dockerfile = include_str!("../../container/Dockerfile");
        let pin = crate::claude::install::PINNED_VERSION;
        assert!(dockerfile.contains(&format!("ARG CLAUDE_VERSION={pin}")), "update container/Dockerfile to {pin}");
        assert!(dockerfile.contains("USER agent"), "the image runs as a non-root user");
        // What pincer's wrappers at /opt/pincer/confine run once confined.
        assert!(dockerfile.contains(" bash ") && dockerfile.contains(" git "), "the image has bash and git");
        assert!(dockerfile.contains(&format!("COPY forward.mjs {FORWARDER_IN_IMAGE}")), "the image has the forwarder");
    }

    #[test]
    fn orphans_are_found_by_both_labels_and_removed_by_id() {
        let list = list_args("00112233deadbeef").join(" ");
        assert_eq!(list, "ps --all --quiet --filter label=pincer.agent --filter label=pincer.data=00112233deadbeef");
        assert_eq!(remove_args(&["c1".into(), "c2".into()]).join(" "), "rm --force c1 c2");
    }

    #[test]
    fn every_process_gets_a_name_of_its_own() {
        let (a, b) = (container_name("alpha"), container_name("alpha"));
        assert_ne!(a, b);
        for name in [&a, &b] {
            let suffix = name.strip_prefix("pincer-alpha-").expect(name);
            assert!(suffix.len() == 8 && suffix.bytes().all(|c| c.is_ascii_hexdigit()), "{name}");
        }
    }

    #[test]
    fn the_data_label_is_stable_and_tells_data_directories_apart() {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let label = data_label(one.path());
        assert_eq!(label.len(), 16, "{label}");
        assert_eq!(label, data_label(&one.path().join(".")), "the canonical path is hashed");
        assert_ne!(label, data_label(two.path()));
        // FNV-1a of "/": fixed, so containers of an older pincer are still found.
        assert_eq!(data_label(Path::new("/")), "af63a24c860189fe");
    }
}
