//! Which Kubernetes the API server in `KUBEBUILDER_ASSETS` is, and what
//! follows from it: the flags it takes and the tests it can run.
//!
//! The suite runs on whatever kube-apiserver it is given, from
//! [`OLDEST_SUPPORTED`] (the chart's `kubeVersion`) to the newest.
//! kube-apiserver refuses to start on a `--feature-gates` entry it does not
//! know, and a gate is only needed while its feature is off by default, so
//! the flags are chosen by version ([`KubeVersion::feature_gates`]). A test
//! that needs a feature of a newer server declares it with
//! [`crate::require_cluster_at`] and is reported as skipped, never passed,
//! on an older one.

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

/// The oldest Kubernetes mrguard supports, the floor of the chart's
/// `kubeVersion` (charts/mrguard/Chart.yaml, which says where it comes
/// from); the harness refuses an older API server.
pub const OLDEST_SUPPORTED: (u32, u32) = (1, 30);

/// A Kubernetes MAJOR.MINOR, with the full version string it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
    /// As the server says it, e.g. `v1.20.2`.
    pub git_version: String,
}

/// The first version of the features the suite gates on. Each line says
/// what the feature is, so a test names the feature, not a bare number.
///
/// Where `check --crd --kube-version` models the same feature, the release
/// is the policy crate's (`mrguard_policy::admission::kube_version::since`), so the
/// suite and the model cannot disagree on it.
pub mod needs {
    use mrguard_policy::admission::kube_version::{since, KubeVersion};

    const fn of(v: KubeVersion) -> (u32, u32) {
        (v.major, v.minor)
    }

    /// CRD validation rules (`x-kubernetes-validations`), enforced without
    /// a gate (beta, on by default).
    pub const CRD_VALIDATION_RULES: (u32, u32) = of(since::VALIDATION_RULES);
    /// Server-side field validation (`fieldValidation=Strict`), on by
    /// default.
    pub const FIELD_VALIDATION: (u32, u32) = of(since::FIELD_VALIDATION);
    /// CRD transition rules (`oldSelf` in `x-kubernetes-validations`),
    /// which come with the validation rules.
    pub const TRANSITION_RULES: (u32, u32) = of(since::VALIDATION_RULES);
    /// ValidatingAdmissionPolicy, `admissionregistration.k8s.io/v1`.
    pub const VALIDATING_ADMISSION_POLICY: (u32, u32) = (1, 30);
    /// MutatingAdmissionPolicy, beta (`v1beta1`) and off by default until
    /// it is GA; the suite enables it where it can.
    pub const MUTATING_ADMISSION_POLICY: (u32, u32) = (1, 34);
    /// MutatingAdmissionPolicy, `admissionregistration.k8s.io/v1` (GA),
    /// what `mrguard export map` writes.
    pub const MUTATING_ADMISSION_POLICY_V1: (u32, u32) = (1, 36);
    /// Webhook `matchConditions`, beta and on by default (GA in 1.30).
    pub const MATCH_CONDITIONS: (u32, u32) = (1, 28);
}

impl KubeVersion {
    /// Parses `v1.20.2`, `1.20`, `v1.24.0-alpha.1` or `Kubernetes v1.20.2`
    /// (what `kube-apiserver --version` prints).
    pub fn parse(s: &str) -> Result<KubeVersion, String> {
        let text = s.trim();
        let v = text
            .rsplit(' ')
            .next()
            .unwrap_or(text)
            .trim_start_matches('v');
        let mut parts = v.split(['.', '-', '+']);
        let number = |p: Option<&str>| -> Result<u32, String> {
            p.and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("not a Kubernetes version: {text:?}"))
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        Ok(KubeVersion {
            major,
            minor,
            git_version: format!("v{v}"),
        })
    }

    /// Whether this is at least `major.minor`.
    pub fn at_least(&self, (major, minor): (u32, u32)) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// MAJOR.MINOR, as `check --kube-version` takes it.
    pub fn major_minor(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// The `--feature-gates` entries the suite needs on this version: only
    /// gates of features that are off by default here (an unknown gate, or
    /// one that was removed after GA, stops kube-apiserver from starting).
    pub fn feature_gates(&self) -> Vec<&'static str> {
        let mut gates = Vec::new();
        // Beta but off by default from 1.34; the v1beta1 API must be
        // enabled with it (see [`KubeVersion::runtime_config`]). A gate
        // that has gone GA is still accepted for a few releases.
        if self.at_least(needs::MUTATING_ADMISSION_POLICY) && !self.at_least((1, 37)) {
            gates.push("MutatingAdmissionPolicy=true");
        }
        gates
    }

    /// The `--runtime-config` entries the suite needs on this version.
    pub fn runtime_config(&self) -> Vec<&'static str> {
        let mut apis = Vec::new();
        if self.at_least(needs::MUTATING_ADMISSION_POLICY) && !self.at_least((1, 37)) {
            apis.push("admissionregistration.k8s.io/v1beta1=true");
        }
        apis
    }

    /// The flags [`KubeVersion::feature_gates`] and
    /// [`KubeVersion::runtime_config`] amount to.
    pub fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        let gates = self.feature_gates();
        if !gates.is_empty() {
            flags.push(format!("--feature-gates={}", gates.join(",")));
        }
        let apis = self.runtime_config();
        if !apis.is_empty() {
            flags.push(format!("--runtime-config={}", apis.join(",")));
        }
        flags
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.git_version)
    }
}

/// The version of `kube-apiserver` in `assets`, from its `--version`.
fn of_binary(bin: &Path) -> Result<KubeVersion, String> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("failed to run {} --version: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} --version failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    KubeVersion::parse(&text)
}

/// The version of the kube-apiserver in `KUBEBUILDER_ASSETS`, read once.
pub fn of_assets() -> Result<KubeVersion, String> {
    static VERSION: OnceLock<Result<KubeVersion, String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let dir = crate::assets::assets()?;
            of_binary(&dir.join("kube-apiserver"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_servers_and_binaries_say() {
        let v = KubeVersion::parse("Kubernetes v1.20.2\n").unwrap();
        assert_eq!(
            (v.major, v.minor, v.git_version.as_str()),
            (1, 20, "v1.20.2")
        );
        let v = KubeVersion::parse("v1.24.0-alpha.1").unwrap();
        assert_eq!((v.major, v.minor), (1, 24));
        let v = KubeVersion::parse("1.36").unwrap();
        assert_eq!(v.major_minor(), "1.36");
        assert!(KubeVersion::parse("Kubernetes vX").is_err());
        assert!(KubeVersion::parse("").is_err());
    }

    #[test]
    fn gates_only_where_the_feature_is_off_by_default() {
        let v = |s| KubeVersion::parse(s).unwrap();
        assert!(v("1.30.14").flags().is_empty());
        assert_eq!(
            v("1.34.1").flags(),
            [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true"
            ]
        );
        assert!(v("1.37.0").flags().is_empty());
        assert!(v("1.30.0").at_least(needs::CRD_VALIDATION_RULES));
        assert!(!v("1.29.9").at_least(OLDEST_SUPPORTED));
    }
}
