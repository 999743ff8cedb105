//! The boundary between pincer's core and the chat platforms.
//!
//! A platform adapter (`telegram`, `whatsapp`, the `console`) provides:
//! - delivery: [`Deliver`] turns an outbox message into the platform's parts
//!   and sends one part to a [`ChatAddress`], saying whether a failure is
//!   worth retrying ([`DeliveryError`]); [`delivery::run`] drives it from the
//!   outbox, per chat, in order, with retries;
//! - approvals: it receives the [`ApprovalAsk`]s of its own chats (routed by
//!   each group's binding in [`approvals::route`]), shows them and reports
//!   the answer;
//! - inbound: it reports chat messages and commands to the [`Router`] and
//!   shows activity (typing) while a turn runs.
//!
//! The core gives it [`Ports`]: the router, the [`Directory`] of groups and
//! the outbox, never the whole engine. Platform wire types stay inside their
//! adapter; across this boundary everything is a `ChatAddress`, an `Inbound`,
//! or an outbox row (`OutboundKind` + text).

pub mod approvals;
mod command;
pub mod console;
pub mod delivery;
pub mod follow;
pub mod group_commands;
mod help;
mod intake;
pub mod progress;
mod split;
pub mod telegram;
mod text;
pub mod typing;
pub mod whatsapp;

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::domain::media::OutboundFile;
use crate::domain::{ApprovalRequest, ChatAddress, GroupName, OutboundKind, Platform};
use crate::outbox::Outbox;
use crate::router::Router;
use crate::store::{
    Budgets, Channels, Commands, GroupRecord, Groups, Leases, Schedules, StatusRecord, Store, StoreError,
};

pub use command::{decode_command, SessionCommand};
pub use text::{describe_status, starts_with_word, FirstSight};

/// What a platform adapter does to put outbox messages in its chats.
pub trait Deliver: Send + Sync + 'static {
    /// One message as the platform sends it (rendered, within its size limit).
    type Part: Send + Sync + 'static;

    /// The platform whose outbox rows this adapter delivers.
    const PLATFORM: Platform;

    /// The parts a message is sent as, in order. Must be the same for the same
    /// input: after a restart, the parts already delivered are skipped by count.
    /// With a `file`, `text` is its caption: the file is one part (with the
    /// caption when the platform takes one that long, else before the
    /// caption's own parts).
    fn parts(&self, kind: OutboundKind, text: &str, file: Option<&OutboundFile>) -> Vec<Self::Part>;

    /// Sends one part to a chat.
    fn send(&self, to: &ChatAddress, part: &Self::Part) -> impl Future<Output = Result<(), DeliveryError>> + Send;
}

/// Why a part did not reach its chat.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// Worth trying again: a network error, a timeout, a 5xx, a rate limit
    /// (`retry_after`: how long the platform asked to wait).
    #[error("{why}")]
    Transient { why: String, retry_after: Option<Duration> },
    /// The bot can no longer post there (kicked, blocked, chat deleted): the
    /// group goes inactive and its replies wait until it is back.
    #[error("the chat is gone: {0}")]
    ChatGone(String),
    /// The chat has a new address on its platform; the rows follow it.
    #[error("the chat moved to {0}")]
    Moved(ChatAddress),
    /// The platform will never take this message; the next ones go on.
    #[error("refused: {0}")]
    Rejected(String),
}

impl DeliveryError {
    pub fn transient(why: impl Into<String>) -> DeliveryError {
        DeliveryError::Transient { why: why.into(), retry_after: None }
    }
}

/// A tool call to show in a chat: the request, where its group lives, and who may answer.
#[derive(Debug)]
pub struct ApprovalAsk {
    pub to: ChatAddress,
    /// Channel user ids of the group's admins.
    pub admins: Vec<String>,
    pub request: ApprovalRequest,
    /// Cancelled when this node stops showing the prompt but another settles
    /// it (a cluster gateway that lost its lease, or whose row another gateway
    /// shows now): the adapter then leaves the prompt's message alone. Never
    /// cancelled on one machine.
    pub withdrawn: CancellationToken,
}

