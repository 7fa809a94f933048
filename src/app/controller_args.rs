//! The controller's flags of `mrguard serve`, and the controller
//! [`Settings`] they resolve to.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse::{parse_duration, parse_fraction};
use crate::controller::leader::webhooks;
use crate::controller::{lease_holder_id, resolve_namespace, InProcessSettings, Settings};
use crate::kube::api::KubeError;
use crate::pki::{self, rotation};
use mrguard_policy::commands::reports::Flavor;

/// The controller's arguments, part of `mrguard serve`.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Run the controller; it also runs in a cluster (KUBERNETES_SERVICE_HOST
    /// set) when no --tls-cert-file/--self-signed is given.
    #[arg(long, env = "MRGUARD_CONTROLLER", conflicts_with = "no_controller")]
    pub controller: bool,
    /// Never run the controller, even in a cluster.
    #[arg(long, env = "MRGUARD_NO_CONTROLLER")]
    pub no_controller: bool,
    /// Kubeconfig for the controller [default: in-cluster, $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "MRGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the Service, Secret and Lease [default: $POD_NAMESPACE,
    /// the service account's namespace, or crossplane-system].
    #[arg(long, env = "MRGUARD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Namespace Crossplane runs the providers' pods in: their
    /// ServiceAccounts there are exempt for the kinds they serve
    /// [default: the --namespace value].
    #[arg(long, env = "MRGUARD_CROSSPLANE_NAMESPACE")]
    pub crossplane_namespace: Option<String>,
    /// The Service in front of the webhook; the certificate is issued for it.
    #[arg(long, env = "MRGUARD_SERVICE_NAME", default_value = "mrguard")]
    pub service_name: String,
    /// The Secret holding ca.crt, ca.key, tls.crt and tls.key.
    #[arg(long, env = "MRGUARD_TLS_SECRET_NAME", default_value = "mrguard-tls")]
    pub tls_secret_name: String,
    /// The MutatingWebhookConfiguration whose caBundle and rules are kept.
    #[arg(long, env = "MRGUARD_MUTATING_WEBHOOK_NAME", default_value = "mrguard")]
    pub mutating_webhook_name: String,
    /// The ValidatingWebhookConfiguration whose caBundle and rules are kept.
    #[arg(
        long,
        env = "MRGUARD_VALIDATING_WEBHOOK_NAME",
        default_value = "mrguard"
    )]
    pub validating_webhook_name: String,
    /// The coordination.k8s.io Lease that elects the one writing replica.
    #[arg(long, env = "MRGUARD_LEASE_NAME", default_value = "mrguard-leader")]
    pub lease_name: String,
    /// How long a Lease stays valid without renewal (at least 3s).
    #[arg(long, env = "MRGUARD_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How often existing MRs are audited against the validation rules
    /// (at least 1s).
    #[arg(long, env = "MRGUARD_AUDIT_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub audit_interval: Duration,
    /// Write the audit's findings as policy reports: wgpolicyk8s
    /// (wgpolicyk8s.io/v1alpha2 PolicyReport/ClusterPolicyReport),
    /// openreports (openreports.io/v1alpha1 Report/ClusterReport) or off.
    #[arg(
        long,
        env = "MRGUARD_POLICY_REPORTS",
        value_enum,
        default_value = "off"
    )]
    pub policy_reports: PolicyReports,
    /// Keep the rules CEL can express in the API server itself
    /// (docs/in-process.md): auto has the leader write mrguard's
    /// ValidatingAdmissionPolicies (Kubernetes 1.30 and later) and its
    /// MutatingAdmissionPolicy (1.36 and later), and the webhooks skip what
    /// those enforce; off writes none and deletes those it wrote.
    #[arg(long, env = "MRGUARD_IN_PROCESS", value_enum, default_value = "off")]
    pub in_process: InProcess,
    /// The ClusterRole named in the ownerReferences of the policies written
    /// in-process, so that deleting it (the chart does when the mode is
    /// turned off, or on uninstall) has the garbage collector remove them.
    #[arg(long, env = "MRGUARD_IN_PROCESS_OWNER")]
    pub in_process_owner: Option<String>,
    /// The webhooks' namespaceSelector (a JSON LabelSelector), which the
    /// policies written in-process match too, so that they judge what the
    /// webhooks would have been sent and nothing else.
    #[arg(long, env = "MRGUARD_IN_PROCESS_NAMESPACE_SELECTOR", value_parser = parse_selector)]
    pub in_process_namespace_selector: Option<serde_json::Value>,
    /// The webhooks' objectSelector (a JSON LabelSelector); see
    /// --in-process-namespace-selector.
    #[arg(long, env = "MRGUARD_IN_PROCESS_OBJECT_SELECTOR", value_parser = parse_selector)]
    pub in_process_object_selector: Option<serde_json::Value>,
    /// Lifetime of a generated CA.
    #[arg(long, env = "MRGUARD_CA_LIFETIME", default_value = "8760h", value_parser = parse_duration)]
    pub ca_lifetime: Duration,
    /// Lifetime of a generated serving certificate (never beyond its CA's).
    #[arg(long, env = "MRGUARD_CERT_LIFETIME", default_value = "2160h", value_parser = parse_duration)]
    pub cert_lifetime: Duration,
    /// Renew a certificate when less than this part of its lifetime is left
    /// ("1/3" or "0.25").
    #[arg(long, env = "MRGUARD_CERT_RENEW_FRACTION", default_value = "1/3", value_parser = parse_fraction)]
    pub cert_renew_fraction: f64,
    /// Extra DNS names or IP addresses for the serving certificate
    /// (comma-separated), e.g. for a webhook reached by URL.
    #[arg(long, env = "MRGUARD_CERT_EXTRA_NAMES", value_delimiter = ',', value_parser = pki::extra_name)]
    pub cert_extra_names: Vec<String>,
    /// Requests (watches included) per HTTP/2 connection to the API server;
    /// another connection opens when every one is full. Keep it below the
    /// API server's --http2-max-streams-per-connection (250 by default).
    /// 0 speaks HTTP/1.1: one connection per request in flight.
    #[arg(long, env = "MRGUARD_API_STREAMS_PER_CONNECTION", default_value_t = crate::kube::connections::DEFAULT_STREAMS_PER_CONNECTION)]
    pub api_streams_per_connection: usize,
}

