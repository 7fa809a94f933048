//! The integration-test binary (see tests/README.md): one module per area.

mod check_gate;
mod docs;
