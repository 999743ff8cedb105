//! Delivery's states and retries with paused time: a scripted platform and an
//! in-memory ledger, driven through the same `run` pincer uses.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use tokio::time::Instant;

use super::*;
use crate::domain::OutboundKind;
use crate::store::{DeliveryState, Marked, Seen};

/// A platform whose parts are the `|`-separated pieces of the text, and whose
/// sends answer from a script (then succeed).
#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Result<(), DeliveryError>>>,
    /// Every try: when, where, which part, and whether it landed.
    tries: Mutex<Vec<(Instant, ChatAddress, String, bool)>>,
    /// Sends to this part never answer.
    hang_on: Mutex<Option<String>>,
    /// Sends of this part fail at once, for a passing reason.
    failing: Mutex<Option<String>>,
    /// Sends to these parts take this long before they answer.
    slow: Mutex<HashMap<String, Duration>>,
    /// The next this many sends never answer.
    hangs: Mutex<u32>,
    /// Sends to this chat wait until the gate opens.
    gate: Mutex<Option<(ChatAddress, Arc<Notify>)>>,
    /// Sends begun: where, which part.
    begun: Mutex<Vec<(ChatAddress, String)>>,
}

impl Scripted {
    fn answer(&self, outcomes: impl IntoIterator<Item = Result<(), DeliveryError>>) {
        self.script.lock().unwrap().extend(outcomes);
    }

    /// The parts that reached a chat, in order.
    fn landed(&self) -> Vec<String> {
        self.tries.lock().unwrap().iter().filter(|t| t.3).map(|t| t.2.clone()).collect()
    }

    /// The parts that reached `to`, in order.
    fn landed_in(&self, to: &ChatAddress) -> Vec<String> {
        self.tries.lock().unwrap().iter().filter(|t| t.3 && &t.1 == to).map(|t| t.2.clone()).collect()
    }

    /// Holds sends to `to` until [`Scripted::open`].
    fn hold(&self, to: &ChatAddress) {
        *self.gate.lock().unwrap() = Some((to.clone(), Arc::new(Notify::new())));
    }

    /// Lets the held send go, and any later one.
    fn open(&self) {
        if let Some((_, gate)) = self.gate.lock().unwrap().take() {
            gate.notify_waiters();
        }
    }

    /// The pauses between consecutive tries, in whole seconds.
    fn gaps(&self) -> Vec<u64> {
        let tries = self.tries.lock().unwrap();
        tries.windows(2).map(|w| (w[1].0 - w[0].0).as_secs()).collect()
    }
}

impl Deliver for Scripted {
    type Part = String;
    const PLATFORM: Platform = Platform::Telegram;

    fn parts(
        &self,
        _kind: OutboundKind,
        text: &str,
        _file: Option<&crate::domain::media::OutboundFile>,
    ) -> Vec<String> {
        text.split('|').map(str::to_owned).collect()
    }

    async fn send(&self, to: &ChatAddress, part: &String) -> Result<(), DeliveryError> {
        self.begun.lock().unwrap().push((to.clone(), part.clone()));
        let gate = self.gate.lock().unwrap().clone();
        if let Some((_, gate)) = gate.filter(|(held, _)| held == to) {
            gate.notified().await;
        }
        if self.hang_on.lock().unwrap().as_deref() == Some(part.as_str()) {
            std::future::pending::<()>().await;
        }
        let slow = self.slow.lock().unwrap().get(part).copied();
        if let Some(takes) = slow {
            tokio::time::sleep(takes).await;
        }
        let hang = {
            let mut hangs = self.hangs.lock().unwrap();
            let hang = *hangs > 0;
            *hangs = hangs.saturating_sub(1);
            hang
        };
        if hang {
            std::future::pending::<()>().await;
        }
        let failing = self.failing.lock().unwrap().as_deref() == Some(part.as_str());
        let outcome =
            if failing { transient("reset") } else { self.script.lock().unwrap().pop_front().unwrap_or(Ok(())) };
        self.tries.lock().unwrap().push((Instant::now(), to.clone(), part.clone(), outcome.is_ok()));
        outcome
    }
}

/// The outbox and directory, in memory.
#[derive(Clone)]
struct Memory {
    state: Arc<Mutex<MemoryState>>,
    written: Arc<watch::Sender<u64>>,
}

