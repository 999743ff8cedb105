//! pincer as a systemd service: the unit `pincer service print` writes for
//! this install, and what `pincer run` tells systemd (ready once it serves,
//! a watchdog ping while its main loop and store answer, stopping).
//!
//! Without `NOTIFY_SOCKET` in the environment (not under systemd) every
//! notification is a no-op, so `run` needs no flag for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sd_notify::NotifyState;

/// What a unit is written for: absolute paths of this install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitSpec {
    /// The `pincer` executable.
    pub exe: PathBuf,
    /// `--config` given to `run`, if any.
    pub config: Option<PathBuf>,
    /// Where `run` starts (a relative `data_dir` or `groups_dir` is from here).
    pub work_dir: PathBuf,
    pub data_dir: PathBuf,
    pub groups_dir: PathBuf,
    /// The account pincer runs as.
    pub user: String,
    /// `claude.shutdown_grace`: sessions get it to finish, then replies as long to drain.
    pub shutdown_grace: Duration,
    /// On a cluster node, how long SIGTERM's drain may wait for a turn and
    /// its tasks (`[cluster] drain_turn_timeout` + `drain_tasks_wait`); zero on one machine.
    pub drain: Duration,
}

/// Why no unit can be written for these paths.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error(
        "{0:?} cannot go in a systemd unit (a newline, a control character, a quote, a backslash, \
         `%` or `$`): move it or give another path"
    )]
    Unquotable(String),
}

/// The unit for `spec`. `Type=notify` with a watchdog, restarted on
/// failure, and only the hardening that leaves bubblewrap working: no
/// `ProtectKernelTunables`/`ProtectProc`/`ProtectControlGroups` (they
/// over-mount `/proc` or `/sys`, and a user namespace may then not mount a
/// fresh `/proc`), no `RestrictNamespaces`, no `PrivateUsers`, no
/// `SystemCallFilter` (bwrap and the agent need `unshare`, `mount`, `clone`).
pub fn unit(spec: &UnitSpec) -> Result<String, UnitError> {
    let exe = quoted(&spec.exe)?;
    let config = match &spec.config {
        Some(path) => format!(" --config {}", quoted(path)?),
        None => String::new(),
    };
    let work_dir = quoted(&spec.work_dir)?;
    let writable = format!("{} {}", quoted(&spec.data_dir)?, quoted(&spec.groups_dir)?);
    let user = plain(&spec.user)?;
    Ok(format!(
        "# Written by `pincer service print`. Install:\n\
         #   pincer service print | sudo tee /etc/systemd/system/pincer.service\n\
         #   sudo systemctl daemon-reload && sudo systemctl enable --now pincer\n\
         [Unit]\n\
         Description=pincer: a Claude Code agent for each chat group\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=notify\n\
         NotifyAccess=main\n\
         ExecStart={exe}{config} run\n\
         ExecReload=/bin/kill -HUP $MAINPID\n\
         WorkingDirectory={work_dir}\n\
         User={user}\n\
         Restart=on-failure\n\
         RestartSec=5s\n\
         # pincer pings every {ping}; a main loop or store stuck for {watchdog} is restarted.\n\
         WatchdogSec={watchdog}\n\
         # A cluster node's drain, sessions get claude.shutdown_grace to finish, replies as long to drain, and a margin.\n\
         TimeoutStopSec={stop}\n\
         KillMode=mixed\n\
         NoNewPrivileges=yes\n\
         PrivateTmp=yes\n\
         ProtectSystem=full\n\
         ProtectHome=read-only\n\
         ReadWritePaths={writable}\n\
         RestrictSUIDSGID=yes\n\
         LockPersonality=yes\n\
         RestrictRealtime=yes\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        ping = humantime::format_duration(WATCHDOG / 2),
        watchdog = humantime::format_duration(WATCHDOG),
        stop = humantime::format_duration(Duration::from_secs(
            spec.drain.as_secs() + spec.shutdown_grace.as_secs() * 2 + 30
        )),
    ))
}

