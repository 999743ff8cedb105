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

use std::sync::Arc;
use std::time::Duration;

pub mod status;
pub mod term;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ApprovalAsk, Ports};
use crate::domain::{ChatAddress, GroupName, Inbound, OutboundKind, Source};
use crate::session::SessionHandle;
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

/// Why a console chat stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(transparent)]
    Route(#[from] crate::router::RouteError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot write to the terminal: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs a console chat with one group until input ends (and work settles) or
/// shutdown. `asks` are the approval requests of the group.
pub async fn chat<R, W>(
    ports: &Ports,
    mut asks: mpsc::Receiver<ApprovalAsk>,
    opts: &ConsoleOptions,
    input: R,
    output: W,
    shutdown: CancellationToken,
) -> Result<ChatEnd, ConsoleError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = ports.router.session(&opts.group).await?;
    let (status, mut status_lines) = status::ConsoleStatus::new();
    let mut written = ports.outbox.subscribe();
    let mut chat = Chat::open(ports, opts, status, output).await?;
    chat.print_new().await?;
    let mut lines = input.lines();
    let mut give_up_at: Option<tokio::time::Instant> = None;
    // Messages with files are prepared before the session sees them.
    let mut preparing = false;
    loop {
        if give_up_at.is_some() && !session.busy() {
            preparing = chat.preparing(&session).await?;
            if !preparing {
                // Replies are stored before the status says "idle": take the last ones.
                chat.print_new().await?;
                return Ok(ChatEnd::Done);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(ChatEnd::Shutdown),
            _ = written.changed() => chat.woken().await?,
            Some(line) = status_lines.recv() => chat.show(&line).await?,
            Some(ask) = asks.recv() => chat.deny(ask).await?,
            line = lines.next_line(), if give_up_at.is_none() => match line {
                Ok(Some(text)) => chat.typed(&session, text).await?,
                Ok(None) | Err(_) => {
                    chat.input_ended().await?;
                    give_up_at = Some(tokio::time::Instant::now() + opts.wait_limit);
                }
            },
            _ = session.changed(), if give_up_at.is_some() => {}
            // A prepared message wakes the session, but not always before it is looked for.
            _ = tokio::time::sleep(UNTAKEN_LOOK), if preparing => {}
            _ = until(give_up_at) => return chat.gave_up().await,
        }
    }
}

/// Sleeps until `at`; forever when there is none.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A console chat while it runs: where it prints, and the status lines it shows.
struct Chat<'a, W> {
    ports: &'a Ports,
    opts: &'a ConsoleOptions,
    output: W,
    printer: Printer,
    /// The group's console address.
    here: ChatAddress,
    progress: super::progress::ProgressSettings,
    status: Arc<status::ConsoleStatus>,
    showing: super::progress::Progress,
    /// `--attach`'s files until they are sent.
    attach: Vec<std::path::PathBuf>,
}

impl<W> Drop for Chat<'_, W> {
    fn drop(&mut self) {
        // The chat's status lines end with it, however it ends.
        self.showing.stop_all();
    }
}

