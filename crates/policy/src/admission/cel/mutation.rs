//! What the expressions of a MutatingAdmissionPolicy add to CEL, for
//! evaluating exported policies the way the API server does:
//!
//! - message construction: `JSONPatch{op: ..., path: ..., value: ...}` for
//!   `patchType: JSONPatch`, and `Object{...}` / `Object.spec{...}` for
//!   `patchType: ApplyConfiguration`. Both are only ever read back as JSON,
//!   so each is rewritten into a map literal keyed by its field names
//!   before the program is checked ([`structs_to_maps`]);
//! - a result read back as JSON ([`to_json`]), as the API server turns a
//!   patch value or an apply configuration into JSON;
//! - the merge of an apply configuration into the object ([`apply`]).
//!
//! The Kubernetes side is `k8s.io/apiserver/pkg/admission/plugin/policy/
//! mutating/patch` (`json_patch.go`, `smd.go`); this is written from its
//! documented behaviour, not copied.

use cel::common::ast::{
    EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, MapEntryExpr, MapExpr,
};
use cel::common::types::{CelBool, CelDouble, CelInt, CelNull, CelUInt};
use cel::common::value::{BuiltinRef, Val};
use serde_json::{Map, Value};

/// Whether `type_name` is a message a mutation may construct.
fn constructible(type_name: &str) -> bool {
    type_name == "JSONPatch" || type_name == "Object" || type_name.starts_with("Object.")
}

/// Rewrites every `JSONPatch{...}` and `Object...{...}` in `e` into a map
/// literal with the same fields; any other message is an error. `next_id`
/// numbers the key nodes the rewrite adds.
pub(super) fn structs_to_maps(e: &mut IdedExpr, next_id: &mut u64) -> Result<(), String> {
    match &mut e.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => Ok(()),
        Expr::Select(s) => structs_to_maps(&mut s.operand, next_id),
        Expr::Call(c) => {
            if let Some(t) = c.target.as_deref_mut() {
                structs_to_maps(t, next_id)?;
            }
            c.args
                .iter_mut()
                .try_for_each(|a| structs_to_maps(a, next_id))
        }
        Expr::List(l) => l
            .elements
            .iter_mut()
            .try_for_each(|x| structs_to_maps(x, next_id)),
        Expr::Map(m) => m
            .entries
            .iter_mut()
            .try_for_each(|entry| match &mut entry.expr {
                EntryExpr::MapEntry(me) => {
                    structs_to_maps(&mut me.key, next_id)?;
                    structs_to_maps(&mut me.value, next_id)
                }
                EntryExpr::StructField(f) => structs_to_maps(&mut f.value, next_id),
            }),
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                structs_to_maps(part, next_id)?;
            }
            Ok(())
        }
        Expr::Struct(s) => {
            if !constructible(&s.type_name) {
                return Err(format!(
                    "message construction ({} {{...}}) is not supported; a mutation constructs JSONPatch or Object",
                    s.type_name
                ));
            }
            let mut entries = std::mem::take(&mut s.entries);
            for entry in &mut entries {
                let EntryExpr::StructField(f) = &mut entry.expr else {
                    return Err(format!("{} {{...}} has a map entry", s.type_name));
                };
                structs_to_maps(&mut f.value, next_id)?;
                *next_id += 1;
                let key = IdedExpr {
                    id: *next_id,
                    expr: Expr::Literal(LiteralValue::String(f.field.clone().into())),
                };
                entry.expr = EntryExpr::MapEntry(MapEntryExpr {
                    key,
                    value: std::mem::take(&mut f.value),
                    optional: f.optional,
                });
            }
            e.expr = Expr::Map(MapExpr { entries });
            Ok(())
        }
    }
}

/// The largest node id among a map's or a struct's entries and their
/// keys and values.
fn max_entry_id(entries: &[IdedEntryExpr]) -> u64 {
    entries
        .iter()
        .map(|entry| {
            entry.id.max(match &entry.expr {
                EntryExpr::MapEntry(me) => max_id(&me.key).max(max_id(&me.value)),
                EntryExpr::StructField(f) => max_id(&f.value),
            })
        })
        .max()
        .unwrap_or(0)
}

/// The largest node id in `e`, so that added nodes do not collide.
pub(super) fn max_id(e: &IdedExpr) -> u64 {
    let inner = match &e.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => 0,
        Expr::Select(s) => max_id(&s.operand),
        Expr::Call(c) => c
            .target
            .as_deref()
            .map(max_id)
            .into_iter()
            .chain(c.args.iter().map(max_id))
            .max()
            .unwrap_or(0),
        Expr::List(l) => l.elements.iter().map(max_id).max().unwrap_or(0),
        Expr::Map(m) => max_entry_id(&m.entries),
        Expr::Struct(s) => max_entry_id(&s.entries),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .map(max_id)
        .max()
        .unwrap_or(0),
    };
    e.id.max(inner)
}

