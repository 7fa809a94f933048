//! CEL: compiled once when the configuration (or a CRD) loads, evaluated per
//! request against JSON bound as Kubernetes binds it.
//!
//! - [`CelProgram::compile`] parses with `cel` 0.15, then checks and rewrites
//!   the AST ([`limits`]): size, depth and nesting bounds, declared variables
//!   and supported functions only, and metering of the work.
//! - [`Scope`] holds the variables of one evaluation; JSON is converted by
//!   [`json`] with integers as `int`.
//! - Evaluation runs under a budget ([`budget`]): at most
//!   [`budget::COST_LIMIT`] cost units and [`budget::TIME_LIMIT`] of wall
//!   time per evaluation. A program that runs out fails with an evaluation
//!   error; it never stalls the server.

pub mod budget;
mod env;
mod json;
pub mod limits;

use std::sync::Arc;

use cel::common::ast::IdedExpr;
use cel::common::types::{CelBool, CelNull, CelOptional, CelString};
use cel::common::value::Val;
use serde_json::Value;

use crate::model::{Action, Operation, Violation};
use crate::review::Request;

pub use env::FUNCTIONS;

/// The variables of configured rules (docs/configuration.md).
pub const CONFIG_VARS: &[&str] = &["self", "oldSelf", "request"];
/// The variables of a CRD's `x-kubernetes-validations` rules.
pub const CRD_VARS: &[&str] = &["self", "oldSelf"];

/// A compiled CEL expression, shared read-only across requests.
#[derive(Clone)]
pub struct CelProgram {
    expr: Arc<IdedExpr>,
    uses_old_self: bool,
}

impl std::fmt::Debug for CelProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CelProgram")
    }
}

/// Why an expression does not compile, in the compiler's words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(String);

/// Why an evaluation produced no verdict.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The evaluation failed (a missing field, a type mismatch, ...).
    #[error("{0}")]
    Runtime(String),
    /// The cost or time budget ran out.
    #[error("{0}; the expression was stopped")]
    Exceeded(String),
    /// A rule expression returned something other than a bool.
    #[error("the expression returned {0}, not a bool")]
    NotBool(String),
    /// A message expression returned something other than a string.
    #[error("the expression returned {0}, not a string")]
    NotString(String),
}

impl CelProgram {
    /// Compiles a configured rule, which may use `self`, `oldSelf` and `request`.
    pub fn compile(source: &str) -> Result<Self, CompileError> {
        Self::compile_with(source, CONFIG_VARS)
    }

    /// Compiles an expression that may use only `vars`.
    pub fn compile_with(source: &str, vars: &[&str]) -> Result<Self, CompileError> {
        if source.trim().is_empty() {
            return Err(CompileError("the expression is empty".into()));
        }
        if source.len() > limits::MAX_SOURCE_LEN {
            return Err(CompileError(format!(
                "the expression is {} bytes long; at most {} are allowed",
                source.len(),
                limits::MAX_SOURCE_LEN
            )));
        }
        let (expr, uses_old_self) = on_compiler_stack(|| {
            let parser = env::ENV
                .parser()
                .max_recursion_depth(limits::MAX_PARSE_DEPTH);
            let mut expr = parser
                .parse(source)
                .map_err(|e| CompileError(e.to_string()))?;
            let uses_old_self = mentions(&expr, "oldSelf");
            limits::check(&mut expr, vars).map_err(CompileError)?;
            Ok((expr, uses_old_self))
        })?;
        Ok(Self {
            expr: Arc::new(expr),
            uses_old_self,
        })
    }

    /// Whether the expression reads `oldSelf`: in a CRD, a transition rule.
    pub fn uses_old_self(&self) -> bool {
        self.uses_old_self
    }

