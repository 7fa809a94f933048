//! Talking to the Kubernetes API: the client, typed errors naming the verb
//! and resource, a watch error logged once, backoff for retries, and the
//! clock every time-dependent decision reads.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use futures::Stream;
use jiff::Timestamp;
use kube::api::{ApiResource, ListParams};
use kube::core::{DynamicObject, ObjectList, Resource};
use kube::runtime::watcher;
use kube::Api;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::metrics::controller::ControllerMetrics;

/// The field manager of every server-side apply, and the Event reporter.
pub(crate) const FIELD_MANAGER: &str = "mrguard";

/// Every failure of the controller: one type, with the API status kept.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// An API call the API server answered with an error, or could not be made.
    #[error("failed to {verb} {resource}{}: {}", object_suffix(.object), reason(.verb, .source))]
    Api {
        /// The verb: get, list, watch, patch, create, delete.
        verb: &'static str,
        /// The resource, e.g. `secrets`, or a kind and name in the CLI.
        resource: Cow<'static, str>,
        /// The object's name (namespace/name), empty for collections.
        object: String,
        /// What kube returned (boxed: it is most of the error's size).
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server did not answer in time.
    #[error("failed to {verb} {resource}{}: no answer within {after:?}", object_suffix(.object))]
    Timeout {
        /// The verb.
        verb: &'static str,
        /// The resource.
        resource: Cow<'static, str>,
        /// The object's name, empty for collections.
        object: String,
        /// How long it waited.
        after: Duration,
    },
    /// A certificate could not be issued or read.
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    /// The controller could not start.
    #[error("failed to set up the controller: {0}")]
    Setup(String),
    /// The TLS Secret the chart creates is gone.
    #[error(
        "failed to update the TLS Secret {namespace}/{name}: it does not exist. The chart creates it \
         (empty, type kubernetes.io/tls) and mrguard never creates Secrets; run `helm upgrade` for \
         the release to create it again, or create an empty kubernetes.io/tls Secret of that name"
    )]
    SecretMissing {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// No client for the API server could be built.
    #[error("failed to connect to the Kubernetes API: {0}")]
    Client(String),
}

/// Why a call failed: the API server's message and status, or, on an RBAC
/// denial, which permission is missing.
fn reason(verb: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "forbidden: the credentials lack {verb:?} on it (the API server said: {})",
            s.message
        ),
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

fn object_suffix(object: &str) -> String {
    if object.is_empty() {
        String::new()
    } else {
        format!(" {object}")
    }
}

impl KubeError {
    /// A failed watch of `resource`, with the API status kept.
    pub(crate) fn watch(
        resource: &'static str,
        object: impl Into<String>,
        e: watcher::Error,
    ) -> Self {
        KubeError::Api {
            verb: "watch",
            resource: resource.into(),
            object: object.into(),
            source: Box::new(watcher_source(e)),
        }
    }

