//! Every replica's watch on the admission policies its leader keeps in the
//! API server (`--in-process auto`, docs/in-process.md), and what the
//! webhooks judge with while they are in force.
//!
//! A replica turns a rule off in its webhooks only for the MRs a live
//! policy enforces it for, and only while that policy and its binding are
//! there, labelled as this release's, with the spec hash this replica's own
//! configuration plans: a policy not yet written, one another owner holds,
//! or a configuration the leader has not caught up with leaves the rule in
//! the webhook (`mrguard_policy::commands::export::in_process`).

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{select_all, BoxStream};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::admission::kube_version::KubeVersion;
use mrguard_policy::commands::export::in_process::{self, LiveObject, Owner, WebhookConditions};
use tokio::sync::watch;

use crate::kube::reflect::{Missing, Reflected};
use crate::kube::retry::{backoff_watcher, watch_config};
use crate::live_config::ConfigStore;
use crate::metrics::controller::ControllerMetrics;

/// The API resource of one of [`in_process::KINDS`].
pub(crate) fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What the watches last saw: this release's live policies, each with its
/// resourceVersion, and the matchConditions the webhooks get meanwhile.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LivePolicies {
    /// Every listed kind has listed once.
    pub(crate) synced: bool,
    pub(crate) objects: Vec<(LiveObject, Option<String>)>,
    pub(crate) conditions: WebhookConditions,
}

/// Keeps the admission configuration of `config` equal to the
/// configuration less what the live policies enforce, and publishes what it
/// saw to the leader; replans when the configuration reloads, and every
/// `RECHECK` (a staged action or an exception that expires changes the
/// plan).
pub(crate) async fn run(
    client: kube::Client,
    server: KubeVersion,
    owner: Owner,
    config: Arc<ConfigStore>,
    metrics: Arc<ControllerMetrics>,
    seen: watch::Sender<LivePolicies>,
) {
    const PURPOSE: &str = "mrguard's in-process admission policies";
    const RECHECK: Duration = Duration::from_secs(60);
    let kinds = in_process::served_kinds(server);
    let mut sources: Vec<Reflected<DynamicObject>> = Vec::new();
    let mut streams: Vec<BoxStream<'static, (usize, _)>> = Vec::new();
    for (i, (kind, plural)) in kinds.iter().enumerate() {
        let ar = resource(kind, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let stream = backoff_watcher(watcher(
            api,
            watch_config().labels(&in_process::selector(&owner.name)),
        ))
        .map(move |e| (i, e))
        .boxed();
        streams.push(stream);
        sources.push(Reflected::new(ar, plural, PURPOSE, Missing::Wait));
    }
    let mut events = select_all(streams);
    let mut reloads = config.subscribe();
    let mut recheck = tokio::time::interval(RECHECK);
    loop {
        tokio::select! {
            Some((i, e)) = events.next() => {
                if !sources[i].apply(e, Some(&metrics)) {
                    continue;
                }
            }
            Ok(()) = reloads.changed() => {}
            _ = recheck.tick() => {}
            else => return,
        }
        if !sources.iter().all(Reflected::synced) {
            continue;
        }
        let objects: Vec<(LiveObject, Option<String>)> = sources
            .iter()
            .zip(&kinds)
            .flat_map(|(s, (kind, _))| s.store.state().into_iter().map(move |o| (*kind, o)))
            .filter_map(|(kind, o)| {
                let rv = o.metadata.resource_version.clone();
                let mut v = serde_json::to_value(&*o).ok()?;
                // Items of a list carry no type.
                v["kind"] = kind.into();
                Some((LiveObject::of(&v), rv))
            })
            .collect();
        let base = config.load();
        let plan = match in_process::plan(&base, jiff::Timestamp::now(), server, &owner) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("{e}; the webhooks keep every rule");
                config.set_admission(&base, None);
                continue;
            }
        };
        let live: Vec<LiveObject> = objects.iter().map(|(l, _)| l.clone()).collect();
        let in_force = in_process::in_force(&plan, &live, &owner.name);
        let admission =
            (!in_force.rules.is_empty()).then(|| in_process::webhook_config(&base, &in_force));
        let conditions = admission
            .as_ref()
            .map(|a| in_process::webhook_conditions(a, &in_force))
            .unwrap_or_default();
        if config.set_admission(&base, admission) {
            tracing::debug!(
                rules = in_force.rules.len(),
                mutating = in_force.mutating,
                "in-process policies in force"
            );
        }
        // Published only when it changed: the leader's pass and the webhook
        // writer wake on it, and a recheck that finds the same sends nothing.
        let next = LivePolicies {
            synced: true,
            objects,
            conditions,
        };
        seen.send_if_modified(|current| {
            let changed = *current != next;
            if changed {
                *current = next;
            }
            changed
        });
    }
}
