//! The console channel behind `pincer chat`: each input line is an inbound
//! message, and every reply is printed when it arrives, including replies that
//! background work produces later by itself.
//!
//! When input ends (a pipe, or Ctrl-D) the chat keeps printing until the
//! session has nothing in flight, up to a wait limit, so
//! `printf 'hi\n' | pincer chat NAME` prints the answer and exits.

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::app::Engine;
use crate::domain::{GroupName, Inbound, Outbound, OutboundKind, Source};

/// How a console chat is run.
#[derive(Clone, Debug)]
pub struct ConsoleOptions {
    pub group: GroupName,
    /// Who the messages are from, as stored.
    pub sender: String,
    /// After input ends, how long to wait for replies and background work.
    pub wait_limit: Duration,
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

/// Runs a console chat with one group until input ends (and work settles) or shutdown.
pub async fn chat<R, W>(
    engine: &Engine,
    opts: &ConsoleOptions,
    input: R,
    mut output: W,
    shutdown: CancellationToken,
) -> anyhow::Result<ChatEnd>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = engine.router.session(&opts.group).await?;
    let mut lines = input.lines();
    let mut give_up_at: Option<tokio::time::Instant> = None;
    loop {
        if give_up_at.is_some() && !session.busy() {
            // Replies are handed over before the status says "idle": take the last ones.
            while let Ok(out) = engine.outbound.try_recv() {
                print(&mut output, &opts.group, &out).await?;
            }
            return Ok(ChatEnd::Done);
        }
        let deadline = async {
            match give_up_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(ChatEnd::Shutdown),
            out = engine.outbound.recv() => {
                let out = out.context("the session engine stopped")?;
                print(&mut output, &opts.group, &out).await?;
            }
            Ok(request) = engine.approvals.recv() => {
                // The console has no admins: say what was asked, and deny it.
                let note = format!(
                    "[pincer] the agent asked to use {} ({}); tools that need an admin's approval are answered \
                     only in the group's Telegram chat, so it was denied\n",
                    request.tool_name, request.summary
                );
                output.write_all(note.as_bytes()).await?;
                drop(request.respond);
            }
            line = lines.next_line(), if give_up_at.is_none() => match line {
                Ok(Some(text)) if text.trim().is_empty() => {}
                Ok(Some(text)) => {
                    engine.router.send(Inbound::new(opts.group.clone(), Source::Console, &opts.sender, text)).await?;
                }
                Ok(None) | Err(_) => give_up_at = Some(tokio::time::Instant::now() + opts.wait_limit),
            },
            _ = session.changed(), if give_up_at.is_some() => {}
            _ = deadline => {
                let note = format!(
                    "[pincer] stopped waiting after {}; background work was still running and is stopped now \
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

async fn print<W: AsyncWrite + Unpin>(output: &mut W, group: &GroupName, out: &Outbound) -> anyhow::Result<()> {
    if &out.group != group {
        return Ok(());
    }
    let text = match out.kind {
        OutboundKind::Reply => format!("{}\n", out.text),
        OutboundKind::Error => format!("[error] {}\n", out.text),
        OutboundKind::Notice => format!("[pincer] {}\n", out.text),
    };
    output.write_all(text.as_bytes()).await?;
    output.flush().await?;
    Ok(())
}
