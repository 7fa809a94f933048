//! End-to-end tests against ONE real kube-apiserver and etcd per run of
//! this binary (`KUBEBUILDER_ASSETS`; see `support`), with mrguard run as
//! the real binary under the chart's arguments and RBAC, one namespace
//! (and one release) per test.
//!
//! Without `KUBEBUILDER_ASSETS` each test that needs the API server prints
//! "e2e skipped: …" with how to get the binaries, and passes; with
//! `CI=true` it fails instead. `scripts/e2e.sh` builds the API server from
//! its Go modules (`scripts/envtest.sh`) and runs this binary on it.

mod activation;
mod admission;
mod availability;
mod chart_args;
mod check_live;
mod compositions;
mod connections;
mod controller;
mod crossplane_v2;
mod differential;
mod documented;
mod exemptions;
mod explain;
mod identity;
mod in_process;
mod observability;
mod plan;
mod policy_reports;
mod progress;
mod quiet;
mod server_features;
mod supervision;
mod support;
mod with_crossplane;
