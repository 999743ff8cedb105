//! The egress proxy as pincer runs it: one socket per sandboxed group,
//! `data_dir/run/egress/<group>.sock`, bound the first time the group's CLI
//! is launched and served until its stop token: the engine cancels it once
//! the sessions have ended, so a turn closing in their grace still gets out.
//! The socket is what that group's sandbox gets bound in, so the proxy knows
//! the group from the socket a connection came in on, never from anything
//! the agent says.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::policy::Policy;
use super::resolve::Resolve;
use super::server::EgressProxy;
use crate::config::SandboxConfig;
use crate::domain::GroupName;
use crate::store::EgressLog;

/// The per-group sockets of one pincer's egress proxy (a cheap handle).
#[derive(Clone, Debug)]
pub struct EgressService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct State {
    sandbox: SandboxConfig,
    served: HashMap<GroupName, (PathBuf, watch::Sender<Policy>)>,
}

#[derive(Debug)]
struct Inner {
    proxy: EgressProxy,
    /// `data_dir/run`.
    run: PathBuf,
    /// The policies' source (`[sandbox]` as last reloaded), the groups
    /// served so far, their sockets, and how to change their policies.
    state: Mutex<State>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl EgressService {
    /// Starts the decisions writer (inside a tokio runtime); nothing is
    /// served until [`socket`](Self::socket) asks. pincer's resolver is
    /// [`SystemResolver`](super::SystemResolver).
    pub fn new(
        store: EgressLog,
        resolver: Arc<dyn Resolve>,
        sandbox: SandboxConfig,
        run: PathBuf,
        shutdown: CancellationToken,
    ) -> EgressService {
        let inner = Inner {
            proxy: EgressProxy::new(store, resolver),
            run,
            state: Mutex::new(State { sandbox, served: HashMap::new() }),
            tasks: TaskTracker::new(),
            shutdown,
        };
        EgressService { inner: Arc::new(inner) }
    }

    /// The socket serving `group`, bound and served from now on if it is
    /// not yet, under the group's policy from `[sandbox]`.
    pub fn socket(&self, group: &GroupName) -> std::io::Result<PathBuf> {
        let inner = &self.inner;
        let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((path, _)) = state.served.get(group) {
            return Ok(path.clone());
        }
        let name = socket_name(&inner.run, group);
        let listener = crate::sandbox::socket::bind(&inner.run, &name)?;
        let path = inner.run.join(name);
        let (tx, rx) = watch::channel(Policy::for_group(&state.sandbox, group));
        state.served.insert(group.clone(), (path.clone(), tx));
        let (proxy, shutdown) = (inner.proxy.clone(), inner.shutdown.clone());
        inner.tasks.spawn(async move { proxy.serve_group_live(rx, listener, shutdown).await });
        Ok(path)
    }

    /// `[sandbox]` was reloaded: every group's next request is checked
    /// against its new policy (connections already open keep theirs).
    pub fn update(&self, sandbox: &SandboxConfig) {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        state.sandbox = sandbox.clone();
        for (group, (_, policy)) in &state.served {
            let new = Policy::for_group(sandbox, group);
            tracing::info!(%group, policy = %new.network(), "egress policy reloaded");
            policy.send_replace(new);
        }
    }

    /// Once shutdown is cancelled: waits for every group's connections to end,
    /// then stores the decisions still queued.
    pub async fn stop(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.proxy.close().await;
    }
}

/// The longest socket path Linux takes is 107 bytes (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `egress/<group>.sock`; when that path would be too long for a socket (a
/// deep data directory, a 64-character group name), `egress/<hash>.sock`.
fn socket_name(run: &std::path::Path, group: &GroupName) -> String {
    let readable = format!("egress/{group}.sock");
    if run.join(&readable).as_os_str().len() <= MAX_SOCKET_PATH {
        return readable;
    }
    format!("egress/{}.sock", crate::sandbox::stable_hash(group.as_str().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_named_after_its_group_unless_the_path_would_be_too_long() {
        let group: GroupName = "family".parse().unwrap();
        assert_eq!(socket_name(std::path::Path::new("/var/lib/pincer/run"), &group), "egress/family.sock");
        let long: GroupName = "a".repeat(64).parse().unwrap();
        let deep = std::path::Path::new("/home/someone/.local/share/pincer/run");
        let name = socket_name(deep, &long);
        assert!(deep.join(&name).as_os_str().len() <= MAX_SOCKET_PATH, "{name}");
        assert_ne!(name, socket_name(deep, &"b".repeat(64).parse().unwrap()), "groups keep sockets of their own");
    }
}
