//! What the scheduler and its runs are given: the store's roles they use,
//! the port to the sessions, the outbox, the settings, and the shutdown.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::submit::Submit;
use crate::config::SchedulerConfig;
use crate::outbox::Outbox;
use crate::store::{Budgets, Groups, Leases, Queue, Schedules};

/// What the scheduler and its runs need.
pub struct SchedulerDeps {
    pub schedules: Schedules,
    pub groups: Groups,
    pub budgets: Budgets,
    /// On a cluster node, the groups whose schedules this node fires.
    pub leases: Leases,
    /// To withdraw a run's prompt that its session has not taken yet.
    pub queue: Queue,
    /// Where runs hand their prompts: the router, in pincer.
    pub submit: Arc<dyn Submit>,
    /// Where notices about failed runs go.
    pub outbox: Outbox,
    pub config: SchedulerConfig,
    /// The budget default (as reloaded): a group whose budget is reached runs nothing.
    pub live: crate::config::Live,
    /// `timezone`: where a budget's day and month begin.
    pub zone: chrono_tz::Tz,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
}
