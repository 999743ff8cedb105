//! The crate's real event types, built through their public builders, read
//! into pincer's terms.

use std::sync::Arc;

use whatsapp_rust::buffa::MessageField;
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::types::events::{
    BatchOrigin, ConnectFailure, Connected, Disconnected, InboundMessage, LoggedOut, MessageBatch, StreamReplaced,
};
use whatsapp_rust::types::message::{MessageInfo, MessageSource};
use whatsapp_rust::wacore::net::DisconnectReason;

use super::*;

const GROUP: &str = "120363012345678901@g.us";

fn inbound(sender: &str, id: &str, msg: wa::Message) -> InboundMessage {
    let info = MessageInfo {
        id: id.into(),
        push_name: "Alice".into(),
        timestamp: whatsapp_rust::chrono::Utc::now(),
        source: MessageSource {
            chat: GROUP.parse().unwrap(),
            sender: sender.parse().unwrap(),
            is_group: true,
            ..Default::default()
        },
        ..Default::default()
    };
    InboundMessage::builder().message(Arc::new(msg)).info(Arc::new(info)).build()
}

#[test]
fn a_group_text_names_its_chat_sender_and_id() {
    let m = message(&inbound("4915100000001@s.whatsapp.net", "3EB0A", wa::Message::text("@Andy hi"))).unwrap();
    assert_eq!(m.chat, GROUP);
    assert_eq!(m.message_id, "3EB0A");
    assert_eq!(m.id, format!("{GROUP}/4915100000001@s.whatsapp.net/3EB0A"));
    assert_eq!(m.sender_number.as_deref(), Some("4915100000001"));
    assert_eq!((m.sender_name.as_str(), m.text.as_str()), ("Alice", "@Andy hi"));
    assert!(m.is_group && !m.from_me);
    assert!(m.sent_at.is_some());
}

#[test]
fn a_lid_sender_gets_its_number_from_the_alternate_jid() {
    let mut m = inbound("123456789@lid", "3EB0B", wa::Message::text("hi"));
    let mut info = (*m.info).clone();
    info.source.sender_alt = Some("4915100000002@s.whatsapp.net".parse().unwrap());
    m.info = Arc::new(info);
    let read = message(&m).unwrap();
    assert_eq!(read.sender_number.as_deref(), Some("4915100000002"));
    let unknown = message(&inbound("123456789@lid", "3EB0C", wa::Message::text("hi"))).unwrap();
    assert_eq!(unknown.sender_number, None, "a LID alone tells no number");
}

#[test]
fn mentions_and_quotes_are_read_from_the_context() {
    let mention = wa::ContextInfo { mentioned_jid: vec!["987654321@lid".into()], ..Default::default() };
    let m =
        message(&inbound("1@s.whatsapp.net", "M", wa::Message::text_with_context("@987654321 hi", mention))).unwrap();
    assert_eq!(m.mentions, ["987654321"]);

    let quote = wa::ContextInfo {
        stanza_id: Some("3EB0ORIG".into()),
        participant: Some("4915100000009:3@s.whatsapp.net".into()),
        quoted_message: MessageField::some(wa::Message::text("what is 2+2?")),
        ..Default::default()
    };
    let r = message(&inbound("1@s.whatsapp.net", "R", wa::Message::text_with_context("and 3+3?", quote))).unwrap();
    assert_eq!(r.quoted_id.as_deref(), Some("3EB0ORIG"));
    assert_eq!(r.quoted_sender.as_deref(), Some("4915100000009"), "the device part is dropped");
    assert_eq!(r.quoted_text.as_deref(), Some("what is 2+2?"));
}

#[test]
fn messages_without_text_are_skipped() {
    assert!(message(&inbound("1@s.whatsapp.net", "X", wa::Message::default())).is_none());
}

#[test]
fn connection_events_become_states_and_hook_taken_messages_are_not_taken_twice() {
    let state = |e: &Event| match read(e) {
        Happened::Connection(s, _) => Some(s),
        _ => None,
    };
    assert_eq!(state(&Event::Connected(Connected::builder().build())), Some(ConnState::Connected));
    let dropped = Disconnected::builder().reason(DisconnectReason::StreamEnded).build();
    assert_eq!(state(&Event::Disconnected(dropped)), Some(ConnState::Disconnected));
    let out = LoggedOut::builder().on_connect(false).reason(ConnectFailureReason::LoggedOut).build();
    assert_eq!(state(&Event::LoggedOut(out)), Some(ConnState::LoggedOut));
    assert_eq!(state(&Event::StreamReplaced(StreamReplaced::builder().build())), Some(ConnState::Replaced));
    let busy =
        ConnectFailure::builder().reason(ConnectFailureReason::ServiceUnavailable).message(String::new()).build();
    assert_eq!(state(&Event::ConnectFailure(busy)), Some(ConnState::Disconnected));

    let batch = |committed| {
        let m = inbound("1@s.whatsapp.net", "B", wa::Message::text("hi"));
        Event::Messages(
            MessageBatch::builder()
                .messages(vec![m].into())
                .origin(BatchOrigin::Live)
                .hook_committed(committed)
                .build(),
        )
    };
    assert!(matches!(read(&batch(false)), Happened::Messages(m) if m.len() == 1));
    assert!(matches!(read(&batch(true)), Happened::Other));
}

#[test]
fn a_photo_comes_with_its_caption_and_one_without_a_caption_still_comes() {
    let photo = |caption: Option<&str>| wa::Message {
        image_message: MessageField::some(wa::message::ImageMessage {
            direct_path: Some("/v/t62/abc".into()),
            media_key: Some(vec![3; 32]),
            caption: caption.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    };
    let m = message(&inbound("4915100000001@s.whatsapp.net", "3EB0P", photo(Some("look")))).unwrap();
    assert_eq!((m.text.as_str(), m.media.len()), ("look", 1));
    let bare = message(&inbound("4915100000001@s.whatsapp.net", "3EB0Q", photo(None))).unwrap();
    assert_eq!((bare.text.as_str(), bare.media.len()), ("", 1));
    assert!(message(&inbound("4915100000001@s.whatsapp.net", "3EB0R", wa::Message::default())).is_none());
}
