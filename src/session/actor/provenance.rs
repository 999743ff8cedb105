//! The folder's provenance as the actor keeps it (issue 44): an allowed
//! write in the group's folder while members' words are in the turn is
//! remembered with their names; an admin's approval forgets it all; the
//! approval prompt names what is remembered. What to keep and show is
//! decided by `session::provenance`; the store keeps it across restarts
//! and node moves, so it is read from there each time (these are rare
//! events: a file tool's call, an asked one).

use serde_json::Value;

use super::SessionActor;
use crate::claude::mcp::TOOL_PREFIX;
use crate::session::files;
use crate::session::provenance::{Entry, Ledger};

impl SessionActor {
    /// An allowed call of `tool_name`: a file it writes in the folder while
    /// a member's words are in the turn is remembered. An admin-only turn's
    /// writes are not (an admin's own words need no warning).
    pub(super) async fn note_write(&self, tool_name: &str, input: &Value, cwd: Option<&str>) {
        // pincer's own `send_file` reads the path it names; it writes nothing.
        if tool_name.starts_with(TOOL_PREFIX) {
            return;
        }
        let Some(raw) = files::target(tool_name, input) else { return };
        let senders = self.turn.pending.steered_by();
        if senders.is_empty() {
            return;
        }
        let Some(path) = self.live.as_ref().and_then(|live| files::in_folder(&live.view, cwd, &raw)) else {
            return;
        };
        let mut ledger = self.ledger().await;
        self.remember(&mut ledger, &path.to_string_lossy(), &senders).await;
    }

    /// Files a member's message brought (its saved attachments): remembered
    /// with their sender like a member-steered write.
    pub(super) async fn note_member_files(&self, files: Vec<(String, String)>) {
        if files.is_empty() {
            return;
        }
        let mut ledger = self.ledger().await;
        for (path, sender) in files {
            self.remember(&mut ledger, &path, std::slice::from_ref(&sender)).await;
        }
    }

    /// Records `path` as written on `senders`' words, and stores its entry
    /// (its senders merged with the path's earlier ones: the one row to store).
    async fn remember(&self, ledger: &mut Ledger, path: &str, senders: &[String]) {
        let Some(entry) = ledger.record(path, senders) else { return };
        let written = (entry.path.clone(), entry.senders.clone());
        if let Err(e) = self.deps.journal.record_provenance(&self.group, &written).await {
            tracing::error!(group = %self.group, %e, "cannot store which file a member's message had written");
        }
    }

    /// What the next approval prompt says about the files members' messages wrote, if any.
    pub(super) async fn provenance_words(&self) -> Option<String> {
        self.ledger().await.describe()
    }

    /// An admin approved a command: what was written before it is no longer news.
    pub(super) async fn provenance_approved(&self) {
        if let Err(e) = self.deps.journal.clear_provenance(&self.group).await {
            tracing::error!(group = %self.group, %e, "cannot forget the files written before an approval");
        }
    }

    async fn ledger(&self) -> Ledger {
        match self.deps.journal.provenance(&self.group).await {
            Ok(written) => Ledger::from_entries(written.into_iter().map(|(path, senders)| Entry { path, senders })),
            Err(e) => {
                tracing::error!(group = %self.group, %e, "cannot read which files members' messages had written");
                Ledger::default()
            }
        }
    }
}
