//! The other side of the control socket: `pincer chat` attached to a running
//! daemon, and the change notices of `pincer groups` and `pincer tasks`.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

use super::wire::{self, Change, ClientFrame, End, Request, ServerFrame};
use crate::channel::console::{ChatEnd, ConsoleOptions};
use crate::config::Config;

/// How long a change notice may take before it is given up.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(5);
/// The daemon's frames are copies of replies; a line this long is not one.
const MAX_FRAME: usize = 64 << 20;

/// Connects to the daemon serving `data_dir`.
pub async fn connect(data_dir: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(super::path::socket_path(data_dir)).await
}

/// Chats with a group through the daemon on `stream`: typed lines go to the
/// group's live session, what it says comes back, until input ends and the
/// session settles (as a terminal chat of its own would), or `shutdown`.
pub async fn chat<R, W>(
    stream: UnixStream,
    opts: &ConsoleOptions,
    input: R,
    mut output: W,
    shutdown: CancellationToken,
) -> anyhow::Result<ChatEnd>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (read, mut write) = stream.into_split();
    let wait_limit_ms = u64::try_from(opts.wait_limit.as_millis()).unwrap_or(u64::MAX);
    let attach = opts.attach.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let request = Request::Chat { group: opts.group.to_string(), sender: opts.sender.clone(), wait_limit_ms, attach };
    write.write_all(wire::line(&request).as_bytes()).await?;
    let mut frames = FramedRead::new(read, LinesCodec::new_with_max_length(MAX_FRAME));
    let mut lines = input.lines();
    let mut typing = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(ChatEnd::Shutdown),
            frame = frames.next() => {
                if let Some(end) = on_frame(frame, &mut output).await? {
                    return Ok(end);
                }
            }
            line = lines.next_line(), if typing => {
                let frame = match line {
                    Ok(Some(text)) => ClientFrame::Line { text },
                    Ok(None) | Err(_) => {
                        typing = false;
                        ClientFrame::Eof
                    }
                };
                write.write_all(wire::line(&frame).as_bytes()).await?;
            }
        }
    }
}

/// Prints what the daemon sent; how the chat ended, once it did.
async fn on_frame<W: AsyncWrite + Unpin>(
    frame: Option<Result<String, LinesCodecError>>,
    output: &mut W,
) -> anyhow::Result<Option<ChatEnd>> {
    let frame = match frame {
        Some(Ok(line)) => serde_json::from_str::<ServerFrame>(&line)?,
        Some(Err(e)) => return Err(e.into()),
        None => anyhow::bail!("the running pincer closed the chat (did it stop?)"),
    };
    match frame {
        ServerFrame::Out { text } => {
            output.write_all(text.as_bytes()).await?;
            output.flush().await?;
            Ok(None)
        }
        ServerFrame::End { end } => Ok(Some(match end {
            End::Done => ChatEnd::Done,
            End::WaitLimit => ChatEnd::WaitLimit,
            End::Shutdown => ChatEnd::Shutdown,
        })),
        ServerFrame::Error { message } => anyhow::bail!("{message}"),
        ServerFrame::Ok | ServerFrame::Status { .. } | ServerFrame::Drain { .. } => Ok(None),
    }
}

/// What became of a change notice.
#[derive(Debug, PartialEq, Eq)]
pub enum Told {
    /// The running pincer took it.
    Daemon,
    /// No pincer runs on this data directory: the next one reads the store.
    NoDaemon,
    /// A pincer runs, but the notice did not reach it (it acts at its next poll).
    Failed(String),
}

/// Tells the daemon of `data_dir`, if one runs, what changed in the store.
pub async fn notify(data_dir: &Path, change: Change) -> Told {
    let mut stream = match connect(data_dir).await {
        Ok(stream) => stream,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Told::NoDaemon
        }
        Err(e) => return Told::Failed(e.to_string()),
    };
    let exchange = async {
        let request = wire::line(&Request::Changed(change));
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut answer = String::new();
        tokio::io::BufReader::new(&mut stream).read_line(&mut answer).await.map_err(|e| e.to_string())?;
        match serde_json::from_str::<ServerFrame>(answer.trim_end()) {
            Ok(ServerFrame::Ok) => Ok(()),
            Ok(ServerFrame::Error { message }) => Err(message),
            _ => Err(format!("an unexpected answer: {:?}", answer.trim_end())),
        }
    };
    match tokio::time::timeout(NOTICE_TIMEOUT, exchange).await {
        Ok(Ok(())) => Told::Daemon,
        Ok(Err(why)) => Told::Failed(why),
        Err(_) => Told::Failed(format!("no answer within {}", humantime::format_duration(NOTICE_TIMEOUT))),
    }
}

