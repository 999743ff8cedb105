//! The daemon's side of the control socket: one task accepts, one task per
//! connection answers it. A chat connection runs the same console chat as a
//! terminal `pincer chat` (`channel::console::chat`), its input and output
//! carried as frames; a change notice pokes the scheduler or the group.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::wire::{self, Change, ClientFrame, End, Request, ServerFrame};
use crate::channel::approvals::ASK_QUEUE;
use crate::channel::console::{self, ChatEnd, ConsoleOptions};
use crate::channel::{ApprovalAsk, Ports};
use crate::domain::GroupName;
use crate::retry::{self, Backoff};
use crate::scheduler::SchedulerHandle;

/// How many clients may be connected at once.
const MAX_CLIENTS: usize = 16;
/// A frame longer than this closes the connection (a typed line is far shorter).
const MAX_FRAME: usize = 1 << 20;
/// How long a new connection may take to say what it wants.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(
        "cannot listen on the control socket {path}: {source} (`pincer chat` cannot attach to this pincer; \
         a data_dir path shorter than about 100 bytes avoids the socket path limit)"
    )]
    Bind { path: PathBuf, source: std::io::Error },
}

/// A bound control socket; the file is removed when it is dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `data_dir/pincer.sock`, readable and writable by its owner only.
    /// The caller holds the data directory's lock, so a file already there is
    /// a dead pincer's and is replaced.
    pub fn bind(data_dir: &Path) -> Result<ControlSocket, ControlError> {
        let path = super::path::socket_path(data_dir);
        let error = |source| ControlError::Bind { path: path.clone(), source };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(error(e)),
        }
        let listener = UnixListener::bind(&path).map_err(error)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(error)?;
        Ok(ControlSocket { listener, path })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What `pincer reload` asks of the daemon: the wiring implements it
/// (`app::reload`), so the control socket names no part of the wiring.
pub trait Reload: Send + Sync {
    /// Reads the config again: what changed, or why nothing did.
    fn reload(&self) -> futures_util::future::BoxFuture<'_, Result<String, String>>;
}

/// What `pincer drain` asks of a cluster node: the wiring implements it
/// (`node::drain`); one machine has none.
pub trait Drain: Send + Sync {
    /// Starts the node's drain (a second ask only watches it): how far it is.
    fn start(&self) -> tokio::sync::watch::Receiver<wire::DrainProgress>;
}

/// What the connections act on.
#[derive(Clone)]
pub struct Control {
    pub ports: Ports,
    pub scheduler: SchedulerHandle,
    /// `pincer reload`.
    pub reloader: Option<Arc<dyn Reload>>,
    /// `pincer drain`, on a cluster node.
    pub drain: Option<Arc<dyn Drain>>,
    /// Approval requests of groups without a chat, shown to their attached terminals.
    attached: Attached,
    /// When this daemon started serving (for `pincer status`).
    pub started: std::time::SystemTime,
}

/// The approval queues of the attached terminals, by group. A group's entry
/// lives while a terminal is attached to it.
#[derive(Clone, Default)]
struct Attached(Arc<Mutex<HashMap<GroupName, Vec<mpsc::Sender<ApprovalAsk>>>>>);

impl Attached {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupName, Vec<mpsc::Sender<ApprovalAsk>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Attaches a terminal to `group`: its approval queue, and the guard that
    /// detaches it (its own queue, whether or not the queue is closed yet).
    fn attach(&self, group: &GroupName) -> (mpsc::Receiver<ApprovalAsk>, Attachment) {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        self.lock().entry(group.clone()).or_default().push(tx.clone());
        (rx, Attachment { attached: self.clone(), group: group.clone(), queue: tx })
    }

    /// The queue of the terminal attached first to `group`.
    fn first(&self, group: &GroupName) -> Option<mpsc::Sender<ApprovalAsk>> {
        self.lock().get(group).and_then(|v| v.first().cloned())
    }
}

