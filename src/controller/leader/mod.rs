//! The top layer: what only the Lease holder writes. The CA and serving
//! certificate (`certs`), both webhook configurations (`webhooks`), the
//! audit of every existing MR (`audit`) and its policy reports
//! (`reports`). These read what the replica layer keeps; nothing below
//! reads them.

pub(crate) mod audit;
pub(crate) mod certs;
pub mod reports;
pub(crate) mod webhooks;
