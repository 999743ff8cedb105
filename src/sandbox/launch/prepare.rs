//! The file work of a confined CLI start, off the runtime's threads.
//!
//! Every start of a sandboxed CLI reads and writes files: the group's home
//! is created, bwrap's account files are written, the CLI's real path is
//! resolved, the seccomp programs are put in sealed memory files, and each
//! extra mount is reopened and checked. Done on a runtime thread, a slow disk
//! (or a FIFO where a file should be) would stall every chat that thread
//! serves; so [`Prepare::run`] runs on tokio's blocking pool, with everything
//! it needs owned, and hands back what the spec is built from.

use std::path::{Path, PathBuf};

use super::SandboxError;
use crate::claude::process::PassFd;
use crate::domain::GroupName;
use crate::sandbox::mounts::{self, Mount};
use crate::sandbox::seccomp::Filter;
use crate::sandbox::{bwrap, confine};

/// What a confined start needs from the disk, owned so it can move to another thread.
pub(super) struct Prepare {
    pub group: GroupName,
    /// An isolated run's own home; `None`: the group's home, created if missing.
    pub own_home: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// `groups/global`, which the group reads (and the main group writes).
    pub global_host: PathBuf,
    /// The group's extra mounts, each reopened and checked before the start.
    pub extra: Vec<Mount>,
    /// pincer's binary, which every sandbox binds (it must be there).
    pub pincer: PathBuf,
    /// What only bwrap needs; `None` for docker.
    pub bwrap: Option<ForBwrap>,
}

/// The bwrap part of a [`Prepare`].
pub(super) struct ForBwrap {
    /// The CLI as configured (maybe a symlink such as `.bin/claude`).
    pub program: PathBuf,
    /// pincer's filter, when `sandbox.seccomp` is on (and it can be applied here).
    pub seccomp: Option<Filter>,
    /// This bwrap binds the extra mounts by descriptor.
    pub by_fd: bool,
}

/// What [`Prepare::run`] found and made.
pub(super) struct Prepared {
    /// `groups/global/CLAUDE.md` exists.
    pub has_global: bool,
    /// `groups/global` is a folder (bound into the sandbox).
    pub global_dir: bool,
    pub home: PathBuf,
    pub extra: Vec<bwrap::Extra>,
    /// The wrapper's static binary (`confine::wrapper`), bound as the CLI's shell and git.
    pub wrapper: PathBuf,
    /// Set for bwrap.
    pub bwrap: Option<BwrapFiles>,
}

/// The bwrap part of [`Prepared`].
pub(super) struct BwrapFiles {
    pub etc_dir: PathBuf,
    /// The CLI's installation folder and its file there, symlinks resolved.
    pub cli_dir: PathBuf,
    pub file: String,
    pub seccomp: Vec<PassFd>,
}

impl Prepare {
    /// Does the file work on the blocking pool.
    pub async fn run_blocking(self) -> Result<Prepared, SandboxError> {
        let group = self.group.clone();
        tokio::task::spawn_blocking(move || self.run()).await.unwrap_or_else(|e| {
            Err(SandboxError::Io { group: group.to_string(), source: std::io::Error::other(e.to_string()) })
        })
    }

    /// Does the file work on this thread.
    pub fn run(self) -> Result<Prepared, SandboxError> {
        let io = SandboxError::io(&self.group);
        // Every sandbox binds it (git runs pinned through it): no start without it.
        if !self.pincer.is_file() {
            return Err(SandboxError::NoPincer { group: self.group.to_string(), path: self.pincer });
        }
        // Written again if it went missing, as the pincer binary it came with has it.
        let wrapper = confine::wrapper::install(&self.data_dir.join("run"))
            .map_err(|e| io(std::io::Error::new(e.source.kind(), e.to_string())))?;
        let has_global = self.global_host.join("CLAUDE.md").exists();
        let global_dir = self.global_host.is_dir();
        let home = match self.own_home {
            Some(home) => home,
            None => {
                let home = self.data_dir.join("homes").join(self.group.as_str());
                crate::private::create_dir(&home).map_err(io)?;
                home
            }
        };
        let Some(b) = self.bwrap else {
            // Docker takes paths only: checked right before, and resolved again by the engine.
            for mount in &self.extra {
                mounts::reopen(mount)?;
            }
            let extra = self.extra.into_iter().map(|mount| bwrap::Extra { mount, fd: None }).collect();
            return Ok(Prepared { has_global, global_dir, home, extra, wrapper, bwrap: None });
        };
        let etc_dir = self.data_dir.join("sandbox/etc");
        bwrap::write_account_files(&etc_dir).map_err(io)?;
        let (cli_dir, file) = installation(&b.program).map_err(io)?;
        let seccomp = match &b.seccomp {
            Some(filter) => filter.descriptors().map_err(io)?,
            None => Vec::new(),
        };
        let extra = pinned(self.extra, b.by_fd).map_err(|e| match e {
            Pin::Mount(e) => SandboxError::Mounts(e),
            Pin::Io(e) => io(e),
        })?;
        let files = BwrapFiles { etc_dir, cli_dir, file, seccomp };
        Ok(Prepared { has_global, global_dir, home, extra, wrapper, bwrap: Some(files) })
    }
}

