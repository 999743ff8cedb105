//! What a chat's adapter follows of its group's agent while a turn runs (the
//! status message, the Stop button, "typing…"): the session itself when the
//! group runs on this node, else the activity its owner mirrors through the
//! store (`session::mirror`), read here about twice a second for as long as
//! someone follows it (issue 45: a cluster whose every group shows its work,
//! whichever node runs it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::typing::Turn;
use crate::domain::activity::{wire, Activity};
use crate::domain::GroupName;
use crate::session::SessionHandle;
use crate::store::Activities;

/// How often a followed group's mirrored activity is read.
pub const POLL: Duration = Duration::from_millis(500);
/// How long "typing…" waits for a turn to start on another node before it
/// gives up (the owner may still be claiming the group, or starting its CLI).
pub const TURN_GRACE: Duration = Duration::from_secs(60);

/// The group's agent, as a chat's adapter follows it.
pub enum Followed {
    /// The group runs here.
    Here(SessionHandle),
    /// The group runs on another node; its mirrored activity.
    Elsewhere(RemoteTurn),
}

impl Followed {
    /// What the agent is doing, for the status message.
    pub fn activity(&self) -> watch::Receiver<Activity> {
        match self {
            Followed::Here(session) => session.activity(),
            Followed::Elsewhere(remote) => remote.activity.clone(),
        }
    }
}

impl Turn for Followed {
    fn in_progress(&self) -> bool {
        match self {
            Followed::Here(session) => session.in_progress(),
            Followed::Elsewhere(remote) => remote.in_progress(),
        }
    }

    async fn changed(&mut self) -> bool {
        match self {
            Followed::Here(session) => Turn::changed(session).await,
            Followed::Elsewhere(remote) => remote.changed().await,
        }
    }
}

/// A turn on another node, seen through its mirrored activity: in progress
/// while the activity shows a turn, and before one has shown, for
/// [`TURN_GRACE`] (the message that started it may still wait for its owner).
pub struct RemoteTurn {
    activity: watch::Receiver<Activity>,
    seen_turn: bool,
    grace_until: Instant,
}

impl RemoteTurn {
    pub fn new(activity: watch::Receiver<Activity>) -> RemoteTurn {
        let seen_turn = activity.borrow().turn.is_some();
        RemoteTurn { activity, seen_turn, grace_until: Instant::now() + TURN_GRACE }
    }

    fn in_progress(&self) -> bool {
        self.activity.borrow().turn.is_some() || (!self.seen_turn && Instant::now() < self.grace_until)
    }

    async fn changed(&mut self) -> bool {
        let open = self.activity.changed().await.is_ok();
        self.seen_turn |= self.activity.borrow_and_update().turn.is_some();
        open
    }
}

/// The groups followed on other nodes, each read by a task of its own while
/// anyone holds its receiver.
#[derive(Clone)]
pub struct Remote {
    activities: Activities,
    followed: Arc<Mutex<HashMap<GroupName, watch::Sender<Activity>>>>,
}

impl Remote {
    pub fn new(activities: Activities) -> Remote {
        Remote { activities, followed: Arc::default() }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<GroupName, watch::Sender<Activity>>> {
        self.followed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `group`'s activity as its owner mirrors it, read until the last
    /// receiver is dropped.
    pub fn follow(&self, group: &GroupName) -> watch::Receiver<Activity> {
        let mut followed = self.lock();
        if let Some(sender) = followed.get(group) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(Activity::default());
        followed.insert(group.clone(), sender.clone());
        tokio::spawn(self.clone().read(group.clone(), sender));
        receiver
    }

    async fn read(self, group: GroupName, sender: watch::Sender<Activity>) {
        let mut shown = None;
        loop {
            {
                let mut followed = self.lock();
                if sender.receiver_count() == 0 {
                    // Under the lock: a `follow` now finds no entry and starts a new reader.
                    followed.remove(&group);
                    return;
                }
            }
            match self.activities.read(&group).await {
                Ok(Some(mirrored)) if shown != Some(mirrored.version) => {
                    shown = Some(mirrored.version);
                    match wire::decode(&mirrored.body, Instant::now()) {
                        Some(activity) => {
                            sender.send_replace(activity);
                        }
                        None => tracing::warn!(group = %group, "a mirrored activity that does not read; ignored"),
                    }
                }
                // The writer lost the group (died mid-turn, or was taken over):
                // what it showed is over; the new owner's first write shows anew.
                Ok(None) if shown.is_some() => {
                    shown = None;
                    sender.send_replace(Activity::default());
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(group = %group, %e, "cannot read a group's mirrored activity"),
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
