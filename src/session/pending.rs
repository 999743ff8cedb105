//! Messages written to a CLI that no turn has answered yet.
//!
//! A message is *taken* when the CLI replays it (`--replay-user-messages`) and
//! *answered* by the next `result` after that. Whatever is not answered when a
//! process dies is written again to its successor, so no message is lost.

use std::collections::VecDeque;
use std::time::Instant;

use super::rights::Voice;
use crate::claude::protocol;
use crate::domain::media::ModelImage;
use crate::domain::InboundId;

#[derive(Debug)]
pub struct PendingMessage {
    pub id: InboundId,
    pub text: String,
    /// The uuid of the latest write; a resend gets a new one.
    pub uuid: String,
    pub taken: bool,
    pub accepted_at: Instant,
    /// Already sent again once after a usage limit: a second limit gives up on it.
    pub after_limit: bool,
    /// Whose words it carries: a member's bound the tools while it is here.
    pub voice: Voice,
    /// The images shown with it (written again with it after a restart).
    pub images: Vec<ModelImage>,
    /// The display names of the members whose words it carries (`rights::member_senders`).
    pub steered_by: Vec<String>,
}

impl PendingMessage {
    /// The line that writes it to the CLI.
    pub fn line(&self) -> String {
        protocol::user_message(&self.text, &self.images, &self.uuid)
    }
}

#[derive(Debug, Default)]
pub struct Pending {
    messages: VecDeque<PendingMessage>,
    /// Whether this process has replayed anything. A CLI that never replays
    /// gets the cruder rule: a result answers everything written before it.
    replays_seen: bool,
}

impl Pending {
    pub fn push(&mut self, id: InboundId, text: String, accepted_at: Instant, voice: Voice) -> &mut PendingMessage {
        self.messages.push_back(PendingMessage {
            id,
            text,
            uuid: new_uuid(),
            taken: false,
            accepted_at,
            after_limit: false,
            voice,
            images: Vec::new(),
            steered_by: Vec::new(),
        });
        self.messages.back_mut().expect("just pushed")
    }

    pub fn last(&self) -> Option<&PendingMessage> {
        self.messages.back()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whose words the unsettled messages carry.
    pub fn voices(&self) -> impl Iterator<Item = Voice> + '_ {
        self.messages.iter().map(|m| m.voice)
    }

    /// The members whose words the unsettled messages carry, each once.
    pub fn steered_by(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for name in self.messages.iter().flat_map(|m| m.steered_by.iter()) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Marks the message with this uuid as taken into a turn.
    pub fn mark_taken(&mut self, uuid: &str) {
        if let Some(m) = self.messages.iter_mut().find(|m| m.uuid == uuid) {
            m.taken = true;
            self.replays_seen = true;
        }
    }

    /// A result arrived: removes and returns the messages it answered.
    pub fn answer(&mut self) -> Vec<PendingMessage> {
        let replays_seen = self.replays_seen;
        let (answered, open): (Vec<_>, Vec<_>) = self.messages.drain(..).partition(|m| m.taken || !replays_seen);
        self.messages = open.into();
        answered
    }

    /// Takes back a message held out of the queue (waiting for a usage limit
    /// to reset), to be written again with a new uuid; returns it.
    pub fn requeue(&mut self, mut message: PendingMessage) -> &PendingMessage {
        message.taken = false;
        message.uuid = new_uuid();
        self.messages.push_back(message);
        self.messages.back().expect("just pushed")
    }

    /// A new process starts: every message is written again, with new uuids.
    pub fn prepare_resend(&mut self) -> impl Iterator<Item = &PendingMessage> {
        self.replays_seen = false;
        for m in &mut self.messages {
            m.taken = false;
            m.uuid = new_uuid();
        }
        self.messages.iter()
    }

    /// Takes every message out (to wait for a process that could not start).
    pub fn take_all(&mut self) -> Vec<PendingMessage> {
        self.messages.drain(..).collect()
    }

    /// Gives up on every message and returns their ids.
    pub fn drain_ids(&mut self) -> Vec<InboundId> {
        self.messages.drain(..).map(|m| m.id).collect()
    }
}

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(messages: Vec<PendingMessage>) -> Vec<InboundId> {
        messages.into_iter().map(|m| m.id).collect()
    }

    fn pending_with(n: i64) -> (Pending, Vec<String>) {
        let mut p = Pending::default();
        let uuids =
            (0..n).map(|i| p.push(InboundId(i), format!("m{i}"), Instant::now(), Voice::Admin).uuid.clone()).collect();
        (p, uuids)
    }

    #[test]
    fn a_result_answers_only_taken_messages() {
        let (mut p, uuids) = pending_with(2);
        p.mark_taken(&uuids[0]);
        assert_eq!(ids(p.answer()), vec![InboundId(0)]);
        assert_eq!(p.len(), 1);
        p.mark_taken(&uuids[1]);
        assert_eq!(ids(p.answer()), vec![InboundId(1)]);
        assert!(p.is_empty());
    }

    #[test]
    fn without_replays_a_result_answers_everything() {
        let (mut p, _) = pending_with(2);
        assert_eq!(ids(p.answer()), vec![InboundId(0), InboundId(1)]);
    }

    #[test]
    fn a_requeued_message_is_written_anew_and_remembers_its_limit() {
        let (mut p, uuids) = pending_with(1);
        p.mark_taken(&uuids[0]);
        let mut held = p.answer().pop().unwrap();
        held.after_limit = true;
        let back = p.requeue(held);
        assert!(!back.taken && back.after_limit && back.uuid != uuids[0]);
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn resend_renews_uuids_and_forgets_taken() {
        let (mut p, uuids) = pending_with(1);
        p.mark_taken(&uuids[0]);
        let renewed: Vec<_> = p.prepare_resend().map(|m| (m.uuid.clone(), m.taken)).collect();
        assert_ne!(renewed[0].0, uuids[0]);
        assert!(!renewed[0].1);
        assert_eq!(p.drain_ids(), vec![InboundId(0)]);
    }
}
