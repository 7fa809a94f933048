//! What each subcommand does, as library functions: the command line
//! ([`crate::cli`]) parses arguments into the typed options defined here
//! and calls one `run` function per subcommand. The modules are mapped in
//! docs/architecture.md ("Source layout").
//!
//! Data flow of a one-shot command, `check --live` for one: `cli` parses
//! the flags into [`check::CheckArgs`]; `check::run` reads the files
//! (`manifests`) and connects (`cluster::ClusterContext`: client,
//! configuration as read, default namespace, discovery); the pure
//! `CheckRequest::parse` says what judging the manifests needs; `check::live`
//! fetches exactly that; `mrguard_policy::commands::check::judge::judge`
//! decides once, and the results are printed. Nothing here decides what
//! it read.
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
pub mod config;
pub mod controller_args;
pub mod crd;
pub mod explain;
pub(crate) mod explain_composition;
pub mod export;
pub(crate) mod manifests;
pub mod parse;
pub mod plan;
pub(crate) mod progress;
pub mod serve;
pub mod test;
