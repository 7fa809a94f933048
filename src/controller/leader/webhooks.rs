//! `caBundle` and `rules` of mrguard's two webhook configurations.
//!
//! The chart creates both configurations; the controller only patches them,
//! with server-side apply under the field manager `mrguard`, from a watch,
//! so drift (a `helm upgrade` resetting the caBundle, a hand edit) is
//! repaired within seconds. A deleted configuration is never recreated:
//! deleting it is the documented emergency exit when the webhook blocks a
//! cluster. Every apply carries the observed `resourceVersion`, so it can
//! neither overwrite a newer version nor create a configuration.
//!
//! Quiet at scale: changes are written once a burst settles (`QUIET`,
//! `MAX_DELAY`), and watch events older than our own last write are not
//! taken for the latest state (`written`), so the controller never
//! conflicts with itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::ByteString;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::utils::Backoff as _;
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::commands::export::in_process::{self, WebhookConditions};
use rustls_pki_types::CertificateDer;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::controller::replica::coverage::{Coverage, MUTATE_OPERATIONS, VALIDATE_OPERATIONS};
use crate::controller::replica::in_process::LivePolicies;
use crate::controller::replica::secret::SecretView;
use crate::kube::api::{api_err, until_due, Backoff, KubeError, FIELD_MANAGER};
use crate::kube::retry::{backoff_on_failure, ErrorOnce};
use crate::metrics::controller::ControllerMetrics;

/// The webhook inside the MutatingWebhookConfiguration whose rules we keep.
pub(crate) const MUTATE_WEBHOOK: &str = "mutate.mrguard.io";
/// The webhook inside the ValidatingWebhookConfiguration whose rules we keep.
pub(crate) const VALIDATE_WEBHOOK: &str = "validate.mrguard.io";

/// Conflicts in a row retried at once, after reading the latest version.
const MAX_QUICK_CONFLICTS: u32 = 3;

/// Changes are written once none came for this long...
const QUIET: std::time::Duration = std::time::Duration::from_millis(500);
/// ...or this long after the first of a burst: 1,000 CRDs arriving within
/// a minute give a write every few seconds, not one per CRD.
const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(3);
/// How long events older than our last write are skipped at most.
const WRITTEN_FOR: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebhookNames {
    pub(crate) mutating: String,
    pub(crate) validating: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ConfigKind {
    Mutating,
    Validating,
}

impl ConfigKind {
    pub(crate) const ALL: [ConfigKind; 2] = [ConfigKind::Mutating, ConfigKind::Validating];

    pub(crate) fn kind(self) -> &'static str {
        match self {
            ConfigKind::Mutating => "MutatingWebhookConfiguration",
            ConfigKind::Validating => "ValidatingWebhookConfiguration",
        }
    }

    fn api_resource(self) -> ApiResource {
        match self {
            ConfigKind::Mutating => ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            ConfigKind::Validating => ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        }
    }

    pub(crate) fn resource(self) -> &'static str {
        match self {
            ConfigKind::Mutating => "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            ConfigKind::Validating => {
                "validatingwebhookconfigurations.admissionregistration.k8s.io"
            }
        }
    }

    /// The webhook whose rules are managed.
    pub(crate) fn webhook(self) -> &'static str {
        match self {
            ConfigKind::Mutating => MUTATE_WEBHOOK,
            ConfigKind::Validating => VALIDATE_WEBHOOK,
        }
    }

    pub(crate) fn operations(self) -> &'static [&'static str] {
        match self {
            ConfigKind::Mutating => MUTATE_OPERATIONS,
            ConfigKind::Validating => VALIDATE_OPERATIONS,
        }
    }
}

/// What the controller manages in one configuration, as last observed.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ObservedConfig {
    pub(crate) name: String,
    pub(crate) resource_version: Option<String>,
    pub(crate) webhooks: Vec<ObservedWebhook>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ObservedWebhook {
    pub(crate) name: String,
    pub(crate) ca_bundle: Vec<u8>,
    pub(crate) rules: Vec<RuleWithOperations>,
    /// The expression of the in-process matchCondition
    /// ([`in_process::CONDITION`]), if the webhook has one.
    pub(crate) in_process: Option<String>,
}

/// The parts of one webhook the controller reads; the rest is skipped
/// while decoding.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookSummary {
    name: String,
    #[serde(default)]
    client_config: ClientConfigSummary,
    #[serde(default)]
    rules: Option<Vec<RuleWithOperations>>,
    #[serde(default)]
    match_conditions: Option<Vec<MatchCondition>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientConfigSummary {
    #[serde(default)]
    ca_bundle: Option<ByteString>,
}

