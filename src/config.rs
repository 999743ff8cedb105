//! The one typed configuration, loaded once at startup.
//!
//! Layers, later wins: embedded defaults < `pincer.toml` (or `--config`) <
//! `PINCER_*` environment variables, with `__` for nesting
//! (`PINCER_CLAUDE__IDLE_TIMEOUT=10m`). A bad value fails at startup with a
//! message that names the key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest duration any setting takes.
const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

mod budget;
mod http;
mod live;
mod log;
mod media;
mod progress;
pub mod reload;
mod retention;
mod sandbox;

pub use budget::BudgetConfig;
pub use http::HttpConfig;
pub use live::{live, Live, LiveSetter, Reloadable};
pub use log::{LogConfig, LogFormat};
pub use media::{ByteSize, MediaConfig, TranscriptionConfig};
pub use progress::ProgressConfig;
pub use retention::RetentionConfig;
pub use sandbox::{AnthropicConfig, DefaultOn, GroupSandbox, SandboxConfig, SandboxMode, DEFAULT_UPSTREAM};

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
    /// The file this config was read from (made absolute), for a reload to
    /// read again; `None` for a config built another way (tests).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClaudeConfig {
    /// Path or name of the `claude` executable. Unset: the one `pincer setup`
    /// installed in `data_dir`, else `claude` on the PATH.
    pub command: Option<PathBuf>,
    /// Extra arguments appended to every CLI invocation.
    pub args: Vec<String>,
    /// Extra environment for the CLI child (on top of pincer's own, minus `CLAUDECODE`).
    pub env: BTreeMap<String, String>,
    /// Close a session's stdin after this long without activity (never while
    /// background work runs).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// At most this many CLI processes at once; further groups wait in line.
    pub max_live_sessions: usize,
    /// Tools `can_use_tool` allows when a group has no list of its own. A name
    /// ending in `*` matches by prefix (`mcp__github__*`). Pincer's own tools need no
    /// entry: they are allowed by their exact names.
    pub allowed_tools: Vec<String>,
    /// In a group with `--tools admins`: the tools a turn holding a member's
    /// message may use without asking an admin (and only those of them the
    /// group allows). Same matching as `allowed_tools`.
    pub member_tools: Vec<String>,
    /// How long a closing CLI gets to exit after stdin closes, and again after SIGTERM.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Restarts after a crash before pincer gives up on the pending messages.
    pub max_restarts: u32,
    /// How long a tool call waits for an admin's approval before it is denied.
    #[serde(with = "humantime_serde")]
    pub approval_timeout: Duration,
    /// A turn that prints nothing for this long is taken as hung: pincer
    /// interrupts it, restarts the CLI with `--resume` and sends the unanswered
    /// messages again (once). Every stdout line restarts the clock (long tools
    /// print a heartbeat every 30 s); a wait for an admin's approval stops it.
    /// One long model reply prints nothing until it is complete, so keep this
    /// well above a few minutes.
    #[serde(with = "humantime_serde")]
    pub turn_timeout: Duration,
}

/// `[telegram]`: served by `pincer run` when a token is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelegramConfig {
    /// The bot token from @BotFather. Unset: Telegram is not served.
    pub token: Option<Secret>,
    /// Another Bot API server (self-hosted, or the tests' fake). Unset: Telegram's.
    pub api_url: Option<String>,
    /// Receive updates through a webhook at this public HTTPS URL instead of
    /// long polling. Telegram must reach it; `webhook_listen` is where pincer
    /// serves it (usually behind a TLS-terminating proxy).
    pub webhook_url: Option<String>,
    pub webhook_listen: SocketAddr,
    /// The secret Telegram sends with every webhook call; unset: a random one per start.
    pub webhook_secret: Option<Secret>,
    /// How long one long-poll request waits for updates.
    #[serde(with = "humantime_serde")]
    pub poll_timeout: Duration,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token: None,
            api_url: None,
            webhook_url: None,
            webhook_listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            webhook_secret: None,
            poll_timeout: Duration::from_secs(30),
        }
    }
}

/// A credential: never printed by `Debug`, so logs and error messages can't leak it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// `[scheduler]`: scheduled prompts, served by `pincer run`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// How often schedules are re-read, to see changes made by another process
    /// (`pincer tasks ...` while `pincer run` is up). The agent's tools wake it at once.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The wait before retrying a failed run; doubled for each failure in a row, at most 1h.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// Retries of a failed run before pincer gives up on it until the next regular run.
    pub max_retries: u32,
    /// A run with no answer after this long is logged as failed (and retried
    /// like any failed run). The turn itself is left to `claude.turn_timeout`.
    #[serde(with = "humantime_serde")]
    pub run_timeout: Duration,
    /// The shortest interval a schedule may have; a cron expression that fires
    /// more often is refused too (for the agent's tool and `pincer tasks add` alike).
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// At most this many active schedules per group; the next one is refused.
    pub max_active_tasks: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            poll_interval: Duration::from_secs(30),
            retry_delay: Duration::from_secs(60),
            max_retries: 3,
            run_timeout: Duration::from_secs(30 * 60),
            min_interval: Duration::from_secs(5 * 60),
            max_active_tasks: 50,
        }
    }
}

