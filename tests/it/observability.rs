//! Observability shipped with the chart, both opt-in: the Grafana dashboard
//! (a ConfigMap for the Grafana sidecar, charts/mrguard/dashboards/mrguard.json)
//! and the PrometheusRule alerts, rendered by a real helm
//! (`scripts/install-tools.sh` puts it in .tools/bin, or set HELM_BIN).
//!
//! Every PromQL expression must parse, and every metric it names must be one
//! that mrguard's own registration code registers (built here from the real
//! `register` functions, each labelled family observed once through the
//! code that sets it). The chart README's values table is generated from
//! values.yaml (`helm_docs.rs`) and must be in sync
//! (`MRGUARD_UPDATE_DOCS=1` rewrites it).
//!
//! `promql::metric_names` is meant for the end-to-end suite too, to prove
//! that a running mrguard exports every metric named here.

mod helm_docs;
mod promql;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use mrguard::controller::ControllerMetrics;
use mrguard::metrics::{AdmissionMetrics, RequestLabels};
use mrguard_policy::admission::decider::{Outcome, Webhook};
use mrguard_policy::admission::model::{Action, Finding};

use crate::support::helm::{self, chart, helm, ok, NS, RELEASE};
use crate::support::root;

const BOTH_ON: [&str; 4] = [
    "--set",
    "metrics.dashboard.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
];
const DASHBOARD_FILE: &str = "charts/mrguard/dashboards/mrguard.json";
const TROUBLESHOOTING: &str = "docs/troubleshooting.md";
const CHART_README: &str = "charts/mrguard/README.md";

/// Every alert of the chart, each with a section in docs/troubleshooting.md.
const ALERTS: [&str; 10] = [
    "MrguardWebhookErrors",
    "MrguardWebhookSlow",
    "MrguardCertificateExpiresSoon",
    "MrguardAuditStale",
    "MrguardNoLeader",
    "MrguardWatchFailing",
    "MrguardKindsForbidden",
    "MrguardConfigReloadFailed",
    "MrguardCertificateReloadFailed",
    "MrguardCreationIncompleteSpike",
];

// ---------------------------------------------------------------- helm

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The objects `helm template` renders with these extra arguments.
fn render(extra: &[&str]) -> Vec<Value> {
    helm::template(RELEASE, NS, extra)
}

fn all<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn dashboard_configmaps(objs: &[Value]) -> Vec<&Value> {
    all(objs, "ConfigMap")
        .into_iter()
        .filter(|c| c["data"].get("mrguard.json").is_some())
        .collect()
}

/// The alerting rules of the rendered PrometheusRule.
fn rules(objs: &[Value]) -> Vec<Value> {
    let found = all(objs, "PrometheusRule");
    assert_eq!(found.len(), 1, "expected one PrometheusRule");
    found[0]["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

fn rule<'a>(rules: &'a [Value], alert: &str) -> &'a Value {
    rules
        .iter()
        .find(|r| r["alert"] == alert)
        .unwrap_or_else(|| panic!("no alert {alert}"))
}

fn alert_names(rules: &[Value]) -> BTreeSet<String> {
    rules
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect()
}

fn expr_of(rule: &Value) -> &str {
    rule["expr"].as_str().expect("expr is a string")
}

fn thresholds_of(rule: &Value) -> Vec<f64> {
    promql::thresholds(&promql::parse(expr_of(rule)).unwrap())
}

/// `(alert, expr)` of every rule, with the values in `extra`.
fn alert_exprs(extra: &[&str]) -> Vec<(String, String)> {
    let mut args = BOTH_ON.to_vec();
    args.extend_from_slice(extra);
    promql::rule_exprs(&render(&args))
}

fn values() -> Value {
    serde_saphyr::from_str(&read("charts/mrguard/values.yaml")).unwrap()
}

// ---------------------------------------------------------------- dashboard

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD_FILE))
        .unwrap_or_else(|e| panic!("{DASHBOARD_FILE} is not JSON: {e}"))
}

fn panel<'a>(d: &'a Value, title: &str) -> &'a Value {
    promql::panels(d)
        .into_iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("the dashboard has no panel {title:?}"))
}

// ---------------------------------------------------------------- registry

