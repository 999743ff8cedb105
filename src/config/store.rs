//! `[store]`: where pincer keeps its state. Unset, a SQLite file in
//! `data_dir` (one machine needs nothing else); a `postgres://` URL puts it
//! in PostgreSQL, which several pincer nodes can share.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::secret::Secret;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host/database` (also `PINCER_STORE__URL`);
    /// unset: `data_dir/pincer.db`. A secret: never logged with its password.
    pub url: Option<Secret>,
}

impl StoreConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        match &self.url {
            Some(url) if !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://")) => {
                Err(ConfigError::Rule {
                    key: "store.url",
                    problem: "is not a PostgreSQL URL: write `postgres://user:password@host/database`, or leave it \
                              unset to keep the SQLite file in data_dir",
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_postgres_url_or_nothing() {
        assert!(StoreConfig::default().check().is_ok());
        let pg = StoreConfig { url: Some(Secret::new("postgres://pincer:pw@db/pincer")) };
        assert!(pg.check().is_ok());
        let sqlite = StoreConfig { url: Some(Secret::new("sqlite://data/pincer.db")) };
        let said = sqlite.check().unwrap_err().to_string();
        assert!(said.contains("store.url") && said.contains("postgres://"), "{said}");
    }
}
