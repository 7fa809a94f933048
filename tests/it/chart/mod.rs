//! The Helm chart (charts/mrguard) and the Dockerfile, checked with a real
//! helm binary: `helm lint`, `helm template` with the default values and
//! with tests/fixtures/values-ha-off.yaml, the rendered YAML parsed and held
//! to the chart's requirements (RBAC, probes, security context, HA), and `helm template --dry-run=server`
//! against a fake API server to prove that an upgrade carries the live
//! caBundle and rules over.
//!
//! helm comes from $HELM_BIN or .tools/bin/helm; `scripts/install-tools.sh`
//! installs the latter. Without it these tests fail, on purpose.
//!
//! One module per area; the helpers they share (rendering, reading the
//! Deployment's container, flags and ports, the admission webhooks) are
//! here.

mod config;
mod dockerfile;
mod lint;
mod objects;
mod rbac;
mod upgrade;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::fixtures;
use crate::support::helm::{self, NS, RELEASE};

const BINARY: &str = "/usr/local/bin/mrguard";

/// The objects of a rendered chart.
struct Manifests(Vec<Value>);

impl Manifests {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self
            .all(kind)
            .into_iter()
            .filter(|o| o["metadata"]["name"] == name)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {kind} {name}, found {}",
            found.len()
        );
        found[0]
    }

    fn only(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
        found[0]
    }

    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.0 {
            *m.entry(o["kind"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        m
    }
}

fn render_in(release: &str, ns: &str, extra: &[&str]) -> Manifests {
    Manifests(helm::template(release, ns, extra))
}

fn render(extra: &[&str]) -> Manifests {
    render_in(RELEASE, NS, extra)
}

/// The values file of an install with high availability off.
fn ha_off() -> String {
    fixtures::path("values-ha-off.yaml")
}

fn render_ha_off() -> Manifests {
    render(&["-f", &ha_off()])
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("not a string: {s}"))
                .to_string()
        })
        .collect()
}

fn set(v: &Value) -> BTreeSet<String> {
    strs(v).into_iter().collect()
}

fn container(m: &Manifests) -> &Value {
    let containers = m.only("Deployment")["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn args_of(m: &Manifests) -> Vec<String> {
    strs(&container(m)["args"])
}

/// The value of `--name=value` in the container's arguments.
fn flag(m: &Manifests, name: &str) -> String {
    let prefix = format!("--{name}=");
    let found: Vec<String> = args_of(m)
        .into_iter()
        .filter_map(|a| a.strip_prefix(&prefix).map(str::to_string))
        .collect();
    assert_eq!(found.len(), 1, "--{name} appears {} times", found.len());
    found[0].clone()
}

fn port_named(m: &Manifests, name: &str) -> u64 {
    let ports = container(m)["ports"].as_array().unwrap();
    let p: Vec<_> = ports.iter().filter(|p| p["name"] == name).collect();
    assert_eq!(p.len(), 1, "container port {name}");
    p[0]["containerPort"].as_u64().unwrap()
}

/// The admission webhook of the one `kind` configuration, named `name`.
fn webhook<'a>(m: &'a Manifests, kind: &str, name: &str) -> &'a Value {
    let cfg = m.only(kind);
    let hooks = cfg["webhooks"].as_array().unwrap();
    // The admission webhook comes first: the controller and the harness
    // look for it by name and manage its rules; the others (Compositions,
    // the teardown guard) have fixed rules.
    assert_eq!(hooks[0]["name"], name);
    &hooks[0]
}
