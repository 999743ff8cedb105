//! Files on their way to or from a chat, the pure part: how long one
//! transfer may take ([`transfer_timeout`]), how many passing failures a
//! file's upload gets, over how long, before its row is given up
//! ([`FileTries`]), what the
//! chat is told then ([`given_up`], [`refused`]), and which of a chat's rows
//! its worker reads next while a file is on its way ([`Lineup`]).
//!
//! A file is sent beside its chat's text, not in front of it: the worker
//! waits for it at most [`PATIENCE`] (so a quick upload keeps its place),
//! then goes on with the chat's text rows, in their order, while the file
//! is uploaded and retried. Files keep their order among themselves. So a
//! file that is slow or failing may arrive after text written later.

use std::time::Duration;

use tokio::time::Instant;

use crate::domain::media::{human_bytes, OutboundFile};
use crate::domain::Platform;
use crate::store::OutboxId;

/// How long one text part's send may take. A send that has not answered by then
/// (a stalled connection, a WhatsApp socket that never acks) counts as a
/// passing failure and is retried, so one stuck request cannot hold its chat
/// forever. Generous, because a part that did land but answered later than
/// this is sent again. A file's upload gets [`transfer_timeout`].
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// What any transfer may take, whatever its size: as long as one text part.
pub const TRANSFER_BASE: Duration = SEND_TIMEOUT;

/// The uplink a file's time is reckoned on, in bytes a second: a slow one
/// (256 KiB/s), so a file that would arrive is not cut short.
pub const ASSUMED_RATE: u64 = 256 * 1024;

/// The longest any one transfer may take.
pub const TRANSFER_CAP: Duration = Duration::from_secs(30 * 60);

/// How long sending or fetching a file of `bytes` may take before it counts
/// as a passing failure: [`TRANSFER_BASE`] plus its time at
/// [`ASSUMED_RATE`], at most [`TRANSFER_CAP`]. In whole seconds.
pub fn transfer_timeout(bytes: u64) -> Duration {
    let at_rate = bytes.div_ceil(ASSUMED_RATE);
    TRANSFER_BASE.saturating_add(Duration::from_secs(at_rate)).min(TRANSFER_CAP)
}

/// Passing failures of a file's upload (those the platform did not ask to
/// wait out) after which its row is failed and the chat told, once they
/// span [`FILE_SPAN`].
pub const FILE_TRIES: u32 = 5;

/// How long a file's failures must have gone on before it is given up: an
/// outage that fails every try at once (WhatsApp not connected, Telegram
/// down) costs no file before this.
pub const FILE_SPAN: Duration = Duration::from_secs(10 * 60);

/// How long a chat's later rows wait behind a file on its way before they go
/// on without it.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A file's failed uploads, counted toward [`FILE_TRIES`] and [`FILE_SPAN`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileTries {
    counted: u32,
    first: Option<Instant>,
}

impl FileTries {
    /// An upload failed at `now` for a passing reason; true when the file
    /// has had its tries. A rate limit (`asked_to_wait`) says nothing about
    /// the file, so it is not counted.
    pub fn failed(&mut self, now: Instant, asked_to_wait: bool) -> bool {
        if asked_to_wait {
            return false;
        }
        self.counted += 1;
        let first = *self.first.get_or_insert(now);
        self.counted >= FILE_TRIES && now.saturating_duration_since(first) >= FILE_SPAN
    }

    /// The failures counted so far.
    pub fn counted(&self) -> u32 {
        self.counted
    }
}

/// The platform's name as people know it.
fn platform_name(platform: Platform) -> &'static str {
    match platform {
        Platform::Telegram => "Telegram",
        Platform::WhatsApp => "WhatsApp",
        Platform::Console => "the terminal",
    }
}

/// The file as the chat's people know it: its name, size and where it was.
fn which(file: &OutboundFile) -> String {
    format!("The file {} ({}, {} in the group's folder)", file.name, human_bytes(file.bytes), file.from)
}

/// What the chat is told when a file's upload kept failing. The failures'
/// own words stay in the row's `last_error` for the operator: a network
/// error may carry details the chat has no use for.
pub fn given_up(platform: Platform, file: &OutboundFile, tries: u32) -> String {
    format!(
        "{} could not be sent: {} had not taken it after {tries} tries. Ask for it again later, or for a \
         smaller copy (compressed, or split into parts).",
        which(file),
        platform_name(platform),
    )
}

/// What the chat is told when a file was refused for good (`why`: the
/// platform's words, or the adapter's, cut short).
pub fn refused(file: &OutboundFile, why: &str) -> String {
    let why: String = why.chars().take(200).collect();
    format!(
        "{} could not be sent: {why}. Ask for it again, or in another form (smaller, or as a document).",
        which(file)
    )
}

