//! `pincer drain`: asks the running cluster node, through its control
//! socket, to hand its groups and gateways to the other nodes at turn
//! boundaries and then stop; prints how far it is until it holds nothing.

use crate::config::Config;
use crate::control::client::{self, Drained};

pub async fn execute(config: &Config) -> anyhow::Result<()> {
    let mut said = String::new();
    let drained = client::drain(&config.data_dir, |progress| {
        let now = progress.said();
        if now != said {
            println!("{now}");
            said = now;
        }
    })
    .await;
    match drained {
        Ok(Drained::Done) => println!("the node stopped taking work and is exiting; start it again when ready"),
        Ok(Drained::NoDaemon) => {
            println!("pincer is not running on {}: there is nothing to drain", config.data_dir.display())
        }
        Ok(Drained::Alone(said)) => println!("{said}"),
        Err(why) => anyhow::bail!("the running pincer did not drain: {why}"),
    }
    Ok(())
}
