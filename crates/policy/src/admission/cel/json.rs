//! JSON to CEL values, by hand. Going through serde would make every JSON
//! integer a `uint`, so `self.spec.size * 2` would fail (no `uint * int`
//! overload) and `replicas == 3` could compare false. Kubernetes' CEL treats
//! JSON integers as `int`; so does this. Strings and keys are borrowed from
//! the JSON, not copied.

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString,
};
use cel::common::value::Val;
use serde_json::Value;

use super::reads::Need;

pub(super) fn to_val(v: &Value) -> Box<dyn Val + '_> {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            // Beyond i64 (or fractional): a double, as Kubernetes would
            // reject such an integer before CEL ever saw it.
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(items) => {
            Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>()))
        }
        Value::Object(fields) => {
            let map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v)))
                .collect();
            Box::new(CelMap::from(map))
        }
    }
}

/// Converts only what `need` asks for. Fields of an object that no program
/// reads are left out; a field only tested with `has()` is there as `null`,
/// as nothing reads its value. Anything not an object where fields are
/// needed is converted whole, so errors (selecting from a string, say) read
/// the same as before.
pub(super) fn to_val_reading<'v>(v: &'v Value, need: &Need) -> Box<dyn Val + 'v> {
    match (need, v) {
        (Need::Fields(wanted), Value::Object(fields)) => {
            let map: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = wanted
                .iter()
                .filter_map(|(k, n)| {
                    let (key, value) = fields.get_key_value(k.as_str())?;
                    let val: Box<dyn Val + 'v> = match n {
                        Need::Presence => Box::new(CelNull),
                        n => to_val_reading(value, n),
                    };
                    Some((CelMapKey::from(key.as_str()), val))
                })
                .collect();
            Box::new(CelMap::from(map))
        }
        _ => to_val(v),
    }
}

/// A map of string keys to values, for `request`.
pub(super) fn map<'v>(entries: Vec<(&'v str, Box<dyn Val + 'v>)>) -> Box<dyn Val + 'v> {
    let map: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = entries
        .into_iter()
        .map(|(k, v)| (CelMapKey::from(k), v))
        .collect();
    Box::new(CelMap::from(map))
}
