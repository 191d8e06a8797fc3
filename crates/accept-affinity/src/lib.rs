//! Affinity-Accept: per-core accept queues, connection stealing and flow-group migration. Not written
//! yet: this crate is an empty placeholder until the accept-affinity issue lands.
#![forbid(unsafe_code)]
