//! The controller's connections to the API server: its requests and
//! watches share HTTP/2 connections, at most `--api-streams-per-connection`
//! at once on each; 0 speaks HTTP/1.1, one connection per watch. The
//! leader's connections are counted from /proc (its sockets to the API
//! server's port).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;

use crate::support::cluster::Cluster;
use serde_json::json;

use crate::support::{self, procfs, wait_for, Options, Release, WAIT};

pub(crate) const GROUP: &str = "ec2.aws.upbound.io";

/// The leader's established TCP connections to the API server.
fn connections(r: &Release) -> usize {
    procfs::tcp_connections_to(r.replicas[0].process.pid(), r.cluster.port()).unwrap_or(0)
}

/// A new MR kind (in a group the chart's RBAC covers) is covered, and a
/// paused MR of it is counted by the leader's gauge: its watch works.
pub(crate) async fn a_new_kind_is_watched(r: &Release, kind: &str, within: Duration) {
    let plural = format!("{}s", kind.to_lowercase());
    let crd = support::managed_crd(GROUP, "v1alpha1", kind, &plural, "Cluster");
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    support::cluster::create_crd(&r.client, &crd).await.unwrap();
    wait_for("the new kind in both configurations", within, || async {
        r.webhooks_ready(GROUP, &plural).await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    a_paused_mr_is_counted(r, kind, "paused", 1.0, within).await;
}

/// Creates a paused MR `name` of `kind` (through both webhooks) and waits
/// until the leader's gauge of paused MRs of that kind reads `count`.
async fn a_paused_mr_is_counted(r: &Release, kind: &str, name: &str, count: f64, within: Duration) {
    let ar = support::resource(
        GROUP,
        "v1alpha1",
        kind,
        &format!("{}s", kind.to_lowercase()),
    );
    let obj = r.object(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind,
        "metadata": {"name": name, "annotations": {"crossplane.io/paused": "true"}},
        "spec": {"forProvider": {}},
    }));
    r.cluster_api(&ar)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    wait_for("the paused MR counted by the leader", within, || async {
        let m = r.replicas[0].metrics().await.ok()?;
        (m.get(
            "mrguard_managed_resources",
            &[("group", GROUP), ("kind", kind), ("state", "paused")],
        ) == count)
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
}

/// With the default (100 streams per connection) the leader's watches (the
/// Secret, CRDs, both configurations, every MR kind) and its other
/// requests share ONE connection. kube's HTTP/1.1 client held one per
/// watch: 260 with 300 MR kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_shares_one_http2_connection() {
    let Some(cluster) = support::require_cluster("the_leader_shares_one_http2_connection").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-h2", Options::default()).await;
    a_new_kind_is_watched(&r, "E2eSharedConnProbe", WAIT).await;
    assert_eq!(connections(&r), 1, "{}", r.with_logs(String::new()));
}

/// `release` with 3 streams a connection, once its new kind `probe` is
/// watched; the leader then holds at least 4 connections: at least 12
/// long-lived watches (Secret, CRDs, two configurations, 8 fixture MR kinds
/// and the probe), 3 to a connection.
async fn three_streams_a_connection(
    cluster: &'static Cluster,
    release: &str,
    probe: &str,
) -> Release {
    let r = support::install(
        cluster,
        release,
        Options {
            extra_args: vec!["--api-streams-per-connection=3".into()],
            ..Options::default()
        },
    )
    .await;
    a_new_kind_is_watched(&r, probe, WAIT).await;
    let n = connections(&r);
    assert!(n >= 4, "{n} connections; {}", r.with_logs(String::new()));
    r
}

/// A limit of 3 streams opens more connections as the watches need them,
/// and 0 falls back to HTTP/1.1 with a connection per watch; watches and
/// coverage work either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_limit_opens_connections_and_zero_speaks_http1() {
    let Some(cluster) =
        support::require_cluster("the_stream_limit_opens_connections_and_zero_speaks_http1").await
    else {
        return;
    };
    let _three = three_streams_a_connection(cluster, "e2e-streams3", "E2eThreeStreamsProbe").await;

    let http1 = support::install(
        cluster,
        "e2e-http1",
        Options {
            extra_args: vec!["--api-streams-per-connection=0".into()],
            ..Options::default()
        },
    )
    .await;
    a_new_kind_is_watched(&http1, "E2eHttp1Probe", WAIT).await;
    let n = connections(&http1);
    assert!(
        n >= 12,
        "{n} connections; {}",
        http1.with_logs(String::new())
    );
}

