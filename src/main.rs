//! The `pincer` binary: parse the command line, load the config, set up
//! logging and signals, and hand over to [`pincer::cli::execute`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use pincer::cli::{Cli, Cmd};
use pincer::config::{Config, LogConfig};

/// Inside a sandbox the static wrapper (`sandbox::confine`) confines each
/// `git` the CLI starts and runs this binary as `confine::GIT_ROLE`: then it
/// pins git's configuration and becomes the real git before `main`, before
/// Rust's runtime ignores SIGPIPE and `main` sets the umask, so git inherits
/// neither.
#[used]
#[link_section = ".init_array"]
static CONFINE_IF_ASKED: extern "C" fn() = confine_if_asked;

extern "C" fn confine_if_asked() {
    pincer::sandbox::confine::enter_if_asked();
}

fn main() -> ExitCode {
    // Before any thread: what pincer creates is its user's alone.
    pincer::private::restrict_umask();
    let cli = Cli::parse();
    // The daemon logs at info; interactive commands keep the terminal for replies.
    let default_level = if matches!(cli.command, Cmd::Run | Cmd::Setup { .. }) { "info" } else { "warn" };
    // Inside a sandbox: no config to read (the cwd is the agent's to write).
    if let Cmd::Forward { listen, to } = &cli.command {
        pincer::logging::init(default_level, &LogConfig::default());
        return forward(*listen, to.clone());
    }
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("pincer: {e}");
            if matches!(cli.command, Cmd::Reload) {
                eprintln!("nothing was changed: the running pincer keeps its settings (fix the file and reload again)");
            }
            return ExitCode::FAILURE;
        }
    };
    // The config says how to log; loading it logs nothing.
    pincer::logging::init(default_level, &config.log);
    pincer::metrics::hop("process_started");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));
        pincer::cli::execute(cli, config, shutdown).await
    });
    // Reading a terminal's stdin blocks a thread that would hold the runtime open.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pincer: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `pincer forward`, inside a sandbox, on a runtime of one thread.
fn forward(listen: std::net::SocketAddr, to: std::path::PathBuf) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime starts");
    match runtime.block_on(pincer::sandbox::forward::run(listen, to)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pincer forward: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    shutdown.cancel();
}