/// A CEL value as JSON, as the API server serialises a patch value: maps
/// need string keys; a `uint` and an `int` are both JSON numbers; an
/// optional that holds a value is that value; anything else (bytes,
/// durations, timestamps, types, an empty optional) has no JSON form here.
pub(super) fn to_json(v: &dyn Val) -> Result<Value, String> {
    match v.as_builtin() {
        BuiltinRef::String(s) => return Ok(Value::String(s.inner().to_string())),
        BuiltinRef::List(l) => {
            return l
                .inner()
                .iter()
                .map(|x| to_json(x.as_ref()))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        BuiltinRef::Map(m) => {
            let mut out = Map::new();
            for (k, x) in m.inner() {
                let key = match k.inner().as_builtin() {
                    BuiltinRef::String(s) => s.inner().to_string(),
                    _ => return Err("a map key is not a string".into()),
                };
                out.insert(key, to_json(x.as_ref())?);
            }
            return Ok(Value::Object(out));
        }
        BuiltinRef::Optional(o) => {
            return match o.inner() {
                Some(x) => to_json(x),
                None => Err("an empty optional has no JSON form".into()),
            }
        }
        _ => {}
    }
    if v.downcast_ref::<CelNull>().is_some() {
        return Ok(Value::Null);
    }
    if let Some(b) = v.downcast_ref::<CelBool>() {
        return Ok(Value::Bool(*b.inner()));
    }
    if let Some(i) = v.downcast_ref::<CelInt>() {
        return Ok(Value::from(*i.inner()));
    }
    if let Some(u) = v.downcast_ref::<CelUInt>() {
        return Ok(Value::from(*u.inner()));
    }
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        return serde_json::Number::from_f64(*d.inner())
            .map(Value::Number)
            .ok_or_else(|| "a double that is not finite has no JSON form".into());
    }
    Err(format!(
        "a value of type {} has no JSON form",
        v.get_type().name()
    ))
}

/// Merges an apply configuration into `obj` as server-side apply does for
/// fields without list-merge keys: maps are merged key by key, every other
/// value replaces what is there. Lists are replaced whole, as for an
/// atomic list: without the object's schema the list type is unknown, and
/// the exported policies use JSON Patch, never this.
pub fn apply(obj: &mut Value, config: &Value) {
    match (obj, config) {
        (Value::Object(o), Value::Object(c)) => {
            for (k, v) in c {
                match o.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => apply(existing, v),
                    _ => {
                        o.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (o, c) => *o = c.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CelProgram, Scope};
    use serde_json::json;

    const VARS: &[&str] = &["object", "oldObject", "request"];

    fn eval(src: &str, object: serde_json::Value) -> serde_json::Value {
        let p = CelProgram::compile_mutation(src, VARS).unwrap();
        let mut scope = Scope::new();
        scope.bind("object", Some(&object));
        scope.bind("oldObject", None);
        scope.bind("request", None);
        p.eval_json(&scope).unwrap()
    }

    #[test]
    fn json_patch_values_become_json() {
        let got = eval(
            "has(object.spec.a) ? [] : [JSONPatch{op: 'add', path: '/spec/a', value: {'name': object.metadata.name, 'n': 1}}]",
            json!({"metadata": {"name": "x"}, "spec": {}}),
        );
        assert_eq!(
            got,
            json!([{"op": "add", "path": "/spec/a", "value": {"name": "x", "n": 1}}])
        );
        assert_eq!(
            eval(
                "has(object.spec.a) ? [] : [JSONPatch{op: 'add', path: '/spec/a', value: 1}]",
                json!({"spec": {"a": 2}})
            ),
            json!([])
        );
    }

    #[test]
    fn object_construction_becomes_an_apply_configuration() {
        let got = eval(
            "Object{spec: Object.spec{deletionPolicy: 'Delete', tags: ['a', 'b']}}",
            json!({}),
        );
        assert_eq!(
            got,
            json!({"spec": {"deletionPolicy": "Delete", "tags": ["a", "b"]}})
        );
        let mut obj = json!({"spec": {"forProvider": {"r": 1}, "tags": ["x"]}});
        super::apply(&mut obj, &got);
        assert_eq!(
            obj,
            json!({"spec": {"forProvider": {"r": 1}, "deletionPolicy": "Delete", "tags": ["a", "b"]}})
        );
    }

    #[test]
    fn other_messages_and_messages_outside_mutations_are_refused() {
        let e = CelProgram::compile_mutation("google.protobuf.Value{}", VARS).unwrap_err();
        assert!(e.to_string().contains("google.protobuf.Value"), "{e}");
        let e = CelProgram::compile_with("JSONPatch{op: 'add'}", VARS).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
    }
}
