//! [`Launcher`]: decided once at startup (what works here, the proxy, the
//! mount allowlist), then asked by each session actor for the [`SpawnSpec`]
//! of its group's next CLI process. The file work of each start runs on the
//! blocking pool ([`prepare`]), never on a runtime thread.

mod prepare;

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::egress::EgressService;
use super::isolated::{self, IsolatedHome};
use super::mounts::{self, MountError, MountTable, Protected};
use super::proxy::{Credential, KeyLease, Proxy, ProxyError};
use super::seccomp::Filter;
use super::{bwrap, docker, env, Availability, Confinement};
use crate::claude::process::{PassFd, SpawnSpec};
use crate::claude::session_args;
use crate::config::{Config, Secret};
use crate::domain::files::FileView;
use crate::domain::GroupName;
use crate::groups;

/// A group's CLI cannot be started as configured.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox mode `{mode}` does not work here: {why}")]
    Unavailable { mode: &'static str, why: String },
    #[error(
        "group `{0}` has skip_permissions set, but its sandbox mode resolves to none: skipping permission \
         prompts is only allowed inside a sandbox. Install bubblewrap, or remove sandbox.groups.{0}.skip_permissions"
    )]
    SkipOutsideSandbox(String),
    #[error(
        "no API credential for the sandbox's proxy: set [anthropic] api_key or oauth_token in pincer.toml \
         (or ANTHROPIC_API_KEY / CLAUDE_CODE_OAUTH_TOKEN in pincer's environment)"
    )]
    NoCredential,
    #[error("cannot prepare the sandbox of group `{group}`: {source}")]
    Io { group: String, source: std::io::Error },
    #[error("cannot start group `{group}` in Docker: {source}")]
    EnvFile { group: String, source: docker::EnvFileError },
    #[error(
        "{0}. This group was registered before the name was reserved, and its agent does not start: \
         unbind its chat (`pincer groups set {name} --no-chat`) and register the chat under another name \
         (`pincer groups add NAME --telegram ID`, or --whatsapp JID)",
        name = .0.name
    )]
    Reserved(groups::ReservedName),
    #[error(
        "cannot start group `{group}` sandboxed: pincer's binary {} is gone (removed while pincer runs?), and \
         every sandbox binds it (git's pins, the egress forwarder). Restart pincer, or set sandbox.pincer_binary \
         in pincer.toml to where it is now",
        path.display()
    )]
    NoPincer { group: String, path: PathBuf },
    #[error(
        "pincer's seccomp filter cannot be applied here: {0}. Groups in bwrap do not start without it; \
         set sandbox.seccomp = false in pincer.toml to run them unfiltered (less confined), see `pincer doctor`"
    )]
    Seccomp(String),
    #[error(transparent)]
    Mounts(#[from] MountError),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

impl SandboxError {
    /// For `map_err`: an I/O failure while preparing `group`'s sandbox.
    fn io(group: &GroupName) -> impl Fn(std::io::Error) -> SandboxError + Copy + '_ {
        move |source| SandboxError::Io { group: group.to_string(), source }
    }
}

/// Said at every start when agents run unconfined: the risk, and the way out.
pub const UNCONFINED_WARNING: &str = "agents run WITHOUT a sandbox (sandbox.mode resolves to none): each group's \
    agent runs as pincer's user and can read and change every file pincer can, other groups' folders and pincer's \
    secrets included, and may reach into the CLI and pincer themselves. Install bubblewrap, or configure docker \
    (see `pincer doctor`)";

/// What a session actor starts, and what must live as long as the process.
#[derive(Debug)]
pub struct Launch {
    pub spec: SpawnSpec,
    pub confinement: Confinement,
    /// The placeholder key the proxy accepts while this process lives.
    pub lease: Option<KeyLease>,
    /// A Docker container's environment, removed when this is dropped.
    pub env_file: Option<docker::EnvFile>,
    /// The folders as the CLI sees them, for deciding file tools by path.
    pub view: FileView,
}

/// Starts every group's CLI in its confinement.
#[derive(Debug)]
pub struct Launcher {
    config: std::sync::Arc<Config>,
    program: PathBuf,
    availability: Availability,
    /// `None` without a credential: sandboxed groups then refuse to start.
    proxy: Option<Proxy>,
    mounts: MountTable,
    data_dir: PathBuf,
    groups_dir: PathBuf,
    /// The data directory's [`docker::data_label`], on every container.
    docker_data: String,
    /// Each sandboxed group's egress proxy socket.
    egress: EgressService,
    /// pincer's binary inside each sandbox: the git role after the wrapper
    /// (`confine.rs`), and bwrap's `pincer forward`.
    pincer: PathBuf,
}

