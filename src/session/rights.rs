//! Whose words the CLI holds, and so what its tool calls may do.
//!
//! In a group whose tools are for admins only (`--tools admins`), a tool call
//! made while any message written to the CLI and not yet settled carries a
//! member's words runs only from the read-only set; anything else asks an
//! admin. A message can be folded into a running turn at any moment, so the
//! rule looks at every unsettled message, not at the one that began the turn.

use crate::domain::media::{Attachment, Outcome};
use crate::domain::{is_admin, Inbound, Missed, Source, ToolsFor};

/// Whose words a message carries, as far as tools go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    /// An admin's, or the operator's (`pincer chat`).
    Admin,
    Member,
}

impl Voice {
    /// A chat message is an admin's when its sender and the sender of every
    /// missed line handed on with it are admins: the agent reads all of them.
    /// A console line is the operator's. A scheduled prompt is a member's: the
    /// agent may have scheduled it on a member's word, and a prompt that runs
    /// later must not get more than the member had.
    pub fn of(msg: &Inbound, missed: &Missed, admins: &[String]) -> Voice {
        let own = sender_is_admin(msg, admins);
        if own && missed.lines.iter().all(|line| is_admin(line.sender_id.as_deref(), admins)) {
            Voice::Admin
        } else {
            Voice::Member
        }
    }
}

/// Whether `msg` itself is an admin's words: a chat message from an admin,
/// or the operator's console line; a scheduled prompt never is.
fn sender_is_admin(msg: &Inbound, admins: &[String]) -> bool {
    match msg.source {
        Source::Console => true,
        Source::Chat(_) => is_admin(msg.sender_id.as_deref(), admins),
        Source::Scheduled => false,
    }
}

/// The display names of the people whose words make `msg` a member's
/// ([`Voice::of`]): its sender and the missed lines' senders who are not
/// admins; a scheduled prompt is named by its sender. Empty for an admin's.
pub fn member_senders(msg: &Inbound, missed: &Missed, admins: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let own = sender_is_admin(msg, admins);
    if !own {
        names.push(msg.sender.clone());
    }
    for line in missed.lines.iter().filter(|line| !is_admin(line.sender_id.as_deref(), admins)) {
        if !names.contains(&line.sender) {
            names.push(line.sender.clone());
        }
    }
    names
}

/// The files members' messages brought into the folder (the attachments
/// pincer saved there, `inbox/…`), each with its sender's display name: a
/// member's file is theirs to plant as much as one a turn wrote on their
/// word, so the next approval prompt names it (`session::provenance`).
pub fn member_files(msg: &Inbound, missed: &Missed, admins: &[String]) -> Vec<(String, String)> {
    let own = sender_is_admin(msg, admins);
    let mut files = Vec::new();
    let mut add = |media: &[Attachment], sender: &str| {
        for attachment in media {
            if let Outcome::Saved { path, .. } = &attachment.outcome {
                files.push((path.clone(), sender.to_owned()));
            }
        }
    };
    if !own {
        add(&msg.media, &msg.sender);
    }
    for line in missed.lines.iter().filter(|line| !is_admin(line.sender_id.as_deref(), admins)) {
        add(&line.media, &line.sender);
    }
    files
}

