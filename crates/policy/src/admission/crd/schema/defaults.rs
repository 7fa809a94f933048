//! Defaulting, as the API server's structural defaulting does it.

use serde_json::Value;

use super::Schema;

impl Schema {
    /// Fills in `default`s at every level, and drops `null`s the schema does
    /// not allow (they would be pruned before defaulting).
    pub(crate) fn apply_defaults(&self, v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, prop) in &self.properties {
                    let is_bad_null = map.get(k).is_some_and(|x| x.is_null() && !prop.nullable);
                    match &prop.default {
                        Some(d) if !map.contains_key(k) || is_bad_null => {
                            map.insert(k.clone(), d.clone());
                        }
                        None if is_bad_null => {
                            map.remove(k);
                        }
                        _ => {}
                    }
                }
                for (k, x) in map.iter_mut() {
                    if let Some(s) = self.child(k) {
                        s.apply_defaults(x);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for x in items {
                        s.apply_defaults(x);
                    }
                }
            }
            _ => {}
        }
    }
}