/// Which rows a chat's worker may read next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The oldest row, whatever it carries.
    Any,
    /// The oldest text row: a file is on its way beside them.
    Texts,
    /// Nothing yet: the file on its way may land before `until`, and the
    /// rows behind it keep their place until then.
    AwaitFile { until: Instant },
}

/// A chat's file on its way, as its worker decides what to read next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lineup {
    file: Option<(OutboxId, Instant)>,
}

impl Lineup {
    /// What to read at `now`.
    pub fn read(&self, now: Instant) -> Read {
        match self.file {
            None => Read::Any,
            Some((_, since)) if now < since + PATIENCE => Read::AwaitFile { until: since + PATIENCE },
            Some(_) => Read::Texts,
        }
    }

    /// The row `id`'s file began its way at `now`.
    pub fn begun(&mut self, id: OutboxId, now: Instant) {
        self.file = Some((id, now));
    }

    /// The file's row is settled (or left the chat): every row may be read again.
    pub fn ended(&mut self) {
        self.file = None;
    }

    /// The row whose file is on its way.
    pub fn file(&self) -> Option<OutboxId> {
        self.file.map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::media::FileKind;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_transfer_gets_the_base_plus_its_time_on_a_slow_uplink_within_the_cap() {
        assert_eq!(transfer_timeout(0), TRANSFER_BASE);
        assert_eq!(transfer_timeout(1), TRANSFER_BASE + Duration::from_secs(1));
        // Telegram's largest upload, 50 MB: 200 s at 256 KiB/s.
        assert_eq!(transfer_timeout(50 * MIB), TRANSFER_BASE + Duration::from_secs(200));
        assert_eq!(transfer_timeout(100 * MIB), Duration::from_secs(60 + 400));
        assert_eq!(transfer_timeout(10 * 1024 * MIB), TRANSFER_CAP);
        assert_eq!(transfer_timeout(u64::MAX), TRANSFER_CAP);
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_has_its_tries_over_its_span_and_rate_limits_are_not_counted() {
        let start = Instant::now();
        let minute = Duration::from_secs(60);
        let mut slow = FileTries::default();
        for i in 1..FILE_TRIES {
            assert!(!slow.failed(start + minute * 4 * (i - 1), false));
            assert!(!slow.failed(start + FILE_SPAN * 2, true), "a rate limit costs no try");
        }
        assert_eq!(slow.counted(), FILE_TRIES - 1);
        assert!(slow.failed(start + FILE_SPAN, false), "the last try");

        // Failing at once, over and over: an outage, waited out for the span.
        let mut quick = FileTries::default();
        for i in 0..20 {
            assert!(!quick.failed(start + Duration::from_secs(i), false));
        }
        assert!(!quick.failed(start + FILE_SPAN - Duration::from_millis(1), false));
        assert!(quick.failed(start + FILE_SPAN, false));
    }

    #[tokio::test(start_paused = true)]
    async fn rows_behind_a_file_wait_for_it_a_moment_then_the_texts_go_on() {
        let mut lineup = Lineup::default();
        let start = Instant::now();
        assert_eq!(lineup.read(start), Read::Any);
        lineup.begun(OutboxId(4), start);
        assert_eq!(lineup.file(), Some(OutboxId(4)));
        assert_eq!(lineup.read(start), Read::AwaitFile { until: start + PATIENCE });
        assert_eq!(
            lineup.read(start + PATIENCE - Duration::from_millis(1)),
            Read::AwaitFile { until: start + PATIENCE }
        );
        assert_eq!(lineup.read(start + PATIENCE), Read::Texts);
        assert_eq!(lineup.read(start + Duration::from_secs(3600)), Read::Texts);
        lineup.ended();
        assert_eq!(lineup.read(start + Duration::from_secs(3600)), Read::Any);
        assert_eq!(lineup.file(), None);
    }

    #[test]
    fn the_chat_is_told_which_file_and_what_to_do_without_the_errors_words() {
        let file = OutboundFile {
            path: "/data/outgoing/team/7-report.pdf".into(),
            name: "report.pdf".into(),
            kind: FileKind::Document,
            bytes: 42 * MIB,
            from: "out/report.pdf".into(),
        };
        let told = given_up(Platform::Telegram, &file, 5);
        assert_eq!(
            told,
            "The file report.pdf (42.0 MB, out/report.pdf in the group's folder) could not be sent: Telegram had \
             not taken it after 5 tries. Ask for it again later, or for a smaller copy (compressed, or split into \
             parts)."
        );
        assert!(!told.contains("/data/"), "pincer's own copy is not named");
        let refused = refused(&file, &"x".repeat(500));
        assert!(refused.contains("could not be sent: xxx"), "{refused}");
        assert!(refused.len() < 400, "the platform's words are cut short: {refused}");
    }
}
