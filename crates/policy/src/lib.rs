//! mrguard's admission decisions as pure functions.
//!
//! This crate holds everything mrguard decides and nothing it does: no
//! network, no async runtime, no Kubernetes client, no file I/O and no
//! clock. The instant a decision is judged at (when a staged rule starts
//! to deny, when an exception expires) is a parameter, so a what-if tool
//! or a test judges at a chosen time. The `mrguard` binary wraps it in an
//! HTTPS server, a controller and a CLI, and reads the clock for it.
//!
//! Data flow of one admission request:
//!
//! 1. [`review::decode`] turns an AdmissionReview body into a
//!    [`review::Request`], keeping the object as a `serde_json::Value`;
//!    [`review::RequestBuilder`] makes the same request from objects.
//! 2. an [`admission::Decider`], built from a [`config::Config`], what
//!    the runtime knows of the cluster ([`cluster::Cluster`]) and the
//!    instant to judge at, decides:
//!    - [`admission::Decider::mutate`] runs the steps of [`admission`] on a
//!      copy of the object and builds one JSON Patch from the difference;
//!    - [`admission::Decider::validate`] builds one rule context and runs
//!      every rule of [`rules`] and every configured CEL rule of [`cel`]
//!      (or the Composition patches, or the teardown guard), then answers
//!      with one response for all of them.
//! 3. [`review::encode`] writes the AdmissionReview answer.
//!
//! The same decisions serve the offline paths: [`offline`] wraps manifests
//! in the reviews the API server would send and, with CRDs from [`crd`],
//! applies what the API server itself does before and after the webhooks
//! (`mrguard check --crd`), as the Kubernetes release [`kube_version`]
//! names would; the runtime's audit judges live objects with the same
//! request builder.
//!
//! Modules depend on each other in one direction, bottom to top:
//! [`model`] (the shared vocabulary), [`fieldpath`], [`mr`] (managed
//! resource states and policies, docs/managed-resources.md) and [`review`] (the wire format)
//! → [`cel`] → [`config`] and [`crd`] → [`rules`] → [`admission`] →
//! [`offline`] → [`explain`]. A test keeps it so.
//!
//! Beyond admission: [`merge`] is `kubectl apply`'s three-way JSON merge
//! (`mrguard check --live`), [`managed_fields`] decodes who owns which field
//! and [`explain`] reads one MR with it (`mrguard explain`), and [`reports`]
//! plans the audit's policy reports. [`merge`], [`managed_fields`] and
//! [`reports`] stand alone next to [`model`]. [`vap`] exports rules of a
//! [`config::Config`] as ValidatingAdmissionPolicies and evaluates them
//! with [`cel`] as the API server would (`mrguard export vap`).
//! [`manifest`] parses manifest files' text (objects and the line of each
//! field); [`live`] judges one against its live object (`check --live`)
//! above [`offline`], and renders results as text or, with [`sarif`], as
//! SARIF; [`suite`] compares `mrguard test` cases with their verdicts;
//! [`plan`] turns those judgements into what an apply does to the external
//! resources (`mrguard plan`), above [`live`].
#![deny(missing_docs)]

pub mod activation;
pub mod admission;
pub mod cel;
pub mod cluster;
pub mod composition;
pub mod config;
pub mod crd;
pub mod documented;
pub mod explain;
pub mod fieldpath;
pub mod identity;
pub(crate) mod judging;
pub mod kube_version;
pub mod live;
pub mod managed_fields;
pub mod manifest;
pub mod map;
pub mod merge;
pub mod model;
pub mod mr;
pub mod offline;
pub mod plan;
pub mod providers;
pub mod reports;
pub mod review;
pub mod rules;
pub mod sarif;
pub mod suite;
pub mod vap;

// The third-party test data (MRGUARD_FIXTURES), found as the end-to-end
// harness finds it.
#[cfg(test)]
use mrguard_testdata as third_party;
