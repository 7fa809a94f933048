//! Label selectors, and the objects `kubectl apply --prune -l SELECTOR`
//! would delete: live objects of the applied kinds that the selector
//! matches, that kubectl applied (they carry its last-applied annotation),
//! in a namespace the apply visited (or cluster-scoped), and that the
//! manifests no longer hold.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::admission::api_server::identity;
use crate::commands::merge::LAST_APPLIED;

/// Why a selector cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse the label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What is wrong.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A label selector in kubectl's syntax: `a=b`, `a==b`, `a!=b`,
/// `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, joined by commas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

/// The parts of `s` split on commas outside parentheses.
fn parts(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl Selector {
    /// Parses a selector; the empty selector matches everything.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: selector.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Selector(reqs));
        }
        for part in parts(selector) {
            let p = part.trim();
            let key = |k: &str| {
                let k = k.trim();
                if valid_key(k) {
                    Ok(k.to_string())
                } else {
                    Err(err(format!("{k:?} is not a label key")))
                }
            };
            let set = |v: &str| -> Result<Vec<String>, SelectorError> {
                let v = v.trim();
                let inner = v
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .ok_or_else(|| err(format!("{v:?} is not a set like (a,b)")))?;
                Ok(inner.split(',').map(|x| x.trim().to_string()).collect())
            };
            let req = if let Some((k, v)) = p.split_once("!=") {
                Requirement::NotEquals(key(k)?, v.trim().to_string())
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Requirement::Equals(key(k)?, v.trim().to_string())
            } else if let Some((k, v)) = p.split_once(" notin ") {
                Requirement::NotIn(key(k)?, set(v)?)
            } else if let Some((k, v)) = p.split_once(" in ") {
                Requirement::In(key(k)?, set(v)?)
            } else if let Some(k) = p.strip_prefix('!') {
                Requirement::NotExists(key(k)?)
            } else {
                Requirement::Exists(key(p)?)
            };
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// Whether the labels of `object` satisfy it.
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

/// The live objects a prune would delete: those `selector` matches that
/// kubectl applied, cluster-scoped or in a namespace of `namespaces`, and
/// that `applied` (the manifests, with their namespaces set) does not hold.
pub fn prune_candidates<'a>(
    live: &'a [Value],
    applied: &[Value],
    selector: &Selector,
    namespaces: &[String],
) -> Vec<&'a Value> {
    let held: Vec<_> = applied.iter().map(identity).collect();
    live.iter()
        .filter(|o| selector.matches_object(o))
        .filter(|o| {
            o.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(LAST_APPLIED))
        })
        .filter(|o| {
            let (api_version, kind, ns, name) = identity(o);
            let group = |a: &str| a.rsplit_once('/').map_or("", |(g, _)| g).to_string();
            (ns.is_empty() || namespaces.contains(&ns))
                && !held.iter().any(|(a, k, n, m)| {
                    group(a) == group(&api_version) && *k == kind && *n == ns && *m == name
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_form_of_requirement() {
        let l = labels(&[("app", "web"), ("tier", "db")]);
        for (s, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, api)", true),
            ("app notin (web,api)", false),
            ("tier", true),
            ("!tier", false),
            ("!gone", true),
            ("app=web,tier=db", true),
            ("app=web,tier=x", false),
            ("", true),
        ] {
            assert_eq!(Selector::parse(s).unwrap().matches(&l), want, "{s}");
        }
    }

    #[test]
    fn bad_selectors_name_what_is_wrong() {
        let e = Selector::parse("app in web").unwrap_err().to_string();
        assert!(e.contains("\"web\" is not a set"), "{e}");
        let e = Selector::parse("a b=c").unwrap_err().to_string();
        assert!(e.contains("\"a b\""), "{e}");
    }

    #[test]
    fn a_prune_takes_applied_objects_no_longer_held_in_visited_namespaces() {
        let obj = |ns: &str, name: &str, applied: bool, team: &str| {
            let mut o = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                "metadata": {"name": name, "labels": {"team": team}, "annotations": {}}});
            if !ns.is_empty() {
                o["metadata"]["namespace"] = json!(ns);
            }
            if applied {
                o["metadata"]["annotations"][LAST_APPLIED] = json!("{}");
            }
            o
        };
        let live = vec![
            obj("a", "kept", true, "x"),
            obj("a", "gone", true, "x"),
            obj("a", "by-hand", false, "x"),
            obj("a", "other-team", true, "y"),
            obj("b", "elsewhere", true, "x"),
            obj("", "cluster", true, "x"),
        ];
        let applied = vec![obj("a", "kept", true, "x")];
        let sel = Selector::parse("team=x").unwrap();
        let names: Vec<String> = prune_candidates(&live, &applied, &sel, &["a".into()])
            .iter()
            .map(|o| identity(o).3)
            .collect();
        assert_eq!(names, ["gone", "cluster"]);
    }
}
