//! The bubblewrap command line: a fresh mount namespace in which the agent sees
//! only the sandbox layout, as a non-root uid, dying with pincer, in a network
//! namespace of its own (its own loopback, no route anywhere): the model is
//! reached through the credential proxy's Unix socket, bound in.
//!
//! Layout (paths inside the sandbox):
//!
//! | path | what | access |
//! | --- | --- | --- |
//! | `/workspace/group` | the group's folder (the cwd) | rw |
//! | `/workspace/global` | `groups/global` | ro (rw for the main group, or with `writes_global`) |
//! | `/workspace/extra/<name>` | allowlisted mounts | ro unless allowed |
//! | `/home/agent` | `data_dir/homes/<group>`: the CLI's state, so `--resume` works | rw |
//! | `/opt/claude` | the CLI installation | ro |
//! | `/usr`, `/bin`, `/lib*`, `/sbin`, some of `/etc` | the host's system | ro |
//! | `/etc/passwd`, `/etc/group` | an `agent` user (uid 1000) | ro |
//! | `/tmp` | private tmpfs | rw |
//! | `/run/pincer/api.sock` | the credential proxy's socket | connect |
//! | `/run/pincer/egress.sock` | the group's egress proxy socket | connect |
//! | `/opt/pincer/pincer` | pincer's binary, run as `pincer forward` on `127.0.0.1:3128`, and as git's pins after the wrapper | ro |
//! | `/opt/pincer/confine/{bash,git}` | the static wrapper (`data_dir/run/confine-*`): the CLI's shell and `git`, each confined (`confine.rs`) | ro |
//! | `/proc`, `/dev` | the sandbox's own | |
//!
//! Everything else at the top is read-only (`--remount-ro /`). Where the
//! installed bwrap has them ([`Features`], probed once), the agent
//! also runs under pincer's seccomp filter (`--add-seccomp-fd`, see
//! `seccomp.rs`), cannot create user namespaces (`--disable-userns`), and
//! its allowlisted mounts are bound from descriptors opened at launch
//! (`--bind-fd`), never re-resolved from their paths. Under the filter the
//! agent stays in pincer's session (the filter denies typing into its
//! terminal); only without it does bwrap start a session of its own
//! (`--new-session`), which is also a scheduling group of its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::confine;
use super::mounts::Mount;
use super::seccomp::Filter;
use crate::claude::process::{run_tool_passing, PassFd};

pub const WORKSPACE: &str = "/workspace/group";
pub const GLOBAL: &str = "/workspace/global";
pub const EXTRA: &str = "/workspace/extra";
pub const HOME: &str = "/home/agent";
pub const CLI_DIR: &str = "/opt/claude";
/// The credential proxy's socket, inside.
pub const API_SOCKET: &str = "/run/pincer/api.sock";
/// The egress proxy's socket, inside (groups that may reach the internet).
pub const EGRESS_SOCKET: &str = "/run/pincer/egress.sock";
/// The pincer binary, inside, for `pincer forward`.
pub const PINCER_BIN: &str = "/opt/pincer/pincer";
/// Where `pincer forward` presents the egress proxy on the sandbox's loopback
/// (`HTTP_PROXY`/`HTTPS_PROXY` point here).
pub const EGRESS_LISTEN: &str = "127.0.0.1:3128";
/// The agent's uid and gid inside the sandbox (not root, so the CLI accepts
/// `--dangerously-skip-permissions`).
pub const AGENT_ID: u32 = 1000;

/// Top-level system paths: mirrored as symlinks on merged-/usr systems, else bound read-only.
const SYSTEM_TOP: &[&str] = &["/bin", "/lib", "/lib32", "/lib64", "/sbin"];
/// What of `/etc` the CLI, node and shell tools need; nothing with secrets.
const ETC: &[&str] = &[
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/hosts",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/ssl",
];

/// How the host's system directories appear inside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemPath {
    /// `--symlink target path` (e.g. `/bin -> usr/bin`).
    Symlink { path: String, target: String },
    /// `--ro-bind path path`.
    Bind(String),
    /// `--ro-bind-try path path`: skipped when missing.
    BindTry(String),
}

