//! The preparer: one task that makes each message with media ready for its
//! agent. It takes its work from the store (messages stored `preparing`),
//! so a restart picks up what a previous pincer left half done, and a burst
//! of photos waits in SQLite, not in memory.
//!
//! For each attachment: fetched through its platform's [`Fetch`] into a
//! sink that stops it at the size limit (passing failures tried again),
//! saved in the group's `inbox/`, an image prepared for the model once the
//! daemon's decode budget has room for it (`media::budget`), a voice note
//! transcribed when an engine is configured. At most [`AT_ONCE`] messages
//! are in the works, chosen by `media::priority`: those someone waits for
//! first, a group's context photos one at a time and after them.
//! Whatever fails becomes a note in the message, never a message held back:
//! the message is then `queued` with its images in one transaction and its
//! session woken. An album waits [`ALBUM_WINDOW`] first, for its other parts.
//! On a cluster node it prepares only the messages of groups it holds, and
//! the result is written under the group's lease.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::DecodeBudget;
use super::capped::Capped;
use super::fetch::Fetch;
use super::fetch_error::FetchError;
use super::folder;
use super::images::{self, ImageError};
use super::priority::{self, Running};
use super::transcribe::{Engine, Transcriber};
use crate::config::Live;
use crate::domain::media::{fetch_limit, human_bytes, safe_file_name, Attachment, MediaKind, ModelImage, Outcome};
use crate::domain::{GroupName, Inbound, InboundId, Platform, Source};
use crate::outbox::Outbox;
use crate::retry::RetryPolicy;
use crate::store::{Leases, Preparing, Queue, ToPrepare};

/// How long an album's first part waits for the others (a platform sends
/// them as separate messages, a moment apart).
pub const ALBUM_WINDOW: Duration = Duration::from_millis(1500);
/// Messages prepared at once (each mostly waits on a download; what their
/// images take while decoded is bounded by `media.decode_budget`).
const AT_ONCE: usize = 4;
/// Tries per download, the first included.
const FETCH_TRIES: u32 = 3;

/// Each platform's way to download its files, registered by its adapter.
#[derive(Clone, Default)]
pub struct Fetchers(Arc<Mutex<HashMap<Platform, Arc<dyn Fetch>>>>);

impl Fetchers {
    pub fn register(&self, platform: Platform, fetch: Arc<dyn Fetch>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(platform, fetch);
    }

    fn get(&self, platform: Platform) -> Option<Arc<dyn Fetch>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&platform).cloned()
    }
}

/// What the preparer works with.
#[derive(Clone)]
pub struct PreparerDeps {
    pub queue: Queue,
    pub preparing: Preparing,
    /// Tells a sender when a file could not be taken (too large).
    pub outbox: Outbox,
    /// The groups' folders (`groups/`): a group's inbox is `<name>/inbox`.
    pub groups_dir: PathBuf,
    pub fetchers: Fetchers,
    /// `[media]` and `[transcription]`, as the newest reload left them.
    pub live: Live,
    /// Pauses between download tries.
    pub retry: RetryPolicy,
    /// Hears each group whose message is ready (the router wakes its session).
    pub ready: mpsc::Sender<GroupName>,
    /// Whose groups this node prepares: on a cluster node only those it
    /// holds (the media land in the folder of the node that runs the
    /// group, and no two nodes fetch one file); every group on one machine.
    pub leases: Leases,
}

/// The preparer's handle (cheap to clone).
#[derive(Clone)]
pub struct Preparer {
    wake: Arc<Notify>,
}

impl Preparer {
    /// Starts the task; it looks at the store at its first [`wake`](Self::wake).
    pub fn spawn(deps: PreparerDeps, tracker: &TaskTracker, shutdown: CancellationToken) -> Preparer {
        let wake = Arc::new(Notify::new());
        tracker.spawn(run(deps, wake.clone(), shutdown));
        Preparer { wake }
    }

