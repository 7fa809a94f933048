//! Certificates: the only place that issues, parses, matches and rotates
//! them.
//!
//! - [`names`](serving_names): which names a serving certificate carries,
//!   for `serve --self-signed`, `certs generate` and the controller alike;
//! - `parse`: PEM, the one key–certificate match ([`key_for`]), whether a
//!   CA can issue, whether a chain verifies for a name;
//! - `issue`: self-signed CAs and serving certificates (rcgen);
//! - `dev`: the development certificates of `mrguard certs generate`;
//! - `rotation`: the planner of the TLS Secret's CA and serving
//!   certificate (the controller schedules it and writes the Secret).
//!
//! Serving them (rustls, reload) is [`crate::tls`].

mod dev;
mod error;
mod issue;
mod names;
mod parse;
pub(crate) mod rotation;

pub use dev::{generate_dev, DevRequest, Generated};
pub use error::{CaProblem, PkiError};
pub(crate) use issue::write_file;
pub use issue::{generate_ca, issue_serving_cert, self_signed};
pub(crate) use names::service_host;
pub use names::{extra_name, local_names, serving_names};
pub(crate) use parse::{chain_verifies, not_after, parse_bundle};
pub use parse::{key_for, parse_certs, provider, CaPem, KeyError, PemPair};
