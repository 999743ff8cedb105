//! `pincer chat` with an engine of its own: one group's chat in the
//! terminal, its approval requests shown there too.

use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use crate::channel::approvals::Askers;
use crate::channel::console::{self, ChatEnd, ConsoleOptions};
use crate::domain::Platform;

/// `pincer chat`: a terminal chat with one group of `engine` (started with
/// [`Engine::start_console`]), its approval requests shown in the terminal.
pub async fn console_chat<R, W>(
    engine: &Engine,
    opts: &ConsoleOptions,
    input: R,
    output: W,
    shutdown: CancellationToken,
) -> anyhow::Result<ChatEnd>
where
    R: tokio::io::AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut askers = Askers::default();
    let asks = askers.register(Platform::Console);
    let routing = engine.route_approvals(askers, shutdown.clone());
    let end = console::chat(&engine.ports(), asks, opts, input, output, shutdown).await;
    routing.abort();
    Ok(end?)
}
