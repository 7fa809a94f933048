//! The `mrguard` runtime: everything around the pure decisions of
//! [`mrguard_policy`] that touches the network, the file system or the
//! cluster.
//!
//! Dependencies run one way: `main` → [`cli`] → the runtime modules
//! ([`app`], one function per subcommand, over [`server`], [`controller`],
//! [`kube`] and the rest) → `mrguard_policy`; no module uses one that uses it back,
//! parents and children included (`tests/it/architecture.rs` checks both).
//! docs/architecture.md maps every module.
//!
//! Data flow of one admission request:
//!
//! 1. [`server`] accepts a TCP connection, completes a rustls handshake with
//!    the certificate currently in [`tls::CertStore`] (bounded by the header
//!    deadline), and serves HTTP/1.1 or HTTP/2, as ALPN chose, with axum;
//!    per-connection read deadlines cut slow and idle clients.
//! 2. Tower layers on `/mutate` and `/validate` refuse what must not reach
//!    a decision: beyond the concurrency cap (503 with `Retry-After`), a
//!    body above the limit (413), a body that does not arrive in time (408).
//! 3. The handler decodes the AdmissionReview (400 naming the problem when
//!    it cannot), asks `mrguard_policy` for a decision against the
//!    [`live_config::ConfigStore`] snapshot in force, and encodes the answer. A
//!    panic in a decision is answered by failure policy, never with a 500.
//! 4. [`metrics`] counts every request, refused ones included.
//!
//! Alongside the server:
//! - [`live_config`] and [`tls`] reload the configuration file and the
//!   certificate files when their contents change, through one file poller;
//!   [`pki`] issues, parses, matches and rotates the certificates;
//! - [`controller`] (with `serve --controller`) runs on every replica a
//!   loader that serves the TLS Secret's certificate (readiness waits for
//!   it) and a Lease election; the leader keeps the Secret's CA and serving
//!   certificate valid (rotating the CA without breaking admission), keeps
//!   both webhook configurations' caBundle and rules (coverage of every CRD
//!   in the `managed` category) right, watches existing MRs for paused and
//!   creation-incomplete states (one `PossiblyLeaked` Event each) and audits
//!   them with the validation rules, optionally writing policy reports. Its
//!   settings come from [`app::controller_args`];
//! - [`kube`] is how the runtime talks to the API server, for the controller
//!   and the commands that read a cluster alike: one error type for an API
//!   call, the watch backoff, the Lease, the limit on collection reads;
//! - [`shutdown`] carries the signal that stops every task: readiness goes
//!   false, the listener closes, in-flight requests drain;
//! - [`cli`] is the command line: it parses `serve`, `check` (offline
//!   decisions, or `--live` against a cluster), `audit`, `plan` (what an
//!   apply will do to the external resources), `explain`, `test`
//!   (a configuration's test suites), `config`, `export` (ValidatingAdmissionPolicies),
//!   `crd` (what is derived from CRD files), `certs` (development
//!   certificates), `completion` and `man`, and calls the [`app`] function
//!   that does each (`tests/it/docs.rs` holds this list to the command line's).

#![deny(missing_docs)]
pub mod app;
pub mod cli;
pub mod controller;
pub mod kube;
pub mod live_config;
pub mod metrics;
pub mod pki;
mod poll;
pub mod server;
pub mod shutdown;
pub mod tls;
