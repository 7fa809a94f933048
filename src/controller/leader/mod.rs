//! The top layer: what only the Lease holder writes or publishes. The CA
//! and serving certificate (`certs`), the set of MR kinds the webhooks
//! cover (`coverage`), both webhook configurations (`webhooks`), the
//! `PossiblyLeaked` Events (`leak_events`), the audit of every existing MR
//! (`audit`) and its policy reports (`reports`). These read what the
//! replica layer keeps; nothing below reads them.

pub(crate) mod audit;
pub(crate) mod certs;
pub(crate) mod coverage;
pub(crate) mod in_process;
pub(crate) mod leak_events;
pub mod reports;
pub(crate) mod webhooks;
