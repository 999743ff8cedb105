//! The settings a running pincer takes up again when `pincer.toml` is
//! reloaded (`pincer reload`, SIGHUP): each reader borrows the newest
//! [`Reloadable`] from a [`Live`] when it decides, so a reload needs no
//! restart of what reads it. Everything else in [`Config`] is read once at
//! start; [`super::reload::changes`] says which of its keys need a restart.

use std::sync::Arc;

use tokio::sync::watch;

use super::budget::BudgetConfig;
use super::media::{MediaConfig, TranscriptionConfig};
use super::progress::ProgressConfig;
use super::root::Config;
use crate::domain::budget::Budget;

/// The part of the config a reload changes in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Reloadable {
    pub progress: ProgressConfig,
    pub budget: BudgetConfig,
    pub media: MediaConfig,
    pub transcription: TranscriptionConfig,
}

impl Reloadable {
    pub fn of(config: &Config) -> Reloadable {
        Reloadable {
            progress: config.progress.clone(),
            budget: config.budget.clone(),
            media: config.media.clone(),
            transcription: config.transcription.clone(),
        }
    }
}

/// A reader's view of the newest [`Reloadable`] (cheap to clone).
#[derive(Clone, Debug)]
pub struct Live(watch::Receiver<Arc<Reloadable>>);

/// The reload's end: sets what every [`Live`] reads from then on.
#[derive(Debug)]
pub struct LiveSetter(watch::Sender<Arc<Reloadable>>);

/// A setter and the view it feeds, starting at `config`.
pub fn live(config: &Config) -> (LiveSetter, Live) {
    let (tx, rx) = watch::channel(Arc::new(Reloadable::of(config)));
    (LiveSetter(tx), Live(rx))
}

impl Live {
    /// A view that never changes (tests, and commands that run once).
    pub fn fixed(config: &Config) -> Live {
        live(config).1
    }

    /// `[budget]` as a [`Budget`]: what a group without its own parts may spend.
    pub fn budget(&self) -> Budget {
        self.0.borrow().budget.budget()
    }

    pub fn progress(&self) -> ProgressConfig {
        self.0.borrow().progress.clone()
    }

    pub fn media(&self) -> MediaConfig {
        self.0.borrow().media.clone()
    }

    pub fn transcription(&self) -> TranscriptionConfig {
        self.0.borrow().transcription.clone()
    }
}

impl LiveSetter {
    /// Every reader sees `config`'s settings from its next look on.
    pub fn set(&self, config: &Config) {
        self.0.send_replace(Arc::new(Reloadable::of(config)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_a_reload_from_their_next_look_on_even_after_the_setter_is_gone() {
        let mut config = Config::default();
        let (setter, live) = live(&config);
        let reader = live.clone();
        assert!(!reader.budget().is_set());
        config.budget.daily_turns = Some(3);
        setter.set(&config);
        assert_eq!(reader.budget().daily_turns, Some(3));
        drop(setter);
        assert_eq!(live.budget().daily_turns, Some(3), "the last value stays readable");
    }
}
