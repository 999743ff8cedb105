//! The linked account's connection: what state it is in (logged, and stored
//! for `pincer whatsapp status` and `pincer doctor`, which run as other
//! processes), and a watchdog for a session that looks connected but has
//! received nothing for a long time, which WhatsApp users report.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::channel::Directory;
use crate::domain::Platform;

/// The last inbound time is written to the store at most this often.
const INBOUND_WRITE_EVERY: Duration = Duration::from_secs(60);
/// How often the watchdog looks.
const WATCH_EVERY: Duration = Duration::from_secs(60);

/// What happened to the connection, in pincer's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    Connected,
    /// Lost; the client reconnects by itself.
    Disconnected,
    /// The device was unlinked (on the phone, or the session expired).
    LoggedOut,
    /// WhatsApp banned the number for a while.
    Banned,
    /// Another client took this session over.
    Replaced,
    /// WhatsApp refuses this client version.
    Outdated,
}

impl ConnState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnState::Connected => "connected",
            ConnState::Disconnected => "disconnected",
            ConnState::LoggedOut => "logged_out",
            ConnState::Banned => "banned",
            ConnState::Replaced => "replaced",
            ConnState::Outdated => "outdated",
        }
    }

    /// What the operator is told.
    pub fn advice(self) -> &'static str {
        match self {
            ConnState::Connected => "connected to WhatsApp",
            ConnState::Disconnected => "disconnected from WhatsApp; reconnecting by itself",
            ConnState::LoggedOut => {
                "WhatsApp logged pincer out (the linked device was removed on the phone, or the session expired): \
                 WhatsApp replies wait in the outbox; link again with `pincer whatsapp link`"
            }
            ConnState::Banned => {
                "WhatsApp has temporarily banned this number: WhatsApp replies wait in the outbox; \
                 an unofficial client risks this, so use a dedicated number"
            }
            ConnState::Replaced => {
                "another client took over this WhatsApp session (is pincer running twice, or was the device \
                 linked elsewhere?): WhatsApp replies wait in the outbox; stop the other one, or link again"
            }
            ConnState::Outdated => {
                "WhatsApp refuses this client version: WhatsApp replies wait in the outbox; upgrade pincer"
            }
        }
    }
}

/// Connection state and the time of the last inbound message.
pub(super) struct Health {
    directory: Directory,
    state: Mutex<HealthState>,
}

struct HealthState {
    connected_since: Option<Instant>,
    last_inbound: Option<Instant>,
    last_written: Option<Instant>,
    warned_at: Option<Instant>,
}

impl Health {
    pub fn new(directory: Directory) -> Health {
        let state = HealthState { connected_since: None, last_inbound: None, last_written: None, warned_at: None };
        Health { directory, state: Mutex::new(state) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records (and logs) a change of the connection.
    pub async fn changed(&self, state: ConnState, detail: Option<&str>, linked_as: Option<&str>) {
        match state {
            ConnState::Connected => tracing::info!(linked_as, "{}", state.advice()),
            ConnState::Disconnected => tracing::warn!(detail, "{}", state.advice()),
            _ => tracing::error!(detail, "{}", state.advice()),
        }
        self.lock().connected_since = (state == ConnState::Connected).then(Instant::now);
        let detail = match detail {
            Some(detail) => format!("{} ({detail})", state.advice()),
            None => state.advice().to_owned(),
        };
        let stored = self.directory.set_health(Platform::WhatsApp, state.as_str(), Some(&detail), linked_as).await;
        if let Err(e) = stored {
            tracing::error!(%e, "cannot store the WhatsApp connection state");
        }
    }

    /// Whether the client is connected now (by the last connection event).
    pub fn is_connected(&self) -> bool {
        self.lock().connected_since.is_some()
    }

    /// A message came in.
    pub async fn inbound(&self) {
        let write = {
            let mut state = self.lock();
            let now = Instant::now();
            state.last_inbound = Some(now);
            state.warned_at = None;
            let due = state.last_written.is_none_or(|at| now - at >= INBOUND_WRITE_EVERY);
            if due {
                state.last_written = Some(now);
            }
            due
        };
        if write {
            if let Err(e) = self.directory.note_inbound(Platform::WhatsApp).await {
                tracing::error!(%e, "cannot store when WhatsApp last delivered a message");
            }
        }
    }

    /// How long a connected session has heard nothing, if it is connected.
    fn silent_for(&self, now: Instant) -> Option<Duration> {
        let state = self.lock();
        let since = state.connected_since?;
        Some(now - state.last_inbound.map_or(since, |last| last.max(since)))
    }

    /// Warns (once per `silence`) while a connected session receives nothing.
    pub async fn watch(&self, silence: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(WATCH_EVERY.min(silence)) => {}
                _ = shutdown.cancelled() => return,
            }
            let now = Instant::now();
            let Some(quiet) = self.silent_for(now) else { continue };
            let due = quiet >= silence && self.lock().warned_at.is_none_or(|at| now - at >= silence);
            if due {
                self.lock().warned_at = Some(now);
                tracing::warn!(
                    quiet = %humantime::format_duration(Duration::from_secs(quiet.as_secs())),
                    "WhatsApp looks connected but has delivered no message for a long time; if the groups are \
                     active, the session may be stale: restart pincer, or check `pincer whatsapp status` \
                     (whatsapp.silence_warning sets how long is too long)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_that_need_the_operator_say_what_to_do() {
        for state in [ConnState::LoggedOut, ConnState::Banned, ConnState::Replaced, ConnState::Outdated] {
            assert!(state.advice().contains("wait in the outbox"), "{}", state.advice());
        }
        assert!(ConnState::LoggedOut.advice().contains("pincer whatsapp link"));
    }
}
