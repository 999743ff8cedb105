//! The preparer against a real store and folder, with a scripted [`Fetch`]
//! standing in for a platform.

use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;

use super::*;
use crate::config::Config;
use crate::store::Store;
use crate::store::{OutboxId, Stored};

/// A download's answers, one per try.
type Answers = Vec<Result<Vec<u8>, FetchError>>;

/// Answers each `fetch` key as scripted: a list of answers, one per try
/// (the last one again after that).
#[derive(Default)]
struct Scripted {
    answers: Mutex<HashMap<String, Answers>>,
    tries: AtomicUsize,
}

impl Scripted {
    fn answer(self: &Arc<Self>, key: &str, answers: Answers) -> Arc<Self> {
        self.answers.lock().unwrap().insert(key.to_owned(), answers);
        self.clone()
    }
}

impl Fetch for Scripted {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, mut into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        self.tries.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        let list = answers.get_mut(&attachment.fetch).expect("a scripted file");
        let answer = if list.len() > 1 { list.remove(0) } else { list[0].clone() };
        Box::pin(async move {
            into.push(&answer?)?;
            Ok(into)
        })
    }
}

/// A platform whose files come in chunks for as long as anyone takes them
/// (a file much larger than its message said), counting what it sent.
#[derive(Default)]
struct Endless {
    sent: AtomicUsize,
}

impl Fetch for Endless {
    fn fetch<'a>(&'a self, _attachment: &'a Attachment, mut into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        Box::pin(async move {
            let chunk = [7u8; 64 * 1024];
            loop {
                into.push(&chunk)?;
                self.sent.fetch_add(chunk.len(), Ordering::SeqCst);
                // A network's pace: other tasks run between chunks.
                tokio::task::yield_now().await;
            }
        })
    }
}

/// Holds each download of a file whose key starts with "held" until the
/// test releases one, and tells the test of every download that starts.
struct Gated {
    started: mpsc::UnboundedSender<String>,
    gate: tokio::sync::Semaphore,
    held_now: AtomicUsize,
    held_most: AtomicUsize,
    bytes: Vec<u8>,
}

impl Gated {
    fn new(started: mpsc::UnboundedSender<String>, bytes: Vec<u8>) -> Arc<Gated> {
        let (gate, held_now, held_most) = (tokio::sync::Semaphore::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        Arc::new(Gated { started, gate, held_now, held_most, bytes })
    }
}

impl Fetch for Gated {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, mut into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        Box::pin(async move {
            let _ = self.started.send(attachment.fetch.clone());
            if attachment.fetch.starts_with("held") {
                let now = self.held_now.fetch_add(1, Ordering::SeqCst) + 1;
                self.held_most.fetch_max(now, Ordering::SeqCst);
                self.gate.acquire().await.expect("open").forget();
                self.held_now.fetch_sub(1, Ordering::SeqCst);
            }
            into.push(&self.bytes)?;
            Ok(into)
        })
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    store: Store,
    groups_dir: PathBuf,
    group: GroupName,
    ready: mpsc::Receiver<GroupName>,
    preparer: Preparer,
    shutdown: CancellationToken,
}

impl Rig {
    async fn new(fetch: Arc<dyn Fetch>, config: Config) -> Rig {
        let group: GroupName = "family".parse().unwrap();
        let (dir, store) = crate::store::tests::store_with(&group).await;
        Rig::on(dir, store, group, fetch, config)
    }

    /// A rig on `store`, whose group `group` is registered.
    fn on(dir: tempfile::TempDir, store: Store, group: GroupName, fetch: Arc<dyn Fetch>, config: Config) -> Rig {
        let groups_dir = dir.path().join("groups");
        let fetchers = Fetchers::default();
        fetchers.register(Platform::Telegram, fetch);
        let (ready_tx, ready) = mpsc::channel(8);
        let deps = PreparerDeps {
            queue: store.queue(),
            preparing: store.preparing(),
            outbox: Outbox::new(store.outbox(), None),
            groups_dir: groups_dir.clone(),
            fetchers,
            live: Live::fixed(&config),
            retry: RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(10)),
            ready: ready_tx,
            leases: store.leases(),
        };
        let shutdown = CancellationToken::new();
        let preparer = Preparer::spawn(deps, &TaskTracker::new(), shutdown.clone());
        Rig { _dir: dir, store, groups_dir, group, ready, preparer, shutdown }
    }

