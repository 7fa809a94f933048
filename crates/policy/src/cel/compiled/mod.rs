//! The compiled fast path of configured rules: the checked and metered AST
//! (see [`super::limits`]) turned into a tree of [`Node`]s evaluated
//! directly over the request's JSON, with no conversion to CEL values and
//! no allocation for the common shapes.
//!
//! It covers field selection, `has()`, `==`/`!=`/`<`/`<=`/`>`/`>=`, `in`,
//! `size`, `startsWith`, `endsWith`, `contains`, `matches` (a literal
//! pattern, compiled once), `split` (a literal separator), `int`, `all`/`exists` (any comprehension whose parts are
//! covered), `&&`, `||`, `!`, `?:`, literals and constant lists, `self`,
//! `oldSelf` and the fields of `request`. [`compile`] says why anything else
//! stays with the interpreter.
//!
//! Semantics follow `cel` 0.15's interpreter step by step, including the
//! order operands are evaluated in, so the cost charged (and so whether a
//! budget runs out) is the same. An evaluation ends in one of three ways:
//! a value; [`Fail::Error`], an error the interpreter raises at the same
//! point (absorbed by `&&`, `||` and `all`/`exists` exactly as there); or
//! [`Fail::Fallback`], a case this path does not model, which is never
//! absorbed and hands the whole rule to the interpreter. An error that
//! reaches the top is also handed over, so messages are the interpreter's.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering as AtomicOrdering};

use cel::common::ast::{operators, CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

use super::budget;
use super::env::MATCHES_FN;
use crate::model::Operation;
use crate::review::Request;

/// Most comprehension variables alive at once: two per level, and
/// [`super::limits::MAX_COMPREHENSION_NESTING`] levels.
const SLOTS: usize = 2 * super::limits::MAX_COMPREHENSION_NESTING;

/// What a configured rule's variables are bound to.
#[derive(Clone, Copy)]
pub struct Inputs<'v> {
    /// The admission request (`request`).
    pub request: &'v Request,
    /// The object under judgment (`self`).
    pub object: &'v Value,
    /// The old object (`oldSelf`), `null` when absent.
    pub old: Option<&'v Value>,
}

/// A literal, owned by the program.
#[derive(Debug, Clone)]
enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
}

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

/// The fields of `request` (docs/configuration.md).
#[derive(Debug, Clone, Copy)]
enum ReqField {
    Operation,
    Namespace,
    Name,
    DryRun,
    Username,
    Groups,
}

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
enum StrFn {
    StartsWith,
    EndsWith,
    Contains,
}

/// `all` folds with `&&`, `exists` with `||`: their loop steps may defer an
/// error, as the interpreter's `DeferredErrors` does.
#[derive(Debug, Clone, Copy)]
enum Fold {
    And,
    Or,
}

#[derive(Debug)]
enum Node {
    Lit(Lit),
    List(Vec<Lit>),
    SelfVar,
    OldSelf,
    Request(ReqField),
    Local(usize),
    /// `root.a.b…`: a chain of selections on a variable, walked in one step.
    Path(Box<Path>),
    Select(Box<Node>, String),
    Has(Box<Node>, String),
    Index(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Eq(Box<Node>, Box<Node>),
    Ne(Box<Node>, Box<Node>),
    Cmp(Cmp, Box<Node>, Box<Node>),
    In(Box<Node>, Box<Node>),
    Size(Box<Node>),
    /// Target, then argument; evaluated argument first, as the interpreter does.
    Str(StrFn, Box<Node>, Box<Node>),
    Matches(Box<Node>, Box<regex::Regex>),
    /// `x.split('sep')` with a literal, non-empty separator.
    Split(Box<Node>, String),
    /// `int(x)`.
    Int(Box<Node>),
    /// The budget charge the compiler wrapped around an operand.
    Cost(Box<Node>),
    Comp(Box<Comp>),
}

impl Node {
    fn for_each_path(&self, f: &mut dyn FnMut(&Path)) {
        match self {
            Node::Path(p) => f(p),
            Node::Lit(_)
            | Node::List(_)
            | Node::SelfVar
            | Node::OldSelf
            | Node::Request(_)
            | Node::Local(_) => {}
            Node::Select(a, _)
            | Node::Has(a, _)
            | Node::Not(a)
            | Node::NotStrictlyFalse(a)
            | Node::Size(a)
            | Node::Matches(a, _)
            | Node::Split(a, _)
            | Node::Int(a)
            | Node::Cost(a) => a.for_each_path(f),
            Node::Index(a, b)
            | Node::And(a, b)
            | Node::Or(a, b)
            | Node::Eq(a, b)
            | Node::Ne(a, b)
            | Node::Cmp(_, a, b)
            | Node::In(a, b)
            | Node::Str(_, a, b) => {
                a.for_each_path(f);
                b.for_each_path(f);
            }
            Node::Cond(a, b, c) => {
                a.for_each_path(f);
                b.for_each_path(f);
                c.for_each_path(f);
            }
            Node::Comp(c) => {
                for n in [&c.range, &c.init, &c.cond, &c.step, &c.result] {
                    n.for_each_path(f);
                }
            }
        }
    }
}

/// The variable a [`Node::Path`] starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Root {
    SelfVar,
    OldSelf,
    Local(usize),
}

