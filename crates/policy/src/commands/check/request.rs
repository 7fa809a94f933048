//! What `check` is asked, parsed once: the manifests (and `--old`) from
//! the files' text, how to judge them, and what the runtime must read to
//! judge them. The runtime reads files and asks the cluster; it decides
//! nothing about what it reads, so a request says exactly what to fetch.

use serde_json::Value;

use super::{is_composition, CheckError};
use crate::admission::api_server::identity;
use crate::admission::kube_version::KubeVersion;
use crate::admission::model::Operation;
use crate::admission::mr::is_managed;
use crate::cluster::identity::fold_group;
use crate::commands::manifest::{self, FileText, Manifest};

/// How to judge.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The operation to judge offline [default: CREATE, or UPDATE with
    /// `--old`]; against a cluster, what applying would send.
    pub operation: Option<Operation>,
    /// The requesting user, for `exemptUsernames`.
    pub username: String,
    /// With `--crd`: an object no CRD defines is refused.
    pub require_crd: bool,
    /// The Kubernetes release whose API server is modelled.
    pub kube_version: KubeVersion,
    /// The most YAML documents read from one file.
    pub max_documents: usize,
    /// Text output: the object (or its patch) and the verdict's lines,
    /// for each document as it is judged.
    pub text: bool,
    /// Text output shows the JSON Patch instead of the object.
    pub patch: bool,
    /// Against a cluster: the namespace of manifests that name none (the
    /// context's, or `-n`). `None` judges offline.
    pub live: Option<String>,
}

/// The manifests, parsed, and what judging them needs.
#[derive(Debug)]
pub struct CheckRequest {
    /// How to judge.
    pub options: CheckOptions,
    /// Every object of the manifest files, in order.
    pub manifests: Vec<Manifest>,
    /// `--old`: its path and its objects.
    pub olds: Option<(String, Vec<Manifest>)>,
    /// What the runtime reads from the cluster (empty offline).
    pub needs: Needs,
}

/// What to read from the cluster for a live check.
#[derive(Debug, Default)]
pub struct Needs {
    /// One entry per manifest: the object to find, or `None` for one the
    /// cluster is not asked about (not an MR, or a Composition).
    pub objects: Vec<Option<Wanted>>,
    /// The kinds whose MRs can claim the same external resources as the
    /// wanted objects (external-identity), one entry per family.
    pub families: Vec<FamilyNeed>,
    /// The cluster's MRDs and MRAPs are needed whatever discovery says
    /// (a Composition's composed kinds); a kind the cluster does not serve
    /// needs them too.
    pub activations: bool,
}

/// One manifest's object in the cluster.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its namespace, if the kind is namespaced (the manifest's, else the
    /// default).
    pub namespace: String,
    /// The manifest as applied when the kind is namespaced.
    pub namespaced: Value,
    /// The manifest as applied when the kind is cluster-scoped.
    pub cluster_scoped: Value,
    /// Its entry in [`Needs::families`].
    pub family: usize,
}

/// The kinds named `kind` in every group that folds to one group: the
/// legacy and the `.m.` namespaced kind of one provider family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyNeed {
    /// The kind.
    pub kind: String,
    /// Every API group whose kind of that name is in the family.
    pub groups: Vec<String>,
}

impl CheckRequest {
    /// Parses the manifests and `--old`, and says what judging them needs.
    pub fn parse(
        manifests: &[FileText],
        old: Option<(String, Vec<FileText>)>,
        options: CheckOptions,
    ) -> Result<CheckRequest, CheckError> {
        let manifests = manifest::parse_all(manifests, options.max_documents)?;
        let olds = match old {
            Some((path, sources)) => {
                Some((path, manifest::parse_all(&sources, options.max_documents)?))
            }
            None => None,
        };
        let needs = match &options.live {
            Some(default_namespace) => needs(&manifests, default_namespace)?,
            None => Needs::default(),
        };
        Ok(CheckRequest {
            options,
            manifests,
            olds,
            needs,
        })
    }
}

