//! `mrguard export map` (docs/policy-operations.md#mrguard-export-map): the
//! defaults `/mutate` sets, as an `admissionregistration.k8s.io/v1`
//! MutatingAdmissionPolicy and its binding, so that an API server at 1.36
//! or later defaults MRs itself; [`Policies`], which mutates a request
//! with such policies the way the API server does, for the differential
//! test against `/mutate`; and [`schema::check`], the API's structural
//! rules for the two kinds.
//!
//! Every expression is written so that it cannot fail on any JSON: each
//! step checks the type of what it reads, as the mutation steps do.

mod evaluate;
mod export;
pub mod schema;

pub use evaluate::{EvaluateError, Mutated, Policies};
pub use export::{export, Export, ExportError, NOT_EXPRESSIBLE, POLICY_NAME};
