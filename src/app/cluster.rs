//! What `check --live`, `audit` and `explain` share: the client from the
//! usual kubeconfig loading, the configuration of the installed release,
//! finding a kind's resource, and one error type, [`ClusterError`], whose
//! messages name the object and the verb ("failed to get ...: ...").

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::kube::api::KubeError;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::Api;

use mrguard_policy::admission::config::{Config, ConfigSource, SourceError};

/// The key of the chart's ConfigMap that holds the configuration.
pub(crate) const CONFIG_KEY: &str = "config.yaml";

/// A failure talking to the cluster, naming what and why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClusterError {
    /// No client could be built from the kubeconfig (the message says why,
    /// as "failed to connect to the Kubernetes API: ...").
    #[error("{0}")]
    Client(String),
    /// An API call failed: the controller's error type, with the API
    /// status kept and an RBAC denial explained.
    #[error(transparent)]
    Api(#[from] KubeError),
    /// The kind could not be found: not served, or discovery failed.
    #[error("failed to find kind {kind} of {api_version} on the cluster: {reason}")]
    Discovery {
        /// The manifest's apiVersion.
        api_version: String,
        /// The manifest's kind.
        kind: String,
        /// Why.
        reason: String,
        /// The API server answered that it does not serve the kind (as
        /// opposed to not answering).
        not_served: bool,
    },
    /// The configuration file named by `--config` is unreadable or invalid.
    #[error(transparent)]
    ConfigFile(#[from] crate::live_config::ConfigFileError),
    /// The configuration read is not valid.
    #[error(transparent)]
    Config(#[from] SourceError),
    /// `--config-from-cluster` without a cluster to read it from.
    #[error("failed to load the configuration from ConfigMap {0}: --config-from-cluster needs a cluster to read it from")]
    NoCluster(String),
    /// The release's ConfigMap is missing, unreadable or invalid.
    #[error("failed to load the configuration from ConfigMap {at}: {reason}")]
    ConfigMap {
        /// `namespace/name`.
        at: String,
        /// Why.
        reason: String,
    },
}

impl ClusterError {
    /// The HTTP status of a failed call.
    #[cfg(test)]
    pub(crate) fn code(&self) -> Option<u16> {
        match self {
            ClusterError::Api(e) => e.status_code(),
            _ => None,
        }
    }
}

/// Wraps a kube error with the verb and object it was for; an RBAC denial
/// says which permission is missing.
pub(crate) fn api_error(verb: &'static str, what: String, e: kube::Error) -> ClusterError {
    ClusterError::Api(KubeError::Api {
        verb,
        resource: what.into(),
        object: String::new(),
        source: Box::new(e),
    })
}

/// A current-thread runtime for a one-shot command that talks to a
/// cluster; `None` (after saying why on stderr) when none can be started.
pub(crate) fn runtime(command: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("mrguard {command}: failed to start the async runtime: {e}");
            None
        }
    }
}

/// How a one-shot command reaches its cluster.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClusterArgs {
    /// Kubeconfig [default: $KUBECONFIG or ~/.kube/config, else in-cluster].
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: the current context].
    #[arg(long)]
    pub(crate) context: Option<String>,
}

/// The cluster flags of a command that works offline too: `--kubeconfig`
/// and `--context` need `--live`.
pub(crate) fn live_only() -> clap::ArgGroup {
    clap::ArgGroup::new("cluster_flags")
        .args(["kubeconfig", "context"])
        .multiple(true)
        .requires("live")
}

/// `--config-from-cluster`, for a command with `--live` and `--config`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConfigFromCluster {
    /// With --live: read the configuration from the installed release's
    /// ConfigMap (key config.yaml) instead of --config.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        conflicts_with = "config",
        requires = "live"
    )]
    pub(crate) config_from_cluster: Option<String>,
}

