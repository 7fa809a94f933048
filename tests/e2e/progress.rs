//! Progress of long commands on stderr, against a real API server: drawn
//! for a person at a terminal (a pseudo-terminal from util-linux's
//! `script`), never when stderr is a pipe, and never with `--quiet`; the
//! output on stdout is the same either way.

use std::process::{Command, Output};

use crate::check_live::text;
use crate::support;

/// Runs the built binary with `args`; with `tty`, under `script`, so that
/// its stdout and stderr are a terminal (both come back on stdout).
fn mrguard(args: &[&str], tty: bool) -> Output {
    let bin = env!("CARGO_BIN_EXE_mrguard");
    if !tty {
        return Command::new(bin)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("mrguard runs");
    }
    let line = std::iter::once(bin)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    Command::new("script")
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env_remove("KUBECONFIG")
        .env("COLUMNS", "160")
        .output()
        .expect("script (util-linux) runs")
}

/// indicatif's bar for `unit`: "N/M <unit> (" with the rate after it.
fn shows_progress(out: &str, unit: &str) -> bool {
    out.contains(&format!(" {unit} (")) && out.contains("/s,")
}

#[tokio::test]
async fn audit_and_live_check_show_progress_only_at_a_terminal() {
    let Some(cluster) =
        support::require_cluster("audit_and_live_check_show_progress_only_at_a_terminal").await
    else {
        return;
    };
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();

    let audit = |extra: &[&str], tty: bool| {
        let mut args = vec!["audit", "--kubeconfig", &kubeconfig];
        args.extend_from_slice(extra);
        mrguard(&args, tty)
    };
    let at_terminal = audit(&[], true);
    let shown = text(&at_terminal.stdout);
    assert!(
        shows_progress(&shown, "kinds"),
        "no progress at a terminal: {shown}"
    );
    assert!(shown.contains("MRs judged"), "{shown}");
    let piped = audit(&[], false);
    assert!(
        !shows_progress(&text(&piped.stderr), "kinds"),
        "{}",
        text(&piped.stderr)
    );
    assert!(
        text(&piped.stderr).contains("finding(s) in"),
        "the summary stays"
    );
    let quiet = text(&audit(&["--quiet"], true).stdout);
    assert!(!shows_progress(&quiet, "kinds"), "--quiet: {quiet}");
    assert!(
        quiet.contains("finding(s) in"),
        "--quiet keeps the summary: {quiet}"
    );

    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("buckets.yaml");
    let docs: Vec<String> = (0..3)
        .map(|i| {
            serde_json::to_string(&support::bucket(
                &format!("progress-{i}"),
                serde_json::json!({"region": "us-east-1"}),
            ))
            .unwrap()
        })
        .collect();
    std::fs::write(&manifests, docs.join("\n---\n")).unwrap();
    let manifests = manifests.display().to_string();
    let live = |extra: &[&str], tty: bool| {
        let mut args = vec![
            "check",
            "--live",
            "-f",
            &manifests,
            "--kubeconfig",
            &kubeconfig,
        ];
        args.extend_from_slice(extra);
        mrguard(&args, tty)
    };
    let shown = text(&live(&[], true).stdout);
    assert!(shows_progress(&shown, "manifests"), "{shown}");
    assert!(
        shown.contains("/3 manifests"),
        "the total is known: {shown}"
    );
    let piped = live(&[], false);
    assert_eq!(piped.status.code(), Some(0), "{}", text(&piped.stderr));
    assert!(!shows_progress(&text(&piped.stderr), "manifests"));
    assert!(
        text(&piped.stderr).contains("3 manifest(s)"),
        "{}",
        text(&piped.stderr)
    );
    let quiet = text(&live(&["--quiet"], true).stdout);
    assert!(!shows_progress(&quiet, "manifests"), "--quiet: {quiet}");
}
