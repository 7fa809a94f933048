//! The ready-made CI integrations, run as their hosts would run them: the
//! pre-commit hooks (.pre-commit-hooks.yaml: entry, files and exclude
//! patterns, file names appended) and the GitHub Action's step
//! (action.yml, scripts/action-check.sh with INPUT_* variables and a
//! GITHUB_OUTPUT file) on examples/manifests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::root;

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The repository's files as pre-commit lists them (relative paths).
fn repo_files(under: &str) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(under), root(), &mut out);
    out.sort();
    out
}

/// Runs a hook as pre-commit does: its entry, its args, then the staged
/// files its `files` pattern matches and its `exclude` pattern does not.
fn run_hook(hook: &Value, args: &[&str], candidates: &[String]) -> (Output, Vec<String>) {
    let files = regex::Regex::new(hook["files"].as_str().unwrap()).unwrap();
    let exclude = regex::Regex::new(hook["exclude"].as_str().unwrap()).unwrap();
    let chosen: Vec<String> = candidates
        .iter()
        .filter(|f| files.is_match(f) && !exclude.is_match(f))
        .cloned()
        .collect();
    let entry: Vec<&str> = hook["entry"].as_str().unwrap().split_whitespace().collect();
    assert_eq!(entry[0], "mrguard", "the hook runs the mrguard binary");
    let out = Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(&entry[1..])
        .args(args)
        .args(&chosen)
        .current_dir(root())
        .output()
        .unwrap();
    (out, chosen)
}

#[test]
fn the_pre_commit_hooks_judge_the_manifests_they_are_given() {
    let hooks = yaml(".pre-commit-hooks.yaml");
    let hooks = hooks.as_array().unwrap();
    let ids: Vec<&str> = hooks.iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["mrguard-check", "mrguard-check-system"]);
    assert_eq!(hooks[0]["language"], "rust", "built from this repository");
    assert_eq!(hooks[1]["language"], "system");

    for hook in hooks {
        // A repository's dotfiles (.pre-commit-config.yaml, .github/) are
        // YAML but not manifests: left out.
        let mut candidates = repo_files("examples/manifests");
        candidates.extend([
            ".pre-commit-config.yaml".to_string(),
            ".github/workflows/ci.yml".to_string(),
            "README.md".to_string(),
        ]);
        let (out, chosen) = run_hook(hook, &[], &candidates);
        assert_eq!(chosen.len(), 4, "{chosen:?}");
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("VPC/legacy-network: denied"), "{err}");
        assert!(err.contains("[observe-only-external-name]"), "{err}");

        let (out, _) = run_hook(hook, &[], &["examples/manifests/bucket.yaml".into()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

        // args as a .pre-commit-config.yaml gives them: the configuration
        // (here one turning the rule off) decides.
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("mrguard.yaml");
        std::fs::write(&cfg, "rules: {observe-only-external-name: Off}\n").unwrap();
        let (out, _) = run_hook(
            hook,
            &["--config", cfg.to_str().unwrap()],
            &["examples/manifests/import-vpc.yaml".into()],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

fn action(files: &str, extra: &[(&str, &str)]) -> (Output, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let sarif: PathBuf = dir.path().join("out.sarif");
    let outputs = dir.path().join("github-output");
    let out = Command::new("bash")
        .arg(root().join("scripts/action-check.sh"))
        .env("MRGUARD_BIN", env!("CARGO_BIN_EXE_mrguard"))
        .env("INPUT_FILES", files)
        .env("INPUT_SARIF", &sarif)
        .env("GITHUB_OUTPUT", &outputs)
        .envs(extra.iter().copied())
        .current_dir(root())
        .output()
        .unwrap();
    let log = std::fs::read(&sarif)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (
        out,
        log,
        std::fs::read_to_string(&outputs).unwrap_or_default(),
    )
}

#[test]
fn the_action_writes_sarif_for_code_scanning_and_reports_the_exit_code() {
    // action.yml runs the script and hands it every input.
    let a = yaml("action.yml");
    assert_eq!(a["runs"]["using"], "composite");
    let step = &a["runs"]["steps"][0];
    assert!(step["run"]
        .as_str()
        .unwrap()
        .ends_with("scripts/action-check.sh\""));
    for input in a["inputs"].as_object().unwrap().keys() {
        let var = format!("INPUT_{}", input.to_uppercase().replace('-', "_"));
        assert!(
            step["env"].get(&var).is_some(),
            "{input} is not passed as {var}"
        );
    }

    let (out, log, outputs) = action("examples/manifests", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(log["version"], "2.1.0", "{log}");
    let results = log["runs"][0]["results"].as_array().unwrap();
    let denied: Vec<&Value> = results
        .iter()
        .filter(|r| r["ruleId"] == "observe-only-external-name")
        .collect();
    assert_eq!(denied.len(), 1, "{results:?}");
    assert_eq!(denied[0]["level"], "error");
    let uri = denied[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        .as_str()
        .unwrap();
    assert!(uri.ends_with("examples/manifests/import-vpc.yaml"), "{uri}");
    assert!(outputs.contains("exit-code=1"), "{outputs}");
    assert!(outputs.contains("sarif="), "{outputs}");

    // fail-on-deny: false keeps the job green but still says 1.
    let (out, _, outputs) = action("examples/manifests", &[("INPUT_FAIL_ON_DENY", "false")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(outputs.contains("exit-code=1"), "{outputs}");

    let (out, log, _) = action("examples/manifests/bucket.yaml", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["level"] != "error"));

    // Unreadable input fails whatever fail-on-deny says.
    let (out, _, outputs) = action("does/not/exist.yaml", &[("INPUT_FAIL_ON_DENY", "false")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(outputs.contains("exit-code=2"), "{outputs}");
}
