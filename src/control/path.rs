//! Where the control socket is: a file of the data directory.

use std::path::{Path, PathBuf};

/// The socket's file name, in the data directory.
const SOCKET_FILE: &str = "pincer.sock";

/// Where the daemon of `data_dir` listens.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_FILE)
}
