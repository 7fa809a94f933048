//! The integration-test binary for everything that needs no API server
//! (tests/README.md). Each area is a module.

mod check_gate;
mod docs;
mod observability;