    /// Something new is `preparing` (or the fetchers are all registered).
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

async fn run(deps: PreparerDeps, wake: Arc<Notify>, shutdown: CancellationToken) {
    let budget = Arc::new(DecodeBudget::new());
    let mut working: HashMap<tokio::task::Id, Running> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            Some(done) = tasks.join_next_with_id() => {
                let (task, panicked) = match done {
                    Ok((task, ())) => (task, false),
                    Err(e) => (e.id(), e.is_panic()),
                };
                if let (Some(running), true) = (working.remove(&task), panicked) {
                    tracing::error!(id = running.id.0, "preparing a message's media panicked; it goes on without its media");
                    give_up(&deps, running.id).await;
                }
            }
        }
        let waiting = match deps.preparing.all_preparing().await {
            Ok(mut waiting) => {
                waiting.retain(|w| deps.leases.holds_group(&w.group));
                waiting
            }
            Err(e) => {
                // Looked at again at the next wake or finished preparation.
                tracing::error!(%e, "cannot read the messages waiting for their media");
                continue;
            }
        };
        let running: Vec<Running> = working.values().cloned().collect();
        let albums: HashSet<InboundId> = waiting.iter().filter(|w| w.album).map(|w| w.id).collect();
        for next in priority::pick(&waiting, &running, AT_ONCE) {
            let (deps, budget) = (deps.clone(), budget.clone());
            let (id, album) = (next.id, albums.contains(&next.id));
            let task = tasks.spawn(async move { prepare(&deps, &budget, id, album).await }).id();
            working.insert(task, next);
        }
    }
    // Unfinished preparations stay `preparing`: the next start does them again.
    tasks.shutdown().await;
}

/// Prepares message `id`, then queues it and says its group is ready.
async fn prepare(deps: &PreparerDeps, budget: &DecodeBudget, id: InboundId, album: bool) {
    if album {
        tokio::time::sleep(ALBUM_WINDOW).await;
    }
    let ToPrepare { msg, observed } = match deps.preparing.take_preparing(id).await {
        Ok(Some(taken)) => taken,
        Ok(None) => return,
        Err(e) => {
            tracing::error!(id = id.0, %e, "cannot read a message waiting for its media; it is failed");
            let _ = deps.queue.set_inbound_state(&[id], crate::store::InboundState::Failed).await;
            return;
        }
    };
    let (media, images) = prepare_media(deps, budget, id, &msg, observed).await;
    finish(deps, id, &msg.group, &media, &images).await;
}

/// A preparation that panicked: the message goes on with its media unfetched.
async fn give_up(deps: &PreparerDeps, id: InboundId) {
    let msg = match deps.preparing.take_preparing(id).await {
        Ok(Some(taken)) => taken.msg,
        _ => return,
    };
    let media: Vec<Attachment> = msg
        .media
        .into_iter()
        .map(|mut a| {
            a.outcome = Outcome::Failed { why: "pincer could not prepare it".into() };
            a
        })
        .collect();
    finish(deps, id, &msg.group, &media, &[]).await;
}

async fn finish(deps: &PreparerDeps, id: InboundId, group: &GroupName, media: &[Attachment], images: &[ModelImage]) {
    match deps.preparing.finish_preparing(id, group, media, images).await {
        Ok(true) => {
            let _ = deps.ready.send(group.clone()).await;
        }
        Ok(false) => {}
        Err(e) => tracing::error!(%group, id = id.0, %e, "cannot store a message's prepared media"),
    }
}

