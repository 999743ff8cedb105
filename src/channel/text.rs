//! What every chat adapter reads and says the same way: the trigger rule,
//! the `/status` answer, the refusal of a message pincer could not take, and
//! a bounded memory of chats already reported.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::router::{GroupStatus, RouteError};
use crate::session::QueueHold;
use crate::store::StoreError;

/// Whether `text` starts with `word` as a whole word, in any case: `@Andy,`
/// and `@andy hi` start with `@Andy`, `@Andyx` does not.
pub fn starts_with_word(text: &str, word: &str) -> bool {
    let Some(head) = text.get(..word.len()) else {
        return false;
    };
    let rest = &text[word.len()..];
    head.to_lowercase() == word.to_lowercase() && !rest.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// What the chat is told when its message could not be taken (most often:
/// the store cannot be written). The message reached no agent.
pub fn not_taken(e: &RouteError) -> String {
    format!(
        "pincer could not take this message, so the agent did not get it ({e}). If no answer comes, send it \
         again in a few minutes; if this repeats, whoever runs pincer should check its disk and log."
    )
}

/// Told in a Telegram group's new chat (it became a supergroup) when the
/// store cannot follow the move, so the group no longer answers there.
pub fn move_not_recorded(e: &StoreError, to: i64) -> String {
    format!(
        "This chat has a new id, {to}, and pincer could not record that ({e}), so the agent does not answer \
         here yet. Whoever runs pincer should check its disk and log, then run `pincer groups set NAME \
         --telegram {to}`."
    )
}

/// `/status` text.
pub fn describe_status(group: &GroupStatus) -> String {
    let status = &group.session;
    let session = match (status.live, status.live_since, &status.session_id) {
        (true, Some(since), _) => format!("live since {} ({} ago)", clock(since), ago(since)),
        (true, None, _) => "live".to_owned(),
        (false, _, Some(_)) => "not running; the next message resumes the conversation".to_owned(),
        (false, _, None) => "none yet; the next message starts one".to_owned(),
    };
    let turn = if status.in_turn { "working on a turn" } else { "idle" };
    let pending = match status.pending {
        0 => String::new(),
        n => format!(", {n} message(s) waiting for an answer"),
    };
    let replies = match group.waiting_replies {
        0 => String::new(),
        n => format!("\nReplies waiting to reach this chat: {n}"),
    };
    let held = match status.held {
        None => String::new(),
        Some(QueueHold::Budget { until }) => {
            format!(
                "\nHeld: the budget is reached; new messages wait until {} (or until it is raised)",
                day_and_clock(until)
            )
        }
        Some(QueueHold::CannotStart { retry_at }) => {
            format!(
                "\nHeld: the agent cannot start; messages wait, and it is tried again at {}",
                day_and_clock(retry_at)
            )
        }
    };
    format!(
        "Session: {session}\nAgent: {turn}{pending}{held}\nBackground tasks running: {}{replies}\nCost so far: ${:.4}",
        status.running_tasks, group.cost_usd
    )
}

fn clock(t: SystemTime) -> String {
    let stamp = crate::domain::printable_time(t).to_string();
    stamp.get(11..16).map_or(stamp.clone(), |hm| format!("{hm} UTC"))
}

/// "2027-01-15 08:00 UTC".
fn day_and_clock(t: SystemTime) -> String {
    let stamp = crate::domain::printable_time(t).to_string();
    stamp.get(..16).map_or(stamp.clone(), |at| format!("{} UTC", at.replace('T', " ")))
}

fn ago(t: SystemTime) -> String {
    let secs = SystemTime::now().duration_since(t).map_or(0, |d| d.as_secs());
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// Keys seen before, so each unknown chat is logged once. Bounded: past the
/// cap the oldest is forgotten (and would be logged again).
pub struct FirstSight<K>(Mutex<(HashSet<K>, VecDeque<K>)>);

/// How many keys [`FirstSight`] remembers.
const FIRST_SIGHT_CAP: usize = 4096;

impl<K> Default for FirstSight<K> {
    fn default() -> Self {
        FirstSight(Mutex::new((HashSet::new(), VecDeque::new())))
    }
}

impl<K: Eq + Hash + Clone> FirstSight<K> {
    /// True the first time `key` is seen.
    pub fn first(&self, key: &K) -> bool {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, order) = &mut *guard;
        if !seen.insert(key.clone()) {
            return false;
        }
        order.push_back(key.clone());
        if order.len() > FIRST_SIGHT_CAP {
            if let Some(old) = order.pop_front() {
                seen.remove(&old);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionStatus;

    #[test]
    fn a_key_is_new_once_and_the_memory_is_bounded() {
        let seen = FirstSight::default();
        assert!(seen.first(&5));
        assert!(!seen.first(&5));
        for id in 0..(FIRST_SIGHT_CAP as i64 + 10) {
            seen.first(&(1000 + id));
        }
        assert!(seen.first(&5), "forgotten after the cap");
        assert!(seen.0.lock().unwrap().1.len() <= FIRST_SIGHT_CAP);
    }

    #[test]
    fn status_says_what_runs_and_the_cost() {
        let status = SessionStatus {
            live: true,
            live_since: Some(SystemTime::now()),
            session_id: Some("s".into()),
            pending: 1,
            in_turn: true,
            running_tasks: 2,
            resend_at: None,
            held: None,
        };
        let text = describe_status(&GroupStatus { session: status, cost_usd: 0.01234, waiting_replies: 3 });
        assert!(text.contains("live since"), "{text}");
        assert!(text.contains("working on a turn, 1 message(s) waiting"), "{text}");
        assert!(text.contains("Background tasks running: 2"), "{text}");
        assert!(text.contains("$0.0123"), "{text}");
        assert!(text.contains("Replies waiting to reach this chat: 3"), "{text}");
        let session = SessionStatus { session_id: Some("s".into()), ..SessionStatus::default() };
        let idle = describe_status(&GroupStatus { session, cost_usd: 0.0, waiting_replies: 0 });
        assert!(!idle.contains("Replies waiting"), "{idle}");
        assert!(idle.contains("resumes the conversation"), "{idle}");
        let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let session = SessionStatus { held: Some(QueueHold::Budget { until }), ..SessionStatus::default() };
        let held = describe_status(&GroupStatus { session, cost_usd: 0.0, waiting_replies: 0 });
        assert!(held.contains("Held: the budget is reached; new messages wait until 2027-01-15 08:00 UTC"), "{held}");
    }

    #[test]
    fn a_trigger_is_a_whole_leading_word() {
        assert!(starts_with_word("@Andy hi", "@Andy"));
        assert!(starts_with_word("@ANDY", "@Andy"));
        assert!(!starts_with_word("@Andyx", "@Andy"));
        assert!(!starts_with_word("@An", "@Andy"));
        assert!(starts_with_word("hey bot, go", "hey bot"));
    }
}