    /// The HTTP status of a failed API call, when the API server answered.
    pub(crate) fn status_code(&self) -> Option<u16> {
        match self {
            KubeError::Api { source, .. } => match &**source {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
            _ => None,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    pub(crate) fn is_conflict(&self) -> bool {
        self.status_code() == Some(409)
    }

    /// A watch whose resourceVersion is too old (410 Gone): expected, the
    /// watcher lists again.
    pub(crate) fn is_expired(&self) -> bool {
        self.status_code() == Some(410)
    }

    /// Counts a failed API call in `mrguard_controller_api_errors_total`.
    pub(crate) fn count(&self, metrics: Option<&ControllerMetrics>) {
        match (metrics, self) {
            (Some(m), KubeError::Api { verb, resource, .. })
            | (Some(m), KubeError::Timeout { verb, resource, .. }) => {
                m.api_error(verb, resource, self.status_code());
            }
            _ => {}
        }
    }

    /// Counts and logs the error, naming the refused verb and resource on
    /// an RBAC denial.
    pub(crate) fn log(&self, metrics: Option<&ControllerMetrics>, what: &str) {
        self.count(metrics);
        if let KubeError::Api {
            verb,
            resource,
            object,
            source,
        } = self
        {
            if self.status_code() == Some(403) {
                tracing::error!(
                    verb,
                    resource = %resource,
                    object = %object,
                    error = %source,
                    "RBAC denied the controller: grant verb {verb:?} on {resource:?} to mrguard's service account ({what})"
                );
                return;
            }
        }
        tracing::warn!(error = %self, "{what}");
    }
}

/// Wraps a kube call's error with the verb and resource it was for.
pub(crate) fn api_err(
    verb: &'static str,
    resource: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> KubeError {
    let object = object.into();
    move |source| KubeError::Api {
        verb,
        resource: resource.into(),
        object,
        source: Box::new(source),
    }
}

/// Sleeps until `at`, or forever when there is nothing to retry: the
/// retry arm of every controller loop's `select!`.
pub(crate) async fn until_due(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Runs one API call with a deadline; a call that does not answer in time
/// is an error like any other (counted with code 0).
pub(crate) async fn with_timeout<T>(
    after: Duration,
    verb: &'static str,
    resource: &'static str,
    object: &str,
    call: impl std::future::Future<Output = Result<T, KubeError>>,
) -> Result<T, KubeError> {
    tokio::time::timeout(after, call).await.unwrap_or_else(|_| {
        Err(KubeError::Timeout {
            verb,
            resource: resource.into(),
            object: object.to_string(),
            after,
        })
    })
}

/// The time source of every decision that depends on the wall clock, so
/// tests can move it.
pub(crate) trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// The one backoff of the controller, for failed calls and failed watches
/// alike: exponential, each delay drawn from [d, 2d) (up to 100% jitter, as
/// kube's and client-go's) while d doubles up to `max`, and reset on
/// progress. It is a kube-runtime [`kube::runtime::utils::Backoff`] (an
/// endless iterator of delays with a reset), so kube's backoff helpers take
/// it too. See `retry::backoff_on_failure` for what counts as progress for
/// a watch.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    /// Retried writes and reads: 0.25 s doubling to 30 s (so 0.25-0.5 s
    /// first, 30-60 s at most).
    pub(crate) fn for_calls() -> Self {
        Self::new(Duration::from_millis(250), Duration::from_secs(30))
    }

    /// Watches: kube's default, 0.8 s doubling to 30 s.
    pub(crate) fn for_watches() -> Self {
        Self::new(Duration::from_millis(800), Duration::from_secs(30))
    }

    /// The next delay; the backoff never gives up.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d.mul_f64(1.0 + fastrand::f64())
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        self.current = self.min;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::for_calls()
    }
}

/// Every object `api` lists with `params` (its `limit` is the page size):
/// one page per item. The controller's one list-paging helper.
pub(crate) fn list_pages<K>(
    api: Api<K>,
    params: ListParams,
) -> impl Stream<Item = Result<Vec<K>, kube::Error>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    pages(params, move |lp| {
        let api = api.clone();
        async move { api.list(&lp).await }
    })
}

/// As [`list_pages`], each object of `resource` as plain JSON, with the
/// `apiVersion` and `kind` a list's items leave out (rules read them). The
/// audit judges `Value`s: a `DynamicObject` was parsed (its metadata typed,
/// managedFields and all) and serialized back into one, for each MR. An
/// item that is not a JSON object is dropped: it is no object of the kind.
pub(crate) fn list_values(
    client: kube::Client,
    resource: &ApiResource,
    params: ListParams,
) -> impl Stream<Item = Result<Vec<Value>, kube::Error>> {
    let request = kube::core::Request::new(DynamicObject::url_path(resource, None));
    let (api_version, kind) = (resource.api_version.clone(), resource.kind.clone());
    pages(params, move |lp| {
        let (client, request) = (client.clone(), request.clone());
        let (api_version, kind) = (api_version.clone(), kind.clone());
        async move {
            let mut req = request.list(&lp).map_err(kube::Error::BuildRequest)?;
            // As `Api::list` marks it, for the client's own tracing.
            req.extensions_mut().insert("list");
            let mut page = client.request::<ObjectList<Value>>(req).await?;
            page.items.retain_mut(|item| {
                let Some(obj) = item.as_object_mut() else {
                    return false;
                };
                obj.insert("apiVersion".into(), Value::String(api_version.clone()));
                obj.insert("kind".into(), Value::String(kind.clone()));
                true
            });
            Ok(page)
        }
    })
}

/// The pages `fetch` returns for `params`, following continue tokens.
fn pages<T, F, Fut>(params: ListParams, fetch: F) -> impl Stream<Item = Result<Vec<T>, kube::Error>>
where
    T: Clone,
    F: Fn(ListParams) -> Fut,
    Fut: Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    // The state is the next page's continue token; `None` once the last
    // page was read.
    futures::stream::try_unfold(Some(None::<String>), move |token| {
        let lp = token.as_ref().map(|t| match t {
            Some(t) => params.clone().continue_token(t),
            None => params.clone(),
        });
        let page = lp.map(&fetch);
        async move {
            let Some(page) = page else {
                return Ok(None);
            };
            let page = page.await?;
            let next = page.metadata.continue_.filter(|t| !t.is_empty()).map(Some);
            Ok(Some((page.items, next)))
        }
    })
}

/// A watch event kube-client could not decode: it reads the line as a
/// Status, which any JSON object is (code 0, no message).
pub(crate) fn undecoded(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchFailed(kube::Error::Api(s))
        if s.code == 0 && s.message.is_empty())
}

/// The client error inside a watcher error, for uniform logging.
pub(crate) fn watcher_source(e: watcher::Error) -> kube::Error {
    match e {
        // Named for what it is: the error kube-client makes of it has code
        // 0 and no message. The object of that event is skipped.
        e if undecoded(&e) => {
            kube::Error::Service("a watch event did not decode; its object was skipped".into())
        }
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => kube::Error::Api(status),
        other => kube::Error::Service(other.to_string().into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    /// What kube-client makes of a watch line that does not decode.
    #[test]
    fn an_undecodable_watch_event_is_named_as_such() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({})).unwrap();
        let e = KubeError::watch(
            "managed resources",
            "vpcs",
            watcher::Error::WatchFailed(kube::Error::Api(Box::new(status))),
        );
        assert!(e.to_string().contains("did not decode"), "{e}");
        assert_eq!(e.status_code(), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(800));
        let d: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert!(d[0] >= ms(100) && d[0] < ms(200), "{d:?}");
        assert!(d[3] >= ms(800) && d[3] < ms(1600), "{d:?}");
        assert!(d[5] >= ms(800) && d[5] < ms(1600), "{d:?}");
        b.reset();
        assert!(b.next_delay() < ms(200));
    }
}
