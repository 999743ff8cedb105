//! The driver under paused time, with a fake platform that reports each call
//! on a channel: a test waits for the next call, or for the channel to close
//! (the loop ended and dropped the port), never on a fixed sleep.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::config::ProgressConfig;
use crate::domain::activity::{BackgroundWork, TurnActivity, TurnDone, WhenDone, WorkKind};
use crate::outbox::Outbox;
use crate::store::tests::store_with;
use crate::store::Store;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Post { id: String, text: String, stop: bool },
    Edit { id: String, text: String, stop: bool },
    Delete { id: String },
}

/// A platform that numbers its messages and fails the edits it is told to.
struct Fake {
    calls: mpsc::UnboundedSender<(Instant, Call)>,
    next_id: AtomicU64,
    failing_edits: Mutex<VecDeque<StatusError>>,
}

impl Fake {
    fn new(failing_edits: Vec<StatusError>) -> (Arc<Fake>, mpsc::UnboundedReceiver<(Instant, Call)>) {
        let (calls, rx) = mpsc::unbounded_channel();
        let fake = Fake { calls, next_id: AtomicU64::new(1), failing_edits: Mutex::new(failing_edits.into()) };
        (Arc::new(fake), rx)
    }

    fn log(&self, call: Call) {
        let _ = self.calls.send((Instant::now(), call));
    }
}

impl StatusPort for Fake {
    async fn post(&self, _: &ChatAddress, text: &str, stop: bool) -> Result<String, StatusError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst).to_string();
        self.log(Call::Post { id: id.clone(), text: text.to_owned(), stop });
        Ok(id)
    }
    async fn edit(&self, _: &ChatAddress, id: &str, text: &str, stop: bool) -> Result<(), StatusError> {
        self.log(Call::Edit { id: id.to_owned(), text: text.to_owned(), stop });
        let failure = self.failing_edits.lock().unwrap().pop_front();
        failure.map_or(Ok(()), Err)
    }
    async fn delete(&self, _: &ChatAddress, id: &str) -> Result<(), StatusError> {
        self.log(Call::Delete { id: id.to_owned() });
        Ok(())
    }
    async fn react(&self, _: &ChatAddress, _: &str, _: &str) -> Result<(), StatusError> {
        Ok(())
    }
}

fn team() -> GroupName {
    "team".parse().unwrap()
}

fn chat() -> ChatAddress {
    ChatAddress::telegram(-100, None)
}

async fn directory() -> (tempfile::TempDir, Store, Directory) {
    let (dir, store) = store_with(&team()).await;
    let directory = Directory::new(&store, Outbox::new(store.outbox(), None));
    (dir, store, directory)
}

/// The records in memory: a SQLite pool's timeouts do not survive paused time.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Vec<StatusRecord>>>);

impl Memory {
    fn on(&self, platform: Platform) -> Vec<StatusRecord> {
        self.0.lock().unwrap().iter().filter(|r| r.at.platform == platform).cloned().collect()
    }
}

impl StatusRecords for Memory {
    async fn remember(&self, record: &StatusRecord) -> Result<(), StoreError> {
        self.0.lock().unwrap().push(record.clone());
        Ok(())
    }
    async fn forget(&self, at: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        self.0.lock().unwrap().retain(|r| !(r.at == *at && r.message_id == message_id));
        Ok(())
    }
    async fn remembered(&self, platform: Platform) -> Result<Vec<StatusRecord>, StoreError> {
        Ok(self.on(platform))
    }
}

fn turn(number: u64, started: Instant) -> Activity {
    Activity {
        turn: Some(TurnActivity { number, started, steps: 0, now: None, recent: vec![] }),
        ..Activity::default()
    }
}

fn done(number: u64, took: Duration) -> Activity {
    Activity { last_done: Some(TurnDone { number, took, steps: 0, cost_usd: None, ok: true }), ..Activity::default() }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(Instant, Call)>, since: Instant) -> (Duration, Call) {
    let (at, call) = rx.recv().await.expect("a call");
    (at - since, call)
}

