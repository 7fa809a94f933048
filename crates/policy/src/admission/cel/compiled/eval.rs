//! Evaluating compiled [`Node`]s directly over the request's JSON, step
//! by step as the interpreter does, charging the same budget.

use std::cmp::Ordering;

use serde_json::Value;

use super::memo::{MemoNumbering, PathMemo};
use super::{Cmp, Comp, Compiled, Fail, Fold, Inputs, Lit, Node, ReqField, Root, StrFn, SLOTS};
use crate::admission::cel::budget;
use crate::admission::model::Operation;
use crate::admission::review::Request;

impl Lit {
    fn val(&self) -> V<'_> {
        match self {
            Lit::Null => V::Null,
            Lit::Bool(b) => V::Bool(*b),
            Lit::Int(i) => V::Int(*i),
            Lit::UInt(u) => V::UInt(*u),
            Lit::Double(d) => V::Double(*d),
            Lit::Str(s) => V::Str(s),
        }
    }
}

/// `start.f1.f2…`, as nested selections: each step needs an object that
/// has the field.
fn walk<'a>(start: V<'a>, fields: &[String]) -> Option<&'a Value> {
    let V::Json(mut at) = start else {
        return None;
    };
    for f in fields {
        at = at.as_object()?.get(f)?;
    }
    Some(at)
}

/// A value during evaluation. Containers are the JSON they come from.
#[derive(Debug, Clone, Copy)]
enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(&'a str),
    /// A JSON array or object.
    Json(&'a Value),
    /// A constant list of the program.
    Lits(&'a [Lit]),
    /// `request.userInfo.groups`.
    Strs(&'a [String]),
    /// The list `s.split(sep)`, its parts found when read.
    Split(&'a str, &'a str),
}

/// The parts of `s.split(sep)`. A one-byte separator (`'/'`, `'.'`) is
/// searched for as a char: a string separator builds a substring searcher
/// on every call, about 0.35 µs a request in the bench config's `cidr-size`.
enum Parts<'a> {
    Char(std::str::Split<'a, char>),
    Str(std::str::Split<'a, &'a str>),
}

impl<'a> Iterator for Parts<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match self {
            Parts::Char(p) => p.next(),
            Parts::Str(p) => p.next(),
        }
    }
}

fn parts<'a>(s: &'a str, sep: &'a str) -> Parts<'a> {
    match sep.as_bytes() {
        [b] if b.is_ascii() => Parts::Char(s.split(char::from(*b))),
        _ => Parts::Str(s.split(sep)),
    }
}

type R<'a> = Result<V<'a>, Fail>;

#[inline]
fn from_json(v: &Value) -> V<'_> {
    match v {
        Value::Null => V::Null,
        Value::Bool(b) => V::Bool(*b),
        // As crate::admission::cel::json converts: an integer within i64 is an int, any
        // other number a double.
        Value::Number(n) => match n.as_i64() {
            Some(i) => V::Int(i),
            None => V::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => V::Str(s),
        Value::Array(_) | Value::Object(_) => V::Json(v),
    }
}

impl<'a> V<'a> {
    fn is_container(&self) -> bool {
        matches!(self, V::Json(_) | V::Lits(_) | V::Strs(_) | V::Split(..))
    }

    fn is_list(&self) -> bool {
        matches!(
            self,
            V::Json(Value::Array(_)) | V::Lits(_) | V::Strs(_) | V::Split(..)
        )
    }

    /// The length of a list ([`Self::is_list`]).
    fn len(&self) -> usize {
        match self {
            V::Json(Value::Array(a)) => a.len(),
            V::Lits(l) => l.len(),
            V::Strs(s) => s.len(),
            V::Split(s, sep) => parts(s, sep).count(),
            _ => 0,
        }
    }

