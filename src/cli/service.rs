//! `pincer service print`: the systemd unit for this install, every path
//! made absolute from the working directory (see `crate::service`).

use std::path::Path;

use anyhow::Context;
use clap::Subcommand;

use crate::config::Config;

#[derive(Debug, Subcommand)]
pub enum ServiceCmd {
    /// Print a systemd unit (Type=notify, watchdog, restart on failure) that runs this pincer
    /// with this config, data dir and groups dir.
    Print {
        /// The account it runs as (default: the one running this command).
        #[arg(long)]
        user: Option<String>,
    },
}

/// Runs one `pincer service` command; `config_file` is `--config`.
pub fn execute(config_file: Option<&Path>, config: &Config, command: ServiceCmd) -> anyhow::Result<()> {
    match command {
        ServiceCmd::Print { user } => print!("{}", service_unit(config_file, config, user)?),
    }
    Ok(())
}

/// The unit `pincer service print` writes: every path made absolute from here.
fn service_unit(config_file: Option<&Path>, config: &Config, user: Option<String>) -> anyhow::Result<String> {
    let here = std::env::current_dir().context("cannot read the current directory")?;
    let absolute = |p: &Path| if p.is_absolute() { p.to_owned() } else { here.join(p) };
    let default_file = Path::new(crate::config::DEFAULT_CONFIG_FILE);
    let config_file = config_file.or_else(|| default_file.exists().then_some(default_file)).map(absolute);
    let user = match user {
        Some(user) => user,
        None => nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .context("cannot tell who runs this: give --user NAME")?,
    };
    let spec = crate::service::UnitSpec {
        exe: std::env::current_exe().context("cannot tell where the pincer executable is")?,
        config: config_file,
        work_dir: here.clone(),
        data_dir: absolute(&config.data_dir),
        groups_dir: absolute(&config.groups_dir),
        user,
        shutdown_grace: config.claude.shutdown_grace,
        drain: match config.cluster.enabled {
            true => config.cluster.drain_turn_timeout + config.cluster.drain_tasks_wait,
            false => std::time::Duration::ZERO,
        },
    };
    Ok(crate::service::unit(&spec)?)
}