    fn run<R>(
        &self,
        scope: &Scope<'_>,
        read: impl FnOnce(&dyn Val) -> Result<R, EvalError>,
    ) -> Result<R, EvalError> {
        let guard = budget::Guard::arm(budget::COST_LIMIT, budget::TIME_LIMIT);
        let result = cel::Value::resolve_val(&self.expr, &scope.ctx);
        if let Some(why) = guard.exceeded() {
            let what = match why {
                budget::Exceeded::Cost => format!("cost limit of {} exceeded", budget::COST_LIMIT),
                budget::Exceeded::Time => format!(
                    "time limit of {}ms exceeded",
                    budget::TIME_LIMIT.as_millis()
                ),
            };
            return Err(EvalError::Exceeded(what));
        }
        match result {
            Ok(v) => read(v.as_ref()),
            Err(e) => Err(EvalError::Runtime(e.to_string())),
        }
    }

    /// Evaluates a rule, which must return a bool.
    pub fn eval_bool(&self, scope: &Scope<'_>) -> Result<bool, EvalError> {
        self.run(scope, |v| {
            v.downcast_ref::<CelBool>()
                .map(|b| *b.inner())
                .ok_or_else(|| EvalError::NotBool(v.get_type().name().to_string()))
        })
    }

    /// Evaluates a message expression, which must return a string.
    pub fn eval_string(&self, scope: &Scope<'_>) -> Result<String, EvalError> {
        self.run(scope, |v| {
            v.downcast_ref::<CelString<'_>>()
                .map(|s| s.inner().to_string())
                .ok_or_else(|| EvalError::NotString(v.get_type().name().to_string()))
        })
    }
}

/// Runs the parser on a thread of its own with a large stack. The ANTLR
/// parser recurses once per nesting level with large frames (about 180 KiB
/// each in a debug build), so a dozen nested parentheses would overflow a
/// 2 MiB Tokio worker stack; [`limits::MAX_PARSE_DEPTH`] bounds the depth
/// and this stack holds it. Compiling happens only when a configuration or
/// CRD loads, so the thread costs nothing per request.
fn on_compiler_stack<T: Send>(
    f: impl FnOnce() -> Result<T, CompileError> + Send,
) -> Result<T, CompileError> {
    const STACK: usize = 64 << 20;
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(STACK)
            .spawn_scoped(s, f)
            .map_err(|e| CompileError(format!("failed to start the compiler thread: {e}")))?;
        handle
            .join()
            .map_err(|_| CompileError("the CEL parser panicked on this expression".into()))?
    })
}

fn mentions(e: &IdedExpr, name: &str) -> bool {
    use cel::common::ast::{EntryExpr, Expr};
    match &e.expr {
        Expr::Ident(n) => n == name,
        Expr::Select(s) => mentions(&s.operand, name),
        Expr::Call(c) => {
            c.target.as_deref().is_some_and(|t| mentions(t, name))
                || c.args.iter().any(|a| mentions(a, name))
        }
        Expr::List(l) => l.elements.iter().any(|x| mentions(x, name)),
        Expr::Map(m) => m.entries.iter().any(|en| match &en.expr {
            EntryExpr::MapEntry(me) => mentions(&me.key, name) || mentions(&me.value, name),
            EntryExpr::StructField(f) => mentions(&f.value, name),
        }),
        Expr::Struct(s) => s.entries.iter().any(|en| match &en.expr {
            EntryExpr::MapEntry(me) => mentions(&me.key, name) || mentions(&me.value, name),
            EntryExpr::StructField(f) => mentions(&f.value, name),
        }),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .any(|x| mentions(x, name)),
        Expr::Literal(_) | Expr::Unspecified => false,
    }
}

/// The variables of one evaluation. Values borrow the JSON they come from;
/// build one scope per request and evaluate every rule against it.
pub struct Scope<'v> {
    ctx: cel::Context<'v, 'v>,
}

impl Default for Scope<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'v> Scope<'v> {
    /// An empty scope.
    pub fn new() -> Self {
        Scope {
            ctx: cel::Context::with_env(env::ENV.clone()),
        }
    }

