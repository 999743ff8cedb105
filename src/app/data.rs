//! The data directory's store, opened for any command, and a group
//! registered in it with its folder (`pincer groups add`, `pincer setup`).
//! A PostgreSQL store's waits are bounded by `[cluster] lease_ttl` (`cluster::bounds`).

use anyhow::Context;

use crate::config::{Config, Secret};
use crate::domain::GroupName;
use crate::groups;
use crate::store::{GroupSettings, Location, Store};

/// Opens (and migrates) the store: `[store] url`, else the SQLite file in `data_dir`.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    crate::private::create_dir(&config.data_dir)
        .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
    let bounds = crate::cluster::PgBounds::new(config.cluster.timing().unwrap_or_default());
    Ok(Store::connect_bounded(&store_location(config), bounds).await?)
}

/// Where `config` keeps its store.
pub fn store_location(config: &Config) -> Location {
    Location::url_or_file(config.store.url.as_ref().map(Secret::expose), config.database_path())
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
