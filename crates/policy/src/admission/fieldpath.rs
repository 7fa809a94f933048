//! Field paths as the configuration writes them: `spec.forProvider.region`,
//! `spec.forProvider.subnets[*].availabilityZone`, `metadata.labels[team]`.
//!
//! `.name` steps into an object field, `[*]` into every element of a list (or
//! every value of a map), and `[key]` into a map key (or a list index when the
//! key is a number and the value is a list). Keys may hold dots and slashes,
//! which is why annotation keys are written in brackets.

use std::fmt;

use serde_json::Value;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// `.name`: an object field.
    Field(String),
    /// `[key]`: a map key.
    Key(String),
    /// `[*]`: every list item (or map value).
    Wildcard,
}

/// A configured field path: dots, `[*]` and `[key]`, e.g. `spec.forProvider.subnets[*].availabilityZone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    raw: String,
    segments: Vec<Segment>,
}

/// Why a field path does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failed to parse field path {path:?} at character {position}: {reason}")]
pub struct FieldPathError {
    /// The path as written.
    pub path: String,
    /// The byte offset of the problem.
    pub position: usize,
    /// What is wrong there.
    pub reason: &'static str,
}

impl FieldPath {
    /// Parses a path as the configuration writes it.
    pub fn parse(raw: &str) -> Result<Self, FieldPathError> {
        let err = |position: usize, reason: &'static str| FieldPathError {
            path: raw.to_string(),
            position,
            reason,
        };
        if raw.trim().is_empty() {
            return Err(err(0, "the path is empty"));
        }
        let chars: Vec<(usize, char)> = raw.char_indices().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        // A path starts with a field name; afterwards '.' or '[' introduce a step.
        let mut expect_field = true;
        while i < chars.len() {
            let (pos, c) = chars[i];
            match c {
                '[' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && chars[end].1 != ']' {
                        if chars[end].1 == '[' {
                            return Err(err(chars[end].0, "'[' inside brackets"));
                        }
                        end += 1;
                    }
                    if end >= chars.len() {
                        return Err(err(pos, "'[' is never closed"));
                    }
                    let key: String = chars[start..end].iter().map(|(_, c)| c).collect();
                    if key.is_empty() {
                        return Err(err(pos, "empty brackets; use [*] or [key]"));
                    }
                    segments.push(if key == "*" {
                        Segment::Wildcard
                    } else {
                        Segment::Key(key)
                    });
                    i = end + 1;
                    expect_field = false;
                    if i < chars.len() && !matches!(chars[i].1, '.' | '[') {
                        return Err(err(chars[i].0, "expected '.' or '[' after ']'"));
                    }
                }
                '.' => {
                    if expect_field {
                        return Err(err(pos, "empty field name"));
                    }
                    expect_field = true;
                    i += 1;
                    if i >= chars.len() {
                        return Err(err(pos, "the path ends with '.'"));
                    }
                    if chars[i].1 == '[' {
                        return Err(err(chars[i].0, "'[' right after '.'"));
                    }
                }
                ']' => return Err(err(pos, "']' without '['")),
                _ => {
                    if !expect_field {
                        return Err(err(pos, "expected '.' or '['"));
                    }
                    let start = i;
                    while i < chars.len() && !matches!(chars[i].1, '.' | '[' | ']') {
                        i += 1;
                    }
                    let name: String = chars[start..i].iter().map(|(_, c)| c).collect();
                    if name.trim() != name {
                        return Err(err(pos, "field names cannot have surrounding spaces"));
                    }
                    segments.push(Segment::Field(name));
                    expect_field = false;
                }
            }
        }
        if expect_field {
            return Err(err(raw.len(), "the path ends without a field"));
        }
        Ok(Self {
            raw: raw.to_string(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Its steps.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// True when the path names exactly one location (no `[*]`).
    pub fn is_concrete(&self) -> bool {
        !self.segments.contains(&Segment::Wildcard)
    }

    /// Every location the path reaches in `root`, with its concrete path.
    /// Absent fields reach nothing; `null` counts as absent.
    pub fn select<'a>(&self, root: &'a Value) -> Vec<(String, &'a Value)> {
        let mut out = Vec::new();
        select_into(&self.segments, root, String::new(), &mut out);
        out
    }

    /// The single value at a concrete path, if present and not null.
    pub fn get<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        let mut cur = root;
        for seg in &self.segments {
            cur = match (seg, cur) {
                (Segment::Field(k) | Segment::Key(k), Value::Object(m)) => m.get(k)?,
                (Segment::Key(k), Value::Array(a)) => a.get(k.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        (!cur.is_null()).then_some(cur)
    }

    /// The value at a concrete path, creating missing objects on the way.
    /// Fails when something in the way is not an object; the path it names
    /// is the first offending prefix.
    pub fn get_or_create_object<'a>(
        &self,
        root: &'a mut Value,
    ) -> Result<&'a mut serde_json::Map<String, Value>, String> {
        let mut cur = root;
        let mut walked = String::new();
        for seg in &self.segments {
            let key = match seg {
                Segment::Field(k) | Segment::Key(k) => k,
                Segment::Wildcard => return Err(format!("{walked}[*] is not a single field")),
            };
            push_segment(&mut walked, seg);
            let Value::Object(map) = cur else {
                return Err(walked);
            };
            let slot = map
                .entry(key.clone())
                .or_insert_with(|| Value::Object(Default::default()));
            if slot.is_null() {
                *slot = Value::Object(Default::default());
            }
            cur = slot;
        }
        match cur {
            Value::Object(m) => Ok(m),
            _ => Err(walked),
        }
    }
}

fn push_segment(path: &mut String, seg: &Segment) {
    match seg {
        Segment::Field(f) => {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(f);
        }
        Segment::Key(k) => {
            path.push('[');
            path.push_str(k);
            path.push(']');
        }
        Segment::Wildcard => path.push_str("[*]"),
    }
}

fn select_into<'a>(
    segs: &[Segment],
    cur: &'a Value,
    path: String,
    out: &mut Vec<(String, &'a Value)>,
) {
    let Some((seg, rest)) = segs.split_first() else {
        if !cur.is_null() {
            out.push((path, cur));
        }
        return;
    };
    match (seg, cur) {
        (Segment::Field(k), Value::Object(m)) => {
            if let Some(v) = m.get(k) {
                let mut p = path;
                push_segment(&mut p, seg);
                select_into(rest, v, p, out);
            }
        }
        (Segment::Key(k), Value::Object(m)) => {
            if let Some(v) = m.get(k) {
                select_into(rest, v, format!("{path}[{k}]"), out);
            }
        }
        (Segment::Key(k), Value::Array(a)) => {
            if let Some(v) = k.parse::<usize>().ok().and_then(|i| a.get(i)) {
                select_into(rest, v, format!("{path}[{k}]"), out);
            }
        }
        (Segment::Wildcard, Value::Array(a)) => {
            for (i, v) in a.iter().enumerate() {
                select_into(rest, v, format!("{path}[{i}]"), out);
            }
        }
        (Segment::Wildcard, Value::Object(m)) => {
            for (k, v) in m {
                select_into(rest, v, format!("{path}[{k}]"), out);
            }
        }
        _ => {}
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_fields_keys_and_wildcards() {
        let p = FieldPath::parse("spec.forProvider.subnets[*].availabilityZone").unwrap();
        assert_eq!(
            p.segments(),
            &[
                Segment::Field("spec".into()),
                Segment::Field("forProvider".into()),
                Segment::Field("subnets".into()),
                Segment::Wildcard,
                Segment::Field("availabilityZone".into()),
            ]
        );
        let p = FieldPath::parse("metadata.annotations[crossplane.io/external-name]").unwrap();
        assert_eq!(
            p.segments()[2],
            Segment::Key("crossplane.io/external-name".into())
        );
        assert!(!FieldPath::parse("a[*]").unwrap().is_concrete());
        assert!(FieldPath::parse("a[b][c].d").unwrap().is_concrete());
    }

    #[test]
    fn rejects_malformed_paths_with_a_position() {
        for (bad, pos) in [
            ("", 0),
            (".a", 0),
            ("a.", 1),
            ("a..b", 2),
            ("a[", 1),
            ("a[]", 1),
            ("a]b", 1),
            ("a[b]c", 4),
            ("a.[b]", 2),
            ("a[[b]]", 2),
        ] {
            let e = FieldPath::parse(bad).unwrap_err();
            assert_eq!(e.position, pos, "{bad}: {e}");
            assert!(e.to_string().starts_with("failed to parse field path"));
        }
    }

    #[test]
    fn selects_every_concrete_location() {
        let v = json!({"spec": {"forProvider": {"subnets": [
            {"availabilityZone": "a"}, {"other": 1}, {"availabilityZone": "c"}
        ], "tags": {"x.y/z": "1"}}}});
        let p = FieldPath::parse("spec.forProvider.subnets[*].availabilityZone").unwrap();
        let got: Vec<_> = p
            .select(&v)
            .into_iter()
            .map(|(p, v)| (p, v.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "spec.forProvider.subnets[0].availabilityZone".to_string(),
                    json!("a")
                ),
                (
                    "spec.forProvider.subnets[2].availabilityZone".to_string(),
                    json!("c")
                ),
            ]
        );
        let p = FieldPath::parse("spec.forProvider.tags[x.y/z]").unwrap();
        assert_eq!(p.get(&v), Some(&json!("1")));
        let p = FieldPath::parse("spec.forProvider.subnets[1].other").unwrap();
        assert_eq!(p.get(&v), Some(&json!(1)));
        assert_eq!(FieldPath::parse("spec.nothing.here").unwrap().get(&v), None);
    }

    #[test]
    fn null_counts_as_absent() {
        let v = json!({"a": null});
        assert!(FieldPath::parse("a").unwrap().select(&v).is_empty());
        assert_eq!(FieldPath::parse("a").unwrap().get(&v), None);
    }

    #[test]
    fn creates_missing_objects_but_not_through_scalars() {
        let mut v = json!({"spec": {"forProvider": {}}});
        let p = FieldPath::parse("spec.forProvider.tags").unwrap();
        p.get_or_create_object(&mut v)
            .unwrap()
            .insert("k".into(), json!("v"));
        assert_eq!(v, json!({"spec": {"forProvider": {"tags": {"k": "v"}}}}));
        let mut v = json!({"spec": {"forProvider": {"tags": "oops"}}});
        assert_eq!(
            p.get_or_create_object(&mut v).unwrap_err(),
            "spec.forProvider.tags"
        );
    }
}
