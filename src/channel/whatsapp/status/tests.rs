//! The WhatsApp status port under paused time, over a recording client.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::channel::whatsapp::OwnIds;
use crate::domain::Platform;

const CHAT: &str = "120363000000000001@g.us";

/// Records every call as one line; edits fail while `fail_edits` is set.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    fail_edits: AtomicBool,
    next: AtomicU64,
}

impl Recorder {
    fn note(&self, line: String) {
        self.calls.lock().unwrap().push(line);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Status messages sent and not revoked.
    fn alive(&self) -> Vec<String> {
        let calls = self.calls();
        let sent = calls.iter().filter_map(|c| c.strip_prefix("sent ").map(|s| s.split(' ').next().unwrap()));
        sent.filter(|id| !calls.contains(&format!("revoke {id}"))).map(str::to_owned).collect()
    }
}

impl WaClient for Recorder {
    async fn send_text(&self, _chat: &str, text: &str) -> Result<String, WaError> {
        let id = format!("M{}", self.next.fetch_add(1, Ordering::SeqCst));
        self.note(format!("sent {id} {text}"));
        Ok(id)
    }
    async fn composing(&self, _chat: &str, on: bool) -> Result<(), WaError> {
        self.note(format!("composing {on}"));
        Ok(())
    }
    async fn mark_read(&self, _chat: &str, _sender: &str, _id: &str) -> Result<(), WaError> {
        Ok(())
    }
    async fn edit_text(&self, _chat: &str, id: &str, text: &str) -> Result<(), WaError> {
        if self.fail_edits.load(Ordering::SeqCst) {
            self.note(format!("edit failed {id}"));
            return Err(WaError::Other("edit refused".into()));
        }
        self.note(format!("edit {id} {text}"));
        Ok(())
    }
    async fn revoke(&self, _chat: &str, id: &str) -> Result<(), WaError> {
        self.note(format!("revoke {id}"));
        Ok(())
    }
    async fn send_file(
        &self,
        _chat: &str,
        _file: &crate::domain::media::OutboundFile,
        _caption: Option<&str>,
    ) -> Result<String, WaError> {
        Err(WaError::Rejected("status messages send no files".into()))
    }
    async fn download(
        &self,
        _media: &crate::channel::whatsapp::MediaRef,
        _into: crate::media::Capped,
    ) -> Result<crate::media::Capped, WaError> {
        Err(WaError::Rejected("status messages fetch no files".into()))
    }
    async fn react(&self, _chat: &str, sender: &str, id: &str, emoji: &str) -> Result<(), WaError> {
        self.note(format!("react {sender}/{id} {emoji}"));
        Ok(())
    }
    async fn group_subject(&self, _chat: &str) -> Result<String, WaError> {
        Ok(String::new())
    }
    fn own_ids(&self) -> OwnIds {
        OwnIds::default()
    }
}

fn at() -> ChatAddress {
    ChatAddress { platform: Platform::WhatsApp, chat: CHAT.into(), thread: None }
}

fn port() -> (Arc<Recorder>, WhatsAppStatus<Recorder>) {
    let client = Arc::new(Recorder::default());
    (client.clone(), WhatsAppStatus::new(client))
}

async fn pass(d: Duration) {
    tokio::time::advance(d).await;
}

#[tokio::test(start_paused = true)]
async fn a_slot_edits_in_its_window_then_reposts_at_most_once_a_minute() {
    let start = Instant::now();
    let mut slot = Slot::new("A".into(), start);
    assert_eq!(slot.plan(start), Plan::Edit("A".into()));
    assert_eq!(slot.plan(start + EDIT_WINDOW - Duration::from_secs(1)), Plan::Edit("A".into()));
    // Too old to edit: replaced, the old one named for deletion.
    assert_eq!(slot.plan(start + EDIT_WINDOW), Plan::Repost("A".into()));
    slot.reposted("B".into(), start + EDIT_WINDOW);
    assert_eq!(slot.plan(start + EDIT_WINDOW + Duration::from_secs(1)), Plan::Edit("B".into()));

    slot.edit_failed();
    let t = start + EDIT_WINDOW;
    assert_eq!(slot.plan(t + Duration::from_secs(59)), Plan::Presence);
    assert_eq!(slot.plan(t + REPOST_EVERY), Plan::Repost("B".into()));
    slot.reposted("C".into(), t + REPOST_EVERY);
    assert_eq!(slot.plan(t + REPOST_EVERY + Duration::from_secs(30)), Plan::Presence, "failed edits stay failed");
    assert_eq!(slot.handed, "A", "the presenter's id never changes");
}

#[tokio::test(start_paused = true)]
async fn post_edit_delete_and_react_reach_the_client() {
    let (client, port) = port();
    let id = port.post(&at(), "Working · 6 s", true).await.unwrap();
    port.edit(&at(), &id, "Working · 9 s", false).await.unwrap();
    port.react(&at(), &format!("{CHAT}/4915100000001@s.whatsapp.net/3EB0AA"), "👀").await.unwrap();
    port.delete(&at(), &id).await.unwrap();
    assert_eq!(
        client.calls(),
        vec![
            format!("sent {id} Working · 6 s\n\n{STOP_HINT}"),
            format!("edit {id} Working · 9 s"),
            "react 4915100000001@s.whatsapp.net/3EB0AA 👀".to_owned(),
            format!("revoke {id}"),
        ]
    );
    assert!(client.alive().is_empty());
}

/// Lets spawned tasks whose time has come run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_edit_shows_composing_and_reposts_once_a_minute_never_two_alive() {
    let (client, port) = port();
    let id = port.post(&at(), "s0", false).await.unwrap();
    client.fail_edits.store(true, Ordering::SeqCst);