impl Launcher {
    /// Probes what works, loads the mount allowlist, starts the proxy (when a
    /// credential is known; it serves until `stop_proxy`, which must come
    /// after the sessions' grace), and cleans Docker orphans when docker is in use.
    pub async fn start(
        config: std::sync::Arc<Config>,
        program: PathBuf,
        egress: EgressService,
        stop_proxy: CancellationToken,
    ) -> Result<Launcher, SandboxError> {
        let sandbox = &config.sandbox;
        let wants_docker = super::wants_docker(sandbox);
        let availability = Availability::probe(super::wants_bwrap(sandbox), wants_docker).await;
        crate::metrics::hop("sandbox_probed");
        let data_dir = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
        let groups_dir = std::path::absolute(&config.groups_dir).unwrap_or_else(|_| config.groups_dir.clone());
        let mounts = match &sandbox.mounts_file {
            Some(path) => mounts::load(path, &Protected(vec![data_dir.clone(), groups_dir.clone()]), &groups_dir)?,
            None => MountTable::default(),
        };
        let proxy = match credential(&config) {
            Some(c) => Some(Proxy::start(&config.anthropic.upstream(), c, &api_socket(&data_dir), stop_proxy).await?),
            None => None,
        };
        let docker_data = docker::data_label(&data_dir);
        let pincer = sandbox.pincer_binary.clone().unwrap_or_else(own_binary);
        let launcher = Launcher {
            config,
            program,
            availability,
            proxy,
            mounts,
            data_dir,
            groups_dir,
            docker_data,
            egress,
            pincer,
        };
        launcher.report();
        launcher.refuse_skip_outside_sandbox()?;
        launcher.clear_leftovers(wants_docker).await;
        Ok(launcher)
    }

    /// Skipping prompts is only safe confined: refuse to start rather than
    /// run such a group unconfined. (A mode that does not work here fails
    /// only its group, when it starts.)
    fn refuse_skip_outside_sandbox(&self) -> Result<(), SandboxError> {
        for name in self.config.sandbox.groups.keys() {
            if let Err(e @ SandboxError::SkipOutsideSandbox(_)) = self.resolve(name) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// What a killed pincer left: isolated runs' homes, Docker env files and containers.
    async fn clear_leftovers(&self, wants_docker: bool) {
        // Only this data directory's containers and homes: its lock is held
        // (by the caller), so they are a killed pincer's, never a live one's.
        if let Err(e) = isolated::clear(&self.data_dir) {
            tracing::warn!(%e, "cannot remove the CLI homes of isolated runs an earlier pincer left");
        }
        if wants_docker {
            docker::remove_stale_env_files(&self.data_dir.join("run"));
        }
        if wants_docker && self.availability.docker.is_ok() {
            match docker::remove_orphans(&self.docker_data).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "removed agent containers left by an earlier pincer"),
                Err(e) => tracing::warn!(%e, "cannot remove old agent containers"),
            }
        }
    }