/// The read-only set that bounds tool calls now, if a member's words may
/// steer them: in an admins-only group while any unsettled message is a member's.
pub fn member_bound(
    tools: ToolsFor,
    member_tools: &[String],
    unsettled: impl IntoIterator<Item = Voice>,
) -> Option<&[String]> {
    let member_speaks = tools == ToolsFor::Admins && unsettled.into_iter().any(|v| v == Voice::Member);
    member_speaks.then_some(member_tools)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::domain::{ChatLine, Platform};

    fn msg(source: Source, sender_id: &str) -> Inbound {
        let mut msg = Inbound::new("g".parse().unwrap(), source, "someone", "hi");
        msg.sender_id = Some(sender_id.to_owned());
        msg
    }

    fn line(sender_id: Option<&str>) -> ChatLine {
        ChatLine {
            sender: "x".into(),
            sender_id: sender_id.map(str::to_owned),
            sent_at: SystemTime::UNIX_EPOCH,
            reply_to: None,
            text: "t".into(),
            media: Vec::new(),
        }
    }

    fn saved(path: &str) -> Attachment {
        let mut attachment = Attachment::bounded(crate::domain::media::MediaKind::Document, "f");
        attachment.outcome = Outcome::Saved {
            path: path.into(),
            bytes: 1,
            transcript: None,
            transcript_note: None,
            shown: false,
            image_note: None,
        };
        attachment
    }

    #[test]
    fn members_saved_files_are_theirs_and_admins_are_not_named() {
        let admins = vec!["42".to_owned()];
        let telegram = Source::Chat(Platform::Telegram);
        let mut member = msg(telegram, "7");
        member.media =
            vec![saved("inbox/2026-11-29/x.tgz"), Attachment::bounded(crate::domain::media::MediaKind::Photo, "g")];
        let mut missed = Missed::default();
        let mut from_admin = line(Some("42"));
        from_admin.media = vec![saved("inbox/2026-11-29/admin.txt")];
        let mut from_member = line(Some("9"));
        from_member.media = vec![saved("inbox/2026-11-29/y.sh")];
        missed.lines = vec![from_admin, from_member];
        assert_eq!(
            member_files(&member, &missed, &admins),
            vec![
                ("inbox/2026-11-29/x.tgz".to_owned(), "someone".to_owned()),
                ("inbox/2026-11-29/y.sh".to_owned(), "x".to_owned()),
            ]
        );
        let mut admin = msg(telegram, "42");
        admin.media = vec![saved("inbox/2026-11-29/z.tgz")];
        assert!(member_files(&admin, &Missed::default(), &admins).is_empty());
        let mut console = msg(Source::Console, "1");
        console.media = vec![saved("inbox/2026-11-29/c.tgz")];
        assert!(member_files(&console, &Missed::default(), &admins).is_empty());
    }

    #[test]
    fn who_speaks() {
        let admins = vec!["42".to_owned()];
        let none = Missed::default();
        let telegram = Source::Chat(Platform::Telegram);
        assert_eq!(Voice::of(&msg(telegram, "42"), &none, &admins), Voice::Admin);
        assert_eq!(Voice::of(&msg(telegram, "43"), &none, &admins), Voice::Member);
        assert_eq!(Voice::of(&msg(Source::Console, "me"), &none, &admins), Voice::Admin, "the operator");
        assert_eq!(Voice::of(&msg(Source::Scheduled, "42"), &none, &admins), Voice::Member);
        let mut no_id = msg(telegram, "42");
        no_id.sender_id = None;
        assert_eq!(Voice::of(&no_id, &none, &admins), Voice::Member);
        let chatter = Missed { lines: vec![line(Some("42")), line(Some("43"))], omitted: 0 };
        assert_eq!(Voice::of(&msg(telegram, "42"), &chatter, &admins), Voice::Member, "a member's missed line");
        let admins_only = Missed { lines: vec![line(Some("42"))], omitted: 2 };
        assert_eq!(Voice::of(&msg(telegram, "42"), &admins_only, &admins), Voice::Admin);
        assert_eq!(
            Voice::of(&msg(telegram, "42"), &Missed { lines: vec![line(None)], omitted: 0 }, &admins),
            Voice::Member
        );
    }

    #[test]
    fn the_members_whose_words_a_message_carries_are_named() {
        let admins = vec!["42".to_owned()];
        let telegram = Source::Chat(Platform::Telegram);
        let none = Missed::default();
        assert!(member_senders(&msg(telegram, "42"), &none, &admins).is_empty(), "an admin's");
        assert!(member_senders(&msg(Source::Console, "me"), &none, &admins).is_empty(), "the operator's");
        assert_eq!(member_senders(&msg(telegram, "43"), &none, &admins), ["someone"]);
        let chatter = Missed { lines: vec![line(Some("42")), line(Some("43")), line(None)], omitted: 0 };
        assert_eq!(member_senders(&msg(telegram, "42"), &chatter, &admins), ["x"], "each once, admins left out");
    }

    #[test]
    fn any_unsettled_members_message_bounds_the_tools_of_an_admins_only_group() {
        let set = vec!["Read".to_owned()];
        use Voice::*;
        assert_eq!(member_bound(ToolsFor::Admins, &set, [Admin, Member, Admin]), Some(&set[..]));
        assert_eq!(member_bound(ToolsFor::Admins, &set, [Admin, Admin]), None);
        assert_eq!(member_bound(ToolsFor::Admins, &set, []), None);
        assert_eq!(member_bound(ToolsFor::Everyone, &set, [Member]), None, "today's policy");
    }
}