/// Asks the daemon of `data_dir` to read its config again: what it changed,
/// or why not. `Ok(None)` when no daemon runs.
pub async fn reload(data_dir: &Path) -> Result<Option<String>, String> {
    let mut stream = match connect(data_dir).await {
        Ok(stream) => stream,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Ok(None)
        }
        Err(e) => return Err(e.to_string()),
    };
    let exchange = async {
        stream.write_all(wire::line(&Request::Reload).as_bytes()).await.map_err(|e| e.to_string())?;
        let mut answer = String::new();
        tokio::io::BufReader::new(&mut stream).read_line(&mut answer).await.map_err(|e| e.to_string())?;
        match serde_json::from_str::<ServerFrame>(answer.trim_end()) {
            Ok(ServerFrame::Out { text }) => Ok(Some(text)),
            Ok(ServerFrame::Error { message }) => Err(message),
            _ => Err(format!("an unexpected answer: {:?}", answer.trim_end())),
        }
    };
    match tokio::time::timeout(NOTICE_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {}", humantime::format_duration(NOTICE_TIMEOUT))),
    }
}

/// What the daemon of `data_dir` runs now; `None` when no daemon answers.
pub async fn live_view(data_dir: &Path) -> Option<wire::LiveView> {
    let mut stream = connect(data_dir).await.ok()?;
    let exchange = async {
        stream.write_all(wire::line(&Request::Status).as_bytes()).await.ok()?;
        let mut answer = String::new();
        tokio::io::BufReader::new(&mut stream).read_line(&mut answer).await.ok()?;
        match serde_json::from_str::<ServerFrame>(answer.trim_end()) {
            Ok(ServerFrame::Status { status }) => Some(status),
            _ => None,
        }
    };
    tokio::time::timeout(NOTICE_TIMEOUT, exchange).await.ok().flatten()
}

/// Tells a running pincer what changed in the store, and says on stdout what
/// became of it (`pincer groups …`, `pincer tasks …`).
pub async fn tell(config: &Config, change: Change) {
    match notify(&config.data_dir, change).await {
        Told::Daemon => println!("the running pincer was told, and applies it now"),
        Told::NoDaemon => {}
        Told::Failed(why) => println!(
            "the running pincer could not be told ({why}); it picks this up within scheduler.poll_interval ({})",
            humantime::format_duration(config.scheduler.poll_interval)
        ),
    }
}

/// How a `pincer drain` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained {
    /// The node holds nothing and stops.
    Done,
    /// No pincer runs on this data directory.
    NoDaemon,
    /// The pincer runs on one machine: nothing to hand over, and what to do.
    Alone(String),
}

/// Asks the daemon of `data_dir` to drain (`pincer drain`), calling
/// `progress` with each step, until it holds nothing; then waits until it no
/// longer answers on its socket (it stopped taking anything).
pub async fn drain(data_dir: &Path, mut progress: impl FnMut(&wire::DrainProgress)) -> Result<Drained, String> {
    let mut stream = match connect(data_dir).await {
        Ok(stream) => stream,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Ok(Drained::NoDaemon)
        }
        Err(e) => return Err(e.to_string()),
    };
    stream.write_all(wire::line(&Request::Drain).as_bytes()).await.map_err(|e| e.to_string())?;
    let mut lines = tokio::io::BufReader::new(stream).lines();
    loop {
        let line = lines.next_line().await.map_err(|e| e.to_string())?;
        let Some(line) = line else { return Err("the pincer stopped answering before it had drained".into()) };
        match serde_json::from_str::<ServerFrame>(&line) {
            Ok(ServerFrame::Drain { progress: now }) => progress(&now),
            Ok(ServerFrame::End { .. }) => break,
            Ok(ServerFrame::Out { text }) => return Ok(Drained::Alone(text)),
            Ok(ServerFrame::Error { message }) => return Err(message),
            _ => return Err(format!("an unexpected answer: {line:?}")),
        }
    }
    while connect(data_dir).await.is_ok() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(Drained::Done)
}
