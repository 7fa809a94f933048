//! The pure halves of mrguard's one-shot commands and of the audit: each
//! takes what the runtime fetched (manifests, live objects, CRDs) and
//! returns what to print or write. One module a command:
//!
//! - [`check`]: `mrguard check`, with its `--live` part, and its text and
//!   [`sarif`] renderings; [`manifest`] parses the files and keeps the line
//!   of each field, and [`merge`] is `kubectl apply`'s three-way merge;
//! - [`plan`]: `mrguard plan`, what an apply does to external resources;
//! - [`explain`]: `mrguard explain`, one MR read with [`managed_fields`];
//! - [`test`]: `mrguard test`, cases compared with their verdicts;
//! - [`export`]: `mrguard export vap` and `export map`;
//! - [`reports`]: the audit's PolicyReports, and [`audit_pass`]: which
//!   kinds an audit pass lists again and the line that sums it up.

pub mod audit_pass;
pub mod check;
pub mod explain;
pub mod export;
pub mod managed_fields;
pub mod manifest;
pub mod merge;
pub mod plan;
pub mod reports;
pub mod sarif;
pub mod test;
