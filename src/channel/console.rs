//! The console channel behind `pincer chat`: each input line is an inbound
//! message, and every reply is printed when it arrives, including replies that
//! background work produces later by itself. Replies come from the outbox
//! like any chat's (the group's console address), and are marked delivered
//! once printed; replies that waited for the console (a group without a
//! chat, served by `pincer run`) are printed first. Whatever the group says
//! to its own chat meanwhile (a terminal attached to `pincer run`) is printed
//! too, as a copy: the chat still gets it.
//!
//! When input ends (a pipe, or Ctrl-D) the chat keeps printing until the
//! session has nothing in flight, up to a wait limit, so
//! `printf 'hi\n' | pincer chat NAME` prints the answer and exits.

use std::time::Duration;

pub mod status;
pub mod term;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ApprovalAsk, Ports};
use crate::domain::{ChatAddress, GroupName, Inbound, OutboundKind, Source};
use crate::store::{OutboxId, OutboxRow};

/// How often a chat whose input ended looks again for messages still being
/// prepared (their session is woken when they are ready; this is the net).
const UNTAKEN_LOOK: Duration = Duration::from_millis(100);

/// How a console chat is run.
#[derive(Clone, Debug)]
pub struct ConsoleOptions {
    pub group: GroupName,
    /// Who the messages are from, as stored.
    pub sender: String,
    /// After input ends, how long to wait for replies and background work.
    pub wait_limit: Duration,
    /// The session belongs to a running daemon (a terminal attached to
    /// `pincer run`), so it goes on after the chat ends.
    pub attached: bool,
    /// Files to send with the first line typed (`--attach`), absolute paths
    /// on this host; with no line, they go alone when input ends.
    pub attach: Vec<std::path::PathBuf>,
}

/// How the chat ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ChatEnd {
    /// Input ended and the session had nothing left in flight.
    Done,
    /// Input ended, but work was still running when the wait limit passed.
    WaitLimit,
    /// Pincer is shutting down (Ctrl-C).
    Shutdown,
}

/// Runs a console chat with one group until input ends (and work settles) or
/// shutdown. `asks` are the approval requests of the group.
pub async fn chat<R, W>(
    ports: &Ports,
    mut asks: mpsc::Receiver<ApprovalAsk>,
    opts: &ConsoleOptions,
    input: R,
    mut output: W,
    shutdown: CancellationToken,
) -> anyhow::Result<ChatEnd>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = ports.router.session(&opts.group).await?;
    let progress = ports.progress_for(&ports.directory.group(&opts.group).await?);
    let (status, mut status_lines) = status::ConsoleStatus::new();
    let status = std::sync::Arc::new(status);
    // The chat's status lines end with it, however it ends.
    let showing = scopeguard::guard(super::progress::Progress::default(), |p| p.stop_all());
    let here = ChatAddress::console(&opts.group);
    let mut written = ports.outbox.subscribe();
    let mut printer = Printer::new(ports, &opts.group).await?;
    printer.print_new(ports, &mut output).await?;
    let mut lines = input.lines();
    let mut give_up_at: Option<tokio::time::Instant> = None;
    let mut attach = opts.attach.clone();
    // Messages with files are prepared before the session sees them.
    let mut preparing = false;
    loop {
        if give_up_at.is_some() && !session.busy() {
            // Messages a held group does not take yet (its budget, a CLI that
            // cannot start) wait after the chat ends: it was told why.
            preparing = session.status().held.is_none() && ports.router.untaken(&opts.group).await?;
            if !preparing {
                // Replies are stored before the status says "idle": take the last ones.
                printer.print_new(ports, &mut output).await?;
                return Ok(ChatEnd::Done);
            }
        }
        let deadline = async {
            match give_up_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(ChatEnd::Shutdown),
            _ = written.changed() => {
                crate::metrics::hop("console_woken");
                printer.print_new(ports, &mut output).await?;
            }
            Some(line) = status_lines.recv() => {
                output.write_all(line.as_bytes()).await?;
                output.flush().await?;
            }
            Some(ask) = asks.recv() => {
                // The console has no admins: say what was asked, and deny it.
                let note = format!(
                    "[pincer] the agent asked to use {} ({}); tools that need an admin's approval are answered \
                     only in the group's chat, so it was denied\n",
                    ask.request.tool_name, ask.request.summary
                );
                output.write_all(note.as_bytes()).await?;
                drop(ask);
            }
            line = lines.next_line(), if give_up_at.is_none() => match line {
                Ok(Some(text)) if text.trim().is_empty() => {}
                Ok(Some(text)) => {
                    crate::metrics::hop("console_read");
                    let mut inbound = Inbound::new(opts.group.clone(), Source::Console, &opts.sender, text);
                    inbound.media = attached(std::mem::take(&mut attach), &mut output).await?;
                    ports.router.send(inbound).await?;
                    let (activity, settings) = (session.activity(), progress.clone());
                    showing.follow(&opts.group, activity, status.clone(), here.clone(), settings, status::Unrecorded);
                }
                Ok(None) | Err(_) => {
                    if !attach.is_empty() {
                        // Files and no words: they go on their own.
                        let mut inbound = Inbound::new(opts.group.clone(), Source::Console, &opts.sender, "");
                        inbound.media = attached(std::mem::take(&mut attach), &mut output).await?;
                        ports.router.send(inbound).await?;
                    }
                    give_up_at = Some(tokio::time::Instant::now() + opts.wait_limit);
                }
            },
            _ = session.changed(), if give_up_at.is_some() => {}
            // A prepared message wakes the session, but not always before it is looked for.
            _ = tokio::time::sleep(UNTAKEN_LOOK), if preparing => {}
            _ = deadline => {
                let fate = if opts.attached { "goes on in the running pincer" } else { "is stopped now" };
                let note = format!(
                    "[pincer] stopped waiting after {}; background work was still running and {fate} \
                     (raise console.wait_limit or pass --wait to wait longer)\n",
                    humantime::format_duration(opts.wait_limit)
                );
                output.write_all(note.as_bytes()).await?;
                output.flush().await?;
                return Ok(ChatEnd::WaitLimit);
            }
        }
    }
}

