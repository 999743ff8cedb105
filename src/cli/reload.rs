//! `pincer reload`: asks the running pincer, through its control socket, to
//! read pincer.toml again (as SIGHUP does), and prints what it changed.

use crate::config::Config;

pub async fn execute(config: &Config) -> anyhow::Result<()> {
    match crate::control::client::reload(&config.data_dir).await {
        Ok(Some(said)) => println!("{said}"),
        Ok(None) => {
            println!("pincer is not running on {}: it reads pincer.toml when it starts", config.data_dir.display())
        }
        Err(why) => anyhow::bail!("the running pincer did not reload: {why}"),
    }
    Ok(())
}
