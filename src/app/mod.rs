//! What each subcommand does, as library functions: the command line
//! ([`crate::cli`]) parses arguments into the typed options defined here
//! and calls one function per subcommand (`serve::run`, `check::run`, which
//! hands `--live` to `live::run`, `audit::run`, `explain::run`, ...).
//!
//! Pure decisions stay in `mrguard_policy`; these modules read files, ask
//! the cluster, and print. `check --live`, followed as data: `cli` parses
//! the flags into [`check::CheckArgs`]; `live::run` reads the files
//! (`manifests`), builds the client and configuration (`cluster`),
//! fetches each live object, and hands manifest, live object and CRDs down
//! once to `mrguard_policy::commands::check::judge_manifest` (which runs the offline
//! pipeline); the results come back up once and are printed.
//!
//! A new subcommand is a module here with its options (a `clap::Args`
//! struct) and one `run` function, and one line in `cli`'s `Command`:
//! `Command::Foo(args) => app::foo::run(*args),`.

pub(crate) mod activations;
pub mod audit;
pub mod certs;
pub mod check;
pub(crate) mod claimants;
pub(crate) mod cluster;
pub(crate) mod compositions;
pub mod config;
pub mod controller_args;
pub mod crd;
pub mod explain;
pub(crate) mod explain_composition;
pub(crate) mod manifests;
pub mod parse;
pub mod plan;
pub(crate) mod progress;
pub mod serve;
pub mod test;