#[derive(Default)]
struct MemoryState {
    rows: Vec<OutboxRow>,
    inactive: HashSet<GroupName>,
    /// What delivery recorded, in order, e.g. `parts 1/1`, `delivered 1`.
    log: Vec<String>,
    /// Chats whose worker read and found nothing left for them.
    idle: Vec<ChatAddress>,
}

impl Memory {
    fn new() -> Memory {
        Memory { state: Arc::default(), written: Arc::new(watch::channel(0).0) }
    }

    fn add(&self, group: &str, chat: i64, text: &str) -> OutboxId {
        self.add_row(group, chat, text, None)
    }

    /// A row carrying a file of `bytes`: its first part (`name`) is the file,
    /// the rest (after `|`) its caption's.
    fn add_file(&self, group: &str, chat: i64, text: &str, bytes: u64) -> OutboxId {
        let name = text.split('|').next().unwrap().to_owned();
        let file = crate::domain::media::OutboundFile {
            path: format!("/nonexistent/outgoing/{name}").into(),
            name: name.clone(),
            kind: crate::domain::media::FileKind::Document,
            bytes,
            from: format!("out/{name}"),
        };
        self.add_row(group, chat, text, Some(file))
    }

    fn add_row(
        &self,
        group: &str,
        chat: i64,
        text: &str,
        file: Option<crate::domain::media::OutboundFile>,
    ) -> OutboxId {
        let mut state = self.state.lock().unwrap();
        let id = OutboxId(state.rows.len() as i64 + 1);
        state.rows.push(OutboxRow {
            id,
            group: group.parse().unwrap(),
            at_us: 0,
            kind: OutboundKind::Reply,
            text: text.to_owned(),
            to: ChatAddress::telegram(chat, None),
            state: DeliveryState::Queued,
            parts_done: 0,
            attempts: 0,
            last_error: None,
            file,
        });
        drop(state);
        self.written.send_modify(|n| *n += 1);
        id
    }

    fn row(&self, id: OutboxId) -> OutboxRow {
        self.state.lock().unwrap().rows.iter().find(|r| r.id == id).unwrap().clone()
    }

    fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    fn reactivate(&self, group: &str) {
        self.state.lock().unwrap().inactive.remove(&group.parse::<GroupName>().unwrap());
        self.written.send_modify(|n| *n += 1);
    }

    fn update(&self, id: OutboxId, note: String, change: impl FnOnce(&mut OutboxRow)) {
        let mut state = self.state.lock().unwrap();
        state.log.push(note);
        change(state.rows.iter_mut().find(|r| r.id == id).unwrap());
    }

    /// A delivery mark, guarded as the store guards it: applied only while
    /// the row is queued where, and as far as, the worker read it.
    fn mark(&self, seen: &Seen, note: String, change: impl FnOnce(&mut OutboxRow)) -> Marked {
        let mut state = self.state.lock().unwrap();
        let row = state.rows.iter_mut().find(|r| r.id == seen.id).unwrap();
        if row.state != DeliveryState::Queued || row.to != seen.to || row.parts_done != seen.parts_done {
            state.log.push(format!("{note} at {}: moved", seen.to.chat));
            return Marked::Moved;
        }
        change(row);
        state.log.push(note);
        Marked::Recorded
    }

    /// The group was bound to another chat: its waiting rows go there, from
    /// their first part (as `store::outbox::follow_binding` does).
    fn rebind(&self, group: &str, chat: i64) {
        let group: GroupName = group.parse().unwrap();
        let mut state = self.state.lock().unwrap();
        state.log.push(format!("{group} rebound to {chat}"));
        for row in state.rows.iter_mut().filter(|r| r.group == group && r.state == DeliveryState::Queued) {
            row.to = ChatAddress::telegram(chat, None);
            row.parts_done = 0;
        }
        drop(state);
        self.written.send_modify(|n| *n += 1);
    }

    fn deliverable(&self, row: &OutboxRow) -> bool {
        row.state == DeliveryState::Queued && !self.state.lock().unwrap().inactive.contains(&row.group)
    }
}