    /// The credential proxy (none without a credential): what passed it,
    /// for the task that stores that (`proxy::spend::keep`), and its end.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// Logs what the default mode resolves to; `none` names the risk.
    fn report(&self) {
        let sandbox = &self.config.sandbox;
        match self.availability.resolve(sandbox.mode, sandbox.docker_image.as_deref()) {
            Ok(Confinement::None) => {
                tracing::warn!(bwrap = ?self.availability.bwrap.as_ref().err(), "{UNCONFINED_WARNING}")
            }
            Ok(mode) => tracing::info!(%mode, "agents run sandboxed"),
            Err(e) => tracing::error!(%e, "groups without a mode of their own will not start"),
        }
        if self.proxy.is_none() {
            tracing::warn!("{}", SandboxError::NoCredential);
        }
        if self.availability.bwrap.is_ok() {
            let features = &self.availability.features;
            match (&features.seccomp, sandbox.seccomp.0) {
                (Err(why), true) => tracing::error!("{}", SandboxError::Seccomp(why.clone())),
                (_, false) => {
                    tracing::warn!("sandbox.seccomp = false: bwrap sandboxes run without pincer's seccomp filter")
                }
                (Ok(_), true) => {}
            }
            if let Err(why) = &features.disable_userns {
                tracing::warn!(%why, "bwrap sandboxes can create user namespaces: this bwrap has no --disable-userns");
            }
        }
        if super::wants_bwrap(sandbox) || super::wants_docker(sandbox) {
            if let Err(why) = super::confine::landlock_abi() {
                tracing::error!(
                    %why,
                    "no Landlock here: sandboxed agents' commands will be refused, since each would run beside \
                     the CLI, able to reach into it (see `pincer doctor`)"
                );
            }
        }
        let unlocking = crate::claude::unlocking_args(&self.config.claude.args);
        if !unlocking.is_empty() {
            tracing::warn!(flags = ?unlocking, "{}", crate::claude::settings_report(&self.config.claude));
        }
    }

    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// What `group`'s CLI runs in; a group that skips permission prompts is
    /// refused when that is no sandbox.
    pub fn resolve(&self, group: &str) -> Result<Confinement, SandboxError> {
        let sandbox = &self.config.sandbox;
        let confinement = self.availability.resolve(sandbox.requested(group), sandbox.docker_image.as_deref())?;
        if confinement == Confinement::None && sandbox.group(group).skip_permissions {
            return Err(SandboxError::SkipOutsideSandbox(group.to_owned()));
        }
        Ok(confinement)
    }

