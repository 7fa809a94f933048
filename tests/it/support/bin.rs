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

/// The release build of `mrguard`, built if it is missing or stale: what
/// the memory and metrics bounds are measured on (docs/security.md).
/// `MRGUARD_RELEASE_BIN` names an already built one instead.
pub(crate) fn release() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(bin) = std::env::var_os("MRGUARD_RELEASE_BIN") {
                return bin.into();
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = Command::new(cargo);
            // What `cargo test` sets for its test binaries would make the
            // build scripts run again: the build sees the shell's settings.
            for (k, _) in std::env::vars_os() {
                let k = k.to_string_lossy();
                let keep = ["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_BUILD_JOBS"];
                if (k.starts_with("CARGO_") && !keep.contains(&k.as_ref()))
                    || k == "OUT_DIR"
                    || k == "LD_LIBRARY_PATH"
                {
                    build.env_remove(k.as_ref());
                }
            }
            let out = build
                .args([
                    "build",
                    "--release",
                    "--bin",
                    "mrguard",
                    "--message-format=json-render-diagnostics",
                ])
                .current_dir(super::root())
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("cargo runs");
            assert!(out.status.success(), "cargo build --release failed");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter_map(|v| v["executable"].as_str().map(std::path::PathBuf::from))
                .next_back()
                .expect("cargo names the built binary")
        })
        .clone()
}