impl Ledger for Memory {
    async fn waiting_chats(&self, _platform: Platform) -> Result<Vec<ChatAddress>, StoreError> {
        let rows = self.state.lock().unwrap().rows.clone();
        let mut chats: Vec<ChatAddress> = rows.iter().filter(|r| self.deliverable(r)).map(|r| r.to.clone()).collect();
        chats.dedup();
        Ok(chats)
    }
    async fn next(&self, to: &ChatAddress, pick: Pick) -> Result<Option<OutboxRow>, StoreError> {
        let rows = self.state.lock().unwrap().rows.clone();
        let picked = |r: &OutboxRow| match pick {
            Pick::Any => true,
            Pick::Texts => r.file.is_none(),
            Pick::Files => r.file.is_some(),
        };
        let next = rows.into_iter().find(|r| &r.to == to && self.deliverable(r) && picked(r));
        if next.is_none() {
            self.state.lock().unwrap().idle.push(to.clone());
        }
        Ok(next)
    }
    async fn parts_done(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        Ok(self.mark(seen, format!("{} parts {parts}", seen.id.0), |r| r.parts_done = parts))
    }
    async fn delivered(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        Ok(self.mark(seen, format!("{} delivered {parts}", seen.id.0), |r| {
            r.parts_done = parts;
            r.state = DeliveryState::Delivered;
        }))
    }
    async fn attempt_failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        Ok(self.mark(seen, format!("{} attempt failed: {why}", seen.id.0), |r| {
            r.attempts += 1;
            r.last_error = Some(why.to_owned());
        }))
    }
    async fn failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        Ok(self.mark(seen, format!("{} failed: {why}", seen.id.0), |r| r.state = DeliveryState::Failed))
    }
    async fn file_failed(&self, group: &GroupName, seen: &Seen, why: &str, notice: &str) -> Result<Marked, StoreError> {
        let marked = self.mark(seen, format!("{} file failed: {why}", seen.id.0), |r| {
            r.state = DeliveryState::Failed;
            r.attempts += 1;
        });
        if marked == Marked::Recorded {
            // Told where the failed row was going, as the store's notice goes to the group's chat.
            let chat: i64 = seen.to.chat.parse().unwrap();
            let id = self.add(group.as_str(), chat, notice);
            self.update(id, format!("{} notice", id.0), |r| r.kind = OutboundKind::Notice);
        }
        Ok(marked)
    }
    async fn chat_gone(&self, group: &GroupName, why: &str) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap();
        state.log.push(format!("{group} gone: {why}"));
        state.inactive.insert(group.clone());
        Ok(())
    }
    async fn chat_moved(&self, from: &ChatAddress, to: &ChatAddress) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap();
        state.log.push(format!("moved {} -> {}", from.chat, to.chat));
        for row in state.rows.iter_mut().filter(|r| &r.to == from) {
            row.to = to.clone();
        }
        drop(state);
        self.written.send_modify(|n| *n += 1);
        Ok(())
    }
    fn subscribe(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }
}

/// Exact pauses, so the tests can check the schedule (`crate::retry` tests the jitter).
const POLICY: RetryPolicy = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60)).without_jitter();

fn start(adapter: &Arc<Scripted>, ledger: &Memory) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(adapter.clone(), ledger.clone(), POLICY, stop.clone()));
    (stop, task)
}

