//! Whether this linked device is fit to be the number's gateway on a
//! cluster (issue 36): a node whose device cannot send must not hold the
//! number while another node's could. Fit while connected, and for
//! [`DISCONNECTED_GRACE`] after a disconnect (the client reconnects by
//! itself; a blip must not move the gateway); unfit before the first
//! connection and at once when WhatsApp logged the device out, banned the
//! number, replaced the session or refuses the client. The decision is
//! [`Fitness`] (pure); [`Fit`] publishes it on a watch and turns it when
//! the grace runs out. Touches nothing.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::health::ConnState;

/// How long a disconnected device stays fit, waiting to reconnect.
pub(super) const DISCONNECTED_GRACE: Duration = Duration::from_secs(30);

/// The last connection state and when it came.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Fitness {
    last: Option<(ConnState, Instant)>,
}

impl Fitness {
    pub fn changed(&mut self, state: ConnState, now: Instant) {
        self.last = Some((state, now));
    }

    pub fn fit(&self, now: Instant) -> bool {
        match self.last {
            Some((ConnState::Connected, _)) => true,
            Some((ConnState::Disconnected, at)) => now.saturating_duration_since(at) < DISCONNECTED_GRACE,
            Some((ConnState::LoggedOut | ConnState::Banned | ConnState::Replaced | ConnState::Outdated, _)) => false,
            None => false,
        }
    }

    /// When [`Fitness::fit`] turns by itself, if it will.
    pub fn turns_at(&self, now: Instant) -> Option<Instant> {
        match self.last {
            Some((ConnState::Disconnected, at)) if self.fit(now) => Some(at + DISCONNECTED_GRACE),
            _ => None,
        }
    }
}

/// The device's fitness, published.
pub(super) struct Fit {
    fitness: Mutex<Fitness>,
    tx: watch::Sender<bool>,
    poke: Notify,
}

impl Default for Fit {
    fn default() -> Fit {
        Fit { fitness: Mutex::default(), tx: watch::channel(false).0, poke: Notify::new() }
    }
}

impl Fit {
    fn fitness(&self) -> Fitness {
        *self.fitness.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn changed(&self, state: ConnState) {
        self.fitness.lock().unwrap_or_else(|e| e.into_inner()).changed(state, Instant::now());
        self.publish();
        self.poke.notify_one();
    }

    pub fn watch(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    fn publish(&self) {
        let fit = self.fitness().fit(Instant::now());
        self.tx.send_if_modified(|was| std::mem::replace(was, fit) != fit);
    }

    /// Turns the published fitness when a grace runs out, until `shutdown`.
    pub async fn follow(&self, shutdown: CancellationToken) {
        loop {
            self.publish();
            let turns = self.fitness().turns_at(Instant::now());
            let at_turn = async {
                match turns {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = at_turn => {}
                _ = self.poke.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fit_while_connected_and_for_a_grace_after_a_disconnect() {
        let mut f = Fitness::default();
        assert!(!f.fit(Instant::now()), "never connected");
        f.changed(ConnState::Connected, Instant::now());
        assert!(f.fit(Instant::now()));
        assert_eq!(f.turns_at(Instant::now()), None);
        f.changed(ConnState::Disconnected, Instant::now());
        let turn = f.turns_at(Instant::now()).expect("the grace ends");
        tokio::time::advance(DISCONNECTED_GRACE - Duration::from_millis(1)).await;
        assert!(f.fit(Instant::now()), "a blip keeps the gateway");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(Instant::now(), turn);
        assert!(!f.fit(Instant::now()));
        assert_eq!(f.turns_at(Instant::now()), None);
        f.changed(ConnState::Connected, Instant::now());
        assert!(f.fit(Instant::now()), "reconnected");
    }

    #[tokio::test(start_paused = true)]
    async fn a_device_whatsapp_will_not_serve_is_unfit_at_once() {
        for state in [ConnState::LoggedOut, ConnState::Banned, ConnState::Replaced, ConnState::Outdated] {
            let mut f = Fitness::default();
            f.changed(ConnState::Connected, Instant::now());
            f.changed(state, Instant::now());
            assert!(!f.fit(Instant::now()), "{state:?}");
            assert_eq!(f.turns_at(Instant::now()), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_published_fitness_turns_when_the_grace_runs_out() {
        let fit = std::sync::Arc::new(Fit::default());
        let mut seen = fit.watch();
        let stop = CancellationToken::new();
        let following = tokio::spawn({
            let (fit, stop) = (fit.clone(), stop.clone());
            async move { fit.follow(stop).await }
        });
        fit.changed(ConnState::Connected);
        assert!(*seen.borrow_and_update());
        fit.changed(ConnState::Disconnected);
        assert!(*seen.borrow_and_update(), "still fit");
        let before = Instant::now();
        seen.changed().await.unwrap();
        assert!(!*seen.borrow());
        assert_eq!(Instant::now() - before, DISCONNECTED_GRACE);
        stop.cancel();
        following.await.unwrap();
    }
}
