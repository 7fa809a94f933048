//! `mrguard explain`: what mrguard knows about one MR, from the cluster
//! (`KIND/NAME`) or from `kubectl get -o yaml --show-managed-fields` output
//! (`-f`). The analysis is `mrguard_policy::explain`; this only fetches and
//! prints.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kube::discovery::Scope;

use super::cluster::{self, api_error, ClusterError, ConfigSource, Resource};
use super::manifests;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::crd::Crds;
use mrguard_policy::explain::{self, Options, DEFAULT_PROVIDER_MANAGERS};

/// Output formats of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExplainOutput {
    /// For people.
    Text,
    /// The whole analysis as JSON.
    Json,
}

/// The flags of `mrguard explain`.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The MR as KIND/NAME; KIND is a kind or resource, optionally with its
    /// group (e.g. bucket/b, buckets.s3.aws.upbound.io/b).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub(crate) target: Option<String>,
    /// The MR's namespace [default: the context's].
    #[arg(short = 'n', long)]
    pub(crate) namespace: Option<String>,
    /// Read the MR from a file ("-": standard input), e.g. the output of
    /// `kubectl get -o yaml --show-managed-fields`, instead of the cluster.
    #[arg(short = 'f', long)]
    pub(crate) file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) cluster: cluster::ClusterArgs,
    /// Configuration file whose rules apply; the built-in default when absent.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Read the configuration from the installed release's ConfigMap (key
    /// config.yaml).
    #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "config")]
    pub(crate) config_from_cluster: Option<String>,
    /// Field managers that are the provider (globs; repeatable) [default:
    /// provider, provider-*, crossplane-*-provider].
    #[arg(long = "provider-manager", value_name = "GLOB")]
    pub(crate) provider_managers: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: ExplainOutput,
    /// CRD file or folder whose descriptions mark documented immutable
    /// fields (docs/documented-immutables.md); from the cluster, the MR's
    /// own CRD is read when this is absent.
    #[arg(long, value_name = "PATH")]
    pub(crate) crd: Option<PathBuf>,
}

/// `KIND[.GROUP]/NAME`.
fn split_target(t: &str) -> Result<(String, Option<String>, String), String> {
    let (kind, name) = t
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| format!("{t:?} is not KIND/NAME (e.g. bucket/my-bucket or buckets.s3.aws.upbound.io/my-bucket)"))?;
    let (kind, group) = match kind.split_once('.') {
        Some((k, g)) => (k.to_string(), Some(g.to_string())),
        None => (kind.to_string(), None),
    };
    Ok((kind, group, name.to_string()))
}

/// Finds the resource KIND names (a kind or plural, any case).
async fn resolve(
    client: &kube::Client,
    kind: &str,
    group: Option<&str>,
) -> Result<Resource, ClusterError> {
    let wanted = kind.to_lowercase();
    let err = |reason: String| ClusterError::Discovery {
        api_version: group.unwrap_or("any group").to_string(),
        kind: kind.to_string(),
        reason,
        not_served: false,
    };
    let resources: Vec<(kube::core::ApiResource, kube::discovery::ApiCapabilities)> = match group {
        Some(g) => kube::discovery::group(client, g)
            .await
            .map_err(|e| err(e.to_string()))?
            .recommended_resources(),
        None => kube::Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| err(e.to_string()))?
            .groups()
            .flat_map(|g| g.recommended_resources())
            .collect(),
    };
    let mut found: Vec<Resource> = resources
        .into_iter()
        .filter(|(ar, _)| ar.kind.to_lowercase() == wanted || ar.plural == wanted)
        .map(|(api, caps)| Resource {
            api,
            namespaced: caps.scope == Scope::Namespaced,
        })
        .collect();
    match found.len() {
        0 => Err(ClusterError::Discovery {
            api_version: group.unwrap_or("any group").to_string(),
            kind: kind.to_string(),
            reason: "the cluster serves no such kind".into(),
            not_served: true,
        }),
        1 => Ok(found.remove(0)),
        _ => {
            let names: Vec<String> = found.iter().map(Resource::display).collect();
            Err(err(format!(
                "it is ambiguous ({}); name the group, e.g. {}/NAME",
                names.join(", "),
                names[0]
            )))
        }
    }
}

