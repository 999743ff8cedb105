use std::time::UNIX_EPOCH;

use super::*;
use crate::domain::media::{Attachment, MediaKind, Outcome};

fn settings(requires_trigger: bool, trigger: Option<&str>) -> GroupSettings {
    GroupSettings { requires_trigger, trigger: trigger.map(str::to_owned), ..GroupSettings::default() }
}

fn msg(text: &str) -> Arrival {
    Arrival {
        at: ChatAddress::telegram(-1, None),
        external_id: "-1/1".into(),
        sender_id: Some("1".into()),
        sender_name: "Alice".into(),
        text: text.into(),
        sent_at: UNIX_EPOCH,
        reply_to: None,
        addressed: Addressed::default(),
        private: false,
        media: Vec::new(),
        album: None,
    }
}

fn mentioning() -> Addressed {
    Addressed { mentions_bot: true, ..Addressed::default() }
}

#[test]
fn the_trigger_is_a_case_insensitive_leading_word() {
    let g = settings(true, None);
    assert!(engages(&msg("@Andy hi"), &g, "Andy", false));
    assert!(engages(&msg("  @andy, hi"), &g, "Andy", false));
    assert!(engages(&msg("@ANDY"), &g, "Andy", false));
    assert!(!engages(&msg("@Andyx hi"), &g, "Andy", false));
    assert!(!engages(&msg("hi @Andy"), &g, "Andy", false));
    assert!(!engages(&msg("lunch?"), &g, "Andy", false));
    assert!(engages(&msg("hey bot, go"), &settings(true, Some("hey bot")), "Andy", false));
}

#[test]
fn mentions_replies_private_chats_and_no_trigger_groups_engage() {
    let g = settings(true, None);
    assert!(engages(&Arrival { addressed: mentioning(), ..msg("what do you think @pincer_bot") }, &g, "Andy", false));
    assert!(engages(&msg("and then?"), &g, "Andy", true), "a reply to the bot");
    assert!(engages(&Arrival { private: true, ..msg("hello") }, &g, "Andy", false));
    assert!(engages(&msg("anything"), &settings(false, None), "Andy", false));
    // Whom a reply answers is decided before `engages`; the id alone is not it.
    let replying = Addressed { replies_to: Some("m1".into()), ..Addressed::default() };
    assert!(!engages(&Arrival { addressed: replying, ..msg("and then?") }, &g, "Andy", false));
}

#[test]
fn only_a_listed_sender_is_an_admin() {
    let mut g = settings(true, None);
    assert!(!by_admin(Some("4915100000001"), &g), "a group without admins has none");
    g.admins = vec!["4915100000001".into(), "42".into()];
    assert!(by_admin(Some("4915100000001"), &g));
    assert!(by_admin(Some("42"), &g));
    assert!(!by_admin(Some("4"), &g));
    assert!(!by_admin(None, &g), "a sender the platform did not name");
}

#[test]
fn a_quote_is_who_and_the_first_eighty_characters() {
    assert_eq!(quote("4915100000001", "lunch at noon?"), "4915100000001: lunch at noon?");
    let long = "é".repeat(100);
    assert_eq!(quote("Bob", &long), format!("Bob: {}", "é".repeat(80)));
}

#[test]
fn a_failed_store_is_refused_in_the_chat_on_every_platform() {
    for platform in [Redelivery::Never, Redelivery::UntilAcknowledged] {
        assert_eq!(platform.on_failure(Step::Store), OnFailure::Refuse { tell: true });
    }
}

#[test]
fn on_a_cluster_gateway_nothing_is_refused_the_next_gateway_is_brought_it() {
    for step in [Step::Lookup, Step::Reachable, Step::Store] {
        assert_eq!(Redelivery::ToTheNextGateway.on_failure(step), OnFailure::Refuse { tell: false }, "{step:?}");
    }
}

#[test]
fn a_platform_that_brings_a_message_again_gets_it_back_on_any_failure() {
    let again = Redelivery::UntilAcknowledged;
    assert_eq!(again.on_failure(Step::Lookup), OnFailure::Refuse { tell: false });
    assert_eq!(again.on_failure(Step::Reachable), OnFailure::Refuse { tell: false });
}

#[test]
fn a_platform_that_never_brings_it_again_hears_of_a_failed_lookup_and_not_of_bookkeeping() {
    let once = Redelivery::Never;
    assert_eq!(once.on_failure(Step::Lookup), OnFailure::Refuse { tell: true });
    assert_eq!(once.on_failure(Step::Reachable), OnFailure::GoOn);
}

#[test]
fn an_arrival_is_stored_with_everything_the_platform_told() {
    let photo = Attachment {
        kind: MediaKind::Photo,
        fetch: "file-1".into(),
        file_name: None,
        mime: None,
        size: None,
        duration: None,
        width: None,
        height: None,
        outcome: Outcome::Waiting,
    };
    let arrival = Arrival {
        reply_to: Some(quote("Bob", "lunch?")),
        media: vec![photo.clone()],
        album: Some("a1".into()),
        ..msg("@Andy look")
    };
    let inbound = arrival.into_inbound("g".parse().unwrap());
    assert_eq!(inbound.group.as_str(), "g");
    assert_eq!(inbound.source, Source::Chat(crate::domain::Platform::Telegram));
    assert_eq!((inbound.sender.as_str(), inbound.sender_id.as_deref()), ("Alice", Some("1")));
    assert_eq!(inbound.text, "@Andy look");
    assert_eq!(inbound.sent_at, UNIX_EPOCH);
    assert_eq!(inbound.reply_to.as_deref(), Some("Bob: lunch?"));
    assert_eq!(inbound.external_id.as_deref(), Some("-1/1"));
    assert_eq!(inbound.media, vec![photo]);
    assert_eq!(inbound.album.as_deref(), Some("a1"));
}