    pass(Duration::from_secs(5)).await;
    port.edit(&at(), &id, "s1", false).await.unwrap();
    assert_eq!(client.calls()[1..], [format!("edit failed {id}"), "composing true".to_owned()]);

    // Within the minute: composing only, and no more edit attempts.
    pass(Duration::from_secs(30)).await;
    port.edit(&at(), &id, "s2", false).await.unwrap();
    assert_eq!(client.calls().last().unwrap(), "composing true");
    assert_eq!(client.calls().iter().filter(|c| c.starts_with("edit")).count(), 1);

    // A minute after the post, the newest state held back comes: the old
    // message goes first, then the new one.
    pass(Duration::from_secs(25)).await;
    settle().await;
    let calls = client.calls();
    assert_eq!(calls[calls.len() - 2..], [format!("revoke {id}"), "sent M1 s2".to_owned()]);
    assert_eq!(client.alive(), vec!["M1".to_owned()]);

    pass(Duration::from_secs(10)).await;
    port.edit(&at(), &id, "s3", false).await.unwrap();
    assert_eq!(client.calls().last().unwrap(), "composing true", "one new message a minute at most");

    // The presenter deletes by the id it was given; the message showing goes,
    // and what was held back for it is dropped.
    port.delete(&at(), &id).await.unwrap();
    assert_eq!(client.calls().last().unwrap(), "revoke M1");
    let before = client.calls().len();
    pass(REPOST_EVERY * 2).await;
    settle().await;
    assert_eq!(client.calls().len(), before, "{:?}", client.calls());
    assert!(client.alive().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_held_back_state_is_posted_when_its_minute_is_up_and_only_the_newest() {
    let (client, port) = port();
    let id = port.post(&at(), "Working", true).await.unwrap();
    client.fail_edits.store(true, Ordering::SeqCst);
    port.edit(&at(), &id, "Working · 3 s", true).await.unwrap();
    pass(Duration::from_secs(3)).await;
    port.edit(&at(), &id, "Done in 6 s", false).await.unwrap();
    settle().await;
    assert_eq!(client.alive(), vec![id.clone()], "nothing new within the minute");
    pass(REPOST_EVERY).await;
    settle().await;
    let calls = client.calls();
    assert_eq!(calls[calls.len() - 2..], [format!("revoke {id}"), "sent M1 Done in 6 s".to_owned()]);
    assert_eq!(calls.iter().filter(|c| c.starts_with("sent")).count(), 2, "the older state is never posted");
}

#[tokio::test(start_paused = true)]
async fn a_status_past_the_edit_window_is_replaced_and_edited_again() {
    let (client, port) = port();
    let id = port.post(&at(), "s0", false).await.unwrap();
    pass(EDIT_WINDOW).await;
    port.edit(&at(), &id, "s1", false).await.unwrap();
    port.edit(&at(), &id, "s2", false).await.unwrap();
    assert_eq!(client.calls()[1..], [format!("revoke {id}"), "sent M1 s1".to_owned(), "edit M1 s2".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn a_second_post_deletes_the_first_and_an_unknown_id_is_edited_as_is() {
    let (client, port) = port();
    let first = port.post(&at(), "a", false).await.unwrap();
    let second = port.post(&at(), "b", false).await.unwrap();
    assert_eq!(client.alive(), vec![second.clone()], "{:?}", client.calls());
    assert!(client.calls().contains(&format!("revoke {first}")));
    port.edit(&at(), "LEFTOVER", "interrupted: pincer restarted", false).await.unwrap();
    assert_eq!(client.calls().last().unwrap(), "edit LEFTOVER interrupted: pincer restarted");
}

#[test]
fn a_reaction_target_is_read_from_any_id_form() {
    assert_eq!(reaction_target("c@g.us/s@lid/ID1"), ("s@lid", "ID1"));
    assert_eq!(reaction_target("s@lid/ID1"), ("s@lid", "ID1"));
    assert_eq!(reaction_target("ID1"), ("", "ID1"));
}
