//! The store's cluster door (issues 36, 45): everything only a cluster node
//! runs, on PostgreSQL only, reached through `Store::cluster()` (`None` on
//! SQLite), so code that is not the node's cannot reach it by accident.
//! Here: the statements as text (`fence`, `membership`), this node's row
//! (`node`), claim rounds and ghosts (`claims`), a claim with its takeover
//! (`takeover`), the status view (`view`) and the LISTEN connection
//! (`hints`). The decisions around them stay pure in `crate::cluster`;
//! every fenced write is begun in `fenced.rs`.

mod claims;
pub mod fence;
pub mod hints;
pub mod membership;
mod node;
mod takeover;
mod view;

pub(super) use claims::{begin_claim, claim_row, kind, skipped_when_locked};
pub use takeover::Takeover;
pub use view::{ClusterView, NodeView, Owner};
