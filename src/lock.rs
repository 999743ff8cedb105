//! One pincer per data directory: `pincer run` (and `pincer chat`, which runs
//! its own engine) holds an exclusive lock on `data_dir/pincer.lock` while it
//! lives, so two processes never serve the same chats or write one CLI
//! session at once. The lock is the kernel's (`flock`), so it is released
//! however the process ends, `kill -9` included; the file keeps the holder's
//! pid only to say who holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file, in the data directory.
const LOCK_FILE: &str = "pincer.lock";

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
    /// Takes the lock at once, or says who holds it.
    pub fn acquire(data_dir: &Path) -> Result<DataLock, LockError> {
        let io = |source| LockError::Io { dir: data_dir.to_owned(), source };
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(data_dir.join(LOCK_FILE))
            .map_err(io)?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                return Err(LockError::Held { dir: data_dir.to_owned(), holder: holder(&mut file) })
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataLock { _file: file })
    }
}

/// The pid the holder wrote, if it is readable.
fn holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataLock::acquire(dir.path()).unwrap();
        let refused = DataLock::acquire(dir.path()).unwrap_err();
        let text = refused.to_string();
        assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        drop(first);
        DataLock::acquire(dir.path()).expect("free again once released");
    }
}