/// Reads the host's layout of [`SYSTEM_TOP`] and [`ETC`].
pub fn host_system() -> Vec<SystemPath> {
    let mut out = vec![SystemPath::Bind("/usr".to_owned())];
    for top in SYSTEM_TOP {
        match std::fs::read_link(top) {
            Ok(target) => {
                out.push(SystemPath::Symlink { path: (*top).to_owned(), target: target.display().to_string() })
            }
            Err(_) if Path::new(top).is_dir() => out.push(SystemPath::Bind((*top).to_owned())),
            Err(_) => {}
        }
    }
    out.extend(ETC.iter().map(|p| SystemPath::BindTry((*p).to_owned())));
    out
}

/// Everything one sandboxed CLI process is made of, in host paths.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The credential proxy's Unix socket, bound at [`API_SOCKET`].
    pub api_socket: PathBuf,
    pub system: Vec<SystemPath>,
    /// Holds the synthetic `passwd` and `group`.
    pub etc_dir: PathBuf,
    pub group_dir: PathBuf,
    /// `groups/global` and whether it is writable.
    pub global: Option<(PathBuf, bool)>,
    pub home: PathBuf,
    /// The folder of the CLI's executable, bound at [`CLI_DIR`].
    pub cli_dir: PathBuf,
    pub extra: Vec<Extra>,
    pub env: Vec<(String, String)>,
    /// The command as seen inside (`/opt/claude/claude …`).
    pub command: Vec<String>,
    /// pincer's binary, bound read-only at [`PINCER_BIN`]: the egress
    /// forwarder, and git's pins after the wrapper.
    pub pincer: PathBuf,
    /// The wrapper's static binary (`confine::wrapper`): bound read-only
    /// under each of [`confine::NAMES`] in [`confine::DIR`].
    pub wrapper: PathBuf,
    /// The way to the internet, for a group whose policy allows any.
    pub egress: Option<EgressPlan>,
    /// The seccomp programs, one descriptor each (`--add-seccomp-fd`); none: no filter.
    pub seccomp: Vec<PassFd>,
    /// `--disable-userns`: the agent cannot create user namespaces.
    pub disable_userns: bool,
}

/// An allowlisted mount, with the descriptor bwrap binds when it can.
#[derive(Clone, Debug)]
pub struct Extra {
    pub mount: Mount,
    /// The folder as `mounts::reopen` found it (`--bind-fd`); `None`: bound by its path.
    pub fd: Option<PassFd>,
}

/// What a sandbox with internet access through the egress proxy adds
/// (`pincer forward`, from [`Plan::pincer`]).
#[derive(Clone, Debug)]
pub struct EgressPlan {
    /// The egress proxy's Unix socket for this group, bound at [`EGRESS_SOCKET`].
    pub socket: PathBuf,
}

