//! What `memwall plan` prints, as a library so that its tables are tested without the binary:
//! [`graph`], the rematerialization planners on a user's graph file at one budget, and
//! [`front`], memwall's transformer's memory-compute front at block and unit granularity.

pub mod front;
pub mod graph;
