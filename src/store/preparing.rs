//! Messages whose media is still being fetched and prepared: stored
//! `preparing` (their group's session takes nothing at or after them, so the
//! order holds), with an album's later parts merged into its first, and made
//! `queued` (or `observed`, for context) with their prepared media and
//! images in one transaction.

use sqlx::{AnyConnection, FromRow, Row};

use super::error::StoreError;
use super::flag::Flag;
use super::handles::{Preparing, Queue};
use super::inbound::{insert_images, insert_inbound_row, media_json, InboundState};
use super::rows::{self, InboundRow};
use crate::domain::media::{Attachment, ModelImage, MAX_ATTACHMENTS};
use crate::domain::{GroupName, Inbound, InboundId};

/// A message waiting for its media, as the preparer finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub id: InboundId,
    pub group: GroupName,
    /// Part of an album that may still take parts.
    pub album: bool,
    /// Kept only as context once prepared, and no message for the agent
    /// waits behind it in its group: nothing is held back while it waits,
    /// so the preparer takes it when nothing more pressing waits.
    pub context: bool,
}

/// A message the preparer takes up.
#[derive(Clone, Debug)]
pub struct ToPrepare {
    pub msg: Inbound,
    /// Kept as context once prepared: its images are not shown to the
    /// model, and its sender is not told about a file too large.
    pub observed: bool,
}

/// Where a message with media went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Its own row, `preparing`: hand it to the preparer.
    Preparing(InboundId),
    /// A part of an album whose first part is still open: its attachments
    /// (and caption) now belong to `into`, and its own row is `merged`.
    Merged { into: InboundId, part: InboundId },
}

impl Preparing {
    /// Stores `msg` (which carries media) `preparing`, or, when an earlier
    /// part of its album still takes parts, merges it into that one. With
    /// `observed`, it becomes context once prepared, not a message for the
    /// agent (unless it merges into an album one of whose parts engages).
    /// A second copy of a message (same `external_id`) is
    /// [`StoreError::Duplicate`].
    pub async fn insert_preparing(&self, msg: &Inbound, observed: bool) -> Result<Stored, StoreError> {
        // The part's own row first: the write takes the database's lock, so
        // the album read below sees the newest state (a deferred transaction
        // that read first could not write after another writer committed).
        let mut tx = self.db.pool.begin().await?;
        let part = insert_part(&mut tx, msg, observed).await?;
        let merged = match &msg.album {
            Some(album) => merge_into_album(&mut tx, msg, album, part, observed).await?,
            None => None,
        };
        tx.commit().await?;
        Ok(match merged {
            Some(into) => Stored::Merged { into, part },
            None => Stored::Preparing(part),
        })
    }

    /// The message `id` as the preparer starts on it, if it is still
    /// `preparing`; its album takes no more parts from now on (a part
    /// coming later is a message of its own).
    pub async fn take_preparing(&self, id: InboundId) -> Result<Option<ToPrepare>, StoreError> {
        let row = sqlx::query(
            "UPDATE inbound SET album = NULL WHERE id = $1 AND state = 'preparing'
             RETURNING id, group_name, source, sender, sender_id, text, sent_at_us, reply_to, at_us, external_id, media,
                       album, prepared_as",
        )
        .bind(id.0)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let (_, msg) = InboundRow::from_row(&row)?.message()?;
        let observed = row.try_get::<Option<String>, _>("prepared_as")?.as_deref() == Some("observed");
        Ok(Some(ToPrepare { msg, observed }))
    }

