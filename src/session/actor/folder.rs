//! A cluster node's snapshot of the group's folder, taken when the session's
//! CLI has stopped (idle close, shutdown), and put in place before a CLI
//! starts on the node that runs the group next (unless this node took or
//! put that very snapshot last: `workspace::remembered`). Only on cluster
//! nodes that keep folders (`[cluster] workspace = "moved"`), never for
//! throwaway sessions. A folder over the caps is not snapshotted (the next
//! owner keeps an older one, or its own): said in the log.

use super::SessionActor;
use crate::store::StoreError;
use crate::workspace::{self, SnapshotError};

/// Why the stored folder was not put in place: logged, and the node's own
/// folder is used.
#[derive(Debug, thiserror::Error)]
enum RestoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the stored folder is unreadable")]
    Unreadable,
    #[error("cannot write the group's folder: {0}")]
    Io(#[from] std::io::Error),
    #[error("the task putting the folder in place stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

impl SessionActor {
    /// Before a CLI starts on a cluster node: the group's stored folder, if
    /// this node does not have it yet; else at least its starter folder.
    pub(super) async fn folder_in_place(&self) {
        if self.isolated || !self.deps.folders.kept() {
            return;
        }
        let config = &self.deps.config;
        if config.cluster.moves_folders() {
            if let Err(e) = self.restore_folder().await {
                tracing::warn!(group = %self.group, %e, "cannot put the group's stored folder in place; using this node's");
            }
        }
        // A group registered on another node has no folder here yet.
        let (dir, group, name) = (config.groups_dir.clone(), self.group.clone(), config.assistant_name.clone());
        let made = tokio::task::spawn_blocking(move || crate::groups::create(&dir, &group, &name)).await;
        if let Ok(Err(e)) = made {
            tracing::warn!(group = %self.group, %e, "cannot create the group's folder on this node");
        }
    }

    async fn restore_folder(&self) -> Result<(), RestoreError> {
        let data_dir = &self.deps.config.data_dir;
        let Some(at) = self.deps.folders.taken_at(&self.group).await? else { return Ok(()) };
        if workspace::remembered(data_dir, &self.group) == Some(at) {
            return Ok(());
        }
        let Some(stored) = self.deps.folders.get(&self.group).await? else { return Ok(()) };
        let entries = workspace::decode(&stored.bytes).ok_or(RestoreError::Unreadable)?;
        let (dir, group) = (self.deps.config.groups_dir.clone(), self.group.clone());
        tokio::task::spawn_blocking(move || workspace::restore(&dir, &group, &entries)).await??;
        workspace::remember(data_dir, &self.group, stored.taken_at_us)?;
        tracing::info!(group = %self.group, bytes = stored.bytes.len(), "put the group's folder from the store in place");
        Ok(())
    }

    /// Takes and stores the group's folder as it is now.
    pub(super) async fn snapshot_folder(&self) {
        if self.isolated || !self.deps.folders.kept() || !self.deps.config.cluster.moves_folders() {
            return;
        }
        let folder = self.deps.config.groups_dir.join(self.group.as_str());
        let taken = tokio::task::spawn_blocking(move || workspace::take(&folder).map(|e| workspace::encode(&e)))
            .await
            .unwrap_or_else(|e| Err(SnapshotError::Io(std::io::Error::other(e))));
        let bytes = match taken {
            Ok(bytes) => bytes,
            Err(e) => {
                return tracing::warn!(group = %self.group, %e, "the group's folder is not snapshotted; \
                another node that runs it keeps an older one (share groups_dir among the nodes for big folders)")
            }
        };
        let node = self.deps.config.cluster.node_id();
        match self.deps.folders.put(&self.group, node.as_str(), &bytes).await {
            Ok(at) => {
                if let Err(e) = workspace::remember(&self.deps.config.data_dir, &self.group, at) {
                    tracing::warn!(group = %self.group, %e, "cannot note the folder's snapshot");
                }
            }
            Err(e @ StoreError::Fenced(_)) => {
                tracing::debug!(group = %self.group, %e, "the folder is another node's now")
            }
            Err(e) => tracing::warn!(group = %self.group, %e, "cannot store the group's folder"),
        }
    }
}
