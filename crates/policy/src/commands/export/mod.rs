//! `mrguard export`: rules of a configuration as policies the API server
//! runs in-process, and the evaluators that show they agree with
//! mrguard's own answers.
//!
//! - [`vap`]: `export vap`, ValidatingAdmissionPolicies;
//! - [`map`]: `export map`, the MutatingAdmissionPolicy of the defaults;
//! - [`in_process`]: both, kept in the API server by the leader
//!   (`--in-process auto`), and what the webhooks then skip.

pub mod in_process;
pub mod map;
pub mod vap;
