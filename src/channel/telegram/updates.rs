//! Updates from Telegram, taken one chat at a time: a worker per chat handles
//! that chat's updates in order, so chats never wait for each other.
//!
//! Each update travels with a [`Handled`] token that reports back when its
//! handler is done (the message stored, refused, or ignored). The source,
//! long polling or the webhook, confirms an update to Telegram only then, so
//! an update pincer holds only in memory is one Telegram still holds too: if
//! pincer dies with it, Telegram sends it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use teloxide::types::{AllowedUpdate, Update, UpdateKind};
use tokio::sync::mpsc;

use super::{inbound, Shared};

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

/// Reports its update's id once dropped, which is when its handler is done
/// (or the update was never handled, since its worker is gone: then too the
/// source must stop waiting for it).
pub(super) struct Handled {
    id: u32,
    tell: mpsc::UnboundedSender<u32>,
}

impl Handled {
    /// The channel is unbounded because it never holds more than one id per
    /// update in hand, and those are bounded by the chat queues.
    pub fn new(id: u32, tell: mpsc::UnboundedSender<u32>) -> Handled {
        Handled { id, tell }
    }
}

impl Drop for Handled {
    fn drop(&mut self) {
        // The source may have stopped listening; then nobody needs to know.
        let _ = self.tell.send(self.id);
    }
}

/// An update waiting for its chat's worker. Boxed: an `Update` is about 2 KB
/// and a queue allocates its slots in blocks of 32, so unboxed, a thousand
/// chats' queues alone would hold some 60 MB.
struct Job {
    update: Box<Update>,
    _handled: Handled,
}

/// The chats' workers, started on a chat's first update and ended when idle.
pub(super) struct Workers {
    shared: Arc<Shared>,
    chats: Mutex<HashMap<i64, mpsc::Sender<Job>>>,
}

/// How long a chat's worker waits for the next update before it ends.
const IDLE: std::time::Duration = std::time::Duration::from_secs(60);

impl Workers {
    pub fn new(shared: Arc<Shared>) -> Arc<Workers> {
        Arc::new(Workers { shared, chats: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i64, mpsc::Sender<Job>>> {
        self.chats.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `update` for its chat's worker, waiting while that queue is
    /// full. An update of no chat is handled on its own.
    pub async fn dispatch(self: &Arc<Self>, update: Update, handled: Handled) {
        let Some(chat) = update.chat().map(|c| c.id.0) else {
            let shared = self.shared.clone();
            tokio::spawn(async move {
                handle(&shared, update).await;
                drop(handled);
            });
            return;
        };
        let mut job = Job { update: Box::new(update), _handled: handled };
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
        tokio::spawn(work(self.clone(), chat, jobs));
        queue
    }

    /// Ends every worker once it has handled what it holds.
    pub fn close(&self) {
        self.lock().clear();
    }
}

/// One chat's worker: its updates, one after the other.
async fn work(workers: Arc<Workers>, chat: i64, mut jobs: mpsc::Receiver<Job>) {
    loop {
        match tokio::time::timeout(IDLE, jobs.recv()).await {
            Ok(Some(job)) => handle(&workers.shared, *job.update).await,
            Ok(None) => return,
            Err(_idle) => {
                // Under the lock nobody can take this queue from the map; a
                // sender that took it earlier finds it closed and starts another.
                let mut chats = workers.lock();
                if jobs.is_empty() {
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
async fn handle(shared: &Arc<Shared>, update: Update) {
    let done = match update.kind {
        UpdateKind::Message(msg) => inbound::on_message(msg, shared.clone()).await,
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
}