#[derive(Debug)]
struct Path {
    root: Root,
    /// At least one.
    fields: Box<[String]>,
    /// Where a [`PathMemo`] keeps the object the last field is read from:
    /// the numbering's owner in the high half, the slot in the low half; 0
    /// when not numbered ([`Compiled::number_paths`]).
    slot: AtomicU64,
}

impl Path {
    fn new(root: Root, fields: Box<[String]>) -> Self {
        Path {
            root,
            fields,
            slot: AtomicU64::new(0),
        }
    }

    /// The fields but the last, when a memo may keep what they reach:
    /// comprehension variables change within a rule.
    fn prefix(&self) -> Option<&[String]> {
        let prefix = &self.fields[..self.fields.len() - 1];
        (!prefix.is_empty() && !matches!(self.root, Root::Local(_))).then_some(prefix)
    }
}

/// Slots of a [`PathMemo`]: distinct prefixes beyond these are walked.
const MEMO_SLOTS: usize = 32;

/// The objects chains of selections on `self` and `oldSelf` reached during
/// one request, shared by its rules. Rules read the same few objects over
/// and over (every rule of the bench config starts at
/// `self.spec.forProvider`), and each step is a search of a map's keys:
/// with the memo, a chain costs one step once its parent is known.
///
/// [`MemoNumbering`] gives each distinct prefix of a set of rules a slot;
/// a memo answers only paths numbered by its own numbering, so a rule
/// from another set is walked, never answered from a wrong slot.
pub struct PathMemo<'v> {
    owner: u32,
    slots: [Cell<Option<Option<&'v Value>>>; MEMO_SLOTS],
}

impl<'v> PathMemo<'v> {
    /// An empty memo for the paths `numbering` numbered.
    pub fn new(numbering: &MemoNumbering) -> Self {
        PathMemo {
            owner: numbering.owner,
            slots: Default::default(),
        }
    }

    fn get_or(&self, path: &Path, walk: impl FnOnce() -> Option<&'v Value>) -> Option<&'v Value> {
        let slot = path.slot.load(AtomicOrdering::Relaxed);
        if slot >> 32 != u64::from(self.owner) {
            return walk();
        }
        let cell = &self.slots[(slot & 0xffff_ffff) as usize];
        if let Some(at) = cell.get() {
            return at;
        }
        let at = walk();
        cell.set(Some(at));
        at
    }
}

/// Slots for the distinct prefixes of a set of rules (see [`PathMemo`]),
/// numbered once by [`MemoNumbering::of`]. Nothing numbers more paths
/// afterwards, so clones (a cloned configuration's) stay the same numbering
/// under the same owner: two numberings diverging under one owner would
/// let a memo answer a path from another prefix's slot.
#[derive(Debug, Clone)]
pub struct MemoNumbering {
    /// Never 0, so that an unnumbered path matches no memo.
    owner: u32,
    slots: HashMap<(Root, Vec<String>), u32>,
}

impl Default for MemoNumbering {
    fn default() -> Self {
        static OWNERS: AtomicU32 = AtomicU32::new(1);
        MemoNumbering {
            owner: OWNERS.fetch_add(1, AtomicOrdering::Relaxed).max(1),
            slots: HashMap::new(),
        }
    }
}

impl MemoNumbering {
    /// Numbers the prefixes of `programs`' selection chains, as one set.
    pub fn of<'p>(programs: impl IntoIterator<Item = &'p super::CelProgram>) -> Self {
        let mut numbering = Self::default();
        for p in programs {
            p.number_paths(&mut numbering);
        }
        numbering
    }