impl<'a, W: AsyncWrite + Unpin> Chat<'a, W> {
    async fn open(
        ports: &'a Ports,
        opts: &'a ConsoleOptions,
        status: status::ConsoleStatus,
        output: W,
    ) -> Result<Chat<'a, W>, ConsoleError> {
        let progress = ports.progress_for(&ports.directory.group(&opts.group).await?);
        Ok(Chat {
            ports,
            opts,
            output,
            printer: Printer::new(ports, &opts.group).await?,
            here: ChatAddress::console(&opts.group),
            progress,
            status: Arc::new(status),
            showing: super::progress::Progress::default(),
            attach: opts.attach.clone(),
        })
    }

    async fn print_new(&mut self) -> Result<(), ConsoleError> {
        self.printer.print_new(self.ports, &mut self.output).await
    }

    /// Something was written to the outbox.
    async fn woken(&mut self) -> Result<(), ConsoleError> {
        crate::metrics::hop("console_woken");
        self.print_new().await
    }

    /// Input ended and the session is idle: whether messages of the group
    /// are still being prepared. Those a held group does not take yet (its
    /// budget, a CLI that cannot start) wait after the chat ends: it was told why.
    async fn preparing(&self, session: &SessionHandle) -> Result<bool, ConsoleError> {
        Ok(session.status().held.is_none() && self.ports.router.untaken(&self.opts.group).await?)
    }

    /// A status line, shown at once.
    async fn show(&mut self, line: &str) -> Result<(), ConsoleError> {
        self.output.write_all(line.as_bytes()).await?;
        Ok(self.output.flush().await?)
    }

    /// The console has no admins: says what was asked, and denies it (by
    /// dropping the ask).
    async fn deny(&mut self, ask: ApprovalAsk) -> Result<(), ConsoleError> {
        let note = format!(
            "[pincer] the agent asked to use {} ({}); tools that need an admin's approval are answered only in \
             the group's chat, so it was denied\n",
            ask.request.tool_name, ask.request.summary
        );
        Ok(self.output.write_all(note.as_bytes()).await?)
    }

    /// A line typed: sent to the group (with `--attach`'s files, the first
    /// time), and its turn's status shown.
    async fn typed(&mut self, session: &SessionHandle, text: String) -> Result<(), ConsoleError> {
        if text.trim().is_empty() {
            return Ok(());
        }
        crate::metrics::hop("console_read");
        self.send(text).await?;
        let (activity, settings) = (session.activity(), self.progress.clone());
        let (group, status, here) = (&self.opts.group, self.status.clone(), self.here.clone());
        self.showing.follow(group, activity, status, here, settings, status::Unrecorded);
        Ok(())
    }

    /// Input ended: files and no words go on their own.
    async fn input_ended(&mut self) -> Result<(), ConsoleError> {
        if !self.attach.is_empty() {
            self.send(String::new()).await?;
        }
        Ok(())
    }

    async fn send(&mut self, text: String) -> Result<(), ConsoleError> {
        let opts = self.opts;
        let mut inbound = Inbound::new(opts.group.clone(), Source::Console, &opts.sender, text);
        inbound.media = attached(std::mem::take(&mut self.attach), &mut self.output).await?;
        self.ports.router.send(inbound).await?;
        Ok(())
    }

    /// The wait limit passed with work still running.
    async fn gave_up(&mut self) -> Result<ChatEnd, ConsoleError> {
        let fate = if self.opts.attached { "goes on in the running pincer" } else { "is stopped now" };
        let note = format!(
            "[pincer] stopped waiting after {}; background work was still running and {fate} (raise \
             console.wait_limit or pass --wait to wait longer)\n",
            humantime::format_duration(self.opts.wait_limit)
        );
        self.show(&note).await?;
        Ok(ChatEnd::WaitLimit)
    }
}

/// The attachments of the files named with `--attach`; a file that cannot
/// be read any more is said on the terminal and left out.
async fn attached<W: AsyncWrite + Unpin>(
    files: Vec<std::path::PathBuf>,
    output: &mut W,
) -> Result<Vec<crate::domain::media::Attachment>, ConsoleError> {
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
    async fn new(ports: &Ports, group: &GroupName) -> Result<Printer, ConsoleError> {
        let seen = ports.outbox.last_id().await?;
        Ok(Printer { group: group.clone(), here: ChatAddress::console(group), seen })
    }

    /// Prints every reply waiting for the console, oldest first, marking each
    /// delivered; then a copy of what the group said to its chat since.
    async fn print_new<W: AsyncWrite + Unpin>(&mut self, ports: &Ports, output: &mut W) -> Result<(), ConsoleError> {
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

async fn print<W: AsyncWrite + Unpin>(output: &mut W, row: &OutboxRow) -> Result<(), ConsoleError> {
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