/// `--policy-reports`: which report API the audit writes, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyReports {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport.
    #[value(name = "wgpolicyk8s")]
    WgPolicyK8s,
    /// `openreports.io/v1alpha1` Report and ClusterReport.
    #[value(name = "openreports")]
    OpenReports,
    /// No reports.
    Off,
}

/// A Kubernetes LabelSelector given as JSON: an object whose keys are
/// `matchLabels` (a map of strings) and `matchExpressions` (a list).
fn parse_selector(text: &str) -> Result<serde_json::Value, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON label selector: {e}"))?;
    let Some(map) = v.as_object() else {
        return Err("a label selector is a JSON object".into());
    };
    for (k, val) in map {
        match k.as_str() {
            "matchLabels"
                if val
                    .as_object()
                    .is_some_and(|m| m.values().all(|x| x.is_string())) => {}
            "matchExpressions" if val.is_array() => {}
            "matchLabels" => return Err("matchLabels is a map of strings".into()),
            "matchExpressions" => return Err("matchExpressions is a list".into()),
            other => {
                return Err(format!(
                    "unknown key {other:?} in a label selector (matchLabels, matchExpressions)"
                ))
            }
        }
    }
    Ok(v)
}

/// `--in-process`: whether the leader keeps mrguard's admission policies
/// in the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InProcess {
    /// The policies the server's version serves.
    Auto,
    /// None; those written before are deleted.
    Off,
}

impl PolicyReports {
    /// The flavor to write, or `None` when off.
    pub(crate) fn flavor(self) -> Option<Flavor> {
        match self {
            PolicyReports::WgPolicyK8s => Some(Flavor::WgPolicyK8s),
            PolicyReports::OpenReports => Some(Flavor::OpenReports),
            PolicyReports::Off => None,
        }
    }
}

