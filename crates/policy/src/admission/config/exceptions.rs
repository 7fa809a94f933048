//! `exceptions` (docs/policy-operations.md#exceptions): reviewed waivers of
//! named rules for the objects they match (MRs, Compositions, and the
//! namespaces, Secrets and Providers the teardown guard judges), each with
//! a reason and an optional expiry.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde::Deserialize;
use wildmatch::WildMatch;

use super::{invalid, ConfigError, ResourceConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawException {
    name: String,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(default, rename = "match")]
    matches: RawMatch,
    reason: Option<String>,
    expires: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    users: Vec<String>,
}

/// One validated exception.
#[derive(Debug, Clone)]
pub struct Exception {
    /// Its name, unique in the configuration.
    pub name: String,
    /// The rules it waives: built-in names or `cel:<name>`.
    pub rules: Vec<String>,
    names: Vec<WildMatch>,
    namespaces: Vec<WildMatch>,
    /// `group/Kind` globs.
    kinds: Vec<WildMatch>,
    users: Vec<WildMatch>,
    /// Why it was granted.
    pub reason: String,
    /// When it stops applying.
    pub expires: Option<Timestamp>,
}

/// What an exception is matched against.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The API group.
    pub group: &'a str,
    /// The kind.
    pub kind: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// The namespace, empty for cluster scope.
    pub namespace: &'a str,
    /// The requesting user, empty when unknown (the audit).
    pub user: &'a str,
}

fn any(globs: &[WildMatch], s: &str) -> bool {
    globs.is_empty() || globs.iter().any(|g| g.matches(s))
}

impl Exception {
    /// Whether it has expired at `now`.
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|t| now >= t)
    }

    /// Whether it waives `rule` for `s` at `now`: every given match key
    /// matches, and it has not expired.
    pub fn waives(&self, rule: &str, s: &Subject<'_>, now: Timestamp) -> bool {
        self.rules.iter().any(|r| r == rule)
            && !self.expired(now)
            && any(&self.names, s.name)
            && any(&self.namespaces, s.namespace)
            && any(&self.kinds, &format!("{}/{}", s.group, s.kind))
            && (self.users.is_empty() || (!s.user.is_empty() && any(&self.users, s.user)))
    }

    /// Whether its `match` keys other than `users` match `s` (expired or
    /// not): what `explain` shows for an object with no request.
    pub fn matches_object(&self, s: &Subject<'_>) -> bool {
        any(&self.names, s.name)
            && any(&self.namespaces, s.namespace)
            && any(&self.kinds, &format!("{}/{}", s.group, s.kind))
    }

    /// Whether it applies only to some users.
    pub fn has_users(&self) -> bool {
        !self.users.is_empty()
    }

    /// `match` as written: names, namespaces, kinds, users (globs).
    pub fn match_globs(&self) -> [Vec<String>; 4] {
        let g = |v: &[WildMatch]| v.iter().map(|x| x.to_string()).collect();
        [
            g(&self.names),
            g(&self.namespaces),
            g(&self.kinds),
            g(&self.users),
        ]
    }

    /// `match.kinds` as written.
    pub fn kinds(&self) -> Vec<String> {
        self.kinds.iter().map(|k| k.to_string()).collect()
    }
}

