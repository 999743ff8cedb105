//! `pincer setup`: installs the pinned Claude Code CLI into the data
//! directory and registers a starter group, so `pincer chat` works at once.

use crate::app;
use crate::claude::install;
use crate::config::Config;
use crate::groups;
use crate::store::{GroupSettings, StoreError};

use super::groups::add_group;

/// The group `pincer setup` registers, so `pincer chat` works right away.
pub const STARTER_GROUP: &str = "main";

pub async fn execute(config: &Config, version: &str) -> anyhow::Result<()> {
    println!(
        "installing {}@{version} into {} ...",
        install::NPM_PACKAGE,
        install::install_prefix(&config.data_dir).display()
    );
    let binary = install::install(&config.data_dir, version).await?;
    println!("installed {}", binary.display());
    let store = app::open_store(config).await?;
    match add_group(&store, config, STARTER_GROUP, &GroupSettings::default()).await {
        Ok(name) => println!("registered the starter group `{name}`"),
        Err(e) if matches!(e.downcast_ref::<StoreError>(), Some(StoreError::GroupExists(_))) => {
            groups::create(&config.groups_dir, &STARTER_GROUP.parse()?, &config.assistant_name)?;
        }
        Err(e) => return Err(e),
    }
    crate::private::tighten(config);
    println!("ready: `pincer chat {STARTER_GROUP}` talks to the starter group (set ANTHROPIC_API_KEY first)");
    Ok(())
}