/// Every attachment of `msg` fetched, saved and prepared, and the images
/// the model is shown, in order. A message kept only as context
/// (`observed`) is saved, and transcribed, but shows the model no image
/// (the agent opens the file when someone asks about it), and a file too
/// large is not worth telling its sender about.
async fn prepare_media(
    deps: &PreparerDeps,
    budget: &DecodeBudget,
    id: InboundId,
    msg: &Inbound,
    observed: bool,
) -> (Vec<Attachment>, Vec<ModelImage>) {
    let platform = match msg.source {
        Source::Chat(platform) => platform,
        _ => Platform::Console,
    };
    let group_dir = deps.groups_dir.join(msg.group.as_str());
    let several = msg.media.len() > 1;
    let mut media = Vec::with_capacity(msg.media.len());
    let mut images = Vec::new();
    // Prepared before (a message whose failed downloads are tried again):
    // the images of what was shown then go with it as they were.
    let mut earlier = match msg.media.iter().any(|a| matches!(a.outcome, Outcome::Saved { shown: true, .. })) {
        true => deps.queue.inbound_images(id).await.unwrap_or_default().into_iter(),
        false => Vec::new().into_iter(),
    };
    for (n, attachment) in msg.media.iter().enumerate() {
        let mut attachment = attachment.clone();
        if attachment.outcome != Outcome::Waiting {
            if matches!(attachment.outcome, Outcome::Saved { shown: true, .. }) {
                images.extend(earlier.next());
            }
            media.push(attachment);
            continue;
        }
        let name = stored_name(&attachment, id, several.then_some(n + 1));
        let (outcome, image) = prepare_one(deps, budget, platform, &group_dir, &attachment, name, !observed).await;
        if let (Outcome::TooLarge { limit }, false) = (&outcome, observed) {
            tell_too_large(deps, msg, &attachment, *limit).await;
        }
        attachment.outcome = outcome;
        images.extend(image);
        media.push(attachment);
    }
    if !media.iter().any(|a| matches!(a.outcome, Outcome::Saved { .. })) {
        // Nothing new in the inbox: no walk of it needed.
        return (media, images);
    }
    prune_inbox(deps, &msg.group, group_dir).await;
    (media, images)
}

/// The sender is told that a file was too large to fetch.
async fn tell_too_large(deps: &PreparerDeps, msg: &Inbound, attachment: &Attachment, limit: u64) {
    let what = attachment.file_name.as_deref().unwrap_or(attachment.kind.as_str());
    let size = attachment.size.map(|s| format!(" ({})", human_bytes(s))).unwrap_or_default();
    let text = format!(
        "{}'s {} \"{}\"{size} is larger than the {} a bot may download, so the agent gets only its name. \
         Share it another way (a link) if the agent needs it.",
        msg.sender,
        attachment.kind.as_str(),
        crate::domain::one_line(what, 80),
        human_bytes(limit)
    );
    deps.outbox.notice(&msg.group, &text).await;
}

/// The group's inbox kept within `media.max_inbox`, oldest files first out.
async fn prune_inbox(deps: &PreparerDeps, group: &GroupName, group_dir: PathBuf) {
    let max_inbox = deps.live.media().max_inbox.0;
    match tokio::task::spawn_blocking(move || folder::prune_inbox(&group_dir, max_inbox)).await {
        Ok(Ok(pruned)) if pruned.files > 0 => {
            tracing::info!(group = %group, files = pruned.files, bytes = pruned.bytes, "the inbox was full; its oldest files were deleted");
        }
        Ok(Err(e)) => tracing::warn!(group = %group, %e, "cannot keep the inbox within media.max_inbox"),
        _ => {}
    }
}

/// An attachment's bytes from its platform, counted for `/metrics`; the
/// outcome when there are none (too large, failed).
async fn download(deps: &PreparerDeps, platform: Platform, attachment: &Attachment) -> Result<Vec<u8>, Outcome> {
    let counters = crate::metrics::counters::counters();
    let Some(fetcher) = deps.fetchers.get(platform) else {
        counters.media_download(platform.as_str(), "failed");
        return Err(Outcome::Failed { why: format!("{} is not served by this pincer", platform.as_str()) });
    };
    match fetch(deps, fetcher.as_ref(), attachment, fetch_limit(platform)).await {
        Ok(bytes) => {
            counters.media_download(platform.as_str(), "saved");
            Ok(bytes)
        }
        Err(FetchError::TooLarge { limit }) => {
            counters.media_download(platform.as_str(), "too_large");
            Err(Outcome::TooLarge { limit })
        }
        Err(e) => {
            counters.media_download(platform.as_str(), "failed");
            Err(Outcome::Failed { why: e.to_string() })
        }
    }
}

