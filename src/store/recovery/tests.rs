//! The one recovery on SQLite and PostgreSQL (`on_both!`): a takeover's
//! covers its group and leaves another group's rows alone; a restart's covers
//! every group. Each runs in a plain transaction here: the claim around a
//! takeover is `cluster/takeover/tests.rs`'s.

use chrono::{DateTime, Utc};

use super::*;
use crate::domain::media::{Attachment, MediaKind};
use crate::domain::schedule::{ContextMode, Schedule, Trigger};
use crate::domain::{Inbound, InboundId, Platform};
use crate::store::tests::{on_both, temp_store};
use crate::store::{GroupSettings, InboundState, NewSchedule, Store};

/// What a holder of one group left in flight when it stopped.
struct Left {
    /// A chat message written to its CLI.
    chat: InboundId,
    /// A line typed into `pincer chat`, written to its CLI.
    console: InboundId,
    /// A chat message it never took.
    queued: InboundId,
    /// A scheduled prompt written to its CLI.
    prompt: InboundId,
    /// A chat message written to its CLI whose file failed to download.
    download: InboundId,
    /// A schedule whose run it left `running`.
    schedule: Schedule,
}

/// When the stopped holder fired its schedule; the recovery runs a minute later.
fn fired_at() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_900_000_000_000_000).unwrap()
}

fn recovered_at() -> DateTime<Utc> {
    fired_at() + chrono::Duration::minutes(1)
}

async fn left_in_flight(store: &Store, name: &str) -> Left {
    let g: GroupName = name.parse().unwrap();
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let insert = |source: Source, text: &str, state: InboundState| {
        let msg = Inbound::new(g.clone(), source, "ann", text);
        async move { store.queue().insert_inbound(&msg, state).await.unwrap() }
    };
    let chat = Source::Chat(Platform::Telegram);
    let (chat_id, console) =
        (insert(chat, "hi", InboundState::Sent).await, insert(Source::Console, "typed", InboundState::Sent).await);
    let queued = insert(chat, "later", InboundState::Queued).await;
    let prompt = insert(Source::Scheduled, "water the plants", InboundState::Sent).await;
    let mut with_file = Inbound::new(g.clone(), chat, "ann", "look");
    let mut doc = Attachment::bounded(MediaKind::Document, "doc");
    doc.outcome = Outcome::Failed { why: "the platform said no".into() };
    with_file.media = vec![doc];
    let download = store.queue().insert_inbound(&with_file, InboundState::Sent).await.unwrap();
    let new = NewSchedule {
        group: g.clone(),
        prompt: "water".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Group,
    };
    let schedule = store.schedules().add_schedule(&new, Some(fired_at())).await.unwrap();
    let next = Some(fired_at() + chrono::Duration::hours(1));
    store.schedules().fire_schedule(schedule.id, &g, fired_at(), next).await.unwrap().expect("fired");
    let schedule = store.schedules().schedule(schedule.id).await.unwrap();
    Left { chat: chat_id, console, queued, prompt, download, schedule }
}

