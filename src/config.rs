//! The one typed configuration, loaded once at startup: the door. Each
//! section is a child of its own; [`Config`] (`root`) holds them and loads
//! them, `check` holds the rules across sections.

mod budget;
mod check;
mod claude;
mod cluster;
mod delivery;
mod error;
mod http;
mod live;
mod log;
mod media;
mod progress;
pub mod reload;
mod retention;
mod root;
mod sandbox;
mod scheduler;
mod secret;
mod store;
mod telegram;
mod whatsapp;

pub use budget::BudgetConfig;
pub use claude::ClaudeConfig;
pub use cluster::ClusterConfig;
pub use delivery::{ConsoleConfig, DeliveryConfig};
pub use error::ConfigError;
pub use http::HttpConfig;
pub use live::{live, Live, LiveSetter, Reloadable};
pub use log::{LogConfig, LogFormat};
pub use media::{ByteSize, MediaConfig, TranscriptionConfig};
pub use progress::ProgressConfig;
pub use retention::RetentionConfig;
pub use root::{Config, DEFAULT_CONFIG_FILE, LOCK_FILE};
pub use sandbox::{AnthropicConfig, DefaultOn, GroupSandbox, SandboxConfig, SandboxMode, DEFAULT_UPSTREAM};
pub use scheduler::SchedulerConfig;
pub use secret::Secret;
pub use store::StoreConfig;
pub use telegram::TelegramConfig;
pub use whatsapp::WhatsAppConfig;
