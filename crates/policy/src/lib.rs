//! mrguard's admission decisions as pure functions.
//!
//! This crate holds everything mrguard decides and nothing it does: no
//! network, no async runtime, no Kubernetes client, no file I/O and no
//! clock. The instant a decision is judged at (when a staged rule starts
//! to deny, when an exception expires) is a parameter, so a what-if tool
//! or a test judges at a chosen time. The `mrguard` binary wraps it in an
//! HTTPS server, a controller and a CLI, and reads the clock for it.
//!
//! The crate is in three tiers, each a folder; docs/architecture.md maps
//! every module:
//!
//! - [`admission`], the admission core: the model, the AdmissionReview,
//!   CEL, the configuration, CRDs, the rules and the chains that run them;
//! - [`cluster`], what admission knows of the cluster beyond one request:
//!   providers, documented immutables, identities, activations and
//!   Compositions;
//! - [`commands`], the pure halves of `check`, `plan`, `explain`, `test`,
//!   `export` and the audit's reports, above the other two.
//!
//! Data flow of one admission request:
//!
//! 1. [`admission::review::decode`] turns an AdmissionReview body into a
//!    [`admission::review::Request`], keeping the object as a
//!    `serde_json::Value`; [`admission::review::RequestBuilder`] makes the
//!    same request from objects.
//! 2. an [`admission::decider::Decider`], built from a
//!    [`admission::config::Config`], what the runtime knows of the cluster
//!    ([`cluster::Cluster`]) and the instant to judge at, decides:
//!    - [`admission::decider::Decider::mutate`] runs the mutation steps on a
//!      copy of the object and builds one JSON Patch from the difference;
//!    - [`admission::decider::Decider::validate`] builds one rule context
//!      and runs every rule of [`admission::rules`] and every configured CEL
//!      rule of [`admission::cel`], then answers with one response for all
//!      of them.
//! 3. [`admission::review::encode`] writes the AdmissionReview answer.
//!
//! The offline `check` wraps manifests in the reviews the API server would
//! send and runs [`admission::api_server`], the API server's own chain
//! around the webhooks, with CRDs from [`admission::crd`].
#![deny(missing_docs)]

pub mod admission;
pub mod cluster;
pub mod commands;

// The third-party test data (MRGUARD_FIXTURES), found as the end-to-end
// harness finds it.
#[cfg(test)]
use mrguard_testdata as third_party;
