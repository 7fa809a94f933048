//! The bottom layer: talking to the API server. The client and its
//! connections, the limit on concurrent collection reads, watch retries and
//! their backoff, reflector stores, and the Lease every replica competes
//! for. Nothing here knows what mrguard watches or writes; the layers above
//! (`replica`, `leader`) do.

pub(crate) mod api;
pub(crate) mod connections;
pub(crate) mod lease;
pub(crate) mod list_limit;
pub(crate) mod reachable;
pub(crate) mod reflect;
pub(crate) mod retry;

#[cfg(test)]
pub(crate) mod mock;
