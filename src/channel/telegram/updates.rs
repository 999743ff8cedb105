//! Updates from Telegram, taken one chat at a time: a worker per chat handles
//! that chat's updates in order, so chats never wait for each other.
//!
//! Each update travels with a [`Handled`] token that reports back when its
//! handler is done (the message stored, refused, or ignored). The source,
//! long polling or the webhook, confirms an update to Telegram only then, so
//! an update pincer holds only in memory is one Telegram still holds too: if
//! pincer dies with it, Telegram sends it again. A handler may also give
//! its update back ([`Outcome::Released`]): not taken, to be brought again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use teloxide::types::{AllowedUpdate, Update, UpdateKind};
use tokio::sync::mpsc;

use super::inbound;
pub(super) use super::inbound::Outcome;
use super::shared::Shared;

/// How many updates may wait for one chat's worker; when full, the source
/// waits, so Telegram keeps what pincer cannot take yet.
const CHAT_QUEUE: usize = 64;

/// The kinds of update pincer handles; Telegram sends no others.
pub(super) const ALLOWED: [AllowedUpdate; 3] =
    [AllowedUpdate::Message, AllowedUpdate::CallbackQuery, AllowedUpdate::MyChatMember];

/// How long one update still being handled may hold back Telegram's
/// confirmation (the poll offset, or the answer to the webhook's POST): past
/// it, the others go on, so one stuck handler cannot stall every chat.
pub(super) const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(60);

/// What a source hears of each update it handed on: its id and outcome.
pub(super) type Done = (u32, Outcome);

/// Reports its update's id and [`Outcome`] once dropped, which is when its
/// handler is done (or the update was never handled, since its worker is
/// gone: then too the source must stop waiting for it, and confirms it).
pub(super) struct Handled {
    id: u32,
    tell: mpsc::UnboundedSender<Done>,
    outcome: Outcome,
}

impl Handled {
    /// The channel is unbounded because it never holds more than one id per
    /// update in hand, and those are bounded by the chat queues.
    pub fn new(id: u32, tell: mpsc::UnboundedSender<Done>) -> Handled {
        Handled { id, tell, outcome: Outcome::Handled }
    }

