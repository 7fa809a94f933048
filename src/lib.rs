//! The `mrguard` runtime: everything around the pure decisions of
//! [`mrguard_policy`] that touches the network, the file system or the
//! cluster.
//!
//! Data flow of one admission request:
//!
//! 1. [`server`] accepts a TCP connection, completes a rustls handshake with
//!    the certificate currently in [`tls::CertStore`], and serves HTTP/1.1 or
//!    HTTP/2 with axum. Tower layers shed load, bound the body and time the
//!    request out before the handler runs.
//! 2. The handler decodes the AdmissionReview, asks `mrguard_policy` for a
//!    decision against the [`config::ConfigStore`] snapshot in force, and
//!    encodes the answer; [`metrics`] records it.
//!
//! Alongside the server:
//! - [`config`] and [`tls`] reload the configuration file and the
//!   certificate files when their contents change, through one file poller;
//! - [`controller`] (with `serve --controller`) holds a Lease and, as leader,
//!   keeps the TLS Secret, the webhook configurations' caBundle and rules
//!   (coverage of every CRD in the `managed` category) right, watches
//!   existing MRs for leaked-resource states and audits them with the same
//!   rules;
//! - [`cli`] is the command line: `serve`, `check` (offline decisions),
//!   `audit`, `config` and `certs`.

pub mod cli;
pub mod config;
pub mod controller;
pub mod metrics;
mod poll;
pub mod server;
pub mod shutdown;
pub mod tls;
