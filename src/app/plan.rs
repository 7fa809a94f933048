//! `mrguard plan`: what applying manifests (and deleting objects) will do
//! to the external resources (docs/plan.md). This module reads the files
//! and, with `--live`, the cluster: one list per kind (never a get per MR)
//! and the kind's CRD; `mrguard_policy::commands::plan` plans and renders.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use futures::TryStreamExt;
use kube::api::ListParams;
use serde_json::Value;

use mrguard_policy::admission::api_server::{identity, label};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::crd::Crds;
use mrguard_policy::admission::mr::is_managed;
use mrguard_policy::cluster::identity::report::entry_of;
use mrguard_policy::cluster::identity::IdentityIndex;
use mrguard_policy::commands::check::CheckError;
use mrguard_policy::commands::manifest::scope;
use mrguard_policy::commands::plan::{
    prune_candidates, render_markdown, render_text, Entry, Plan, Planner, Selector, SelectorError,
};

use super::cluster::{
    self, live_only, ClusterArgs, ClusterContext, ClusterError, ConfigFromCluster, ConfigOrigin,
    Resource,
};
use super::manifests::{self, Manifest, ManifestError};
use crate::kube::api::list_values;

/// Page size of the lists, as the audit's.
const PAGE: u32 = 500;

/// Output formats of `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlanOutput {
    /// One block per MR (coloured on a terminal).
    Text,
    /// The plan as JSON (docs/plan.schema.json).
    Json,
    /// GitHub-flavoured markdown for a pull-request comment.
    Markdown,
}

/// Arguments of `mrguard plan`.
#[derive(Debug, Clone, Args)]
#[command(group(live_only()))]
pub struct PlanArgs {
    /// Manifest file (multi-document YAML), or folder (read recursively);
    /// "-" reads standard input. Repeatable; optional with --delete, to
    /// plan deletions only.
    #[arg(short = 'f', long = "file", required_unless_present = "delete")]
    pub(crate) file: Vec<PathBuf>,
    /// Plan against the live objects of a cluster: one list per kind.
    #[arg(long, conflicts_with_all = ["old", "crd"])]
    pub(crate) live: bool,
    /// The objects as they are now, from files instead of a cluster
    /// (matched by group, kind, namespace and name). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub(crate) old: Vec<PathBuf>,
    /// Also plan deleting this object: KIND[.GROUP]/NAME, or
    /// KIND[.GROUP]/NAMESPACE/NAME for a namespaced kind. Repeatable.
    #[arg(long = "delete", value_name = "KIND/NAME")]
    pub(crate) delete: Vec<String>,
    /// Also plan deleting what `kubectl apply --prune -l SELECTOR` would:
    /// objects of the manifests' kinds that the selector matches, that
    /// kubectl applied, in the namespaces applied to (or cluster-scoped),
    /// and that the manifests no longer hold.
    #[arg(long, requires = "selector")]
    pub(crate) prune: bool,
    /// The label selector of --prune (kubectl's syntax).
    #[arg(short = 'l', long, requires = "prune")]
    pub(crate) selector: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: PlanOutput,
    /// Exit 0 with no change, 1 when anything is denied, 2 with changes
    /// none of which is denied, 3 when the input cannot be judged.
    #[arg(long)]
    pub(crate) detailed_exitcode: bool,
    /// Configuration file; the built-in default when absent.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) config_from_cluster: ConfigFromCluster,
    /// Offline: CRD file or folder, for defaults, schema checks and the
    /// fields the CRDs document as immutable.
    #[arg(long, value_name = "PATH")]
    pub(crate) crd: Option<PathBuf>,
    /// The user the apply runs as, for exemptUsernames.
    #[arg(long, default_value = "")]
    pub(crate) username: String,
    /// Glob (`*`, `?`) of a field manager that is the provider; repeatable
    /// [default: provider, provider-*, crossplane-*-provider].
    #[arg(long = "provider-manager", value_name = "GLOB")]
    pub(crate) provider_managers: Vec<String>,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
    /// Namespace of manifests that name none [default: the context's, or
    /// "default" offline].
    #[arg(short = 'n', long)]
    pub(crate) namespace: Option<String>,
    /// The most YAML documents read from each input.
    #[arg(long, value_name = "N", default_value_t = manifests::MAX_DOCUMENTS)]
    pub(crate) max_documents: usize,
}

