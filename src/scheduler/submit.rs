//! The scheduler's port to the agents: how a run hands its prompt to a group's
//! session and learns how the turn ended, without naming the router or the
//! session (which sit above the scheduler: the agent's tools, inside a
//! session, manage schedules). `app` implements it for the router; tests
//! implement it with a script.

use futures_util::future::BoxFuture;

use crate::domain::{Inbound, InboundId};

/// How the turn that answered a submitted prompt ended.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEnd {
    pub is_error: bool,
    /// The result's chat text, or why pincer gave up on the prompt.
    pub text: String,
    /// The turn's own cost.
    pub cost_usd: Option<f64>,
}

/// Resolves when the turn answering a submitted prompt ends; `None` when its
/// session stopped first (pincer is stopping).
pub type TurnWatch = BoxFuture<'static, Option<TurnEnd>>;

/// Keeps an isolated run's throwaway session alive: dropping it ends the
/// session. Opaque, so the scheduler holds a session without naming one.
pub struct IsolatedRun(#[allow(dead_code)] Box<dyn Send>);

impl IsolatedRun {
    pub fn new(session: impl Send + 'static) -> IsolatedRun {
        IsolatedRun(Box::new(session))
    }
}

/// Why a prompt could not be handed to a session; says so in the router's words.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SubmitError(Box<dyn std::error::Error + Send + Sync>);

impl SubmitError {
    pub fn new(source: impl std::error::Error + Send + Sync + 'static) -> SubmitError {
        SubmitError(Box::new(source))
    }
}

/// Hands prompts to the groups' sessions.
pub trait Submit: Send + Sync {
    /// Stores `msg` and queues it for its group's session, like a chat message;
    /// the watch tells how the turn that answers it ends. The id is the
    /// stored message's, for withdrawing it if no session takes it in time.
    fn submit(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, InboundId), SubmitError>>;

    /// Stores `msg` and hands it to a throwaway session of its group, which
    /// lives as long as the returned [`IsolatedRun`].
    fn submit_isolated(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, IsolatedRun), SubmitError>>;
}
