//! The controller's connections to the API server: HTTP/2, with the
//! streams spread over as few connections as the server's stream limit
//! allows.
//!
//! kube's default client speaks HTTP/1.1, one connection per request in
//! flight, and every watch is a request that never ends. The leader keeps
//! a watch per MR kind, so with the chart's arguments and 300 MR CRDs it
//! held 260 connections to the API server (13 without MR CRDs), and at
//! 1,000 kinds it would hold over 1,000. client-go multiplexes its
//! requests over HTTP/2 and opens another connection when one is at the
//! server's MAX_CONCURRENT_STREAMS (250 in kube-apiserver, Go's default).
//! This client does the same: each connection carries at most
//! `streams_per_connection` requests at once (watches included), and a new
//! connection opens when every open one is full. hyper's HTTP/2 client
//! would instead queue a request beyond the server's limit until a stream
//! ends, which for a watch is never.
//!
//! HTTP/2 PINGs every 30 s find a dead connection (and fail its watches
//! into their backoff) without a read timeout on idle watches.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use tower::{BoxError, ServiceBuilder};

use super::api::KubeError;

/// The default of `--api-streams-per-connection`: well under
/// kube-apiserver's 250 (`--http2-max-streams-per-connection`, Go's
/// default), so that lists and writes always find a free stream.
pub(crate) const DEFAULT_STREAMS_PER_CONNECTION: usize = 100;

/// Interval of the HTTP/2 PINGs that check a connection is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// How long a PING may go unanswered before the connection is dropped.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

fn setup(e: impl std::fmt::Display) -> KubeError {
    KubeError::Client(e.to_string())
}

/// Builds the Kubernetes client: an explicit kubeconfig (and context), else
/// $KUBECONFIG or ~/.kube/config, else in-cluster; over HTTP/2 with
/// `streams_per_connection` requests per connection, or HTTP/1.1 for 0
/// (see the module's documentation).
pub(crate) async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    streams_per_connection: usize,
) -> Result<kube::Client, KubeError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(String::from),
        ..Default::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| KubeError::Client(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| KubeError::Client(format!("{}: {e}", path.display())))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| KubeError::Client(e.to_string()))?,
        (None, None) => kube::Config::infer()
            .await
            .map_err(|e| KubeError::Client(e.to_string()))?,
    };
    http2_client(config, streams_per_connection)
}

/// A kube client over HTTP/2 with at most `streams_per_connection`
/// requests per connection. kube's own HTTP/1.1 client when
/// `streams_per_connection` is 0, for a plain-HTTP URL, or behind a proxy
/// (kube handles proxies).
fn http2_client(
    config: kube::Config,
    streams_per_connection: usize,
) -> Result<kube::Client, KubeError> {
    let https = config.cluster_url.scheme_str() == Some("https");
    if streams_per_connection == 0 || !https || config.proxy_url.is_some() {
        return Ok(kube::client::ClientBuilder::try_from(config)
            .map_err(setup)?
            .with_layer(&super::reachable::answers_layer())
            .build());
    }
    let balancer = Balancer {
        connections: Arc::new(Mutex::new(Vec::new())),
        connector: connector(&config)?,
        limit: streams_per_connection,
    };
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        // Outside the retries: a retried list keeps its place.
        .layer(super::list_limit::CollectionReadLimit::new(
            super::list_limit::COLLECTION_READS,
        ))
        .option_layer(retry)
        // Inside the retries: each attempt's answer tells the watches
        // whether the server is back.
        .layer(super::reachable::answers_layer())
        .option_layer(config.auth_layer().map_err(setup)?)
        .layer(config.extra_headers_layer().map_err(setup)?)
        .map_err(BoxError::from)
        .service(balancer);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// TLS from the kubeconfig (kube's own rustls settings: CA, client
/// certificate, server name), offering only `h2`: every kube-apiserver
/// speaks it (Go's net/http), and the client then never races HTTP/1.1
/// connections while the first handshake is under way.
fn connector(config: &kube::Config) -> Result<Connector, KubeError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config().map_err(setup)?;
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls_pki_types::ServerName::try_from(name.clone())
            .map_err(|e| setup(format!("tls-server-name {name:?}: {e}")))?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    Ok(builder.enable_http2().wrap_connector(http))
}

fn hyper_client(connector: Connector) -> HyperClient<Connector, Body> {
    HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_only(true)
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        // The pool holds this one connection for as long as it is open
        // (the PINGs above find a dead one). hyper's default forgets a
        // connection no new request used for 90 s, though its watches
        // still run on it: the next request opened another connection,
        // and the old one stayed until its watches ended. At 1,000 kinds
        // a replica held 21 connections, not 11, while watches renewed.
        .pool_idle_timeout(None)
        .build(connector)
}

