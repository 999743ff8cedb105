//! The command line: the arguments `pincer` takes and which command family
//! runs each subcommand (one child per family). `main` only parses, loads
//! config, sets up logging and calls [`execute`].

mod backup;
mod chat;
mod doctor;
mod drain;
mod egress;
mod groups;
mod history;
mod reload;
mod service;
mod setup;
mod status;
mod tasks;
mod whatsapp;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::app;
use crate::claude::install;
use crate::config::Config;

pub use groups::{GroupOptions, GroupsCmd};
pub use service::ServiceCmd;
pub use setup::STARTER_GROUP;
pub use tasks::{AddArgs, TasksCmd};
pub use whatsapp::WhatsappCmd;

#[derive(Debug, Parser)]
#[command(name = "pincer", version, about = "Gives each chat group a long-lived Claude Code agent.")]
pub struct Cli {
    /// Config file (default: ./pincer.toml if it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the daemon until Ctrl-C or SIGTERM.
    Run,
    /// Chat with a group's agent in the terminal (reads stdin, one message a line).
    Chat {
        #[arg(default_value = STARTER_GROUP)]
        group: String,
        /// After input ends, wait this long for replies and background work (default: console.wait_limit).
        #[arg(long, value_parser = humantime::parse_duration)]
        wait: Option<Duration>,
        /// Send this file with the first line typed (repeat for several; with no line, they go alone).
        #[arg(long, value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
    },
    /// Register, change and list groups.
    Groups {
        #[command(subcommand)]
        command: GroupsCmd,
    },
    /// Link pincer to a WhatsApp account as a device, see the link, or undo it.
    Whatsapp {
        #[command(subcommand)]
        command: WhatsappCmd,
    },
    /// Scheduled prompts: add, list, pause, resume, cancel, run now, and the run log.
    Tasks {
        #[command(subcommand)]
        command: TasksCmd,
    },
    /// Print what was persisted for a group, oldest first.
    History {
        group: String,
        /// One JSON object per line, with a `kind` field.
        #[arg(long)]
        json: bool,
        /// Only the newest N entries.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Print what a group's agent asked the egress proxy for (allowed, refused, bytes), newest last.
    Egress {
        group: String,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Only the newest N decisions.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// One screen: the daemon, each platform, what waits, and per group its state and cost.
    Status {
        /// As JSON, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Make the running pincer read pincer.toml again (as SIGHUP does): it
    /// applies progress, budgets, egress policies and the log level at once,
    /// and says which other changes need a restart.
    Reload,
    /// On a cluster node: hand this node's groups and Telegram/WhatsApp
    /// gateways to the other nodes, each group at the end of its turn, with
    /// no message lost or answered twice; print progress; then the node
    /// exits (as a clean stop: under systemd start it again with `systemctl
    /// restart pincer`, e.g. after an upgrade). SIGTERM drains the same way.
    /// On one machine there is nothing to hand over: just restart it.
    Drain,
    /// Report which sandbox modes work here and why not, what `auto` picks, and the CLI found.
    Doctor,
    /// Inside a sandbox: carry connections from the sandbox's loopback to a
    /// Unix socket pincer serves (started by pincer itself, not by people).
    #[command(hide = true)]
    Forward {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        to: PathBuf,
    },
    /// Copy the store, the WhatsApp device store, the agents' conversations and the groups'
    /// folders into DIR (new or empty), consistently, while pincer runs; with a manifest.
    Backup { dir: PathBuf },
    /// Run pincer under systemd: `pincer service print` writes a unit for this install.
    Service {
        #[command(subcommand)]
        command: ServiceCmd,
    },
    /// Install the pinned Claude Code CLI from npm into the data directory, and a starter group.
    Setup {
        /// Install this CLI version instead of the pinned one.
        #[arg(long, default_value = install::PINNED_VERSION)]
        version: String,
    },
}

/// Runs one subcommand.
pub async fn execute(cli: Cli, config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Run => app::run(config, shutdown).await,
        Cmd::Status { json } => status::run(&config, json).await,
        Cmd::Reload => reload::execute(&config).await,
        Cmd::Drain => drain::execute(&config).await,
        Cmd::Backup { dir } => backup::execute(&config, &dir).await,
        Cmd::Service { command } => service::execute(cli.config.as_deref(), &config, command),
        Cmd::Chat { group, wait, attach } => chat::execute(config, &group, wait, &attach, shutdown).await,
        Cmd::Groups { command } => groups::execute(&config, command).await,
        Cmd::Tasks { command } => tasks::execute(command, &config).await,
        Cmd::Whatsapp { command } => whatsapp::execute(&config, command).await,
        Cmd::History { group, json, limit } => history::execute(&config, &group, json, limit).await,
        Cmd::Egress { group, json, limit } => egress::execute(&config, &group, json, limit).await,
        Cmd::Setup { version } => setup::execute(&config, &version).await,
        Cmd::Forward { listen, to } => Ok(crate::sandbox::forward::run(listen, to).await?),
        Cmd::Doctor => doctor::execute(&config).await,
    }
}
