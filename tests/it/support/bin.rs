//! The built `mrguard` binary, for what only a process shows: exit codes,
//! stdout and stderr, signals.

use std::process::{Command, Output};

/// A command running the `mrguard` binary cargo built for these tests.
pub(crate) fn mrguard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mrguard"))
}

/// Runs `mrguard` with `args` to completion.
pub(crate) fn run(args: &[&str]) -> Output {
    mrguard().args(args).output().expect("mrguard runs")
}

/// Its stderr, as text.
pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