async fn execute(args: &ExplainArgs) -> anyhow::Result<Vec<explain::Explanation>> {
    let options = Options {
        provider_managers: if args.provider_managers.is_empty() {
            DEFAULT_PROVIDER_MANAGERS
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            args.provider_managers.clone()
        },
    };
    let source = ConfigSource::from_flags(args.config.as_ref(), args.config_from_cluster.as_ref());
    let needs_cluster = args.file.is_none() || args.config_from_cluster.is_some();
    let client = if needs_cluster {
        Some(args.cluster.client().await?)
    } else {
        None
    };
    let config = source.load(client.as_ref()).await?;
    let mut facts = match &args.crd {
        Some(p) => Some(load_crds(p)?.cluster()),
        None => None,
    };
    let objects = match (&args.file, &args.target, &client) {
        (Some(path), _, _) => {
            manifests::read(std::slice::from_ref(path), manifests::MAX_DOCUMENTS)?
                .into_iter()
                .map(|m| m.object)
                .collect()
        }
        (None, Some(target), Some(client)) => {
            let (kind, group, name) = split_target(target).map_err(anyhow::Error::msg)?;
            let resource = resolve(client, &kind, group.as_deref()).await?;
            let ns = args
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            let what = resource.object(&ns, &name);
            let obj = resource
                .api(client, &ns)
                .get(&name)
                .await
                .map_err(|e| api_error("get", what, e))?;
            if facts.is_none() {
                facts = Some(crd_facts(client, &resource).await);
            }
            vec![serde_json::to_value(obj)?]
        }
        _ => anyhow::bail!("name an MR as KIND/NAME, or a file with -f"),
    };
    let mut out = Vec::new();
    for o in &objects {
        let cluster = facts.as_ref().unwrap_or(Cluster::empty());
        out.push(explain::explain_in(o, &config, &options, cluster)?);
    }
    Ok(out)
}

/// Every CRD under `path` (a file or folder), for their documented fields.
fn load_crds(path: &std::path::Path) -> anyhow::Result<Crds> {
    let mut crds = Crds::default();
    for f in manifests::files(path)? {
        crds.add_yaml(&f.display().to_string(), &manifests::read_text(&f)?)?;
    }
    if crds.is_empty() {
        anyhow::bail!(
            "failed to find a CustomResourceDefinition in {}",
            path.display()
        );
    }
    Ok(crds)
}

/// What the MR's own CRD documents; nothing when it cannot be read (a
/// user may not be allowed to read CRDs, and explain works without).
async fn crd_facts(client: &kube::Client, resource: &Resource) -> Cluster {
    let facts = Cluster::default();
    let ar = kube::core::ApiResource::erase::<CustomResourceDefinition>(&());
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(client.clone(), &ar);
    match api.get(&resource.display()).await {
        Ok(crd) => {
            if let Ok(mut v) = serde_json::to_value(&crd) {
                v["kind"] = "CustomResourceDefinition".into();
                facts.documented().apply(&v);
            }
        }
        Err(e) => tracing::debug!(error = %e, "no CRD read for documented immutable fields"),
    }
    facts
}

/// Runs `explain`; 0 when explained, 2 when the MR or the cluster could not
/// be read.
pub(crate) fn run(args: ExplainArgs) -> i32 {
    let mut err = std::io::stderr().lock();
    let Some(runtime) = super::cluster::runtime("explain") else {
        return 2;
    };
    let explained = match runtime.block_on(execute(&args)) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(err, "mrguard explain: {e:#}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.output {
        ExplainOutput::Text => {
            let texts: Vec<String> = explained.iter().map(explain::render_text).collect();
            write!(out, "{}", texts.join("\n"))
        }
        ExplainOutput::Json => {
            let v = match explained.as_slice() {
                [one] => serde_json::to_string_pretty(one),
                many => serde_json::to_string_pretty(many),
            };
            match v {
                Ok(s) => writeln!(out, "{s}"),
                Err(e) => writeln!(err, "mrguard explain: failed to encode: {e}"),
            }
        }
    };
    if written.is_err() {
        2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            split_target("buckets.s3.aws.upbound.io/b").unwrap(),
            (
                "buckets".into(),
                Some("s3.aws.upbound.io".into()),
                "b".into()
            )
        );
        assert_eq!(
            split_target("Bucket/b").unwrap(),
            ("Bucket".into(), None, "b".into())
        );
        for bad in ["bucket", "/b", "bucket/", "a/b/c"] {
            assert!(
                split_target(bad).unwrap_err().contains("KIND/NAME"),
                "{bad}"
            );
        }
    }
}
