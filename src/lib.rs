//! mrguard: an admission webhook and companion controller for Crossplane
//! managed resources (MRs).
//!
//! Data flow of one admission request:
//!
//! 1. [`server`] accepts a TCP connection, completes a rustls handshake with
//!    the certificate currently in [`tls::CertStore`], and serves HTTP/1.1 or
//!    HTTP/2 with axum.
//! 2. [`server::routes`] bounds and reads the body, and
//!    [`admission::review`] decodes the AdmissionReview, keeping the object
//!    as a `serde_json::Value`.
//! 3. A pure decision function runs against the [`config::Config`] snapshot
//!    in force:
//!    - [`admission::mutate`] runs the mutation steps on a copy of the
//!      object and [`admission::patch`] diffs the two into a JSON Patch;
//!    - [`admission::validate`] runs every rule of [`rules`] (and the CEL
//!      rules of [`cel`]) and merges the findings into one response.
//! 4. The response is encoded (patch as base64) and [`metrics`] records it.
//!
//! Alongside: [`config`] hot-reloads the configuration file, [`tls`] reloads
//! or generates certificates, and [`cli`] offers the same decisions offline
//! (`mrguard check`).

pub mod admission;
pub mod cel;
pub mod cli;
pub mod config;
pub mod controller;
pub mod crd;
pub mod fieldpath;
pub mod metrics;
pub mod mr;
pub mod rules;
pub mod server;
pub mod shutdown;
pub mod tls;

// The allocator is chosen here, in the library, so that every binary built
// on it (the server, the benchmark's baseline) uses the same one.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
