//! The integration tests that need no API server, in one binary (one link
//! instead of one per file). One module per area; shared helpers live in
//! `support/`. `tests/README.md` says what each module covers.

mod support;

mod architecture;
mod cel_https;
mod certs;
mod chart;
mod check_cli;
mod check_crd;
mod check_gate;
mod check_live;
mod ci_hooks;
mod compositions;
mod controller;
mod docs;
mod documented;
mod explain;
mod faults;
mod hardening;
mod limits;
mod map;
mod observability;
mod plan_cli;
mod policy_ops;
mod properties;
mod reviews;
mod server;
mod shell;
mod shutdown;
mod test_cli;
mod vap;
