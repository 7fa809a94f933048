//! The leader keeps mrguard's admission policies in the API server
//! (`--in-process auto`, docs/in-process.md): it writes the plan of
//! `mrguard_policy::commands::export::in_process` for the configuration in
//! force, rewrites it when the configuration reloads or the plan changes
//! with time, deletes what leaves it, and puts back a hand-edited policy
//! with an Event. With `--in-process off` it deletes what it wrote, where
//! it still may.
//!
//! Each object is written whole (create, or replace at the live
//! resourceVersion): a replace that changes nothing stores nothing, so the
//! resourceVersion moving on a write of the same spec hash is what tells a
//! hand edit.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::ResourceExt;
use mrguard_policy::admission::kube_version::KubeVersion;
use mrguard_policy::commands::export::in_process::{self, LiveObject, Owner, Step};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::controller::replica::in_process::{resource, LivePolicies};
use crate::live_config::ConfigStore;

/// The Event reason of a hand edit put back.
pub(crate) const POLICY_RESTORED: &str = "PolicyRestored";
/// A burst of changes (a reload, the watch of our own writes) settles
/// before the next pass.
const SETTLE: Duration = Duration::from_millis(300);
/// A pass that failed is tried again after this long.
const RETRY: Duration = Duration::from_secs(5);

/// What the leader needs to keep the policies.
pub(crate) struct Keeper {
    pub(crate) client: kube::Client,
    pub(crate) server: KubeVersion,
    /// The release: [`in_process::OWNER_LABEL`]'s value and its selectors.
    pub(crate) owner: Owner,
    /// The ClusterRole the policies name as their owner (`--in-process-owner`).
    pub(crate) owner_role: Option<String>,
    pub(crate) config: Arc<ConfigStore>,
    pub(crate) recorder: Recorder,
}

/// The Event reporter of the policy keeper.
pub(crate) fn reporter(instance: &str) -> Reporter {
    Reporter {
        controller: crate::controller::leader::leak_events::REPORTING_CONTROLLER.into(),
        instance: Some(instance.chars().take(128).collect()),
    }
}

impl Keeper {
    /// Runs until aborted: one pass whenever the configuration, the live
    /// policies or the time of the plan's next change move.
    pub(crate) async fn run(self, mut seen: watch::Receiver<LivePolicies>) {
        let mut reloads = self.config.subscribe();
        let reference = self.owner_reference().await;
        loop {
            let live = seen.borrow_and_update().clone();
            let mut next = None;
            if live.synced {
                match self.pass(&live, reference.as_ref()).await {
                    Ok(changes_at) => next = changes_at,
                    Err(e) => {
                        tracing::warn!("failed to keep the in-process policies: {e}; retrying");
                        next = Some(jiff::Timestamp::now() + RETRY);
                    }
                }
            }
            let wait = next.map_or(Duration::from_secs(3600), |t| {
                Duration::try_from(t.duration_since(jiff::Timestamp::now()))
                    .unwrap_or_default()
                    .max(Duration::from_millis(100))
            });
            tokio::select! {
                r = seen.changed() => if r.is_err() { return },
                Ok(()) = reloads.changed() => {}
                () = tokio::time::sleep(wait) => {}
            }
            tokio::time::sleep(SETTLE).await;
        }
    }