/// The `/metrics` page of a registry holding every metric family mrguard
/// registers (the same `register` calls as `mrguard serve`), each labelled
/// family observed once through the code that sets it in production.
fn registered_metrics() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let registry = mrguard::metrics::registry();
        let admission = AdmissionMetrics::register(&registry).expect("admission metrics");
        // A configuration with an expired exception, as a reload sets it.
        let _store = mrguard::live_config::ConfigStore::new(
            mrguard_policy::admission::config::Config::from_yaml(
                "exceptions:\n  - {name: old, rules: [immutable-field], reason: r, expires: '2020-01-01T00:00:00Z'}\n",
            )
            .expect("config with an exception"),
            Some(mrguard::live_config::ConfigMetrics::register(&registry).expect("config metrics")),
        );
        mrguard::tls::TlsMetrics::register(&registry).expect("TLS metrics");
        let controller =
            Arc::new(ControllerMetrics::register(&registry).expect("controller metrics"));

        let mut findings: Vec<Finding> = [Action::Deny, Action::Warn, Action::Audit]
            .into_iter()
            .map(|action| Finding {
                rule: "immutable-field".into(),
                action,
                message: "m".into(),
                fix: None,
                note: None,
            })
            .collect();
        findings.push(Finding {
            rule: "immutable-field".into(),
            action: Action::Warn,
            message: "m".into(),
            fix: None,
            note: Some(mrguard_policy::admission::model::Note::Waived {
                exception: "vpc-migration".into(),
                expires: None,
            }),
        });
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            for outcome in every_outcome() {
                admission.observe(
                    &RequestLabels {
                        webhook,
                        operation: "CREATE",
                        group: "ec2.aws.upbound.io",
                        kind: "VPC",
                        configured: true,
                    },
                    outcome,
                    0.001,
                    &findings,
                );
            }
        }
        // Both `state` series of a kind, as the leader's MR states set them.
        for state in ["paused", "creation_incomplete"] {
            controller
                .managed_resources
                .with_label_values(&["ec2.aws.upbound.io", "VPC", state])
                .set(1);
        }
        // Families whose label values come from call sites, not from a type.
        controller
            .audit_violations
            .with_label_values(&["immutable-field", "ec2.aws.upbound.io", "VPC"])
            .set(1);
        for k in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            controller.webhook_updates.with_label_values(&[k]).inc();
            controller
                .webhook_configuration_present
                .with_label_values(&[k])
                .set(1);
        }
        controller
            .events
            .with_label_values(&["PossiblyLeaked", "written"])
            .inc();
        controller.api_error("watch", "customresourcedefinitions", Some(403));

        let text = mrguard::metrics::render(&registry).expect("the registry renders");
        String::from_utf8(text).expect("the metrics page is UTF-8")
    })
}

/// Every `result` label value; adding an Outcome fails to compile here.
fn every_outcome() -> [Outcome; 4] {
    let all = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::Patched,
        Outcome::Error,
    ];
    for o in all {
        match o {
            Outcome::Allowed | Outcome::Denied | Outcome::Patched | Outcome::Error => {}
        }
    }
    all
}

fn registered_series() -> BTreeMap<String, Vec<promql::Labels>> {
    promql::exported_series(registered_metrics()).expect("the registry's page parses")
}

/// Labels whose values the registry above produces through the code that
/// sets them (Webhook, Outcome, Action, the MR watch): a matcher on one of
/// them must name a value mrguard really exports.
const CHECKED_LABELS: [&str; 4] = ["webhook", "result", "action", "state"];

// ---------------------------------------------------------------- tests

/// `label = value` pairs a selector must have.
type Matchers<'a> = &'a [(&'a str, &'a str)];

#[test]
fn promql_helpers_substitute_variables_and_find_every_metric() {
    assert_eq!(
        promql::substitute_grafana_vars(
            r#"rate(x{namespace="$namespace", job="${job}"}[$__rate_interval])"#
        ),
        r#"rate(x{namespace="var-namespace", job="var-job"}[5m])"#
    );
    let names = promql::metric_names([
        "sum(rate(a_total[5m])) / on() group_left sum(b{x=\"1\"} offset 1h)",
        "histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m]))) > max_over_time(c[10m:1m])",
        "time() - {__name__=\"d\"}",
    ]);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["a_total", "b", "c", "d", "h_bucket"]
    );
    assert_eq!(
        promql::thresholds(&promql::parse("a > 3 and on() b < 0.5 or c").unwrap()),
        [3.0, 0.5]
    );
    let series = promql::exported_series("# HELP a x\na{k=\"v\\\"w\",l=\"\"} 1\nb 2\n").unwrap();
    assert_eq!(series["a"][0]["k"], "v\"w");
    assert_eq!(series["a"][0]["l"], "");
    assert!(series["b"][0].is_empty());
}

#[test]
fn dashboard_and_alerts_render_only_when_enabled() {
    let cases: [(&[&str], bool, bool); 4] = [
        (&[], false, false),
        (&["--set", "metrics.dashboard.enabled=true"], true, false),
        (
            &["--set", "metrics.prometheusRule.enabled=true"],
            false,
            true,
        ),
        (&BOTH_ON, true, true),
    ];
    for (args, dashboard, alerts) in cases {
        let objs = render(args);
        assert_eq!(
            dashboard_configmaps(&objs).len(),
            usize::from(dashboard),
            "dashboard ConfigMaps with {args:?}"
        );
        let labelled = objs
            .iter()
            .filter(|o| o["metadata"]["labels"].get("grafana_dashboard").is_some())
            .count();
        assert_eq!(
            labelled,
            usize::from(dashboard),
            "grafana_dashboard labels with {args:?}"
        );
        assert_eq!(
            all(&objs, "PrometheusRule").len(),
            usize::from(alerts),
            "PrometheusRules with {args:?}"
        );
    }
}

