//! Hangs, crashes and panics: what the session does about each, and when.

use super::{between, Rig};
use crate::session::fake_cli::Reply;
use crate::session::lifecycle::FIRST_CRASH_BACKOFF;
use crate::session::supervisor::FIRST_BACKOFF;

#[tokio::test(start_paused = true)]
async fn a_hung_turn_is_interrupted_and_its_message_written_to_a_resumed_process() {
    let rig = Rig::new().await;
    rig.cli.script([Reply::Silent]);
    let id = rig.say("are you there").await;
    rig.until("the second process", || rig.cli.starts().len() == 2).await;
    rig.until_state(id, "answered").await;

    let written = rig.cli.written();
    let first = &written[0];
    let interrupt = written.iter().find(|w| w.line["request"]["subtype"] == "interrupt").expect("an interrupt");
    assert_eq!(interrupt.process, 1);
    assert!(between(first.at, interrupt.at) >= rig.config.claude.turn_timeout, "not before turn_timeout");
    let starts = rig.cli.starts();
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1].resume.as_deref(), Some("fake-session-1"), "the conversation is kept");
    let messages = rig.cli.user_messages();
    assert_eq!(messages.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [1, 2], "written again to the new one");
    assert_eq!(messages[0].1, messages[1].1);
    let notices = rig.notices().await;
    assert_eq!(
        notices,
        ["The agent gave no sign of life for 5s, so pincer interrupted its turn and restarted the session (the \
          conversation is kept); sending your message again."]
    );
    let replies = rig.replies().await;
    assert_eq!(replies.len(), 1, "the interrupted result is stored, not sent: {replies:?}");
    assert!(rig.events().await.iter().any(|(kind, _)| kind == "hung"));
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_restarts_the_cli_after_the_backoff_and_not_before() {
    let rig = Rig::new().await;
    rig.cli.script([Reply::Crash]);
    let id = rig.say("hi").await;
    rig.until_state(id, "answered").await;

    let (starts, ended) = (rig.cli.starts(), rig.cli.ended());
    assert_eq!(starts.len(), 2);
    let waited = between(ended[0].1, starts[1].at);
    assert!(waited >= FIRST_CRASH_BACKOFF, "restarted after {waited:?}, before the backoff ended");
    assert_eq!(
        rig.notices().await,
        ["The agent stopped unexpectedly (exit status: 1); restarting it and resending your message."]
    );
    let kinds: Vec<String> = rig.events().await.into_iter().map(|(kind, _)| kind).collect();
    assert_eq!(kinds, ["started", "crashed", "started"], "it died before reporting a session");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn crashes_past_max_restarts_give_up_on_the_message() {
    let mut config = super::test_config();
    config.claude.max_restarts = 1;
    let rig = Rig::with(config, Default::default(), None, Default::default()).await;
    rig.cli.script([Reply::Crash, Reply::Crash]);
    let id = rig.say("doomed").await;
    rig.until_state(id, "failed").await;
    rig.until_stored("the chat is told", || async { rig.notices().await.len() == 2 }).await;
    let notices = rig.notices().await;
    assert!(notices[1].contains("2 times in a row, so pincer gave up"), "{notices:?}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicked_actor_is_started_again_after_a_backoff_and_takes_up_the_queue() {
    let rig = Rig::new().await;
    rig.cli.panic_on_start(1);
    let first = rig.say("this one panics").await;
    rig.until_event("actor_restarted").await;
    let events = rig.events().await;
    let (_, why) = events.iter().find(|(kind, _)| kind == "actor_restarted").unwrap();
    assert_eq!(why.as_deref(), Some("it panicked: the fake CLI's scripted panic at start"));

    // The message the ended actor held waited in the store: the new one answers it.
    rig.until("the new actor starts the CLI", || rig.cli.starts().len() == 1).await;
    rig.until_state(first, "answered").await;
    let waited = between(rig.cli.panicked_at()[0], rig.cli.starts()[0].at);
    assert!(waited >= FIRST_BACKOFF, "the new actor started after the backoff, not before: {waited:?}");
    let second = rig.say("and this one too").await;
    rig.until_state(second, "answered").await;
    let replies = rig.replies().await;
    assert!(replies[0].contains("this one panics") && replies[1].contains("and this one too"), "{replies:?}");
    rig.until("the session is idle again: nothing the ended actor held counts", || !rig.handle.busy()).await;
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_session_stopped_at_shutdown_says_so() {
    let rig = Rig::new().await;
    let handle = rig.handle.clone();
    rig.stop().await;
    let msg = crate::domain::Inbound::new("team".parse().unwrap(), crate::domain::Source::Console, "ann", "late");
    let command = crate::session::Command::Message {
        id: crate::domain::InboundId(1),
        msg,
        missed: Default::default(),
        done: None,
    };
    let refused = handle.send(command).await.unwrap_err();
    assert!(refused.to_string().contains("pincer is shutting down"), "{refused}");
}

#[tokio::test(start_paused = true)]
async fn a_session_with_nothing_to_do_retires_and_wakes_no_more() {
    let rig = Rig::new().await;
    let id = rig.say("hello").await;
    rig.until_state(id, "answered").await;
    tokio::time::advance(rig.config.claude.idle_timeout).await;
    rig.until("the idle process closes", || !rig.handle.status().live).await;
    assert!(!rig.handle.is_retired(), "closing the process is not retiring");
    tokio::time::advance(crate::session::actor::RETIRE_AFTER).await;
    rig.until("the actor retires", || rig.handle.is_retired()).await;
    assert!(!rig.handle.wake(), "a retired session takes nothing: the router starts a fresh one");
    assert!(rig.events().await.iter().all(|(kind, _)| kind != "actor_restarted"), "retiring is not a crash");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_messages_images_go_with_it_and_again_with_it_to_the_next_process() {
    use crate::domain::media::{Attachment, MediaKind, ModelImage, Outcome};
    use crate::domain::{Inbound, Source};
    let rig = Rig::new().await;
    rig.cli.script([Reply::Crash]);
    let mut msg = Inbound::new(rig.group.clone(), Source::Console, "ann", "what is this");
    let mut photo = Attachment::bounded(MediaKind::Photo, "f1");
    photo.outcome = Outcome::Saved {
        path: "inbox/2026-11-24/1-photo.jpg".into(),
        bytes: 3,
        transcript: None,
        transcript_note: None,
        shown: true,
        image_note: None,
    };
    msg.media = vec![photo];
    // Stored `preparing` first, as the preparer will: a session that looks
    // at its queue before the images are in must not take the message.
    let id = rig.store.queue().insert_inbound(&msg, crate::store::InboundState::Preparing).await.unwrap();
    let image = ModelImage { media_type: "image/jpeg".into(), data: vec![0xff, 0xd8, 0xff] };
    rig.store.queue().test_insert_images(id, std::slice::from_ref(&image)).await.unwrap();
    rig.store.queue().set_inbound_state(&[id], crate::store::InboundState::Queued).await.unwrap();
    assert!(rig.handle.wake());
    rig.until_state(id, "answered").await;

    let written: Vec<_> = rig.cli.written().into_iter().filter(|w| w.line["type"] == "user").collect();
    assert_eq!(written.iter().map(|w| w.process).collect::<Vec<_>>(), [1, 2], "written again after the crash");
    for w in &written {
        let blocks = w.line["message"]["content"].as_array().expect("content blocks");
        assert!(blocks[0]["text"]
            .as_str()
            .unwrap()
            .contains("saved as inbox/2026-11-24/1-photo.jpg, shown to you below"));
        assert_eq!(blocks[1]["source"]["media_type"], "image/jpeg");
        assert_eq!(blocks[1]["source"]["data"], "/9j/", "the stored bytes, base64");
    }
    rig.stop().await;
}
