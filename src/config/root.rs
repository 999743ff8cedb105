//! The whole configuration: [`Config`], its defaults, and how it is loaded.
//!
//! Layers, later wins: embedded defaults < `pincer.toml` (or `--config`) <
//! `PINCER_*` environment variables, with `__` for nesting
//! (`PINCER_CLAUDE__IDLE_TIMEOUT=10m`). A bad value fails at startup with a
//! message that names the key (`config::check`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use super::budget::BudgetConfig;
use super::claude::ClaudeConfig;
use super::cluster::ClusterConfig;
use super::delivery::{ConsoleConfig, DeliveryConfig};
use super::error::ConfigError;
use super::http::HttpConfig;
use super::log::LogConfig;
use super::media::{MediaConfig, TranscriptionConfig};
use super::progress::ProgressConfig;
use super::retention::RetentionConfig;
use super::sandbox::{AnthropicConfig, SandboxConfig};
use super::scheduler::SchedulerConfig;
use super::store::StoreConfig;
use super::telegram::TelegramConfig;
use super::whatsapp::WhatsAppConfig;

/// The default config file, looked up in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "pincer.toml";

/// The data directory's lock file (`lock::DataLock`), named here with the
/// other files of `data_dir` so that `private` can list it too.
pub const LOCK_FILE: &str = "pincer.lock";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Holds `pincer.db` and the CLI installed by `pincer setup`.
    pub data_dir: PathBuf,
    /// One folder per group; `global/` holds memory every group shares.
    pub groups_dir: PathBuf,
    /// The agent's name, used in the starter memory and (later) as the trigger.
    pub assistant_name: String,
    /// IANA time zone for cron schedules without `--tz` and for local `--at` times.
    pub timezone: String,
    pub claude: ClaudeConfig,
    pub console: ConsoleConfig,
    pub telegram: TelegramConfig,
    pub sandbox: SandboxConfig,
    pub anthropic: AnthropicConfig,
    pub scheduler: SchedulerConfig,
    pub delivery: DeliveryConfig,
    pub whatsapp: WhatsAppConfig,
    pub progress: ProgressConfig,
    /// `[http]`: /metrics, /healthz, /readyz for operators (off by default).
    pub http: HttpConfig,
    /// `[budget]`: what a group may spend by default.
    pub budget: BudgetConfig,
    /// `[log]`: text for people, or JSON lines.
    pub log: LogConfig,
    /// `[retention]`: what is deleted once old.
    pub retention: RetentionConfig,
    /// `[media]`: the cap on what a group's `inbox/` keeps.
    pub media: MediaConfig,
    /// `[transcription]`: the engine that transcribes voice notes (none by default).
    pub transcription: TranscriptionConfig,
    /// `[store]`: SQLite in `data_dir` (default) or a shared PostgreSQL.
    pub store: StoreConfig,
    /// `[cluster]`: one node of several on the shared store (off by default).
    pub cluster: ClusterConfig,
    /// The file this config was read from (made absolute), for a reload to
    /// read again; `None` for a config built another way (tests).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("data"),
            groups_dir: PathBuf::from("groups"),
            assistant_name: "Andy".to_owned(),
            timezone: "UTC".to_owned(),
            claude: ClaudeConfig::default(),
            console: ConsoleConfig { wait_limit: Duration::from_secs(600) },
            telegram: TelegramConfig::default(),
            sandbox: SandboxConfig::default(),
            anthropic: AnthropicConfig::default(),
            scheduler: SchedulerConfig::default(),
            delivery: DeliveryConfig::default(),
            whatsapp: WhatsAppConfig::default(),
            progress: ProgressConfig::default(),
            http: HttpConfig::default(),
            budget: BudgetConfig::default(),
            log: LogConfig::default(),
            retention: RetentionConfig::default(),
            media: MediaConfig::default(),
            transcription: TranscriptionConfig::default(),
            store: StoreConfig::default(),
            cluster: ClusterConfig::default(),
            source: None,
        }
    }
}

impl Config {
    /// Loads defaults < file < environment. `explicit` is `--config`, which
    /// must exist; the default `pincer.toml` is optional.
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let file = match explicit {
            Some(path) if !path.exists() => return Err(ConfigError::MissingFile(path.to_owned())),
            Some(path) => path.to_owned(),
            None => PathBuf::from(DEFAULT_CONFIG_FILE),
        };
        Self::load_file(&file)
    }

    /// Loads defaults < `file` (if it exists) < environment, and remembers
    /// `file` as the config's source (what a reload reads again).
    pub fn load_file(file: &Path) -> Result<Config, ConfigError> {
        let figment = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(file))
            .merge(Env::prefixed("PINCER_").split("__"));
        let mut config = Self::from_figment(figment)?;
        config.source = Some(std::path::absolute(file).unwrap_or_else(|_| file.to_owned()));
        Ok(config)
    }

    /// Extracts and checks a config from any figment (tests build their own).
    pub fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(|e| ConfigError::Invalid(Box::new(e)))?;
        config.check()?;
        Ok(config)
    }

    /// The WhatsApp device store (`whatsapp.device_db`, inside `data_dir` when relative).
    pub fn whatsapp_db_path(&self) -> PathBuf {
        self.data_dir.join(&self.whatsapp.device_db)
    }

    /// The SQLite file inside `data_dir`.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("pincer.db")
    }
}