/// What the core gives a platform adapter.
#[derive(Clone)]
pub struct Ports {
    /// Chat messages and commands in.
    pub router: Router,
    pub directory: Directory,
    pub outbox: Outbox,
    /// `[progress]` and `[budget]` (as reloaded).
    pub live: crate::config::Live,
    /// Told when `/tasks` or `/budget` changed what the scheduler reads.
    pub scheduler: crate::scheduler::SchedulerHandle,
    /// `[scheduler]`'s limits, for `/tasks resume`.
    pub limits: crate::scheduler::limits::Limits,
    /// `timezone`: where a budget's day and month begin.
    pub zone: chrono_tz::Tz,
    /// On a cluster node, the activity of groups that run on other nodes.
    pub remote: follow::Remote,
}

impl Ports {
    /// What `group`'s chat is shown of its agent's work: its own mode over the configured one.
    pub fn progress_for(&self, group: &GroupRecord) -> progress::ProgressSettings {
        progress::ProgressSettings::for_group(&self.live.progress(), group.settings.progress)
    }

    /// Whether `group` runs on this node: always on one machine; on a
    /// cluster node, while it holds the group's lease.
    pub fn runs_here(&self, group: &GroupName) -> bool {
        self.directory.leases.holds_group(group)
    }

    /// What `group`'s chat follows of its agent while a turn runs: its session
    /// when it runs here (always on one machine), else what its owner mirrors.
    pub async fn follow(&self, group: &GroupName) -> Result<follow::Followed, crate::router::RouteError> {
        if self.runs_here(group) {
            return Ok(follow::Followed::Here(self.router.session(group).await?));
        }
        Ok(follow::Followed::Elsewhere(follow::RemoteTurn::new(self.remote.follow(group))))
    }

    /// A session command someone sent in `group`'s chat: run here when the
    /// group runs here, else handed to the node that runs it (its answer is
    /// a write of the group's, which only that node may make; its `/stop`
    /// and `/new` are for the session there). The one place this is decided.
    pub async fn session_command(
        &self,
        group: &GroupRecord,
        cmd: SessionCommand,
        by_admin: bool,
    ) -> Result<(), crate::router::RouteError> {
        if self.runs_here(&group.name) {
            return self.run_session_command(group, cmd, by_admin).await;
        }
        match command::encode(&cmd) {
            Ok(stored) => {
                let id = self.directory.commands.hand_over(&group.name, &stored, by_admin).await?;
                tracing::debug!(group = %group.name, id, ?cmd, "handed a chat command to the group's node");
            }
            Err(e) => tracing::error!(group = %group.name, ?cmd, %e, "a chat command that cannot travel; not run"),
        }
        Ok(())
    }

    /// Runs a session command someone sent in `group`'s chat and queues the
    /// answer there, on the node that runs the group. When the group has
    /// admins, only they may stop the agent or start a fresh session.
    pub async fn run_session_command(
        &self,
        group: &GroupRecord,
        cmd: SessionCommand,
        by_admin: bool,
    ) -> Result<(), crate::router::RouteError> {
        let router = &self.router;
        let text = match cmd {
            SessionCommand::Stop | SessionCommand::New if !group.settings.admins.is_empty() && !by_admin => {
                "Only this group's admins can stop the agent or start a fresh session.".to_owned()
            }
            SessionCommand::Status => {
                let mut text = describe_status(&router.status(&group.name).await?);
                // What it is doing now, as its status message would say it.
                let activity = router.session(&group.name).await?.activity().borrow().clone();
                if activity.working() {
                    text.push_str("\n\n");
                    text.push_str(&progress::render::on_demand(&activity, tokio::time::Instant::now()));
                }
                text
            }
            SessionCommand::Stop => {
                let status = router.session(&group.name).await?.status();
                router.interrupt(&group.name).await?;
                match (status.interruptible(), status.resend_at.is_some()) {
                    (true, _) => "Interrupting the agent's turn.".to_owned(),
                    // The session says which resend it cancelled.
                    (false, true) => return Ok(()),
                    (false, false) => "The agent is not in a turn right now.".to_owned(),
                }
            }
            SessionCommand::New => {
                // The session confirms when the fresh start is done.
                router.new_session(&group.name).await?;
                return Ok(());
            }
            SessionCommand::Tasks(action) => group_commands::tasks(self, group, action, by_admin).await,
            SessionCommand::Budget(action) => group_commands::budget(self, group, action, by_admin).await,
            SessionCommand::Usage(usage) => usage.to_owned(),
        };
        self.outbox.say(&group.name, OutboundKind::Answer, &text).await;
        Ok(())
    }
}

