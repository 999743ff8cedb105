//! A scripted fake of the Claude Code CLI behind the session's port, for
//! tests that drive a real actor without Node: each user message written to
//! it is answered by the next scripted [`Reply`] (an echo by default), an
//! `interrupt` ends the turn the way the CLI does, and tests can print any
//! line, or make a start panic or fail. Everything it sees is recorded with the
//! (paused) tokio time it happened at. Given a home ([`FakeCli::with_home`]),
//! it keeps a transcript there as the CLI does.

use std::collections::VecDeque;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cli::{CliChild, CliPort, StartError, StartRequest, Started};
use crate::claude::lines::LineRead;
use crate::claude::process::StdoutLine;

/// The user message a reply answers.
pub(super) struct Said {
    pub(super) text: String,
    pub(super) uuid: String,
    pub(super) session: String,
}

/// The lines a scripted reply prints for a message.
pub(super) type Script = Box<dyn Fn(&Said) -> Vec<Value> + Send>;

/// How the fake answers one user message.
pub(super) enum Reply {
    /// `init`, the replay, and a result whose text is `echo: <message>`.
    Echo,
    /// The turn starts (`init`, the replay), then nothing more: a hung turn.
    Silent,
    /// stdout closes without an answer, and the process exits with status 1.
    Crash,
    /// These lines.
    Lines(Script),
}

/// One process start, and what it was asked to resume.
#[derive(Clone, Debug)]
pub(super) struct Start {
    pub(super) resume: Option<String>,
    pub(super) at: Instant,
}

/// A line written to a process (`process` counts from 1).
#[derive(Clone, Debug)]
pub(super) struct Written {
    pub(super) process: usize,
    pub(super) line: Value,
    pub(super) at: Instant,
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    panics: u32,
    /// The next starts fail, each with the folder error naming this.
    failures: VecDeque<String>,
    failed_at: Vec<Instant>,
    starts: Vec<Start>,
    panicked_at: Vec<Instant>,
    written: Vec<Written>,
    /// When a process's stdin was closed or it crashed, by process.
    ended: Vec<(usize, Instant)>,
    /// The live process's stdout; dropping it closes the actor's receiver.
    stdout: Option<(usize, mpsc::Sender<StdoutLine>)>,
    crashed: Option<usize>,
    sessions: u32,
    session: String,
    /// The CLI's home on the host, when the fake keeps a transcript there.
    home: Option<std::path::PathBuf>,
    /// What each start found of the transcript it resumes (with a home).
    transcripts_at_start: Vec<Option<Vec<u8>>>,
    /// How `initialize` is answered: success (as both supported versions do) unless set.
    init: Option<InitAnswer>,
    /// A session the CLI no longer has: a process resuming it prints the
    /// refusal and exits at start, before it reads `initialize` (as both
    /// supported versions do).
    gone: Option<String>,
}

/// How the fake answers pincer's `initialize` (an unsupported CLI's ways).
#[derive(Clone, Copy, Debug)]
pub(super) enum InitAnswer {
    /// Success, as both supported versions answer.
    Take,
    /// An error response: the hook is refused.
    Refuse,
    /// No answer at all.
    Never,
}

/// The fake CLI; clones share one script and one record.
#[derive(Clone, Default)]
pub(crate) struct FakeCli {
    state: Arc<Mutex<State>>,
}

pub(super) fn line(value: Value) -> StdoutLine {
    StdoutLine { read_at: std::time::Instant::now(), line: LineRead::Line(value.to_string()) }
}