impl ClusterArgs {
    /// The client these flags name.
    pub(crate) async fn client(&self) -> Result<kube::Client, ClusterError> {
        client(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }
}

/// The client: `--kubeconfig` (and `--context`), else kube's inference
/// ($KUBECONFIG, ~/.kube/config, in-cluster).
pub(crate) async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client, ClusterError> {
    // 0: kube's HTTP/1.1 client. A command makes a few requests and holds
    // no watch, so multiplexing would only add an h2-only TLS offer that a
    // proxy in front of the API server might refuse.
    crate::kube::connections::client(kubeconfig, context, 0)
        .await
        .map_err(|e| ClusterError::Client(e.to_string()))
}

/// Where the configuration comes from, as the flags say.
#[derive(Debug, Clone)]
pub(crate) enum ConfigOrigin {
    /// The built-in default.
    Builtin,
    /// A file.
    File(PathBuf),
    /// The installed release's ConfigMap, `namespace/name`.
    Cluster(String),
}

impl ConfigOrigin {
    /// From `--config` and `--config-from-cluster` (clap keeps them apart).
    pub(crate) fn from_flags(file: Option<&PathBuf>, cluster: Option<&String>) -> Self {
        match (file, cluster) {
            (Some(f), _) => ConfigOrigin::File(f.clone()),
            (None, Some(c)) => ConfigOrigin::Cluster(c.clone()),
            (None, None) => ConfigOrigin::Builtin,
        }
    }

    /// Reads it without a cluster: a file's bytes, or the built-in one.
    pub(crate) fn read_local(&self) -> Result<ConfigSource, ClusterError> {
        Ok(match self {
            ConfigOrigin::Builtin => ConfigSource::Builtin,
            ConfigOrigin::File(p) => ConfigSource::File {
                path: p.display().to_string(),
                bytes: std::fs::read(p).map_err(|source| {
                    crate::live_config::ConfigFileError::Read {
                        path: p.display().to_string(),
                        source,
                    }
                })?,
            },
            ConfigOrigin::Cluster(at) => return Err(ClusterError::NoCluster(at.clone())),
        })
    }

    /// Reads it; the cluster is only asked for a ConfigMap source.
    pub(crate) async fn read(
        &self,
        client: Option<&kube::Client>,
    ) -> Result<ConfigSource, ClusterError> {
        match (self, client) {
            (ConfigOrigin::Cluster(at), Some(c)) => config_map_text(c, at).await,
            _ => self.read_local(),
        }
    }
}

/// The `config.yaml` key of the ConfigMap `namespace/name`, as the chart
/// renders it.
async fn config_map_text(client: &kube::Client, at: &str) -> Result<ConfigSource, ClusterError> {
    let bad = |reason: String| ClusterError::ConfigMap {
        at: at.to_string(),
        reason,
    };
    let Some((ns, name)) = at
        .split_once('/')
        .filter(|(n, m)| !n.is_empty() && !m.is_empty())
    else {
        return Err(bad(
            "expected NAMESPACE/NAME, e.g. crossplane-system/mrguard".into(),
        ));
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = api
        .get(name)
        .await
        .map_err(|e| api_error("get", format!("configmaps {name:?} in namespace {ns:?}"), e))?;
    let mut data = cm.data.unwrap_or_default();
    let Some(text) = data.remove(CONFIG_KEY) else {
        let keys: Vec<&String> = data.keys().collect();
        return Err(bad(format!(
            "it has no key {CONFIG_KEY:?} (keys: {keys:?})"
        )));
    };
    Ok(ConfigSource::ConfigMap {
        at: at.to_string(),
        text,
    })
}

/// What every command that reads a cluster starts from: the client, the
/// configuration as read, the namespace of objects that name none, and
/// discovery, so that `check --live`, `plan`, `explain` and `audit` set
/// up one way.
pub(crate) struct ClusterContext {
    /// The client the flags name.
    pub(crate) client: kube::Client,
    /// The configuration as read, not yet parsed.
    pub(crate) config: ConfigSource,
    /// `-n`, else the kubeconfig context's namespace.
    pub(crate) default_namespace: String,
    /// Kinds resolved so far.
    pub(crate) discovery: Discovery,
}

impl ClusterContext {
    /// Connects as `args` say and reads the configuration.
    pub(crate) async fn connect(
        args: &ClusterArgs,
        namespace: Option<&str>,
        config: &ConfigOrigin,
    ) -> Result<Self, ClusterError> {
        let client = args.client().await?;
        let config = config.read(Some(&client)).await?;
        let default_namespace = namespace
            .map(str::to_string)
            .unwrap_or_else(|| client.default_namespace().to_string());
        Ok(ClusterContext {
            client,
            config,
            default_namespace,
            discovery: Discovery::default(),
        })
    }

    /// The configuration, parsed.
    pub(crate) fn config(&self) -> Result<Config, ClusterError> {
        Ok(self.config.load()?)
    }
}

/// A resource the cluster serves.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    /// Group, version, kind and plural.
    pub(crate) api: ApiResource,
    /// Whether objects live in namespaces.
    pub(crate) namespaced: bool,
}

impl Resource {
    /// `plural.group`, as kubectl and RBAC name it.
    pub(crate) fn display(&self) -> String {
        if self.api.group.is_empty() {
            self.api.plural.clone()
        } else {
            format!("{}.{}", self.api.plural, self.api.group)
        }
    }

