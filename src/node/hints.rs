//! A cluster node's wake-up hints (issue 36): it LISTENs on PostgreSQL for
//! what other nodes stored (`migrations/postgres/0005_hints.sql`): a
//! message queued for a group wakes the claim loop at once, a reply written
//! to the outbox wakes this node's deliverers, a tool approval asked or
//! answered (`0007_approvals.sql`) wakes the approvals' bridge. Only hints:
//! the claim loop, the outbox and the approvals are also looked at on a
//! short poll, so a lost connection (reconnected with backoff) costs that
//! poll's delay, never a message; the outbox's poll is here
//! ([`look_at_outbox`]).
//! Touches one connection of its own to the database.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::outbox::Outbox;
use crate::retry::{Backoff, RetryPolicy};
use crate::store::cluster::hints::Hint;
use crate::store::{ClusterStore, StoreError};

/// Listens on `store` until `shutdown`: work wakes `claims`, replies
/// `outbox`, approvals bump `approvals`.
pub async fn run(
    store: ClusterStore,
    claims: Arc<Notify>,
    outbox: Outbox,
    approvals: watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    let policy = RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut backoff = Backoff::new(policy);
    loop {
        let (connected, e) = tokio::select! {
            _ = shutdown.cancelled() => return,
            ended = listen(&store, &claims, &outbox, &approvals) => ended,
        };
        tracing::debug!(%e, "the hints' connection ended; the nodes' polls carry on meanwhile");
        if connected {
            backoff = Backoff::new(policy);
        }
        if !backoff.wait(None, &shutdown).await {
            return;
        }
    }
}

/// How often a cluster node looks at the outbox for replies other nodes
/// wrote (its own wake their deliverers at once).
const OUTBOX_LOOK: Duration = Duration::from_millis(250);

/// Wakes `outbox`'s deliverers every [`OUTBOX_LOOK`] until `stop`: the
/// poll behind the outbox's hint.
pub async fn look_at_outbox(outbox: Outbox, stop: CancellationToken) {
    let mut tick = tokio::time::interval(OUTBOX_LOOK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => outbox.wake(),
        }
    }
}

/// One connection's life: whether it got as far as listening, and how it ended.
async fn listen(
    store: &ClusterStore,
    claims: &Notify,
    outbox: &Outbox,
    approvals: &watch::Sender<u64>,
) -> (bool, StoreError) {
    let mut listener = match store.listen_for_hints().await {
        Ok(listener) => listener,
        Err(e) => return (false, e),
    };
    loop {
        match listener.next().await {
            Ok(Hint::Work(_)) => claims.notify_one(),
            Ok(Hint::Approvals) => approvals.send_modify(|n| *n = n.wrapping_add(1)),
            Ok(Hint::Outbox) => outbox.wake(),
            Err(e) => return (true, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{GroupName, Inbound, Source};
    use crate::store::tests::postgres;
    use crate::store::{GroupSettings, InboundState, Location, Store};

    #[tokio::test]
    async fn a_message_or_a_reply_another_node_stores_wakes_this_one() {
        let url = postgres::server().fresh_database();
        let other_node = Store::connect(&Location::Postgres(url.clone())).await.unwrap();
        let here = Store::connect(&Location::Postgres(url.clone())).await.unwrap();
        let group: GroupName = "team".parse().unwrap();
        other_node.groups().add_group(&group, &GroupSettings::default()).await.unwrap();
        let node = crate::cluster::NodeId::new("node-b").unwrap();
        // A node registered (here; the other node's writes stay unfenced): the cluster is hinted.
        here.cluster().unwrap().register(&node, 4, 10_000_000, 0).await.unwrap().expect("registered");
        let (claims, outbox) = (Arc::new(Notify::new()), Outbox::new(here.outbox(), None));
        let mut replies = outbox.subscribe();
        let shutdown = CancellationToken::new();
        let (approvals, _) = watch::channel(0);
        let listening =
            tokio::spawn(run(here.cluster().unwrap(), claims.clone(), outbox.clone(), approvals, shutdown.clone()));

        // Until the listener is up, a hint may go unheard: say again until one is.
        let msg = Inbound::new(group.clone(), Source::Console, "ann", "hi");
        let heard = async {
            loop {
                other_node.queue().insert_inbound(&msg, InboundState::Queued).await.unwrap();
                if tokio::time::timeout(Duration::from_millis(200), claims.notified()).await.is_ok() {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), heard).await.expect("the work was heard");
        Outbox::new(other_node.outbox(), None).notice(&group, "a reply written elsewhere").await;
        tokio::time::timeout(Duration::from_secs(30), replies.changed()).await.expect("the reply was heard").unwrap();
        shutdown.cancel();
        listening.await.unwrap();
    }

    /// One machine on PostgreSQL (no node ever registered) sends no hint;
    /// once a node registered, a message stored to be prepared is hinted
    /// too. The first hint heard is the cluster's, not the lone machine's.
    #[tokio::test]
    async fn only_a_cluster_is_hinted_and_a_message_to_prepare_is() {
        let url = postgres::server().fresh_database();
        let store = Store::connect(&Location::Postgres(url.clone())).await.unwrap();
        let (solo, team): (GroupName, GroupName) = ("solo".parse().unwrap(), "team".parse().unwrap());
        for g in [&solo, &team] {
            store.groups().add_group(g, &GroupSettings::default()).await.unwrap();
        }
        let mut listener = store.cluster().unwrap().listen_for_hints().await.unwrap();
        store
            .queue()
            .insert_inbound(&Inbound::new(solo.clone(), Source::Console, "ann", "hi"), InboundState::Queued)
            .await
            .unwrap();
        Outbox::new(store.outbox(), None).notice(&solo, "a notice").await;

        let node = crate::cluster::NodeId::new("node-a").unwrap();
        store.cluster().unwrap().register(&node, 4, 10_000_000, 0).await.unwrap().expect("registered");
        let mut photo = Inbound::new(team.clone(), Source::Console, "ann", "look");
        photo.media = vec![crate::domain::media::Attachment::bounded(crate::domain::media::MediaKind::Photo, "f")];
        store.preparing().insert_preparing(&photo, false).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(30), listener.next()).await.expect("a hint").unwrap();
        assert_eq!(first, Hint::Work("team".to_owned()), "nothing was hinted for the lone machine");
    }
}
