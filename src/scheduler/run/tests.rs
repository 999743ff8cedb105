//! A run through a scripted [`Submit`] port: no router, no session, no CLI;
//! the run's log is a real SQLite file.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures_util::future::BoxFuture;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::config::SchedulerConfig;
use crate::domain::schedule::Trigger;
use crate::domain::{GroupName, InboundId};
use crate::outbox::Outbox;
use crate::scheduler::submit::{IsolatedRun, Submit, SubmitError, TurnEnd, TurnWatch};
use crate::store::InboundState;
use crate::store::{GroupSettings, NewSchedule, Store};

/// How the scripted port answers a prompt.
enum Answer {
    /// The turn ends as given, once the test sends it.
    Later(oneshot::Receiver<TurnEnd>),
    Now(TurnEnd),
    /// The session stops before the turn ends.
    Stopped,
    Never,
    Refused,
}

/// What the port was given: each prompt, and whether it was isolated.
#[derive(Default)]
struct Seen {
    prompts: Vec<(Inbound, bool)>,
    /// The ids of group runs' stored prompts.
    ids: Vec<InboundId>,
}

struct Scripted {
    /// Where a group run's prompt is stored queued, as the router stores it.
    store: Store,
    answer: Mutex<Option<Answer>>,
    /// The isolated session's guard: its receiver (the test's) closes when dropped.
    session_alive: Mutex<Option<oneshot::Sender<()>>>,
    seen: Arc<Mutex<Seen>>,
    submitted: Arc<Notify>,
}

impl Scripted {
    fn watch(&self, msg: Inbound, isolated: bool) -> Result<TurnWatch, SubmitError> {
        self.seen.lock().unwrap().prompts.push((msg, isolated));
        self.submitted.notify_one();
        match self.answer.lock().unwrap().take().expect("one prompt per run") {
            Answer::Later(rx) => Ok(Box::pin(async move { rx.await.ok() })),
            Answer::Now(end) => Ok(Box::pin(async move { Some(end) })),
            Answer::Stopped => Ok(Box::pin(async { None })),
            Answer::Never => Ok(Box::pin(std::future::pending())),
            Answer::Refused => Err(SubmitError::new(std::io::Error::other("the group's session is closed"))),
        }
    }
}

impl Submit for Scripted {
    fn submit(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, InboundId), SubmitError>> {
        Box::pin(async move {
            let id = self.store.queue().insert_inbound(&msg, InboundState::Queued).await.map_err(SubmitError::new)?;
            self.seen.lock().unwrap().ids.push(id);
            Ok((self.watch(msg, false)?, id))
        })
    }

    fn submit_isolated(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, IsolatedRun), SubmitError>> {
        Box::pin(async move {
            let watch = self.watch(msg, true)?;
            let alive = self.session_alive.lock().unwrap().take().expect("one isolated session per run");
            Ok((watch, IsolatedRun::new(alive)))
        })
    }
}

struct Bench {
    _dir: tempfile::TempDir,
    deps: SchedulerDeps,
    store: Store,
    seen: Arc<Mutex<Seen>>,
    submitted: Arc<Notify>,
    /// Closes when the isolated run's session guard is dropped.
    session: oneshot::Receiver<()>,
}

async fn bench(answer: Answer, run_timeout: Duration) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
    store.groups().add_group(&"g".parse::<GroupName>().unwrap(), &GroupSettings::default()).await.unwrap();
    let (alive, session) = oneshot::channel();
    let (seen, submitted) = (Arc::new(Mutex::new(Seen::default())), Arc::new(Notify::new()));
    let submit = Scripted {
        store: store.clone(),
        answer: Mutex::new(Some(answer)),
        session_alive: Mutex::new(Some(alive)),
        seen: seen.clone(),
        submitted: submitted.clone(),
    };
    let deps = SchedulerDeps {
        outbox: Outbox::new(store.outbox(), None),
        schedules: store.schedules(),
        groups: store.groups(),
        budgets: store.budgets(),
        leases: store.leases(),
        queue: store.queue(),
        submit: Arc::new(submit),
        config: SchedulerConfig { run_timeout, ..SchedulerConfig::default() },
        live: crate::config::Live::fixed(&crate::config::Config::default()),
        zone: chrono_tz::UTC,
        tracker: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    Bench { _dir: dir, deps, store, seen, submitted, session }
}