/// The arguments of `bwrap` for `plan` (the program is `bwrap`).
pub fn args(plan: &Plan) -> Vec<String> {
    let mut a = Args::default();
    let id = AGENT_ID.to_string();
    a.push(&["--unshare-user", "--uid", &id, "--gid", &id]);
    if plan.disable_userns {
        a.push(&["--disable-userns"]);
    }
    // No network: nothing on the host's loopback or beyond is reachable.
    a.push(&["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]);
    a.push(&["--die-with-parent", "--hostname", "sandbox"]);
    if needs_own_session(plan) {
        a.push(&["--new-session"]);
    }
    a.system(&plan.system);
    a.bind("--ro-bind", &plan.etc_dir.join("passwd"), "/etc/passwd");
    a.bind("--ro-bind", &plan.etc_dir.join("group"), "/etc/group");
    a.push(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    a.agent_mounts(plan);
    // Last of the layout: the root's own folders (`/etc`, `/opt`, `/run`),
    // which bwrap made the agent's, become read-only, so nothing inside
    // plants a file there: the CLI reads `/etc/claude-code` (managed
    // settings, MCP servers) whatever `--setting-sources` says. The mounts
    // keep their own access.
    a.push(&["--remount-ro", "/"]);
    a.push(&["--chdir", WORKSPACE, "--clearenv"]);
    for (k, v) in &plan.env {
        a.push(&["--setenv", k, v]);
    }
    match &plan.egress {
        None => {
            a.push(&["--"]);
            a.0.extend(plan.command.iter().cloned());
        }
        Some(_) => {
            // The forwarder lives in the sandbox's pid namespace, so it ends
            // with the sandbox; the CLI takes the shell's place (and its
            // stdio). The forwarder gets none of those sockets: its stdio is
            // /dev/null (bwrap passes no other fd).
            let script = format!(
                "{PINCER_BIN} forward --listen {EGRESS_LISTEN} --to {EGRESS_SOCKET} </dev/null >/dev/null 2>&1 & exec \"$@\""
            );
            a.push(&["--", "/bin/sh", "-c", &script, "pincer-sandbox"]);
            a.0.extend(plan.command.iter().cloned());
        }
    }
    a.0
}

/// A session of its own keeps the agent from typing into pincer's terminal
/// (`TIOCSTI`), which the seccomp filter denies itself: only without it. A
/// session is also a scheduling group of its own (`sched_autogroup`), which
/// on a busy machine makes each hop between pincer and the CLI wait for the
/// CPU: several ms a turn (`docs/benchmarks.md`, issue 35).
fn needs_own_session(plan: &Plan) -> bool {
    plan.seccomp.is_empty()
}

#[derive(Default)]
struct Args(Vec<String>);

impl Args {
    /// What the agent is given of the host: the CLI, the API's socket, its
    /// home and folder, the confining wrapper, the shared memory, the
    /// allowlisted mounts, the filter and the egress socket.
    fn agent_mounts(&mut self, plan: &Plan) {
        self.bind("--ro-bind", &plan.cli_dir, CLI_DIR);
        // A socket is connected to, never written as a file: read-only is enough.
        self.bind("--ro-bind", &plan.api_socket, API_SOCKET);
        self.bind("--bind", &plan.home, HOME);
        self.bind("--bind", &plan.group_dir, WORKSPACE);
        // Every shell and git the CLI starts confines itself first (`CLAUDE_CODE_SHELL`, `PATH`),
        // in the static wrapper; as git it goes on in pincer's binary beside it.
        for name in confine::NAMES {
            self.bind("--ro-bind", &plan.wrapper, &format!("{}/{name}", confine::DIR));
        }
        self.bind("--ro-bind", &plan.pincer, PINCER_BIN);
        if let Some((global, writable)) = &plan.global {
            self.bind(if *writable { "--bind" } else { "--ro-bind" }, global, GLOBAL);
        }
        for Extra { mount: m, fd } in &plan.extra {
            let inside = format!("{EXTRA}/{}", m.name);
            match fd {
                Some(fd) => self.push(&[
                    if m.writable { "--bind-fd" } else { "--ro-bind-fd" },
                    &fd.number().to_string(),
                    &inside,
                ]),
                None => self.bind(if m.writable { "--bind" } else { "--ro-bind" }, &m.host, &inside),
            }
        }
        for fd in &plan.seccomp {
            self.push(&["--add-seccomp-fd", &fd.number().to_string()]);
        }
        if let Some(egress) = &plan.egress {
            self.bind("--ro-bind", &egress.socket, EGRESS_SOCKET);
        }
    }
}

impl Args {
    fn system(&mut self, system: &[SystemPath]) {
        for sys in system {
            match sys {
                SystemPath::Symlink { path, target } => self.push(&["--symlink", target, path]),
                SystemPath::Bind(p) => self.push(&["--ro-bind", p, p]),
                SystemPath::BindTry(p) => self.push(&["--ro-bind-try", p, p]),
            }
        }
    }

    fn push(&mut self, items: &[&str]) {
        self.0.extend(items.iter().map(|s| (*s).to_owned()));
    }

    fn bind(&mut self, flag: &str, host: &Path, inside: &str) {
        self.0.extend([flag.to_owned(), host.display().to_string(), inside.to_owned()]);
    }
}

/// The synthetic account files: the agent is `agent` (1000) and nobody else exists.
pub fn write_account_files(etc_dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(etc_dir)?;
    let id = AGENT_ID;
    std::fs::write(etc_dir.join("passwd"), format!("agent:x:{id}:{id}:agent:{HOME}:/bin/bash\n"))?;
    std::fs::write(etc_dir.join("group"), format!("agent:x:{id}:\n"))
}

/// Whether bwrap can build this layout here: runs `true` inside the same
/// namespaces and system binds the agent gets.
pub async fn probe() -> Result<(), String> {
    let out = run_probe(&[], &[]).await?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "`bwrap` is installed but cannot create a sandbox here ({}): {}; user namespaces may be disabled \
             (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces) or network namespaces refused",
            out.status,
            stderr.trim()
        ))
    }
}