    /// Element `i` of a list ([`Self::is_list`]), `i` below its length.
    fn item(&self, i: usize) -> V<'a> {
        match *self {
            V::Json(Value::Array(a)) => a.get(i).map_or(V::Null, from_json),
            V::Lits(l) => l.get(i).map_or(V::Null, Lit::val),
            V::Strs(s) => s.get(i).map_or(V::Null, |s| V::Str(s)),
            V::Split(s, sep) => parts(s, sep).nth(i).map_or(V::Null, V::Str),
            _ => V::Null,
        }
    }

    /// What the budget charges for handing this value over ([`budget::size_of`]).
    fn cost(&self) -> u64 {
        let n = match self {
            V::Json(Value::Array(a)) => a.len(),
            V::Json(Value::Object(o)) => o.len(),
            V::Str(s) => s.len() / 8,
            V::Lits(l) => l.len(),
            V::Strs(s) => s.len(),
            V::Split(..) => self.len(),
            _ => 0,
        };
        1 + n as u64
    }

    /// Numeric and same-type ordering, as `cel`'s comparers.
    fn compare(&self, other: &V<'_>) -> Result<Ordering, Fail> {
        use V::*;
        let ord = match (*self, *other) {
            (Int(a), Int(b)) => Some(a.cmp(&b)),
            (UInt(a), UInt(b)) => Some(a.cmp(&b)),
            (Int(a), UInt(b)) => Some(u64::try_from(a).map_or(Ordering::Less, |a| a.cmp(&b))),
            (UInt(a), Int(b)) => Some(i64::try_from(a).map_or(Ordering::Greater, |a| a.cmp(&b))),
            (Int(a), Double(b)) => (a as f64).partial_cmp(&b),
            (UInt(a), Double(b)) => (a as f64).partial_cmp(&b),
            (Double(a), Double(b)) => a.partial_cmp(&b),
            (Double(a), Int(b)) => a.partial_cmp(&(b as f64)),
            (Double(a), UInt(b)) => a.partial_cmp(&(b as f64)),
            (Str(a), Str(b)) => Some(a.cmp(b)),
            (Bool(a), Bool(b)) => Some(a.cmp(&b)),
            _ => None,
        };
        ord.ok_or(Fail::Error)
    }

    /// `==`, as `cel`'s `equals`: numbers across types, lists element by
    /// element, maps key by key. JSON keys are strings, and so are the keys
    /// of every map this path sees.
    fn equals(&self, other: &V<'_>) -> Result<bool, Fail> {
        use V::*;
        Ok(match (*self, *other) {
            (Json(Value::Object(a)), Json(Value::Object(b))) => {
                if a.len() != b.len() {
                    return Ok(false);
                }
                for (k, v) in a {
                    match b.get(k) {
                        Some(w) if from_json(v).equals(&from_json(w))? => {}
                        _ => return Ok(false),
                    }
                }
                true
            }
            (a, b) if a.is_list() && b.is_list() => {
                if a.len() != b.len() {
                    return Ok(false);
                }
                for i in 0..a.len() {
                    if !a.item(i).equals(&b.item(i))? {
                        return Ok(false);
                    }
                }
                true
            }
            (a, b) if a.is_container() || b.is_container() => false,
            (Null, Null) => true,
            (Bool(a), Bool(b)) => a == b,
            (Str(a), Str(b)) => a == b,
            (Int(_) | UInt(_) | Double(_), Int(_) | UInt(_) | Double(_)) => {
                self.compare(other) == Ok(Ordering::Equal)
            }
            _ => false,
        })
    }
}

/// The variables of one evaluation.
struct Env<'a, 'm> {
    inputs: Inputs<'a>,
    locals: [V<'a>; SLOTS],
    memo: Option<&'m PathMemo<'a>>,
}

fn try_bool(r: R<'_>) -> Result<bool, Fail> {
    match r? {
        V::Bool(b) => Ok(b),
        _ => Err(Fail::Error),
    }
}

/// A boolean operand of `&&`/`||`: a non-bool value is an error there.
fn logical(r: R<'_>) -> Result<bool, Fail> {
    match r {
        Ok(V::Bool(b)) => Ok(b),
        Ok(_) => Err(Fail::Error),
        Err(f) => Err(f),
    }
}

impl Compiled {
    /// Gives this rule's prefixes their slots in `numbering`'s memos.
    pub(in crate::admission::cel) fn number_paths(&self, numbering: &mut MemoNumbering) {
        self.root.for_each_path(&mut |p| numbering.number(p));
    }