    /// A fresh CLI home for an isolated run of `group`, removed when dropped;
    /// `None` when the group runs unconfined (it keeps pincer's HOME, see
    /// [`isolated`]).
    /// Its file work runs on the blocking pool, like a launch's.
    pub async fn isolated_home(&self, group: &GroupName) -> Result<Option<IsolatedHome>, SandboxError> {
        let confinement = self.resolve(group.as_str())?;
        if confinement == Confinement::None {
            return Ok(None);
        }
        let (data_dir, owned_group) = (self.data_dir.clone(), group.clone());
        let made = tokio::task::spawn_blocking(move || -> std::io::Result<IsolatedHome> {
            let home = IsolatedHome::create(&data_dir, &owned_group)?;
            // A container of root's pincer runs as the image's user: the home must be its.
            if confinement == Confinement::Docker && nix::unistd::getuid().is_root() {
                let id = Some(bwrap::AGENT_ID);
                let (uid, gid) = (id.map(nix::unistd::Uid::from_raw), id.map(nix::unistd::Gid::from_raw));
                nix::unistd::chown(home.path(), uid, gid)?;
            }
            Ok(home)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        made.map(Some).map_err(SandboxError::io(group))
    }

    /// The next CLI process of `group`, resuming `resume` if given; in
    /// `own_home` (an isolated run's) instead of the group's home if given.
    pub async fn launch(
        &self,
        group: &GroupName,
        resume: Option<&str>,
        main: bool,
        own_home: Option<&Path>,
        withheld: &[&str],
    ) -> Result<Launch, SandboxError> {
        // A store from before names were reserved may hold one: its agent never runs.
        groups::check_not_reserved(group).map_err(SandboxError::Reserved)?;
        let confinement = self.resolve(group.as_str())?;
        tracing::info!(%group, %confinement, "starting the group's CLI");
        count_launch(confinement);
        if confinement == Confinement::None {
            return Ok(self.launch_unconfined(group, resume, withheld).await);
        }
        self.launch_sandboxed(group, confinement, resume, main, own_home, withheld).await
    }

    /// A CLI on the host, in the group's folder, as pincer's user.
    async fn launch_unconfined(&self, group: &GroupName, resume: Option<&str>, withheld: &[&str]) -> Launch {
        let global = self.groups_dir.join(groups::GLOBAL_DIR).join("CLAUDE.md");
        let has_global = tokio::fs::try_exists(&global).await.unwrap_or(false);
        let cwd = self.groups_dir.join(group.as_str());
        let spec = SpawnSpec {
            program: self.program.clone(),
            args: session_args(&self.config.claude, resume, has_global.then_some(global.as_path()), &cwd, withheld),
            cwd,
            env: session_env(self.config.claude.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            env_remove: unconfined_env_remove(),
            label: group.to_string(),
            after_kill: None,
            pass_fds: Vec::new(),
        };
        let view = FileView::unconfined(spec.cwd.clone(), self.unconfined_home());
        Launch { spec, confinement: Confinement::None, lease: None, env_file: None, view }
    }

    /// The HOME of an unconfined CLI: `claude.env`'s, else pincer's.
    fn unconfined_home(&self) -> PathBuf {
        let home = self.config.claude.env.get("HOME").cloned().or_else(|| std::env::var("HOME").ok());
        home.unwrap_or_else(|| "/root".into()).into()
    }

    /// The folders `group`'s next CLI sees (in the group's own home, not an
    /// isolated run's), known before it starts: where its transcripts are.
    pub fn view_of(&self, group: &GroupName) -> Result<FileView, SandboxError> {
        let group_dir = self.groups_dir.join(group.as_str());
        match self.resolve(group.as_str())? {
            Confinement::None => Ok(FileView::unconfined(group_dir, self.unconfined_home())),
            _ => Ok(sandbox_view(&group_dir, &self.data_dir.join("homes").join(group.as_str()), None, &[])),
        }
    }

    /// A CLI in bwrap or Docker: its files prepared off the runtime, a proxy
    /// lease, and no network but the two proxies' sockets.
    async fn launch_sandboxed(
        &self,
        group: &GroupName,
        confinement: Confinement,
        resume: Option<&str>,
        main: bool,
        own_home: Option<&Path>,
        withheld: &[&str],
    ) -> Result<Launch, SandboxError> {
        let global_host = self.groups_dir.join(groups::GLOBAL_DIR);
        let proxy = self.proxy.as_ref().ok_or(SandboxError::NoCredential)?;
        let io = SandboxError::io(group);
        let ready = self.prepare(group, confinement, own_home, global_host.clone())?.run_blocking().await?;
        let lease = proxy.lease(group.as_str());
        let settings = self.config.sandbox.group(group.as_str());
        let inside_global = Path::new(bwrap::GLOBAL).join("CLAUDE.md");
        let mut args = session_args(
            &self.config.claude,
            resume,
            ready.has_global.then_some(inside_global.as_path()),
            Path::new(bwrap::WORKSPACE),
            withheld,
        );
        if settings.skip_permissions {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        // No network at all: the API through the credential proxy's socket,
        // the tools' internet through the group's egress proxy socket, both
        // bound in.
        let egress = Some(self.egress.socket(group).map_err(io)?);
        let env = self.sandbox_env(lease.key(), egress.is_some());
        // The main group keeps the memory every group reads; others only read it.
        let global = ready.global_dir.then(|| (global_host.clone(), settings.writes_global || main));
        let group_dir = self.groups_dir.join(group.as_str());
        let view = sandbox_view(&group_dir, &ready.home, global.as_ref().map(|(host, _)| host.as_path()), &ready.extra);
        let parts = Parts {
            group_dir,
            global,
            home: ready.home,
            extra: ready.extra,
            wrapper: ready.wrapper,
            env,
            args,
            api_socket: proxy.socket().to_owned(),
            egress,
        };
        let (spec, env_file) = match ready.bwrap {
            Some(files) => (self.bwrap_spec(group, parts, files), None),
            // No container is removed before a start: names are unique, and
            // a process whose client had to be killed removes its own.
            None => self.docker_spec(group, parts).await.map(|(spec, file)| (spec, Some(file)))?,
        };
        Ok(Launch { spec, confinement, lease: Some(lease), env_file, view })
    }

    /// The environment inside a sandbox: the API through the credential
    /// proxy's socket with this lease's placeholder key, and the egress proxy
    /// when the group has one.
    fn sandbox_env(&self, placeholder: &str, egress: bool) -> Vec<(String, String)> {
        let env = env::agent_env(
            |name| std::env::var(name).ok(),
            &self.config.claude.env,
            bwrap::HOME,
            bwrap::API_SOCKET,
            placeholder,
            egress.then(|| format!("http://{}", bwrap::EGRESS_LISTEN)).as_deref(),
        );
        session_env(env)
    }

    /// The file work of a start in `confinement`, to run off the runtime.
    fn prepare(
        &self,
        group: &GroupName,
        confinement: Confinement,
        own_home: Option<&Path>,
        global_host: PathBuf,
    ) -> Result<prepare::Prepare, SandboxError> {
        let bwrap = match confinement {
            Confinement::Bwrap => Some(prepare::ForBwrap {
                program: self.program.clone(),
                seccomp: self.seccomp_filter()?,
                by_fd: self.availability.features.bind_fd.is_ok(),
            }),
            Confinement::Docker => None,
            Confinement::None => unreachable!("prepared only for a sandbox"),
        };
        Ok(prepare::Prepare {
            group: group.clone(),
            own_home: own_home.map(Path::to_owned),
            data_dir: self.data_dir.clone(),
            global_host,
            extra: self.mounts.for_group(group.as_str()).to_vec(),
            pincer: self.pincer.clone(),
            bwrap,
        })
    }

    /// pincer's seccomp filter for bwrap processes; `None` when it is turned
    /// off, an error when it is asked for and cannot be applied here (fail
    /// closed: no start).
    fn seccomp_filter(&self) -> Result<Option<Filter>, SandboxError> {
        if !self.config.sandbox.seccomp.0 {
            return Ok(None);
        }
        let filter = self.availability.features.seccomp.as_ref().map_err(|why| SandboxError::Seccomp(why.clone()))?;
        Ok(Some(filter.clone()))
    }

    fn bwrap_spec(&self, group: &GroupName, parts: Parts, files: prepare::BwrapFiles) -> SpawnSpec {
        let Parts { group_dir, global, home, extra, wrapper, env, args, api_socket, egress } = parts;
        let prepare::BwrapFiles { etc_dir, cli_dir, file, seccomp, .. } = files;
        let extra_fds: Vec<PassFd> = extra.iter().filter_map(|e| e.fd.clone()).collect();
        let mut command = vec![format!("{}/{file}", bwrap::CLI_DIR)];
        command.extend(args);
        let egress = egress.map(|socket| bwrap::EgressPlan { socket });
        let plan = bwrap::Plan {
            api_socket,
            system: bwrap::host_system(),
            etc_dir,
            group_dir: group_dir.clone(),
            global,
            home,
            cli_dir,
            extra,
            env,
            command,
            pincer: self.pincer.clone(),
            wrapper,
            egress,
            seccomp: seccomp.clone(),
            disable_userns: self.availability.features.disable_userns.is_ok(),
        };
        SpawnSpec {
            program: PathBuf::from("bwrap"),
            args: bwrap::args(&plan),
            cwd: group_dir,
            env: Vec::new(),
            env_remove: Vec::new(),
            label: group.to_string(),
            after_kill: None,
            pass_fds: [seccomp, extra_fds].concat(),
        }
    }

    async fn docker_spec(&self, group: &GroupName, parts: Parts) -> Result<(SpawnSpec, docker::EnvFile), SandboxError> {
        let Parts { group_dir, global, home, extra, wrapper, env, args: cli_args, api_socket, egress } = parts;
        // The mounts were checked by `prepare`, right before.
        let extra = extra.into_iter().map(|e| e.mount).collect();
        let name = docker::container_name(group.as_str());
        let (run, file_name) = (self.data_dir.join("run"), name.clone());
        let written = tokio::task::spawn_blocking(move || docker::EnvFile::write(&run, &file_name, &env)).await;
        let env_file = match written {
            Ok(written) => written.map_err(|source| SandboxError::EnvFile { group: group.to_string(), source })?,
            Err(e) => return Err(SandboxError::io(group)(std::io::Error::other(e.to_string()))),
        };
        let plan = docker::Plan {
            image: self.config.sandbox.docker_image.clone().unwrap_or_default(),
            group: group.to_string(),
            name: name.clone(),
            data: self.docker_data.clone(),
            user: docker_user(),
            group_dir: group_dir.clone(),
            global,
            home,
            extra,
            env_file: env_file.path().to_owned(),
            cli_args,
            api_socket,
            egress,
            pincer: self.pincer.clone(),
            wrapper,
        };
        let spec = SpawnSpec {
            program: PathBuf::from("docker"),
            args: docker::run_args(&plan),
            cwd: group_dir,
            env: Vec::new(),
            env_remove: Vec::new(),
            label: group.to_string(),
            // SIGKILL ends the client, not its container (it cannot be forwarded).
            after_kill: Some([vec!["docker".to_owned()], docker::remove_args(&[name])].concat()),
            pass_fds: Vec::new(),
        };
        Ok((spec, env_file))
    }
}

/// What a confined CLI process is made of, in host paths, whichever sandbox runs it.
struct Parts {
    group_dir: PathBuf,
    /// `groups/global` and whether it is writable.
    global: Option<(PathBuf, bool)>,
    /// The CLI's private home (its sessions).
    home: PathBuf,
    /// The extra mounts as checked (with their descriptors, for bwrap).
    extra: Vec<bwrap::Extra>,
    /// The wrapper's static binary, bound as the CLI's shell and git.
    wrapper: PathBuf,
    env: Vec<(String, String)>,
    /// The CLI's own arguments.
    args: Vec<String>,
    /// The credential proxy's socket.
    api_socket: PathBuf,
    /// The group's egress proxy socket, when the sandbox gets one.
    egress: Option<PathBuf>,
}

/// What a bwrap or Docker sandbox shows its CLI: the folders bound in, at
/// the same places in both, and a `/tmp` of its own.
fn sandbox_view(group_dir: &Path, home: &Path, global: Option<&Path>, extra: &[bwrap::Extra]) -> FileView {
    let mut mounts =
        vec![(PathBuf::from(bwrap::WORKSPACE), group_dir.to_owned()), (bwrap::HOME.into(), home.to_owned())];
    mounts.extend(global.map(|g| (PathBuf::from(bwrap::GLOBAL), g.to_owned())));
    mounts.extend(extra.iter().map(|e| (Path::new(bwrap::EXTRA).join(&e.mount.name), e.mount.host.clone())));
    FileView::sandboxed(bwrap::WORKSPACE, bwrap::HOME, mounts)
}

/// `env` with what every session needs ([`crate::claude::SESSION_ENV`]), which
/// the operator's `claude.env` cannot take away.
fn session_env(mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    for (name, value) in crate::claude::SESSION_ENV {
        env.retain(|(k, _)| k != name);
        env.push(((*name).to_owned(), (*value).to_owned()));
    }
    env
}

/// This process's binary; after an upgrade in place, the new one at its path.
fn own_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(path) => PathBuf::from(path),
        None => exe,
    }
}

/// Where the credential proxy listens for sandboxes.
fn api_socket(data_dir: &Path) -> PathBuf {
    data_dir.join("run/api.sock")
}

/// The credential pincer holds: config first, then pincer's environment.
fn credential(config: &Config) -> Option<Credential> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty()).map(Secret::new);
    let a = &config.anthropic;
    if let Some(key) = a.api_key.clone().or_else(|| from_env("ANTHROPIC_API_KEY")) {
        return Some(Credential::ApiKey(key));
    }
    a.oauth_token.clone().or_else(|| from_env("CLAUDE_CODE_OAUTH_TOKEN")).map(Credential::OAuth)
}