/// Runs the probe's sandbox with `extra` arguments, passing `fds`.
async fn run_probe(extra: &[String], fds: &[PassFd]) -> Result<std::process::Output, String> {
    let bwrap =
        which::which("bwrap").map_err(|_| "`bwrap` is not installed (apt-get install bubblewrap)".to_owned())?;
    let id = AGENT_ID.to_string();
    let mut a = Args::default();
    // The network namespace too: a sandbox that could not drop the network is not one pincer runs.
    a.push(&["--unshare-user", "--uid", &id, "--gid", &id, "--unshare-pid", "--unshare-net", "--die-with-parent"]);
    a.system(&host_system());
    a.0.extend(extra.iter().cloned());
    a.push(&["--proc", "/proc", "--dev", "/dev", "--", "true"]);
    let bwrap = bwrap.display().to_string();
    run_tool_passing(&bwrap, &a.0, fds, Duration::from_secs(10)).await.map_err(|e| e.to_string())
}

/// What the installed bwrap adds beyond namespaces, each probed once by a
/// sandbox that uses it (after [`probe`] succeeded).
#[derive(Clone, Debug)]
pub struct Features {
    /// `--disable-userns` (bubblewrap 0.8 and later).
    pub disable_userns: Result<(), String>,
    /// `--bind-fd`/`--ro-bind-fd` (bubblewrap 0.10 and later, and some distributions' 0.8).
    pub bind_fd: Result<(), String>,
    /// pincer's seccomp filter, built for this architecture and loaded by bwrap here.
    pub seccomp: Result<Filter, String>,
}

impl Features {
    /// Nothing probed, for `why`.
    pub fn none(why: &str) -> Features {
        Features { disable_userns: Err(why.to_owned()), bind_fd: Err(why.to_owned()), seccomp: Err(why.to_owned()) }
    }

    /// Probes bwrap and every feature with one sandbox that uses them all:
    /// one process start where a current bwrap is installed, which is most
    /// of what a cold `pincer chat` waits for before its CLI starts. Only
    /// when that sandbox fails are they probed one by one (all at once), to
    /// say which one this bwrap lacks.
    pub async fn probe_with_bwrap() -> (Result<(), String>, Features) {
        if let Ok(filter) = Self::probe_together().await {
            let ok = Features { disable_userns: Ok(()), bind_fd: Ok(()), seccomp: Ok(filter) };
            return (Ok(()), ok);
        }
        match tokio::join!(probe(), Features::probe()) {
            (Ok(()), features) => (Ok(()), features),
            (Err(why), _) => (Err(why), Features::none("bwrap does not work here")),
        }
    }