/// Validates the `exceptions` list against the rules and resources the
/// configuration defines.
pub(super) fn validate(
    raw: Vec<RawException>,
    known_rule: &dyn Fn(&str) -> bool,
    resources: &[ResourceConfig],
) -> Result<Vec<Exception>, ConfigError> {
    let mut out: Vec<Exception> = Vec::new();
    let mut names = BTreeSet::new();
    for (i, e) in raw.into_iter().enumerate() {
        let at = format!("exceptions[{i}]");
        if !super::is_rule_name(&e.name) {
            return Err(invalid(
                format!("{at}.name"),
                format!(
                    "{:?} must be lower-case letters, digits and '-', starting with a letter",
                    e.name
                ),
            ));
        }
        if !names.insert(e.name.clone()) {
            return Err(invalid(
                format!("{at}.name"),
                format!("{:?} is defined twice", e.name),
            ));
        }
        let reason = e.reason.unwrap_or_default();
        if reason.trim().is_empty() {
            return Err(invalid(
                format!("{at}.reason"),
                format!(
                    "exception {:?} has no reason; say why it was granted (a ticket, a date)",
                    e.name
                ),
            ));
        }
        if e.rules.is_empty() {
            return Err(invalid(
                format!("{at}.rules"),
                "must name at least one rule",
            ));
        }
        for (j, r) in e.rules.iter().enumerate() {
            if !known_rule(r) {
                return Err(invalid(
                    format!("{at}.rules[{j}]"),
                    format!(
                        "unknown rule {r:?}; known rules are {}, {} and cel:<name> of a defined CEL rule",
                        crate::admission::model::RULE_NAMES.join(", "),
                        crate::admission::model::TEARDOWN
                    ),
                ));
            }
        }
        let m = e.matches;
        for (field, list) in [
            ("names", &m.names),
            ("namespaces", &m.namespaces),
            ("kinds", &m.kinds),
            ("users", &m.users),
        ] {
            if let Some(j) = list.iter().position(|s| s.is_empty()) {
                return Err(invalid(format!("{at}.match.{field}[{j}]"), "is empty"));
            }
        }
        for (j, k) in m.kinds.iter().enumerate() {
            let Some((group, kind)) = k.split_once('/') else {
                return Err(invalid(
                    format!("{at}.match.kinds[{j}]"),
                    format!("{k:?} must be group/Kind, e.g. ec2.aws.upbound.io/VPC"),
                ));
            };
            if group.is_empty() || kind.is_empty() {
                return Err(invalid(
                    format!("{at}.match.kinds[{j}]"),
                    format!("{k:?} must be group/Kind, e.g. ec2.aws.upbound.io/VPC"),
                ));
            }
        }
        let expires = match &e.expires {
            None => None,
            Some(s) => Some(s.parse::<Timestamp>().map_err(|err| {
                invalid(
                    format!("{at}.expires"),
                    format!("{s:?} is not an RFC 3339 time: {err}"),
                )
            })?),
        };
        // A CEL rule applies only to the kinds of the entries defining it:
        // an exception for one must match such a kind, or it waives nothing.
        let probe = |p: &str| p.replace(['*', '?'], "x");
        for r in &e.rules {
            let Some(cel) = r.strip_prefix("cel:") else {
                continue;
            };
            let defined = |entry: &ResourceConfig| entry.cel_rules.iter().any(|c| c.name == cel);
            let reached = if m.kinds.is_empty() {
                resources.iter().any(defined)
            } else {
                m.kinds.iter().any(|k| {
                    let (g, kd) = k.split_once('/').unwrap_or_default();
                    let (g, kd) = (probe(g), probe(kd));
                    resources
                        .iter()
                        .find(|entry| entry.matches(&g, &kd))
                        .is_some_and(defined)
                })
            };
            if !reached {
                return Err(invalid(
                    format!("{at}.match.kinds"),
                    format!(
                        "exception {:?} matches nothing the configuration covers: no kind it matches has the CEL rule {cel:?}",
                        e.name
                    ),
                ));
            }
        }
        // Kinds no resources entry matches get only the built-in rules
        // with their defaults; an exception naming such kinds is a typo
        // more often than not.
        if !m.kinds.is_empty() && !resources.is_empty() {
            for (j, k) in m.kinds.iter().enumerate() {
                let (g, kd) = k.split_once('/').unwrap_or_default();
                if !resources
                    .iter()
                    .any(|entry| entry.matches(&probe(g), &probe(kd)))
                {
                    return Err(invalid(
                        format!("{at}.match.kinds[{j}]"),
                        format!(
                            "exception {:?} matches nothing the configuration covers: no resources entry matches {k:?}",
                            e.name
                        ),
                    ));
                }
            }
        }
        let globs = |v: &[String]| v.iter().map(|s| WildMatch::new(s)).collect::<Vec<_>>();
        out.push(Exception {
            name: e.name,
            rules: e.rules,
            names: globs(&m.names),
            namespaces: globs(&m.namespaces),
            kinds: globs(&m.kinds),
            users: globs(&m.users),
            reason,
            expires,
        });
    }
    Ok(out)
}
