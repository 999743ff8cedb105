//! Routes each tool approval request to the platform its group lives on.
//!
//! Requests come from every session through one bounded queue; each goes to
//! the adapter of its group's chat (or the console, for a group without one),
//! never to whichever adapter reads first. A request no adapter can show is
//! denied: dropping it answers the session.

use std::collections::HashMap;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ApprovalAsk, Directory};
use crate::domain::{ApprovalRequest, Platform};
use crate::outbox::Outbox;

/// How many approval prompts may wait for one adapter.
pub const ASK_QUEUE: usize = 64;

/// The adapters that can ask, by platform.
#[derive(Default)]
pub struct Askers(HashMap<Platform, mpsc::Sender<ApprovalAsk>>);

impl Askers {
    /// Registers `platform`; its adapter reads the returned queue.
    pub fn register(&mut self, platform: Platform) -> mpsc::Receiver<ApprovalAsk> {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        self.0.insert(platform, tx);
        rx
    }
}

/// Hands each request to its group's adapter until the sessions are gone or `shutdown`.
pub async fn route(
    requests: async_channel::Receiver<ApprovalRequest>,
    askers: Askers,
    directory: Directory,
    outbox: Outbox,
    shutdown: CancellationToken,
) {
    loop {
        let request = tokio::select! {
            request = requests.recv() => match request { Ok(request) => request, Err(_) => return },
            _ = shutdown.cancelled() => return,
        };
        let group = match directory.group(&request.group).await {
            Ok(group) => group,
            Err(e) => {
                tracing::error!(group = %request.group, %e, "cannot look up the group of an approval request; denied");
                continue;
            }
        };
        let to = outbox.address_of(&group);
        let Some(asker) = askers.0.get(&to.platform) else {
            tracing::warn!(
                group = %group.name, tool = %request.tool_name, chat = %to,
                "no running channel can ask the group's admins; denied"
            );
            continue;
        };
        let ask = ApprovalAsk { to, admins: group.settings.admins.clone(), request };
        // Never wait here: one platform that does not read (Telegram still
        // connecting) must not hold up the others' requests.
        match asker.try_send(ask) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(group = %group.name, "too many tool requests wait for the group's chat; denied")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::warn!(group = %group.name, "the channel that asks the group's admins stopped; denied")
            }
        }
    }
}