    fn ended(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for Handled {
    fn drop(&mut self) {
        // The source may have stopped listening; then nobody needs to know.
        let _ = self.tell.send((self.id, self.outcome));
    }
}

/// An update waiting for its chat's worker. Boxed: an `Update` is about 2 KB
/// and a queue allocates its slots in blocks of 32, so unboxed, a thousand
/// chats' queues alone would hold some 60 MB.
struct Job {
    update: Box<Update>,
    handled: Handled,
}

/// What a worker does with an update: the channel's handlers in pincer, a
/// recorder in the tests.
pub(super) trait Handler: Send + Sync + 'static {
    fn handle(&self, update: Update) -> impl Future<Output = Outcome> + Send;
}

impl Handler for Arc<Shared> {
    async fn handle(&self, update: Update) -> Outcome {
        handle(self, update).await
    }
}

/// The chats' workers, started on a chat's first update and ended when idle.
pub(super) struct Workers<H = Arc<Shared>> {
    handler: H,
    chats: Mutex<HashMap<i64, mpsc::Sender<Job>>>,
}

/// How long a chat's worker waits for the next update before it ends.
const IDLE: std::time::Duration = std::time::Duration::from_secs(60);

impl<H: Handler> Workers<H> {
    pub fn new(handler: H) -> Arc<Workers<H>> {
        Arc::new(Workers { handler, chats: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i64, mpsc::Sender<Job>>> {
        self.chats.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `update` for its chat's worker, waiting while that queue is
    /// full. An update of no chat is handled on its own.
    pub async fn dispatch(self: &Arc<Self>, update: Update, handled: Handled) {
        let Some(chat) = update.chat().map(|c| c.id.0) else {
            let workers = self.clone();
            tokio::spawn(async move {
                let mut handled = handled;
                handled.ended(workers.handler.handle(update).await);
            });
            return;
        };
        let mut job = Job { update: Box::new(update), handled };
        loop {
            let queue = self.queue(chat);
            match queue.send(job).await {
                Ok(()) => return,
                // The worker ended (idle) between lookup and send: start another.
                Err(mpsc::error::SendError(back)) => job = back,
            }
        }
    }

    /// The chat's queue, starting its worker when it has none.
    fn queue(self: &Arc<Self>, chat: i64) -> mpsc::Sender<Job> {
        let mut chats = self.lock();
        if let Some(queue) = chats.get(&chat).filter(|q| !q.is_closed()) {
            return queue.clone();
        }
        let (queue, jobs) = mpsc::channel(CHAT_QUEUE);
        chats.insert(chat, queue.clone());
        tokio::spawn(work(self.clone(), chat, queue.downgrade(), jobs));
        queue
    }

    /// Ends every worker once it has handled what it holds.
    pub fn close(&self) {
        self.lock().clear();
    }
}

/// One chat's worker: its updates, one after the other.
///
/// It ends when idle, and only when no dispatcher holds its queue: one that
/// took the queue from the map holds a clone until its job is in, and a job
/// sent between the worker's last look and its end would be dropped with the
/// queue. Under the map's lock nobody can take a new clone, so "empty, and
/// only the map holds it" decided there stays true until the entry is gone.
async fn work<H: Handler>(
    workers: Arc<Workers<H>>,
    chat: i64,
    me: mpsc::WeakSender<Job>,
    mut jobs: mpsc::Receiver<Job>,
) {
    loop {
        match tokio::time::timeout(IDLE, jobs.recv()).await {
            Ok(Some(Job { update, mut handled })) => handled.ended(workers.handler.handle(*update).await),
            Ok(None) => return,
            Err(_idle) => {
                let mut chats = workers.lock();
                let unshared = chats.get(&chat).filter(|q| q.strong_count() == 1);
                if unshared.is_some_and(|q| me.upgrade().is_some_and(|me| me.same_channel(q))) && jobs.is_empty() {
                    chats.remove(&chat);
                    return;
                }
            }
        }
    }
}

/// Hands an update to its handler. A failure is logged and the update counts
/// as handled: a message that could not be stored was refused in its chat
/// already, and holding the update would only bring the same failure back.
/// On a cluster node a message not stored is released instead
/// ([`inbound::on_message`] says so): the next gateway will store it.
async fn handle(shared: &Arc<Shared>, update: Update) -> Outcome {
    let done = match update.kind {
        UpdateKind::Message(msg) => match inbound::on_message(msg, shared.clone()).await {
            Ok(Outcome::Released) => return Outcome::Released,
            other => other.map(drop),
        },
        UpdateKind::CallbackQuery(query) => inbound::on_callback(query, shared.clone()).await,
        UpdateKind::MyChatMember(member) => inbound::on_membership(member, shared.clone()).await,
        other => {
            tracing::trace!(update = ?other, "ignored an update");
            Ok(())
        }
    };
    if let Err(e) = done {
        tracing::error!("a Telegram update handler failed: {e:#}");
    }
    Outcome::Handled
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Counts the updates handled.
    #[derive(Clone, Default)]
    struct Count(Arc<AtomicUsize>);

    impl Handler for Count {
        async fn handle(&self, _update: Update) -> Outcome {
            self.0.fetch_add(1, Ordering::SeqCst);
            Outcome::Handled
        }
    }

    fn update(id: u32, chat: i64) -> Update {
        serde_json::from_value(serde_json::json!({
            "update_id": id,
            "message": {
                "message_id": id, "date": 0, "text": "hi",
                "chat": { "id": chat, "type": "group", "title": "t" },
                "from": { "id": 42, "is_bot": false, "first_name": "A" }
            }
        }))
        .unwrap()
    }

    fn job(id: u32, chat: i64) -> Job {
        let (tell, _) = mpsc::unbounded_channel();
        Job { update: Box::new(update(id, chat)), handled: Handled::new(id, tell) }
    }

    async fn until_handled(count: &Count, n: usize) {
        while count.0.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Lets the workers that are due to look again do so.
    async fn past_idle() {
        tokio::time::sleep(IDLE + Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_workers_of_chats_gone_quiet_leave() {
        let count = Count::default();
        let workers = Workers::new(count.clone());
        let (tell, _handled) = mpsc::unbounded_channel();
        for chat in 1..=30 {
            workers.dispatch(update(chat as u32, -chat), Handled::new(chat as u32, tell.clone())).await;
        }
        until_handled(&count, 30).await;
        past_idle().await;
        assert_eq!(workers.lock().len(), 0, "no worker for a quiet chat");
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_handed_to_a_dispatcher_stays_open_until_its_job_is_in() {
        let count = Count::default();
        let workers = Workers::new(count.clone());
        let queue = workers.queue(-1);
        // The dispatcher holds the queue (between its lookup and its send)
        // while the worker's idle time runs out, more than once.
        past_idle().await;
        past_idle().await;
        assert!(queue.send(job(1, -1)).await.is_ok(), "the worker did not end under the dispatcher");
        drop(queue);
        until_handled(&count, 1).await;
        past_idle().await;
        assert_eq!(workers.lock().len(), 0, "it ends once nobody holds its queue");
    }
}
