//! `pincer chat`'s stdin and stdout. Tokio's `stdin()` and `stdout()` do
//! every read and write on a blocking-pool thread, a hand-off each way that
//! cost a follow-up about 0.3 ms at the median and over 1 ms at the p95 on a
//! busy 2-core machine (`benches/chat.rs`). When they are pipes (a script,
//! `printf 'hi\n' | pincer chat NAME`) they are read and written on the
//! runtime instead; a terminal or a file keeps tokio's way.
//!
//! A pipe read this way is switched to non-blocking mode, which its other
//! holders share (it belongs to the open pipe, not to the descriptor): one
//! that reads or writes it after pincer must expect `EAGAIN`. A pipe made for
//! `pincer chat` alone (`a | pincer chat` or `pincer chat | b`) has none, and
//! [`Restore`] puts the mode back when the chat ends, for what comes after
//! pincer in a shell's pipeline (`(pincer chat x; echo done) | less`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// The chat's input: stdin.
pub fn input() -> Box<dyn AsyncRead + Send + Unpin> {
    match reader(std::io::stdin().as_fd()) {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    }
}

/// The chat's output: stdout.
pub fn output() -> Box<dyn AsyncWrite + Send + Unpin> {
    match writer(std::io::stdout().as_fd()) {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
    }
}

/// Puts stdin's and stdout's blocking mode back as it was when made.
pub struct Restore {
    stdin_blocking: bool,
    stdout_blocking: bool,
}

impl Restore {
    /// Notes the mode of stdin and stdout now; dropping it restores them.
    pub fn new() -> Restore {
        Restore {
            stdin_blocking: !non_blocking(std::io::stdin().as_fd()),
            stdout_blocking: !non_blocking(std::io::stdout().as_fd()),
        }
    }
}

impl Default for Restore {
    fn default() -> Restore {
        Restore::new()
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if self.stdin_blocking {
            set_blocking(std::io::stdin().as_fd());
        }
        if self.stdout_blocking {
            set_blocking(std::io::stdout().as_fd());
        }
    }
}

fn non_blocking(fd: BorrowedFd<'_>) -> bool {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)
        .is_ok_and(|flags| OFlag::from_bits_truncate(flags).contains(OFlag::O_NONBLOCK))
}

fn set_blocking(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    if let Ok(flags) = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
        // Best effort: the chat is over either way.
        let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags));
    }
}

/// `fd` read on the runtime, if it is the reading end of a pipe.
fn reader(fd: BorrowedFd<'_>) -> Option<pipe::Receiver> {
    // A copy of the descriptor: the pipe is closed with it, stdin stays open.
    pipe::Receiver::from_owned_fd(fd.try_clone_to_owned().ok()?).ok()
}

/// `fd` written on the runtime, if it is the writing end of a pipe.
fn writer(fd: BorrowedFd<'_>) -> Option<pipe::Sender> {
    pipe::Sender::from_owned_fd(fd.try_clone_to_owned().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn pipes_are_read_and_written_on_the_runtime() {
        let (read_end, write_end) = std::io::pipe().unwrap();
        let mut out = writer(write_end.as_fd()).expect("the writing end of a pipe");
        let input = reader(read_end.as_fd()).expect("the reading end of a pipe");
        drop(write_end);
        out.write_all(b"hello\n").await.unwrap();
        drop(out);
        let mut lines = BufReader::new(input).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("hello"));
        assert_eq!(lines.next_line().await.unwrap(), None, "the end of input is seen");
    }

    #[tokio::test]
    async fn a_pipe_gets_its_blocking_mode_back() {
        let (read_end, _write_end) = std::io::pipe().unwrap();
        assert!(!non_blocking(read_end.as_fd()));
        let input = reader(read_end.as_fd()).expect("the reading end of a pipe");
        assert!(non_blocking(read_end.as_fd()), "shared by every holder of the pipe");
        drop(input);
        set_blocking(read_end.as_fd());
        assert!(!non_blocking(read_end.as_fd()));
    }

    #[tokio::test]
    async fn anything_else_keeps_tokios_way() {
        let file = tempfile::tempfile().unwrap();
        assert!(reader(file.as_fd()).is_none(), "a file is no pipe");
        assert!(writer(file.as_fd()).is_none(), "a file is no pipe");
        let (read_end, write_end) = std::io::pipe().unwrap();
        assert!(reader(write_end.as_fd()).is_none(), "the wrong end");
        assert!(writer(read_end.as_fd()).is_none(), "the wrong end");
    }
}