    fn message(&self, text: &str, media: Vec<Attachment>, album: Option<&str>) -> Inbound {
        let mut msg = Inbound::new(self.group.clone(), Source::Chat(Platform::Telegram), "Ann", text);
        msg.media = media;
        msg.album = album.map(str::to_owned);
        msg
    }

    async fn store(&self, msg: &Inbound) -> InboundId {
        match self.store.preparing().insert_preparing(msg, false).await.unwrap() {
            Stored::Preparing(id) => id,
            Stored::Merged { into, .. } => into,
        }
    }

    /// Waits until the group is said ready, then reads the message as its session would.
    async fn prepared(&mut self) -> crate::store::Pulled {
        let group = self.ready.recv().await.expect("ready");
        assert_eq!(group, self.group);
        let mut pulled = self.store.queue().queued_inbound(&self.group, InboundId(0), 10).await.unwrap();
        assert_eq!(pulled.len(), 1, "one message queued");
        pulled.remove(0)
    }

    fn saved(&self, path: &str) -> Vec<u8> {
        std::fs::read(self.groups_dir.join("family").join(path)).unwrap()
    }
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_pixel(width, height, image::Rgb([200, 30, 30]));
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    bytes
}

fn saved(outcome: &Outcome) -> (&str, bool, Option<&str>) {
    match outcome {
        Outcome::Saved { path, shown, image_note, .. } => (path.as_str(), *shown, image_note.as_deref()),
        other => panic!("not saved: {other:?}"),
    }
}

