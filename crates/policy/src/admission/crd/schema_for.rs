//! Which CRD version judges an object in `mrguard check --crd`, and what
//! the API server would say when none does.

use super::{CrdError, CrdVersion, Crds, Lookup};

/// API groups the API server serves itself: their objects need no CRD.
pub fn builtin_group(group: &str) -> bool {
    matches!(
        group,
        "" | "apps" | "autoscaling" | "batch" | "policy" | "extensions"
    ) || group.ends_with(".k8s.io")
}

/// How an object of `apiVersion`/`kind` meets the CRDs read from a path.
#[derive(Debug)]
pub enum SchemaFor<'a> {
    /// This version's schema judges it.
    Found(&'a CrdVersion),
    /// The API server would refuse it: "no matches for kind ...".
    NoMatch(String),
    /// Judged without a schema, with this note for the reader.
    Unchecked(String),
    /// Judged without a schema, nothing to say (a built-in group, or a
    /// DELETE of a kind the CRDs do not serve).
    None,
}

/// What `crds` (read from `path`) give an object of `api_version`/`kind`;
/// `deleting` objects are never refused for their version or kind, and
/// `require_crd` refuses a group no CRD defines. A CRD with rules mrguard
/// cannot evaluate is an error: never judge with only part of its rules.
pub fn schema_for<'a>(
    crds: &'a Crds,
    api_version: &str,
    kind: &str,
    deleting: bool,
    require_crd: bool,
    path: &str,
) -> Result<SchemaFor<'a>, CrdError> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Ok(match crds.lookup(api_version, kind) {
        Lookup::Found(v) => {
            v.ensure_supported()?;
            SchemaFor::Found(v)
        }
        Lookup::NoVersion(c) if !deleting => {
            let served: Vec<&str> = c.versions.iter().map(|v| v.name.as_str()).collect();
            SchemaFor::NoMatch(format!(
                "no matches for kind {kind:?} in version {api_version:?} (CRD {} serves {})",
                c.name,
                served.join(", ")
            ))
        }
        Lookup::NoKind(same_group) if !deleting => {
            let kinds: Vec<&str> = same_group.iter().map(|c| c.kind.as_str()).collect();
            SchemaFor::NoMatch(format!(
                "no matches for kind {kind:?} in version {api_version:?} (the CRDs of {group} in {path} define {})",
                kinds.join(", ")
            ))
        }
        Lookup::NoCrd if !builtin_group(group) => {
            if require_crd && !deleting {
                SchemaFor::NoMatch(format!(
                    "no matches for kind {kind:?} in version {api_version:?} (no CRD in {path} defines group {group:?}, and --require-crd is set)"
                ))
            } else {
                SchemaFor::Unchecked(format!(
                    "schema not checked: no CRD in {path} defines group {group:?} (--require-crd makes this a failure)"
                ))
            }
        }
        _ => SchemaFor::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_groups_need_no_crd_and_others_are_noted_or_refused() {
        let crds = Crds::default();
        let s = |api: &str, deleting, require| match schema_for(
            &crds, api, "K", deleting, require, "crds/",
        )
        .unwrap()
        {
            SchemaFor::Found(_) => "found".to_string(),
            SchemaFor::NoMatch(m) => format!("refused: {m}"),
            SchemaFor::Unchecked(n) => format!("note: {n}"),
            SchemaFor::None => "none".to_string(),
        };
        assert_eq!(s("apps/v1", false, true), "none");
        assert_eq!(s("rbac.authorization.k8s.io/v1", false, true), "none");
        assert_eq!(
            s("s3.aws.upbound.io/v1beta1", false, false),
            "note: schema not checked: no CRD in crds/ defines group \"s3.aws.upbound.io\" (--require-crd makes this a failure)"
        );
        assert!(s("s3.aws.upbound.io/v1beta1", false, true).starts_with(
            "refused: no matches for kind \"K\" in version \"s3.aws.upbound.io/v1beta1\" (no CRD in crds/"
        ));
        // A DELETE is never refused for a missing CRD.
        assert!(s("s3.aws.upbound.io/v1beta1", true, true).starts_with("note: "));
    }
}
