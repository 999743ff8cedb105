//! `pincer status`: one screen for the operator, from the store (which any
//! `pincer` may read) and, when a daemon runs, from its control socket; on a
//! cluster's store, its nodes (this machine's marked) and each group's owner.
//! The screen itself is drawn by [`crate::status`], as on the status page.

use std::time::SystemTime;

use crate::config::Config;
use crate::status::{overview, render, unix, Status};

/// Prints the status of the pincer of `config`.
pub async fn run(config: &Config, json: bool) -> anyhow::Result<()> {
    let location = crate::app::store_location(config);
    if let crate::store::Location::File(path) = &location {
        anyhow::ensure!(
            path.exists(),
            "no pincer store at {} (run `pincer setup`, or give the --config of the pincer to look at)",
            path.display()
        );
    }
    let store = crate::store::Store::connect(&location).await?;
    let now = SystemTime::now();
    let overview = overview(&store.health(), &store.groups(), &config.timezone, config.budget.budget(), now).await?;
    store.close().await;
    let daemon = crate::control::client::live_view(&config.data_dir).await;
    let node = config.cluster.enabled.then(|| config.cluster.node_id().to_string());
    let status = Status { daemon, store: overview, node };
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render(&status, unix(now)));
    }
    Ok(())
}
