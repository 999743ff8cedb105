//! The control socket's wire: one JSON object per line, each way. The first
//! line a client sends is a [`Request`]; a chat then goes on with
//! [`ClientFrame`]s in and [`ServerFrame`]s out until the daemon sends `end`.
//! Lines typed in a terminal and agent replies are carried as JSON strings,
//! so no text can be mistaken for a frame.

use serde::{Deserialize, Serialize};

pub use crate::status::{LiveGroup, LiveView};

/// What a client asks for, in its first line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Attach a terminal to a group's live session (`pincer chat NAME`).
    Chat {
        group: String,
        /// Who the typed lines are from, as stored.
        sender: String,
        /// After input ends, how long to wait for replies and background work.
        wait_limit_ms: u64,
        /// Files (absolute paths on this host) to send with the first line.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attach: Vec<String>,
    },
    /// Something changed in the store; the daemon acts on it at once.
    Changed(Change),
    /// What runs now (`pincer status`): answered with [`ServerFrame::Status`].
    Status,
    /// Read pincer.toml again (`pincer reload`): answered with
    /// [`ServerFrame::Out`] saying what changed, or [`ServerFrame::Error`].
    Reload,
    /// Hand this cluster node's groups and gateways to the others, then stop
    /// (`pincer drain`): answered with [`ServerFrame::Drain`] as it goes,
    /// then `end`; on one machine [`ServerFrame::Out`] says there is nothing to hand over.
    Drain,
}

/// What another `pincer` command changed in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Change {
    /// Schedules were added, paused, resumed, cancelled, or one is due now.
    Schedules,
    /// A group was added or its settings (chat, tools, admins, trigger) changed.
    Group { group: String },
}

/// A chat client's lines after its request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "frame", rename_all = "snake_case")]
pub enum ClientFrame {
    /// One typed line: one message to the agent.
    Line { text: String },
    /// Input ended (a pipe closed, Ctrl-D).
    Eof,
}

/// The daemon's lines to a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "frame", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The request was taken (a `changed` request gets only this).
    Ok,
    /// Text for the terminal, as the console prints it.
    Out { text: String },
    /// The chat is over.
    End { end: End },
    /// The request was refused, with what to do.
    Error { message: String },
    /// The answer to [`Request::Status`].
    Status { status: LiveView },
    /// How far a drain is ([`Request::Drain`]).
    Drain { progress: DrainProgress },
}

/// How an attached chat ended (mirrors `channel::console::ChatEnd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    Done,
    WaitLimit,
    Shutdown,
}

/// What a draining node still holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainProgress {
    /// Groups it still holds.
    pub groups: usize,
    /// Of those, groups whose turn (or background work) is finishing.
    pub turns: usize,
    /// Gateways it still serves (until another node can take each).
    pub gateways: usize,
    /// Nothing is left to hand over: the node stops now.
    pub done: bool,
}

impl DrainProgress {
    /// One line for the operator's terminal.
    pub fn said(&self) -> String {
        match (self.done, self.groups, self.gateways) {
            (true, 0, 0) => "drained: this node holds nothing; it stops now".to_owned(),
            (true, 0, _) => "drained: this node holds no group; it stops now, and its gateway goes to the next \
                             node that starts (no other node is alive to take it)"
                .to_owned(),
            (true, groups, _) => format!(
                "the drain's time is up with {groups} group(s) still held; the node stops now and they move \
                 as it leaves (their unanswered messages are answered again elsewhere)"
            ),
            (false, groups, gateways) => format!(
                "draining: {groups} group(s) left ({} finishing a turn), {gateways} gateway(s) left",
                self.turns
            ),
        }
    }
}

/// One frame as its line, newline included.
pub fn line<T: Serialize>(frame: &T) -> String {
    let mut line = serde_json::to_string(frame).expect("control frames serialize");
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_single_json_lines_whatever_the_text() {
        let out = ServerFrame::Out { text: "two\nlines {\"frame\":\"end\"}".into() };
        let wire = line(&out);
        assert_eq!(wire.matches('\n').count(), 1, "{wire}");
        assert_eq!(serde_json::from_str::<ServerFrame>(wire.trim_end()).unwrap(), out);
    }

    #[test]
    fn requests_read_as_written() {
        let chat = Request::Chat { group: "team".into(), sender: "ana".into(), wait_limit_ms: 1500, attach: vec![] };
        assert_eq!(line(&chat), "{\"op\":\"chat\",\"group\":\"team\",\"sender\":\"ana\",\"wait_limit_ms\":1500}\n");
        let changed = Request::Changed(Change::Group { group: "team".into() });
        assert_eq!(line(&changed), "{\"op\":\"changed\",\"what\":\"group\",\"group\":\"team\"}\n");
        for request in [chat, changed, Request::Changed(Change::Schedules)] {
            assert_eq!(serde_json::from_str::<Request>(line(&request).trim_end()).unwrap(), request);
        }
    }
}
