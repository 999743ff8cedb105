//! The router as the scheduler's [`Submit`] port. It lives in the wiring, not
//! in `router` or `scheduler`: the scheduler must not name the router (the
//! router reaches the scheduler through the sessions' tools), and the router
//! need not know the scheduler exists. Router's own methods are wrapped as
//! they are.

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use crate::domain::{Inbound, InboundId};
use crate::router::Router;
use crate::scheduler::submit::{IsolatedRun, Submit, SubmitError, TurnEnd, TurnWatch};
use crate::session::TurnOutcome;

impl Submit for Router {
    fn submit(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, InboundId), SubmitError>> {
        Box::pin(async move {
            let (done, outcome) = oneshot::channel();
            let id = self.send_watched(msg, done).await.map_err(SubmitError::new)?;
            Ok((watch(outcome), id))
        })
    }

    fn submit_isolated(&self, msg: Inbound) -> BoxFuture<'_, Result<(TurnWatch, IsolatedRun), SubmitError>> {
        Box::pin(async move {
            let (done, outcome) = oneshot::channel();
            let (_, session) = self.send_isolated(msg, done).await.map_err(SubmitError::new)?;
            Ok((watch(outcome), IsolatedRun::new(session)))
        })
    }
}

/// A dropped sender (the session stopped first) reads as `None`.
fn watch(outcome: oneshot::Receiver<TurnOutcome>) -> TurnWatch {
    Box::pin(async move {
        let o = outcome.await.ok()?;
        Some(TurnEnd { is_error: o.is_error, text: o.text, cost_usd: o.cost_usd })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_turns_outcome_is_told_and_a_session_that_stopped_first_reads_as_none() {
        let (done, outcome) = oneshot::channel();
        done.send(TurnOutcome { is_error: true, text: "overloaded".into(), cost_usd: Some(0.5) }).unwrap();
        assert_eq!(
            watch(outcome).await,
            Some(TurnEnd { is_error: true, text: "overloaded".into(), cost_usd: Some(0.5) })
        );
        let (done, outcome) = oneshot::channel::<TurnOutcome>();
        drop(done);
        assert_eq!(watch(outcome).await, None);
    }
}
