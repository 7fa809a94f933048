//! Compile-time checks and the rewrite that meters evaluation.
//!
//! After parsing, every program is walked once:
//! - its size, depth and comprehension nesting are bounded;
//! - every identifier must be a declared variable, a comprehension variable
//!   or a type name, and every function must be one the environment has
//!   ([`super::env::FUNCTIONS`]), so a rule never fails later for lack of one;
//! - operands of calls whose work grows with them, and comprehension ranges,
//!   are wrapped in [`budget::COST_FN`], which charges the evaluation budget;
//! - what it reads of each variable is recorded ([`super::reads`]).

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::reads::{Need, Reads};

use super::budget;
use super::env::{CONSTANT_COST, FUNCTIONS, MATCHES_FN, REPLACE_FN};

/// Longest accepted expression, in bytes.
pub const MAX_SOURCE_LEN: usize = 16 * 1024;
/// Parser recursion limit: about this many nested parentheses, brackets
/// or calls (cel-go's default is similar).
pub const MAX_PARSE_DEPTH: u16 = 96;
/// Most AST nodes, after macro expansion.
pub const MAX_NODES: usize = 2_000;
/// Deepest AST, after macro expansion and metering: evaluation recurses
/// once per level, so this keeps it within a 2 MiB Tokio worker stack even
/// in a debug build (about 35 KiB per level there).
pub const MAX_DEPTH: usize = 40;
/// Most comprehensions (`all`, `exists`, `map`, ...) nested in one another.
pub const MAX_COMPREHENSION_NESTING: usize = 3;

const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// The operators the parser produces; a user cannot name them.
fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name == "!_" || name == "-_"
}

struct Walk<'a> {
    vars: &'a [&'a str],
    scope: Vec<String>,
    nodes: usize,
    problem: Option<String>,
    reads: Reads,
    mentions_old_self: bool,
}

/// What the walk learns of a program besides its problems.
pub(super) struct Facts {
    /// What it reads of its variables.
    pub(super) reads: Reads,
    /// Whether the name `oldSelf` appears anywhere (a CRD transition rule).
    pub(super) mentions_old_self: bool,
}

