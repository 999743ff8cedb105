//! The order the daemon stops in, apart from what each step does, so that
//! the order can be tested without a daemon: a cluster node's groups and
//! gateways handed over (with everything still running), intake off (nothing new comes
//! in: platforms' intake, the control socket, the scheduler, the HTTP
//! endpoint, reload and retention), sessions drained (what they print while
//! closing is still stored and queued), outbox flushed (those last replies
//! reach the chats, for up to the grace), store closed (last: every step
//! before it may still write).

/// The steps of a stop, each done by [`Running`](super::Running).
pub(super) trait Stages {
    /// On a cluster node: hands its groups and gateways to the others at
    /// turn boundaries while everything still runs (`node::drain`).
    async fn hand_over(&mut self);
    /// Stops taking work, and waits until nothing takes any.
    async fn intake_off(&mut self);
    /// Stops every session and waits for them (and the proxies they used).
    async fn drain_sessions(&mut self);
    /// Delivers what waits, then stops the platform adapters: how they ended.
    async fn flush_outbox(&mut self) -> anyhow::Result<()>;
    async fn close_store(&mut self);
}

/// Runs the steps in their order. The store is closed however the flush
/// ended; the flush's result is the stop's.
pub(super) async fn in_order(stages: &mut impl Stages) -> anyhow::Result<()> {
    stages.hand_over().await;
    stages.intake_off().await;
    stages.drain_sessions().await;
    let flushed = stages.flush_outbox().await;
    stages.close_store().await;
    flushed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes each step into a log, and checks what each step needs done before it.
    #[derive(Default)]
    struct Log {
        steps: Vec<&'static str>,
        flush_fails: bool,
    }

    impl Log {
        fn done(&mut self, step: &'static str, after: &[&str]) {
            for before in after {
                assert!(self.steps.contains(before), "{step} before {before}: {:?}", self.steps);
            }
            assert!(!self.steps.contains(&"store closed"), "{step} after the store closed");
            self.steps.push(step);
        }
    }

    impl Stages for Log {
        async fn hand_over(&mut self) {
            self.done("handed over", &[]);
        }
        async fn intake_off(&mut self) {
            // Intake off first, a draining node's gateway would stop polling before another took it.
            self.done("intake off", &["handed over"]);
        }
        async fn drain_sessions(&mut self) {
            // A session drained while intake still runs could be handed a new message.
            self.done("sessions drained", &["intake off"]);
        }
        async fn flush_outbox(&mut self) -> anyhow::Result<()> {
            // Flushed before the sessions end, their last replies would wait for the next start.
            self.done("outbox flushed", &["intake off", "sessions drained"]);
            if self.flush_fails {
                anyhow::bail!("the Telegram adapter failed");
            }
            Ok(())
        }
        async fn close_store(&mut self) {
            self.done("store closed", &["intake off", "sessions drained", "outbox flushed"]);
        }
    }

    #[tokio::test]
    async fn hand_over_then_intake_stops_then_sessions_drain_then_the_outbox_flushes_then_the_store_closes() {
        let mut log = Log::default();
        in_order(&mut log).await.unwrap();
        assert_eq!(log.steps, ["handed over", "intake off", "sessions drained", "outbox flushed", "store closed"]);
    }

    #[tokio::test]
    async fn a_failed_flush_still_closes_the_store_and_is_what_the_stop_returns() {
        let mut log = Log { flush_fails: true, ..Log::default() };
        let stopped = in_order(&mut log).await;
        assert!(stopped.unwrap_err().to_string().contains("Telegram"));
        assert_eq!(log.steps.last(), Some(&"store closed"));
    }
}
