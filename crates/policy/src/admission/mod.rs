//! The admission core: what one AdmissionReview is decided with.
//!
//! Bottom to top: [`model`] (the shared vocabulary), [`fieldpath`], [`mr`]
//! (managed resource states and policies) and [`review`] (the wire format)
//! → [`cel`] → [`config`] and [`crd`] → [`rules`] (one rule a file) →
//! [`decider`] (the mutate and validate chains) → [`api_server`] (what the
//! API server itself does around the webhooks, for the offline `check`).
//! [`kube_version`] names what each Kubernetes release does differently.
//! The rules read what the cluster tier ([`crate::cluster`]) knows.

pub mod api_server;
pub mod cel;
pub mod config;
pub mod crd;
pub mod decider;
pub mod fieldpath;
pub(crate) mod judging;
pub mod kube_version;
pub mod model;
pub mod mr;
pub mod review;
pub mod rules;