/// One HTTP/2 connection (a hyper client of its own, whose pool holds one
/// shared connection) and the requests it carries now.
struct Connection {
    client: HyperClient<Connector, Body>,
    streams: Arc<AtomicUsize>,
}

/// Sends each request on the first connection with a free stream, opening
/// a connection when none has one.
#[derive(Clone)]
struct Balancer {
    connections: Arc<Mutex<Vec<Connection>>>,
    connector: Connector,
    limit: usize,
}

impl Balancer {
    /// Takes a stream on a connection; the guard gives it back.
    fn take(&self) -> (HyperClient<Connector, Body>, StreamGuard) {
        let mut conns = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let i = match conns
            .iter()
            .position(|c| c.streams.load(Ordering::Acquire) < self.limit)
        {
            Some(i) => i,
            None => {
                conns.push(Connection {
                    client: hyper_client(self.connector.clone()),
                    streams: Arc::new(AtomicUsize::new(0)),
                });
                // Rare (one per `limit` streams at the peak), and what an
                // operator counting sockets wants to see.
                tracing::info!(
                    connections = conns.len(),
                    streams_per_connection = self.limit,
                    "opened another HTTP/2 connection to the API server"
                );
                conns.len() - 1
            }
        };
        let c = &conns[i];
        c.streams.fetch_add(1, Ordering::AcqRel);
        (c.client.clone(), StreamGuard(c.streams.clone()))
    }
}

/// A stream in use until dropped (with the response body, or with the
/// request when it failed).
struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl tower::Service<hyper::Request<Body>> for Balancer {
    type Response = hyper::Response<Counted>;
    type Error = hyper_util::client::legacy::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<Body>) -> Self::Future {
        let (client, guard) = self.take();
        Box::pin(async move {
            let response = client.request(req).await?;
            Ok(response.map(|body| Counted {
                body,
                _guard: guard,
            }))
        })
    }
}

/// A response body that holds its stream's place until it is dropped.
pub(crate) struct Counted {
    body: Incoming,
    _guard: StreamGuard,
}

impl HttpBody for Counted {
    type Data = hyper::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balancer(limit: usize) -> Balancer {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        Balancer {
            connections: Arc::new(Mutex::new(Vec::new())),
            connector: connector(&config).unwrap(),
            limit,
        }
    }

    /// A connection whose streams are all long (watches) and that no new
    /// request used for longer than hyper's pool idle timeout (90 s) is
    /// still the one the next request takes: the server accepts one
    /// connection, not two.
    #[tokio::test(start_paused = true)]
    async fn a_connection_with_only_long_streams_is_kept() {
        use hyper_util::rt::TokioIo;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let server = {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                loop {
                    let (io, _) = listener.accept().await.unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        // Every response is a stream that never ends, as
                        // a watch with nothing to say.
                        let service = hyper::service::service_fn(|_req| async {
                            let body = http_body_util::StreamBody::new(futures::stream::pending::<
                                Result<Frame<hyper::body::Bytes>, std::convert::Infallible>,
                            >(
                            ));
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                        });
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .timer(TokioTimer::new())
                            .serve_connection(TokioIo::new(io), service)
                            .await;
                    });
                }
            })
        };
        let b = balancer(10);
        let get = || {
            let mut svc = b.clone();
            let req = hyper::Request::get(format!("http://{addr}/watch"))
                .body(Body::empty())
                .unwrap();
            tokio::spawn(async move { tower::Service::call(&mut svc, req).await })
        };
        // Held, as a watch holds its response.
        let _watch = get().await.unwrap().unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(200)).await;
        let _next = get().await.unwrap().unwrap();
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "the second request opened another connection"
        );
        server.abort();
    }

    /// Streams fill one connection up to the limit before another opens,
    /// and a stream given back is reused before a new connection opens.
    #[test]
    fn streams_fill_a_connection_before_another_opens() {
        let b = balancer(2);
        let (_, s1) = b.take();
        let (_, s2) = b.take();
        assert_eq!(b.connections.lock().unwrap().len(), 1);
        let (_, s3) = b.take();
        assert_eq!(b.connections.lock().unwrap().len(), 2);
        drop(s1);
        let (_, s4) = b.take();
        assert_eq!(
            b.connections.lock().unwrap().len(),
            2,
            "the free stream is reused"
        );
        let counts: Vec<usize> = b
            .connections
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.streams.load(Ordering::Acquire))
            .collect();
        assert_eq!(counts, vec![2, 1]);
        drop((s2, s3, s4));
    }
}
