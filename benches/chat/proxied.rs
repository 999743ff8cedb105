//! `PINCER_BENCH_RAW_PROXIED=1`: a raw CLI pipe whose API calls go through
//! pincer's credential proxy, as a sandboxed CLI's do (HTTP over the
//! proxy's Unix socket, `ANTHROPIC_UNIX_SOCKET`, a leased placeholder key),
//! with no sandbox and no pincer around the CLI. Paired against the plain
//! raw pipe, it is what the proxy's hop alone costs a turn; `pincer chat`
//! sandboxed minus unconfined is that hop plus bwrap's.
//!
//! The proxy runs on a thread and runtime of its own (tokio's default
//! multi-thread one, as pincer's), not on the bench's, so the bench's
//! timing tasks do not share its workers.

use std::path::Path;

use pincer::config::Secret;
use pincer::sandbox::proxy::{Credential, KeyLease, Proxy};
use tokio_util::sync::CancellationToken;

use crate::support::cli::cli_env;
use crate::support::pipe::RawPipe;

/// The proxy behind one proxied pipe; stops when dropped.
pub struct Running {
    _dir: tempfile::TempDir,
    _lease: KeyLease,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A raw CLI pipe to `api_url` through a credential proxy of its own.
pub fn start(api_url: &str) -> (RawPipe, Running) {
    let (env, running) = proxy_on_a_thread(api_url);
    (RawPipe::start(env), running)
}

/// [`start`] with the CLI inside a bwrap of the bench's own: the whole file
/// system as it is (`--dev-bind / /`) and the `namespaces` flags (the
/// bench's default: `--unshare-pid --unshare-net`), nothing else of
/// pincer's sandbox. Against
/// [`start`]'s pipe, what those namespaces cost the CLI itself. The proxy's
/// socket is a path, which a new network namespace still reaches.
pub fn start_in_bwrap(api_url: &str, namespaces: &[String]) -> (RawPipe, Running) {
    use crate::support::cli::{claude_bin, ENV_TO_REMOVE};
    let (mut env, running) = proxy_on_a_thread(api_url);
    let (dir, home, cwd) = crate::support::pipe::scratch();
    env.retain(|(k, _)| k != "HOME");
    env.push(("HOME".into(), home.display().to_string()));
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let mut cmd = tokio::process::Command::new("bwrap");
    cmd.args(["--dev-bind", "/", "/", "--die-with-parent"])
        .args(namespaces)
        .arg("--")
        .arg(claude_bin())
        .args(crate::support::pipe::pipe_args())
        .current_dir(&cwd)
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for key in ENV_TO_REMOVE {
        cmd.env_remove(key);
    }
    (RawPipe::spawn(dir, cmd), running)
}

/// A credential proxy on a thread and runtime of its own, and a raw CLI's
/// environment that calls the API through it.
fn proxy_on_a_thread(api_url: &str) -> (Vec<(String, String)>, Running) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("run/api.sock");
    let stop = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = {
        let (api_url, socket, stop) = (api_url.to_owned(), socket.clone(), stop.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("the proxy's runtime");
            runtime.block_on(async move {
                tx.send(serve(&api_url, &socket, &stop).await).expect("the bench waits for its proxy");
                stop.cancelled().await;
            });
        })
    };
    let proxy = rx.recv().expect("the proxy started");
    let lease = proxy.lease("bench");
    let env = proxied_env(&lease, &socket);
    (env, Running { _dir: dir, _lease: lease, stop, thread: Some(thread) })
}

/// [`start`] with the proxy on the caller's runtime: a relay's
/// (`chat/relay.rs`), as pincer runs its proxy on its own runtime.
pub async fn start_here(api_url: &str) -> (RawPipe, Here) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("run/api.sock");
    let stop = CancellationToken::new();
    let proxy = serve(api_url, &socket, &stop).await;
    let lease = proxy.lease("bench");
    let env = proxied_env(&lease, &socket);
    (RawPipe::start(env), Here { _dir: dir, _lease: lease, stop })
}

/// The proxy behind a pipe of [`start_here`]; stops when dropped.
pub struct Here {
    _dir: tempfile::TempDir,
    _lease: KeyLease,
    stop: CancellationToken,
}

impl Drop for Here {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A credential proxy to `api_url` with the tests' key, at `socket` until `stop`.
async fn serve(api_url: &str, socket: &Path, stop: &CancellationToken) -> Proxy {
    let credential = Credential::ApiKey(Secret::new(crate::support::cli::TEST_API_KEY));
    Proxy::start(api_url, credential, socket, stop.clone()).await.expect("the proxy starts")
}

/// A raw CLI's environment, its API calls through the proxy at `socket`.
fn proxied_env(lease: &KeyLease, socket: &Path) -> Vec<(String, String)> {
    let mut env = cli_env("http://localhost", Path::new("home"));
    for (key, value) in
        [("ANTHROPIC_API_KEY", lease.key().to_owned()), ("ANTHROPIC_UNIX_SOCKET", socket.display().to_string())]
    {
        env.retain(|(k, _)| k != key);
        env.push((key.to_owned(), value));
    }
    env
}