    /// One sandbox with every feature; the filter it loaded when it ran.
    async fn probe_together() -> Result<Filter, String> {
        let usr = std::fs::File::open("/usr").map_err(|e| format!("cannot open /usr: {e}"))?;
        let usr = PassFd::new(usr.into()).map_err(|e| e.to_string())?;
        let filter = Filter::build().map_err(|e| e.to_string())?;
        let mut fds = filter.descriptors().map_err(|e| e.to_string())?;
        let mut args = vec!["--disable-userns".to_owned()];
        args.extend(["--ro-bind-fd".to_owned(), usr.number().to_string(), "/probe".to_owned()]);
        args.extend(fds.iter().flat_map(|fd| ["--add-seccomp-fd".to_owned(), fd.number().to_string()]));
        fds.push(usr);
        let out = run_probe(&args, &fds).await?;
        match out.status.success() {
            true => Ok(filter),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    pub async fn probe() -> Features {
        let disable_userns = async {
            let needs = "bubblewrap 0.8 or later has it";
            probe_feature(&["--disable-userns".to_owned()], &[], needs).await
        };
        let bind_fd = async {
            let usr = std::fs::File::open("/usr").map_err(|e| format!("cannot open /usr: {e}"))?;
            let fd = PassFd::new(usr.into()).map_err(|e| e.to_string())?;
            let args = ["--ro-bind-fd".to_owned(), fd.number().to_string(), "/probe".to_owned()];
            probe_feature(&args, &[fd], "bubblewrap 0.10 or later has it").await
        };
        let seccomp = async {
            let filter = Filter::build().map_err(|e| e.to_string())?;
            let fds = filter.descriptors().map_err(|e| format!("cannot hand the filter to bwrap: {e}"))?;
            let args: Vec<String> =
                fds.iter().flat_map(|fd| ["--add-seccomp-fd".to_owned(), fd.number().to_string()]).collect();
            probe_feature(&args, &fds, "bubblewrap 0.5 or later, and a kernel with CONFIG_SECCOMP_FILTER").await?;
            Ok(filter)
        };
        let (disable_userns, bind_fd, seccomp) = tokio::join!(disable_userns, bind_fd, seccomp);
        Features { disable_userns, bind_fd, seccomp }
    }
}

/// Ok when the probe's sandbox runs with `args`; else bwrap's complaint and what would have it.
async fn probe_feature(args: &[String], fds: &[PassFd], needs: &str) -> Result<(), String> {
    let out = run_probe(args, fds).await?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!("this bwrap refuses `{}` ({}; {needs})", args[0], stderr.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            api_socket: "/d/run/api.sock".into(),
            system: vec![
                SystemPath::Bind("/usr".into()),
                SystemPath::Symlink { path: "/bin".into(), target: "usr/bin".into() },
                SystemPath::BindTry("/etc/ssl".into()),
            ],
            etc_dir: "/d/sandbox/etc".into(),
            group_dir: "/g/alpha".into(),
            global: Some(("/g/global".into(), false)),
            home: "/d/homes/alpha".into(),
            cli_dir: "/d/claude/bin".into(),
            extra: vec![Extra { mount: photos(), fd: None }],
            env: vec![("HOME".into(), HOME.into())],
            command: vec!["/opt/claude/claude".into(), "-p".into()],
            pincer: "/usr/local/bin/pincer".into(),
            wrapper: "/d/run/confine-0123".into(),
            egress: None,
            seccomp: Vec::new(),
            disable_userns: false,
        }
    }

    fn photos() -> Mount {
        let identity = crate::sandbox::mounts::Identity { dev: 1, ino: 2 };
        Mount { host: "/srv/photos".into(), name: "photos".into(), writable: false, identity }
    }

    fn descriptor() -> PassFd {
        PassFd::new(std::fs::File::open("/dev/null").unwrap().into()).unwrap()
    }

    #[test]
    fn a_session_of_its_own_only_when_no_filter_keeps_the_agent_off_the_terminal() {
        // Without the filter, a session of its own is what stops TIOCSTI.
        assert!(has(&args(&plan()), &["--new-session"]));
        // With it, the filter denies TIOCSTI, and the agent stays in pincer's
        // session: its scheduling group (autogroup), not one of its own.
        let mut p = plan();
        p.seccomp = vec![descriptor(), descriptor()];
        let a = args(&p);
        assert!(!has(&a, &["--new-session"]), "{a:?}");
    }

    fn has(args: &[String], window: &[&str]) -> bool {
        args.windows(window.len()).any(|w| w.iter().zip(window).all(|(a, b)| a == b))
    }

    #[test]
    fn the_layout_binds_only_what_the_agent_needs() {
        let a = args(&plan());
        assert!(has(&a, &["--unshare-user", "--uid", "1000", "--gid", "1000"]));
        assert!(has(&a, &["--unshare-net"]), "no network of its own");
        assert!(has(&a, &["--ro-bind", "/d/run/api.sock", API_SOCKET]), "the proxy's socket is the way out");
        assert!(has(&a, &["--die-with-parent"]) && has(&a, &["--unshare-pid"]) && has(&a, &["--clearenv"]));
        assert!(has(&a, &["--bind", "/g/alpha", WORKSPACE]));
        assert!(has(&a, &["--ro-bind", "/g/global", GLOBAL]));
        assert!(has(&a, &["--bind", "/d/homes/alpha", HOME]));
        assert!(has(&a, &["--ro-bind", "/d/claude/bin", CLI_DIR]));
        assert!(has(&a, &["--ro-bind", "/srv/photos", "/workspace/extra/photos"]));
        assert!(has(&a, &["--symlink", "usr/bin", "/bin"]) && has(&a, &["--ro-bind-try", "/etc/ssl", "/etc/ssl"]));
        assert!(has(&a, &["--tmpfs", "/tmp"]) && has(&a, &["--chdir", WORKSPACE]));
        // The root's own folders are read-only, after every mount is in place.
        let ro = a.iter().position(|x| x == "--remount-ro").expect("the root is remounted read-only");
        assert_eq!(a[ro + 1], "/");
        let last_mount = a.iter().rposition(|x| x.starts_with("--") && x.contains("bind") || x == "--tmpfs").unwrap();
        assert!(last_mount < ro, "{a:?}");
        assert!(has(&a, &["--setenv", "HOME", HOME]));
        // The CLI's shell and git are the static wrapper, which confines each before it runs,
        // with pincer's binary beside it for git's pins.
        assert!(has(&a, &["--ro-bind", "/d/run/confine-0123", "/opt/pincer/confine/bash"]), "{a:?}");
        assert!(has(&a, &["--ro-bind", "/d/run/confine-0123", "/opt/pincer/confine/git"]), "{a:?}");
        assert!(has(&a, &["--ro-bind", "/usr/local/bin/pincer", PINCER_BIN]), "{a:?}");
        // The command comes last, after `--`.
        assert_eq!(&a[a.len() - 3..], ["--", "/opt/claude/claude", "-p"]);
        // Nothing binds the host's root or the groups folder as a whole.
        let whole = |w: &[String]| (w[1] == "/" || w[1] == "/g") && w[0] != "--remount-ro";
        assert!(!a.windows(2).any(whole), "{a:?}");
    }

    #[test]
    fn a_group_with_internet_access_gets_the_forwarder_in_front_of_the_cli() {
        let mut p = plan();
        p.egress = Some(EgressPlan { socket: "/d/run/egress/alpha.sock".into() });
        let a = args(&p);
        assert!(has(&a, &["--unshare-net"]), "still no network of its own");
        assert!(has(&a, &["--ro-bind", "/d/run/egress/alpha.sock", EGRESS_SOCKET]));
        assert!(has(&a, &["--ro-bind", "/usr/local/bin/pincer", PINCER_BIN]));
        let at = a.iter().position(|x| x == "--").unwrap();
        assert_eq!(a[at + 1..at + 3], ["/bin/sh", "-c"]);
        assert!(a[at + 3].starts_with("/opt/pincer/pincer forward --listen 127.0.0.1:3128"), "{}", a[at + 3]);
        assert!(a[at + 3].contains("</dev/null >/dev/null 2>&1 &"), "none of the CLI's stdio: {}", a[at + 3]);
        assert_eq!(&a[at + 4..], ["pincer-sandbox", "/opt/claude/claude", "-p"]);
    }

    #[test]
    fn without_hardening_nothing_is_filtered_and_mounts_are_bound_by_path() {
        let a = args(&plan());
        assert!(!has(&a, &["--disable-userns"]) && !has(&a, &["--add-seccomp-fd"]), "{a:?}");
        assert!(!a.iter().any(|x| x.ends_with("-fd")), "{a:?}");
    }

    #[test]
    fn hardening_adds_the_filters_disable_userns_and_mounts_bound_by_descriptor() {
        let (deny, nosys, folder) = (descriptor(), descriptor(), descriptor());
        let mut p = plan();
        p.seccomp = vec![deny.clone(), nosys.clone()];
        p.disable_userns = true;
        let mut writable = photos();
        writable.writable = true;
        writable.name = "shelf".into();
        p.extra = vec![
            Extra { mount: photos(), fd: Some(folder.clone()) },
            Extra { mount: writable, fd: Some(folder.clone()) },
        ];
        let a = args(&p);
        let n = |fd: &PassFd| fd.number().to_string();
        // `--disable-userns` needs `--unshare-user` (bwrap refuses it alone).
        assert!(has(&a, &["--unshare-user", "--uid", "1000", "--gid", "1000", "--disable-userns"]), "{a:?}");
        assert!(has(&a, &["--add-seccomp-fd", &n(&deny), "--add-seccomp-fd", &n(&nosys)]), "{a:?}");
        assert!(!has(&a, &["--seccomp"]), "bwrap refuses --seccomp with --add-seccomp-fd");
        assert!(has(&a, &["--ro-bind-fd", &n(&folder), "/workspace/extra/photos"]), "{a:?}");
        assert!(has(&a, &["--bind-fd", &n(&folder), "/workspace/extra/shelf"]), "{a:?}");
        assert!(!a.iter().any(|x| x == "/srv/photos"), "the path is not handed to bwrap: {a:?}");
        // Everything bwrap reads comes before the command.
        let end = a.iter().position(|x| x == "--").unwrap();
        assert!(a.iter().rposition(|x| x == "--add-seccomp-fd").unwrap() < end);
    }

    #[test]
    fn a_main_group_writes_global_memory() {
        let mut p = plan();
        p.global = Some(("/g/global".into(), true));
        assert!(has(&args(&p), &["--bind", "/g/global", GLOBAL]));
    }
}
