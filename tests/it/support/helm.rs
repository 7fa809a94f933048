//! A real helm on the chart: from `$HELM_BIN`, or `.tools/bin/helm`, which
//! `scripts/install-tools.sh` installs. Without either the tests that use it
//! fail, on purpose. helm's own state is kept out of `$HOME`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use super::{documents, root};

/// The namespace and release name the chart is rendered with.
pub(crate) const NS: &str = "crossplane-system";
pub(crate) const RELEASE: &str = "mrguard";

/// `charts/mrguard`.
pub(crate) fn chart() -> PathBuf {
    root().join("charts/mrguard")
}

fn helm_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HELM_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "HELM_BIN={} is not a file", p.display());
        return p;
    }
    let local = root().join(".tools/bin/helm");
    assert!(
        local.is_file(),
        "helm not found: run `scripts/install-tools.sh` (it installs {}) or set HELM_BIN",
        local.display()
    );
    local
}

/// helm's own state (cache, config, repositories), one folder per test run.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Runs helm in the repository root against the cluster of `kubeconfig`.
pub(crate) fn helm_with_kubeconfig(args: &[&str], kubeconfig: &Path) -> Output {
    let home = helm_home();
    Command::new(helm_bin())
        .args(args)
        .current_dir(root())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("HELM_NAMESPACE")
        .env_remove("HELM_KUBECONTEXT")
        .output()
        .expect("helm runs")
}

/// Runs helm with no cluster at all.
pub(crate) fn helm(args: &[&str]) -> Output {
    helm_with_kubeconfig(args, &helm_home().join("no-kubeconfig"))
}

/// The stdout of a helm run that must have succeeded; `what` names it.
pub(crate) fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `helm template` of the chart as `release` in `ns`, with `extra` arguments.
pub(crate) fn template(release: &str, ns: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec!["template", release, chart.to_str().unwrap(), "-n", ns];
    args.extend_from_slice(extra);
    documents(&ok(&helm(&args), &format!("helm {}", args.join(" "))))
}