/// A connection that carries only watches is kept while its watches renew.
/// hyper's pool forgot a connection no new request had used for 90 s,
/// watches or not; the next watch renewal on it then opened a second TCP
/// connection, behind the client's back, and the first stayed until its
/// last watch ended. With 3 streams a connection, every connection but the
/// newest holds 3 watches and nothing else. Each watcher renews after
/// 145-290 s, so within 250 s most have renewed. The leader's sockets are
/// compared with the connections its client logs opening, not with a fixed
/// count: other tests add MR kinds to the shared API server, and each is
/// one more watch. A connection opened behind the client's back shows as
/// more sockets than opened connections (8 where the client opened 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_carry_only_watches_are_kept_across_renewals() {
    let test = "connections_that_carry_only_watches_are_kept_across_renewals";
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let r = three_streams_a_connection(cluster, "e2e-keptconns", "E2eKeptConnsProbe").await;
    // Each opening is logged (to stderr, unbuffered) before it is dialled,
    // and the log is read after the sockets are counted.
    let opened = || {
        r.replicas[0]
            .log()
            .matches("opened another HTTP/2 connection")
            .count()
    };
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(250) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sockets = connections(&r);
        let logged = opened();
        assert!(
            sockets <= logged,
            "the leader held {sockets} connections to the API server where its client had opened {logged}; {}",
            r.with_logs(String::new())
        );
    }
    // The watches still deliver after their renewals.
    a_paused_mr_is_counted(&r, "E2eKeptConnsProbe", "paused-2", 2.0, WAIT).await;
}

/// kube-apiserver restarted (SIGTERM, as in a control-plane upgrade) drops
/// the leader's HTTP/2 connection; its watches come back on a new one: an
/// MR of a kind watched before the restart is counted, a kind created
/// after it is covered and watched, and it is all one connection again.
/// The watches, which failed and backed off while the server drained (up
/// to a minute), retry as soon as it answers again, not after sleeping out
/// their backoff (up to 60 s, which made this up to 90 s longer). The watcher
/// relists once, from the API server's watch cache (`resourceVersion=0`,
/// no `limit`), since it knows the kind fits in a page: from etcd, a list
/// cost the restarted server about six times the CPU. Its own API server,
/// since the restart would disturb the other tests, with an audit log of
/// mrguard's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_come_back_on_a_new_connection_after_the_api_server_restarts() {
    let test = "watches_come_back_on_a_new_connection_after_the_api_server_restarts";
    let release = "e2e-restart";
    let Some(cluster) = support::audited_cluster(test, release).await else {
        return;
    };
    let r = support::install(cluster, release, Options::default()).await;
    a_new_kind_is_watched(&r, "E2eBeforeRestartProbe", WAIT).await;
    cluster
        .restart_apiserver()
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let ready = std::time::Instant::now();
    a_paused_mr_is_counted(
        &r,
        "E2eBeforeRestartProbe",
        "paused-after",
        2.0,
        Duration::from_secs(20),
    )
    .await;
    eprintln!(
        "{test}: an MR counted {:.1} s after the API server was ready again",
        ready.elapsed().as_secs_f64()
    );
    a_new_kind_is_watched(&r, "E2eAfterRestartProbe", WAIT).await;
    assert_eq!(connections(&r), 1, "{}", r.with_logs(String::new()));
    // The probe kind's lists by mrguard's watcher, in order: kube-runtime's
    // pages from etcd until the kind is known, then from the cache. The
    // audit's reads from the cache carry no resourceVersionMatch.
    let log = std::fs::read_to_string(cluster.audit_log()).unwrap();
    let lists: Vec<String> = support::requested(
        &log,
        "list",
        &format!("/apis/{GROUP}/v1alpha1/e2ebeforerestartprobes"),
    )
    .into_iter()
    .filter(|u| u.contains("limit=500") || u.contains("resourceVersionMatch=NotOlderThan"))
    .collect();
    eprintln!("{test}: the watcher's lists of the probe kind: {lists:?}");
    let from_cache = |u: &String| {
        u.contains("resourceVersion=0")
            && u.contains("resourceVersionMatch=NotOlderThan")
            && !u.contains("limit=")
    };
    assert!(
        lists.first().is_some_and(|u| u.contains("limit=500")),
        "the first list of a new kind pages from etcd: {lists:?}"
    );
    assert!(
        lists.last().is_some_and(from_cache),
        "the relist after the restart reads the watch cache: {lists:?}"
    );
}

