//! The owner's side of chat commands on a cluster (issue 36): a command
//! sent in a chat is received by a gateway node, which hands it to the
//! group's node through the store (`channel::Ports::session_command`,
//! `store::Commands`) when it does not run the group itself. Here a node
//! looks for the commands of the groups it holds, on its own short tick,
//! when a lease of its changes, and at the `pincer_work` hint; runs each as
//! it would run one typed in a chat it serves; and deletes it. What to do
//! with one ([`fate`]) is pure; touches the store's `pending_commands` and,
//! through the ports, the group's session and outbox. [`CommandTaker`] is
//! the task, handed back to be spawned by whoever starts the node.
//!
//! At most once for what acts (`/stop`, `/new`, a change of tasks or
//! budget): taken first, then run, so an owner that dies between loses it
//! (said again, it runs once) rather than stopping or restarting a later
//! turn. What only answers (`/status`, `/tasks`, `/budget`, a usage, the
//! help) is run, then taken: an owner that dies between leaves it for the
//! next owner, who answers it again. A command older than [`STALE`] when
//! found is dropped with a log line: nobody still waits for that answer,
//! and a late `/stop` or `/new` would hit a turn or session that began
//! after it was asked.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::channel::{decode_command, Ports, SessionCommand};
use crate::domain::GroupName;
use crate::store::{Commands, Leases, PendingCommand};

/// How often the node looks for commands without a hint.
const LOOK: Duration = Duration::from_millis(500);

/// A command older than this when its owner finds it is dropped.
const STALE: Duration = Duration::from_secs(60);

/// What the owner does with a command it holds the group of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// It acts: taken first, run only if this node took it.
    TakeThenRun(SessionCommand),
    /// It only answers: run, then taken.
    RunThenTake(SessionCommand),
    /// Taken and not run, for this reason.
    Drop(&'static str),
}

/// The fate of a command stored as `stored`, asked `age` ago.
fn fate(stored: &str, age: Duration) -> Fate {
    let Ok(cmd) = decode_command(stored) else {
        return Fate::Drop("it is not a command this pincer knows");
    };
    if age > STALE {
        return Fate::Drop("it was asked too long ago");
    }
    if cmd.acts() {
        Fate::TakeThenRun(cmd)
    } else {
        Fate::RunThenTake(cmd)
    }
}

/// This node's taker of the commands handed to it, with the hint that
/// wakes it (`pincer_work`), passed on to the claim loop as well.
pub struct CommandTaker {
    heard: Arc<Notify>,
    to: [Arc<Notify>; 2],
    taker: Taker,
}

impl CommandTaker {
    /// The taker over `commands` for the groups in `leases`, run through
    /// `ports`; and the hint to pass `pincer_work` on to, which it passes on
    /// to `claims` (the claim loop's) as well.
    pub fn new(commands: Commands, leases: Leases, ports: Ports, claims: Arc<Notify>) -> (CommandTaker, Arc<Notify>) {
        let (heard, hint) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let to = [claims, hint.clone()];
        let taker = Taker { commands, leases, ports, hint };
        (CommandTaker { heard: heard.clone(), to, taker }, heard)
    }

    /// Passes the hints on and takes the commands until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let CommandTaker { heard, to, taker } = self;
        tokio::join!(pass_on(heard, to, stop.clone()), taker.run(stop));
    }
}

/// Passes each hint `heard` on to every one of `to` (a `Notify` wakes one waiter).
async fn pass_on<const N: usize>(heard: Arc<Notify>, to: [Arc<Notify>; N], stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = heard.notified() => to.iter().for_each(|n| n.notify_one()),
        }
    }
}

/// Takes and runs the commands of the groups this node holds.
struct Taker {
    commands: Commands,
    leases: Leases,
    ports: Ports,
    hint: Arc<Notify>,
}