/// What a live check of `manifests` reads.
fn needs(manifests: &[Manifest], default_namespace: &str) -> Result<Needs, CheckError> {
    let mut needs = Needs::default();
    for m in manifests {
        if is_composition(&m.object) {
            needs.activations = true;
            needs.objects.push(None);
            continue;
        }
        if !is_managed(&m.object) {
            needs.objects.push(None);
            continue;
        }
        let (api_version, kind, _, name) = identity(&m.object);
        if name.is_empty() {
            return Err(CheckError::NoName {
                path: m.file.clone(),
                doc: m.doc,
            });
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let family = FamilyNeed {
            kind: kind.clone(),
            groups: folding_to(&fold_group(group)),
        };
        let family = match needs.families.iter().position(|f| *f == family) {
            Some(i) => i,
            None => {
                needs.families.push(family);
                needs.families.len() - 1
            }
        };
        let mut namespaced = m.object.clone();
        manifest::scope(&mut namespaced, true, default_namespace);
        let mut cluster_scoped = m.object.clone();
        manifest::scope(&mut cluster_scoped, false, default_namespace);
        let namespace = namespaced["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        needs.objects.push(Some(Wanted {
            api_version,
            kind,
            name,
            namespace,
            namespaced,
            cluster_scoped,
            family,
        }));
    }
    Ok(needs)
}

/// Every API group that [`fold_group`] folds to `folded`: `folded` itself,
/// and it with one `m` label after its first (`s3.aws.m.upbound.io` for
/// `s3.aws.upbound.io`).
fn folding_to(folded: &str) -> Vec<String> {
    let labels: Vec<&str> = folded.split('.').collect();
    let mut out = Vec::new();
    if fold_group(folded) == folded {
        out.push(folded.to_string());
    }
    for i in 1..=labels.len() {
        let mut with_m = labels.clone();
        with_m.insert(i, "m");
        let g = with_m.join(".");
        if fold_group(&g) == folded && !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_every_group_that_folds_to_one() {
        let groups = folding_to("s3.aws.upbound.io");
        assert!(groups.contains(&"s3.aws.upbound.io".to_string()));
        assert!(groups.contains(&"s3.aws.m.upbound.io".to_string()));
        for g in &groups {
            assert_eq!(fold_group(g), "s3.aws.upbound.io", "{g}");
        }
        assert_eq!(
            folding_to(&fold_group("s3.aws.m.upbound.io")),
            groups,
            "the legacy and the namespaced kind find one family"
        );
        // The core group is its own family.
        assert_eq!(folding_to("")[0], "");
    }

    fn options(live: Option<&str>) -> CheckOptions {
        CheckOptions {
            operation: None,
            username: String::new(),
            require_crd: false,
            kube_version: KubeVersion::NEWEST,
            max_documents: manifest::MAX_DOCUMENTS,
            text: false,
            patch: false,
            live: live.map(str::to_string),
        }
    }

    #[test]
    fn a_live_request_names_each_object_to_find_scoped_both_ways() {
        let text = "apiVersion: s3.aws.m.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: b\nspec:\n  forProvider: {}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";
        let src = [FileText {
            file: "x.yaml".into(),
            text: text.into(),
        }];
        let r = CheckRequest::parse(&src, None, options(Some("team-a"))).unwrap();
        let w = r.needs.objects[0].as_ref().unwrap();
        assert_eq!(
            (w.kind.as_str(), w.name.as_str(), w.namespace.as_str()),
            ("Bucket", "b", "team-a")
        );
        assert_eq!(w.namespaced["metadata"]["namespace"], "team-a");
        assert!(w.cluster_scoped["metadata"].get("namespace").is_none());
        assert!(
            r.needs.objects[1].is_none(),
            "not an MR: the cluster is not asked"
        );
        assert_eq!(r.needs.families.len(), 1);
        // Offline, nothing is fetched.
        let r = CheckRequest::parse(&src, None, options(None)).unwrap();
        assert!(r.needs.objects.is_empty());
    }

    #[test]
    fn a_live_manifest_without_a_name_is_refused_naming_it() {
        let src = [FileText {
            file: "x.yaml".into(),
            text: "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {}\nspec:\n  forProvider: {}\n".into(),
        }];
        let e = CheckRequest::parse(&src, None, options(Some("default"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to judge x.yaml, document 1: metadata.name is missing; a live check needs the name to find the object"
        );
    }
}