/// Two releases in one Grafana keep two dashboards: each gets its own uid,
/// the same release always the same one, and the value sets it outright.
#[test]
fn each_release_gets_its_own_dashboard_uid() {
    let uid = |release: &str, ns: &str, extra: &[&str]| {
        let mut args = vec!["--set", "metrics.dashboard.enabled=true"];
        args.extend_from_slice(extra);
        let objs = helm::template(release, ns, &args);
        let cm = dashboard_configmaps(&objs)[0];
        let d: Value = serde_json::from_str(cm["data"]["mrguard.json"].as_str().unwrap()).unwrap();
        d["uid"].as_str().unwrap().to_string()
    };
    let first = uid("mrguard", "crossplane-system", &[]);
    assert_eq!(first, uid("mrguard", "crossplane-system", &[]), "stable");
    assert_ne!(first, uid("mrguard", "team-b", &[]), "namespace");
    assert_ne!(
        first,
        uid("mrguard-b", "crossplane-system", &[]),
        "release name"
    );
    assert_eq!(
        uid(
            "mrguard",
            "crossplane-system",
            &["--set", "metrics.dashboard.uid=platform-mrguard"]
        ),
        "platform-mrguard"
    );
    let out = helm(&[
        "template",
        "mrguard",
        chart().to_str().unwrap(),
        "--set",
        "metrics.dashboard.enabled=true",
        "--set",
        &format!("metrics.dashboard.uid={}", "u".repeat(41)),
    ]);
    assert!(!out.status.success(), "a uid over 40 characters is refused");
}

