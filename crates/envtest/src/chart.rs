//! The Helm chart rendered by a real helm (`helm template`), and what a
//! kubelet would make of its Deployment: the container's command, args
//! (with `$(VAR)` expanded) and environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::repo_root;

/// helm from $HELM_BIN or .tools/bin/helm (`scripts/install-tools.sh`).
pub fn helm_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HELM_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let local = repo_root().join(".tools/bin/helm");
    if local.is_file() {
        return Ok(local);
    }
    Err(format!(
        "helm not found: run scripts/install-tools.sh (it installs {}) or set HELM_BIN",
        local.display()
    ))
}

/// helm's cache and config, kept out of $HOME.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("a temporary folder"))
        .path()
}

/// The objects of a rendered chart.
#[derive(Debug, Clone)]
pub struct Rendered(pub Vec<Value>);

impl Rendered {
    /// `helm template RELEASE charts/mrguard -n NAMESPACE -f VALUES`,
    /// offline (no cluster: `lookup` finds nothing, as on a first install).
    pub fn render(release: &str, namespace: &str, values_yaml: &str) -> Result<Self, String> {
        Self::render_for(release, namespace, values_yaml, None)
    }

    /// [`Rendered::render`] for a cluster of `kube_version`
    /// (`.Capabilities.KubeVersion`, as `helm install` reads it from the
    /// API server); helm's own default without it.
    pub fn render_for(
        release: &str,
        namespace: &str,
        values_yaml: &str,
        kube_version: Option<&crate::KubeVersion>,
    ) -> Result<Self, String> {
        let home = helm_home();
        let values = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        std::fs::write(values.path(), values_yaml).map_err(|e| e.to_string())?;
        let chart = repo_root().join("charts/mrguard");
        let out = Command::new(helm_bin()?)
            .args(["template", release])
            .arg(&chart)
            .args(["-n", namespace, "-f"])
            .arg(values.path())
            .args(kube_version.map(|v| format!("--kube-version={}", v.git_version)))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECONFIG", home.join("no-kubeconfig"))
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT")
            .output()
            .map_err(|e| format!("failed to run helm: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "helm template failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let docs = serde_saphyr::from_multiple::<Value>(&text)
            .map_err(|e| format!("helm output is not YAML: {e}"))?;
        Ok(Self(docs.into_iter().filter(|d| !d.is_null()).collect()))
    }

    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }

    pub fn one(&self, kind: &str) -> Result<&Value, String> {
        match self.of_kind(kind).as_slice() {
            [one] => Ok(one),
            other => Err(format!(
                "expected one {kind}, the chart rendered {}",
                other.len()
            )),
        }
    }

    /// The mrguard container of the Deployment.
    pub fn container(&self) -> Result<&Value, String> {
        let d = self.one("Deployment")?;
        d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "mrguard"))
            .ok_or_else(|| "the Deployment has no container named mrguard".to_string())
    }

    /// What the kubelet would run for a pod `pod_name` in `namespace`:
    /// the arguments after the binary (command[1..] then args, `$(VAR)`
    /// expanded from the container's env) and the environment.
    pub fn pod_command(&self, namespace: &str, pod_name: &str) -> Result<PodCommand, String> {
        let c = self.container()?;
        let mut env = Vec::new();
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else {
                match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.namespace") => namespace.to_string(),
                    Some("metadata.name") => pod_name.to_string(),
                    other => return Err(format!("env {name}: unsupported valueFrom {other:?}")),
                }
            };
            env.push((name, value));
        }
        let strs = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(|s| expand(s, &env)))
                .collect()
        };
        let command = strs(&c["command"]);
        let args = strs(&c["args"]);
        let mounts = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or_default().to_string(),
                    m["mountPath"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        Ok(PodCommand {
            binary: command.first().cloned().unwrap_or_default(),
            args: command.into_iter().skip(1).chain(args).collect(),
            env,
            mounts,
        })
    }

    /// The `config.yaml` of the chart's ConfigMap.
    pub fn config_yaml(&self) -> Result<String, String> {
        self.one("ConfigMap")?["data"]["config.yaml"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| "the ConfigMap has no config.yaml".to_string())
    }
}

/// The kubelet's `$(VAR)` expansion of command and args.
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = s.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    out
}

/// A container's process as the kubelet would start it.
#[derive(Debug, Clone)]
pub struct PodCommand {
    /// The image's binary path (the chart's `command[0]`).
    pub binary: String,
    /// `command[1..]` followed by `args`.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Volume name to mount path.
    pub mounts: Vec<(String, String)>,
}

impl PodCommand {
    /// Points every argument under a mount path at `host_dir` instead,
    /// as the volume would appear inside the pod.
    pub fn remount(&mut self, volume: &str, host_dir: &Path) -> Result<(), String> {
        let (_, path) = self
            .mounts
            .iter()
            .find(|(n, _)| n == volume)
            .ok_or_else(|| format!("the container mounts no volume {volume}"))?;
        let path = path.trim_end_matches('/').to_string();
        let host = host_dir.display().to_string();
        for a in &mut self.args {
            if let Some(i) = a.find(&format!("{path}/")) {
                *a = format!("{}{}{}", &a[..i], host, &a[i + path.len()..]);
            }
        }
        Ok(())
    }
}