#[tokio::test]
async fn a_photo_is_saved_in_the_inbox_shown_to_the_model_and_its_message_queued() {
    let bytes = png(40, 30);
    let fetch = Arc::new(Scripted::default()).answer("f1", vec![Ok(bytes.clone())]);
    let mut rig = Rig::new(fetch, Config::default()).await;
    let id = rig.store(&rig.message("what is this", vec![Attachment::bounded(MediaKind::Photo, "f1")], None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    assert_eq!(pulled.id, id);
    assert_eq!(pulled.msg.text, "what is this");
    let (path, shown, note) = saved(&pulled.msg.media[0].outcome);
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(path, format!("inbox/{day}/{}-photo.jpg", id.0));
    assert!(shown && note.is_none());
    assert_eq!(rig.saved(path), bytes, "the file as sent");
    assert_eq!(pulled.images.len(), 1);
    assert_eq!(pulled.images[0].media_type, "image/png", "small and of a type the API takes: as it came");
    rig.shutdown.cancel();
}

#[tokio::test]
async fn an_albums_photos_go_as_one_message_with_every_image_in_order() {
    let fetch = Arc::new(Scripted::default())
        .answer("a", vec![Ok(png(10, 10))])
        .answer("b", vec![Ok(png(20, 10))])
        .answer("c", vec![Ok(png(30, 10))]);
    let mut rig = Rig::new(fetch, Config::default()).await;
    // Every part is in before the preparer looks (its window then only delays it).
    let first = rig.store(&rig.message("the trip", vec![Attachment::bounded(MediaKind::Photo, "a")], Some("x"))).await;
    for key in ["b", "c"] {
        let part = rig.message("", vec![Attachment::bounded(MediaKind::Photo, key)], Some("x"));
        assert_eq!(rig.store(&part).await, first, "joins the first part");
    }
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    assert_eq!(pulled.id, first);
    assert_eq!(pulled.msg.media.len(), 3);
    let paths: Vec<&str> = pulled.msg.media.iter().map(|a| saved(&a.outcome).0).collect();
    for (n, path) in paths.iter().enumerate() {
        assert!(path.ends_with(&format!("{}-{}-photo.jpg", first.0, n + 1)), "{path}");
    }
    assert_eq!(pulled.images.len(), 3);
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_failing_download_is_tried_again_and_then_named_in_the_message_which_still_goes() {
    let fetch = Arc::new(Scripted::default())
        .answer(
            "flaky",
            vec![
                Err(FetchError::Transient("timed out".into())),
                Err(FetchError::Transient("502".into())),
                Ok(png(5, 5)),
            ],
        )
        .answer("gone", vec![Err(FetchError::Gone("file expired".into()))]);
    let mut rig = Rig::new(fetch.clone(), Config::default()).await;
    let media = vec![Attachment::bounded(MediaKind::Photo, "flaky"), Attachment::bounded(MediaKind::Document, "gone")];
    rig.store(&rig.message("two files", media, None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    assert!(saved(&pulled.msg.media[0].outcome).1, "the third try worked");
    assert_eq!(pulled.msg.media[1].outcome, Outcome::Failed { why: "file expired".into() }, "gone is not tried again");
    assert_eq!(fetch.tries.load(Ordering::SeqCst), 4);
    assert!(pulled.msg.media[1].describe().contains("the download failed (file expired)"));
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_file_announced_too_large_is_not_fetched_and_the_sender_is_told() {
    let fetch = Arc::new(Scripted::default()).answer("big", vec![Ok(Vec::new())]);
    let counters = crate::metrics::counters::counters();
    let label = crate::metrics::counters::DownloadLabels { platform: "telegram", outcome: "too_large" };
    let before = counters.media_downloads.get_or_create(&label).get();
    let mut rig = Rig::new(fetch.clone(), Config::default()).await;
    let mut doc = Attachment::bounded(MediaKind::Document, "big").with_name(Some("scan.pdf"));
    doc.size = Some(25 * 1024 * 1024);
    rig.store(&rig.message("see attached", vec![doc], None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    assert_eq!(pulled.msg.media[0].outcome, Outcome::TooLarge { limit: 20 * 1024 * 1024 });
    assert_eq!(fetch.tries.load(Ordering::SeqCst), 0);
    assert!(counters.media_downloads.get_or_create(&label).get() > before, "counted for /metrics");
    let rows = Outbox::new(rig.store.outbox(), None).rows_after(&rig.group, OutboxId(0)).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["Ann's document \"scan.pdf\" (25.0 MB) is larger than the 20.0 MB a bot may download, so the agent gets \
          only its name. Share it another way (a link) if the agent needs it."]
    );
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_damaged_or_crafted_image_is_kept_as_a_file_with_a_note_and_not_shown() {
    let huge = crate::media::images::tests::claimed_png(100_000, 100_000);
    let fetch = Arc::new(Scripted::default())
        .answer("huge", vec![Ok(huge.clone())])
        .answer("junk", vec![Ok(b"\x89PNG\r\n\x1a\nnot really".to_vec())]);
    let mut rig = Rig::new(fetch, Config::default()).await;
    let media = vec![Attachment::bounded(MediaKind::Image, "huge"), Attachment::bounded(MediaKind::Photo, "junk")];
    rig.store(&rig.message("", media, None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    assert!(pulled.images.is_empty());
    let (path, shown, note) = saved(&pulled.msg.media[0].outcome);
    assert!(!shown);
    assert!(note.unwrap().contains("more than pincer decodes"), "{note:?}");
    assert_eq!(rig.saved(path), huge, "kept as a file");
    let (_, shown, note) = saved(&pulled.msg.media[1].outcome);
    assert!(!shown && note.is_some());
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_message_left_preparing_by_a_restart_is_prepared_at_the_first_wake() {
    let fetch = Arc::new(Scripted::default()).answer("f", vec![Ok(png(3, 3))]);
    let mut rig = Rig::new(fetch, Config::default()).await;
    let id = rig.store(&rig.message("before the crash", vec![Attachment::bounded(MediaKind::Photo, "f")], None)).await;
    // As a previous process would have left it: the images half written.
    rig.store
        .queue()
        .test_insert_images(id, &[ModelImage { media_type: "image/png".into(), data: vec![9] }])
        .await
        .unwrap();
    rig.preparer.wake();
    let pulled = rig.prepared().await;
    assert_eq!(pulled.images.len(), 1);
    assert_ne!(pulled.images[0].data, [9], "written again, not kept");
    rig.shutdown.cancel();
}

#[test]
fn a_stored_name_is_one_safe_component_with_the_message_id() {
    let named = Attachment::bounded(MediaKind::Document, "x").with_name(Some("../../etc/passwd"));
    assert_eq!(stored_name(&named, InboundId(7), None), "7-_.._etc_passwd");
    let voice = Attachment::bounded(MediaKind::Voice, "x").with_mime(Some("audio/ogg"));
    assert_eq!(stored_name(&voice, InboundId(7), Some(2)), "7-2-voice.ogg");
    let long = Attachment::bounded(MediaKind::Document, "x").with_name(Some(&format!("{}.pdf", "a".repeat(110))));
    let name = stored_name(&long, InboundId(123), None);
    assert!(name.len() <= crate::domain::media::SAFE_NAME_BYTES && name.starts_with("123-") && name.ends_with(".pdf"));
}

#[tokio::test]
async fn a_failed_download_is_tried_again_when_a_restart_delivers_its_message_again() {
    // The first time: the photo is shown, the document's download fails.
    let fetch = Arc::new(Scripted::default())
        .answer("photo", vec![Ok(png(40, 30))])
        .answer("doc", vec![Err(FetchError::Gone("not now".into()))]);
    let mut rig = Rig::new(fetch.clone(), Config::default()).await;
    let media = vec![Attachment::bounded(MediaKind::Photo, "photo"), Attachment::bounded(MediaKind::Document, "doc")];
    let id = rig.store(&rig.message("both", media, None)).await;
    rig.preparer.wake();
    let first = rig.prepared().await;
    assert!(matches!(first.msg.media[1].outcome, Outcome::Failed { .. }), "{:?}", first.msg.media);
    // The session wrote it to its process, which a restart took away.
    rig.store.queue().set_inbound_state(&[id], crate::store::InboundState::Sent).await.unwrap();

    fetch.answer("doc", vec![Ok(b"%PDF now it is there".to_vec())]);
    let tries = fetch.tries.load(Ordering::SeqCst);
    rig.store.queue().recover_after_restart(chrono::Utc::now()).await.unwrap();
    assert!(rig.store.queue().queued_inbound(&rig.group, InboundId(0), 10).await.unwrap().is_empty(), "prepared first");
    rig.preparer.wake();
    let again = rig.prepared().await;
    assert_eq!(again.id, id);
    assert_eq!(fetch.tries.load(Ordering::SeqCst), tries + 1, "only the failed one was fetched again");
    let (path, _, _) = saved(&again.msg.media[1].outcome);
    assert_eq!(rig.saved(path), b"%PDF now it is there");
    assert_eq!(saved(&again.msg.media[0].outcome), saved(&first.msg.media[0].outcome), "the photo as it was");
    assert_eq!(again.images, first.images, "its image still goes with it");
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_file_larger_than_its_message_said_is_abandoned_at_the_limit_not_held_whole() {
    let fetch = Arc::new(Endless::default());
    let mut rig = Rig::new(fetch.clone(), Config::default()).await;
    // No size said: only the bytes as they arrive tell.
    let doc = Attachment::bounded(MediaKind::Document, "endless").with_name(Some("dump.bin"));
    rig.store(&rig.message("see attached", vec![doc], None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    let limit = fetch_limit(Platform::Telegram);
    assert_eq!(pulled.msg.media[0].outcome, Outcome::TooLarge { limit });
    assert!(fetch.sent.load(Ordering::SeqCst) as u64 <= limit, "stopped at the limit, and not tried again");
    let rows = Outbox::new(rig.store.outbox(), None).rows_after(&rig.group, OutboxId(0)).await.unwrap();
    assert_eq!(rows.len(), 1, "the sender is told");
    assert!(rows[0].text.contains("larger than the 20.0 MB"), "{}", rows[0].text);
    rig.shutdown.cancel();
}

#[tokio::test]
async fn an_image_that_needs_more_than_the_whole_decode_budget_is_kept_unshown_with_a_note() {
    let fetch =
        Arc::new(Scripted::default()).answer("large", vec![Ok(png(1000, 1000))]).answer("small", vec![Ok(png(40, 30))]);
    let mut config = Config::default();
    // Below what the config allows, to keep the test's images small: a
    // 1000 × 1000 RGB image decodes to 3 MB.
    config.media.decode_budget = crate::config::ByteSize(1024 * 1024);
    let mut rig = Rig::new(fetch, config).await;
    let media = vec![Attachment::bounded(MediaKind::Photo, "large"), Attachment::bounded(MediaKind::Photo, "small")];
    rig.store(&rig.message("two", media, None)).await;
    rig.preparer.wake();

    let pulled = rig.prepared().await;
    let (path, shown, note) = saved(&pulled.msg.media[0].outcome);
    assert!(!shown, "over the budget");
    assert!(note.unwrap().starts_with("1000 × 1000 pixels is more than pincer decodes"), "{note:?}");
    assert_eq!(rig.saved(path), png(1000, 1000), "kept as a file");
    assert!(saved(&pulled.msg.media[1].outcome).1, "the small one fits and is shown");
    assert_eq!(pulled.images.len(), 1);
    rig.shutdown.cancel();
}

#[tokio::test]
async fn a_question_in_one_group_is_prepared_before_another_groups_pile_of_context_photos() {
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let fetch = Gated::new(started_tx, png(4, 4));
    let mut rig = Rig::new(fetch.clone(), Config::default()).await;
    let club: GroupName = "club".parse().unwrap();
    rig.store.groups().add_group(&club, &crate::store::GroupSettings::default()).await.unwrap();
    // Fifty photos nobody asked the agent about, then a question elsewhere.
    for n in 0..50 {
        let msg = rig.message("", vec![Attachment::bounded(MediaKind::Photo, format!("held{n}"))], None);
        assert!(matches!(rig.store.preparing().insert_preparing(&msg, true).await.unwrap(), Stored::Preparing(_)));
    }
    let mut question = Inbound::new(club.clone(), Source::Chat(Platform::Telegram), "Bo", "@Andy what is this?");
    question.media = vec![Attachment::bounded(MediaKind::Photo, "asked")];
    rig.store(&question).await;
    rig.preparer.wake();

    // No pile photo is let through yet: the question's download must start
    // while slots are still free.
    let mut pile = 0;
    while started.recv().await.expect("a download") != "asked" {
        pile += 1;
        assert!(pile < AT_ONCE, "every slot went to the pile: the question waits behind fifty photos");
    }
    assert!(pile <= 1, "the pile takes one slot at a time");
    assert_eq!(rig.ready.recv().await.unwrap(), club, "the question is ready while the pile's first is held");

    fetch.gate.add_permits(50);
    for _ in 0..50 {
        assert_eq!(rig.ready.recv().await.unwrap(), rig.group);
    }
    assert_eq!(fetch.held_most.load(Ordering::SeqCst), 1, "the pile went one photo at a time");
    assert!(rig.store.preparing().all_preparing().await.unwrap().is_empty());
    rig.shutdown.cancel();
}

/// On a cluster node the preparer prepares only the groups the node holds:
/// a message of a group held elsewhere is left for its owner (a pass that
/// prepared another group's message did not touch it), and prepared once
/// the node claims the group.
#[tokio::test]
async fn a_cluster_node_prepares_only_the_groups_it_holds() {
    use crate::cluster::{LeaseName, NodeId};
    let dir = tempfile::tempdir().unwrap();
    let url = crate::store::tests::postgres::server().fresh_database();
    let store = Store::connect(&crate::store::Location::Postgres(url)).await.unwrap();
    let (family, other): (GroupName, GroupName) = ("family".parse().unwrap(), "other".parse().unwrap());
    for g in [&family, &other] {
        store.groups().add_group(g, &crate::store::GroupSettings::default()).await.unwrap();
    }
    let node = NodeId::new("node-a").unwrap();
    let incarnation = store.cluster().unwrap().register(&node, 4, 10_000_000, 0).await.unwrap().expect("registered");
    store.leases().claim(&LeaseName::group(&other), &node, incarnation).await.unwrap().expect("claimed");
    let fetch = Arc::new(Scripted::default()).answer("f1", vec![Ok(png(8, 8))]).answer("f2", vec![Ok(png(8, 8))]);
    let mut rig = Rig::on(dir, store, family.clone(), fetch.clone(), Config::default());
    let photo = |key: &str| vec![Attachment::bounded(MediaKind::Photo, key)];
    let theirs = rig.store(&rig.message("not ours yet", photo("f1"), None)).await;
    let mut ours = rig.message("ours", photo("f2"), None);
    ours.group = other.clone();
    rig.store(&ours).await;
    rig.preparer.wake();

    assert_eq!(rig.ready.recv().await, Some(other), "the held group's message is prepared");
    assert_eq!(fetch.tries.load(Ordering::SeqCst), 1, "the other group's file was not fetched here");
    let waiting = rig.store.preparing().all_preparing().await.unwrap();
    assert_eq!(waiting.iter().map(|w| w.id).collect::<Vec<_>>(), [theirs], "left for the group's owner");

    rig.store.leases().claim(&LeaseName::group(&family), &node, incarnation).await.unwrap().expect("claimed");
    rig.preparer.wake();
    let pulled = rig.prepared().await;
    assert_eq!((pulled.id, fetch.tries.load(Ordering::SeqCst)), (theirs, 2));
    rig.shutdown.cancel();
}