    /// Message `id` of `group` prepared: its attachments as they came out
    /// and the images the model is shown, and `queued` for its session,
    /// together, under the group's lease on a cluster node. Whether it was
    /// still `preparing` (if not, nothing changes).
    pub async fn finish_preparing(
        &self,
        id: InboundId,
        group: &GroupName,
        media: &[Attachment],
        images: &[ModelImage],
    ) -> Result<bool, StoreError> {
        let mut tx = super::fenced::begin_for(&self.db, group).await?;
        let done = sqlx::query(
            "UPDATE inbound SET state = COALESCE(prepared_as, 'queued'), media = $1 WHERE id = $2 AND state = 'preparing'",
        )
            .bind(media_json(media))
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        // A preparation cut short by a restart may have left none, or some.
        sqlx::query("DELETE FROM inbound_images WHERE inbound_id = $1").bind(id.0).execute(&mut *tx).await?;
        insert_images(&mut tx, id, images).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// How many of the group's messages its session has not taken yet
    /// (still being prepared, or queued).
    pub async fn not_taken(&self, group: &GroupName) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM inbound WHERE group_name = $1 AND state IN ('preparing', 'queued')",
        )
        .bind(group.as_str())
        .fetch_one(&self.db.pool)
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every message still `preparing` (new, or a restart cut its
    /// preparation short), oldest first: each is prepared from the start.
    pub async fn all_preparing(&self) -> Result<Vec<Waiting>, StoreError> {
        // A message held back behind a context message is one queued, or
        // one being prepared that is not context itself (each partial index
        // answers one half).
        let rows: Vec<(i64, String, Flag, Flag)> = sqlx::query_as(
            "SELECT id, group_name, album IS NOT NULL,
                    prepared_as IS NOT DISTINCT FROM 'observed'
                    AND NOT EXISTS (SELECT 1 FROM inbound q WHERE q.group_name = p.group_name
                                       AND q.state = 'queued' AND q.id > p.id)
                    AND NOT EXISTS (SELECT 1 FROM inbound q WHERE q.group_name = p.group_name
                                       AND q.state = 'preparing' AND q.id > p.id AND q.prepared_as IS NULL)
               FROM inbound p WHERE state = 'preparing' ORDER BY id",
        )
        .fetch_all(&self.db.pool)
        .await?;
        let mut found = Vec::with_capacity(rows.len());
        for (id, group, album, context) in rows {
            match group.parse::<GroupName>() {
                Ok(group) => found.push(Waiting { id: InboundId(id), group, album: album.0, context: context.0 }),
                Err(e) => {
                    tracing::error!(id, %group, %e, "a message being prepared names no group; marking it failed");
                    Queue::new(self.db.clone()).set_inbound_state(&[InboundId(id)], InboundState::Failed).await?;
                }
            }
        }
        Ok(found)
    }
}

/// Writes `msg` as a part `preparing` (its own row; context once prepared
/// when `observed`); a second copy is [`StoreError::Duplicate`].
async fn insert_part(conn: &mut AnyConnection, msg: &Inbound, observed: bool) -> Result<InboundId, StoreError> {
    let Some(part) = insert_inbound_row(conn, msg, InboundState::Preparing).await? else {
        return Err(StoreError::Duplicate(msg.external_id.clone().unwrap_or_default()));
    };
    if observed {
        sqlx::query("UPDATE inbound SET prepared_as = 'observed' WHERE id = $1")
            .bind(part.0)
            .execute(&mut *conn)
            .await?;
    }
    Ok(part)
}

/// Merges `part` into the first part of `album` still `preparing`, if there
/// is one with room for its media: the part is then `merged`, and the id it
/// went into comes back. `None` leaves the part a message of its own.
async fn merge_into_album(
    conn: &mut AnyConnection,
    msg: &Inbound,
    album: &str,
    part: InboundId,
    observed: bool,
) -> Result<Option<InboundId>, StoreError> {
    let first = sqlx::query(
        "SELECT id, text, media FROM inbound
          WHERE group_name = $1 AND album = $2 AND state = 'preparing' AND id < $3 ORDER BY id LIMIT 1",
    )
    .bind(msg.group.as_str())
    .bind(album)
    .bind(part.0)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(first) = first else {
        return Ok(None);
    };
    let into = InboundId(first.try_get("id")?);
    let mut media = rows::read_media(first.try_get::<Option<String>, _>("media")?.as_deref())?;
    if media.len() + msg.media.len() > MAX_ATTACHMENTS {
        // A full album goes on as a message of its own.
        return Ok(None);
    }
    media.extend(msg.media.iter().cloned());
    let mut text: String = first.try_get("text")?;
    if !msg.text.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&msg.text);
    }
    // A part that engages makes the album engage (the caption that
    // names the agent may be on any photo).
    sqlx::query(
        "UPDATE inbound SET text = $1, media = $2, prepared_as = CASE WHEN $3 THEN prepared_as END WHERE id = $4",
    )
    .bind(&text)
    .bind(media_json(&media))
    .bind(observed)
    .bind(into.0)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE inbound SET state = 'merged' WHERE id = $1").bind(part.0).execute(&mut *conn).await?;
    Ok(Some(into))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::media::{MediaKind, Outcome};
    use crate::domain::Source;
    use crate::store::tests::{on_both, store_with};
    use crate::store::Store;

    fn photo(group: &GroupName, text: &str, album: Option<&str>, fetch: &str) -> Inbound {
        let mut msg = Inbound::new(group.clone(), Source::Console, "ann", text);
        msg.media = vec![Attachment::bounded(MediaKind::Photo, fetch)];
        msg.album = album.map(str::to_owned);
        msg
    }

    on_both! {
    async fn an_albums_parts_join_its_first_until_the_preparer_takes_it() {
        let group: GroupName = "family".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let Stored::Preparing(first) =
            store.preparing().insert_preparing(&photo(&group, "our trip", Some("a1"), "f1"), false).await.unwrap()
        else {
            panic!("the first part is its own message")
        };
        let second = store.preparing().insert_preparing(&photo(&group, "", Some("a1"), "f2"), false).await.unwrap();
        assert!(matches!(second, Stored::Merged { into, .. } if into == first));
        let third =
            store.preparing().insert_preparing(&photo(&group, "day two", Some("a1"), "f3"), false).await.unwrap();
        assert!(matches!(third, Stored::Merged { into, .. } if into == first));
        let other = store.preparing().insert_preparing(&photo(&group, "", Some("b2"), "g1"), false).await.unwrap();
        assert!(matches!(other, Stored::Preparing(id) if id != first), "another album is another message");

        let taken = store.preparing().take_preparing(first).await.unwrap().expect("still preparing").msg;
        assert_eq!(taken.text, "our trip\nday two");
        assert_eq!(taken.media.iter().map(|a| a.fetch.as_str()).collect::<Vec<_>>(), ["f1", "f2", "f3"]);
        let late = store.preparing().insert_preparing(&photo(&group, "", Some("a1"), "f4"), false).await.unwrap();
        assert!(matches!(late, Stored::Preparing(_)), "a part after the take is a message of its own");
    }
    }

    on_both! {
    async fn an_observed_photo_becomes_context_once_prepared_unless_a_part_of_its_album_engages() {
        let group: GroupName = "family".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let Stored::Preparing(seen) =
            store.preparing().insert_preparing(&photo(&group, "", None, "f1"), true).await.unwrap()
        else {
            panic!("no album")
        };
        let taken = store.preparing().take_preparing(seen).await.unwrap().unwrap();
        assert!(taken.observed);
        assert!(store.preparing().finish_preparing(seen, &taken.msg.group, &taken.msg.media, &[]).await.unwrap());
        let state: String = sqlx::query_scalar("SELECT state FROM inbound WHERE id = $1")
            .bind(seen.0)
            .fetch_one(&store.db.pool)
            .await
            .unwrap();
        assert_eq!(state, "observed", "context for the next message, not a message for the agent");
        assert!(store.queue().queued_inbound(&group, InboundId(0), 10).await.unwrap().is_empty());

        // An album whose first photo is only context, and whose second names the agent.
        let Stored::Preparing(first) =
            store.preparing().insert_preparing(&photo(&group, "", Some("a9"), "g1"), true).await.unwrap()
        else {
            panic!("the first part is its own message")
        };
        store.preparing().insert_preparing(&photo(&group, "@Andy which one?", Some("a9"), "g2"), false).await.unwrap();
        store.preparing().insert_preparing(&photo(&group, "", Some("a9"), "g3"), true).await.unwrap();
        let album = store.preparing().take_preparing(first).await.unwrap().unwrap();
        assert!(!album.observed, "the album engages");
        assert_eq!(album.msg.media.len(), 3);
    }
    }

    on_both! {
    async fn a_context_photo_waits_as_context_until_a_message_for_the_agent_waits_behind_it() {
        let group: GroupName = "family".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let context = |store: Store| async move {
            store.preparing().all_preparing().await.unwrap().into_iter().map(|w| (w.id, w.context)).collect::<Vec<_>>()
        };
        let Stored::Preparing(seen) =
            store.preparing().insert_preparing(&photo(&group, "", None, "f1"), true).await.unwrap()
        else {
            panic!("no album")
        };
        assert_eq!(context(store.clone()).await, [(seen, true)], "nothing waits behind it");

        let Stored::Preparing(asked) =
            store.preparing().insert_preparing(&photo(&group, "@Andy look", None, "f2"), false).await.unwrap()
        else {
            panic!("no album")
        };
        assert_eq!(context(store.clone()).await, [(seen, false), (asked, false)], "it holds the question back");

        let taken = store.preparing().take_preparing(asked).await.unwrap().unwrap();
        assert!(store.preparing().finish_preparing(asked, &taken.msg.group, &taken.msg.media, &[]).await.unwrap());
        assert_eq!(context(store.clone()).await, [(seen, false)], "the question is queued behind it");
        store.queue().set_inbound_state(&[asked], InboundState::Sent).await.unwrap();
        assert_eq!(context(store.clone()).await, [(seen, true)], "nothing waits behind it any more");
    }
    }

    on_both! {
    async fn a_prepared_message_is_queued_with_its_images_and_holds_back_the_queue_until_then() {
        let group: GroupName = "family".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let Stored::Preparing(id) =
            store.preparing().insert_preparing(&photo(&group, "look", None, "f1"), false).await.unwrap()
        else {
            panic!("no album")
        };
        let plain = Inbound::new(group.clone(), Source::Console, "bo", "and then");
        let after = store.queue().insert_inbound(&plain, InboundState::Queued).await.unwrap();
        assert!(store.queue().queued_inbound(&group, InboundId(0), 10).await.unwrap().is_empty(), "nothing passes it");
        assert_eq!(
            store.preparing().all_preparing().await.unwrap(),
            [Waiting { id, group: group.clone(), album: false, context: false }]
        );

        let mut msg = store.preparing().take_preparing(id).await.unwrap().unwrap().msg;
        msg.media[0].outcome = Outcome::Saved {
            path: "inbox/d/1-photo.jpg".into(),
            bytes: 3,
            transcript: None,
            transcript_note: None,
            shown: true,
            image_note: None,
        };
        let image = ModelImage { media_type: "image/png".into(), data: vec![1, 2, 3] };
        assert!(store.preparing().finish_preparing(id, &msg.group, &msg.media, std::slice::from_ref(&image)).await.unwrap());
        assert!(!store.preparing().finish_preparing(id, &msg.group, &msg.media, &[]).await.unwrap(), "only once");

        let pulled = store.queue().queued_inbound(&group, InboundId(0), 10).await.unwrap();
        assert_eq!(pulled.iter().map(|p| p.id).collect::<Vec<_>>(), [id, after], "in the order they came");
        assert_eq!(pulled[0].images, [image]);
        assert_eq!(pulled[0].msg.media, msg.media);
        assert!(store.preparing().all_preparing().await.unwrap().is_empty());
    }
    }
}
