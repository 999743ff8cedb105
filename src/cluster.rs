//! The cluster's decisions (issue 36: several pincer nodes sharing one
//! PostgreSQL, each group owned by one node under a fenced lease), as small
//! pure types: who a node is, its lease clocks, where a group belongs,
//! whether to claim it, until when its CLIs may run, and the fencing token
//! (the SQL is `store::cluster`'s).
//! Nothing here does I/O; the node's tasks (`crate::node`) and the store
//! call these. They stand below the config and the store, which need them,
//! so they are a room of their own rather than a child of `node/`.

pub mod bounds;
pub mod claim;
pub mod deadline;
pub mod fence;
pub mod ghost;
pub mod node_id;
pub mod placement;
pub mod round;
pub mod timing;

pub use bounds::PgBounds;
pub use claim::{decide, next_epoch, ClaimDecision, ClaimInputs, LeaseSeen};
pub use deadline::{Deadline, RenewalSent, Renewed};
pub use fence::{Fence, LeaseName};
pub use ghost::{GhostAction, Ghosts};
pub use node_id::{NodeId, NodeIdError};
pub use placement::{preferred_node, NodeLoad};
pub use round::{Me, Plan, Rounds};
pub use timing::{LeaseTiming, LeaseTtlError};