/// The installation's folder and the CLI's file in it, found through symlinks (`.bin/claude`).
fn installation(program: &Path) -> std::io::Result<(PathBuf, String)> {
    let real = std::fs::canonicalize(program)?;
    match (real.parent(), real.file_name()) {
        (Some(dir), Some(file)) => Ok((dir.to_owned(), file.to_string_lossy().into_owned())),
        _ => Err(std::io::Error::other(format!("odd CLI path {}", real.display()))),
    }
}

/// Why a mount could not be pinned.
enum Pin {
    Mount(mounts::MountError),
    Io(std::io::Error),
}

/// The group's allowlisted mounts, each reopened as loaded (or refused),
/// with its descriptor when this bwrap binds by descriptor.
fn pinned(extra: Vec<Mount>, by_fd: bool) -> Result<Vec<bwrap::Extra>, Pin> {
    extra
        .into_iter()
        .map(|mount| {
            let folder = mounts::reopen(&mount).map_err(Pin::Mount)?;
            let fd = by_fd.then(|| PassFd::new(folder)).transpose().map_err(Pin::Io)?;
            Ok(bwrap::Extra { mount, fd })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A start whose disk is slow: bwrap's `passwd` is a FIFO, so writing it
    /// waits until someone opens the other end. The runtime has one thread,
    /// and the task that opens the other end runs on it: the start finishes
    /// only if its file work left that thread free. (A watchdog thread opens
    /// the FIFO after a while, so a start that blocks the thread fails the
    /// test instead of hanging it.)
    #[tokio::test(flavor = "current_thread")]
    async fn the_file_work_of_a_start_leaves_the_runtime_thread_free() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("sandbox/etc");
        std::fs::create_dir_all(&etc).unwrap();
        let fifo = etc.join("passwd");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let program = dir.path().join("claude");
        std::fs::write(&program, "").unwrap();
        let pincer = dir.path().join("pincer");
        std::fs::write(&pincer, "").unwrap();

        let (by_runtime, by_watchdog) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let watchdog = watchdog(fifo.clone(), by_runtime.clone(), by_watchdog.clone(), finished);
        let reader = tokio::spawn({
            let (fifo, by_runtime) = (fifo.clone(), by_runtime.clone());
            async move {
                let end = tokio::net::unix::pipe::OpenOptions::new().open_receiver(&fifo).unwrap();
                by_runtime.store(true, Ordering::SeqCst);
                end
            }
        });
        let prepare = Prepare {
            group: "team".parse().unwrap(),
            own_home: None,
            data_dir: dir.path().to_owned(),
            global_host: dir.path().join("groups/global"),
            extra: Vec::new(),
            pincer,
            bwrap: Some(ForBwrap { program, seccomp: None, by_fd: false }),
        };
        let ready = prepare.run_blocking().await.unwrap();
        let _ = done.send(());
        assert!(!by_watchdog.load(Ordering::SeqCst), "the start held the runtime's only thread");
        let files = ready.bwrap.unwrap();
        assert_eq!(files.file, "claude");
        assert!(ready.home.ends_with("homes/team") && ready.home.is_dir());
        drop(reader.await.unwrap());
        watchdog.join().unwrap();
    }

    /// Opens the FIFO's other end after 10 s unless the runtime did or the
    /// test finished, so a blocked start fails the test rather than hanging it.
    fn watchdog(
        fifo: PathBuf,
        by_runtime: Arc<AtomicBool>,
        by_watchdog: Arc<AtomicBool>,
        finished: std::sync::mpsc::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let timed_out = finished.recv_timeout(Duration::from_secs(10)).is_err();
            if timed_out && !by_runtime.load(Ordering::SeqCst) {
                by_watchdog.store(true, Ordering::SeqCst);
                if let Ok(mut reader) = std::fs::File::open(&fifo) {
                    let _ = std::io::copy(&mut reader, &mut std::io::sink());
                }
            }
        })
    }

    #[test]
    fn a_sandbox_without_pincers_binary_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let prepare = |bwrap| Prepare {
            group: "team".parse().unwrap(),
            own_home: None,
            data_dir: dir.path().to_owned(),
            global_host: dir.path().join("groups/global"),
            extra: Vec::new(),
            pincer: dir.path().join("gone/pincer"),
            bwrap,
        };
        let for_bwrap = ForBwrap { program: dir.path().join("claude"), seccomp: None, by_fd: false };
        for p in [prepare(Some(for_bwrap)), prepare(None)] {
            let err = p.run().err().expect("refused");
            assert!(matches!(&err, SandboxError::NoPincer { group, .. } if group == "team"), "{err}");
            let text = err.to_string();
            assert!(text.contains("gone/pincer") && text.contains("sandbox.pincer_binary"), "{text}");
        }
    }
}