impl ControllerArgs {
    /// The flags' defaults, as `mrguard serve` parses them with no flag and
    /// no environment variable set (tests/it/server.rs
    /// `test_server_defaults_are_the_binarys` holds them to that).
    pub fn defaults() -> Self {
        ControllerArgs {
            controller: false,
            no_controller: false,
            kubeconfig: None,
            namespace: None,
            crossplane_namespace: None,
            service_name: "mrguard".into(),
            tls_secret_name: "mrguard-tls".into(),
            mutating_webhook_name: "mrguard".into(),
            validating_webhook_name: "mrguard".into(),
            lease_name: "mrguard-leader".into(),
            lease_duration: Duration::from_secs(15),
            audit_interval: Duration::from_secs(600),
            policy_reports: PolicyReports::Off,
            in_process: InProcess::Off,
            in_process_owner: None,
            in_process_namespace_selector: None,
            in_process_object_selector: None,
            ca_lifetime: Duration::from_secs(8760 * 3600),
            cert_lifetime: Duration::from_secs(2160 * 3600),
            cert_renew_fraction: 1.0 / 3.0,
            cert_extra_names: Vec::new(),
            api_streams_per_connection: 100,
        }
    }

    /// Whether the controller runs. In a cluster it is on by default, unless
    /// certificates come from files or --self-signed.
    pub(crate) fn enabled(&self, has_cert_source: bool) -> Result<bool, KubeError> {
        if self.no_controller {
            return Ok(false);
        }
        if self.controller && has_cert_source {
            return Err(KubeError::Setup(
                "--controller manages the certificate in a Secret; drop --tls-cert-file/--self-signed, \
                 or pass --no-controller"
                    .into(),
            ));
        }
        Ok(self.controller || (in_cluster() && !has_cert_source))
    }
}

fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty())
}

impl ControllerArgs {
    /// The controller's settings; `serving_port` is where every replica
    /// serves admission.
    pub(crate) fn settings(&self, serving_port: u16) -> Settings {
        let namespace = resolve_namespace(self.namespace.as_deref());
        let names = pki::serving_names(
            false,
            Some((&self.service_name, &namespace)),
            &self.cert_extra_names,
        );
        Settings {
            service: self.service_name.clone(),
            secret: self.tls_secret_name.clone(),
            webhooks: webhooks::WebhookNames {
                mutating: self.mutating_webhook_name.clone(),
                validating: self.validating_webhook_name.clone(),
            },
            lease: self.lease_name.clone(),
            lease_duration: self.lease_duration.max(Duration::from_secs(3)),
            audit_interval: self.audit_interval.max(Duration::from_secs(1)),
            policy_reports: self.policy_reports.flavor(),
            in_process: (self.in_process == InProcess::Auto).then(|| InProcessSettings {
                owner_role: self.in_process_owner.clone().filter(|s| !s.is_empty()),
                namespace_selector: self.in_process_namespace_selector.clone(),
                object_selector: self.in_process_object_selector.clone(),
            }),
            identity: lease_holder_id(),
            certs: rotation::CertSettings {
                names,
                ca_lifetime: self.ca_lifetime,
                cert_lifetime: self.cert_lifetime,
                renew_fraction: self.cert_renew_fraction,
                settle: rotation::BUNDLE_SETTLE,
            },
            serving_port,
            crossplane_namespace: self
                .crossplane_namespace
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| namespace.clone()),
            namespace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enabling_rules() {
        let mut a = ControllerArgs {
            cert_extra_names: vec!["127.0.0.1".into()],
            ..ControllerArgs::defaults()
        };
        a.controller = true;
        assert!(a.enabled(false).unwrap());
        assert!(a.enabled(true).is_err());
        a.no_controller = true;
        assert!(!a.enabled(false).unwrap());
        let s = a.settings(9443);
        assert_eq!(s.certs.names.last().unwrap(), "127.0.0.1");
        assert_eq!(s.certs.names[0], "mrguard");
        assert_eq!(s.policy_reports, None);
    }

    #[test]
    fn policy_report_flag_values() {
        assert_eq!(PolicyReports::Off.flavor(), None);
        assert_eq!(
            PolicyReports::from_str("wgpolicyk8s", false).unwrap(),
            PolicyReports::WgPolicyK8s
        );
        assert_eq!(
            PolicyReports::from_str("openreports", false)
                .unwrap()
                .flavor(),
            Some(Flavor::OpenReports)
        );
    }
}
