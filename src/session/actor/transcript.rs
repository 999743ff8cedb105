//! A cluster node's copy of the group's CLI transcript, so the node that
//! claims the group next can `--resume`: what a turn appended is captured
//! for the result's transaction (`stdout`), what was flushed later is
//! synced when the process is stopped (`recovery`), and the stored copy is
//! put back before a process resumes (`stdin`). On one machine (no fences)
//! and for throwaway sessions none of this runs.
//!
//! A transcript that cannot be kept (a cap, a file shorter than what is
//! stored, a path the CLI would hash) is dropped from the store: the next
//! owner's resume then fails and starts fresh (`resume_failed`), as a lost
//! transcript does today.

use super::{Live, SessionActor};
use crate::domain::files::FileView;
use crate::session::transcript::{self, Appended, Place, SessionId};
use crate::store::{StoreError, TranscriptWrite};

impl SessionActor {
    /// Whether this session keeps its transcript in the store.
    fn keeps_transcript(&self) -> bool {
        !self.isolated && self.deps.transcripts.kept()
    }

    /// What the live process appended to `session`'s transcript since the
    /// stored copy ends, for its result's transaction.
    pub(super) async fn turn_transcript(&self, session: Option<&str>) -> Option<TranscriptWrite> {
        if !self.keeps_transcript() {
            return None;
        }
        let live = self.live.as_ref()?;
        self.capture(session?, &live.view).await
    }

    /// Stores what a stopped process flushed after its last result (one
    /// fenced write; a node whose lease moved on writes nothing).
    pub(super) async fn sync_transcript(&self, stopped: Option<&Live>) {
        let (Some(live), Some(session)) = (stopped, self.life.session_id()) else { return };
        if !self.keeps_transcript() {
            return;
        }
        let Some(write) = self.capture(session, &live.view).await else { return };
        match self.deps.transcripts.sync(&self.group, &write).await {
            Ok(()) => {}
            // The group is another node's now: what it has is the truth.
            Err(e @ StoreError::Fenced(_)) => {
                tracing::debug!(group = %self.group, %e, "the transcript's end is not stored")
            }
            Err(e) => tracing::warn!(group = %self.group, %e, "cannot store the end of the CLI's transcript"),
        }
    }

    /// The write that brings the stored copy of `session` up to its file.
    async fn capture(&self, session: &str, view: &FileView) -> Option<TranscriptWrite> {
        let Some(id) = SessionId::parse(session) else {
            tracing::warn!(group = %self.group, session, "a session id unfit for a file name: its transcript is not kept");
            return None;
        };
        let stored = match self.deps.transcripts.stored_len(&self.group, id.as_str()).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "cannot read how much of the transcript is stored");
                return None;
            }
        };
        let (view, file) = (view.clone(), id.clone());
        let read = tokio::task::spawn_blocking(move || match Place::of_view(&view) {
            Some(place) => transcript::read_appended(&place, &file, stored),
            None => Err(std::io::Error::other("the CLI's folder has no known slug (not UTF-8, or over 200)")),
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        let session = id.as_str().to_owned();
        match read {
            Ok(Appended::Lines(bytes)) if bytes.is_empty() => None,
            Ok(Appended::Lines(bytes)) => Some(TranscriptWrite::Append { session, at: stored as i64, bytes }),
            Ok(Appended::Missing) => None,
            Ok(Appended::Unfit(_)) | Err(_) if stored == 0 => {
                tracing::debug!(group = %self.group, session, ?read, "the CLI's transcript is not kept");
                None
            }
            Ok(Appended::Unfit(why)) => {
                tracing::warn!(group = %self.group, session, why = why.as_str(), "the CLI's transcript is no longer kept for another node: its resume there starts fresh");
                Some(TranscriptWrite::Drop { session })
            }
            Err(e) => {
                tracing::warn!(group = %self.group, session, %e, "cannot read the CLI's transcript: it is no longer kept for another node");
                Some(TranscriptWrite::Drop { session })
            }
        }
    }

    /// Puts the stored copy of `session` back where the next process reads
    /// it, unless this host's file is that copy or continues it (the group
    /// moved here, or back here after another node went on with it). A
    /// failure only logs: the resume then starts fresh.
    pub(super) async fn restore_transcript(&self, session: &str) {
        if !self.keeps_transcript() {
            return;
        }
        let (Some(id), Some(view)) = (SessionId::parse(session), self.deps.cli.view_of(&self.group)) else { return };
        let Some(place) = tokio::task::spawn_blocking(move || Place::of_view(&view)).await.ok().flatten() else {
            return;
        };
        let stored = self.deps.transcripts.stored_len(&self.group, session).await.unwrap_or(0);
        let here = blocking(place.clone(), id.clone(), transcript::local_len).await.unwrap_or(0);
        if stored == 0 || stored == here || (here > stored && self.continues(&place, &id).await) {
            return;
        }
        let bytes = match self.deps.transcripts.load(&self.group, session).await {
            Ok(bytes) if !bytes.is_empty() => bytes,
            Ok(_) => return,
            Err(e) => return tracing::warn!(group = %self.group, %e, "cannot read the stored transcript"),
        };
        let (len, shown) = (bytes.len(), place.shown(&id));
        let written = blocking(place, id, move |place, id| transcript::restore(place, id, &bytes)).await;
        match written {
            Ok(()) => tracing::info!(
                group = %self.group, session, bytes = len, here, file = %shown.display(),
                "restored the CLI's transcript from the store"
            ),
            Err(e) => tracing::warn!(
                group = %self.group, session, %e, file = %shown.display(),
                "cannot restore the CLI's transcript; its resume starts fresh"
            ),
        }
    }

    /// Whether this host's longer file holds the stored copy's last chunk
    /// where the store has it: the same history, with a tail this node
    /// wrote and could not store (not another node's turns).
    async fn continues(&self, place: &Place, id: &SessionId) -> bool {
        match self.deps.transcripts.last_chunk(&self.group, id.as_str()).await {
            Ok(Some((at, bytes))) => {
                let holds = move |place: &Place, id: &SessionId| transcript::holds(place, id, at, &bytes);
                blocking(place.clone(), id.clone(), holds).await.unwrap_or(false)
            }
            Ok(None) | Err(_) => false,
        }
    }
}

/// Runs `work` on the transcript at `place` on the blocking pool.
async fn blocking<T: Send + 'static>(
    place: Place,
    id: SessionId,
    work: impl FnOnce(&Place, &SessionId) -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(move || work(&place, &id)).await.unwrap_or_else(|e| Err(std::io::Error::other(e)))
}