impl Taker {
    async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(LOOK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = self.leases.changes();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
                _ = self.hint.notified() => {}
                Ok(()) = changes.changed() => {}
            }
            self.look().await;
        }
    }

    async fn look(&self) {
        let pending = match self.commands.pending().await {
            Ok(pending) => pending,
            Err(e) => return tracing::warn!(%e, "cannot read the chat commands handed to this node; trying again"),
        };
        for command in pending.into_iter().filter(|c| self.leases.holds_group(&c.group)) {
            self.carry_out(command).await;
        }
    }

    async fn carry_out(&self, pending: PendingCommand) {
        let PendingCommand { id, group, command, by_admin, age } = pending;
        match fate(&command, age) {
            Fate::Drop(why) => {
                tracing::info!(%group, id, ?age, command, why, "dropped a chat command handed to this node");
                self.take(&group, id).await;
            }
            Fate::TakeThenRun(cmd) => {
                if self.take(&group, id).await {
                    self.run_here(&group, cmd, by_admin).await;
                }
            }
            Fate::RunThenTake(cmd) => {
                if self.run_here(&group, cmd, by_admin).await {
                    self.take(&group, id).await;
                }
            }
        }
    }

    /// Whether this node took command `id` (no one else will run it).
    async fn take(&self, group: &GroupName, id: i64) -> bool {
        self.commands.take(group, id).await.unwrap_or_else(|e| {
            tracing::warn!(%group, id, %e, "cannot take a chat command handed to this node");
            false
        })
    }

    /// Runs `cmd` for `group` here; `false` when the group cannot be read
    /// (the command waits for the next look).
    async fn run_here(&self, group: &GroupName, cmd: SessionCommand, by_admin: bool) -> bool {
        let record = match self.ports.directory.group(group).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(%group, ?cmd, %e, "cannot read the group of a chat command; trying again");
                return false;
            }
        };
        tracing::debug!(%group, ?cmd, "running a chat command handed to this node");
        if let Err(e) = self.ports.run_session_command(&record, cmd, by_admin).await {
            tracing::warn!(%group, ?cmd, %e, "a chat command handed to this node failed");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::group_commands::{BudgetAction, TasksAction};

    fn stored(cmd: SessionCommand) -> String {
        serde_json::to_string(&cmd).unwrap()
    }

    #[test]
    fn what_acts_is_taken_before_it_runs_and_what_answers_after() {
        let fresh = Duration::from_millis(300);
        for cmd in [SessionCommand::Stop, SessionCommand::New, SessionCommand::Tasks(TasksAction::Run(3))] {
            assert_eq!(fate(&stored(cmd), fresh), Fate::TakeThenRun(cmd));
        }
        let budget = SessionCommand::Budget(BudgetAction::Turns(Some(9)));
        assert_eq!(fate(&stored(budget), fresh), Fate::TakeThenRun(budget));
        let answers = [SessionCommand::Status, SessionCommand::Tasks(TasksAction::List)];
        for cmd in answers.into_iter().chain([SessionCommand::Budget(BudgetAction::Show)]) {
            assert_eq!(fate(&stored(cmd), fresh), Fate::RunThenTake(cmd));
            assert_eq!(fate(&stored(cmd), STALE), Fate::RunThenTake(cmd), "a minute old is still answered");
        }
    }

    #[test]
    fn a_command_asked_too_long_ago_or_unknown_is_dropped() {
        let late = STALE + Duration::from_millis(1);
        for cmd in [SessionCommand::Status, SessionCommand::Stop, SessionCommand::New] {
            assert!(matches!(fate(&stored(cmd), late), Fate::Drop(_)), "{cmd:?}");
        }
        assert!(matches!(fate(r#""reboot""#, Duration::ZERO), Fate::Drop(_)));
        assert!(matches!(fate("", Duration::ZERO), Fate::Drop(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn every_hint_wakes_the_claims_and_the_taker() {
        let (heard, claims, taker) = (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(Notify::new()));
        let stop = CancellationToken::new();
        let passing = tokio::spawn(pass_on(heard.clone(), [claims.clone(), taker.clone()], stop.clone()));
        heard.notify_one();
        claims.notified().await;
        taker.notified().await;
        stop.cancel();
        passing.await.unwrap();
    }
}
