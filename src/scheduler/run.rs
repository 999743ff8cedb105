//! One run of a schedule, fired (and logged as running) by the scheduler: hand
//! its prompt to its group's session like a chat message (marked as
//! scheduled) through the [`Submit`](super::submit::Submit) port, wait for the
//! turn that answers it (at most `scheduler.run_timeout`), and log how it
//! ended. The session delivers the result to the chat itself.

use chrono::Utc;

use super::deps::SchedulerDeps;
use crate::domain::schedule::{ContextMode, Schedule, ScheduleId};
use crate::domain::{Inbound, Source};
use crate::store::RunId;

/// How a run ended, for the scheduler.
pub(super) struct RunDone {
    pub id: ScheduleId,
    /// The schedule's group: whose lease its outcome's writes are fenced by.
    pub group: crate::domain::GroupName,
    pub end: RunEnd,
}

pub(super) enum RunEnd {
    Ok,
    Failed(String),
    /// Pincer stopped before the turn ended; the schedule runs again at the next start.
    Stopped,
}

/// Where a run's prompt went.
enum Session {
    /// Into the group's own session's queue, as this message.
    Group(crate::domain::InboundId),
    /// To a throwaway session that lives as long as this guard.
    Isolated(#[allow(dead_code)] crate::scheduler::submit::IsolatedRun),
}

/// Runs a fired schedule; its run row `run` was written as it fired.
pub(super) async fn execute(deps: &SchedulerDeps, s: Schedule, run: RunId) -> RunDone {
    let id = s.id;
    let s_group = s.group.clone();
    let (end, text, cost) = deliver(deps, &s).await;
    let ok = matches!(end, RunEnd::Ok);
    if let Err(e) = deps.schedules.finish_run(run, &s_group, ok, &text, cost).await {
        tracing::error!(schedule = %id, %e, "cannot log the end of a scheduled run");
    }
    if matches!(end, RunEnd::Stopped) {
        run_again_at_start(deps, id).await;
    }
    RunDone { id, group: s_group, end }
}

/// Routes the prompt and waits for its turn: (how it ended, text for the log, cost).
async fn deliver(deps: &SchedulerDeps, s: &Schedule) -> (RunEnd, String, Option<f64>) {
    let text = format!("[Scheduled task #{}, {}] {}", s.id, s.trigger.describe(), s.prompt);
    let msg = Inbound::new(s.group.clone(), Source::Scheduled, format!("scheduled task #{}", s.id), text);
    // An isolated run's session lives as long as its guard.
    let submitted = match s.context {
        ContextMode::Group => deps.submit.submit(msg).await.map(|(turn, id)| (turn, Session::Group(id))),
        ContextMode::Isolated => {
            deps.submit.submit_isolated(msg).await.map(|(turn, guard)| (turn, Session::Isolated(guard)))
        }
    };
    let (turn, session) = match submitted {
        Ok(submitted) => submitted,
        Err(e) => {
            let why = format!("could not hand the prompt to the agent: {e}");
            return (RunEnd::Failed(why.clone()), why, None);
        }
    };
    let limit = deps.config.run_timeout;
    match tokio::time::timeout(limit, turn).await {
        Ok(Some(o)) if o.is_error => (RunEnd::Failed(o.text.clone()), o.text, o.cost_usd),
        Ok(Some(o)) => (RunEnd::Ok, o.text, o.cost_usd),
        Ok(None) => {
            (RunEnd::Stopped, "pincer stopped before the run ended; it runs again at the next start".into(), None)
        }
        Err(_) => {
            // An isolated run's session ends with its handle, here. A group
            // run's prompt still waiting in the queue (a reached budget, no
            // free slot) is withdrawn, so its retry is not answered beside
            // it; one taken goes on in the group's session (its own
            // turn_timeout watches it), and a later answer still reaches the chat.
            let then = match session {
                Session::Isolated(_) => "; its isolated session was stopped",
                Session::Group(id) => match deps.queue.withdraw_queued(id).await {
                    Ok(true) => "; no session had taken the prompt yet, so it was withdrawn",
                    Ok(false) => "; the agent may still be working on it",
                    Err(e) => {
                        tracing::error!(schedule = %s.id, %e, "cannot withdraw a scheduled prompt that waited too long");
                        "; the agent may still be working on it"
                    }
                },
            };
            let why = format!("no answer within scheduler.run_timeout = {}{then}", humantime::format_duration(limit));
            tracing::warn!(schedule = %s.id, group = %s.group, "a scheduled run timed out");
            (RunEnd::Failed(why.clone()), why, None)
        }
    }
}

/// A run cut off by shutdown is due again (if still active), so the next
/// start makes it up.
async fn run_again_at_start(deps: &SchedulerDeps, id: ScheduleId) {
    if let Err(e) = deps.schedules.make_due(id, Utc::now()).await {
        tracing::error!(schedule = %id, %e, "cannot mark a cut-off run to run again");
    }
}

#[cfg(test)]
mod tests;
