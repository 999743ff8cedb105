//! One pincer per data directory: `pincer run` (and `pincer chat`, which runs
//! its own engine) holds an exclusive lock on `data_dir/pincer.lock` while it
//! lives, so two processes never serve the same chats or write one CLI
//! session at once. The lock is the kernel's (`flock`), so it is released
//! however the process ends, `kill -9` included; the file keeps the holder's
//! pid to say who holds it.
//!
//! A pincer killed while it starts a CLI leaves, for a moment, forks of
//! itself that share its lock until they exec (see `claude::guard`). So a
//! lock whose recorded holder is no longer alive is waited for, briefly,
//! instead of refused: a restart right after a `kill -9` must not fail.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::config::LOCK_FILE;
use crate::retry::{Backoff, RetryPolicy};

/// How long a lock whose holder has died may still be held by its last forks.
const DEAD_HOLDER_GRACE: Duration = Duration::from_secs(5);
/// How often such a lock is tried again: soon at first (a fork execs within
/// milliseconds), less often the longer it takes.
const RETRY: RetryPolicy = RetryPolicy::new(Duration::from_millis(20), Duration::from_millis(500));

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another pincer{} is already using the data directory {dir}: stop it first (only one pincer may serve \
         the same groups), or give this one another data_dir",
        holder.map_or_else(String::new, |pid| format!(" (pid {pid})"))
    )]
    Held { dir: PathBuf, holder: Option<u32> },
    #[error("cannot lock the data directory {dir}: {source}")]
    Io { dir: PathBuf, source: std::io::Error },
}

/// The data directory's lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DataLock {
    _file: Flock<File>,
}

impl DataLock {
    /// Takes the lock, or says who holds it: at once while the holder lives;
    /// after [`DEAD_HOLDER_GRACE`] when it has died (or wrote no pid). The
    /// wait sleeps on the runtime's timer, never on its thread: other tasks
    /// (a terminal, a signal handler) go on meanwhile.
    pub async fn acquire(data_dir: &Path) -> Result<DataLock, LockError> {
        let io = |source| LockError::Io { dir: data_dir.to_owned(), source };
        crate::private::create_dir(data_dir).map_err(io)?;
        let mut unlocked = OpenOptions::new()
            .mode(0o600)
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(data_dir.join(LOCK_FILE))
            .map_err(io)?;
        let deadline = tokio::time::Instant::now() + DEAD_HOLDER_GRACE;
        let mut backoff = Backoff::new(RETRY);
        let mut file = loop {
            match Flock::lock(unlocked, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => break locked,
                Err((mut held, Errno::EWOULDBLOCK)) => {
                    let holder = holder(&mut held);
                    if holder.is_some_and(is_alive) || tokio::time::Instant::now() >= deadline {
                        return Err(LockError::Held { dir: data_dir.to_owned(), holder });
                    }
                    tokio::time::sleep(backoff.failed(None)).await;
                    unlocked = held;
                }
                Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
            }
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataLock { _file: file })
    }
}

/// Whether process `pid` exists (one we may not signal exists too).
fn is_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    !matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

/// The pid the holder wrote, if it is readable.
fn holder(file: &mut File) -> Option<u32> {
    file.rewind().ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataLock::acquire(dir.path()).await.unwrap();
        let refused = DataLock::acquire(dir.path()).await.unwrap_err();
        let text = refused.to_string();
        assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        drop(first);
        DataLock::acquire(dir.path()).await.expect("free again once released");
    }

    /// What a killed pincer's fork holds until its exec: the lock, with a
    /// dead pid in the file.
    fn held_by_a_dead_pincers_fork(dir: &Path) -> Flock<File> {
        #[allow(clippy::disallowed_methods)] // a process that has ended, for its pid
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let dead = ended.id();
        ended.wait().unwrap();
        let path = dir.join(LOCK_FILE);
        std::fs::write(&path, dead.to_string()).unwrap();
        Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock).unwrap()
    }

    #[tokio::test]
    async fn a_lock_left_by_a_dead_holder_is_waited_for_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fork = held_by_a_dead_pincers_fork(dir.path());
        let exec = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(fork);
        });
        DataLock::acquire(dir.path()).await.expect("taken once the dead holder's fork lets go");
        exec.join().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waiting_for_a_dead_holder_leaves_the_runtime_thread_free() {
        let dir = tempfile::tempdir().unwrap();
        let fork = held_by_a_dead_pincers_fork(dir.path());
        // On the waiter's only thread: it lets go only if that thread runs it
        // while the lock is waited for (a blocking wait would end refused).
        let ticker = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(fork);
        });
        DataLock::acquire(dir.path()).await.expect("taken once the ticking task let go");
        ticker.await.unwrap();
    }
}