impl Walk<'_> {
    fn fail(&mut self, why: String) {
        if self.problem.is_none() {
            self.problem = Some(why);
        }
    }

    fn is_variable(&self, name: &str) -> bool {
        self.vars.contains(&name) || self.scope.iter().any(|s| s == name)
    }

    /// `a.b.c` as a dotted name, when `e` is only identifiers and selects.
    fn qualified(e: &IdedExpr) -> Option<String> {
        match &e.expr {
            Expr::Ident(n) => Some(n.clone()),
            Expr::Select(s) if !s.test => {
                Some(format!("{}.{}", Self::qualified(&s.operand)?, s.field))
            }
            _ => None,
        }
    }

    fn root(e: &IdedExpr) -> Option<&str> {
        match &e.expr {
            Expr::Ident(n) => Some(n),
            Expr::Select(s) if !s.test => Self::root(&s.operand),
            _ => None,
        }
    }

    /// `e` as a variable and the fields selected from it, when `e` is only
    /// that: `self.a.b`, `self.?a`, `self['a']`, `self[?'a']`. Comprehension
    /// variables shadow the declared ones.
    fn path(&self, e: &IdedExpr) -> Option<(String, Vec<String>)> {
        match &e.expr {
            Expr::Ident(n) if self.vars.contains(&n.as_str()) && !self.scope.contains(n) => {
                Some((n.clone(), Vec::new()))
            }
            Expr::Select(s) if !s.test => {
                let (var, mut path) = self.path(&s.operand)?;
                path.push(s.field.clone());
                Some((var, path))
            }
            Expr::Call(c) => {
                let (operand, key) = Self::literal_index(c)?;
                let (var, mut path) = self.path(operand)?;
                path.push(key.to_string());
                Some((var, path))
            }
            _ => None,
        }
    }

    /// `x['k']`, `x[?'k']` and `x.?k` (all calls): `x` and `k`.
    fn literal_index(c: &CallExpr) -> Option<(&IdedExpr, &str)> {
        if c.target.is_some() || !matches!(c.func_name.as_str(), "_[_]" | "_[?_]" | "_?._") {
            return None;
        }
        match c.args.as_slice() {
            [operand, IdedExpr {
                expr: Expr::Literal(LiteralValue::String(key)),
                ..
            }] => Some((operand, key.inner())),
            _ => None,
        }
    }

    /// Records what `e` reads: a path used as a value is read whole,
    /// `has(path.f)` reads whether `f` is there. Returns whether `e` was
    /// such a read, which then covers the path it selects from.
    fn record_read(&mut self, e: &IdedExpr) -> bool {
        let (found, leaf) = match &e.expr {
            Expr::Select(s) if s.test => (
                self.path(&s.operand).map(|(var, mut path)| {
                    path.push(s.field.clone());
                    (var, path)
                }),
                Need::Presence,
            ),
            _ => (self.path(e), Need::Whole),
        };
        match found {
            Some((var, path)) => {
                self.reads.record(&var, path, leaf);
                true
            }
            None => false,
        }
    }

    /// Checks `e` and rewrites it in place; returns its depth after the
    /// rewrite. `covered` is true when an enclosing read recorded by
    /// [`Self::record_read`] selects from `e`, so that `e` is no read of
    /// its own.
    fn visit(&mut self, e: &mut IdedExpr, nesting: usize, covered: bool) -> usize {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            self.fail(format!(
                "the expression is too large (more than {MAX_NODES} nodes after macro expansion)"
            ));
            return 0;
        }
        let covered = covered || self.record_read(e);
        let depth = match &mut e.expr {
            Expr::Unspecified => {
                self.fail("the expression has an unspecified node".into());
                0
            }
            Expr::Literal(_) => 0,
            Expr::Ident(name) => {
                if name == "oldSelf" {
                    self.mentions_old_self = true;
                }
                if !self.is_variable(name) && !TYPE_NAMES.contains(&name.as_str()) {
                    let why = format!("undeclared reference to '{name}'");
                    self.fail(why);
                }
                0
            }
            Expr::Select(s) => self.visit(&mut s.operand, nesting, covered),
            Expr::List(l) => l
                .elements
                .iter_mut()
                .map(|x| self.visit(x, nesting, false))
                .max()
                .unwrap_or(0),
            Expr::Map(m) => {
                let mut d = 0;
                for entry in &mut m.entries {
                    match &mut entry.expr {
                        EntryExpr::MapEntry(me) => {
                            d = d
                                .max(self.visit(&mut me.key, nesting, false))
                                .max(self.visit(&mut me.value, nesting, false));
                        }
                        EntryExpr::StructField(_) => {
                            self.fail("struct fields in a map literal".into())
                        }
                    }
                }
                d
            }
            Expr::Struct(s) => {
                let why = format!(
                    "message construction ({} {{...}}) is not supported",
                    s.type_name
                );
                self.fail(why);
                0
            }
            Expr::Comprehension(c) => self.comprehension(c, nesting),
            Expr::Call(call) => self.call(call, nesting, covered),
        };
        depth + 1
    }

    fn call(&mut self, call: &mut CallExpr, nesting: usize, covered: bool) -> usize {
        // `optional.of(x)`: the target names a namespace, not a value.
        let namespaced = call
            .target
            .as_deref()
            .filter(|t| Self::root(t).is_some_and(|r| !self.is_variable(r)))
            .and_then(Self::qualified);
        let function = match &namespaced {
            Some(ns) => format!("{ns}.{}", call.func_name),
            None => call.func_name.clone(),
        };
        if !is_operator(&function) && !FUNCTIONS.contains(&function.as_str()) {
            self.fail(format!(
                "function '{function}' is not supported by mrguard's CEL environment"
            ));
            return 0;
        }
        // `x['k']` selects from `x` as `x.k` does.
        let selects = Self::literal_index(call).is_some();
        let metered = !is_uncharged(&function);
        let mut d = 0;
        match (&namespaced, call.target.as_deref_mut()) {
            // A namespace is a dotted name: one level per segment.
            (Some(ns), Some(_)) => d = ns.split('.').count(),
            (None, Some(t)) => {
                d = self.visit(t, nesting, false);
                if metered && meter(t, &self.scope, self.vars) {
                    d += 1;
                }
            }
            (_, None) => {}
        }
        for (i, a) in call.args.iter_mut().enumerate() {
            let mut ad = self.visit(a, nesting, covered && selects && i == 0);
            if metered && meter(a, &self.scope, self.vars) {
                ad += 1;
            }
            d = d.max(ad);
        }
        if namespaced.is_none() {
            if call.func_name == "replace" && call.target.is_some() {
                call.func_name = REPLACE_FN.to_string();
            } else if call.func_name == "matches" {
                call.func_name = MATCHES_FN.to_string();
            }
        }
        d
    }

    fn comprehension(&mut self, c: &mut ComprehensionExpr, nesting: usize) -> usize {
        if nesting + 1 > MAX_COMPREHENSION_NESTING {
            self.fail(format!(
                "comprehensions (all, exists, map, filter, ...) are nested more than {MAX_COMPREHENSION_NESTING} deep"
            ));
            return 0;
        }
        let mut range = self.visit(&mut c.iter_range, nesting, false);
        let mut d = self.visit(&mut c.accu_init, nesting, false);
        let bound = 2 + usize::from(c.iter_var2.is_some());
        self.scope.push(c.accu_var.clone());
        self.scope.push(c.iter_var.clone());
        if let Some(v) = &c.iter_var2 {
            self.scope.push(v.clone());
        }
        for part in [&mut c.loop_cond, &mut c.loop_step, &mut c.result] {
            d = d.max(self.visit(part, nesting + 1, false));
        }
        self.scope.truncate(self.scope.len() - bound);
        // Charging the range once per evaluation of the comprehension
        // accounts for every iteration, nested ones multiplied out.
        if meter(&mut c.iter_range, &[], self.vars) {
            range += 1;
        }
        d.max(range)
    }
}