/// `[whatsapp]`: pincer as a linked device of a WhatsApp account.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WhatsAppConfig {
    /// The device's keys and state: its own SQLite file, outside every
    /// group's sandbox. Relative paths are inside `data_dir`.
    pub device_db: PathBuf,
    /// Warn when a connected session has received no message for this long.
    #[serde(with = "humantime_serde")]
    pub silence_warning: Duration,
    /// How long `pincer whatsapp link` waits to reach WhatsApp before it gives up.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How long `pincer whatsapp link` waits for the phone to pair, once connected.
    #[serde(with = "humantime_serde")]
    pub pair_timeout: Duration,
    /// Another WhatsApp WebSocket URL (the tests use a closed loopback port).
    /// Unset: WhatsApp's own. When set, pincer also pins the client version,
    /// so no request goes to WhatsApp's web server for it.
    pub server_url: Option<String>,
}

impl Default for WhatsAppConfig {
    fn default() -> Self {
        WhatsAppConfig {
            device_db: PathBuf::from("whatsapp.db"),
            silence_warning: Duration::from_secs(6 * 3600),
            connect_timeout: Duration::from_secs(30),
            pair_timeout: Duration::from_secs(180),
            server_url: None,
        }
    }
}

/// `[delivery]`: how replies reach the chats through the outbox.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// The pause after a send failed for a passing reason (network, 5xx);
    /// doubled for each failure in a row, up to `retry_cap`. Retries go on
    /// for as long as the failure lasts.
    #[serde(with = "humantime_serde")]
    pub retry_first: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_cap: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig { retry_first: Duration::from_secs(1), retry_cap: Duration::from_secs(60) }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// After input ends, how long `pincer chat` waits for pending replies and
    /// background work before it exits.
    #[serde(with = "humantime_serde")]
    pub wait_limit: Duration,
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
            source: None,
        }
    }
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        ClaudeConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            idle_timeout: Duration::from_secs(30 * 60),
            max_live_sessions: 4,
            // Without a sandbox the agent runs as pincer's user, so the default
            // allows working on files but not arbitrary shell commands.
            allowed_tools: [
                "Read",
                "Glob",
                "Grep",
                "Edit",
                "Write",
                "NotebookEdit",
                "TodoWrite",
                "WebSearch",
                "WebFetch",
                "Task",
                "Agent",
            ]
            .map(String::from)
            .to_vec(),
            member_tools: ["Read", "Glob", "Grep", "WebSearch"].map(String::from).to_vec(),
            shutdown_grace: Duration::from_secs(5),
            max_restarts: 3,
            approval_timeout: Duration::from_secs(5 * 60),
            turn_timeout: Duration::from_secs(10 * 60),
        }
    }
}

