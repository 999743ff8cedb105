//! `pincer reload` and SIGHUP: read `pincer.toml` again and apply what a
//! running pincer can change in place (progress, budgets, egress policies,
//! log level); name the rest, which waits for a restart. Which keys are
//! which is decided in `config::reload`; here the new settings are handed
//! to their readers.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::config::reload::{self, Changes};
use crate::config::{Config, ConfigError, LiveSetter};
use crate::router::Router;
use crate::sandbox::egress::EgressService;

/// Why nothing was reloaded; the running settings are kept.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this pincer was not started from a config file, so there is nothing to read again")]
    NoFile,
    #[error("{}: {source}; nothing was changed (fix it and reload again)", file.display())]
    Invalid {
        file: PathBuf,
        #[source]
        source: ConfigError,
    },
    #[error("reading the config failed: {0}")]
    Read(String),
}

/// Reloads a running pincer's config (one reload at a time).
pub struct Reloader {
    /// The config in effect: as started, with each reload's live parts taken in.
    running: Mutex<Config>,
    live: LiveSetter,
    egress: EgressService,
    router: Router,
}

impl Reloader {
    pub fn new(running: Config, live: LiveSetter, egress: EgressService, router: Router) -> Reloader {
        Reloader { running: Mutex::new(running), live, egress, router }
    }

    /// Reads the config file again and applies what can change now.
    pub async fn reload(&self) -> Result<Changes, ReloadError> {
        let mut running = self.running.lock().await;
        let file = running.source.clone().ok_or(ReloadError::NoFile)?;
        let read = {
            let file = file.clone();
            tokio::task::spawn_blocking(move || Config::load_file(&file))
                .await
                .map_err(|e| ReloadError::Read(e.to_string()))?
        }
        .map_err(|source| ReloadError::Invalid { file, source })?;
        let mut changes = reload::changes(&running, &read);
        if changes.applied.is_empty() {
            return Ok(changes);
        }
        self.live.set(&read);
        self.egress.update(&read.sandbox);
        if changes.applied.iter().any(|k| k == "log.level") {
            match crate::logging::set_level(read.log.level.as_deref()) {
                Ok(crate::logging::LevelChange::Applied) => {}
                Ok(crate::logging::LevelChange::Kept(why)) => {
                    changes.applied.retain(|k| k != "log.level");
                    changes.need_restart.push(format!("log.level ({why})"));
                }
                Err(e) => tracing::warn!(%e, "cannot change the log level"),
            }
        }
        // A budget raised or lowered is looked at again by each live session now.
        if changes.applied.iter().any(|k| k.starts_with("budget.")) {
            for (group, _) in self.router.statuses() {
                self.router.settings_changed(&group).await;
            }
        }
        reload::take_live(&mut running, &read);
        tracing::info!(applied = ?changes.applied, need_restart = ?changes.need_restart, "pincer.toml reloaded");
        Ok(changes)
    }
}

/// Reloads at each SIGHUP (`systemctl reload`) until `shutdown`; what
/// changed, or why nothing did, goes to the log.
pub async fn on_sighup(reloader: Arc<Reloader>, shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => return tracing::warn!(%e, "cannot listen for SIGHUP; `pincer reload` still works"),
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match reloader.reload().await {
            Ok(changes) if changes.is_empty() => tracing::info!("SIGHUP: pincer.toml read again, nothing changed"),
            // The reload logged what it applied.
            Ok(_) => {}
            Err(e) => tracing::error!("SIGHUP: {e}"),
        }
    }
}

impl crate::control::server::Reload for Reloader {
    fn reload(&self) -> futures_util::future::BoxFuture<'_, Result<String, String>> {
        Box::pin(async move { Reloader::reload(self).await.map(|c| c.describe()).map_err(|e| e.to_string()) })
    }
}
