//! `pincer whatsapp link|status|unlink`: pincer as a linked device of a
//! WhatsApp account (see `channel::whatsapp::link`).

use clap::Subcommand;

use crate::channel::whatsapp::link;
use crate::config::Config;

#[derive(Debug, Subcommand)]
pub enum WhatsappCmd {
    /// Pair pincer as a linked device: shows a QR code to scan with the phone (or a pairing code
    /// with --phone), waits for the pairing, says which number it is linked as. `pincer run`
    /// then serves WhatsApp.
    Link {
        /// Pair by a code entered on the phone instead of a QR code: the account's number, with country code.
        #[arg(long)]
        phone: Option<String>,
    },
    /// The linked number, whether the running pincer is connected, and the last message seen.
    Status,
    /// Remove the device from the account (when WhatsApp can be reached) and delete its keys here.
    Unlink,
}

pub async fn execute(config: &Config, command: WhatsappCmd) -> anyhow::Result<()> {
    match command {
        WhatsappCmd::Link { phone } => {
            let number = link::link(config, phone.as_deref(), &mut std::io::stdout()).await?;
            println!(
                "linked as +{number}; `pincer run` serves WhatsApp from its next start (restart it if it runs); \
                 register groups with `pincer groups add NAME --whatsapp JID`"
            );
        }
        WhatsappCmd::Status => println!("{}", link::status(config).await?),
        WhatsappCmd::Unlink => println!("{}", link::unlink(config).await?),
    }
    Ok(())
}
