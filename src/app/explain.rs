//! `mrguard explain`: what mrguard knows about one MR, from the cluster
//! (`KIND/NAME`) or from `kubectl get -o yaml --show-managed-fields` output
//! (`-f`). The analysis is `mrguard_policy::commands::explain`; this only fetches and
//! prints.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::cluster::{self, api_error, ClusterContext, ConfigOrigin, Resource};
use super::manifests;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use mrguard_policy::admission::crd::Crds;
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::commands::explain::{self, Options, DEFAULT_PROVIDER_MANAGERS};

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
    /// The Composition of the MR's XR (or of the XR explained), from a
    /// file; from the cluster it is found through the XR.
    #[arg(long, value_name = "FILE")]
    pub(crate) composition: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: ExplainOutput,
    /// CRD file or folder whose descriptions mark documented immutable
    /// fields (docs/documented-immutables.md); from the cluster, the MR's
    /// own CRD is read when this is absent.
    #[arg(long, value_name = "PATH")]
    pub(crate) crd: Option<PathBuf>,
}

/// One explained object: an MR, or an XR (only its Composition's patches).
pub(crate) struct Explained {
    /// The MR's explanation; `None` for an XR.
    mr: Option<explain::Explanation>,
    /// The kind is not served: why, from its MRD.
    unserved: Option<Unserved>,
    /// `Kind/name` of the object.
    label: String,
    /// Its Composition's patches that would be denied, when it has one.
    patches: Option<mrguard_policy::cluster::composition::Patches>,
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

async fn execute(args: &ExplainArgs) -> anyhow::Result<Vec<Explained>> {
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
    let origin = ConfigOrigin::from_flags(args.config.as_ref(), args.config_from_cluster.as_ref());
    let needs_cluster = args.file.is_none() || args.config_from_cluster.is_some();
    let ctx = if needs_cluster {
        Some(ClusterContext::connect(&args.cluster, args.namespace.as_deref(), &origin).await?)
    } else {
        None
    };
    let config = match &ctx {
        Some(c) => c.config()?,
        None => origin.read_local()?.load()?,
    };
    let client = ctx.as_ref().map(|c| c.client.clone());
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
            let resource = match cluster::resolve(client, &kind, group.as_deref()).await {
                Ok(r) => r,
                // Not served (a group that does not exist at all is a
                // discovery failure): with Crossplane v2, maybe an MRD that
                // no MRAP activates, whose schema is there all the same. An
                // ambiguous name is not that.
                Err(e @ cluster::ClusterError::Discovery { not_served, .. })
                    if not_served || group.is_some() =>
                {
                    let known = super::activations::list(client).await.unwrap_or_default();
                    return match inactive(&known, &kind, group.as_deref(), &name) {
                        Some(e) => Ok(vec![e]),
                        None => Err(e.into()),
                    };
                }
                Err(e) => return Err(e.into()),
            };
            let ns = ctx
                .as_ref()
                .map(|c| c.default_namespace.clone())
                .unwrap_or_default();
            let what = resource.object(&ns, &name);
            let obj = resource
                .api(client, &ns)
                .get(&name)
                .await
                .map_err(|e| api_error("get", what, e))?;
            let facts = match &mut facts {
                Some(f) => f,
                None => facts.insert(crd_facts(client, &resource).await),
            };
            let obj = serde_json::to_value(obj)?;
            // Who else claims an MR's identity; explained without when unreadable.
            let (g, k) = (&resource.api.group, &resource.api.kind);
            if mrguard_policy::admission::mr::is_managed(&obj) {
                match super::claimants::Family::list(client, &config, g, k).await {
                    Ok(family) => family.fill(facts.identities()),
                    Err(e) => eprintln!("mrguard explain: note: other claimants unknown: {e}"),
                }
            }
            vec![obj]
        }
        _ => anyhow::bail!("name an MR as KIND/NAME, or a file with -f"),
    };
    let given = match &args.composition {
        Some(p) => Some(
            manifests::read(std::slice::from_ref(p), manifests::MAX_DOCUMENTS)?
                .into_iter()
                .map(|m| m.object)
                .find(mrguard_policy::commands::check::is_composition)
                .ok_or_else(|| anyhow::anyhow!("{} holds no Composition", p.display()))?,
        ),
        None => None,
    };
    // One instant for every object explained.
    let now = jiff::Timestamp::now();
    let mut out = Vec::new();
    for o in &objects {
        let composition = match (&given, &client) {
            (Some(c), _) => Some(c.clone()),
            (None, Some(client)) => match super::explain_composition::fetch(client, o).await {
                Ok(c) => c,
                // The MR is still explained; say why its patches are not.
                Err(e) => {
                    eprintln!("mrguard explain: note: its Composition was not read: {e}");
                    None
                }
            },
            (None, None) => None,
        };
        let decider = Decider::new(&config, facts.as_ref().unwrap_or(Cluster::empty()), now);
        let is_mr = mrguard_policy::admission::mr::is_managed(o);
        if !is_mr && composition.is_none() {
            // Neither an MR nor an XR whose Composition is known.
            decider.explain(o, &options)?;
        }
        out.push(Explained {
            unserved: None,
            mr: if is_mr {
                Some(decider.explain(o, &options)?)
            } else {
                None
            },
            label: mrguard_policy::admission::api_server::label(o),
            patches: composition
                .map(|c| mrguard_policy::cluster::composition::patches(o, &c, &config)),
        });
    }
    Ok(out)
}

