//! The runtime's Kubernetes layer: talking to the API server, for the
//! controller and the one-shot commands alike. The client and its
//! connections, the one error type of an API call ([`api::KubeError`]:
//! the status, the verb and the object), the limit on concurrent
//! collection reads, watch retries and their backoff, reflector stores,
//! and the Lease every replica competes for. Nothing here knows what
//! mrguard watches or writes; the controller's layers (`replica`,
//! `leader`) and `app` do. It uses nothing of them, nor of the server or
//! the command line; it counts what it does in
//! `crate::metrics::controller`.

pub(crate) mod api;
pub(crate) mod connections;
pub(crate) mod lease;
pub(crate) mod list_limit;
pub(crate) mod reachable;
pub(crate) mod reflect;
pub(crate) mod retry;

#[cfg(test)]
pub(crate) mod mock;
