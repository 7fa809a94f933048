//! Crossplane's package kinds on the test API server: Provider,
//! ProviderRevision and DeploymentRuntimeConfig (`pkg.crossplane.io`).
//!
//! The real CRDs (Crossplane v2, in the third-party fixtures) are installed
//! where the fixtures are there. A clone without the fixtures has none of
//! them; there the CRD written here stands in: the same group, version,
//! kind and scope, and a schema of
//! the fields mrguard reads (a revision's owner references, `spec.image`,
//! `spec.runtimeConfigRef`; a runtime config's service account name), with
//! the real CRDs' required fields, so an object valid here is valid there.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use crate::cluster::create_crd;

/// One package kind: its file in the fixtures, and the stand-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageKind {
    Provider,
    ProviderRevision,
    DeploymentRuntimeConfig,
}

impl PackageKind {
    fn file(self) -> &'static str {
        match self {
            PackageKind::Provider => "pkg.crossplane.io_providers.yaml",
            PackageKind::ProviderRevision => "pkg.crossplane.io_providerrevisions.yaml",
            PackageKind::DeploymentRuntimeConfig => {
                "pkg.crossplane.io_deploymentruntimeconfigs.yaml"
            }
        }
    }

    /// The stand-in CRD.
    pub fn stand_in(self) -> Value {
        let runtime_config_ref = json!({
            "type": "object",
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "name": {"type": "string"}},
            "required": ["name"],
        });
        let (kind, plural, spec) = match self {
            PackageKind::Provider => (
                "Provider",
                "providers",
                json!({
                    "type": "object",
                    "properties": {
                        "package": {"type": "string"},
                        "revisionActivationPolicy": {"type": "string"},
                        "runtimeConfigRef": runtime_config_ref,
                    },
                    "required": ["package"],
                    "x-kubernetes-preserve-unknown-fields": true,
                }),
            ),
            PackageKind::ProviderRevision => (
                "ProviderRevision",
                "providerrevisions",
                json!({
                    "type": "object",
                    "properties": {
                        "image": {"type": "string"},
                        "desiredState": {"type": "string", "enum": ["Active", "Inactive"]},
                        "revision": {"type": "integer", "format": "int64"},
                        "runtimeConfigRef": runtime_config_ref,
                    },
                    "required": ["desiredState", "image", "revision"],
                    "x-kubernetes-preserve-unknown-fields": true,
                }),
            ),
            PackageKind::DeploymentRuntimeConfig => (
                "DeploymentRuntimeConfig",
                "deploymentruntimeconfigs",
                json!({
                    "type": "object",
                    "properties": {
                        "serviceAccountTemplate": {"type": "object", "properties": {
                            "metadata": {"type": "object", "properties": {
                                "name": {"type": "string"},
                            }, "x-kubernetes-preserve-unknown-fields": true},
                        }},
                    },
                    "x-kubernetes-preserve-unknown-fields": true,
                }),
            ),
        };
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.pkg.crossplane.io")},
            "spec": {
                "group": "pkg.crossplane.io",
                "scope": "Cluster",
                "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                          "singular": kind.to_lowercase(), "categories": ["crossplane", "pkg"]},
                "versions": [{
                    "name": if self == PackageKind::DeploymentRuntimeConfig { "v1beta1" } else { "v1" },
                    "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": spec,
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }}},
                    "subresources": {"status": {}},
                }],
            },
        })
    }

    /// The upstream CRD from the fixtures, when [`crate::FIXTURES_ENV`] is
    /// set.
    fn upstream(self) -> Option<Result<CustomResourceDefinition, String>> {
        let dir = std::env::var_os(crate::FIXTURES_ENV).filter(|d| !d.is_empty())?;
        let path = std::path::Path::new(&dir)
            .join("crds-crossplane")
            .join(self.file());
        Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("failed to read {}: {e}", path.display()))
                .and_then(|text| {
                    serde_saphyr::from_str(&text)
                        .map_err(|e| format!("failed to parse {}: {e}", path.display()))
                }),
        )
    }
}

fn already_exists(e: &str) -> bool {
    e.contains("AlreadyExists") || e.contains("already exists")
}

/// Installs `kind`'s CRD: Crossplane's own where the fixtures have it,
/// else the stand-in. Tests of one binary share the API server, so one
/// that is there already is kept.
pub async fn install(client: &kube::Client, kind: PackageKind) -> Result<(), String> {
    let crd: CustomResourceDefinition = match kind.upstream() {
        Some(upstream) => upstream?,
        None => serde_json::from_value(kind.stand_in()).map_err(|e| e.to_string())?,
    };
    match create_crd(client, &crd).await {
        Err(e) if !already_exists(&e) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_are_crds_of_the_real_kinds() {
        for (kind, name, version) in [
            (PackageKind::Provider, "providers.pkg.crossplane.io", "v1"),
            (
                PackageKind::ProviderRevision,
                "providerrevisions.pkg.crossplane.io",
                "v1",
            ),
            (
                PackageKind::DeploymentRuntimeConfig,
                "deploymentruntimeconfigs.pkg.crossplane.io",
                "v1beta1",
            ),
        ] {
            let crd: CustomResourceDefinition = serde_json::from_value(kind.stand_in()).unwrap();
            assert_eq!(crd.metadata.name.as_deref(), Some(name));
            assert_eq!(crd.spec.scope, "Cluster");
            assert_eq!(crd.spec.versions[0].name, version);
            assert!(kind.file().starts_with("pkg.crossplane.io_"));
        }
    }
}
