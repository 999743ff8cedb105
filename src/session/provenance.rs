//! Provenance of files in a group's folder: which paths a turn steered by a member's words wrote since the
//! admins last approved a command, and the bounded words an approval prompt shows about them (issue 44).
//!
//! Pure: no I/O. The actor feeds it allowed writes and the files members send; the store keeps each entry
//! `record` returns and forgets them all at an approval (`store::provenance`).

use std::collections::VecDeque;

/// Most paths kept per group; the oldest go first, so the prompt speaks of the newest writes. The
/// store keeps as many rows, so what a restart reads back is what was kept.
pub const MAX_ENTRIES: usize = crate::store::PROVENANCE_ROWS;
/// Most paths named in one prompt; the rest are counted ("and N more").
pub const MAX_SHOWN: usize = 10;
/// Most characters of one path or sender name shown; longer text is cut with "…".
pub const MAX_TEXT_CHARS: usize = 80;
/// Most senders remembered for one path.
pub const MAX_SENDERS: usize = 8;

/// One path written by a member-steered turn, relative to the group's folder, and whose messages steered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub senders: Vec<String>,
}

/// What was written since the last approval, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    entries: VecDeque<Entry>,
}

impl Ledger {
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut ledger = Self::default();
        for e in entries {
            ledger.record(&e.path, &e.senders);
        }
        ledger
    }

    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An allowed write to `path` in a turn whose non-admin voices are `senders`. An admin-only turn
    /// (no senders) leaves the ledger alone: an admin's own words need no warning. Returns the entry
    /// recorded (now the newest), to be stored.
    pub fn record(&mut self, path: &str, senders: &[String]) -> Option<&Entry> {
        let path = clean(path);
        if senders.is_empty() || path.is_empty() {
            return None;
        }
        let mut merged = match self.entries.iter().position(|e| e.path == path) {
            Some(i) => self.entries.remove(i).map(|e| e.senders).unwrap_or_default(),
            None => Vec::new(),
        };
        for s in senders.iter().map(|s| clean(s)).filter(|s| !s.is_empty()) {
            if !merged.contains(&s) && merged.len() < MAX_SENDERS {
                merged.push(s);
            }
        }
        self.entries.push_back(Entry { path, senders: merged });
        while self.entries.len() > MAX_ENTRIES {
            self.entries.pop_front();
        }
        self.entries.back()
    }

    /// The plain words a prompt shows, or `None` when nothing was written. Channels escape it for their markup.
    pub fn describe(&self) -> Option<String> {
        if self.entries.is_empty() {
            return None;
        }
        let mut senders: Vec<&str> = Vec::new();
        for s in self.entries.iter().flat_map(|e| e.senders.iter()) {
            if !senders.contains(&s.as_str()) && senders.len() < MAX_SENDERS {
                senders.push(s);
            }
        }
        let who = senders.iter().map(|s| format!("{s}'s")).collect::<Vec<_>>().join(", ");
        let newest: Vec<&str> = self.entries.iter().rev().take(MAX_SHOWN).map(|e| e.path.as_str()).collect();
        let mut text = format!("written since your last approval, from {who} messages: {}", newest.join(", "));
        let more = self.entries.len().saturating_sub(MAX_SHOWN);
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        Some(text)
    }
}

/// Untrusted text made safe to show: control characters dropped, length bounded.
fn clean(text: &str) -> String {
    let kept: String = text.chars().filter(|c| !c.is_control()).collect();
    let kept = kept.trim();
    if kept.chars().count() <= MAX_TEXT_CHARS {
        return kept.to_string();
    }
    let mut cut: String = kept.chars().take(MAX_TEXT_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn empty_ledger_says_nothing() {
        assert_eq!(Ledger::default().describe(), None);
    }

    #[test]
    fn member_writes_are_named_with_their_sender() {
        let mut l = Ledger::default();
        l.record("config", &who(&["mallory"]));
        l.record("HEAD", &who(&["mallory"]));
        assert_eq!(l.describe().unwrap(), "written since your last approval, from mallory's messages: HEAD, config");
    }

    #[test]
    fn admin_only_turn_does_not_count() {
        let mut l = Ledger::default();
        assert_eq!(l.record("config", &[]), None);
        assert!(l.is_empty());
    }

    #[test]
    fn rewrite_moves_path_to_newest_and_merges_senders() {
        let mut l = Ledger::default();
        l.record("a", &who(&["mallory"]));
        l.record("b", &who(&["eve"]));
        let recorded = l.record("a", &who(&["eve"])).cloned();
        assert_eq!(recorded, Some(Entry { path: "a".into(), senders: who(&["mallory", "eve"]) }), "what is stored");
        let e: Vec<_> = l.entries().cloned().collect();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1], Entry { path: "a".into(), senders: who(&["mallory", "eve"]) });
    }

    #[test]
    fn prompt_is_bounded_with_a_count_of_the_rest() {
        let mut l = Ledger::default();
        for i in 0..13 {
            l.record(&format!("f{i}"), &who(&["mallory"]));
        }
        let text = l.describe().unwrap();
        assert!(text.ends_with("f3 and 3 more"), "{text}");
        assert!(!text.contains("f2,"), "{text}");
    }

    #[test]
    fn ledger_keeps_only_the_newest_entries() {
        let mut l = Ledger::default();
        for i in 0..MAX_ENTRIES + 5 {
            l.record(&format!("f{i}"), &who(&["mallory"]));
        }
        assert_eq!(l.entries().count(), MAX_ENTRIES);
        assert_eq!(l.entries().next().unwrap().path, "f5");
    }

    #[test]
    fn untrusted_text_loses_control_characters_and_is_cut() {
        let mut l = Ledger::default();
        l.record("con\nfig\u{1b}[31m", &who(&["mal\rlory"]));
        l.record(&"x".repeat(500), &who(&["mallory"]));
        let e: Vec<_> = l.entries().cloned().collect();
        assert_eq!(e[0].path, "config[31m");
        assert_eq!(e[0].senders, who(&["mallory"]));
        assert_eq!(e[1].path.chars().count(), MAX_TEXT_CHARS);
        assert!(e[1].path.ends_with('…'));
    }
}
