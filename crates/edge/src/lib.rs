//! Beyond one node, sans-IO: where a title lives in a cluster of edges, and a seeded simulation
//! of a cluster under a Zipf workload.
//!
//! - [`placement`]: rendezvous (highest-random-weight) hashing of titles over the node list,
//!   replicas for hot titles, and the routing of a client to one of them.
//! - [`cluster`]: one edge's view of its cluster (peers' liveness from probes, title rates)
//!   and the decision for a request: serve here or redirect.
//! - [`sim`]: placement, routing, LRU edge caches filled from the origin, and nodes that fail,
//!   return and join, on a seeded PRNG, reporting load balance, origin traffic and titles moved.

pub mod cluster;
pub mod placement;
pub mod sim;