#[test]
fn dashboard_configmap_carries_the_file_and_the_configured_label_namespace_and_folder() {
    let file = read(DASHBOARD_FILE);
    let objs = render(&["--set", "metrics.dashboard.enabled=true"]);
    let cm = dashboard_configmaps(&objs)[0];
    assert_eq!(cm["metadata"]["name"], format!("{RELEASE}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], NS);
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/instance"],
        RELEASE
    );
    assert!(
        cm["metadata"].get("annotations").is_none_or(Value::is_null),
        "no folder annotation by default: {}",
        cm["metadata"]
    );
    let mut shipped: Value = serde_json::from_str(cm["data"]["mrguard.json"].as_str().unwrap())
        .expect("the ConfigMap's dashboard is JSON");
    let uid = shipped["uid"].as_str().unwrap().to_string();
    assert!(
        uid.starts_with("mrguard-") && uid.len() <= 40 && uid != "mrguard",
        "a uid of the release's own, within Grafana's 40 characters: {uid}"
    );
    shipped["uid"] = "mrguard".into();
    assert_eq!(
        shipped,
        serde_json::from_str::<Value>(&file).unwrap(),
        "the ConfigMap holds the dashboard file with only its uid set"
    );

    let objs = render(&[
        "--set",
        "metrics.dashboard.enabled=true",
        "--set",
        "metrics.dashboard.namespace=monitoring",
        "--set",
        "metrics.dashboard.labelKey=grafana.example.com/dashboard",
        "--set-string",
        "metrics.dashboard.labelValue=yes",
        "--set",
        "metrics.dashboard.folder=Platform",
        "--set",
        "metrics.dashboard.folderAnnotation=k8s-sidecar-target-directory",
        "--set",
        "metrics.dashboard.labels.team=platform",
        "--set",
        "metrics.dashboard.annotations.owner=sre",
    ]);
    let cm = dashboard_configmaps(&objs)[0];
    let meta = &cm["metadata"];
    assert_eq!(meta["namespace"], "monitoring");
    assert_eq!(meta["labels"]["grafana.example.com/dashboard"], "yes");
    assert!(meta["labels"].get("grafana_dashboard").is_none());
    assert_eq!(meta["labels"]["team"], "platform");
    assert_eq!(
        meta["annotations"]["k8s-sidecar-target-directory"],
        "Platform"
    );
    assert_eq!(meta["annotations"]["owner"], "sre");
}

#[test]
fn helm_lint_is_clean_with_observability_on_and_off() {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for extra in [&[][..], &BOTH_ON[..]] {
        let mut args = vec!["lint", "--strict", chart];
        args.extend_from_slice(extra);
        let out = ok(&helm(&args), &format!("helm {}", args.join(" ")));
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
    // A threshold outside its range is refused, naming the key.
    let out = helm(&[
        "template",
        RELEASE,
        chart,
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.webhookLatency.timeoutRatio=2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("timeoutRatio"),
        "{err}"
    );
}

#[test]
fn an_unknown_alert_in_disabled_is_refused_by_name() {
    let chart = chart();
    let out = helm(&[
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.disabled={MrguardNoLeeder}",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "helm accepted an unknown alert name");
    assert!(
        err.contains("\"MrguardNoLeeder\" is not an mrguard alert")
            && err.contains("MrguardNoLeader"),
        "{err}"
    );
}

#[test]
fn dashboard_has_its_variables_and_every_panel_on_the_right_metric() {
    let d = dashboard();
    assert!(
        d["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "a stable uid"
    );
    let vars: BTreeMap<&str, &Value> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    assert_eq!(vars["datasource"]["type"], "datasource");
    assert_eq!(vars["datasource"]["query"], "prometheus");
    for name in ["namespace", "job"] {
        let v = vars
            .get(name)
            .unwrap_or_else(|| panic!("no ${name} variable"));
        assert_eq!(v["type"], "query", "${name}");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "${name}");
        assert!(
            promql::variable_query(v).is_some_and(|q| q.contains(&format!(", {name})"))),
            "${name}: {v}"
        );
    }
    assert!(
        promql::variable_query(vars["job"])
            .unwrap()
            .contains("namespace=\"$namespace\""),
        "$job lists the jobs of the chosen namespace"
    );

    // Every query goes to the chosen data source and this release's series.
    for p in promql::panels(&d)
        .into_iter()
        .filter(|p| p["type"] != "row")
    {
        let title = p["title"].as_str().unwrap();
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {title}");
        assert!(
            p["description"].as_str().is_some_and(|s| !s.is_empty()),
            "panel {title} has no description"
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {title}");
            let expr = t["expr"].as_str().unwrap();
            let ast = promql::parse(expr).unwrap_or_else(|e| panic!("panel {title}: {e}\n{expr}"));
            for vs in promql::selectors(&ast) {
                let m = promql::equality_matchers(vs);
                assert_eq!(
                    (
                        m.get("namespace").map(String::as_str),
                        m.get("job").map(String::as_str)
                    ),
                    (Some("var-namespace"), Some("var-job")),
                    "panel {title}: every selector is scoped to $namespace and $job: {expr}"
                );
            }
        }
    }

    // The panels and what they must read.
    let wanted: [(&str, &str, Matchers<'_>); 13] = [
        (
            "Admission rate by webhook and result",
            "mrguard_admission_requests_total",
            &[],
        ),
        (
            "Denials by rule",
            "mrguard_rule_findings_total",
            &[("action", "Deny")],
        ),
        (
            "Latency percentiles",
            "mrguard_admission_duration_seconds_bucket",
            &[],
        ),
        (
            "Patch rate",
            "mrguard_admission_requests_total",
            &[("result", "patched")],
        ),
        (
            "Rejected requests",
            "mrguard_admission_requests_total",
            &[("result", "error")],
        ),
        ("Leader", "mrguard_controller_leader", &[]),
        ("Covered kinds", "mrguard_controller_covered_kinds", &[]),
        ("Audit findings by rule", "mrguard_audit_violations", &[]),
        (
            "Last complete audit pass",
            "mrguard_audit_last_success_timestamp_seconds",
            &[],
        ),
        (
            "Certificate expiry",
            "mrguard_tls_certificate_expiry_timestamp_seconds",
            &[],
        ),
        (
            "Reload failures",
            "mrguard_config_reloads_total",
            &[("result", "failure")],
        ),
        (
            "Reload failures",
            "mrguard_tls_reloads_total",
            &[("result", "failure")],
        ),
        (
            "Kubernetes API errors",
            "mrguard_controller_api_errors_total",
            &[],
        ),
    ];
    for (title, metric, matchers) in wanted {
        let found = promql::panel_exprs(panel(&d, title)).iter().any(|e| {
            promql::selectors(&promql::parse(e).unwrap())
                .iter()
                .any(|vs| {
                    let m = promql::equality_matchers(vs);
                    promql::selector_name(vs).as_deref() == Some(metric)
                        && matchers
                            .iter()
                            .all(|(k, v)| m.get(*k).map(String::as_str) == Some(*v))
                })
        });
        assert!(found, "panel {title:?} does not read {metric}{matchers:?}");
    }
    let admission =
        promql::panel_exprs(panel(&d, "Admission rate by webhook and result")).join(" ");
    assert!(admission.contains("by (webhook, result)"), "{admission}");

    // p50, p90, p99 of the duration histogram.
    let mut quantiles = BTreeSet::new();
    for e in promql::panel_exprs(panel(&d, "Latency percentiles")) {
        promql::walk(&promql::parse(&e).unwrap(), &mut |x| {
            if let promql_parser::parser::Expr::Call(c) = x {
                if c.func.name == "histogram_quantile" {
                    if let promql_parser::parser::Expr::NumberLiteral(n) = c.args.args[0].as_ref() {
                        quantiles.insert((n.val * 100.0).round() as u32);
                    }
                }
            }
        });
    }
    assert_eq!(quantiles, BTreeSet::from([50, 90, 99]));
    let expiry = promql::panel_exprs(panel(&d, "Certificate expiry")).join(" ");
    assert!(
        expiry.contains("- time()"),
        "expiry is shown as time left: {expiry}"
    );

    // Unique ids and no two panels on the same cells.
    let all_panels = promql::panels(&d);
    let ids: BTreeSet<u64> = all_panels
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), all_panels.len(), "panel ids are unique");
    let rect = |p: &Value| {
        let g = &p["gridPos"];
        let n = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("gridPos.{k} of {}", p["title"]))
        };
        (n("x"), n("y"), n("w"), n("h"))
    };
    for (i, a) in all_panels.iter().enumerate() {
        let (ax, ay, aw, ah) = rect(a);
        assert!(ax + aw <= 24, "panel {} is wider than the grid", a["title"]);
        for b in &all_panels[i + 1..] {
            let (bx, by, bw, bh) = rect(b);
            let overlap = ax < bx + bw && bx < ax + aw && ay < by + bh && by < ay + ah;
            assert!(!overlap, "panels {} and {} overlap", a["title"], b["title"]);
        }
    }
}

/// The chart has no reload-alert window value: a values file that sets
/// one is refused and told what replaced it.
#[test]
fn the_removed_reload_window_value_is_refused_with_its_replacement() {
    let out = helm(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.reloadFailures.window=15m",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "helm accepted reloadFailures.window");
    assert!(err.contains("reloadFailures.for"), "{err}");
}

#[test]
fn every_promql_expression_of_the_dashboard_and_the_alerts_parses() {
    let mut exprs = promql::dashboard_exprs(&dashboard());
    let variants: [&[&str]; 3] = [
        &[],
        &[
            "--set",
            "controller.auditInterval=90s",
            "--set",
            "metrics.prometheusRule.selector=job=\"custom\"",
            "--set",
            "metrics.prometheusRule.reloadFailures.for=1h30m",
            "--set",
            "metrics.prometheusRule.creationIncomplete.window=2h",
        ],
        &[
            "--set",
            "rbac.create=false",
            "--set",
            "rbac.audit.enabled=false",
        ],
    ];
    for extra in variants {
        for (alert, expr) in alert_exprs(extra) {
            exprs.push((format!("alert {alert} with {extra:?}"), expr));
        }
    }
    let failures: Vec<String> = exprs
        .iter()
        .filter_map(|(at, e)| {
            promql::parse(e)
                .err()
                .map(|err| format!("{at}: {err}\n  {e}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "PromQL that does not parse:\n{}",
        failures.join("\n")
    );
    assert!(exprs.len() > 30, "only {} expressions found", exprs.len());
}

#[test]
fn every_metric_the_dashboard_and_alerts_name_is_registered_by_mrguard() {
    let series = registered_series();
    let mut sources: Vec<(String, String)> = promql::dashboard_exprs(&dashboard());
    for (alert, expr) in alert_exprs(&[]) {
        sources.push((format!("alert {alert}"), expr));
    }
    let named = promql::metric_names(sources.iter().map(|(_, e)| e));
    let missing: Vec<&String> = named.iter().filter(|n| !series.contains_key(*n)).collect();
    assert!(
        missing.is_empty(),
        "named in the dashboard or alerts but not registered by mrguard: {missing:?}\nregistered: {:?}",
        series.keys().collect::<Vec<_>>()
    );
    // The brief's metrics are all there.
    for m in [
        "mrguard_admission_requests_total",
        "mrguard_admission_duration_seconds_bucket",
        "mrguard_rule_findings_total",
        "mrguard_tls_certificate_expiry_timestamp_seconds",
        "mrguard_controller_leader",
        "mrguard_controller_covered_kinds",
        "mrguard_audit_violations",
        "mrguard_audit_last_success_timestamp_seconds",
        "mrguard_config_reloads_total",
        "mrguard_tls_reloads_total",
        "mrguard_controller_api_errors_total",
        "mrguard_managed_resources",
    ] {
        assert!(named.contains(m), "{m} is not used");
    }

    // Label values that come from mrguard's types must be ones it exports.
    let mut wrong = Vec::new();
    for (at, expr) in &sources {
        for vs in promql::selectors(&promql::parse(expr).unwrap()) {
            let name = promql::selector_name(vs).unwrap();
            for (label, value) in promql::equality_matchers(vs) {
                if !CHECKED_LABELS.contains(&label.as_str()) {
                    continue;
                }
                let exported = series[&name].iter().any(|l| l.get(&label) == Some(&value));
                if !exported {
                    wrong.push(format!("{at}: {name}{{{label}=\"{value}\"}}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "label values mrguard never exports:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn alerts_have_severity_summary_description_and_a_runbook_section() {
    let objs = render(&BOTH_ON);
    let rules = rules(&objs);
    assert_eq!(
        alert_names(&rules),
        ALERTS.iter().map(|s| s.to_string()).collect(),
        "the default values render every alert"
    );
    // No canonical URL is assumed: by default the `runbook` annotation
    // names the section in the repository's docs and there is no runbook_url.
    assert_eq!(values()["metrics"]["prometheusRule"]["runbookBaseUrl"], "");
    let base = TROUBLESHOOTING.to_string();
    let doc = read(TROUBLESHOOTING);
    let sections = markdown_sections(&doc);
    for r in &rules {
        let alert = r["alert"].as_str().unwrap();
        assert!(
            matches!(
                r["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ),
            "{alert}: severity {}",
            r["labels"]["severity"]
        );
        for a in ["summary", "description"] {
            let text = r["annotations"][a].as_str().unwrap_or("");
            assert!(text.len() > 20, "{alert}: annotation {a} is {text:?}");
        }
        assert!(r["annotations"].get("runbook_url").is_none(), "{alert}");
        let url = r["annotations"]["runbook"].as_str().unwrap();
        let anchor = url
            .strip_prefix(&format!("{base}#"))
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url} is not {base}#<anchor>"));
        let section = sections
            .get(anchor)
            .unwrap_or_else(|| panic!("{alert}: {TROUBLESHOOTING} has no section #{anchor}"));
        for part in ["**What it means.**", "**How to check.**", "**How to fix.**"] {
            assert!(
                section.contains(part),
                "{TROUBLESHOOTING}#{anchor} lacks {part}"
            );
        }
    }
    assert!(
        base.ends_with(TROUBLESHOOTING),
        "runbookBaseUrl {base} points at {TROUBLESHOOTING}"
    );
}

/// Heading anchors (GitHub's: lower case, punctuation dropped, spaces to
/// dashes, `-1`, `-2` for repeats) to the text under the heading.
fn markdown_sections(doc: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_code = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            let title = line.trim_start_matches('#').trim();
            let mut slug: String = title
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            if *n > 0 {
                slug = format!("{slug}-{n}");
            }
            *n += 1;
            sections.insert(slug.clone(), String::new());
            current = Some(slug);
            continue;
        }
        if let Some(c) = &current {
            let s = sections.get_mut(c).unwrap();
            s.push_str(line);
            s.push('\n');
        }
    }
    sections
}

#[test]
fn alert_scoping_and_thresholds_follow_the_values() {
    let v = values();
    let pr = &v["metrics"]["prometheusRule"];
    let seconds = |d: &str| mrguard::cli::parse_duration(d).unwrap().as_secs_f64();

    // Defaults: this release's job and namespace, thresholds from values.
    let objs = render(&BOTH_ON);
    let rs = rules(&objs);
    for r in &rs {
        for vs in promql::selectors(&promql::parse(expr_of(r)).unwrap()) {
            let m = promql::equality_matchers(vs);
            assert_eq!(
                (
                    m.get("namespace").map(String::as_str),
                    m.get("job").map(String::as_str)
                ),
                (Some(NS), Some(RELEASE)),
                "{}: {}",
                r["alert"],
                expr_of(r)
            );
        }
    }
    let f = |v: &Value| v.as_f64().unwrap();
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardWebhookErrors")),
        [f(&pr["webhookErrors"]["ratio"])]
    );
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardCertificateExpiresSoon")),
        [f(&pr["certificateExpiry"]["days"]) * 86400.0, 0.0]
    );
    let stale = seconds(v["controller"]["auditInterval"].as_str().unwrap())
        * f(&pr["auditStale"]["intervals"]);
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardAuditStale")),
        [stale, stale]
    );
    assert_eq!(thresholds_of(rule(&rs, "MrguardNoLeader")), [1.0]);
    // Both halves compare with 0: every watch but an MR kind's, and an MR
    // kind's on anything but a 403 (MrguardKindsForbidden has those).
    let watch = rule(&rs, "MrguardWatchFailing");
    assert_eq!(thresholds_of(watch), [0.0, 0.0]);
    assert!(
        expr_of(watch).contains(r#"resource!="managed resources""#)
            && expr_of(watch).contains(r#"resource="managed resources", code!="403""#),
        "{}",
        expr_of(watch)
    );
    assert_eq!(thresholds_of(rule(&rs, "MrguardKindsForbidden")), [0.0]);
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardCreationIncompleteSpike")),
        [f(&pr["creationIncomplete"]["increase"])]
    );
    for (alert, key) in [
        ("MrguardWebhookErrors", "webhookErrors"),
        ("MrguardNoLeader", "noLeader"),
        ("MrguardCreationIncompleteSpike", "creationIncomplete"),
    ] {
        assert_eq!(
            rule(&rs, alert)["labels"]["severity"],
            pr[key]["severity"],
            "{alert}"
        );
    }
    assert_eq!(
        rule(&rs, "MrguardWebhookSlow")["for"],
        pr["webhookLatency"]["for"]
    );

    // Everything changed.
    let objs = render(&[
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.selector=job=\"custom\"",
        "--set-json",
        "metrics.prometheusRule.webhookErrors.ratio=0.2",
        "--set",
        "metrics.prometheusRule.webhookErrors.for=1m",
        "--set",
        "metrics.prometheusRule.certificateExpiry.days=14",
        "--set",
        "controller.auditInterval=30m",
        "--set",
        "metrics.prometheusRule.auditStale.intervals=2",
        "--set",
        "metrics.prometheusRule.noLeader.severity=critical",
        "--set",
        "metrics.prometheusRule.reloadFailures.for=1h",
        "--set",
        "metrics.prometheusRule.creationIncomplete.increase=7",
        "--set",
        "metrics.prometheusRule.creationIncomplete.window=2h",
        "--set",
        "metrics.prometheusRule.additionalAlertLabels.team=platform",
        "--set",
        "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        "--set",
        "metrics.prometheusRule.runbookBaseUrl=https://runbooks.example.com/mrguard",
        "--set",
        "metrics.prometheusRule.disabled={MrguardWatchFailing}",
    ]);
    let rule_obj = all(&objs, "PrometheusRule")[0];
    assert_eq!(
        rule_obj["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let rs = rules(&objs);
    assert!(!alert_names(&rs).contains("MrguardWatchFailing"));
    assert_eq!(alert_names(&rs).len(), ALERTS.len() - 1);
    for r in &rs {
        assert_eq!(r["labels"]["team"], "platform", "{}", r["alert"]);
        let url = r["annotations"]["runbook_url"].as_str().unwrap();
        assert!(
            url.starts_with("https://runbooks.example.com/mrguard#"),
            "{url}"
        );
        for vs in promql::selectors(&promql::parse(expr_of(r)).unwrap()) {
            let m = promql::equality_matchers(vs);
            assert_eq!(m.get("job").map(String::as_str), Some("custom"));
            assert!(
                !m.contains_key("namespace"),
                "the selector replaces the default"
            );
        }
    }
    assert_eq!(thresholds_of(rule(&rs, "MrguardWebhookErrors")), [0.2]);
    assert_eq!(rule(&rs, "MrguardWebhookErrors")["for"], "1m");
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardCertificateExpiresSoon")),
        [14.0 * 86400.0, 0.0]
    );
    let stale = seconds("30m") * 2.0;
    assert_eq!(
        thresholds_of(rule(&rs, "MrguardAuditStale")),
        [stale, stale]
    );
    assert_eq!(
        rule(&rs, "MrguardNoLeader")["labels"]["severity"],
        "critical"
    );
    for alert in [
        "MrguardConfigReloadFailed",
        "MrguardCertificateReloadFailed",
    ] {
        let r = rule(&rs, alert);
        assert_eq!(r["for"], "1h", "{alert}");
        assert!(
            expr_of(r).contains("_last_reload_successful{") && expr_of(r).ends_with("== 0"),
            "{alert} fires while the newest file is bad, not for a window after: {}",
            expr_of(r)
        );
    }
    let spike = rule(&rs, "MrguardCreationIncompleteSpike");
    assert_eq!(thresholds_of(spike), [7.0]);
    assert!(expr_of(spike).contains("offset 2h"), "{}", expr_of(spike));

    // The audit alert needs the audit's RBAC; without the chart's roles the
    // operator grants them, so the alert stays.
    let names = |extra: &[&str]| alert_names(&rules(&render(&[&BOTH_ON[..], extra].concat())));
    assert!(!names(&["--set", "rbac.audit.enabled=false"]).contains("MrguardAuditStale"));
    assert!(!names(&["--set", "rbac.audit.enabled=false"]).contains("MrguardKindsForbidden"));
    assert!(names(&[
        "--set",
        "rbac.create=false",
        "--set",
        "rbac.audit.enabled=false"
    ])
    .contains("MrguardAuditStale"));
}

#[test]
fn latency_alert_compares_p99_with_the_timeouts_capped_at_the_largest_bucket() {
    // histogram_quantile never reports more than the largest finite bucket,
    // so the chart caps the threshold there; read that bucket from mrguard.
    let series = registered_series();
    let top = series["mrguard_admission_duration_seconds_bucket"]
        .iter()
        .filter_map(|l| l["le"].parse::<f64>().ok())
        .filter(|le| le.is_finite())
        .fold(0.0_f64, f64::max);
    assert!(top > 0.0);

    let v = values();
    let ratio = v["metrics"]["prometheusRule"]["webhookLatency"]["timeoutRatio"]
        .as_f64()
        .unwrap();
    let timeout = |w: &str| v["webhooks"][w]["timeoutSeconds"].as_f64().unwrap();
    let rs = rules(&render(&BOTH_ON));
    let slow = rule(&rs, "MrguardWebhookSlow");
    assert_eq!(
        thresholds_of(slow),
        [
            (ratio * timeout("mutating")).min(top),
            (ratio * timeout("validating")).min(top)
        ],
        "{}",
        expr_of(slow)
    );
    let per_webhook: Vec<String> = promql::selectors(&promql::parse(expr_of(slow)).unwrap())
        .iter()
        .map(|vs| promql::equality_matchers(vs)["webhook"].clone())
        .collect();
    assert_eq!(per_webhook, ["mutate", "validate"]);

    // Below the cap the threshold is the share of each webhook's own timeout.
    let rs = rules(&render(
        &[
            &BOTH_ON[..],
            &[
                "--set",
                "webhooks.mutating.timeoutSeconds=1",
                "--set",
                "webhooks.validating.timeoutSeconds=1",
                // --set keeps a float as a string.
                "--set-json",
                "metrics.prometheusRule.webhookLatency.timeoutRatio=0.25",
            ],
        ]
        .concat(),
    ));
    assert_eq!(thresholds_of(rule(&rs, "MrguardWebhookSlow")), [0.25, 0.25]);
}

// ---------------------------------------------------------------- chart README

const README_BEGIN: &str = "<!-- BEGIN GENERATED: values -->";
const README_END: &str = "<!-- END GENERATED: values -->";

#[test]
fn helm_docs_generator_follows_the_helm_docs_rules() {
    let yaml = r#"
# Not a description.
# -- The image.
image:
  # -- Repository.
  repository: nginx
  tag: "1.25"
# -- Pods: `<n>` or <n> | more.
replicas: 2
nested:
  # -- A ratio
  # over two lines.
  # @default -- half
  ratio: 0.5
  plain: true
  list:
    - a
"dotted.key":
  # -- Null value.
  empty: ~
  # -- Empty map.
  map: {}
"#;
    let rows = helm_docs::rows(yaml).unwrap();
    let table = helm_docs::table(&rows);
    let expected = "\
| Key | Type | Default | Description |
|-----|------|---------|-------------|
| \"dotted.key\".empty | string | `nil` | Null value. |
| \"dotted.key\".map | object | `{}` | Empty map. |
| image | object | `{\"repository\":\"nginx\",\"tag\":\"1.25\"}` | The image. |
| image.repository | string | `\"nginx\"` | Repository. |
| nested.list[0] | string | `\"a\"` |  |
| nested.plain | bool | `true` |  |
| nested.ratio | float | half | A ratio over two lines. |
| replicas | int | `2` | Pods: `<n>` or &lt;n&gt; \\| more. |
";
    assert_eq!(table, expected);
    assert_eq!(
        helm_docs::undocumented(&rows),
        ["nested.list[0]", "nested.plain"]
    );
    let orphan = "# -- Lost: a blank line follows.\n\nkey: 1\n";
    assert_eq!(helm_docs::orphan_descriptions(orphan).unwrap(), [1]);
}

#[test]
fn every_value_has_a_description() {
    let yaml = read("charts/mrguard/values.yaml");
    let rows = helm_docs::rows(&yaml).expect("values.yaml parses");
    let undocumented = helm_docs::undocumented(&rows);
    assert!(
        undocumented.is_empty(),
        "values without a `# --` description (on the key or a parent): {undocumented:?}"
    );
    let orphans = helm_docs::orphan_descriptions(&yaml).unwrap();
    assert!(
        orphans.is_empty(),
        "`# --` comments that are not directly above a key, values.yaml lines {orphans:?}"
    );
    for key in [
        "metrics.dashboard.enabled",
        "metrics.prometheusRule.enabled",
        "config",
    ] {
        assert!(rows.iter().any(|r| r.key == key), "no row for {key}");
    }
}

#[test]
fn chart_readme_values_table_is_generated_from_values_yaml() {
    let rows = helm_docs::rows(&read("charts/mrguard/values.yaml")).expect("values.yaml parses");
    check_generated(CHART_README, &helm_docs::table(&rows));
}

/// Compares the text between the markers with `generated`; with
/// MRGUARD_UPDATE_DOCS=1 it rewrites the file instead.
fn check_generated(path: &str, generated: &str) {
    let text = read(path);
    let (Some(b), Some(e)) = (text.find(README_BEGIN), text.find(README_END)) else {
        panic!("{path} has no {README_BEGIN} … {README_END} block");
    };
    let start = b + README_BEGIN.len();
    let committed = text[start..e].trim_matches('\n');
    let generated = generated.trim_matches('\n');
    if committed == generated {
        return;
    }
    if std::env::var("MRGUARD_UPDATE_DOCS").as_deref() == Ok("1") {
        let updated = format!("{}\n{generated}\n{}", &text[..start], &text[e..]);
        std::fs::write(root().join(path), updated).unwrap();
        return;
    }
    let old: BTreeSet<&str> = committed.lines().collect();
    let new: BTreeSet<&str> = generated.lines().collect();
    let mut diff = String::new();
    for l in committed.lines().filter(|l| !new.contains(l)) {
        diff.push_str(&format!("- {l}\n"));
    }
    for l in generated.lines().filter(|l| !old.contains(l)) {
        diff.push_str(&format!("+ {l}\n"));
    }
    panic!(
        "{path} is out of date with values.yaml; regenerate with \
         `MRGUARD_UPDATE_DOCS=1 cargo test -p mrguard --test it observability`:\n{diff}"
    );
}

#[test]
fn links_in_the_observability_docs_resolve() {
    for doc in [
        "docs/observability.md",
        TROUBLESHOOTING,
        CHART_README,
        "docs/helm.md",
    ] {
        let text = read(doc);
        let dir = Path::new(doc).parent().unwrap();
        let sections = markdown_sections(&text);
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            if file.is_empty() {
                assert!(sections.contains_key(anchor), "{doc}: no section #{anchor}");
                continue;
            }
            let path = root().join(dir).join(file);
            assert!(path.exists(), "{doc}: link {target} points at nothing");
            if !anchor.is_empty() && file.ends_with(".md") {
                let other = markdown_sections(&std::fs::read_to_string(&path).unwrap());
                assert!(
                    other.contains_key(anchor),
                    "{doc}: {target}: no such section"
                );
            }
        }
    }
    assert!(
        read("docs/helm.md").contains("(observability.md)"),
        "docs/helm.md links docs/observability.md"
    );
}

// ------------------------------------------------------ alert unit tests

/// promtool, from `$PROMTOOL_BIN` or `.tools/bin/promtool`, which
/// `scripts/install-tools.sh` installs (scripts/test.sh runs it).
/// Without it this test fails, on purpose, as the helm tests do.
fn promtool() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL_BIN").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let local = root().join(".tools/bin/promtool");
    assert!(
        local.exists(),
        "promtool not found: run `scripts/install-tools.sh` (it installs {}) or set PROMTOOL_BIN",
        local.display()
    );
    local
}

/// Every alert of the chart, rendered with its default values, passes the
/// unit tests in tests/alerts/ (`promtool test rules`): each fires on a
/// series that should fire it, only once its `for:` has passed, and stays
/// silent on a healthy one. A new alert without both cases fails here.
#[test]
fn every_alert_fires_when_it_should_and_stays_silent_otherwise() {
    let objs = render(&["--set", "metrics.prometheusRule.enabled=true"]);
    let prom_rule = all(&objs, "PrometheusRule")[0];
    let dir = tempfile::tempdir().unwrap();
    // JSON is YAML: promtool reads the rendered groups as they are.
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::json!({"groups": prom_rule["spec"]["groups"]}).to_string(),
    )
    .unwrap();

    let mut files = Vec::new();
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("tests/alerts")).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".test.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let suite: Value = serde_saphyr::from_str(&text).unwrap();
        for test in suite["tests"].as_array().unwrap() {
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let name = case["alertname"].as_str().unwrap().to_string();
                match case["exp_alerts"].as_array() {
                    Some(a) if !a.is_empty() => firing.insert(name),
                    _ => silent.insert(name),
                };
            }
        }
        let name = path.file_name().unwrap().to_owned();
        std::fs::write(dir.path().join(&name), text).unwrap();
        files.push(name);
    }
    let alerts = alert_names(&rules(&objs));
    let untested: Vec<String> = alerts
        .iter()
        .filter(|a| !firing.contains(*a) || !silent.contains(*a))
        .map(|a| {
            format!(
                "{a} (firing case: {}, silent case: {})",
                firing.contains(a),
                silent.contains(a)
            )
        })
        .collect();
    assert!(
        untested.is_empty(),
        "alerts without a firing and a silent case in tests/alerts/: {untested:?}"
    );

    let out = std::process::Command::new(promtool())
        .arg("test")
        .arg("rules")
        .args(&files)
        .current_dir(dir.path())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