/// A terminal attached to a group; detached when dropped.
struct Attachment {
    attached: Attached,
    group: GroupName,
    queue: mpsc::Sender<ApprovalAsk>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let mut attached = self.attached.lock();
        if let Some(senders) = attached.get_mut(&self.group) {
            senders.retain(|s| !s.same_channel(&self.queue));
            if senders.is_empty() {
                attached.remove(&self.group);
            }
        }
    }
}

impl Control {
    /// `console_asks` is the approval queue of the console platform: requests
    /// of groups without a chat, shown to a terminal attached to the group.
    pub fn new(ports: Ports, scheduler: SchedulerHandle, console_asks: mpsc::Receiver<ApprovalAsk>) -> Control {
        let attached = Attached::default();
        tokio::spawn(hand_out_asks(console_asks, attached.clone()));
        Control { ports, scheduler, reloader: None, drain: None, attached, started: std::time::SystemTime::now() }
    }
}

/// Sends each console approval request to a terminal attached to its group;
/// one with none attached is dropped, which denies it.
async fn hand_out_asks(mut asks: mpsc::Receiver<ApprovalAsk>, attached: Attached) {
    while let Some(ask) = asks.recv().await {
        let group = ask.request.group.clone();
        let sender = attached.first(&group);
        match sender {
            Some(sender) => {
                let _ = sender.try_send(ask);
            }
            None => tracing::warn!(%group, tool = %ask.request.tool_name, "no terminal is attached to ask; denied"),
        }
    }
}

/// Accepts connections until `shutdown`; each is answered in its own task.
pub async fn serve(socket: ControlSocket, control: Control, shutdown: CancellationToken) {
    let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
    tracing::info!(socket = %socket.path.display(), "listening for `pincer chat` and change notices");
    let mut backoff = Backoff::new(retry::ACCEPT);
    loop {
        let stream = tokio::select! {
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(%e, "control socket: accept failed");
                    if !backoff.wait(None, &shutdown).await {
                        return;
                    }
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        backoff.succeeded();
        let Ok(permit) = clients.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, "too many `pincer` commands are connected; try again in a moment"));
            continue;
        };
        let (control, shutdown) = (control.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &control, shutdown).await {
                tracing::debug!(%e, "control connection ended");
            }
            drop(permit);
        });
    }
}

async fn refuse(mut stream: UnixStream, why: &str) {
    let _ = stream.write_all(wire::line(&ServerFrame::Error { message: why.to_owned() }).as_bytes()).await;
}

/// Why a control connection ended early: logged at debug, as a client that
/// went away is no fault of the daemon's.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("refused a peer of uid {0}")]
    Stranger(u32),
    #[error("no request")]
    NoRequest,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Answers one connection.
async fn answer(stream: UnixStream, control: &Control, shutdown: CancellationToken) -> Result<(), ConnectionError> {
    // The socket file is the owner's only; a peer of another uid got in through
    // a copy of the descriptor or a loosened mode. Either way: not ours to serve.
    let peer = stream.peer_cred()?.uid();
    if peer != nix::unistd::geteuid().as_raw() {
        refuse(stream, "only the user running pincer may use its control socket").await;
        return Err(ConnectionError::Stranger(peer));
    }
    let (read, mut write) = stream.into_split();
    let mut frames = FramedRead::new(read, LinesCodec::new_with_max_length(MAX_FRAME));
    let first = tokio::time::timeout(REQUEST_TIMEOUT, frames.next()).await;
    let request = match first {
        Ok(Some(Ok(line))) => serde_json::from_str::<Request>(&line),
        _ => return Err(ConnectionError::NoRequest),
    };
    match request {
        Err(e) => send(&mut write, &ServerFrame::Error { message: format!("not a request pincer knows: {e}") }).await,
        Ok(Request::Changed(change)) => {
            changed(control, change).await;
            send(&mut write, &ServerFrame::Ok).await
        }
        Ok(Request::Reload) => send(&mut write, &reload(control).await).await,
        Ok(Request::Drain) => drain(&mut write, control).await,
        Ok(Request::Status) => {
            let status = live_view(&control.ports.router, control.started);
            send(&mut write, &ServerFrame::Status { status }).await
        }
        Ok(Request::Chat { group, sender, wait_limit_ms, attach }) => {
            let group: GroupName = match group.parse() {
                Ok(group) => group,
                Err(e) => return send(&mut write, &ServerFrame::Error { message: format!("{e:#}") }).await,
            };
            let opts = ConsoleOptions {
                group,
                sender,
                wait_limit: Duration::from_millis(wait_limit_ms),
                attached: true,
                attach: attach.into_iter().map(Into::into).collect(),
            };
            chat(frames, write, control, opts, shutdown).await
        }
    }
}