/// One CRD watch per replica, proven by the API server's audit log of
/// mrguard's service accounts: the provider accounts, the documented
/// immutable fields, the identity index and the leader's coverage all read
/// one store (with a store each, a leader listed and watched CRDs 4
/// times, a standby 3 times). Likewise one watch per MR kind per replica:
/// the identity index's feeds the leader's gauges and Events too. Each watcher's watches carry its
/// own timeout, so that they are not renewed in step. Its own API server,
/// so that the log holds this release's requests only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_lists_and_watches_crds_once() {
    let test = "every_replica_lists_and_watches_crds_once";
    let release = "e2e-crdwatch";
    let Some(cluster) = support::audited_cluster(test, release).await else {
        return;
    };
    let r = support::install(
        cluster,
        release,
        Options {
            replicas: 2,
            ..Options::default()
        },
    )
    .await;
    // The leader's coverage has run once a new kind is covered.
    a_new_kind_is_watched(&r, "E2eCrdWatchProbe", WAIT).await;
    let log = std::fs::read_to_string(cluster.audit_log()).unwrap();
    let requests = |verb: &str, collection: &str| support::requested(&log, verb, collection).len();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (watches, lists) = (requests("watch", crds), requests("list", crds));
    eprintln!("{test}: 2 replicas made {watches} CRD watches and {lists} CRD lists");
    // A watch starts only after its list worked, so this counts watchers
    // (a new CRD's first lists may be 404s).
    let mr_watches = requests(
        "watch",
        &format!("/apis/{GROUP}/v1alpha1/e2ecrdwatchprobes"),
    );
    assert_eq!(
        mr_watches,
        2,
        "one watch of an MR kind per replica; {}",
        r.with_logs(String::new())
    );
    assert_eq!(
        watches,
        2,
        "one CRD watch per replica; {}",
        r.with_logs(String::new())
    );
    // Each watch's first list; the audit reads the coverage, not CRDs.
    assert_eq!(lists, 2, "one CRD list per replica");
    // Each watcher draws its own watch timeout, so that watches started
    // together are not renewed together: kube-runtime sends 290 s to all.
    let timeouts: Vec<u32> = support::audited(&log, "watch")
        // kube's watch_object, two small watches of the webhook
        // configurations, keeps kube's 290 s.
        .filter(|v| v["objectRef"]["apiGroup"] != "admissionregistration.k8s.io")
        .filter_map(|v| {
            let uri = v["requestURI"].as_str()?;
            let (_, t) = uri.split_once("timeoutSeconds=")?;
            t.split('&').next()?.parse().ok()
        })
        .collect();
    let distinct: std::collections::BTreeSet<u32> = timeouts.iter().copied().collect();
    eprintln!(
        "{test}: {} watches, {} distinct timeouts: {distinct:?}",
        timeouts.len(),
        distinct.len()
    );
    assert!(timeouts.len() >= 10, "{timeouts:?}");
    assert!(
        timeouts.iter().all(|t| (145..=290).contains(t)),
        "{timeouts:?}"
    );
    // 146 values to draw from; a watch renewed in the test repeats its
    // watcher's value.
    assert!(
        distinct.len() >= (timeouts.len() / 3).min(40),
        "the watchers' timeouts are spread, not one value: {timeouts:?}"
    );
}
