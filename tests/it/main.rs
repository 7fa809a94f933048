//! The integration-test binary for everything that needs no API server
//! (tests/README.md). Each area is a module.

mod explain;
mod live;
mod observability;
