//! The compiled fast path of configured rules: the checked and metered AST
//! (see [`super::limits`]) turned into a tree of [`Node`]s evaluated
//! directly over the request's JSON, with no conversion to CEL values and
//! no allocation for the common shapes.
//!
//! It covers field selection, `has()`, `==`/`!=`/`<`/`<=`/`>`/`>=`, `in`,
//! `size`, `startsWith`, `endsWith`, `contains`, `matches` (a literal
//! pattern, compiled once), `split` (a literal separator), `int`, `all`/`exists` (any comprehension whose parts are
//! covered), `&&`, `||`, `!`, `?:`, literals and constant lists, `self`,
//! `oldSelf` and the fields of `request`. [`compile()`] says why anything else
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

mod compile;
mod eval;
mod memo;

use std::sync::atomic::AtomicU64;

use serde_json::Value;

use crate::admission::review::Request;

pub(super) use compile::compile;
pub use memo::{MemoNumbering, PathMemo};

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

/// How an evaluation that produced no value ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// An error the interpreter raises at the same point.
    Error,
    /// A case this path does not model: the interpreter decides.
    Fallback,
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
        let req = crate::admission::review::RequestBuilder::new(
            crate::admission::model::Operation::Create,
        )
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
        let req = crate::admission::review::RequestBuilder::new(
            crate::admission::model::Operation::Update,
        )
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