    /// Binds `name` to a JSON value, or to `null` when absent.
    pub fn bind(&mut self, name: &str, value: Option<&'v Value>) {
        let v: Box<dyn Val + 'v> = match value {
            Some(v) => json::to_val(v),
            None => Box::new(CelNull),
        };
        self.ctx.add_variable_as_val(name, v);
    }

    /// Binds `name` to an optional: `optional.none()` when absent.
    pub fn bind_optional(&mut self, name: &str, value: Option<&'v Value>) {
        let v = match value {
            Some(v) => CelOptional::of(json::to_val(v)),
            None => CelOptional::none(),
        };
        self.ctx.add_variable_as_val(name, Box::new(v));
    }

    /// `self`, `oldSelf` and `request` for a configured rule (docs/configuration.md):
    /// `object` is the object under judgment (the old one on DELETE).
    pub fn for_request(req: &'v Request, object: &'v Value, old: Option<&'v Value>) -> Self {
        let mut scope = Self::new();
        scope.bind("self", Some(object));
        scope.bind("oldSelf", old);
        let groups: Vec<Box<dyn Val + 'v>> = req
            .user_info
            .groups
            .iter()
            .flatten()
            .map(|g| Box::new(CelString::from(g.as_str())) as Box<dyn Val + 'v>)
            .collect();
        let user = json::map(vec![
            (
                "username",
                Box::new(CelString::from(
                    req.user_info.username.as_deref().unwrap_or(""),
                )),
            ),
            (
                "groups",
                Box::new(cel::common::types::CelList::from(groups)),
            ),
        ]);
        let request = json::map(vec![
            (
                "operation",
                Box::new(CelString::from(Operation::from(&req.operation).as_str())),
            ),
            (
                "namespace",
                Box::new(CelString::from(req.namespace.as_deref().unwrap_or(""))),
            ),
            ("name", Box::new(CelString::from(req.name.as_str()))),
            ("dryRun", Box::new(CelBool::from(req.dry_run))),
            ("userInfo", user),
        ]);
        scope.ctx.add_variable_as_val("request", request);
        scope
    }
}

/// A `celRules` entry of the configuration, compiled.
#[derive(Debug, Clone)]
pub struct CelRule {
    /// The rule's name, without the `cel:` prefix.
    pub name: String,
    /// The expression as written.
    pub expression: String,
    /// The compiled expression.
    pub program: CelProgram,
    /// The static message.
    pub message: Option<String>,
    /// The compiled `messageExpression`, which wins over `message` when it evaluates.
    pub message_program: Option<CelProgram>,
    /// Deny or Warn, before overrides.
    pub action: Action,
    /// The operations it judges.
    pub operations: Vec<Operation>,
}

/// What a failed rule says: its `messageExpression` when that yields a
/// non-empty string, else its `message`, else the expression. As in
/// Kubernetes, a failing `messageExpression` falls back rather than hiding
/// the failure.
pub fn failure_message(
    expression: &str,
    message: Option<&str>,
    message_program: Option<&CelProgram>,
    scope: &Scope<'_>,
) -> String {
    if let Some(p) = message_program {
        if let Ok(m) = p.eval_string(scope) {
            let m = m.trim();
            if !m.is_empty() {
                return m.to_string();
            }
        }
    }
    match message {
        Some(m) if !m.trim().is_empty() => m.to_string(),
        _ => format!("failed rule: {}", expression.trim()),
    }
}

/// Evaluates a configured rule; `Some` when it fails or cannot be evaluated.
pub fn check_rule(rule: &CelRule, scope: &Scope<'_>) -> Option<Violation> {
    match rule.program.eval_bool(scope) {
        Ok(true) => None,
        Ok(false) => Some(Violation::new(failure_message(
            &rule.expression,
            rule.message.as_deref(),
            rule.message_program.as_ref(),
            scope,
        ))),
        Err(e) => Some(Violation::new(format!("evaluation error: {e}"))),
    }
}

#[cfg(test)]
mod tests;