async fn recover(store: &Store, recovery: Recovery) -> Recovered {
    let mut tx = store.db.pool.begin().await.unwrap();
    let mut recovered = recovery.run(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    recovered.runs_cut_off.sort_by_key(|id| id.0);
    recovered
}

async fn state(store: &Store, id: InboundId) -> String {
    let query = sqlx::query_scalar("SELECT state FROM inbound WHERE id = $1").bind(id.0);
    query.fetch_one(&store.db.pool).await.unwrap()
}

/// The states of `left`'s messages: chat, console, queued, prompt, download.
async fn states(store: &Store, left: &Left) -> [String; 5] {
    [
        state(store, left.chat).await,
        state(store, left.console).await,
        state(store, left.queued).await,
        state(store, left.prompt).await,
        state(store, left.download).await,
    ]
}

/// The outcome of the file of `left`'s download.
async fn download(store: &Store, left: &Left) -> Outcome {
    let query = sqlx::query_scalar("SELECT media FROM inbound WHERE id = $1").bind(left.download.0);
    let media: Option<String> = query.fetch_one(&store.db.pool).await.unwrap();
    rows::read_media(media.as_deref()).unwrap().remove(0).outcome
}

/// `left`'s schedule's run (outcome, text) and when the schedule runs next.
async fn run(store: &Store, left: &Left) -> (String, Option<String>, Option<DateTime<Utc>>) {
    let runs = store.schedules().runs(left.schedule.id).await.unwrap();
    let [run] = &runs[..] else { panic!("one run: {runs:?}") };
    let next = store.schedules().schedule(left.schedule.id).await.unwrap().next_run;
    (run.outcome.clone(), run.text.clone(), next)
}

fn strings<const N: usize>(all: [&str; N]) -> [String; N] {
    all.map(str::to_owned)
}

/// `left` as its holder left it: nothing recovered.
async fn untouched(store: &Store, left: &Left) {
    assert_eq!(states(store, left).await, strings(["sent", "sent", "queued", "sent", "sent"]));
    assert!(matches!(download(store, left).await, Outcome::Failed { .. }));
    assert_eq!(run(store, left).await, ("running".into(), None, left.schedule.next_run));
}

on_both! {
async fn a_takeover_recovers_its_group_and_leaves_another_groups_rows_alone() {
    let (_dir, store) = temp_store().await;
    let (taken, other) = (left_in_flight(&store, "taken").await, left_in_flight(&store, "other").await);

    let recovered = recover(&store, Recovery::takeover(&"taken".parse().unwrap(), recovered_at())).await;
    let left = GroupLeft { group: "taken".into(), written_again: 3, waiting: 4 };
    assert_eq!(recovered, Recovered { groups: vec![left], runs_cut_off: vec![taken.schedule.id] });
    assert_eq!(
        states(&store, &taken).await,
        strings(["queued", "queued", "queued", "failed", "preparing"]),
        "the chat message and the terminal's line wait again, the prompt is the rerun's, the file is fetched again"
    );
    assert_eq!(download(&store, &taken).await, Outcome::Waiting);
    let (outcome, text, next) = run(&store, &taken).await;
    assert_eq!((outcome.as_str(), next), ("error", Some(recovered_at())), "cut off, and due again");
    assert!(text.unwrap().contains("runs again on another"));
    untouched(&store, &other).await;
}
}

on_both! {
async fn a_restart_recovers_every_group() {
    let (_dir, store) = temp_store().await;
    let all = [left_in_flight(&store, "one").await, left_in_flight(&store, "two").await];

    let recovered = recover(&store, Recovery::restart(recovered_at())).await;
    let left = |group: &str| GroupLeft { group: group.into(), written_again: 2, waiting: 3 };
    let cut_off = all.iter().map(|left| left.schedule.id).collect();
    assert_eq!(recovered, Recovered { groups: vec![left("one"), left("two")], runs_cut_off: cut_off });
    for left in &all {
        assert_eq!(
            states(&store, left).await,
            strings(["queued", "failed", "queued", "failed", "preparing"]),
            "the terminal that typed its line went with the pincer that stopped"
        );
        assert_eq!(download(&store, left).await, Outcome::Waiting);
        let (outcome, text, next) = run(&store, left).await;
        assert_eq!((outcome.as_str(), next), ("error", Some(recovered_at())));
        assert!(text.unwrap().contains("killed or crashed"));
    }
    let again = recover(&store, Recovery::restart(recovered_at())).await;
    assert_eq!(again.runs_cut_off, [], "a run is recovered once");
    assert_eq!(again.groups.iter().map(|g| g.written_again).sum::<usize>(), 0, "and a message written once");
}
}

#[test]
fn only_a_restart_fails_the_terminals_lines_and_only_a_takeover_names_its_group() {
    let team: GroupName = "team".parse().unwrap();
    let (restart, takeover) = (Recovery::restart(recovered_at()), Recovery::takeover(&team, recovered_at()));
    assert_eq!(restart.failed_sources(), [Source::Scheduled, Source::Console]);
    assert_eq!(takeover.failed_sources(), [Source::Scheduled]);
    assert_eq!((restart.group(), takeover.group()), (None, Some("team")));
    assert_ne!(restart.cut_off_text(), takeover.cut_off_text());
}
