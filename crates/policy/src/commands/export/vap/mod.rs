//! `mrguard export vap` (docs/policy-operations.md#mrguard-export-vap): the
//! rules of a configuration that CEL can express, as
//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and
//! bindings, so that an API server at 1.30 or later enforces them itself;
//! and [`evaluate()`], which judges a request with such policies the way the
//! API server does, for the differential test against mrguard's verdict.
//!
//! Every expression keeps to the Kubernetes 1.30 CEL environment and is
//! written so that it cannot fail on any JSON: each step checks the type of
//! what it reads, as mrguard's rules do.

pub(crate) mod bound;
pub(crate) mod checks;
pub(crate) mod evaluate;
mod export;

pub use bound::PolicyCompileError;
pub use evaluate::{evaluate, EvaluateError, Judgement, Policies};
pub use export::{export, rewrite, Covered, Export, Scope};