    fn number(&mut self, path: &Path) {
        let Some(prefix) = path.prefix() else {
            return;
        };
        let next = self.slots.len() as u32;
        let slot = *self
            .slots
            .entry((path.root, prefix.to_vec()))
            .or_insert(next);
        // A program numbered again (by another set it belongs to) answers
        // only to that set's memo.
        let value = if (slot as usize) < MEMO_SLOTS {
            u64::from(self.owner) << 32 | u64::from(slot)
        } else {
            0
        };
        path.slot.store(value, AtomicOrdering::Relaxed);
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

#[derive(Debug)]
struct Comp {
    range: Node,
    init: Node,
    accu: usize,
    iter: usize,
    cond: Node,
    step: Node,
    result: Node,
    fold: Option<Fold>,
}

/// A configured rule, compiled.
#[derive(Debug)]
pub(super) struct Compiled {
    root: Node,
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

/// How an evaluation that produced no value ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// An error the interpreter raises at the same point.
    Error,
    /// A case this path does not model: the interpreter decides.
    Fallback,
}

type R<'a> = Result<V<'a>, Fail>;

#[inline]
fn from_json(v: &Value) -> V<'_> {
    match v {
        Value::Null => V::Null,
        Value::Bool(b) => V::Bool(*b),
        // As super::json converts: an integer within i64 is an int, any
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

/// Why a program stays with the interpreter.
pub(super) type Why = String;

struct Compiler {
    /// Comprehension variables in scope, innermost last, with their slots.
    scope: Vec<(String, usize)>,
}

/// Compiles a checked, metered configured rule; `Err` says why it stays
/// with the interpreter.
pub(super) fn compile(e: &IdedExpr) -> Result<Compiled, Why> {
    let mut c = Compiler { scope: Vec::new() };
    Ok(Compiled { root: c.node(e)? })
}

fn boxed(n: Node) -> Box<Node> {
    Box::new(n)
}

impl Compiler {
    fn node(&mut self, e: &IdedExpr) -> Result<Node, Why> {
        match &e.expr {
            Expr::Literal(l) => Ok(Node::Lit(lit(l)?)),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => {
                if let Some(field) = self.request_field(e)? {
                    return Ok(Node::Request(field));
                }
                let operand = self.node(&s.operand)?;
                if s.test {
                    return Ok(Node::Has(boxed(operand), s.field.clone()));
                }
                // A selection on a variable, or on such a chain, extends the
                // chain: one node, not one per field.
                let root = match operand {
                    Node::Path(p) => {
                        let mut fields = p.fields.into_vec();
                        fields.push(s.field.clone());
                        return Ok(Node::Path(Box::new(Path::new(p.root, fields.into()))));
                    }
                    Node::SelfVar => Root::SelfVar,
                    Node::OldSelf => Root::OldSelf,
                    Node::Local(slot) => Root::Local(slot),
                    other => return Ok(Node::Select(boxed(other), s.field.clone())),
                };
                Ok(Node::Path(Box::new(Path::new(
                    root,
                    Box::new([s.field.clone()]),
                ))))
            }
            Expr::List(l) => {
                if !l.optional_indices.is_empty() {
                    return Err("optional list elements".into());
                }
                let items = l
                    .elements
                    .iter()
                    .map(|x| match &x.expr {
                        Expr::Literal(l) => lit(l),
                        _ => Err("a list literal with computed elements".to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Node::List(items))
            }
            Expr::Map(_) => Err("a map literal".into()),
            Expr::Struct(_) => Err("a message literal".into()),
            Expr::Unspecified => Err("an unspecified node".into()),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Call(c) => self.call(c),
        }
    }

    fn ident(&self, name: &str) -> Result<Node, Why> {
        if let Some((_, slot)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Ok(Node::Local(*slot));
        }
        match name {
            "self" => Ok(Node::SelfVar),
            "oldSelf" => Ok(Node::OldSelf),
            "request" => Err("uses `request` whole; only its fields are compiled".into()),
            other => Err(format!("uses the name `{other}`")),
        }
    }

    /// `request.x` and `request.userInfo.x`, when `request` is the variable.
    fn request_field(&self, e: &IdedExpr) -> Result<Option<ReqField>, Why> {
        let mut path = Vec::new();
        let mut at = e;
        loop {
            match &at.expr {
                Expr::Select(s) if !s.test => {
                    path.push(s.field.as_str());
                    at = &s.operand;
                }
                Expr::Ident(n) if n == "request" && !self.scope.iter().any(|(s, _)| s == n) => {
                    break
                }
                _ => return Ok(None),
            }
        }
        path.reverse();
        let field = match path.as_slice() {
            ["operation"] => ReqField::Operation,
            ["namespace"] => ReqField::Namespace,
            ["name"] => ReqField::Name,
            ["dryRun"] => ReqField::DryRun,
            ["userInfo", "username"] => ReqField::Username,
            ["userInfo", "groups"] => ReqField::Groups,
            _ => {
                return Err(format!(
                    "selects `request.{}`, which is not compiled",
                    path.join(".")
                ))
            }
        };
        Ok(Some(field))
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Node, Why> {
        if c.iter_var2.is_some() {
            return Err("a two-variable comprehension".into());
        }
        let range = self.node(&c.iter_range)?;
        let init = self.node(&c.accu_init)?;
        let base = self.scope.len();
        let (accu, iter) = (base, base + 1);
        if iter >= SLOTS {
            return Err("comprehensions nested too deeply".into());
        }
        self.scope.push((c.accu_var.clone(), accu));
        self.scope.push((c.iter_var.clone(), iter));
        let parts = (|| {
            Ok::<_, Why>((
                self.node(&c.loop_cond)?,
                self.node(&c.loop_step)?,
                self.node(&c.result)?,
            ))
        })();
        self.scope.truncate(base);
        let (cond, step, result) = parts?;
        Ok(Node::Comp(Box::new(Comp {
            range,
            init,
            accu,
            iter,
            cond,
            step,
            result,
            fold: fold_of(c),
        })))
    }

    fn call(&mut self, c: &CallExpr) -> Result<Node, Why> {
        let f = c.func_name.as_str();
        let args = c.args.as_slice();
        let two = |s: &mut Self| -> Result<(Box<Node>, Box<Node>), Why> {
            Ok((boxed(s.node(&args[0])?), boxed(s.node(&args[1])?)))
        };
        match (&c.target, f, args.len()) {
            (None, operators::LOGICAL_AND, 2) => two(self).map(|(a, b)| Node::And(a, b)),
            (None, operators::LOGICAL_OR, 2) => two(self).map(|(a, b)| Node::Or(a, b)),
            (None, operators::LOGICAL_NOT, 1) => Ok(Node::Not(boxed(self.node(&args[0])?))),
            (None, operators::NOT_STRICTLY_FALSE, 1) => {
                Ok(Node::NotStrictlyFalse(boxed(self.node(&args[0])?)))
            }
            (None, operators::CONDITIONAL, 3) => Ok(Node::Cond(
                boxed(self.node(&args[0])?),
                boxed(self.node(&args[1])?),
                boxed(self.node(&args[2])?),
            )),
            (None, operators::EQUALS, 2) => two(self).map(|(a, b)| Node::Eq(a, b)),
            (None, operators::NOT_EQUALS, 2) => two(self).map(|(a, b)| Node::Ne(a, b)),
            (None, operators::LESS, 2) => two(self).map(|(a, b)| Node::Cmp(Cmp::Lt, a, b)),
            (None, operators::LESS_EQUALS, 2) => two(self).map(|(a, b)| Node::Cmp(Cmp::Le, a, b)),
            (None, operators::GREATER, 2) => two(self).map(|(a, b)| Node::Cmp(Cmp::Gt, a, b)),
            (None, operators::GREATER_EQUALS, 2) => {
                two(self).map(|(a, b)| Node::Cmp(Cmp::Ge, a, b))
            }
            (None, operators::IN, 2) => two(self).map(|(a, b)| Node::In(a, b)),
            (None, operators::INDEX, 2) => two(self).map(|(a, b)| Node::Index(a, b)),
            (None, budget::COST_FN, 1) => Ok(Node::Cost(boxed(self.node(&args[0])?))),
            (None, "size", 1) => Ok(Node::Size(boxed(self.node(&args[0])?))),
            (Some(t), "size", 0) => Ok(Node::Size(boxed(self.node(t)?))),
            (Some(t), "startsWith" | "endsWith" | "contains", 1) => {
                let which = match f {
                    "startsWith" => StrFn::StartsWith,
                    "endsWith" => StrFn::EndsWith,
                    _ => StrFn::Contains,
                };
                let arg = boxed(self.node(&args[0])?);
                Ok(Node::Str(which, boxed(self.node(t)?), arg))
            }
            (Some(t), "split", 1) => {
                let Expr::Literal(LiteralValue::String(sep)) = &args[0].expr else {
                    return Err("`split` with a computed separator".into());
                };
                if sep.inner().is_empty() {
                    return Err("`split` on the empty separator".into());
                }
                Ok(Node::Split(boxed(self.node(t)?), sep.inner().to_string()))
            }
            (None, "int", 1) => Ok(Node::Int(boxed(self.node(&args[0])?))),
            (Some(_), MATCHES_FN, 1) | (None, MATCHES_FN, 2) => {
                let (this, pattern) = match &c.target {
                    Some(t) => (&**t, &args[0]),
                    None => (&args[0], &args[1]),
                };
                let Expr::Literal(LiteralValue::String(p)) = &pattern.expr else {
                    return Err("`matches` with a computed pattern".into());
                };
                // The settings of `matches` (super::env), so a pattern that
                // compiles here compiles there.
                let re = regex::Regex::new(p.inner())
                    .map_err(|_| "`matches` with an invalid pattern".to_string())?;
                Ok(Node::Matches(boxed(self.node(this)?), Box::new(re)))
            }
            (_, name, _) => Err(format!("calls `{}`", display_name(name))),
        }
    }
}

/// A function's name as the user wrote it.
fn display_name(f: &str) -> &str {
    match f {
        super::env::REPLACE_FN => "replace",
        MATCHES_FN => "matches",
        operators::ADD => "+",
        operators::SUBSTRACT => "-",
        operators::MULTIPLY => "*",
        operators::DIVIDE => "/",
        operators::MODULO => "%",
        operators::NEGATE => "-",
        operators::OPT_INDEX => "[?]",
        operators::OPT_SELECT => ".?",
        other => other,
    }
}

fn lit(l: &LiteralValue) -> Result<Lit, Why> {
    Ok(match l {
        LiteralValue::Null => Lit::Null,
        LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
        LiteralValue::Int(i) => Lit::Int(*i.inner()),
        LiteralValue::UInt(u) => Lit::UInt(*u.inner()),
        LiteralValue::Double(d) => Lit::Double(*d.inner()),
        LiteralValue::String(s) => Lit::Str(s.inner().to_string()),
        LiteralValue::Bytes(_) => return Err("a bytes literal".into()),
    })
}

/// The interpreter's test for a logical fold: the loop step is
/// `accu && x` or `accu || x`.
fn fold_of(c: &ComprehensionExpr) -> Option<Fold> {
    let Expr::Call(call) = &c.loop_step.expr else {
        return None;
    };
    let folds = call.target.is_none()
        && matches!(call.args.first().map(|a| &a.expr), Some(Expr::Ident(n)) if *n == c.accu_var);
    match call.func_name.as_str() {
        operators::LOGICAL_AND if folds => Some(Fold::And),
        operators::LOGICAL_OR if folds => Some(Fold::Or),
        _ => None,
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
    pub(super) fn number_paths(&self, numbering: &mut MemoNumbering) {
        self.root.for_each_path(&mut |p| numbering.number(p));
    }

    /// Evaluates the rule. Charges the budget armed on this thread as the
    /// interpreter would; the caller checks whether it ran out.
    pub(super) fn eval<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    fn program(source: &str) -> super::super::CelProgram {
        super::super::CelProgram::compile(source).unwrap()
    }

    /// The rules compiled, and numbered together as a rule set is.
    fn numbered(rules: &[&str]) -> (Vec<super::super::CelProgram>, MemoNumbering) {
        let programs: Vec<_> = rules.iter().map(|r| program(r)).collect();
        let numbering = MemoNumbering::of(&programs);
        (programs, numbering)
    }

    /// Equal prefixes of different rules share a slot; another root or
    /// another prefix gets its own; a chain on a comprehension variable,
    /// or of one field, gets none.
    #[test]
    fn the_numbering_gives_each_distinct_prefix_a_slot() {
        let rules = [
            "self.spec.p.a == 1 && has(self.spec.p.b)",
            "self.spec.p.c == 1 && oldSelf.spec.p.a == 1",
            "self.spec.q.a == 1 && self.x == 1",
            "self.spec.l.all(i, i.m.n == 1)",
        ];
        let (_programs, numbering) = numbered(&rules);
        let mut got: Vec<(Root, Vec<String>)> = numbering.slots.keys().cloned().collect();
        got.sort_by_key(|(r, f)| (format!("{r:?}"), f.clone()));
        let want = [
            (Root::OldSelf, fields(&["spec", "p"])),
            (Root::SelfVar, fields(&["spec"])),
            (Root::SelfVar, fields(&["spec", "p"])),
            (Root::SelfVar, fields(&["spec", "q"])),
        ];
        assert_eq!(got, want);
    }

    /// A memo answers only the rules its own numbering numbered: a rule
    /// numbered by another set reads the object itself.
    #[test]
    fn a_memo_answers_only_its_own_rules() {
        let obj = json!({"spec": {"p": {"a": 1}}});
        let other = json!({"spec": {"p": {"a": 2}}});
        let req = crate::review::RequestBuilder::new(crate::model::Operation::Create)
            .object(obj.clone())
            .build();
        let (mine, theirs) = (program("self.spec.p.a == 1"), program("self.spec.p.a == 1"));
        let memo = PathMemo::new(&MemoNumbering::of([&mine]));
        // Numbered by another set: what counts is the owner it leaves on
        // `theirs`' paths, not the numbering itself.
        let _ = MemoNumbering::of([&theirs]);
        let on = |o| Inputs {
            request: &req,
            object: o,
            old: None,
        };
        // Fill the memo from `obj`; then a rule of the other set, on
        // another object, must not see `obj`'s `spec.p`.
        assert_eq!(
            mine.eval_compiled_raw(on(&obj), Some(&memo)),
            Some(Ok(true))
        );
        assert_eq!(
            theirs.eval_compiled_raw(on(&other), Some(&memo)),
            Some(Ok(false))
        );
        // Its own rule is answered from the memo, even on another object:
        // a memo lives for one request, whose objects do not change.
        assert_eq!(
            mine.eval_compiled_raw(on(&other), Some(&memo)),
            Some(Ok(true))
        );
    }

    /// Rules sharing one memo answer as each does alone, whichever runs
    /// first: `self` and `oldSelf` with the same fields, a failed walk, a
    /// chain on a comprehension variable.
    #[test]
    fn rules_sharing_a_memo_answer_as_alone() {
        let new =
            json!({"spec": {"p": {"region": "us-1", "tags": {"a": "1"}}, "list": [{"x": 1}]}});
        let old = json!({"spec": {"p": {"region": "eu-1"}}});
        let req = crate::review::RequestBuilder::new(crate::model::Operation::Update)
            .object(new.clone())
            .old_object(old.clone())
            .build();
        let inputs = Inputs {
            request: &req,
            object: &new,
            old: Some(&old),
        };
        let rules = [
            "self.spec.p.region == 'us-1'",
            "oldSelf.spec.p.region == 'eu-1'",
            "has(oldSelf.spec.p.tags) == false",
            "has(self.spec.p.tags) && 'a' in self.spec.p.tags",
            "self.spec.q.region == 'x'",
            "self.spec.list.all(i, i.x == 1)",
            "self.spec.p.region != oldSelf.spec.p.region",
        ];
        let (programs, numbering) = numbered(&rules);
        let alone: Vec<_> = programs
            .iter()
            .map(|p| p.eval_compiled_raw(inputs, None))
            .collect();
        assert_eq!(alone[0], Some(Ok(true)));
        assert_eq!(alone[4], Some(Err(Fail::Error)));
        for order in [[0, 1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1, 0]] {
            let memo = PathMemo::new(&numbering);
            for i in order {
                let got = programs[i].eval_compiled_raw(inputs, Some(&memo));
                assert_eq!(got, alone[i], "{}", rules[i]);
            }
        }
    }
}