/// Both kinds of configuration have the same shape, so one dynamic type
/// serves both, named from k8s-openapi's types. There are two objects, so
/// memory is no reason for a leaner view.
impl From<&DynamicObject> for ObservedConfig {
    fn from(c: &DynamicObject) -> Self {
        // A webhook the view cannot read counts as none: the API server
        // validated the configuration, so this does not happen.
        let webhooks = c
            .data
            .get("webhooks")
            .and_then(|w| Option::<Vec<WebhookSummary>>::deserialize(w).ok())
            .flatten()
            .unwrap_or_default();
        Self {
            name: c.metadata.name.clone().unwrap_or_default(),
            resource_version: c.metadata.resource_version.clone(),
            webhooks: webhooks
                .into_iter()
                .map(|w| ObservedWebhook {
                    name: w.name,
                    ca_bundle: w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default(),
                    rules: w.rules.unwrap_or_default(),
                    in_process: w
                        .match_conditions
                        .unwrap_or_default()
                        .into_iter()
                        .find(|c| c.name == in_process::CONDITION)
                        .map(|c| c.expression),
                })
                .collect(),
        }
    }
}

type CanonRule = (Vec<String>, Vec<String>, Vec<String>, Vec<String>, String);

fn canon(rules: &[RuleWithOperations]) -> Vec<CanonRule> {
    let sorted = |v: &Option<Vec<String>>| {
        let mut v = v.clone().unwrap_or_default();
        v.sort();
        v
    };
    let mut out: Vec<CanonRule> = rules
        .iter()
        .map(|r| {
            (
                sorted(&r.api_groups),
                sorted(&r.api_versions),
                sorted(&r.operations),
                sorted(&r.resources),
                // The API server defaults an absent scope to "*".
                r.scope.clone().unwrap_or_else(|| "*".into()),
            )
        })
        .collect();
    out.sort();
    out
}

/// The server-side apply body that brings `observed` to the desired state,
/// or `None` when it is already there. `condition` is the in-process
/// matchCondition of the MR webhook: owned by this field manager, so
/// leaving it out of an apply removes it, and the chart's conditions stay.
pub(crate) fn desired_patch(
    kind: ConfigKind,
    observed: &ObservedConfig,
    bundle: &[u8],
    rules: &[RuleWithOperations],
    condition: Option<&str>,
) -> Option<Value> {
    let want = canon(rules);
    let in_sync = observed.webhooks.iter().all(|w| {
        w.ca_bundle == bundle
            && (w.name != kind.webhook()
                || (canon(&w.rules) == want && w.in_process.as_deref() == condition))
    });
    if in_sync {
        return None;
    }
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(bundle);
    let webhooks: Vec<Value> = observed
        .webhooks
        .iter()
        .map(|w| {
            let mut entry = json!({"name": w.name, "clientConfig": {"caBundle": b64}});
            if w.name == kind.webhook() {
                entry["rules"] = json!(rules);
                if let Some(c) = condition {
                    entry["matchConditions"] =
                        json!([{"name": in_process::CONDITION, "expression": c}]);
                }
            }
            entry
        })
        .collect();
    let mut metadata = json!({"name": observed.name});
    if let Some(rv) = &observed.resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    Some(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind.kind(),
        "metadata": metadata,
        "webhooks": webhooks,
    }))
}

/// Access to both configurations.
#[derive(Clone)]
pub(crate) struct WebhookApi {
    client: kube::Client,
    pub(crate) names: WebhookNames,
}

impl WebhookApi {
    pub(crate) fn new(client: kube::Client, names: WebhookNames) -> Self {
        Self { client, names }
    }

    pub(crate) fn name(&self, kind: ConfigKind) -> &str {
        match kind {
            ConfigKind::Mutating => &self.names.mutating,
            ConfigKind::Validating => &self.names.validating,
        }
    }