/// `pincer reload`: what changed, or why nothing did.
async fn reload(control: &Control) -> ServerFrame {
    match &control.reloader {
        None => ServerFrame::Error { message: "this pincer cannot reload its config".into() },
        Some(reloader) => match reloader.reload().await {
            Ok(said) => ServerFrame::Out { text: said },
            Err(message) => ServerFrame::Error { message },
        },
    }
}

/// `pincer drain`: the drain's progress as it changes, then `end` once the
/// node holds nothing (it stops then); on one machine, why there is nothing to do.
async fn drain(write: &mut OwnedWriteHalf, control: &Control) -> Result<(), ConnectionError> {
    let Some(port) = &control.drain else {
        let message = "this pincer is not a cluster node, so there is no other node to hand its groups to: \
                       stop it (`systemctl restart pincer`, or SIGTERM) for the upgrade; what arrives meanwhile \
                       waits in the store and is answered when it is back";
        return send(write, &ServerFrame::Out { text: message.into() }).await;
    };
    let mut progress = port.start();
    loop {
        let now = *progress.borrow_and_update();
        // Before its first look, the drain has nothing to say.
        if now != wire::DrainProgress::default() {
            send(write, &ServerFrame::Drain { progress: now }).await?;
        }
        if now.done {
            return send(write, &ServerFrame::End { end: End::Done }).await;
        }
        if progress.changed().await.is_err() {
            return send(write, &ServerFrame::End { end: End::Shutdown }).await;
        }
    }
}

async fn send(write: &mut OwnedWriteHalf, frame: &ServerFrame) -> Result<(), ConnectionError> {
    write.write_all(wire::line(frame).as_bytes()).await?;
    Ok(())
}

/// What runs now, for `pincer status` and the status page: the sessions of
/// `router`, in a daemon serving since `started`.
pub fn live_view(router: &crate::router::Router, started: std::time::SystemTime) -> wire::LiveView {
    let unix = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let groups: Vec<wire::LiveGroup> = router
        .statuses()
        .into_iter()
        .map(|(name, s)| wire::LiveGroup {
            name: name.to_string(),
            live: s.live,
            in_turn: s.in_turn,
            pending: s.pending,
            background_tasks: s.running_tasks,
            held_until: s.resend_at.map(unix),
        })
        .collect();
    wire::LiveView {
        pid: std::process::id(),
        up_since: unix(started),
        live_sessions: groups.iter().filter(|g| g.live).count(),
        max_live_sessions: router.max_live_sessions(),
        groups,
    }
}

/// Acts on a change another command made in the store.
async fn changed(control: &Control, change: Change) {
    tracing::info!(?change, "told of a change in the store");
    match change {
        Change::Schedules => control.scheduler.poke(),
        Change::Group { group } => {
            // A new binding: waiting replies follow it (in the store); wake the deliverers.
            control.ports.outbox.wake();
            control.scheduler.poke();
            match group.parse::<GroupName>() {
                Ok(group) => control.ports.router.settings_changed(&group).await,
                Err(e) => tracing::debug!(%group, %e, "a change notice named no group"),
            }
        }
    }
}

