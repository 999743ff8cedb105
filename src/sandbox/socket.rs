//! The Unix sockets pincer serves to its sandboxes (the credential proxy's,
//! each group's egress proxy's), all in `data_dir/run`.
//!
//! The directory is owner-only (0700) and the sockets are open to every uid
//! (0666). A socket reaches a sandbox by a bind mount of the socket itself,
//! which needs no path through `run/`, and the agent's uid differs by mode:
//! bwrap maps it to pincer's user, while a Docker container runs as a uid of
//! its own (1000 when pincer is root), which a 0600 socket would refuse.
//! Other users of the host cannot get into `run/`.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// A fresh socket at `run/name` (`name` may hold a folder), replacing a
/// dead pincer's: the caller holds the data directory's lock, so no live
/// pincer serves it.
pub fn bind(run: &Path, name: &str) -> io::Result<UnixListener> {
    let path = run.join(name);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path.parent().unwrap_or(run))?;
    // Also a directory an earlier version made with the umask's mode.
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700))?;
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_folder_is_the_owners_and_a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let first = bind(&run, "egress/team.sock").unwrap();
        drop(first);
        let _again = bind(&run, "egress/team.sock").expect("a dead socket file is replaced");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&run), 0o700);
        assert_eq!(mode(&run.join("egress")), 0o700);
        assert_eq!(mode(&run.join("egress/team.sock")), 0o666);
    }
}