    fn api(&self, kind: ConfigKind) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &kind.api_resource())
    }

    pub(crate) async fn get(&self, kind: ConfigKind) -> Result<Option<ObservedConfig>, KubeError> {
        let name = self.name(kind);
        let found =
            self.api(kind)
                .get_opt(name)
                .await
                .map_err(api_err("get", kind.resource(), name))?;
        Ok(found.as_ref().map(ObservedConfig::from))
    }

    pub(crate) async fn apply(
        &self,
        kind: ConfigKind,
        body: &Value,
    ) -> Result<ObservedConfig, KubeError> {
        let name = self.name(kind);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = self
            .api(kind)
            .patch(name, &params, &Patch::Apply(body))
            .await
            .map_err(api_err("patch", kind.resource(), name))?;
        Ok(ObservedConfig::from(&applied))
    }

    /// The configuration as it changes; `None` while it does not exist.
    fn watch(&self, kind: ConfigKind) -> impl futures::Stream<Item = Update> + Send + 'static {
        backoff_on_failure(
            watcher::watch_object(self.api(kind), self.name(kind)),
            Result::is_ok,
            Result::is_err,
        )
        .map(move |r| match r {
            Ok(o) => Update::Seen(kind, o.as_ref().map(ObservedConfig::from)),
            Err(e) => Update::Failed(kind, e),
        })
    }

    /// Whether every webhook of both configurations trusts every CA in
    /// `cas`. A deleted configuration calls nobody, so it does not hold a
    /// rotation back.
    pub(crate) async fn bundle_published(
        &self,
        cas: &[CertificateDer<'static>],
    ) -> Result<bool, KubeError> {
        for kind in ConfigKind::ALL {
            let Some(observed) = self.get(kind).await? else {
                continue;
            };
            for w in &observed.webhooks {
                let trusted = crate::pki::parse_certs(&w.ca_bundle, "caBundle").unwrap_or_default();
                if !cas.iter().all(|ca| trusted.contains(ca)) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// Brings one configuration in line; returns the new state when it wrote.
pub(crate) async fn reconcile(
    api: &WebhookApi,
    kind: ConfigKind,
    observed: Option<&ObservedConfig>,
    bundle: &[u8],
    coverage: &Coverage,
    conditions: &WebhookConditions,
) -> Result<Option<ObservedConfig>, KubeError> {
    let Some(observed) = observed else {
        // Deleted or never installed: the emergency exit. Never recreate.
        return Ok(None);
    };
    let rules = coverage.rules(kind.operations());
    let condition = match kind {
        ConfigKind::Mutating => conditions.mutating.as_deref(),
        ConfigKind::Validating => conditions.validating.as_deref(),
    };
    match desired_patch(kind, observed, bundle, &rules, condition) {
        None => Ok(None),
        Some(body) => api.apply(kind, &body).await.map(Some),
    }
}

enum Update {
    Seen(ConfigKind, Option<ObservedConfig>),
    Failed(ConfigKind, watcher::Error),
}

/// Watches both configurations and keeps them in line with the Secret's CA
/// bundle and the MR coverage. Runs only on the Lease holder.
pub(crate) async fn run(
    api: WebhookApi,
    mut secret: watch::Receiver<SecretView>,
    mut coverage: watch::Receiver<Option<Arc<Coverage>>>,
    mut in_process: watch::Receiver<LivePolicies>,
    metrics: Arc<ControllerMetrics>,
) {
    let mut updates =
        futures::stream::select_all(ConfigKind::ALL.map(|kind| api.watch(kind).boxed()));
    let mut writer = WriterState::default();
    let mut in_process_open = true;
    let mut watch_errors: BTreeMap<ConfigKind, ErrorOnce> = BTreeMap::new();
    let mut backoff = Backoff::default();
    // When to write next: after a burst of changes, or a retry.
    let mut due: Option<tokio::time::Instant> = None;
    let mut burst: Option<tokio::time::Instant> = None;
    // Not before this: the backoff after a failure.
    let mut not_before: Option<tokio::time::Instant> = None;
    loop {
        let at = due;
        tokio::select! {
            u = updates.next() => match u {
                Some(Update::Seen(kind, observed)) => {
                    watch_errors.entry(kind).or_default().ok(kind.kind());
                    if let (Some((rv, at)), Some(o)) = (writer.written.get(&kind), &observed) {
                        if o.resource_version.as_ref() != Some(rv) && at.elapsed() < WRITTEN_FOR {
                            tracing::debug!(kind = kind.kind(), "skipping an event older than our last write");
                            continue;
                        }
                        writer.written.remove(&kind);
                    }
                    let was_present = writer.observed.get(&kind).is_some_and(Option::is_some);
                    if observed.is_none() && was_present {
                        tracing::warn!(
                            configuration = api.name(kind),
                            kind = kind.kind(),
                            "webhook configuration deleted; mrguard will not recreate it (emergency exit). \
                             Reinstall or upgrade the chart to restore it"
                        );
                    }
                    metrics
                        .webhook_configuration_present
                        .with_label_values(&[kind.kind()])
                        .set(i64::from(observed.is_some()));
                    writer.observed.insert(kind, observed);
                }
                Some(Update::Failed(kind, e)) => {
                    // The watch lists again: what it delivers next is current.
                    writer.written.remove(&kind);
                    let e = KubeError::watch(kind.resource(), api.name(kind).to_string(), e);
                    watch_errors.entry(kind).or_default().failed(
                        &e,
                        Some(&metrics),
                        "failed to watch a webhook configuration; retrying with backoff",
                    );
                    continue;
                }
                None => return,
            },
            r = secret.changed() => if r.is_err() { return },
            r = coverage.changed() => if r.is_err() { return },
            // Without --in-process auto nothing ever sends: closed, the
            // conditions stay none.
            r = in_process.changed(), if in_process_open => {
                if r.is_err() {
                    in_process_open = false;
                    continue;
                }
            }
            _ = until_due(at) => {
                due = None;
                burst = None;
                let conditions = in_process.borrow().conditions.clone();
                if let Err(()) = writer.write_all(&api, &secret, &coverage, &conditions, &metrics).await {
                    let at = tokio::time::Instant::now() + backoff.next_delay();
                    not_before = Some(at);
                    due = Some(at);
                } else if writer.conflicts > 0 {
                    due = Some(tokio::time::Instant::now());
                } else {
                    not_before = None;
                    backoff.reset();
                }
                continue;
            }
        }
        // Something changed: write once the burst settles.
        let now = tokio::time::Instant::now();
        let first = *burst.get_or_insert(now);
        let mut at = (now + QUIET).min(first + MAX_DELAY);
        if let Some(floor) = not_before {
            at = at.max(floor);
        }
        due = Some(due.map_or(at, |d| d.min(at)));
    }
}

/// What the writer knows of both configurations between writes.
#[derive(Default)]
struct WriterState {
    /// Each configuration as last seen. None: not seen yet; Some(None):
    /// absent.
    observed: BTreeMap<ConfigKind, Option<ObservedConfig>>,
    /// The version our last apply made, until the watch delivers it: the
    /// events before it are older than what `observed` holds (they lag
    /// while coverage changes fast), and taking one for the latest made the
    /// next apply conflict with our own write.
    /// Bounded in time: should that event never come (a write that changed
    /// nothing keeps its version), later ones are taken after all.
    written: BTreeMap<ConfigKind, (String, tokio::time::Instant)>,
    /// Configurations without a webhook of their name, warned about once.
    missing_webhook_warned: BTreeMap<ConfigKind, ()>,
    /// Conflicts in a row answered by reading the latest version at once.
    conflicts: u32,
}

impl WriterState {
    /// Brings both configurations in line once. `Err` means retry with backoff;
    /// `conflicts` above zero means the latest version was read after a
    /// conflict, to apply again at once.
    async fn write_all(
        &mut self,
        api: &WebhookApi,
        secret: &watch::Receiver<SecretView>,
        coverage: &watch::Receiver<Option<Arc<Coverage>>>,
        conditions: &WebhookConditions,
        metrics: &ControllerMetrics,
    ) -> Result<(), ()> {
        let Some(bundle) = secret.borrow().bundle.clone() else {
            return Ok(());
        };
        let Some(cov) = coverage.borrow().clone() else {
            return Ok(());
        };
        let (mut failed, mut again) = (false, false);
        for kind in ConfigKind::ALL {
            let Some(Some(observed)) = self.observed.get(&kind) else {
                continue;
            };
            if !observed.webhooks.iter().any(|w| w.name == kind.webhook())
                && self.missing_webhook_warned.insert(kind, ()).is_none()
            {
                tracing::warn!(
                    configuration = %observed.name,
                    webhook = kind.webhook(),
                    "the webhook configuration has no webhook of this name; only its caBundle is kept"
                );
            }
            match reconcile(api, kind, Some(observed), &bundle, &cov, conditions).await {
                Ok(Some(new)) => {
                    tracing::info!(
                        configuration = %new.name,
                        kind = kind.kind(),
                        kinds = cov.len(),
                        "updated caBundle and rules"
                    );
                    metrics
                        .webhook_updates
                        .with_label_values(&[kind.kind()])
                        .inc();
                    match &new.resource_version {
                        Some(rv) if Some(rv) != observed.resource_version.as_ref() => {
                            self.written
                                .insert(kind, (rv.clone(), tokio::time::Instant::now()));
                        }
                        _ => {}
                    }
                    self.observed.insert(kind, Some(new));
                }
                Ok(None) => {}
                // Someone else wrote in between (our own writes no longer
                // conflict: see `written`). Read the latest and apply again at
                // once; a conflict that keeps coming backs off.
                Err(e) if e.is_conflict() && self.conflicts < MAX_QUICK_CONFLICTS => {
                    self.conflicts += 1;
                    e.count(Some(metrics));
                    tracing::debug!(error = %e, "conflict; reading the latest version");
                    match api.get(kind).await {
                        Ok(latest) => {
                            self.written.remove(&kind);
                            self.observed.insert(kind, latest);
                            again = true;
                        }
                        Err(e) => {
                            e.log(
                                Some(metrics),
                                "failed to read a webhook configuration; retrying",
                            );
                            failed = true;
                        }
                    }
                }
                Err(e) => {
                    e.log(
                        Some(metrics),
                        "failed to update a webhook configuration; retrying",
                    );
                    failed = true;
                }
            }
        }
        if failed {
            return Err(());
        }
        if !again {
            self.conflicts = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A configuration as the chart creates it, with `bundle` and `rules`
    /// (none when empty) and the fields a webhook must have.
    pub(crate) fn config_json(
        kind: ConfigKind,
        name: &str,
        bundle: &[u8],
        rules: Value,
        rv: &str,
    ) -> Value {
        let mut v = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind.kind(),
            "metadata": {"name": name, "resourceVersion": rv},
            "webhooks": [{"admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                "name": kind.webhook(), "sideEffects": "None"}],
        });
        let w = &mut v["webhooks"][0];
        w["clientConfig"] = json!({"service": {"name": "mrguard", "namespace": "crossplane-system",
            "path": if kind == ConfigKind::Mutating { "/mutate" } else { "/validate" }}});
        if !bundle.is_empty() {
            use base64::Engine;
            w["clientConfig"]["caBundle"] =
                json!(base64::engine::general_purpose::STANDARD.encode(bundle));
        }
        w["rules"] = rules;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::config_json;
    use super::*;
    use crate::controller::replica::coverage::tests::{fixture_crds, summaries};
    use crate::kube::mock::{self, list, status, Reply};
    use std::time::Duration;

    fn b64(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    fn coverage() -> Coverage {
        Coverage::from_crds(&summaries(&fixture_crds()))
    }

    fn names() -> WebhookNames {
        WebhookNames {
            mutating: "mrguard".into(),
            validating: "mrguard".into(),
        }
    }

    /// The in-process condition is added, kept, and removed by an apply
    /// that leaves it out; the chart's own conditions are not in the body.
    #[test]
    fn the_in_process_condition_is_set_and_taken_back() {
        let cov = coverage();
        let kind = ConfigKind::Validating;
        let rules = cov.rules(kind.operations());
        let mut v = config_json(kind, "mrguard", b"CA", json!(rules), "1");
        v["webhooks"][0]["matchConditions"] =
            json!([{"name": "is-managed-resource", "expression": "true"}]);
        let observed = |v: &Value| {
            ObservedConfig::from(&serde_json::from_value::<DynamicObject>(v.clone()).unwrap())
        };
        let ops = "request.operation in ['CREATE', 'UPDATE']";
        let p = desired_patch(kind, &observed(&v), b"CA", &rules, Some(ops)).unwrap();
        assert_eq!(
            p["webhooks"][0]["matchConditions"],
            json!([{"name": in_process::CONDITION, "expression": ops}])
        );
        v["webhooks"][0]["matchConditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": in_process::CONDITION, "expression": ops}));
        assert_eq!(
            desired_patch(kind, &observed(&v), b"CA", &rules, Some(ops)),
            None
        );
        let p = desired_patch(kind, &observed(&v), b"CA", &rules, None).unwrap();
        assert!(p["webhooks"][0].get("matchConditions").is_none(), "{p}");
    }

    #[test]
    fn in_sync_configurations_need_no_patch() {
        let cov = coverage();
        for kind in ConfigKind::ALL {
            let rules = cov.rules(kind.operations());
            let v = config_json(kind, "mrguard", b"CA", json!(rules), "1");
            let observed =
                ObservedConfig::from(&serde_json::from_value::<DynamicObject>(v).unwrap());
            assert_eq!(desired_patch(kind, &observed, b"CA", &rules, None), None);
            // Same rules in another order are still in sync.
            let mut reversed = rules.clone();
            reversed.reverse();
            assert_eq!(desired_patch(kind, &observed, b"CA", &reversed, None), None);
            // A different bundle is drift.
            let p = desired_patch(kind, &observed, b"NEW", &rules, None).unwrap();
            assert_eq!(p["webhooks"][0]["clientConfig"]["caBundle"], b64(b"NEW"));
            assert_eq!(p["metadata"]["resourceVersion"], "1");
            assert_eq!(p["kind"], kind.kind());
        }
    }

    #[test]
    fn the_fixture_configuration_gets_mrguard_rules() {
        // provider-nop's own webhook configuration (MRGUARD_FIXTURES),
        // renamed to ours: its hand-written rules are replaced by the
        // computed ones.
        let Some(dir) =
            mrguard_envtest::third_party_fixtures("the_fixture_configuration_gets_mrguard_rules")
        else {
            return;
        };
        let fixture = std::fs::read_to_string(dir.join("nop_webhookconfigurations.yaml")).unwrap();
        let mut v: Value = serde_saphyr::from_str(&fixture).unwrap();
        v["webhooks"][0]["name"] = json!(VALIDATE_WEBHOOK);
        let c: DynamicObject = serde_json::from_value(v).unwrap();
        let observed = ObservedConfig::from(&c);
        let rules = coverage().rules(VALIDATE_OPERATIONS);
        let p = desired_patch(ConfigKind::Validating, &observed, b"CA", &rules, None).unwrap();
        let applied: Vec<RuleWithOperations> =
            serde_json::from_value(p["webhooks"][0]["rules"].clone()).unwrap();
        assert_eq!(applied.len(), 6);
        assert!(applied
            .iter()
            .all(|r| r.operations.as_deref().unwrap() == ["CREATE", "UPDATE", "DELETE"]));
        assert_eq!(p["metadata"]["name"], "validating-webhook-configuration");
        // Only the fields mrguard owns are in the apply body.
        let keys: Vec<&String> = p["webhooks"][0].as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["clientConfig", "name", "rules"]);
    }

    /// The chart's second validating webhook (Compositions) keeps its
    /// fixed rules: the controller writes only its caBundle.
    #[test]
    fn the_compositions_webhook_gets_the_bundle_and_keeps_its_rules() {
        let cov = coverage();
        let rules = cov.rules(VALIDATE_OPERATIONS);
        let fixed = json!([{"apiGroups": ["apiextensions.crossplane.io"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["compositions"], "scope": "Cluster"}]);
        let mut v = config_json(ConfigKind::Validating, "mrguard", b"CA", json!(rules), "1");
        let mut second = v["webhooks"][0].clone();
        second["name"] = json!("compositions.validate.mrguard.io");
        second["rules"] = fixed.clone();
        second["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("caBundle");
        v["webhooks"].as_array_mut().unwrap().push(second);
        let observed = ObservedConfig::from(&serde_json::from_value::<DynamicObject>(v).unwrap());
        let p = desired_patch(ConfigKind::Validating, &observed, b"CA", &rules, None).unwrap();
        assert_eq!(p["webhooks"][1]["name"], "compositions.validate.mrguard.io");
        assert_eq!(p["webhooks"][1]["clientConfig"]["caBundle"], b64(b"CA"));
        assert!(p["webhooks"][1].get("rules").is_none(), "{p}");
        assert_eq!(p["webhooks"][0]["rules"], json!(rules));
        // Once it has the bundle, its own rules are no drift.
        let mut v = config_json(ConfigKind::Validating, "mrguard", b"CA", json!(rules), "2");
        let mut second = v["webhooks"][0].clone();
        second["name"] = json!("compositions.validate.mrguard.io");
        second["rules"] = fixed;
        v["webhooks"].as_array_mut().unwrap().push(second);
        let observed = ObservedConfig::from(&serde_json::from_value::<DynamicObject>(v).unwrap());
        assert_eq!(
            desired_patch(ConfigKind::Validating, &observed, b"CA", &rules, None),
            None
        );
    }

    /// The MRAP webhook, last in the validating configuration, is one more
    /// entry with fixed rules: it gets the bundle, its rules are no drift.
    #[test]
    fn the_mrap_webhook_gets_the_bundle_and_keeps_its_rules() {
        let cov = coverage();
        let rules = cov.rules(VALIDATE_OPERATIONS);
        let fixed = json!([{"apiGroups": ["apiextensions.crossplane.io"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["managedresourceactivationpolicies"],
            "scope": "Cluster"}]);
        let with = |bundle: Option<&[u8]>| {
            let mut v = config_json(ConfigKind::Validating, "mrguard", b"CA", json!(rules), "1");
            let mut last = v["webhooks"][0].clone();
            last["name"] = json!("activationpolicies.validate.mrguard.io");
            last["rules"] = fixed.clone();
            match bundle {
                Some(b) => last["clientConfig"]["caBundle"] = json!(b64(b)),
                None => {
                    last["clientConfig"]
                        .as_object_mut()
                        .unwrap()
                        .remove("caBundle");
                }
            }
            v["webhooks"].as_array_mut().unwrap().push(last);
            ObservedConfig::from(&serde_json::from_value::<DynamicObject>(v).unwrap())
        };
        let p = desired_patch(ConfigKind::Validating, &with(None), b"CA", &rules, None).unwrap();
        assert_eq!(
            p["webhooks"][1]["name"],
            "activationpolicies.validate.mrguard.io"
        );
        assert_eq!(p["webhooks"][1]["clientConfig"]["caBundle"], b64(b"CA"));
        assert!(p["webhooks"][1].get("rules").is_none(), "{p}");
        assert_eq!(
            desired_patch(
                ConfigKind::Validating,
                &with(Some(b"CA")),
                b"CA",
                &rules,
                None
            ),
            None
        );
    }

    #[tokio::test]
    async fn a_deleted_configuration_is_not_recreated() {
        let (client, api) =
            mock::client(|_| Reply::Json(500, status(500, "InternalError", "unexpected")));
        let wh = WebhookApi::new(client, names());
        for kind in ConfigKind::ALL {
            let r = reconcile(&wh, kind, None, b"CA", &coverage(), &Default::default())
                .await
                .unwrap();
            assert!(r.is_none());
        }
        assert!(api.requests().is_empty(), "{:?}", api.requests());
    }

    fn respond_with_configs(
        state: Arc<std::sync::Mutex<BTreeMap<ConfigKind, Option<Value>>>>,
    ) -> impl FnMut(&mock::Recorded) -> Reply + Send + 'static {
        move |r| {
            let kind = if r.path.contains("mutatingwebhookconfigurations") {
                ConfigKind::Mutating
            } else {
                ConfigKind::Validating
            };
            let api_version = "admissionregistration.k8s.io/v1";
            let current = state.lock().unwrap().get(&kind).cloned().flatten();
            match r.method.as_str() {
                "GET" if r.query.contains("watch=true") => Reply::Watch(vec![]),
                "GET" => Reply::Json(
                    200,
                    list(
                        &format!("{}List", kind.kind()),
                        api_version,
                        current.into_iter().collect(),
                    ),
                ),
                "PATCH" => {
                    let Some(mut obj) = current else {
                        return Reply::Json(404, status(404, "NotFound", "not found"));
                    };
                    // Apply the caBundle and rules of the body, as SSA would.
                    for w in r.body["webhooks"].as_array().unwrap() {
                        let target = obj["webhooks"]
                            .as_array_mut()
                            .unwrap()
                            .iter_mut()
                            .find(|x| x["name"] == w["name"])
                            .unwrap();
                        target["clientConfig"]["caBundle"] = w["clientConfig"]["caBundle"].clone();
                        if let Some(rules) = w.get("rules") {
                            target["rules"] = rules.clone();
                        }
                    }
                    let rv: u64 = obj["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    obj["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                    state.lock().unwrap().insert(kind, Some(obj.clone()));
                    Reply::Json(200, obj)
                }
                _ => Reply::Json(500, status(500, "InternalError", "unexpected")),
            }
        }
    }

    fn patches(reqs: &[mock::Recorded], kind: &str) -> Vec<mock::Recorded> {
        reqs.iter()
            .filter(|r| r.method == "PATCH" && r.path.contains(kind))
            .cloned()
            .collect()
    }

    /// `run` over two configurations in sync with `bundle` and the fixture
    /// coverage, once both watches are open.
    struct InSync {
        state: Arc<std::sync::Mutex<BTreeMap<ConfigKind, Option<Value>>>>,
        api: mock::MockApi,
        secret: watch::Sender<SecretView>,
        coverage: watch::Sender<Option<Arc<Coverage>>>,
        metrics: Arc<ControllerMetrics>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start_in_sync(bundle: &[u8]) -> InSync {
        let cov = coverage();
        let state = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        for kind in ConfigKind::ALL {
            let rules = json!(cov.rules(kind.operations()));
            state
                .lock()
                .unwrap()
                .insert(kind, Some(config_json(kind, "mrguard", bundle, rules, "5")));
        }
        let (client, api) = mock::client(respond_with_configs(state.clone()));
        let (secret, srx) = watch::channel(SecretView {
            synced: true,
            exists: true,
            bundle: Some(Arc::new(bundle.to_vec())),
        });
        let (coverage, crx) = watch::channel(Some(Arc::new(cov)));
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let task = tokio::spawn(run(
            WebhookApi::new(client, names()),
            srx,
            crx,
            watch::channel(Default::default()).1,
            metrics.clone(),
        ));
        api.wait_watch("mutatingwebhookconfigurations").await;
        api.wait_watch("validatingwebhookconfigurations").await;
        InSync {
            state,
            api,
            secret,
            coverage,
            metrics,
            task,
        }
    }

    #[tokio::test]
    async fn drift_seen_by_the_watch_is_repaired() {
        let cov = coverage();
        let bundle = b"-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n".to_vec();
        // The senders stay alive: `run` ends when they are dropped.
        let InSync {
            state,
            api,
            secret: _secret,
            coverage: _coverage,
            metrics,
            task,
        } = start_in_sync(&bundle).await;
        // In sync: nothing written.
        assert!(api.writes().is_empty());

        // A helm upgrade resets the caBundle and the rules.
        let drifted = config_json(ConfigKind::Mutating, "mrguard", b"", json!([]), "9");
        state
            .lock()
            .unwrap()
            .insert(ConfigKind::Mutating, Some(drifted.clone()));
        assert_eq!(
            api.push("mutatingwebhookconfigurations", "MODIFIED", drifted),
            1
        );
        let reqs = api
            .wait_for("the repair", |r| {
                !patches(r, "mutatingwebhookconfigurations").is_empty()
            })
            .await;
        let p = &patches(&reqs, "mutatingwebhookconfigurations")[0];
        assert_eq!(p.content_type, "application/apply-patch+yaml");
        assert!(
            p.query.contains("fieldManager=mrguard") && p.query.contains("force=true"),
            "{}",
            p.query
        );
        assert_eq!(p.body["metadata"]["resourceVersion"], "9");
        assert_eq!(
            p.body["webhooks"][0]["clientConfig"]["caBundle"],
            b64(&bundle)
        );
        assert_eq!(
            p.body["webhooks"][0]["rules"],
            json!(cov.rules(MUTATE_OPERATIONS))
        );
        assert!(patches(&reqs, "validatingwebhookconfigurations").is_empty());
        assert_eq!(
            metrics
                .webhook_updates
                .with_label_values(&["MutatingWebhookConfiguration"])
                .get(),
            1
        );
        task.abort();
    }

    /// A conflict (the stored version moved past the one observed, and the
    /// watch has not said so yet) is answered by reading the latest
    /// version and applying again at once: retrying the same stale apply
    /// with backoff would wait until a watch event happened to arrive, with
    /// this mock's silent watch forever.
    #[tokio::test]
    async fn a_conflict_reads_the_latest_version_and_applies_again() {
        let cov = coverage();
        let stored = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        for kind in ConfigKind::ALL {
            stored
                .lock()
                .unwrap()
                .insert(kind, config_json(kind, "mrguard", b"A", json!([]), "5"));
        }
        let s = stored.clone();
        let (client, api) = mock::client(move |r| {
            let kind = if r.path.contains("mutatingwebhookconfigurations") {
                ConfigKind::Mutating
            } else {
                ConfigKind::Validating
            };
            let mut st = s.lock().unwrap();
            let current = st[&kind].clone();
            match r.method.as_str() {
                "GET" if r.query.contains("watch=true") => Reply::Watch(vec![]),
                "GET" if r.path.ends_with("/mrguard") => Reply::Json(200, current),
                "GET" => Reply::Json(
                    200,
                    list(
                        &format!("{}List", kind.kind()),
                        "admissionregistration.k8s.io/v1",
                        vec![current],
                    ),
                ),
                "PATCH" => {
                    let rv = current["metadata"]["resourceVersion"].clone();
                    if r.body["metadata"]["resourceVersion"] != rv {
                        return Reply::Json(
                            409,
                            status(409, "Conflict", "the object has been modified"),
                        );
                    }
                    if rv == json!("5") {
                        // Someone else wrote in between: the stored version
                        // moves on, the watch stays silent.
                        st.get_mut(&kind).unwrap()["metadata"]["resourceVersion"] = json!("6");
                        return Reply::Json(
                            409,
                            status(409, "Conflict", "the object has been modified"),
                        );
                    }
                    let mut obj = current;
                    obj["webhooks"][0]["rules"] = r.body["webhooks"][0]["rules"].clone();
                    obj["webhooks"][0]["clientConfig"]["caBundle"] =
                        r.body["webhooks"][0]["clientConfig"]["caBundle"].clone();
                    obj["metadata"]["resourceVersion"] = json!("7");
                    st.insert(kind, obj.clone());
                    Reply::Json(200, obj)
                }
                _ => Reply::Json(500, status(500, "InternalError", "unexpected")),
            }
        });
        let (_stx, srx) = watch::channel(SecretView {
            synced: true,
            exists: true,
            bundle: Some(Arc::new(b"A".to_vec())),
        });
        let (_ctx, crx) = watch::channel(Some(Arc::new(cov.clone())));
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let task = tokio::spawn(run(
            WebhookApi::new(client, names()),
            srx,
            crx,
            watch::channel(Default::default()).1,
            metrics.clone(),
        ));
        let reqs = api
            .wait_for("both configurations written", |r| {
                r.iter()
                    .filter(|r| r.method == "PATCH" && r.body["metadata"]["resourceVersion"] == "6")
                    .count()
                    == 2
            })
            .await;
        for kind in [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ] {
            let mine: Vec<(&str, &str)> = reqs
                .iter()
                .filter(|r| r.path.contains(kind) && !r.query.contains("watch=true"))
                .filter(|r| r.method == "PATCH" || r.path.ends_with("/mrguard"))
                .map(|r| {
                    (
                        r.method.as_str(),
                        r.body["metadata"]["resourceVersion"].as_str().unwrap_or(""),
                    )
                })
                .collect();
            assert_eq!(
                mine,
                [("PATCH", "5"), ("GET", ""), ("PATCH", "6")],
                "{kind}"
            );
        }
        let stored = stored.lock().unwrap();
        assert_eq!(
            stored[&ConfigKind::Validating]["webhooks"][0]["rules"],
            json!(cov.rules(VALIDATE_OPERATIONS))
        );
        assert_eq!(
            metrics
                .api_errors
                .with_label_values(&["patch", ConfigKind::Mutating.resource(), "409"])
                .get(),
            1
        );
        task.abort();
    }

    #[tokio::test]
    async fn new_coverage_and_bundles_are_applied_but_deleted_configurations_stay_deleted() {
        let InSync {
            state,
            api,
            secret: stx,
            coverage: ctx,
            metrics,
            task,
        } = start_in_sync(b"A").await;

        // A new provider's CRD: both configurations cover it.
        let mut crds = summaries(&fixture_crds());
        let mut extra = crds[0].clone();
        extra.metadata.name = Some("widgets.new.example.org".into());
        extra.spec.group = "new.example.org".into();
        extra.spec.names.plural = "widgets".into();
        crds.push(extra);
        let bigger = Coverage::from_crds(&crds);
        ctx.send(Some(Arc::new(bigger.clone()))).unwrap();
        let reqs = api
            .wait_for("both patches", |r| {
                !patches(r, "mutatingwebhookconfigurations").is_empty()
                    && !patches(r, "validatingwebhookconfigurations").is_empty()
            })
            .await;
        let v = &patches(&reqs, "validatingwebhookconfigurations")[0];
        assert_eq!(
            v.body["webhooks"][0]["rules"],
            json!(bigger.rules(VALIDATE_OPERATIONS))
        );
        assert!(v.body["webhooks"][0]["rules"]
            .to_string()
            .contains("new.example.org"));

        // The operator deletes the mutating configuration (emergency exit).
        state.lock().unwrap().insert(ConfigKind::Mutating, None);
        let old = config_json(ConfigKind::Mutating, "mrguard", b"A", json!([]), "6");
        assert_eq!(api.push("mutatingwebhookconfigurations", "DELETED", old), 1);
        // Once the deletion arrived, change the bundle: only the validating
        // configuration is patched; nothing recreates the other.
        let present = metrics
            .webhook_configuration_present
            .with_label_values(&["MutatingWebhookConfiguration"]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while present.get() != 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the deletion never arrived"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before_m = patches(&api.requests(), "mutatingwebhookconfigurations").len();
        stx.send(SecretView {
            synced: true,
            exists: true,
            bundle: Some(Arc::new(b"B".to_vec())),
        })
        .unwrap();
        let reqs = api
            .wait_for("the validating patch", |r| {
                patches(r, "validatingwebhookconfigurations")
                    .iter()
                    .any(|p| p.body["webhooks"][0]["clientConfig"]["caBundle"] == b64(b"B"))
            })
            .await;
        assert_eq!(
            patches(&reqs, "mutatingwebhookconfigurations").len(),
            before_m
        );
        assert!(reqs.iter().all(|r| r.method != "POST" && r.method != "PUT"));
        task.abort();
    }
}