/// Why a plan cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Judge(#[from] CheckError),
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error(transparent)]
    Check(#[from] super::check::CheckCommandError),
    #[error("failed to plan {path}, {at}: metadata.name is missing")]
    NoName { path: String, at: String },
    #[error(
        "failed to read --delete {0:?}: want KIND[.GROUP]/NAME or KIND[.GROUP]/NAMESPACE/NAME"
    )]
    DeleteSyntax(String),
    #[error("failed to plan --delete {0:?}: {1}")]
    DeleteNotFound(String, String),
    #[error(
        "failed to list {resource} in all namespaces: {source} (a plan needs every object of the kinds it plans)"
    )]
    List {
        resource: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to read customresourcedefinitions.apiextensions.k8s.io {name:?}: {reason}")]
    Crd { name: String, reason: String },
}

/// One `--delete`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeleteTarget {
    given: String,
    kind: String,
    group: Option<String>,
    namespace: Option<String>,
    name: String,
}

fn parse_delete(s: &str) -> Result<DeleteTarget, PlanError> {
    let bad = || PlanError::DeleteSyntax(s.to_string());
    let parts: Vec<&str> = s.split('/').collect();
    let (kind_group, namespace, name) = match parts[..] {
        [k, n] => (k, None, n),
        [k, ns, n] => (k, Some(ns.to_string()), n),
        _ => return Err(bad()),
    };
    if kind_group.is_empty() || name.is_empty() || namespace.as_deref() == Some("") {
        return Err(bad());
    }
    let (kind, group) = match kind_group.split_once('.') {
        Some((k, g)) => (k.to_string(), Some(g.to_string())),
        None => (kind_group.to_string(), None),
    };
    Ok(DeleteTarget {
        given: s.to_string(),
        kind,
        group,
        namespace,
        name: name.to_string(),
    })
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether `object` is the one `t` names (kind or plural, any case).
fn names(t: &DeleteTarget, object: &Value, default_ns: &str) -> bool {
    let (api_version, kind, ns, name) = identity(object);
    let kind_ok = kind.eq_ignore_ascii_case(&t.kind);
    let group_ok = t
        .group
        .as_deref()
        .is_none_or(|g| g == group_of(&api_version));
    let ns_ok = ns.is_empty() || ns == t.namespace.as_deref().unwrap_or(default_ns);
    kind_ok && group_ok && ns_ok && name == t.name
}

fn visited_namespaces(manifests: &[Manifest]) -> Vec<String> {
    let mut v: Vec<String> = manifests
        .iter()
        .map(|m| identity(&m.object).2)
        .filter(|n| !n.is_empty())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn config_of(args: &PlanArgs) -> Result<Config, PlanError> {
    Ok(ConfigOrigin::from_flags(args.config.as_ref(), None)
        .read_local()?
        .load()
        .map_err(ClusterError::from)?)
}

/// Offline: against `--old` files (or nothing: every MR is a create).
fn plan_offline(args: &PlanArgs, mut docs: Vec<Manifest>) -> Result<Plan, PlanError> {
    let config = config_of(args)?;
    let olds: Vec<Value> = manifests::read(&args.old, args.max_documents)?
        .into_iter()
        .map(|m| m.object)
        .collect();
    let crds = match &args.crd {
        Some(p) => Some(super::check::load_crds(
            p,
            None,
            mrguard_policy::admission::kube_version::KubeVersion::NEWEST,
        )?),
        None => None,
    };
    let default_ns = args.namespace.clone().unwrap_or_else(|| "default".into());
    let planner = Planner::new(&config, jiff::Timestamp::now())
        .crds(crds.as_ref())
        .username(&args.username)
        .provider_managers(&args.provider_managers);
    let same = |a: &Value, b: &Value| {
        let (x, y) = (identity(a), identity(b));
        group_of(&x.0) == group_of(&y.0) && x.1 == y.1 && x.2 == y.2 && x.3 == y.3
    };
    let mut entries = Vec::new();
    for m in &mut docs {
        // Offline nothing says a kind is namespaced; an old object does.
        let namespaced = !identity(&m.object).2.is_empty()
            || olds.iter().any(|o| {
                let (a, k, ns, n) = identity(o);
                let (b, l, _, p) = identity(&m.object);
                !ns.is_empty() && group_of(&a) == group_of(&b) && k == l && n == p
            });
        if namespaced {
            scope(&mut m.object, true, &default_ns);
        }
    }
    for m in &docs {
        if !is_managed(&m.object) {
            entries.push(Planner::skipped(m, NOT_MR));
            continue;
        }
        let old = olds.iter().find(|o| same(o, &m.object));
        entries.push(planner.apply(m, old)?);
    }
    for t in args.delete.iter().map(|d| parse_delete(d)) {
        let t = t?;
        let o = olds
            .iter()
            .find(|o| names(&t, o, &default_ns))
            .ok_or_else(|| {
                PlanError::DeleteNotFound(t.given.clone(), "no such object in --old".into())
            })?;
        entries.push(planner.delete(o, "--delete")?);
    }
    if let Some(sel) = prune_selector(args)? {
        let applied: Vec<Value> = docs.iter().map(|m| m.object.clone()).collect();
        for o in prune_candidates(&olds, &applied, &sel, &visited_namespaces(&docs)) {
            if !entries
                .iter()
                .any(|e| e.file.is_none() && e.object == label(o))
            {
                entries.push(planner.delete(o, &prune_reason(args))?);
            }
        }
    }
    Ok(Plan::new(entries))
}

const NOT_MR: &str =
    "not a managed resource (spec.forProvider is not an object): mrguard does not plan it";

fn prune_selector(args: &PlanArgs) -> Result<Option<Selector>, PlanError> {
    match (&args.selector, args.prune) {
        (Some(s), true) => Ok(Some(Selector::parse(s)?)),
        _ => Ok(None),
    }
}

fn prune_reason(args: &PlanArgs) -> String {
    format!(
        "pruned by -l {}",
        args.selector.as_deref().unwrap_or_default()
    )
}

/// The live objects of one kind, listed once in every namespace.
async fn list_kind(client: &kube::Client, r: &Resource) -> Result<Vec<Value>, PlanError> {
    let pages = list_values(client.clone(), &r.api, ListParams::default().limit(PAGE));
    let mut pages = std::pin::pin!(pages);
    let mut out = Vec::new();
    while let Some(items) = pages.try_next().await.map_err(|source| PlanError::List {
        resource: r.display(),
        source,
    })? {
        out.extend(items);
    }
    Ok(out)
}

/// Everything read from the cluster for the kinds planned.
#[derive(Default)]
struct Listed {
    /// `plural.group` → the kind's resource and live objects.
    kinds: BTreeMap<String, (Resource, Vec<Value>)>,
    crds: Crds,
    notes: BTreeMap<String, String>,
}

impl Listed {
    async fn ensure(&mut self, client: &kube::Client, r: &Resource) -> Result<(), PlanError> {
        let key = r.display();
        if self.kinds.contains_key(&key) {
            return Ok(());
        }
        let objects = list_kind(client, r).await?;
        // The CRD gives defaults, schema checks and the documented
        // immutable fields; a plan without them would look complete
        // while missing replacements, so only its absence is tolerated.
        let crd_api: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(client.clone());
        match crd_api.get_opt(&key).await {
            Ok(Some(crd)) => {
                let v = serde_json::to_value(&crd).map_err(|e| PlanError::Crd {
                    name: key.clone(),
                    reason: e.to_string(),
                })?;
                if let Err(e) = self.crds.add(&key, &v) {
                    self.notes.insert(
                        key.clone(),
                        format!("planned without the CRD's schema: {e}"),
                    );
                }
            }
            Ok(None) => {
                self.notes.insert(
                    key.clone(),
                    format!("planned without the CRD {key:?}: it does not exist"),
                );
            }
            Err(e) => {
                return Err(PlanError::Crd {
                    name: key,
                    reason: e.to_string(),
                })
            }
        }
        self.kinds.insert(key, (r.clone(), objects));
        Ok(())
    }

    fn find(&self, r: &Resource, ns: &str, name: &str) -> Option<&Value> {
        self.kinds.get(&r.display()).and_then(|(_, objs)| {
            objs.iter().find(|o| {
                let (_, _, n, m) = identity(o);
                n == ns && m == name
            })
        })
    }
}

/// With `--live`: every kind listed once, then planned.
async fn plan_live(args: &PlanArgs, mut docs: Vec<Manifest>) -> Result<Plan, PlanError> {
    let origin = ConfigOrigin::from_flags(
        args.config.as_ref(),
        args.config_from_cluster.config_from_cluster.as_ref(),
    );
    let mut ctx =
        ClusterContext::connect(&args.cluster, args.namespace.as_deref(), &origin).await?;
    let config = ctx.config()?;
    let (client, default_ns) = (ctx.client.clone(), ctx.default_namespace.clone());
    let mut listed = Listed::default();
    // Per manifest: its resource, or why the cluster does not serve it.
    let mut resources: Vec<Option<Result<Resource, String>>> = Vec::new();
    for m in &mut docs {
        if !is_managed(&m.object) {
            resources.push(None);
            continue;
        }
        let (api_version, kind, _, name) = identity(&m.object);
        if name.is_empty() {
            return Err(PlanError::NoName {
                path: m.file.clone(),
                at: m.at.clone(),
            });
        }
        match ctx.discovery.resolve(&client, &api_version, &kind).await {
            Ok(r) => {
                scope(&mut m.object, r.namespaced, &default_ns);
                listed.ensure(&client, &r).await?;
                resources.push(Some(Ok(r)));
            }
            Err(ClusterError::Discovery {
                reason,
                not_served: true,
                ..
            }) => resources.push(Some(Err(format!(
                "no matches for kind {kind:?} in version {api_version:?}: {reason}"
            )))),
            Err(e) => return Err(e.into()),
        }
    }
    let mut deletions: Vec<(Value, String)> = Vec::new();
    for d in &args.delete {
        let t = parse_delete(d)?;
        let r = cluster::resolve(&client, &t.kind, t.group.as_deref()).await?;
        listed.ensure(&client, &r).await?;
        let ns = if r.namespaced {
            t.namespace.clone().unwrap_or_else(|| default_ns.clone())
        } else {
            String::new()
        };
        let o = listed.find(&r, &ns, &t.name).ok_or_else(|| {
            PlanError::DeleteNotFound(
                t.given.clone(),
                format!("{} does not exist", r.object(&ns, &t.name)),
            )
        })?;
        deletions.push((o.clone(), "--delete".into()));
    }
    if let Some(sel) = prune_selector(args)? {
        let applied: Vec<Value> = docs.iter().map(|m| m.object.clone()).collect();
        let namespaces = visited_namespaces(&docs);
        for (_, objects) in listed.kinds.values() {
            for o in prune_candidates(objects, &applied, &sel, &namespaces) {
                if !deletions.iter().any(|(d, _)| identity(d) == identity(o)) {
                    deletions.push((o.clone(), prune_reason(args)));
                }
            }
        }
    }
    // The identities of every listed MR, for external-identity.
    let claimants: Vec<_> = listed
        .kinds
        .values()
        .flat_map(|(r, objs)| {
            objs.iter()
                .filter_map(|o| entry_of(o, &r.api.group, &r.api.kind, &config))
        })
        .collect();
    let fill = |index: &IdentityIndex| {
        for c in &claimants {
            index.upsert(c.clone());
        }
    };
    let crds = (!listed.crds.is_empty()).then_some(&listed.crds);
    let planner = Planner::new(&config, jiff::Timestamp::now())
        .crds(crds)
        .username(&args.username)
        .provider_managers(&args.provider_managers)
        .live_mrs(&fill);
    let mut entries: Vec<Entry> = Vec::new();
    for (m, r) in docs.iter().zip(resources) {
        let e = match r {
            None => Planner::skipped(m, NOT_MR),
            Some(Err(why)) => Planner::rejected(m, why),
            Some(Ok(r)) => {
                let (_, _, ns, name) = identity(&m.object);
                let mut e = planner.apply(m, listed.find(&r, &ns, &name))?;
                if let Some(n) = listed.notes.get(&r.display()) {
                    e.notes.push(n.clone());
                }
                e
            }
        };
        entries.push(e);
    }
    for (o, why) in &deletions {
        entries.push(planner.delete(o, why)?);
    }
    Ok(Plan::new(entries))
}

/// Exit codes: see [`PlanArgs::detailed_exitcode`] and docs/plan.md.
fn exit_code(plan: Option<&Plan>, detailed: bool) -> i32 {
    match (plan, detailed) {
        (None, false) => 2,
        (None, true) => 3,
        (Some(p), _) if p.any_denied() => 1,
        (Some(p), true) if p.any_change() => 2,
        (Some(_), _) => 0,
    }
}

/// Runs the plan; see [`exit_code`].
pub(crate) fn run(args: PlanArgs) -> i32 {
    let mut err = std::io::stderr();
    // Deletions only: no manifest to read.
    let docs = if args.file.is_empty() {
        Ok(Vec::new())
    } else {
        manifests::read(&args.file, args.max_documents)
    };
    let plan = match docs {
        Err(e) => Err(PlanError::from(e)),
        Ok(docs) if args.live => match cluster::runtime("plan") {
            Some(rt) => rt.block_on(plan_live(&args, docs)),
            None => return exit_code(None, args.detailed_exitcode),
        },
        Ok(docs) => plan_offline(&args, docs),
    };
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(err, "mrguard plan: {e}");
            return exit_code(None, args.detailed_exitcode);
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.output {
        PlanOutput::Text => {
            let color = out.is_terminal() && std::env::var_os("NO_COLOR").is_none();
            write!(out, "{}", render_text(&plan, color))
        }
        PlanOutput::Markdown => write!(out, "{}", render_markdown(&plan)),
        PlanOutput::Json => match serde_json::to_string_pretty(&plan) {
            Ok(s) => writeln!(out, "{s}"),
            Err(e) => writeln!(err, "mrguard plan: failed to encode the plan: {e}"),
        },
    };
    if written.is_err() {
        return exit_code(None, args.detailed_exitcode);
    }
    exit_code(Some(&plan), args.detailed_exitcode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_targets_name_kind_group_namespace_and_name() {
        let t = parse_delete("Bucket.s3.aws.m.upbound.io/team-a/logs").unwrap();
        assert_eq!(
            (
                t.kind.as_str(),
                t.group.as_deref(),
                t.namespace.as_deref(),
                t.name.as_str()
            ),
            (
                "Bucket",
                Some("s3.aws.m.upbound.io"),
                Some("team-a"),
                "logs"
            )
        );
        let t = parse_delete("bucket/logs").unwrap();
        assert_eq!((t.group, t.namespace), (None, None));
        for bad in ["Bucket", "a/b/c/d", "/x", "Bucket/", "Bucket//x"] {
            let e = parse_delete(bad).unwrap_err().to_string();
            assert!(e.contains("KIND[.GROUP]/NAME"), "{bad}: {e}");
        }
    }

    #[test]
    fn exit_codes_as_documented() {
        let empty = Plan::new(vec![]);
        assert_eq!(exit_code(None, false), 2);
        assert_eq!(exit_code(None, true), 3);
        assert_eq!(exit_code(Some(&empty), false), 0);
        assert_eq!(exit_code(Some(&empty), true), 0);
    }
}