impl FakeCli {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next user messages are answered so, in order (then by echoes).
    pub(super) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state().replies.extend(replies);
    }

    /// Every process answers `initialize` so from now on.
    pub(super) fn answer_init(&self, how: InitAnswer) {
        self.state().init = Some(how);
    }

    /// Processes resuming `session` find no such conversation.
    pub(super) fn forget_session(&self, session: &str) {
        self.state().gone = Some(session.to_owned());
    }

    /// The next `n` starts panic.
    pub(super) fn panic_on_start(&self, n: u32) {
        self.state().panics = n;
    }

    /// The next starts fail, one per reason, in order (as a group folder
    /// that cannot be made, naming the reason).
    pub(super) fn fail_starts(&self, reasons: &[&str]) {
        self.state().failures.extend(reasons.iter().map(|r| (*r).to_owned()));
    }

    /// When starts failed.
    pub(super) fn failed_at(&self) -> Vec<Instant> {
        self.state().failed_at.clone()
    }

    /// Prints `value` on the live process's stdout.
    pub(super) fn print(&self, value: Value) {
        let state = self.state();
        let (_, tx) = state.stdout.as_ref().expect("a live fake process");
        tx.try_send(line(value)).expect("room on the fake's stdout");
    }

    /// The live process dies now (stdout closes, exit status 1).
    pub(super) fn crash(&self) {
        let mut state = self.state();
        if let Some((process, _)) = state.stdout.take() {
            state.crashed = Some(process);
            state.ended.push((process, Instant::now()));
        }
    }

    pub(super) fn starts(&self) -> Vec<Start> {
        self.state().starts.clone()
    }

    pub(super) fn panicked_at(&self) -> Vec<Instant> {
        self.state().panicked_at.clone()
    }

    pub(super) fn written(&self) -> Vec<Written> {
        self.state().written.clone()
    }

    /// When processes ended (stdin closed, or crashed), by process.
    pub(super) fn ended(&self) -> Vec<(usize, Instant)> {
        self.state().ended.clone()
    }

    /// The user messages written, as (process, text).
    pub(super) fn user_messages(&self) -> Vec<(usize, String)> {
        let written = self.state().written.clone();
        written
            .into_iter()
            .filter(|w| w.line["type"] == "user")
            .map(|w| (w.process, w.line["message"]["content"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }

    /// The session id the fake reports now.
    pub(super) fn session(&self) -> String {
        self.state().session.clone()
    }

    /// The fake's home is `home` on the host: it appends a line to its
    /// session's transcript there for each message before it answers, and
    /// one more as it ends (the CLI's flush after the result).
    pub(super) fn with_home(self, home: &std::path::Path) -> FakeCli {
        self.state().home = Some(home.to_owned());
        self
    }

    /// What each start found of the transcript it resumes (`None`: no file).
    pub(super) fn transcripts_at_start(&self) -> Vec<Option<Vec<u8>>> {
        self.state().transcripts_at_start.clone()
    }
}

/// The fake's view: a sandbox's, its home bound in when it has one.
fn view_with(home: Option<&std::path::Path>) -> crate::domain::files::FileView {
    let mounts = home.map(|home| ("/home/agent".into(), home.to_owned())).into_iter().collect();
    crate::domain::files::FileView::sandboxed("/workspace/group", "/home/agent", mounts)
}

/// `session`'s transcript under `home`, where the CLI keeps it for `/workspace/group`.
pub(super) fn transcript_file(home: &std::path::Path, session: &str) -> std::path::PathBuf {
    home.join(".claude/projects/-workspace-group").join(format!("{session}.jsonl"))
}

fn append_transcript(state: &State, line: &Value) {
    let Some(home) = &state.home else { return };
    let file = transcript_file(home, &state.session);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut out = std::fs::File::options().create(true).append(true).open(file).unwrap();
    std::io::Write::write_all(&mut out, format!("{line}\n").as_bytes()).unwrap();
}

/// The MCP `initialize` of pincer's own server, which the CLI sends before
/// it answers pincer's `initialize` (both supported versions).
pub(super) fn mcp_handshake() -> Value {
    json!({"type": "control_request", "request_id": "mcp_init", "request": {"subtype": "mcp_message",
           "server_name": "pincer", "message": {"method": "initialize", "jsonrpc": "2.0", "id": 0,
           "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}}})
}

/// The lines of a normal turn: `init`, the replay, a result with `text`.
pub(super) fn turn_lines(said: &Said, text: &str) -> Vec<Value> {
    let mut lines = turn_start(said);
    lines.push(result(said, text));
    lines
}

/// `init` and the replay of the message: the turn took it.
pub(super) fn turn_start(said: &Said) -> Vec<Value> {
    vec![
        json!({"type": "system", "subtype": "init", "session_id": said.session}),
        json!({"type": "user", "message": {"role": "user", "content": said.text}, "uuid": said.uuid,
               "isReplay": true, "parent_tool_use_id": null, "session_id": said.session}),
    ]
}

/// pincer's `PreToolUse` hook called for one tool call, as the CLI calls it.
pub(super) fn pre_tool_use(request_id: &str, tool: &str, input: Value, tool_use_id: &str) -> Value {
    json!({"type": "control_request", "request_id": request_id, "request": {"subtype": "hook_callback",
           "callback_id": crate::claude::protocol::PRE_TOOL_HOOK, "tool_use_id": tool_use_id,
           "input": {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input,
                     "tool_use_id": tool_use_id, "cwd": "/workspace/group"}}})
}

/// A background Bash task started in the turn (`task_started`).
pub(super) fn task_started(said: &Said, task_id: &str, description: &str) -> Value {
    json!({"type": "system", "subtype": "task_started", "task_id": task_id, "description": description,
           "task_type": "local_bash", "session_id": said.session})
}

pub(super) fn result(said: &Said, text: &str) -> Value {
    json!({"type": "result", "subtype": "success", "is_error": false, "result": text,
           "session_id": said.session, "total_cost_usd": 0.001, "num_turns": 1, "duration_ms": 5})
}

impl CliPort for FakeCli {
    fn start<'a>(&'a self, request: StartRequest<'a>) -> BoxFuture<'a, Result<Started, StartError>> {
        let mut state = self.state();
        if state.panics > 0 {
            state.panics -= 1;
            state.panicked_at.push(Instant::now());
            drop(state);
            panic!("the fake CLI's scripted panic at start");
        }
        if let Some(reason) = state.failures.pop_front() {
            state.failed_at.push(Instant::now());
            let source = io::Error::new(io::ErrorKind::PermissionDenied, reason);
            let dir = std::path::PathBuf::from("groups");
            return Box::pin(std::future::ready(Err(StartError::Folder { dir, source })));
        }
        let (tx, lines) = mpsc::channel(64);
        let process = state.starts.len() + 1;
        state.starts.push(Start { resume: request.resume.map(str::to_owned), at: Instant::now() });
        state.session = match request.resume {
            Some(id) => id.to_owned(),
            None => {
                state.sessions += 1;
                format!("fake-session-{}", state.sessions)
            }
        };
        if request.resume.is_some() && request.resume == state.gone.as_deref() {
            let refusal = json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
                "num_turns": 0, "session_id": state.session,
                "errors": [format!("No conversation found with session ID: {}", state.session)]});
            tx.try_send(line(refusal)).expect("room on the fake's stdout");
            state.stdout = None;
            state.crashed = Some(process);
            state.ended.push((process, Instant::now()));
        } else {
            state.stdout = Some((process, tx));
        }
        if let Some(home) = state.home.clone() {
            let found = request.resume.and_then(|id| std::fs::read(transcript_file(&home, id)).ok());
            state.transcripts_at_start.push(found);
        }
        let child = FakeChild { cli: self.clone(), process };
        // A sandbox's layout with no folder pincer looks into (but its home,
        // when it has one): paths are judged as written.
        let view = view_with(state.home.as_deref());
        Box::pin(std::future::ready(Ok(Started { child: Box::new(child), lines, view })))
    }

    fn view_of(&self, _group: &crate::domain::GroupName) -> Option<crate::domain::files::FileView> {
        let state = self.state();
        state.home.is_some().then(|| view_with(state.home.as_deref()))
    }
}

struct FakeChild {
    cli: FakeCli,
    process: usize,
}

impl FakeChild {
    fn answer(&self, value: &Value) -> io::Result<()> {
        let mut state = self.cli.state();
        let live = state.stdout.as_ref().is_some_and(|(p, _)| *p == self.process);
        if !live {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the fake process is gone"));
        }
        state.written.push(Written { process: self.process, line: value.clone(), at: Instant::now() });
        let said = Said {
            text: value["message"]["content"].as_str().unwrap_or_default().to_owned(),
            uuid: value["uuid"].as_str().unwrap_or_default().to_owned(),
            session: state.session.clone(),
        };
        let lines = match (value["type"].as_str(), value["request"]["subtype"].as_str()) {
            (Some("user"), _) => match state.replies.pop_front().unwrap_or(Reply::Echo) {
                Reply::Echo => turn_lines(&said, &format!("echo: {}", said.text)),
                Reply::Silent => turn_start(&said),
                Reply::Crash => {
                    state.stdout = None;
                    state.crashed = Some(self.process);
                    state.ended.push((self.process, Instant::now()));
                    return Ok(());
                }
                Reply::Lines(lines) => lines(&said),
            },
            // The CLI starts pincer's MCP server, then takes pincer's hook, as both supported versions do.
            (Some("control_request"), Some("initialize")) => {
                let mut lines = vec![mcp_handshake()];
                match state.init {
                    Some(InitAnswer::Refuse) => lines.push(json!({"type": "control_response", "response": {
                       "subtype": "error", "request_id": value["request_id"],
                       "error": "Unsupported control request subtype: initialize"}})),
                    Some(InitAnswer::Never) => {}
                    Some(InitAnswer::Take) | None => lines.push(json!({"type": "control_response", "response": {
                       "subtype": "success", "request_id": value["request_id"], "response": {}}})),
                }
                lines
            }
            // The CLI acknowledges, then ends the running turn as interrupted.
            (Some("control_request"), Some("interrupt")) => vec![
                json!({"type": "control_response", "response": {"subtype": "success",
                       "request_id": value["request_id"]}}),
                json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
                       "terminal_reason": "aborted_streaming", "session_id": said.session}),
            ],
            _ => Vec::new(),
        };
        let (_, tx) = state.stdout.as_ref().expect("checked above");
        for value in lines {
            tx.try_send(line(value)).expect("room on the fake's stdout");
        }
        Ok(())
    }

    fn end(&self) {
        let mut state = self.cli.state();
        if state.stdout.as_ref().is_some_and(|(p, _)| *p == self.process) {
            append_transcript(&state, &json!({"ended": self.process}));
            state.stdout = None;
            state.ended.push((self.process, Instant::now()));
        }
    }
}

impl CliChild for FakeChild {
    fn write_line<'a>(&'a mut self, line: &'a str) -> BoxFuture<'a, io::Result<()>> {
        let value: Value = serde_json::from_str(line).expect("pincer writes JSON lines");
        if value["type"] == "user" {
            append_transcript(&self.cli.state(), &json!({"said": value["message"]["content"]}));
        }
        Box::pin(std::future::ready(self.answer(&value)))
    }

    fn close_stdin(&mut self) {
        self.end();
    }

    fn stop(&mut self, _grace: Duration) -> BoxFuture<'_, Option<ExitStatus>> {
        self.end();
        let crashed = self.cli.state().crashed == Some(self.process);
        let code = if crashed { 1 } else { 0 };
        Box::pin(std::future::ready(Some(ExitStatus::from_raw(code << 8))))
    }
}

impl Drop for FakeChild {
    fn drop(&mut self) {
        self.end();
    }
}
