//! The live MRs whose external identity can collide with one MR's, for
//! `explain` and `check --live` (docs/rules.md, `external-identity`).
//!
//! Identities meet across the kinds of one folded group: the legacy
//! `s3.aws.upbound.io` Bucket and the namespaced `s3.aws.m.upbound.io`
//! Bucket name one bucket. This finds those kinds through discovery (which
//! every authenticated user may read), lists their MRs in every namespace,
//! and keeps only the index entries (`mrguard_policy::cluster::identity::report`
//! computes them as the replicas' watches do).

use futures::TryStreamExt;
use kube::api::ListParams;
use kube::core::{ApiResource, GroupVersionKind};
use mrguard_policy::admission::config::Config;
use mrguard_policy::cluster::identity::report::entry_of;
use mrguard_policy::cluster::identity::{fold_group, IdentityIndex, IndexedMr};

use crate::kube::api::list_values;

/// Page size of the lists, as the audit's.
const PAGE: u32 = 500;

/// Why the claimants could not be listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimantsError {
    /// Discovery failed.
    #[error("failed to discover the API groups: {0}")]
    Discovery(#[source] kube::Error),
    /// A kind's MRs could not be listed (e.g. RBAC forbids it).
    #[error("failed to list {resource} in all namespaces: {source}")]
    List {
        /// `plural.group`.
        resource: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

/// The listed MRs of every kind that shares one folded group and kind.
#[derive(Debug, Default)]
pub(crate) struct Family {
    /// The kinds listed, as `plural.group`, sorted.
    pub resources: Vec<String>,
    /// One index entry per MR.
    entries: Vec<IndexedMr>,
}

impl Family {
    /// Lists the MRs of `kind` in every served group that folds to
    /// `group`'s folded group.
    pub(crate) async fn list(
        client: &kube::Client,
        config: &Config,
        group: &str,
        kind: &str,
    ) -> Result<Self, ClaimantsError> {
        let folded = fold_group(group);
        let kinds = list_kinds(client, |g| fold_group(g) == folded, kind).await?;
        let mut family = Family::default();
        for k in kinds {
            family.entries.extend(
                k.objects
                    .iter()
                    .filter_map(|v| entry_of(v, &k.group, &k.kind, config)),
            );
            family.resources.push(k.resource);
        }
        family.resources.sort();
        Ok(family)
    }

    /// Records every listed MR in `index`.
    pub(crate) fn fill(&self, index: &IdentityIndex) {
        for mr in &self.entries {
            index.upsert(mr.clone());
        }
    }
}

/// The MRs of one served kind, listed in every namespace.
pub(crate) struct ListedKind {
    /// `plural.group`.
    pub(crate) resource: String,
    /// The kind's group.
    pub(crate) group: String,
    /// The kind.
    pub(crate) kind: String,
    /// Every object.
    pub(crate) objects: Vec<serde_json::Value>,
}

/// Lists every object of the served kinds named `kind` in the groups
/// `in_family` accepts.
pub(crate) async fn list_kinds(
    client: &kube::Client,
    in_family: impl Fn(&str) -> bool,
    kind: &str,
) -> Result<Vec<ListedKind>, ClaimantsError> {
    let mut out = Vec::new();
    for ar in colliding_kinds(client, in_family, kind).await? {
        let resource = format!("{}.{}", ar.plural, ar.group);
        let pages = list_values(client.clone(), &ar, ListParams::default().limit(PAGE));
        let mut pages = std::pin::pin!(pages);
        let mut objects = Vec::new();
        while let Some(items) = pages
            .try_next()
            .await
            .map_err(|source| ClaimantsError::List {
                resource: resource.clone(),
                source,
            })?
        {
            objects.extend(items);
        }
        out.push(ListedKind {
            resource,
            group: ar.group,
            kind: ar.kind,
            objects,
        });
    }
    Ok(out)
}

/// The served kinds named `kind` in the groups `in_family` accepts: the
/// legacy and the `.m.` namespaced kind of one provider family.
pub(crate) async fn colliding_kinds(
    client: &kube::Client,
    in_family: impl Fn(&str) -> bool,
    kind: &str,
) -> Result<Vec<ApiResource>, ClaimantsError> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(ClaimantsError::Discovery)?;
    let mut out = Vec::new();
    for g in groups.groups.iter().filter(|g| in_family(&g.name)) {
        let Some(gv) = g
            .preferred_version
            .as_ref()
            .or(g.versions.first())
            .map(|v| v.group_version.clone())
        else {
            continue;
        };
        let resources = client
            .list_api_group_resources(&gv)
            .await
            .map_err(ClaimantsError::Discovery)?;
        let version = gv.rsplit_once('/').map_or(gv.as_str(), |(_, v)| v);
        for r in resources
            .resources
            .iter()
            .filter(|r| r.kind == kind && !r.name.contains('/'))
        {
            out.push(ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&g.name, version, kind),
                &r.name,
            ));
        }
    }
    Ok(out)
}