/// One attachment: what became of it, and its image for the model if it is shown.
async fn prepare_one(
    deps: &PreparerDeps,
    budget: &DecodeBudget,
    platform: Platform,
    group_dir: &Path,
    attachment: &Attachment,
    name: String,
    show: bool,
) -> (Outcome, Option<ModelImage>) {
    let bytes = match download(deps, platform, attachment).await {
        Ok(bytes) => bytes,
        Err(outcome) => return (outcome, None),
    };
    let size = bytes.len() as u64;
    let show = show && attachment.kind.is_image();
    let (path, footprint, bytes) = match save(group_dir, name, bytes, show).await {
        Ok(saved) => saved,
        Err(why) => {
            tracing::error!(why, "cannot save a chat's file in the group's inbox");
            return (Outcome::Failed { why }, None);
        }
    };
    let (bytes, image) = match footprint {
        Some(Ok(footprint)) => decode(deps, budget, bytes, footprint).await,
        Some(Err(e)) => (bytes, Some(Err(e))),
        None => (bytes, None),
    };
    let (shown, image_note) = shown_or_why(image);
    let (transcript, transcript_note) =
        if attachment.kind.is_speech() { transcribe(deps, attachment, &bytes).await } else { (None, None) };
    let outcome = Outcome::Saved {
        path: path.display().to_string(),
        bytes: size,
        transcript,
        transcript_note,
        shown: shown.is_some(),
        image_note,
    };
    (outcome, shown)
}

/// What [`save`] hands back: where the file went, the image's footprint if it
/// is to be shown, and the bytes.
type Saved = (PathBuf, Option<Result<images::Footprint, ImageError>>, Vec<u8>);

/// The file saved in the group's inbox (off the runtime), and, when it is to
/// be shown, what its header says decoding it takes.
async fn save(group_dir: &Path, name: String, bytes: Vec<u8>, show: bool) -> Result<Saved, String> {
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let dir = group_dir.to_owned();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the group's folder: {e}"))?;
        let path = folder::save_in_inbox(&dir, &day, &name, &bytes).map_err(|e| e.to_string())?;
        let footprint = show.then(|| images::footprint(&bytes));
        Ok((path, footprint, bytes))
    })
    .await
    .unwrap_or_else(|e| Err(format!("saving it failed: {e}")))
}

/// The image for the model, or why it is not shown.
fn shown_or_why(image: Option<Result<ModelImage, ImageError>>) -> (Option<ModelImage>, Option<String>) {
    match image {
        Some(Ok(image)) => (Some(image), None),
        Some(Err(e)) => {
            if let ImageError::TooLarge { .. } = e {
                tracing::warn!(%e, "an image was refused by the decoder's limits or the decode budget");
            }
            (None, Some(e.to_string()))
        }
        None => (None, None),
    }
}

/// An image prepared for the model once the decode budget has room for
/// what its header says it takes (one larger than the whole budget is
/// refused as too large); the bytes are handed back.
async fn decode(
    deps: &PreparerDeps,
    budget: &DecodeBudget,
    bytes: Vec<u8>,
    footprint: images::Footprint,
) -> (Vec<u8>, Option<Result<ModelImage, ImageError>>) {
    let total = deps.live.media().decode_budget.0;
    let reservation = match budget.reserve(footprint.bytes, total).await {
        Ok(reservation) => reservation,
        Err(e) => {
            tracing::debug!(%e, "an image needs more than the whole decode budget");
            let refused = ImageError::TooLarge { width: footprint.width, height: footprint.height };
            return (bytes, Some(Err(refused)));
        }
    };
    let prepared = tokio::task::spawn_blocking(move || {
        let image = images::prepare(&bytes);
        drop(reservation);
        (bytes, image)
    })
    .await;
    match prepared {
        Ok((bytes, image)) => (bytes, Some(image)),
        // The decoder panicked: its bytes are gone with it, the file is saved.
        Err(e) => (Vec::new(), Some(Err(ImageError::Corrupt(format!("the decoder failed: {e}"))))),
    }
}

