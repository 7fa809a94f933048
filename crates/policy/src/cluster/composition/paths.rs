//! Crossplane's field paths (`spec.forProvider.tags["team"]`,
//! `spec.subnets[0].zone`) as lists of keys, and whether a patch target
//! reaches a configured immutable field.

use crate::admission::fieldpath::{FieldPath, Segment};

/// The keys of a Crossplane field path: `a.b["c.d"][0]` is `a`, `b`, `c.d`,
/// `0`. `None` when it does not parse; Crossplane would refuse it too.
pub(crate) fn keys(path: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = path.trim();
    if rest.is_empty() {
        return None;
    }
    let mut first = true;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let key = r[..end].trim();
            let key = key
                .strip_prefix('"')
                .and_then(|k| k.strip_suffix('"'))
                .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')))
                .unwrap_or(key);
            if key.is_empty() {
                return None;
            }
            out.push(key.to_string());
            rest = &r[end + 1..];
        } else {
            let r = if first { rest } else { rest.strip_prefix('.')? };
            let end = r.find(['.', '[', ']']).unwrap_or(r.len());
            if end == 0 || r[end..].starts_with(']') {
                return None;
            }
            out.push(r[..end].to_string());
            rest = &r[end..];
        }
        first = false;
    }
    Some(out)
}

/// Whether writing `target` (keys) changes what `immutable` selects: the
/// target is the field, inside it, or an object that holds it.
pub(crate) fn reaches(target: &[String], immutable: &FieldPath) -> bool {
    target
        .iter()
        .zip(immutable.segments())
        .all(|(t, s)| match s {
            Segment::Field(k) | Segment::Key(k) => k == t,
            Segment::Wildcard => true,
        })
}

/// `spec.forProvider.x` → `spec.initProvider.x`: where a value the provider
/// reads only at creation goes.
pub(crate) fn init_provider_equivalent(target: &[String]) -> Option<String> {
    match target {
        [spec, fp, rest @ ..] if spec == "spec" && fp == "forProvider" && !rest.is_empty() => {
            let mut keys = vec!["spec".to_string(), "initProvider".to_string()];
            keys.extend(rest.iter().cloned());
            Some(display(&keys))
        }
        _ => None,
    }
}

/// Keys back into Crossplane's spelling, with brackets for keys that hold
/// dots or slashes and for list indexes.
pub(crate) fn display(keys: &[String]) -> String {
    let mut s = String::new();
    for k in keys {
        if k.parse::<usize>().is_ok() || k.contains(['.', '/', ' ']) {
            s.push_str(&format!("[{k}]"));
        } else {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(k);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Vec<String> {
        keys(s).unwrap()
    }

    #[test]
    fn parses_crossplane_paths() {
        assert_eq!(
            k("spec.forProvider.region"),
            ["spec", "forProvider", "region"]
        );
        assert_eq!(
            k("metadata.labels[crossplane.io/claim-name]"),
            ["metadata", "labels", "crossplane.io/claim-name"]
        );
        assert_eq!(
            k("spec.forProvider.tags[\"team.io/x\"]"),
            ["spec", "forProvider", "tags", "team.io/x"]
        );
        assert_eq!(k("spec.subnets[0].zone"), ["spec", "subnets", "0", "zone"]);
        for bad in ["", ".a", "a..b", "a[", "a[]", "a.", "a]"] {
            assert_eq!(keys(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_target_reaches_the_field_its_parents_and_its_insides() {
        let p = FieldPath::parse("spec.forProvider.subnets[*].zone").unwrap();
        assert!(reaches(&k("spec.forProvider.subnets[2].zone"), &p));
        assert!(reaches(&k("spec.forProvider"), &p));
        assert!(reaches(&k("spec.forProvider.subnets[0].zone.x"), &p));
        assert!(!reaches(&k("spec.forProvider.tags"), &p));
        assert!(!reaches(&k("spec.forProvider.subnets[0].id"), &p));
        let r = FieldPath::parse("spec.forProvider.region").unwrap();
        assert!(!reaches(&k("spec.forProvider.regions"), &r));
    }

    #[test]
    fn init_provider_equivalents() {
        assert_eq!(
            init_provider_equivalent(&k("spec.forProvider.region")).as_deref(),
            Some("spec.initProvider.region")
        );
        assert_eq!(init_provider_equivalent(&k("spec.forProvider")), None);
        assert_eq!(init_provider_equivalent(&k("metadata.name")), None);
        assert_eq!(
            display(&k("metadata.labels[a.io/b]")),
            "metadata.labels[a.io/b]"
        );
    }
}
