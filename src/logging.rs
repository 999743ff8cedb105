//! pincer's log on stderr (text for people, or JSON lines), with a filter
//! that a reload of `pincer.toml` can change while pincer runs (`log.level`).
//! `RUST_LOG`, when set at start, wins over the config, then and at reloads.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

type SetFilter = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// How the running subscriber's filter is replaced; set once by [`init`].
static SET_FILTER: OnceLock<SetFilter> = OnceLock::new();
/// `default_level` as given to [`init`]: what an unset `log.level` means.
static DEFAULT_LEVEL: OnceLock<String> = OnceLock::new();

/// Installs the log: `RUST_LOG` if set, else `log.level`, else `default_level`.
pub fn init(default_level: &str, config: &LogConfig) {
    let _ = DEFAULT_LEVEL.set(default_level.to_owned());
    let from_env = EnvFilter::try_from_default_env().ok();
    let env_wins = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| filter(config.level.as_deref().unwrap_or(default_level)));
    // Colours only for a person at a terminal: a journal or a file would
    // keep the escape codes as text. `NO_COLOR` (no-color.org) turns them off.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let log = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(colour);
    // The two formats are two types; each gives its own reload handle.
    let set: SetFilter = match config.format {
        LogFormat::Text => {
            let builder = log.with_env_filter(filter).with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()))
        }
        LogFormat::Json => {
            let builder = log.json().with_env_filter(filter).with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()))
        }
    };
    if !env_wins {
        let _ = SET_FILTER.set(set);
    }
}

/// What a reload did with `log.level`.
#[derive(Debug, PartialEq, Eq)]
pub enum LevelChange {
    Applied,
    /// `RUST_LOG` was set at start, or no log was installed by [`init`].
    Kept(&'static str),
}

/// Logs at `level` (unset: the level pincer started with by default) from now on.
pub fn set_level(level: Option<&str>) -> Result<LevelChange, String> {
    let Some(set) = SET_FILTER.get() else {
        return Ok(LevelChange::Kept(
            "RUST_LOG is set (it wins over log.level); unset it and restart to use log.level",
        ));
    };
    let level = level.or(DEFAULT_LEVEL.get().map(String::as_str)).unwrap_or("info");
    set(filter(level))?;
    Ok(LevelChange::Applied)
}

/// A filter from a checked `log.level` (`LogConfig::check`); an unparsable one is `info`.
fn filter(level: &str) -> EnvFilter {
    EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"))
}