impl Bench {
    /// A due schedule of `context`, fired as the scheduler fires it.
    async fn fire(&self, context: ContextMode) -> (Schedule, RunId) {
        let new = NewSchedule {
            group: "g".parse().unwrap(),
            prompt: "water the plants".into(),
            trigger: Trigger::interval("1h").unwrap(),
            context,
        };
        let now = Utc::now();
        let s = self.store.schedules().add_schedule(&new, Some(now)).await.unwrap();
        let run = self
            .store
            .schedules()
            .fire_schedule(s.id, &s.group, now, Some(now + chrono::Duration::hours(1)))
            .await
            .unwrap();
        (s, run.expect("the schedule is due"))
    }

    /// The run's log row: (outcome, text, cost).
    async fn logged(&self, s: &Schedule) -> (String, Option<String>, Option<f64>) {
        let runs = self.store.schedules().runs(s.id).await.unwrap();
        assert_eq!(runs.len(), 1);
        (runs[0].outcome.clone(), runs[0].text.clone(), runs[0].cost_usd)
    }
}

fn end(is_error: bool, text: &str) -> TurnEnd {
    TurnEnd { is_error, text: text.into(), cost_usd: Some(0.25) }
}

#[tokio::test]
async fn a_group_run_goes_to_the_groups_session_as_a_scheduled_message_and_logs_its_answer() {
    let b = bench(Answer::Now(end(false, "watered")), Duration::from_secs(60)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let done = execute(&b.deps, s.clone(), run).await;
    assert!(matches!(done.end, RunEnd::Ok) && done.id == s.id);
    assert_eq!(b.logged(&s).await, ("ok".into(), Some("watered".into()), Some(0.25)));
    let seen = b.seen.lock().unwrap();
    let (msg, isolated) = &seen.prompts[0];
    assert!(!isolated);
    assert_eq!(msg.source, Source::Scheduled);
    assert_eq!(msg.text, format!("[Scheduled task #{}, every 1h] water the plants", s.id));
}

#[tokio::test]
async fn a_turn_that_ends_in_error_fails_the_run_with_its_text() {
    let b = bench(Answer::Now(end(true, "the API is overloaded")), Duration::from_secs(60)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let done = execute(&b.deps, s.clone(), run).await;
    assert!(matches!(&done.end, RunEnd::Failed(why) if why == "the API is overloaded"));
    assert_eq!(b.logged(&s).await.0, "error");
}

#[tokio::test]
async fn a_prompt_the_port_refuses_fails_the_run_saying_why() {
    let b = bench(Answer::Refused, Duration::from_secs(60)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let done = execute(&b.deps, s.clone(), run).await;
    let RunEnd::Failed(why) = done.end else { panic!("the run failed") };
    assert_eq!(why, "could not hand the prompt to the agent: the group's session is closed");
    assert_eq!(b.logged(&s).await, ("error".into(), Some(why), None));
}

#[tokio::test]
async fn a_session_that_stops_first_leaves_the_schedule_due_for_the_next_start() {
    let b = bench(Answer::Stopped, Duration::from_secs(60)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let done = execute(&b.deps, s.clone(), run).await;
    assert!(matches!(done.end, RunEnd::Stopped));
    let next = b.store.schedules().schedule(s.id).await.unwrap().next_run.unwrap();
    assert!(next <= Utc::now(), "due again at once, not in an hour: {next}");
}

#[tokio::test]
async fn an_isolated_run_holds_its_session_until_its_turn_ends_then_lets_it_go() {
    let (answer, turn) = oneshot::channel();
    let mut b = bench(Answer::Later(turn), Duration::from_secs(60)).await;
    let (s, run) = b.fire(ContextMode::Isolated).await;
    let deps = Arc::new(b.deps);
    let running = tokio::spawn({
        let deps = deps.clone();
        async move { execute(&deps, s, run).await }
    });
    // The prompt was handed over, and the session is still held while the turn runs.
    b.submitted.notified().await;
    assert!(b.seen.lock().unwrap().prompts[0].1, "submitted as isolated");
    assert_eq!(b.session.try_recv(), Err(oneshot::error::TryRecvError::Empty), "the session is alive");
    answer.send(end(false, "done")).unwrap();
    assert!(matches!(running.await.unwrap().end, RunEnd::Ok));
    assert!(b.session.await.is_err(), "the session guard is dropped once the run ends");
}

#[tokio::test]
async fn a_run_without_an_answer_fails_at_run_timeout_and_stops_an_isolated_session() {
    let b = bench(Answer::Never, Duration::from_millis(50)).await;
    let (s, run) = b.fire(ContextMode::Isolated).await;
    let done = execute(&b.deps, s.clone(), run).await;
    let RunEnd::Failed(why) = done.end else { panic!("the run failed") };
    assert!(why.contains("scheduler.run_timeout") && why.contains("its isolated session was stopped"), "{why}");
    assert_eq!(b.logged(&s).await.0, "error");
    assert!(b.session.await.is_err(), "the isolated session's guard is dropped");
}

/// The notices queued for the chat so far.
async fn notices(store: &Store) -> Vec<String> {
    let rows = store.outbox().outbox_after(crate::store::OutboxId(0), 100).await.unwrap();
    rows.into_iter().filter(|r| r.kind == crate::domain::OutboundKind::Notice).map(|r| r.text).collect()
}

#[tokio::test]
async fn a_due_run_waits_while_its_groups_budget_is_reached_and_fires_once_it_is_raised() {
    let b = bench(Answer::Now(end(false, "watered")), Duration::from_secs(60)).await;
    let group: GroupName = "g".parse().unwrap();
    let spent = crate::domain::budget::Budget { daily_cents: Some(0), ..Default::default() };
    let closed = GroupSettings { budget: spent, ..GroupSettings::default() };
    b.store.groups().save_group_settings(&group, &closed).await.unwrap();
    let new = NewSchedule {
        group: group.clone(),
        prompt: "water the plants".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Isolated,
    };
    let s = b.store.schedules().add_schedule(&new, Some(Utc::now())).await.unwrap();
    let (store, seen, submitted, stop) =
        (b.store.clone(), b.seen.clone(), b.submitted.clone(), b.deps.shutdown.clone());
    let (handle, inbox) = crate::scheduler::channel();
    crate::scheduler::spawn(inbox, b.deps);

    // The pass that found it due told the chat instead of running it.
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let said = notices(&store).await;
            if !said.is_empty() {
                return said;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the chat is told that the run waits");
    assert!(told[0].contains(&format!("task #{} is due", s.id)) && told[0].contains("/budget"), "{told:?}");
    assert!(seen.lock().unwrap().prompts.is_empty(), "nothing was handed to a session");
    let still = store.schedules().schedule(s.id).await.unwrap();
    assert!(
        still.is_due(Utc::now()) && store.schedules().runs(s.id).await.unwrap().is_empty(),
        "still due, no run logged"
    );

    // Raised (as `/budget` or `pincer groups set` does, then pokes): it runs now.
    store.groups().save_group_settings(&group, &GroupSettings::default()).await.unwrap();
    handle.poke();
    tokio::time::timeout(Duration::from_secs(10), submitted.notified()).await.expect("the run fires once raised");
    assert_eq!(seen.lock().unwrap().prompts.len(), 1);
    assert_eq!(notices(&store).await.len(), 1, "told once");
    stop.cancel();
}

/// The state of the one message stored for group `g`.
async fn prompt_state(store: &Store) -> String {
    let history = store.history().history(&"g".parse().unwrap(), 10).await.unwrap();
    let states: Vec<String> = history
        .into_iter()
        .filter_map(|e| match e {
            crate::store::HistoryEntry::Inbound { state, .. } => Some(state),
            _ => None,
        })
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    states[0].clone()
}

#[tokio::test]
async fn a_group_prompt_no_session_took_within_run_timeout_is_withdrawn_so_its_retry_is_answered_alone() {
    let b = bench(Answer::Never, Duration::from_millis(50)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let done = execute(&b.deps, s.clone(), run).await;
    let RunEnd::Failed(why) = done.end else { panic!("the run failed") };
    assert!(why.contains("no session had taken the prompt yet, so it was withdrawn"), "{why}");
    assert_eq!(prompt_state(&b.store).await, "failed", "never taken now");
}

#[tokio::test]
async fn a_group_prompt_taken_before_run_timeout_is_left_to_its_turn() {
    // Room for the stand-in session to take it on a loaded machine.
    let b = bench(Answer::Never, Duration::from_secs(1)).await;
    let (s, run) = b.fire(ContextMode::Group).await;
    let (store, seen, submitted) = (b.store.clone(), b.seen.clone(), b.submitted.clone());
    let taking = tokio::spawn(async move {
        // The session takes it as soon as it is handed over.
        submitted.notified().await;
        let id = seen.lock().unwrap().ids[0];
        store.queue().set_inbound_state(&[id], InboundState::Sent).await.unwrap();
    });
    let done = execute(&b.deps, s.clone(), run).await;
    taking.await.unwrap();
    let RunEnd::Failed(why) = done.end else { panic!("the run failed") };
    assert!(why.contains("the agent may still be working on it"), "{why}");
    assert_eq!(prompt_state(&b.store).await, "sent", "left to the turn that has it");
}
