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

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::policy::Policy;
use super::resolve::Resolve;
use super::server::EgressProxy;
use crate::domain::GroupName;
use crate::store::Store;

/// The per-group sockets of one pincer's egress proxy (a cheap handle).
#[derive(Clone, Debug)]
pub struct EgressService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    proxy: EgressProxy,
    /// `data_dir/run`.
    run: PathBuf,
    /// The groups served so far, and their sockets.
    served: Mutex<HashMap<GroupName, PathBuf>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl EgressService {
    /// Starts the decisions writer (inside a tokio runtime); nothing is
    /// served until [`socket`](Self::socket) asks. pincer's resolver is
    /// [`SystemResolver`](super::SystemResolver).
    pub fn new(store: Store, resolver: Arc<dyn Resolve>, run: PathBuf, shutdown: CancellationToken) -> EgressService {
        let inner = Inner {
            proxy: EgressProxy::new(store, resolver),
            run,
            served: Mutex::default(),
            tasks: TaskTracker::new(),
            shutdown,
        };
        EgressService { inner: Arc::new(inner) }
    }

    /// The socket serving `policy`'s group, bound and served from now on if it
    /// is not yet. The policy of a group's first launch holds until shutdown
    /// (it comes from pincer.toml, which is read once).
    pub fn socket(&self, policy: Policy) -> std::io::Result<PathBuf> {
        let inner = &self.inner;
        let mut served = inner.served.lock().expect("egress sockets lock");
        if let Some(path) = served.get(policy.group()) {
            return Ok(path.clone());
        }
        let name = socket_name(&inner.run, policy.group());
        let listener = crate::sandbox::socket::bind(&inner.run, &name)?;
        let path = inner.run.join(name);
        served.insert(policy.group().clone(), path.clone());
        let (proxy, shutdown) = (inner.proxy.clone(), inner.shutdown.clone());
        inner.tasks.spawn(async move { proxy.serve_group(policy, listener, shutdown).await });
        Ok(path)
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