    /// Evaluates the rule. Charges the budget armed on this thread as the
    /// interpreter would; the caller checks whether it ran out.
    pub(in crate::admission::cel) fn eval<'a>(
        &'a self,
        inputs: Inputs<'a>,
        memo: Option<&PathMemo<'a>>,
    ) -> Result<bool, Fail> {
        let mut env = Env {
            inputs,
            locals: [V::Null; SLOTS],
            memo,
        };
        match eval(&self.root, &mut env)? {
            V::Bool(b) => Ok(b),
            // The interpreter words the type of what came back.
            _ => Err(Fail::Fallback),
        }
    }
}

fn eval<'a>(n: &'a Node, env: &mut Env<'a, '_>) -> R<'a> {
    match n {
        Node::Lit(l) => Ok(l.val()),
        Node::List(items) => Ok(V::Lits(items)),
        Node::SelfVar => Ok(from_json(env.inputs.object)),
        Node::OldSelf => Ok(env.inputs.old.map_or(V::Null, from_json)),
        Node::Request(f) => Ok(request_field(env.inputs.request, *f)),
        Node::Local(slot) => Ok(env.locals[*slot]),
        Node::Path(p) => {
            let start = match p.root {
                Root::SelfVar => from_json(env.inputs.object),
                Root::OldSelf => env.inputs.old.map_or(V::Null, from_json),
                Root::Local(slot) => env.locals[slot],
            };
            let (prefix, last) = p.fields.split_at(p.fields.len() - 1);
            // A path the numbering left out (on a comprehension variable,
            // or of one field) has no slot, and the memo walks it.
            let parent = match env.memo {
                Some(memo) => memo.get_or(p, || walk(start, prefix)),
                None => walk(start, prefix),
            };
            walk(parent.map_or(V::Null, V::Json), last)
                .map(from_json)
                .ok_or(Fail::Error)
        }
        Node::Select(operand, field) => match eval(operand, env)? {
            V::Json(Value::Object(m)) => m.get(field).map(from_json).ok_or(Fail::Error),
            _ => Err(Fail::Error),
        },
        Node::Has(operand, field) => match eval(operand, env)? {
            V::Json(Value::Object(m)) => Ok(V::Bool(m.contains_key(field))),
            _ => Err(Fail::Error),
        },
        Node::Index(operand, index) => {
            let value = eval(operand, env)?;
            let index = eval(index, env)?;
            match (value, index) {
                // Keys are strings: any other key is missing or no key.
                (V::Json(Value::Object(m)), V::Str(k)) => {
                    m.get(k).map(from_json).ok_or(Fail::Error)
                }
                (V::Json(Value::Object(_)), _) => Err(Fail::Error),
                // A whole double indexes a list as an int does.
                (l, V::Double(_)) if l.is_list() => Err(Fail::Fallback),
                (l, V::Int(i)) if l.is_list() => match usize::try_from(i) {
                    Ok(i) if i < l.len() => Ok(l.item(i)),
                    _ => Err(Fail::Error),
                },
                (l, V::UInt(i)) if l.is_list() => match usize::try_from(i) {
                    Ok(i) if i < l.len() => Ok(l.item(i)),
                    _ => Err(Fail::Error),
                },
                _ => Err(Fail::Error),
            }
        }
        Node::And(a, b) => {
            let left = logical(eval(a, env));
            if left == Ok(false) {
                return Ok(V::Bool(false));
            }
            if left == Err(Fail::Fallback) {
                return Err(Fail::Fallback);
            }
            let right = eval(b, env)?;
            match (left, right) {
                (Ok(true), V::Bool(r)) => Ok(V::Bool(r)),
                (Err(_), V::Bool(false)) => Ok(V::Bool(false)),
                _ => Err(Fail::Error),
            }
        }
        Node::Or(a, b) => {
            let left = logical(eval(a, env));
            if left == Ok(true) {
                return Ok(V::Bool(true));
            }
            if left == Err(Fail::Fallback) {
                return Err(Fail::Fallback);
            }
            let right = eval(b, env)?;
            match (left, right) {
                (Ok(false), V::Bool(r)) => Ok(V::Bool(r)),
                (Err(_), V::Bool(true)) => Ok(V::Bool(true)),
                _ => Err(Fail::Error),
            }
        }
        Node::Not(a) => match eval(a, env)? {
            V::Bool(b) => Ok(V::Bool(!b)),
            _ => Err(Fail::Error),
        },
        Node::NotStrictlyFalse(a) => match eval(a, env) {
            Ok(V::Bool(b)) => Ok(V::Bool(b)),
            Err(Fail::Fallback) => Err(Fail::Fallback),
            _ => Ok(V::Bool(true)),
        },
        Node::Cond(c, a, b) => {
            if try_bool(eval(c, env))? {
                eval(a, env)
            } else {
                eval(b, env)
            }
        }
        Node::Eq(a, b) => {
            let l = eval(a, env)?;
            let r = eval(b, env)?;
            l.equals(&r).map(V::Bool)
        }
        Node::Ne(a, b) => {
            let l = eval(a, env)?;
            let r = eval(b, env)?;
            l.equals(&r).map(|e| V::Bool(!e))
        }
        Node::Cmp(op, a, b) => {
            let l = eval(a, env)?;
            let r = eval(b, env)?;
            // Lists and maps have no order: compare() fails on them.
            let o = l.compare(&r)?;
            Ok(V::Bool(match op {
                Cmp::Lt => o == Ordering::Less,
                Cmp::Le => o != Ordering::Greater,
                Cmp::Gt => o == Ordering::Greater,
                Cmp::Ge => o != Ordering::Less,
            }))
        }
        Node::In(a, b) => {
            let needle = eval(a, env)?;
            let hay = eval(b, env)?;
            contains(hay, needle).map(V::Bool)
        }
        Node::Size(a) => {
            let n = match eval(a, env)? {
                V::Str(s) => s.chars().count(),
                V::Json(Value::Array(a)) => a.len(),
                V::Json(Value::Object(o)) => o.len(),
                V::Lits(l) => l.len(),
                l @ V::Split(..) => l.len(),
                V::Strs(s) => s.len(),
                _ => return Err(Fail::Error),
            };
            Ok(V::Int(n as i64))
        }
        Node::Str(f, target, arg) => {
            let arg = eval(arg, env)?;
            let target = eval(target, env)?;
            let (V::Str(t), V::Str(a)) = (target, arg) else {
                return Err(Fail::Error);
            };
            Ok(V::Bool(match f {
                StrFn::StartsWith => t.starts_with(a),
                StrFn::EndsWith => t.ends_with(a),
                StrFn::Contains => t.contains(a),
            }))
        }
        Node::Matches(target, re) => match eval(target, env)? {
            V::Str(s) => Ok(V::Bool(re.is_match(s))),
            _ => Err(Fail::Error),
        },
        Node::Split(target, sep) => match eval(target, env)? {
            V::Str(s) => Ok(V::Split(s, sep)),
            _ => Err(Fail::Error),
        },
        // As `cel`'s `int` overloads.
        Node::Int(a) => match eval(a, env)? {
            V::Int(i) => Ok(V::Int(i)),
            V::UInt(u) => i64::try_from(u).map(V::Int).map_err(|_| Fail::Error),
            V::Double(d) if d > i64::MIN as f64 && d < i64::MAX as f64 => Ok(V::Int(d as i64)),
            V::Str(s) => s.parse::<i64>().map(V::Int).map_err(|_| Fail::Error),
            _ => Err(Fail::Error),
        },
        Node::Cost(a) => {
            let v = eval(a, env)?;
            budget::charge(v.cost()).map_err(|_| Fail::Error)?;
            Ok(v)
        }
        Node::Comp(c) => comprehension(c, env),
    }
}

