//! Compile-time checks and the rewrite that meters evaluation.
//!
//! After parsing, every program is walked once:
//! - its size, depth and comprehension nesting are bounded;
//! - every identifier must be a declared variable, a comprehension variable
//!   or a type name, and every function must be one the environment has
//!   ([`super::env::FUNCTIONS`]), so a rule never fails later for lack of one;
//! - operands of calls whose work grows with them, and comprehension ranges,
//!   are wrapped in [`budget::COST_FN`], which charges the evaluation budget.

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr};

use super::budget;
use super::env::{CONSTANT_COST, FUNCTIONS, REPLACE_FN};

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

    /// Checks `e` and rewrites it in place; returns its depth.
    fn visit(&mut self, e: &mut IdedExpr, nesting: usize) -> usize {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            self.fail(format!(
                "the expression is too large (more than {MAX_NODES} nodes after macro expansion)"
            ));
            return 0;
        }
        let depth = match &mut e.expr {
            Expr::Unspecified => {
                self.fail("the expression has an unspecified node".into());
                0
            }
            Expr::Literal(_) => 0,
            Expr::Ident(name) => {
                if !self.is_variable(name) && !TYPE_NAMES.contains(&name.as_str()) {
                    let why = format!("undeclared reference to '{name}'");
                    self.fail(why);
                }
                0
            }
            Expr::Select(s) => self.visit(&mut s.operand, nesting),
            Expr::List(l) => l
                .elements
                .iter_mut()
                .map(|x| self.visit(x, nesting))
                .max()
                .unwrap_or(0),
            Expr::Map(m) => {
                let mut d = 0;
                for entry in &mut m.entries {
                    match &mut entry.expr {
                        EntryExpr::MapEntry(me) => {
                            d = d
                                .max(self.visit(&mut me.key, nesting))
                                .max(self.visit(&mut me.value, nesting));
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
            Expr::Call(call) => {
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
                let mut d = 0;
                if namespaced.is_none() {
                    if let Some(t) = call.target.as_deref_mut() {
                        d = self.visit(t, nesting);
                    }
                }
                for a in &mut call.args {
                    d = d.max(self.visit(a, nesting));
                }
                let metered = !is_uncharged(&function);
                if metered {
                    if namespaced.is_none() {
                        if let Some(t) = call.target.as_deref_mut() {
                            meter(t, &self.scope, self.vars);
                        }
                    }
                    for a in &mut call.args {
                        meter(a, &self.scope, self.vars);
                    }
                }
                if call.func_name == "replace" && call.target.is_some() && namespaced.is_none() {
                    call.func_name = REPLACE_FN.to_string();
                }
                d
            }
        };
        depth + 1
    }

    fn comprehension(&mut self, c: &mut ComprehensionExpr, nesting: usize) -> usize {
        if nesting + 1 > MAX_COMPREHENSION_NESTING {
            self.fail(format!(
                "comprehensions (all, exists, map, filter, ...) are nested more than {MAX_COMPREHENSION_NESTING} deep"
            ));
            return 0;
        }
        let mut d = self
            .visit(&mut c.iter_range, nesting)
            .max(self.visit(&mut c.accu_init, nesting));
        let bound = 2 + usize::from(c.iter_var2.is_some());
        self.scope.push(c.accu_var.clone());
        self.scope.push(c.iter_var.clone());
        if let Some(v) = &c.iter_var2 {
            self.scope.push(v.clone());
        }
        for part in [&mut c.loop_cond, &mut c.loop_step, &mut c.result] {
            d = d.max(self.visit(part, nesting + 1));
        }
        self.scope.truncate(self.scope.len() - bound);
        // Charging the range once per evaluation of the comprehension
        // accounts for every iteration, nested ones multiplied out.
        meter(&mut c.iter_range, &[], self.vars);
        d
    }
}

/// Wraps `e` in the cost function when it may hand over data nobody paid
/// for: a variable, a field, a comprehension's result, or the result of a
/// call that was not charged itself (an index, `?:`, ...). The result of a
/// charged call is no bigger than what it was charged for, so it is not
/// wrapped again; that also keeps chains like `a + b + c` shallow. Literals
/// are bounded by the source, and `[x]` must stay a list literal for
/// `map`/`filter` to build their result in place.
fn meter(e: &mut IdedExpr, scope: &[String], vars: &[&str]) {
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
        return;
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

/// Checks and rewrites a parsed program; `vars` are the variables it may use.
pub fn check(e: &mut IdedExpr, vars: &[&str]) -> Result<(), String> {
    let mut walk = Walk {
        vars,
        scope: Vec::new(),
        nodes: 0,
        problem: None,
    };
    walk.visit(e, 0);
    if let Some(p) = walk.problem {
        return Err(p);
    }
    let depth = depth(e);
    if depth > MAX_DEPTH {
        return Err(format!(
            "the expression is nested too deeply ({depth} levels; at most {MAX_DEPTH})"
        ));
    }
    Ok(())
}

/// The depth of `e` as evaluated (after the rewrite).
fn depth(e: &IdedExpr) -> usize {
    let children = match &e.expr {
        Expr::Select(s) => depth(&s.operand),
        Expr::Call(c) => c
            .target
            .as_deref()
            .map_or(0, depth)
            .max(c.args.iter().map(depth).max().unwrap_or(0)),
        Expr::List(l) => l.elements.iter().map(depth).max().unwrap_or(0),
        Expr::Map(m) => m
            .entries
            .iter()
            .map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => depth(&me.key).max(depth(&me.value)),
                EntryExpr::StructField(f) => depth(&f.value),
            })
            .max()
            .unwrap_or(0),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .map(depth)
        .max()
        .unwrap_or(0),
        _ => 0,
    };
    children + 1
}