/// Every CRD under `path` (a file or folder), for their documented fields.
/// A kind the cluster does not serve, explained from its MRD.
pub(crate) struct Unserved {
    /// Why it is not served (no MRAP activates its MRD, or not yet).
    why: String,
    /// What the MRD's schema documents as immutable.
    documented: Option<std::sync::Arc<mrguard_policy::cluster::documented::KindFields>>,
}

/// The explanation of `kind`/`name` when an MRD defines the kind but it is
/// not served; `None` when no single MRD does.
fn inactive(
    known: &mrguard_policy::cluster::activation::Activations,
    kind: &str,
    group: Option<&str>,
    name: &str,
) -> Option<Explained> {
    let [mrd] = known.find(kind, group)[..] else {
        return None;
    };
    let why = known
        .state(&mrd.group, &mrd.kind)
        .problem()
        .unwrap_or_else(|| {
            format!(
                "kind {}.{} is served by MRD {} (state {}), but the API server does not serve it yet",
                mrd.kind,
                mrd.group,
                mrd.name,
                mrd.state()
            )
        });
    Some(Explained {
        mr: None,
        unserved: Some(Unserved {
            why,
            documented: mrd.documented.clone(),
        }),
        label: format!("{}.{}/{name}", mrd.kind, mrd.group),
        patches: None,
    })
}

impl Unserved {
    fn render_text(&self, label: &str) -> String {
        use std::fmt::Write as _;
        let mut s = format!("{label}: not served\n  {}\n", self.why);
        let fields = self.documented.as_ref().map_or(&[][..], |k| &k.fields[..]);
        if fields.is_empty() {
            s.push_str("  documented immutable fields: none in the MRD's schema\n");
        } else {
            s.push_str("  documented immutable fields (from the MRD's schema, docs/documented-immutables.md):\n");
        }
        for f in fields {
            let _ = writeln!(s, "    {} [{}]", f.path.as_str(), f.versions.join(", "));
            let _ = writeln!(s, "      source: {:?}", f.source.sentence);
        }
        s
    }

    fn to_json(&self, label: &str) -> serde_json::Value {
        serde_json::json!({
            "object": label,
            "served": false,
            "activation": self.why,
            "documentedImmutableFields": self.documented.as_ref().map(|k| &k.fields),
        })
    }
}

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
            let texts: Vec<String> = explained
                .iter()
                .map(|e| {
                    let mut t = e.mr.as_ref().map(explain::render_text).unwrap_or_default();
                    if let Some(u) = &e.unserved {
                        t.push_str(&u.render_text(&e.label));
                    }
                    if let Some(p) = &e.patches {
                        t.push_str(&p.render_text(&e.label));
                    }
                    t.trim_start_matches('\n').to_string()
                })
                .collect();
            write!(out, "{}", texts.join("\n"))
        }
        ExplainOutput::Json => {
            let values: Vec<serde_json::Value> = explained
                .iter()
                .map(|e| {
                    let mut v = match (&e.mr, &e.unserved) {
                        (Some(m), _) => serde_json::to_value(m).unwrap_or_default(),
                        (None, Some(u)) => u.to_json(&e.label),
                        (None, None) => serde_json::json!({"object": e.label}),
                    };
                    if let (Some(p), Some(o)) = (&e.patches, v.as_object_mut()) {
                        o.insert("composition".into(), p.to_json());
                    }
                    v
                })
                .collect();
            let v = match values.as_slice() {
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
    } else if explained.iter().any(|e| e.unserved.is_some()) {
        // The object cannot exist while its kind is not served.
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unserved_kind_is_explained_from_its_mrd() {
        let mut known = mrguard_policy::cluster::activation::Activations::default();
        known.add(&serde_json::json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1",
            "kind": "ManagedResourceDefinition", "metadata": {"name": "buckets.s3.aws.upbound.io"},
            "spec": {"group": "s3.aws.upbound.io", "names": {"kind": "Bucket", "plural": "buckets"},
              "versions": [{"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {"properties": {
                "spec": {"properties": {"forProvider": {"properties": {"region": {"type": "string",
                  "description": "Changing this forces a new resource to be created."}}}}}}}}}]}}));
        assert!(inactive(&known, "bucket", Some("ec2.aws.upbound.io"), "b").is_none());
        let e = inactive(&known, "Bucket", None, "b").unwrap();
        let u = e.unserved.as_ref().unwrap();
        let text = u.render_text(&e.label);
        assert!(
            text.starts_with(
                "Bucket.s3.aws.upbound.io/b: not served\n  kind Bucket.s3.aws.upbound.io is served by MRD \
                 buckets.s3.aws.upbound.io, which no MRAP activates (state Inactive)"
            ),
            "{text}"
        );
        assert!(
            text.contains("\n    spec.forProvider.region [v1beta1]\n"),
            "{text}"
        );
        let v = u.to_json(&e.label);
        assert_eq!(v["served"], false);
        assert_eq!(
            v["documentedImmutableFields"][0]["path"],
            "spec.forProvider.region"
        );
    }

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