/// Without a sandbox the CLI inherits pincer's environment; at least pincer's
/// own settings (`PINCER_*`, where a Telegram token may be), the nesting
/// guard (`CLAUDECODE`) and systemd's notify socket (the agent must not
/// speak to systemd as pincer) are taken out.
fn unconfined_env_remove() -> Vec<String> {
    let mut remove = ["CLAUDECODE", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"].map(str::to_owned).to_vec();
    remove.extend(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| k.starts_with("PINCER_")));
    remove
}

/// The container's user: pincer's own when it is not root, else the image's
/// `agent` (1000), so the CLI never runs as root.
fn docker_user() -> String {
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    if uid == 0 {
        format!("{id}:{id}", id = bwrap::AGENT_ID)
    } else {
        format!("{uid}:{gid}")
    }
}

/// One more start in `confinement`, for `/metrics`.
fn count_launch(confinement: Confinement) {
    let label = match confinement {
        Confinement::Bwrap => "bwrap",
        Confinement::Docker => "docker",
        Confinement::None => "none",
    };
    crate::metrics::counters::counters()
        .sandbox_launches
        .get_or_create(&crate::metrics::counters::ConfinementLabel { confinement: label })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_that_cannot_be_applied_names_why_and_the_knob() {
        let text = SandboxError::Seccomp("this bwrap refuses `--add-seccomp-fd`".into()).to_string();
        assert!(text.contains("refuses `--add-seccomp-fd`"), "{text}");
        assert!(text.contains("do not start") && text.contains("sandbox.seccomp = false"), "{text}");
    }
}