/// The configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist (given with --config)")]
    MissingFile(PathBuf),
    #[error("bad configuration: {0}\n(set it in pincer.toml, or through the PINCER_* variable with `__` between sections, e.g. PINCER_CLAUDE__IDLE_TIMEOUT)")]
    Invalid(Box<figment::Error>),
    #[error("bad configuration: {key} {problem}")]
    Rule { key: &'static str, problem: &'static str },
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

    fn check(&self) -> Result<(), ConfigError> {
        if self.claude.max_live_sessions == 0 {
            return Err(ConfigError::Rule { key: "claude.max_live_sessions", problem: "must be at least 1" });
        }
        if self.claude.idle_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "claude.idle_timeout",
                problem: "must be longer than 0s (e.g. \"30m\")",
            });
        }
        if self.claude.turn_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "claude.turn_timeout",
                problem: "must be longer than 0s (e.g. \"10m\")",
            });
        }
        if self.assistant_name.trim().is_empty() {
            return Err(ConfigError::Rule { key: "assistant_name", problem: "must not be empty" });
        }
        if !crate::domain::schedule::valid_zone(&self.timezone) {
            return Err(ConfigError::Rule {
                key: "timezone",
                problem: "is not a known time zone: use an IANA name such as \"Europe/Berlin\" or \"UTC\"",
            });
        }
        let sc = &self.scheduler;
        if sc.poll_interval.is_zero() || sc.retry_delay.is_zero() || sc.run_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "scheduler.poll_interval / scheduler.retry_delay / scheduler.run_timeout",
                problem: "must be longer than 0s (e.g. \"30s\")",
            });
        }
        let w = &self.whatsapp;
        if w.silence_warning.is_zero() || w.connect_timeout.is_zero() || w.pair_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "whatsapp.silence_warning / whatsapp.connect_timeout / whatsapp.pair_timeout",
                problem: "must be longer than 0s (e.g. \"6h\", \"30s\", \"3m\")",
            });
        }
        let d = &self.delivery;
        if d.retry_first.is_zero() || d.retry_cap < d.retry_first {
            return Err(ConfigError::Rule {
                key: "delivery.retry_first / delivery.retry_cap",
                problem: "retry_first must be longer than 0s and retry_cap at least as long (e.g. \"1s\" and \"1m\")",
            });
        }
        self.check_lengths()?;
        self.progress.check()?;
        self.http.check()?;
        self.budget.check()?;
        self.retention.check()?;
        self.media.check()?;
        self.transcription.check()?;
        self.log.check()?;
        let t = &self.telegram;
        if t.token.as_ref().is_some_and(|s| s.expose().trim().is_empty()) {
            return Err(ConfigError::Rule {
                key: "telegram.token",
                problem: "is empty: set the token @BotFather gave you, or remove the key",
            });
        }
        check_url(t.api_url.as_deref(), "telegram.api_url", "is not a URL (e.g. \"http://127.0.0.1:8081/\")")?;
        check_url(
            t.webhook_url.as_deref(),
            "telegram.webhook_url",
            "is not a URL (e.g. \"https://bot.example.com/telegram\")",
        )?;
        let secret_ok = |s: &str| {
            (1..=256).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if t.webhook_secret.as_ref().is_some_and(|s| !secret_ok(s.expose())) {
            return Err(ConfigError::Rule {
                key: "telegram.webhook_secret",
                problem: "must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)",
            });
        }
        if t.poll_timeout.is_zero() || t.poll_timeout > Duration::from_secs(50) {
            return Err(ConfigError::Rule { key: "telegram.poll_timeout", problem: "must be between 1s and 50s" });
        }
        self.check_sandbox()
    }

    /// No duration is longer than [`LONGEST`]: pincer adds them to clock
    /// readings, and one of thousands of years would overflow the clock.
    fn check_lengths(&self) -> Result<(), ConfigError> {
        let (c, sc, w, d) = (&self.claude, &self.scheduler, &self.whatsapp, &self.delivery);
        let lengths = [
            ("claude.idle_timeout", c.idle_timeout),
            ("claude.shutdown_grace", c.shutdown_grace),
            ("claude.approval_timeout", c.approval_timeout),
            ("claude.turn_timeout", c.turn_timeout),
            ("scheduler.poll_interval", sc.poll_interval),
            ("scheduler.retry_delay", sc.retry_delay),
            ("scheduler.run_timeout", sc.run_timeout),
            ("scheduler.min_interval", sc.min_interval),
            ("whatsapp.silence_warning", w.silence_warning),
            ("whatsapp.connect_timeout", w.connect_timeout),
            ("whatsapp.pair_timeout", w.pair_timeout),
            ("delivery.retry_first", d.retry_first),
            ("delivery.retry_cap", d.retry_cap),
            ("console.wait_limit", self.console.wait_limit),
        ];
        match lengths.into_iter().find(|(_, length)| *length > LONGEST) {
            Some((key, _)) => Err(ConfigError::Rule { key, problem: "must be at most a year (e.g. \"30d\")" }),
            None => Ok(()),
        }
    }

    fn check_sandbox(&self) -> Result<(), ConfigError> {
        let skips_unconfined = self
            .sandbox
            .groups
            .keys()
            .any(|g| self.sandbox.requested(g) == SandboxMode::None && self.sandbox.group(g).skip_permissions);
        if skips_unconfined {
            return Err(ConfigError::Rule {
                key: "sandbox.groups.<name>.skip_permissions",
                problem: "is only allowed for a group that runs in a sandbox, not with mode \"none\"",
            });
        }
        check_url(
            self.anthropic.base_url.as_deref(),
            "anthropic.base_url",
            "is not a URL (e.g. \"https://api.anthropic.com\")",
        )
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

/// A set URL key must parse; `problem` shows the user an example.
fn check_url(value: Option<&str>, key: &'static str, problem: &'static str) -> Result<(), ConfigError> {
    match value {
        Some(u) if url::Url::parse(u).is_err() => Err(ConfigError::Rule { key, problem }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Toml;

    fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(text)))
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn humantime_values_parse() {
        let c = from_toml("[claude]\nidle_timeout = \"90s\"\nmax_live_sessions = 2\n").unwrap();
        assert_eq!(c.claude.idle_timeout, Duration::from_secs(90));
        assert_eq!(c.claude.max_live_sessions, 2);
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = from_toml("[claude]\nidle_timeout = \"soon\"\n").unwrap_err().to_string();
        assert!(err.contains("idle_timeout"), "{err}");
        let err = from_toml("[claude]\nmax_live_sessions = 0\n").unwrap_err().to_string();
        assert!(err.contains("claude.max_live_sessions"), "{err}");
        let err = from_toml("[claude]\nidle_timout = \"1m\"\n").unwrap_err().to_string();
        assert!(err.contains("idle_timout"), "{err}");
    }

    #[test]
    fn a_duration_past_a_year_is_refused_before_it_can_overflow_a_clock() {
        for (section, key) in [("claude", "idle_timeout"), ("claude", "shutdown_grace"), ("scheduler", "run_timeout")] {
            let err = from_toml(&format!("[{section}]\n{key} = \"100000years\"\n")).unwrap_err().to_string();
            assert!(err.contains(&format!("{section}.{key}")) && err.contains("at most a year"), "{err}");
        }
        let c = from_toml("[claude]\nidle_timeout = \"365days\"\n").unwrap();
        assert_eq!(c.claude.idle_timeout, Duration::from_secs(365 * 24 * 3600));
    }

    #[test]
    fn the_time_zone_and_scheduler_keys_are_checked() {
        let c = from_toml("timezone = \"Europe/Berlin\"\n[scheduler]\npoll_interval = \"2s\"\n").unwrap();
        assert_eq!((c.timezone.as_str(), c.scheduler.poll_interval), ("Europe/Berlin", Duration::from_secs(2)));
        let c = from_toml("[scheduler]\nrun_timeout = \"5m\"\n[claude]\nturn_timeout = \"90s\"\n").unwrap();
        assert_eq!(
            (c.scheduler.run_timeout, c.claude.turn_timeout),
            (Duration::from_secs(300), Duration::from_secs(90))
        );
        let err = from_toml("[claude]\nturn_timeout = \"0s\"\n").unwrap_err().to_string();
        assert!(err.contains("claude.turn_timeout"), "{err}");
        let err = from_toml("[scheduler]\nrun_timeout = \"0s\"\n").unwrap_err().to_string();
        assert!(err.contains("scheduler.run_timeout"), "{err}");
        let err = from_toml("timezone = \"Berlin\"\n").unwrap_err().to_string();
        assert!(err.contains("timezone"), "{err}");
    }

    #[test]
    fn a_webhook_secret_telegram_would_refuse_stops_pincer_naming_the_key() {
        let ok = from_toml("[telegram]\nwebhook_secret = \"s3cret-token_1\"\n");
        assert!(ok.is_ok(), "{ok:?}");
        for bad in ["", "with space", "slash/"] {
            let e = from_toml(&format!("[telegram]\nwebhook_secret = \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("telegram.webhook_secret"), "{e}");
        }
    }

    #[test]
    fn telegram_keys_are_checked_and_the_token_never_printed() {
        let c = from_toml("[telegram]\ntoken = \"123:abc\"\npoll_timeout = \"5s\"\n").unwrap();
        assert_eq!(c.telegram.token.as_ref().map(Secret::expose), Some("123:abc"));
        assert!(!format!("{c:?}").contains("123:abc"), "Debug must redact the token");
        let err = from_toml("[telegram]\napi_url = \"not a url\"\n").unwrap_err().to_string();
        assert!(err.contains("telegram.api_url"), "{err}");
        let err = from_toml("[telegram]\ntoken = \" \"\n").unwrap_err().to_string();
        assert!(err.contains("telegram.token"), "{err}");
    }

    #[test]
    fn sandbox_keys_parse_and_skipping_prompts_needs_a_sandbox() {
        let c = from_toml(
            "[sandbox]\nmode = \"bwrap\"\n[sandbox.groups.family]\nskip_permissions = true\n\
             [anthropic]\napi_key = \"sk-real\"\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.requested("family"), SandboxMode::Bwrap);
        assert!(c.sandbox.group("family").skip_permissions);
        assert!(!format!("{c:?}").contains("sk-real"), "Debug must redact the key");
        let err = from_toml("[sandbox.groups.family]\nmode = \"none\"\nskip_permissions = true\n").unwrap_err();
        assert!(err.to_string().contains("skip_permissions"), "{err}");
        let err = from_toml("[sandbox]\nmode = \"chroot\"\n").unwrap_err().to_string();
        assert!(err.contains("mode"), "{err}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own large error
    fn env_overrides_nest_with_double_underscore() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("PINCER_CLAUDE__IDLE_TIMEOUT", "10m");
            jail.set_env("PINCER_ASSISTANT_NAME", "Bob");
            let c = Config::load(None).unwrap();
            assert_eq!(c.claude.idle_timeout, Duration::from_secs(600));
            assert_eq!(c.assistant_name, "Bob");
            Ok(())
        });
    }
}
