//! Parsing an object without one subtree: the key at the end of `skip` is
//! read past (validated as JSON, never built), everything else becomes a
//! `Value` as usual.
//!
//! The API server sends `metadata.managedFields` in every review, about a
//! fifth of the bytes of the reviews it sent us (tests/fixtures/reviews),
//! and no rule reads it unless a CEL rule names it.
//!
//! Arrays are built here too, and trimmed once complete: a `Vec` grows by
//! doubling, and for a review that is mostly arrays (the worst shape for
//! the tree, BENCHMARKS.md "Memory per request") the unused capacity was
//! a fifth of the request's peak memory.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The path under the object whose last key is skipped.
pub(super) const MANAGED_FIELDS: &[&str] = &["metadata", "managedFields"];

/// A `Value` without the key `skip` leads to; an empty `skip` keeps all.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pruned {
    pub(super) skip: &'static [&'static str],
}

/// Unused array capacity, in bytes, worth a reallocation: smaller arrays
/// (most of a real object's) keep theirs, so parsing costs no more.
const TRIM_BYTES: usize = 256;

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        const ALL: Pruned = Pruned { skip: &[] };
        let Some((first, rest)) = self.skip.split_first() else {
            let mut out = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                out.insert(key, map.next_value_seed(ALL)?);
            }
            return Ok(Value::Object(out));
        };
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key != *first {
                out.insert(key, map.next_value_seed(ALL)?);
            } else if rest.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                let value = map.next_value_seed(Pruned { skip: rest })?;
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }

    // Anything but an object has nothing to skip: the plain value.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(Pruned { skip: &[] })? {
            out.push(v);
        }
        if (out.capacity() - out.len()) * std::mem::size_of::<Value>() >= TRIM_BYTES {
            out.shrink_to_fit();
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pruned(text: &str, skip: &'static [&'static str]) -> Value {
        let mut de = serde_json::Deserializer::from_str(text);
        let v = Pruned { skip }.deserialize(&mut de).unwrap();
        de.end().unwrap();
        v
    }

    #[test]
    fn only_the_named_key_is_left_out() {
        let text = r#"{"apiVersion":"v1","metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}],"labels":{"managedFields":"x"}},"spec":{"managedFields":1,"n":-1,"f":1.5,"b":true,"z":null,"l":[1,"s",{}]}}"#;
        let full: Value = serde_json::from_str(text).unwrap();
        let mut expected = full.clone();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(pruned(text, MANAGED_FIELDS), expected);
        assert_eq!(pruned(text, &[]), full);
    }

    #[test]
    fn other_shapes_parse_as_they_are() {
        for text in [
            r#"5"#,
            r#""s""#,
            "null",
            r#"[{"metadata":{"managedFields":1}}]"#,
            r#"{"metadata":7}"#,
        ] {
            let full: Value = serde_json::from_str(text).unwrap();
            assert_eq!(pruned(text, MANAGED_FIELDS), full, "{text}");
        }
    }

    /// Arrays come out trimmed (the peak memory of a review that is
    /// mostly arrays), small ones as they are, and the tree equals
    /// serde_json's own, key "" included.
    #[test]
    fn big_arrays_are_trimmed_and_the_tree_is_serde_jsons() {
        let row: Vec<u32> = (0..10).cycle().take(100).collect();
        let rows = vec![row; 1000];
        let text = serde_json::to_string(&json!({"metadata": {"managedFields": [1], "": 2},
            "spec": {"rows": rows, "small": [1, 2, 3], "": [{"": null}]}}))
        .unwrap();
        for skip in [MANAGED_FIELDS, &[]] {
            let v = pruned(&text, skip);
            let mut full: Value = serde_json::from_str(&text).unwrap();
            if !skip.is_empty() {
                full["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("managedFields");
            }
            assert_eq!(v, full);
            let outer = v["spec"]["rows"].as_array().unwrap();
            assert_eq!(outer.capacity(), outer.len(), "1000 rows");
            for r in outer {
                let r = r.as_array().unwrap();
                assert_eq!(r.capacity(), r.len(), "a row of 100");
            }
            // Without the trim, serde_json's doubling left 128 places.
            let plain: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(plain["spec"]["rows"][0].as_array().unwrap().capacity(), 128);
        }
    }

    #[test]
    fn a_skipped_subtree_is_still_checked_as_json() {
        let mut de = serde_json::Deserializer::from_str(r#"{"metadata":{"managedFields":[1,}}"#);
        assert!(Pruned {
            skip: MANAGED_FIELDS
        }
        .deserialize(&mut de)
        .is_err());
    }
}