/// The attachments of the files named with `--attach`; a file that cannot
/// be read any more is said on the terminal and left out.
async fn attached<W: AsyncWrite + Unpin>(
    files: Vec<std::path::PathBuf>,
    output: &mut W,
) -> anyhow::Result<Vec<crate::domain::media::Attachment>> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let read = tokio::task::spawn_blocking(move || {
        files
            .iter()
            .take(crate::domain::media::MAX_ATTACHMENTS)
            .map(|f| crate::media::local::attachment(f))
            .collect::<Vec<_>>()
    });
    let mut media = Vec::new();
    for result in read.await.unwrap_or_default() {
        match result {
            Ok(attachment) => media.push(attachment),
            Err(why) => output.write_all(format!("[pincer] {why}\n").as_bytes()).await?,
        }
    }
    Ok(media)
}

/// What the chat has printed so far.
struct Printer {
    group: GroupName,
    /// The group's console address: rows for it are the terminal's to deliver.
    here: ChatAddress,
    /// The newest row looked at; rows for the group's chat after it are copied.
    seen: OutboxId,
}

impl Printer {
    async fn new(ports: &Ports, group: &GroupName) -> anyhow::Result<Printer> {
        let seen = ports.outbox.last_id().await?;
        Ok(Printer { group: group.clone(), here: ChatAddress::console(group), seen })
    }

    /// Prints every reply waiting for the console, oldest first, marking each
    /// delivered; then a copy of what the group said to its chat since.
    async fn print_new<W: AsyncWrite + Unpin>(&mut self, ports: &Ports, output: &mut W) -> anyhow::Result<()> {
        while let Some(row) = ports.outbox.next(&self.here).await? {
            print(output, &row).await?;
            // Console rows never follow a binding; a mark that finds the row
            // settled means another terminal printed it too, nothing to undo.
            if ports.outbox.delivered(&row.seen(), 1).await? == crate::store::Marked::Recorded {
                super::delivery::let_go(&row);
            }
        }
        loop {
            let rows = ports.outbox.rows_after(&self.group, self.seen).await?;
            let Some(last) = rows.last() else { return Ok(()) };
            self.seen = last.id;
            for row in rows.iter().filter(|row| row.to != self.here) {
                print(output, row).await?;
            }
        }
    }
}

async fn print<W: AsyncWrite + Unpin>(output: &mut W, row: &OutboxRow) -> anyhow::Result<()> {
    let text = match (row.kind, &row.file) {
        // The terminal shows what was sent, not the file (its copy goes once printed).
        (_, Some(file)) => {
            let caption = if row.text.is_empty() { String::new() } else { format!(" {}", row.text) };
            let size = crate::domain::media::human_bytes(file.bytes);
            // The agent named the path: one line, no control characters, on a terminal.
            let from = crate::domain::one_line(&file.from, 200);
            format!("[{} \"{}\", {size}, {from} in the group's folder]{caption}\n", file.kind.as_str(), file.name)
        }
        (OutboundKind::Reply | OutboundKind::Answer, None) => format!("{}\n", row.text),
        (OutboundKind::Error, None) => format!("[error] {}\n", row.text),
        (OutboundKind::Notice, None) => format!("[pincer] {}\n", row.text),
    };
    output.write_all(text.as_bytes()).await?;
    output.flush().await?;
    crate::metrics::hop("console_printed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::media::{FileKind, OutboundFile};
    use crate::store::DeliveryState;

    #[tokio::test]
    async fn a_sent_file_is_printed_with_where_it_is_in_the_folder_and_no_control_characters() {
        let file = OutboundFile {
            path: "/data/outgoing/team/1-chart.png".into(),
            name: "chart.png".into(),
            kind: FileKind::Photo,
            bytes: 2048,
            from: "out/\u{1b}[2Jchart.png".into(),
        };
        let row = OutboxRow {
            id: OutboxId(1),
            group: "team".parse().unwrap(),
            at_us: 0,
            kind: OutboundKind::Reply,
            text: "the chart".into(),
            to: ChatAddress::console(&"team".parse().unwrap()),
            state: DeliveryState::Queued,
            parts_done: 0,
            attempts: 0,
            last_error: None,
            file: Some(file),
        };
        let mut out = Vec::new();
        print(&mut out, &row).await.unwrap();
        let printed = String::from_utf8(out).unwrap();
        assert_eq!(printed, "[photo \"chart.png\", 2.0 KB, out/ [2Jchart.png in the group's folder] the chart\n");
    }
}