/// Wraps `e` in the cost function when it may hand over data nobody paid
/// for: a variable, a field, a comprehension's result, or the result of a
/// call that was not charged itself (an index, `?:`, ...). The result of a
/// charged call is no bigger than what it was charged for, so it is not
/// wrapped again; that also keeps chains like `a + b + c` shallow. Literals
/// are bounded by the source, and `[x]` must stay a list literal for
/// `map`/`filter` to build their result in place.
fn meter(e: &mut IdedExpr, scope: &[String], vars: &[&str]) -> bool {
    let wrap = match &e.expr {
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => false,
        // The accumulator of `map`/`filter` must stay a bare identifier too.
        Expr::Ident(n) => !(n.starts_with('@') && scope.iter().any(|s| s == n)),
        Expr::Select(_) | Expr::Comprehension(_) | Expr::Struct(_) | Expr::Unspecified => true,
        Expr::Call(c) => {
            let f = c.func_name.as_str();
            f != budget::COST_FN
                && (is_uncharged(f)
                    || c.target
                        .as_deref()
                        .is_some_and(|t| names_namespace(t, scope, vars)))
        }
    };
    if !wrap {
        return false;
    }
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(cel::common::ast::CallExpr {
            func_name: budget::COST_FN.to_string(),
            target: None,
            args: vec![inner],
        }),
    };
    true
}

/// Calls whose operands are not charged: their results are data nobody
/// paid for yet.
fn is_uncharged(f: &str) -> bool {
    matches!(f, "_&&_" | "_||_" | "_?_:_" | "!_" | "@not_strictly_false")
        || CONSTANT_COST.contains(&f)
}

/// Whether a call target is a namespace (`optional` in `optional.of(x)`).
fn names_namespace(t: &IdedExpr, scope: &[String], vars: &[&str]) -> bool {
    Walk::root(t).is_some_and(|r| !vars.contains(&r) && !scope.iter().any(|s| s == r))
}

/// Checks and rewrites a parsed program; `vars` are the variables it may
/// use. One walk does it all: the checks, the metering rewrite, the depth
/// after the rewrite, and what the program reads ([`Facts`]).
pub(super) fn check(e: &mut IdedExpr, vars: &[&str]) -> Result<Facts, String> {
    let mut walk = Walk {
        vars,
        scope: Vec::new(),
        nodes: 0,
        problem: None,
        reads: Reads::default(),
        mentions_old_self: false,
    };
    let depth = walk.visit(e, 0, false);
    if let Some(p) = walk.problem {
        return Err(p);
    }
    if depth > MAX_DEPTH {
        return Err(format!(
            "the expression is nested too deeply ({depth} levels; at most {MAX_DEPTH})"
        ));
    }
    Ok(Facts {
        reads: walk.reads,
        mentions_old_self: walk.mentions_old_self,
    })
}