/// Which group lives where, and whether its chat still has the bot.
#[derive(Clone, Debug)]
pub struct Directory {
    groups: Groups,
    channels: Channels,
    /// The chat commands' (`group_commands`): `/tasks`, `/budget`.
    schedules: Schedules,
    budgets: Budgets,
    outbox: Outbox,
    /// Whether a group runs here, and the commands handed to its node.
    leases: Leases,
    commands: Commands,
}

impl Directory {
    /// The directory, holding the store's roles it and the chat commands use.
    pub fn new(store: &Store, outbox: Outbox) -> Directory {
        Directory {
            groups: store.groups(),
            channels: store.channels(),
            schedules: store.schedules(),
            budgets: store.budgets(),
            outbox,
            leases: store.leases(),
            commands: store.commands(),
        }
    }

    /// The group bound to a chat (or to the thread of it the message came from).
    pub async fn group_for(&self, at: &ChatAddress) -> Result<Option<GroupRecord>, StoreError> {
        self.groups.group_for_chat(at).await
    }

    pub async fn group(&self, name: &GroupName) -> Result<GroupRecord, StoreError> {
        self.groups.group(name.as_str()).await
    }

    pub async fn groups(&self) -> Result<Vec<GroupRecord>, StoreError> {
        self.groups.groups().await
    }

    /// The group's chat has the bot again (its replies go out now), or lost
    /// it (`why`): its replies then wait.
    pub async fn set_reachable(&self, group: &GroupName, reachable: bool, why: Option<&str>) -> Result<(), StoreError> {
        self.groups.set_group_active(group, reachable, why).await?;
        if reachable {
            self.outbox.wake();
        }
        Ok(())
    }

    /// Remembers a message pincer sent (its platform id).
    pub async fn record_sent(&self, to: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        self.channels.record_sent(to, message_id).await
    }

    /// Whether this node is the first of a cluster to see the command in
    /// message `message_id` of chat `at` (it then runs it, or hands it over).
    pub async fn first_to_see_command(&self, at: &ChatAddress, message_id: &str) -> Result<bool, StoreError> {
        self.commands.first_sight(&format!("{at}/{message_id}")).await
    }

    /// Whether pincer sent the message with this id to this chat.
    pub async fn was_sent(&self, at: &ChatAddress, message_id: &str) -> Result<bool, StoreError> {
        self.channels.was_sent(at, message_id).await
    }

    /// Records how a platform's connection is doing, for `status` and `doctor`.
    pub async fn set_health(
        &self,
        platform: Platform,
        state: &str,
        detail: Option<&str>,
        linked_as: Option<&str>,
    ) -> Result<(), StoreError> {
        self.channels.set_channel_health(platform, state, detail, linked_as).await
    }

    /// A message came in from the platform just now.
    pub async fn note_inbound(&self, platform: Platform) -> Result<(), StoreError> {
        self.channels.note_inbound(platform).await
    }

    /// A chat got a new id on its platform; bindings and waiting replies follow.
    pub async fn chat_moved(&self, platform: Platform, from: &str, to: &str) -> Result<(), StoreError> {
        self.groups.move_chat(platform, from, to).await?;
        self.outbox.wake();
        Ok(())
    }

    /// Remembers a status message as it is shown, so a restart finds it if
    /// it is left behind ([`progress::clean_up_left_behind`]).
    pub async fn remember_status(&self, record: &StatusRecord) -> Result<(), StoreError> {
        self.channels.remember_status(record).await
    }

    /// Forgets a status message that was deleted or finished.
    pub async fn forget_status(&self, at: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        self.channels.forget_status(at, message_id).await
    }

    /// The status messages still remembered on a platform: at a start, those
    /// the last run left behind.
    pub async fn status_messages(&self, platform: Platform) -> Result<Vec<StatusRecord>, StoreError> {
        self.channels.status_messages(platform).await
    }
}
