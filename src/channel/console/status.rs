//! The console's [`StatusPort`]: `pincer chat` prints each status post or
//! edit as one line (`[status] Working… 12 s · 3 steps · Running `cargo
//! test``), and the summary when the group wants one; a deletion prints
//! nothing, since the answer printed next says it all. The lines go to a
//! bounded channel that the chat loop writes out between replies, so status
//! lines and replies never interleave mid-line; a terminal that stops
//! reading loses status lines (each is overtaken by the next), never memory.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::channel::progress::{StatusError, StatusPort, StatusRecords};
use crate::domain::{ChatAddress, Platform};
use crate::store::{StatusRecord, StoreError};

/// Status lines waiting for the terminal: at one edit a second, half a
/// minute of a terminal that does not read.
const WAITING_LINES: usize = 32;

/// Status messages as terminal lines.
pub struct ConsoleStatus {
    lines: mpsc::Sender<String>,
    next_id: AtomicU64,
}

impl ConsoleStatus {
    /// The port, and the lines it prints (each ends with a newline).
    pub fn new() -> (ConsoleStatus, mpsc::Receiver<String>) {
        let (lines, rx) = mpsc::channel(WAITING_LINES);
        (ConsoleStatus { lines, next_id: AtomicU64::new(1) }, rx)
    }

    fn print(&self, text: &str) -> Result<(), StatusError> {
        match self.lines.try_send(line(text)) {
            // A status line says where the turn is now; the next one says it again.
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(StatusError::Failed("the chat has ended".to_owned())),
        }
    }
}

/// A status text as one line: its lines joined.
fn line(text: &str) -> String {
    let parts: Vec<&str> = text.lines().collect();
    format!("[status] {}\n", parts.join(" · "))
}

impl StatusPort for ConsoleStatus {
    async fn post(&self, _: &ChatAddress, text: &str, _stop: bool) -> Result<String, StatusError> {
        self.print(text)?;
        Ok(self.next_id.fetch_add(1, Ordering::Relaxed).to_string())
    }

    async fn edit(&self, _: &ChatAddress, _: &str, text: &str, _stop: bool) -> Result<(), StatusError> {
        self.print(text)
    }

    async fn delete(&self, _: &ChatAddress, _: &str) -> Result<(), StatusError> {
        Ok(())
    }

    async fn react(&self, _: &ChatAddress, _: &str, _: &str) -> Result<(), StatusError> {
        Ok(())
    }
}

/// A terminal's status lines are not kept: once printed they cannot be
/// changed, so a stopped pincer leaves nothing saying "working" to clean up.
pub struct Unrecorded;

impl StatusRecords for Unrecorded {
    async fn remember(&self, _: &StatusRecord) -> Result<(), StoreError> {
        Ok(())
    }
    async fn forget(&self, _: &ChatAddress, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
    async fn remembered(&self, _: Platform) -> Result<Vec<StatusRecord>, StoreError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GroupName;

    #[tokio::test]
    async fn posts_and_edits_print_one_line_each_and_a_deletion_nothing() {
        let (port, mut lines) = ConsoleStatus::new();
        let here = ChatAddress::console(&"team".parse::<GroupName>().unwrap());
        let text = "Working… 12 s · 3 steps\nRunning `cargo test`";
        let id = port.post(&here, text, true).await.unwrap();
        port.edit(&here, &id, "Done in 2 m 14 s · 12 steps · $0.31", false).await.unwrap();
        port.delete(&here, &id).await.unwrap();
        drop(port);
        assert_eq!(lines.recv().await.unwrap(), "[status] Working… 12 s · 3 steps · Running `cargo test`\n");
        assert_eq!(lines.recv().await.unwrap(), "[status] Done in 2 m 14 s · 12 steps · $0.31\n");
        assert_eq!(lines.recv().await, None, "nothing for the deletion");
    }

    #[tokio::test]
    async fn a_terminal_that_does_not_read_loses_status_lines_not_memory_and_the_calls_go_on() {
        let (port, mut lines) = ConsoleStatus::new();
        let here = ChatAddress::console(&"team".parse::<GroupName>().unwrap());
        for second in 0..WAITING_LINES + 10 {
            port.edit(&here, "1", &format!("Working… {second} s"), true).await.unwrap();
        }
        drop(port);
        let mut kept = Vec::new();
        while let Some(line) = lines.recv().await {
            kept.push(line);
        }
        assert_eq!(kept.len(), WAITING_LINES, "the oldest kept, the rest dropped");
        assert_eq!(kept[0], "[status] Working… 0 s\n");
    }

    #[tokio::test]
    async fn a_chat_that_ended_fails_the_call_instead_of_losing_it_quietly() {
        let (port, lines) = ConsoleStatus::new();
        drop(lines);
        let here = ChatAddress::console(&"team".parse::<GroupName>().unwrap());
        assert!(matches!(port.post(&here, "Working… 5 s", true).await, Err(StatusError::Failed(_))));
    }
}
