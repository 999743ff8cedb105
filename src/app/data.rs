//! The data directory's store, opened for any command, and a group
//! registered in it with its folder (`pincer groups add`, `pincer setup`).

use anyhow::Context;

use crate::config::Config;
use crate::domain::GroupName;
use crate::groups;
use crate::store::{GroupSettings, Store};

/// Opens (and migrates) the store in `data_dir`.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    crate::private::create_dir(&config.data_dir)
        .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
    Ok(Store::open(&config.database_path()).await?)
}

/// Registers a group: its store row, then its folder with starter memory
/// (what `pincer groups add` does).
pub async fn register_group(
    store: &Store,
    config: &Config,
    name: &GroupName,
    settings: &GroupSettings,
) -> anyhow::Result<()> {
    groups::check_not_reserved(name)?;
    store.groups().add_group(name, settings).await?;
    groups::create(&config.groups_dir, name, &config.assistant_name)
        .with_context(|| format!("cannot create the folder of group `{name}` in {}", config.groups_dir.display()))?;
    Ok(())
}