    /// `plural.group "name"`, plus the namespace when namespaced.
    pub(crate) fn object(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{} {name:?} in namespace {namespace:?}", self.display())
        } else {
            format!("{} {name:?}", self.display())
        }
    }

    /// The dynamic API for one object's scope.
    pub(crate) fn api(&self, client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced {
            Api::namespaced_with(client.clone(), namespace, &self.api)
        } else {
            Api::all_with(client.clone(), &self.api)
        }
    }
}

/// Resolves `apiVersion` and `kind` to a resource, asking the API server
/// once per kind.
#[derive(Default)]
pub(crate) struct Discovery {
    cache: HashMap<(String, String), Resource>,
}

impl Discovery {
    /// The resource serving `kind` in `api_version`.
    pub(crate) async fn resolve(
        &mut self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Resource, ClusterError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.cache.get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let err = |reason: String, not_served: bool| ClusterError::Discovery {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            reason,
            not_served,
        };
        let (api, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 404 => err(
                    "the API server does not serve this group and version (is the provider's CRD installed?)".into(),
                    true,
                ),
                kube::Error::Discovery(_) => err(e.to_string(), true),
                _ => err(e.to_string(), false),
            })?;
        let r = Resource {
            api,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.cache.insert(key, r.clone());
        Ok(r)
    }
}

/// Finds the resource KIND names (a kind or plural, any case).
pub(crate) async fn resolve(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_names_the_verb() {
        let e = api_error(
            "get",
            "buckets.s3.aws.upbound.io \"b\"".into(),
            kube::Error::Api(
                kube::core::Status::failure(
                    "buckets.s3.aws.upbound.io \"b\" is forbidden: User \"ci\" cannot get resource",
                    "Forbidden",
                )
                .with_code(403)
                .boxed(),
            ),
        );
        let s = e.to_string();
        assert!(
            s.starts_with("failed to get buckets.s3.aws.upbound.io \"b\": forbidden: the credentials lack \"get\""),
            "{s}"
        );
        assert!(s.contains("User \"ci\""), "{s}");
        assert_eq!(e.code(), Some(403));
    }

    #[test]
    fn resource_labels() {
        let r = Resource {
            api: ApiResource {
                group: "s3.aws.m.upbound.io".into(),
                version: "v1beta1".into(),
                api_version: "s3.aws.m.upbound.io/v1beta1".into(),
                kind: "Bucket".into(),
                plural: "buckets".into(),
            },
            namespaced: true,
        };
        assert_eq!(
            r.object("team-a", "b"),
            "buckets.s3.aws.m.upbound.io \"b\" in namespace \"team-a\""
        );
    }
}