fn post(id: &str, text: &str) -> Call {
    Call::Post { id: id.into(), text: text.into(), stop: true }
}

fn edit(id: &str, text: &str) -> Call {
    Call::Edit { id: id.into(), text: text.into(), stop: true }
}

#[tokio::test(start_paused = true)]
async fn a_slow_turn_is_posted_stored_edited_then_deleted_and_forgotten() {
    let records = Memory::default();
    let store = records.clone();
    let (port, mut calls) = Fake::new(vec![]);
    let t0 = Instant::now();
    let (tx, rx) = watch::channel(turn(4, t0));
    let progress = Progress::default();
    progress.follow(&team(), rx, port, chat(), ProgressSettings::default(), records);
    assert_eq!(next(&mut calls, t0).await, (Duration::from_secs(5), post("1", "Working… 5 s")));
    let stored = store.on(Platform::Telegram);
    assert_eq!(stored, [StatusRecord { at: chat(), message_id: "1".into(), group: team(), turn: Some(4) }]);
    assert_eq!(next(&mut calls, t0).await, (Duration::from_secs(8), edit("1", "Working… 8 s")));
    tokio::time::sleep_until(t0 + Duration::from_millis(9500)).await;
    tx.send_replace(done(4, Duration::from_millis(9500)));
    // At once, not at the next throttle slot (11 s).
    assert_eq!(next(&mut calls, t0).await, (Duration::from_millis(9500), Call::Delete { id: "1".into() }));
    assert_eq!(calls.recv().await, None, "the loop ended, with nothing more");
    assert!(store.on(Platform::Telegram).is_empty());
    assert!(progress.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_quick_turn_sends_nothing_and_the_loop_ends() {
    let records = Memory::default();
    let (port, mut calls) = Fake::new(vec![]);
    let (tx, rx) = watch::channel(Activity::default());
    Progress::default().follow(&team(), rx, port, chat(), ProgressSettings::default(), records);
    // Started before its turn: it waits for it.
    tokio::task::yield_now().await;
    tx.send_replace(turn(1, Instant::now()));
    tokio::time::sleep(Duration::from_secs(4)).await;
    tx.send_replace(done(1, Duration::from_secs(4)));
    assert_eq!(calls.recv().await, None);
}

#[tokio::test(start_paused = true)]
async fn the_summary_finishes_the_message_and_forgets_it() {
    let records = Memory::default();
    let store = records.clone();
    let (port, mut calls) = Fake::new(vec![]);
    let t0 = Instant::now();
    let (tx, rx) = watch::channel(turn(2, t0));
    let settings = ProgressSettings { when_done: WhenDone::Summary, ..ProgressSettings::default() };
    Progress::default().follow(&team(), rx, port, chat(), settings, records);
    assert!(matches!(next(&mut calls, t0).await.1, Call::Post { .. }));
    tx.send_replace(done(2, Duration::from_secs(6)));
    let finish = Call::Edit { id: "1".into(), text: "Done in 6 s".into(), stop: false };
    assert_eq!(next(&mut calls, t0).await.1, finish);
    assert_eq!(calls.recv().await, None);
    assert!(store.on(Platform::Telegram).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_gone_message_is_posted_again_at_the_next_slot_and_the_records_follow() {
    let records = Memory::default();
    let store = records.clone();
    let (port, mut calls) = Fake::new(vec![StatusError::Gone("deleted by an admin".into())]);
    let t0 = Instant::now();
    let (tx, rx) = watch::channel(turn(1, t0));
    Progress::default().follow(&team(), rx, port, chat(), ProgressSettings::default(), records);
    assert_eq!(next(&mut calls, t0).await.0, Duration::from_secs(5));
    assert_eq!(next(&mut calls, t0).await, (Duration::from_secs(8), edit("1", "Working… 8 s")));
    assert_eq!(next(&mut calls, t0).await, (Duration::from_secs(11), post("2", "Working… 11 s")));
    let stored = store.on(Platform::Telegram);
    assert_eq!(stored.iter().map(|r| r.message_id.as_str()).collect::<Vec<_>>(), ["2"]);
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn when_the_session_goes_the_message_goes_and_the_loop_ends() {
    let records = Memory::default();
    let (port, mut calls) = Fake::new(vec![]);
    let t0 = Instant::now();
    let mut working = turn(1, t0);
    working.background.push(BackgroundWork {
        id: "t".into(),
        kind: WorkKind::Teammate,
        label: "researcher".into(),
        started: t0,
        doing: None,
    });
    let (tx, rx) = watch::channel(working);
    Progress::default().follow(&team(), rx, port, chat(), ProgressSettings::default(), records);
    assert!(matches!(next(&mut calls, t0).await.1, Call::Post { .. }));
    drop(tx);
    assert_eq!(next(&mut calls, t0).await.1, Call::Delete { id: "1".into() });
    assert_eq!(calls.recv().await, None);
}

#[tokio::test(start_paused = true)]
async fn one_loop_per_group_and_off_starts_none() {
    let records = Memory::default();
    let progress = Progress::default();
    let (port, _calls) = Fake::new(vec![]);
    let (_tx, rx) = watch::channel(turn(1, Instant::now()));
    let off = ProgressSettings { mode: ProgressMode::Off, ..ProgressSettings::default() };
    progress.follow(&team(), rx.clone(), port.clone(), chat(), off, records.clone());
    assert!(progress.is_empty());
    progress.follow(&team(), rx.clone(), port.clone(), chat(), ProgressSettings::default(), records.clone());
    progress.follow(&team(), rx, port, chat(), ProgressSettings::default(), records);
    assert_eq!(progress.len(), 1);
    progress.stop_all();
    assert!(progress.is_empty());
}

#[tokio::test]
async fn a_restart_marks_the_messages_left_behind_and_forgets_them() {
    let (_dir, store, records) = directory().await;
    let left = |id: &str, turn| StatusRecord { at: chat(), message_id: id.into(), group: team(), turn };
    records.remember_status(&left("7", Some(3))).await.unwrap();
    records.remember_status(&left("8", None)).await.unwrap();
    let wa = StatusRecord { at: ChatAddress::console(&team()), ..left("9", None) };
    records.remember_status(&wa).await.unwrap();
    let limited = StatusError::RateLimited { retry_after: None };
    let (port, mut calls) = Fake::new(vec![StatusError::Gone("deleted".into()), limited]);
    assert_eq!(clean_up_left_behind(&*port, &records, Platform::Telegram).await.unwrap(), 2);
    let interrupted = |id: &str| Call::Edit { id: id.into(), text: INTERRUPTED.into(), stop: false };
    assert_eq!(calls.recv().await.unwrap().1, interrupted("7"));
    assert_eq!(calls.recv().await.unwrap().1, interrupted("8"));
    // Gone: forgotten; rate limited: kept for the next start; other platforms untouched.
    assert_eq!(store.channels().status_messages(Platform::Telegram).await.unwrap(), [left("8", None)]);
    assert_eq!(store.channels().status_messages(Platform::Console).await.unwrap(), [wa]);
    assert_eq!(clean_up_left_behind(&*port, &records, Platform::Telegram).await.unwrap(), 1);
    assert!(store.channels().status_messages(Platform::Telegram).await.unwrap().is_empty());
}

#[test]
fn a_groups_own_mode_wins_over_the_configured_one() {
    let config = ProgressConfig { mode: ProgressMode::Verbose, ..ProgressConfig::default() };
    assert_eq!(ProgressSettings::for_group(&config, None).mode, ProgressMode::Verbose);
    assert_eq!(ProgressSettings::for_group(&config, Some(ProgressMode::Off)).mode, ProgressMode::Off);
    assert_eq!(ProgressSettings::for_group(&ProgressConfig::default(), None), ProgressSettings::default());
}