    /// The ClusterRole the policies name as their owner, read once.
    async fn owner_reference(&self) -> Option<Value> {
        let name = self.owner_role.as_ref()?;
        match Api::<ClusterRole>::all(self.client.clone()).get(name).await {
            Ok(role) => Some(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "name": name,
                "uid": role.uid().unwrap_or_default(),
            })),
            Err(e) => {
                tracing::warn!(
                    "failed to read ClusterRole {name}, the owner of the in-process policies: {e}; \
                     they are written without an owner, so only the leader removes them"
                );
                None
            }
        }
    }

    /// One pass: the plan, the steps to it, each step; returns when to
    /// plan again.
    async fn pass(
        &self,
        live: &LivePolicies,
        reference: Option<&Value>,
    ) -> Result<Option<jiff::Timestamp>, kube::Error> {
        let config = self.config.load();
        let owner = Owner {
            reference: reference.cloned(),
            ..self.owner.clone()
        };
        let plan = match in_process::plan(&config, jiff::Timestamp::now(), self.server, &owner) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("{e}; the in-process policies are left as they are");
                return Ok(None);
            }
        };
        let objects: Vec<LiveObject> = live.objects.iter().map(|(l, _)| l.clone()).collect();
        let version_of = |kind: &str, name: &str| {
            live.objects
                .iter()
                .find(|(l, _)| l.kind == kind && l.name == name)
                .and_then(|(_, rv)| rv.clone())
        };
        for step in in_process::steps(&plan, &objects, &owner.name) {
            match step {
                Step::Create(o) => self.create(o).await?,
                Step::Replace {
                    mut object,
                    same_hash,
                } => {
                    let (kind, name) = kind_name(&object);
                    let before = version_of(&kind, &name);
                    object["metadata"]["resourceVersion"] = json!(before);
                    let after = self
                        .api(&kind)
                        .replace(&name, &PostParams::default(), &dynamic(object)?)
                        .await?;
                    if same_hash && after.metadata.resource_version != before {
                        tracing::warn!(
                            kind,
                            name,
                            "an in-process policy was edited by hand; put back"
                        );
                        self.restored(&kind, &name, after.uid()).await;
                    }
                }
                Step::Delete { kind, name } => {
                    match self
                        .api(&kind)
                        .delete(&name, &DeleteParams::default())
                        .await
                    {
                        Ok(_) => tracing::info!(
                            kind,
                            name,
                            "in-process policy deleted: its rule left the plan"
                        ),
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
                Step::NotOwned { kind, name } => {
                    tracing::warn!(kind, name, "not written: a policy of this name exists without label {}={}; the webhook keeps its rule", in_process::OWNER_LABEL, owner.name);
                }
            }
        }
        Ok(plan.changes_at)
    }

    async fn create(&self, object: Value) -> Result<(), kube::Error> {
        let (kind, name) = kind_name(&object);
        match self
            .api(&kind)
            .create(&PostParams::default(), &dynamic(object)?)
            .await
        {
            Ok(_) => {
                tracing::info!(kind, name, "in-process policy written");
                Ok(())
            }
            // Another owner's, or ours before the watch saw it: the next
            // pass, from the watch, tells which.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn api(&self, kind: &str) -> Api<DynamicObject> {
        let plural = in_process::KINDS
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or("", |(_, p)| p);
        Api::all_with(self.client.clone(), &resource(kind, plural))
    }

    async fn restored(&self, kind: &str, name: &str, uid: Option<String>) {
        let reference = ObjectReference {
            api_version: Some("admissionregistration.k8s.io/v1".into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
            uid,
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: POLICY_RESTORED.into(),
            note: Some(format!(
                "{kind} {name} was changed by hand; mrguard keeps it as its configuration says (--in-process auto): change the configuration instead, or set admission.inProcess: off"
            )),
            action: "Restore".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!("failed to write the {POLICY_RESTORED} Event about {kind} {name}: {e}");
        }
    }
}

fn kind_name(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn dynamic(o: Value) -> Result<DynamicObject, kube::Error> {
    serde_json::from_value(o).map_err(kube::Error::SerdeError)
}

/// `--in-process off`: deletes every policy labelled as `owner`'s that the
/// leader may still list and delete. Without those rights (the chart
/// grants none in this mode) the garbage collector has removed them with
/// their owning ClusterRole.
pub(crate) async fn remove_all(client: kube::Client, server: KubeVersion, owner: String) {
    let mut removed = 0;
    for (kind, plural) in in_process::served_kinds(server) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        let list = match api
            .list(&ListParams::default().labels(&in_process::selector(&owner)))
            .await
        {
            Ok(l) => l,
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                tracing::debug!(
                    kind,
                    "in-process policies not listed ({}); nothing to remove",
                    e.code
                );
                continue;
            }
            Err(e) => {
                tracing::warn!(kind, "failed to list in-process policies to remove: {e}");
                continue;
            }
        };
        for o in list {
            let name = o.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => removed += 1,
                Err(e) => tracing::warn!(kind, name, "failed to delete an in-process policy: {e}"),
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "in-process mode off: the policies written before are deleted"
        );
    }
}