/// The `WatchdogSec` the unit asks for.
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// A path as one systemd word, double-quoted when it has a space. Refused
/// when it holds what systemd would expand or unquote (`%`, `$`, `\`, `"`,
/// `'`) or a control character: such a path could change the command.
fn quoted(path: &Path) -> Result<String, UnitError> {
    let text = path.to_str().ok_or_else(|| UnitError::Unquotable(path.display().to_string()))?;
    if text.is_empty() || text.chars().any(|c| c.is_control() || matches!(c, '%' | '$' | '\\' | '"' | '\'')) {
        return Err(UnitError::Unquotable(text.to_owned()));
    }
    Ok(if text.contains(' ') { format!("\"{text}\"") } else { text.to_owned() })
}

/// A user name: letters, digits, `_`, `-`, `.` only.
fn plain(word: &str) -> Result<String, UnitError> {
    let ok = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(word.to_owned())
    } else {
        Err(UnitError::Unquotable(word.to_owned()))
    }
}

/// What `pincer run` tells systemd.
#[derive(Clone, Copy, Debug)]
pub struct Notifier {
    /// How often to ping: half the watchdog interval systemd set, if any.
    ping_every: Option<Duration>,
}

impl Notifier {
    /// From the environment systemd sets (`NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    pub fn from_env() -> Notifier {
        Notifier { ping_every: sd_notify::watchdog_enabled().map(|d| d / 2) }
    }

    /// How often the main loop must ping, when systemd watches it.
    pub fn ping_every(&self) -> Option<Duration> {
        self.ping_every
    }

    /// pincer serves: its chats are connected or connecting, sessions can start.
    pub fn ready(&self) {
        send(&[NotifyState::Ready, NotifyState::Status("serving")]);
    }

    /// The main loop and the store answered just now.
    pub fn alive(&self) {
        send(&[NotifyState::Watchdog]);
    }

    pub fn stopping(&self) {
        send(&[NotifyState::Stopping, NotifyState::Status("stopping: sessions finish, replies drain")]);
    }
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(%e, "cannot tell systemd how pincer is (NOTIFY_SOCKET)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> UnitSpec {
        UnitSpec {
            exe: "/opt/pincer/bin/pincer".into(),
            config: Some("/etc/pincer/pincer.toml".into()),
            work_dir: "/srv/pincer".into(),
            data_dir: "/srv/pincer/data".into(),
            groups_dir: "/srv/pincer/my groups".into(),
            user: "pincer".into(),
            shutdown_grace: Duration::from_secs(5),
            drain: Duration::ZERO,
        }
    }

    #[test]
    fn the_unit_runs_this_install_as_a_notify_service_with_a_watchdog() {
        let unit = unit(&spec()).unwrap();
        assert!(unit.contains("\nExecStart=/opt/pincer/bin/pincer --config /etc/pincer/pincer.toml run\n"), "{unit}");
        assert!(unit.contains("\nType=notify\n") && unit.contains("\nWatchdogSec=1m\n"), "{unit}");
        assert!(unit.contains("\nReadWritePaths=/srv/pincer/data \"/srv/pincer/my groups\"\n"), "{unit}");
        assert!(unit.contains("\nUser=pincer\n") && unit.contains("\nRestart=on-failure\n"), "{unit}");
        assert!(unit.contains("\nTimeoutStopSec=40s\n"), "two graces and a margin: {unit}");
        let node = super::unit(&UnitSpec { drain: Duration::from_secs(130), ..spec() }).unwrap();
        assert!(node.contains("\nTimeoutStopSec=2m 50s\n"), "a cluster node's drain first: {node}");
        assert!(unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"), "`systemctl reload` sends SIGHUP: {unit}");
        for breaks_bwrap in ["ProtectKernelTunables", "RestrictNamespaces", "PrivateUsers", "SystemCallFilter"] {
            assert!(!unit.contains(breaks_bwrap), "{breaks_bwrap} would break the sandbox");
        }
    }

    #[test]
    fn a_path_systemd_would_expand_or_split_is_refused() {
        for bad in ["/srv/a%n", "/srv/$HOME", "/srv/a\nExecStartPre=/bin/sh", "/srv/\"x", "/srv/a\\b"] {
            let mut s = spec();
            s.data_dir = bad.into();
            assert!(matches!(unit(&s), Err(UnitError::Unquotable(_))), "{bad:?}");
        }
        let mut s = spec();
        s.user = "root\nGroup=0".into();
        assert!(unit(&s).is_err());
    }
}