/// Lets (paused) time pass until `done` holds; panics after a simulated day.
async fn until(what: &str, done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(86_400);
    while !done() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn transient(why: &str) -> Result<(), DeliveryError> {
    Err(DeliveryError::transient(why))
}

#[tokio::test(start_paused = true)]
async fn passing_failures_are_retried_with_doubling_pauses_until_the_part_lands() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([transient("502"), transient("502"), transient("reset"), Ok(())]);
    let id = ledger.add("team", -1, "hello");
    let (stop, task) = start(&adapter, &ledger);

    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["hello"], "sent once it worked, and only once");
    assert_eq!(adapter.gaps(), [1, 2, 4]);
    let row = ledger.row(id);
    assert_eq!((row.attempts, row.last_error.as_deref()), (3, Some("reset")));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_long_outage_is_waited_out_with_pauses_capped_and_nothing_dropped() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer(std::iter::repeat_with(|| transient("503")).take(12));
    let first = ledger.add("team", -1, "first");
    let second = ledger.add("team", -1, "second");
    let (stop, task) = start(&adapter, &ledger);

    until("both delivered", || ledger.row(second).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["first", "second"], "in order, after the outage");
    assert_eq!(adapter.gaps()[..12], [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60]);
    assert_eq!(ledger.row(first).attempts, 12);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_platform_asking_to_wait_is_obeyed() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let asked = DeliveryError::Transient { why: "429".into(), retry_after: Some(Duration::from_secs(17)) };
    adapter.answer([Err(asked)]);
    let id = ledger.add("team", -1, "hi");
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.gaps(), [17]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_long_message_cut_midway_goes_on_from_the_part_that_failed() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([Ok(()), transient("reset"), transient("reset")]);
    let id = ledger.add("team", -1, "one|two|three");
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["one", "two", "three"], "no part twice, none lost");
    assert_eq!(
        ledger.log(),
        ["1 parts 1", "1 attempt failed: reset", "1 attempt failed: reset", "1 parts 2", "1 delivered 3"]
    );
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn delivery_after_a_restart_skips_the_parts_already_in_the_chat() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let id = ledger.add("team", -1, "one|two|three");
    ledger.update(id, "left by the previous pincer".into(), |r| r.parts_done = 2);
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["three"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_chat_pauses_its_group_until_it_is_back_and_other_chats_go_on() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([Err(DeliveryError::ChatGone("bot was kicked".into()))]);
    let kicked = ledger.add("team", -1, "to the lost chat");
    let later = ledger.add("team", -1, "later");
    let (stop, task) = start(&adapter, &ledger);
    until("group paused", || ledger.log().iter().any(|l| l == "team gone: bot was kicked")).await;
    let other = ledger.add("other", -2, "elsewhere");
    until("other chat served", || ledger.row(other).state == DeliveryState::Delivered).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(ledger.row(kicked).state, DeliveryState::Queued, "its replies wait");
    assert_eq!(ledger.row(kicked).last_error.as_deref(), Some("bot was kicked"));
    assert_eq!(adapter.landed(), ["elsewhere"]);

    ledger.reactivate("team");
    until("back and delivered", || ledger.row(later).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["elsewhere", "to the lost chat", "later"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_refused_message_is_marked_failed_and_the_next_one_goes() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([Err(DeliveryError::Rejected("message is too long".into()))]);
    let refused = ledger.add("team", -1, "huge");
    let next = ledger.add("team", -1, "small");
    let (stop, task) = start(&adapter, &ledger);
    until("next delivered", || ledger.row(next).state == DeliveryState::Delivered).await;
    assert_eq!(ledger.row(refused).state, DeliveryState::Failed);
    assert_eq!(adapter.landed(), ["small"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_moved_chat_takes_its_waiting_replies_along() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([Err(DeliveryError::Moved(ChatAddress::telegram(-1_001, None)))]);
    let id = ledger.add("team", -1, "hi");
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    let tries = adapter.tries.lock().unwrap().clone();
    assert_eq!(tries.last().unwrap().1, ChatAddress::telegram(-1_001, None));
    assert_eq!(ledger.log()[0], "moved -1 -> -1001");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stopping_abandons_a_hung_send_and_leaves_the_row_queued() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    *adapter.hang_on.lock().unwrap() = Some("stuck".into());
    let id = ledger.add("team", -1, "stuck");
    let (stop, task) = start(&adapter, &ledger);
    tokio::time::sleep(Duration::from_secs(600)).await;
    stop.cancel();
    task.await.unwrap();
    assert_eq!(ledger.row(id).state, DeliveryState::Queued, "the next run sends it");
    assert!(adapter.landed().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_send_that_never_answers_times_out_and_is_retried_like_a_passing_failure() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    *adapter.hangs.lock().unwrap() = 2;
    let id = ledger.add("team", -1, "one|two");
    let began = Instant::now();
    let (stop, task) = start(&adapter, &ledger);

    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["one", "two"], "each part once, in order");
    // Two unanswered tries of the first part, each followed by its pause (1 s, 2 s).
    let landed_at = adapter.tries.lock().unwrap()[0].0 - began;
    assert_eq!(landed_at, SEND_TIMEOUT * 2 + Duration::from_secs(3));
    let row = ledger.row(id);
    assert_eq!(row.attempts, 2);
    assert_eq!(row.last_error.as_deref(), Some("no answer from the chat's platform within 1m"));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reply_rebound_between_two_parts_goes_whole_to_the_new_chat_and_no_further_to_the_old() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let (old, new) = (ChatAddress::telegram(-1, None), ChatAddress::telegram(-2, None));
    adapter.hold(&old);
    let id = ledger.add("team", -1, "one|two|three");
    let (stop, task) = start(&adapter, &ledger);
    let sending = |to: &ChatAddress, part: &str| adapter.begun.lock().unwrap().contains(&(to.clone(), part.to_owned()));
    until("the first part on its way to the old chat", || sending(&old, "one")).await;

    ledger.rebind("team", -2);
    until("delivered to the new chat", || ledger.row(id).state == DeliveryState::Delivered).await;
    adapter.open();
    // The old worker's round ends with a read that finds nothing for its
    // chat, after whatever it sends there.
    until("the old chat's worker idle", || ledger.state.lock().unwrap().idle.contains(&old)).await;

    assert_eq!(adapter.landed_in(&old), ["one"], "only the part already on its way when the group was rebound");
    assert_eq!(adapter.landed_in(&new), ["one", "two", "three"], "the whole message, once");
    assert!(ledger.log().iter().any(|l| l == "1 parts 1 at -1: moved"), "{:?}", ledger.log());
    assert_eq!(ledger.row(id).state, DeliveryState::Delivered);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reply_being_retried_when_its_group_is_rebound_is_not_retried_in_the_old_chat() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let (old, new) = (ChatAddress::telegram(-1, None), ChatAddress::telegram(-2, None));
    adapter.answer([Ok(()), transient("502")]);
    let id = ledger.add("team", -1, "one|two");
    let (stop, task) = start(&adapter, &ledger);
    until("waiting to retry the second part", || ledger.log().iter().any(|l| l == "1 attempt failed: 502")).await;

    ledger.rebind("team", -2);
    until("delivered to the new chat", || ledger.row(id).state == DeliveryState::Delivered).await;
    // The old worker's retry comes after its pause: wait past it for its read.
    ledger.state.lock().unwrap().idle.clear();
    until("the old chat's worker idle", || ledger.state.lock().unwrap().idle.contains(&old)).await;

    assert_eq!(adapter.landed_in(&old), ["one"], "the retry is not sent to the old chat");
    assert_eq!(adapter.landed_in(&new), ["one", "two"]);
    stop.cancel();
    task.await.unwrap();
}

/// Workers alive: each holds a clone of the adapter, besides the test's and `run`'s.
fn live_workers(adapter: &Arc<Scripted>) -> usize {
    Arc::strong_count(adapter) - 2
}

#[tokio::test(start_paused = true)]
async fn workers_of_chats_gone_quiet_end_and_a_later_reply_gets_a_new_one() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let (stop, task) = start(&adapter, &ledger);
    let ids: Vec<OutboxId> = (1..=20).map(|chat| ledger.add("team", -chat, "hi")).collect();
    until("all delivered", || ids.iter().all(|id| ledger.row(*id).state == DeliveryState::Delivered)).await;
    assert!(live_workers(&adapter) > 0, "one per chat while they work");

    until("every idle worker ended", || live_workers(&adapter) == 0).await;

    let again = ledger.add("team", -7, "later");
    until("delivered by a new worker", || ledger.row(again).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed_in(&ChatAddress::telegram(-7, None)), ["hi", "later"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reply_for_a_worker_that_offered_to_end_is_sent_by_it() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let (stop, task) = start(&adapter, &ledger);
    let first = ledger.add("team", -1, "one");
    until("delivered", || ledger.row(first).state == DeliveryState::Delivered).await;
    // Past IDLE the worker is idle; the reply is written before any scan ends it.
    tokio::time::sleep(IDLE).await;
    let second = ledger.add("team", -1, "two");
    until("delivered", || ledger.row(second).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["one", "two"], "each once");
    stop.cancel();
    task.await.unwrap();
}

#[test]
fn ending_and_waking_an_idle_worker_are_one_step_each() {
    let duty = Duty::default();
    assert!(!duty.end(), "a busy worker is not ended");
    duty.idle();
    assert!(duty.take_up(), "woken first: it works");
    assert!(!duty.end(), "and is busy again");
    duty.idle();
    assert!(duty.end(), "ended first ...");
    assert!(!duty.take_up(), "... a later wake-up does not bring it back: the scan starts another");
    duty.idle();
    assert!(!duty.take_up(), "an ended worker stays ended");
}

#[tokio::test(start_paused = true)]
async fn with_jitter_each_pause_stays_within_its_quarter_and_none_is_skipped() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer(std::iter::repeat_with(|| transient("503")).take(8));
    let id = ledger.add("team", -1, "hi");
    let stop = CancellationToken::new();
    let jittered = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60));
    let task = tokio::spawn(run(adapter.clone(), ledger.clone(), jittered, stop.clone()));
    until("delivered", || ledger.row(id).state == DeliveryState::Delivered).await;
    let tries: Vec<Instant> = adapter.tries.lock().unwrap().iter().map(|t| t.0).collect();
    let gaps = tries.windows(2).map(|w| w[1] - w[0]);
    for (gap, full) in gaps.zip([1u64, 2, 4, 8, 16, 32, 60, 60]) {
        let full = Duration::from_secs(full);
        assert!(gap >= full * 3 / 4 && gap <= full, "{gap:?} against {full:?}");
    }
    stop.cancel();
    task.await.unwrap();
}

const MIB: u64 = 1024 * 1024;

/// When each part landed, in order.
fn landed_at(adapter: &Scripted) -> Vec<(String, Instant)> {
    adapter.tries.lock().unwrap().iter().filter(|t| t.3).map(|t| (t.2.clone(), t.0)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_file_that_keeps_timing_out_lets_later_text_through_and_is_failed_after_its_tries_with_the_chat_told() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    *adapter.hang_on.lock().unwrap() = Some("big.zip".into());
    let file = ledger.add_file("team", -1, "big.zip", 40 * MIB);
    let text = ledger.add("team", -1, "written after the file");
    let began = Instant::now();
    let (stop, task) = start(&adapter, &ledger);

    until("the later text delivered", || ledger.row(text).state == DeliveryState::Delivered).await;
    assert_eq!(ledger.row(file).state, DeliveryState::Queued, "the file is still on its way");
    assert!(Instant::now() - began <= files::PATIENCE + Duration::from_secs(1), "it waited only a moment");
    let later = ledger.add("team", -1, "and more text");
    until("more text delivered while the file is retried", || ledger.row(later).state == DeliveryState::Delivered)
        .await;
    assert_eq!(ledger.row(file).state, DeliveryState::Queued);

    until("the file given up", || ledger.row(file).state == DeliveryState::Failed).await;
    let row = ledger.row(file);
    assert_eq!(row.attempts, files::FILE_TRIES, "its earlier tries, then the failure");
    let tries = adapter.begun.lock().unwrap().iter().filter(|(_, part)| part == "big.zip").count();
    assert_eq!(tries, files::FILE_TRIES as usize, "tried {} times, no more", files::FILE_TRIES);
    // Each try had its size's time (40 MiB: 60 s + 160 s), with the pauses between.
    let timeout = files::transfer_timeout(40 * MIB);
    assert_eq!(timeout, Duration::from_secs(220));
    assert!(Instant::now() - began >= timeout * files::FILE_TRIES + Duration::from_secs(1 + 2 + 4 + 8));

    until("the chat told", || adapter.landed().len() == 3).await;
    let landed = adapter.landed();
    assert_eq!(landed[..2], ["written after the file", "and more text"]);
    assert!(landed[2].starts_with("The file big.zip (40.0 MB, out/big.zip in the group's folder) could not be sent"));
    assert!(ledger.log().iter().any(|l| l.starts_with("1 file failed: not sent after 5 tries; the last: no answer")));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_outage_that_fails_every_try_at_once_costs_a_file_nothing_before_its_span() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer(std::iter::repeat_with(|| transient("not connected")).take(8));
    let file = ledger.add_file("team", -1, "a.pdf", MIB);
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(file).state == DeliveryState::Delivered).await;
    assert_eq!(ledger.row(file).attempts, 8);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_file_failing_at_once_for_good_is_given_up_after_its_span() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    *adapter.failing.lock().unwrap() = Some("a.pdf".into());
    let file = ledger.add_file("team", -1, "a.pdf", MIB);
    let began = Instant::now();
    let (stop, task) = start(&adapter, &ledger);
    until("given up", || ledger.row(file).state == DeliveryState::Failed).await;
    let took = Instant::now() - began;
    assert!(took >= files::FILE_SPAN && took < files::FILE_SPAN + Duration::from_secs(61), "{took:?}");
    until("the chat told", || adapter.landed().len() == 1).await;
    assert!(adapter.landed()[0].contains("a.pdf"));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_file_that_lands_quickly_keeps_its_place_before_later_text() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.slow.lock().unwrap().insert("chart.png".into(), Duration::from_secs(3));
    ledger.add("team", -1, "here it comes");
    ledger.add_file("team", -1, "chart.png|the caption", MIB);
    let last = ledger.add("team", -1, "what it shows");
    let (stop, task) = start(&adapter, &ledger);
    until("all delivered", || ledger.row(last).state == DeliveryState::Delivered).await;
    assert_eq!(adapter.landed(), ["here it comes", "chart.png", "the caption", "what it shows"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_big_file_gets_the_time_its_size_needs_and_text_goes_on_meanwhile() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    // 50 MiB at a slow uplink: more than a text's minute, less than its own time.
    adapter.slow.lock().unwrap().insert("video.mp4".into(), Duration::from_secs(200));
    let file = ledger.add_file("team", -1, "video.mp4", 50 * MIB);
    let text = ledger.add("team", -1, "meanwhile");
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(file).state == DeliveryState::Delivered).await;
    assert_eq!(ledger.row(file).attempts, 0, "one try, not cut short");
    assert_eq!(ledger.row(text).state, DeliveryState::Delivered);
    assert_eq!(adapter.landed(), ["meanwhile", "video.mp4"], "the text did not wait for the upload");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn rate_limits_cost_a_file_none_of_its_tries() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    let limited = || Err(DeliveryError::Transient { why: "429".into(), retry_after: Some(Duration::from_secs(3)) });
    adapter.answer(std::iter::repeat_with(limited).take(files::FILE_TRIES as usize + 2));
    let file = ledger.add_file("team", -1, "a.pdf", MIB);
    let (stop, task) = start(&adapter, &ledger);
    until("delivered", || ledger.row(file).state == DeliveryState::Delivered).await;
    assert_eq!(ledger.row(file).attempts, files::FILE_TRIES + 2);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_file_refused_for_good_is_failed_and_the_chat_told_why() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    adapter.answer([Err(DeliveryError::Rejected("Request Entity Too Large".into()))]);
    let file = ledger.add_file("team", -1, "huge.iso", 49 * MIB);
    let (stop, task) = start(&adapter, &ledger);
    until("the chat told", || adapter.landed().len() == 1).await;
    assert_eq!(ledger.row(file).state, DeliveryState::Failed);
    let told = &adapter.landed()[0];
    assert!(told.contains("huge.iso") && told.contains("could not be sent: Request Entity Too Large."), "{told}");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn files_keep_their_order_among_themselves_while_text_passes_a_failing_one() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    // The first upload never answers: it is tried again after its time.
    *adapter.hangs.lock().unwrap() = 1;
    ledger.add_file("team", -1, "one.pdf", MIB);
    let second = ledger.add_file("team", -1, "two.pdf", MIB);
    ledger.add("team", -1, "text");
    let (stop, task) = start(&adapter, &ledger);
    until("all delivered", || ledger.row(second).state == DeliveryState::Delivered).await;
    let landed: Vec<String> = landed_at(&adapter).into_iter().map(|(part, _)| part).collect();
    assert_eq!(landed, ["text", "one.pdf", "two.pdf"]);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stopping_while_a_file_is_on_its_way_leaves_it_queued_and_ends_the_worker() {
    let (adapter, ledger) = (Arc::new(Scripted::default()), Memory::new());
    *adapter.hang_on.lock().unwrap() = Some("big.zip".into());
    let file = ledger.add_file("team", -1, "big.zip", MIB);
    let (stop, task) = start(&adapter, &ledger);
    until("the upload begun", || !adapter.begun.lock().unwrap().is_empty()).await;
    stop.cancel();
    task.await.unwrap();
    assert_eq!(Arc::strong_count(&adapter), 1, "neither the worker nor its file task is left");
    assert_eq!(ledger.row(file).state, DeliveryState::Queued, "the next run sends it");
}