/// Runs a console chat for an attached terminal: its lines in, what the
/// console prints out, then how it ended.
async fn chat(
    frames: FramedRead<OwnedReadHalf, LinesCodec>,
    write: OwnedWriteHalf,
    control: &Control,
    opts: ConsoleOptions,
    shutdown: CancellationToken,
) -> Result<(), ConnectionError> {
    let (typed, input) = tokio::io::duplex(64 * 1024);
    let (output, printed) = tokio::io::duplex(64 * 1024);
    let (asks, _detach) = control.attached.attach(&opts.group);
    // The terminal going away ends the chat (the daemon's session goes on).
    let gone = shutdown.child_token();
    let console = console::chat(&control.ports, asks, &opts, BufReader::new(input), output, gone.clone());
    let input_then_wait = async {
        lines_in(frames, typed, gone.clone()).await;
        std::future::pending::<()>().await
    };
    let (end, write) = tokio::select! {
        both = async { tokio::join!(console, text_out(printed, write, gone.clone())) } => both,
        () = input_then_wait => unreachable!("never ends"),
    };
    let mut write = write?;
    let frame = match end {
        Ok(ChatEnd::Done) => ServerFrame::End { end: End::Done },
        Ok(ChatEnd::WaitLimit) => ServerFrame::End { end: End::WaitLimit },
        Ok(ChatEnd::Shutdown) if shutdown.is_cancelled() => ServerFrame::End { end: End::Shutdown },
        Ok(ChatEnd::Shutdown) => return Ok(()),
        Err(e) => ServerFrame::Error { message: format!("{e:#}") },
    };
    send(&mut write, &frame).await?;
    write.shutdown().await?;
    Ok(())
}

/// The terminal's lines, into the console's input; `gone` once the terminal is.
async fn lines_in(
    mut frames: FramedRead<OwnedReadHalf, LinesCodec>,
    mut typed: tokio::io::DuplexStream,
    gone: CancellationToken,
) {
    while let Some(Ok(line)) = frames.next().await {
        match serde_json::from_str::<ClientFrame>(&line) {
            Ok(ClientFrame::Line { text }) => {
                // One typed line is one message, whatever it carries.
                let text = text.replace(['\n', '\r'], " ");
                if typed.write_all(format!("{text}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
            // `typed` is dropped on return: the console reads the end of input.
            Ok(ClientFrame::Eof) | Err(_) => return,
        }
    }
    gone.cancel();
}

/// What the console prints, out to the terminal as frames, until it ends.
async fn text_out(
    mut printed: tokio::io::DuplexStream,
    mut write: OwnedWriteHalf,
    gone: CancellationToken,
) -> Result<OwnedWriteHalf, ConnectionError> {
    let mut buf = vec![0; 16 * 1024];
    let mut pending = Vec::new();
    loop {
        match printed.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(write),
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                let text = whole_chars(&mut pending);
                if let Err(e) = send(&mut write, &ServerFrame::Out { text }).await {
                    gone.cancel();
                    return Err(e);
                }
            }
        }
    }
}

/// Takes the text in `bytes` up to a character cut by a read, which stays
/// for the next read.
fn whole_chars(bytes: &mut Vec<u8>) -> String {
    let whole = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    let rest = bytes.split_off(whole);
    let text = String::from_utf8_lossy(bytes).into_owned();
    *bytes = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_leaves_the_attached_map_with_its_last_terminal() {
        let attached = Attached::default();
        let groups: Vec<GroupName> = (0..20).map(|n| format!("g{n}").parse().unwrap()).collect();
        let mut terminals: Vec<_> = groups.iter().map(|g| attached.attach(g)).collect();
        let (_second_queue, second) = attached.attach(&groups[0]);
        assert_eq!(attached.lock().len(), 20);
        // Detached while their queues are still open (the guard may drop first).
        let queues: Vec<_> = terminals
            .drain(..)
            .map(|(queue, detach)| {
                drop(detach);
                queue
            })
            .collect();
        assert_eq!(attached.lock().len(), 1, "only the group with a terminal still attached");
        assert!(attached.first(&groups[0]).is_some());
        drop(second);
        assert_eq!(attached.lock().len(), 0);
        drop(queues);
    }

    #[test]
    fn a_character_cut_by_a_read_waits_for_its_rest() {
        let word = "héllo".as_bytes();
        let mut bytes = word[..2].to_vec();
        assert_eq!(whole_chars(&mut bytes), "h");
        bytes.extend_from_slice(&word[2..]);
        assert_eq!(whole_chars(&mut bytes), "éllo");
        assert!(bytes.is_empty());
    }
}
