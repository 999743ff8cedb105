//! The cluster's SQL (issue 45's first step): the statements of a node's own
//! row and of the fenced leases, as text the store runs. The decisions around
//! them stay pure in `crate::cluster`.

pub mod fence;
pub mod hints;
pub mod membership;