fn request_field(req: &Request, f: ReqField) -> V<'_> {
    match f {
        ReqField::Operation => V::Str(Operation::from(&req.operation).as_str()),
        ReqField::Namespace => V::Str(req.namespace.as_deref().unwrap_or("")),
        ReqField::Name => V::Str(&req.name),
        ReqField::DryRun => V::Bool(req.dry_run),
        ReqField::Username => V::Str(req.user_info.username.as_deref().unwrap_or("")),
        ReqField::Groups => V::Strs(req.user_info.groups.as_deref().unwrap_or(&[])),
    }
}

/// `needle in hay`, as `cel`'s containers answer it.
fn contains(hay: V<'_>, needle: V<'_>) -> Result<bool, Fail> {
    match hay {
        V::Json(Value::Array(items)) => {
            for x in items {
                if from_json(x).equals(&needle)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        V::Lits(items) => {
            for x in items {
                if x.val().equals(&needle)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        V::Strs(items) => Ok(matches!(needle, V::Str(s) if items.iter().any(|x| x == s))),
        V::Split(s, sep) => {
            for x in parts(s, sep) {
                if V::Str(x).equals(&needle)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        // JSON keys are strings; other numbers and bools are keys that
        // cannot be there.
        V::Json(Value::Object(m)) => match needle {
            V::Str(k) => Ok(m.contains_key(k)),
            V::Bool(_) | V::Int(_) | V::UInt(_) | V::Double(_) => Ok(false),
            _ => Err(Fail::Error),
        },
        _ => Err(Fail::Error),
    }
}

fn comprehension<'a>(c: &'a Comp, env: &mut Env<'a, '_>) -> R<'a> {
    // The interpreter evaluates the initial accumulator before the range.
    let init = eval(&c.init, env)?;
    let range = eval(&c.range, env)?;
    let saved = (env.locals[c.accu], env.locals[c.iter]);
    env.locals[c.accu] = init;
    let out = run_loop(c, range, env);
    (env.locals[c.accu], env.locals[c.iter]) = saved;
    out
}

fn run_loop<'a>(c: &'a Comp, range: V<'a>, env: &mut Env<'a, '_>) -> R<'a> {
    let mut pending = false;
    let mut step = |item: V<'a>, env: &mut Env<'a, '_>| -> Result<bool, Fail> {
        if !try_bool(eval(&c.cond, env))? {
            return Ok(false);
        }
        env.locals[c.iter] = item;
        match (eval(&c.step, env), c.fold) {
            (Err(Fail::Fallback), _) => return Err(Fail::Fallback),
            (Err(_), Some(_)) => pending = true,
            (Err(e), None) => return Err(e),
            (Ok(accu), Some(fold)) if pending && !absorbs(fold, &accu) => {}
            (Ok(accu), _) => {
                pending = false;
                env.locals[c.accu] = accu;
            }
        }
        Ok(true)
    };
    match range {
        V::Json(Value::Array(items)) => {
            for x in items {
                if !step(from_json(x), env)? {
                    break;
                }
            }
        }
        V::Json(Value::Object(m)) => {
            for k in m.keys() {
                if !step(V::Str(k), env)? {
                    break;
                }
            }
        }
        V::Lits(items) => {
            for x in items {
                if !step(x.val(), env)? {
                    break;
                }
            }
        }
        V::Strs(items) => {
            for x in items {
                if !step(V::Str(x), env)? {
                    break;
                }
            }
        }
        V::Split(s, sep) => {
            for x in parts(s, sep) {
                if !step(V::Str(x), env)? {
                    break;
                }
            }
        }
        _ => return Err(Fail::Error),
    }
    if pending {
        return Err(Fail::Error);
    }
    eval(&c.result, env)
}

fn absorbs(fold: Fold, v: &V<'_>) -> bool {
    matches!(
        (fold, v),
        (Fold::And, V::Bool(false)) | (Fold::Or, V::Bool(true))
    )
}