/// The attachment's bytes, passing failures tried again. Each try streams
/// into a fresh [`Capped`] sink, so a download is abandoned at the first
/// byte past `max` whatever the platform said of its size.
async fn fetch(
    deps: &PreparerDeps,
    fetcher: &dyn Fetch,
    attachment: &Attachment,
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    if let Some(size) = attachment.size.filter(|s| *s > max) {
        tracing::info!(size, max, "a chat's file is larger than a bot may download");
        return Err(FetchError::TooLarge { limit: max });
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let sink = Capped::new(max);
        let overflow = sink.overflow();
        match fetcher.fetch(attachment, sink).await {
            Ok(sink) => return Ok(sink.into_bytes()),
            // Whatever the platform's client made of the refused byte.
            Err(_) if overflow.happened() => {
                tracing::info!(max, "a chat's file was larger than its message said; its download was stopped");
                return Err(FetchError::TooLarge { limit: max });
            }
            Err(FetchError::Transient(why)) if tries < FETCH_TRIES => {
                tracing::warn!(tries, %why, "downloading a chat's file failed; trying again");
                tokio::time::sleep(deps.retry.pause(tries, None)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A voice note's or audio's words, or why there are none (`None, None`:
/// no engine is configured).
async fn transcribe(deps: &PreparerDeps, attachment: &Attachment, bytes: &[u8]) -> (Option<String>, Option<String>) {
    let config = deps.live.transcription();
    let Some(url) = config.url else { return (None, None) };
    let engine = Engine { url, model: config.model, api_key: config.api_key, language: config.language };
    let name = safe_file_name(attachment.file_name.as_deref().unwrap_or(""), "voice.ogg");
    let mime = attachment.mime.as_deref().unwrap_or("audio/ogg");
    let counters = crate::metrics::counters::counters();
    match Transcriber::new(engine).transcribe(&name, mime, bytes).await {
        Ok(text) => {
            counters.transcription("ok");
            (Some(text), None)
        }
        Err(e) => {
            counters.transcription("failed");
            tracing::warn!(%e, "a voice note goes to the agent without a transcript");
            (None, Some(e.to_string()))
        }
    }
}

/// The name a file is saved under: `<message id>-<safe name>` (with its
/// place in an album), the platform's name when it gave one.
fn stored_name(attachment: &Attachment, id: InboundId, place: Option<usize>) -> String {
    let fallback = format!("{}.{}", attachment.kind.as_str(), extension(attachment.mime.as_deref(), attachment.kind));
    let name = safe_file_name(attachment.file_name.as_deref().unwrap_or(""), &fallback);
    let name = match place {
        Some(n) => format!("{}-{n}-{name}", id.0),
        None => format!("{}-{name}", id.0),
    };
    // The prefix may have pushed it past the bound again.
    safe_file_name(&name, &fallback)
}

/// A file extension for a nameless file, from its type.
fn extension(mime: Option<&str>, kind: MediaKind) -> &'static str {
    match mime.map(|m| m.split(';').next().unwrap_or(m).trim()) {
        Some("image/jpeg") => "jpg",
        Some("image/png") => "png",
        Some("image/gif") => "gif",
        Some("image/webp") => "webp",
        Some("audio/ogg") => "ogg",
        Some("audio/mpeg") => "mp3",
        Some("audio/mp4") => "m4a",
        Some("video/mp4") => "mp4",
        Some("application/pdf") => "pdf",
        _ => match kind {
            MediaKind::Photo => "jpg",
            MediaKind::Voice => "ogg",
            MediaKind::Sticker => "webp",
            MediaKind::Video => "mp4",
            _ => "bin",
        },
    }
}

#[cfg(test)]
mod tests;
