//! CEL: compiled once when the configuration (or a CRD) loads, evaluated per
//! request against JSON bound as Kubernetes binds it.
//!
//! - [`CelProgram::compile`] parses with `cel` 0.15, then checks and rewrites
//!   the AST ([`limits`]): size, depth and nesting bounds, declared variables
//!   and supported functions only, and metering of the work.
//! - [`Scope`] holds the variables of one evaluation; JSON is converted by
//!   [`json`] with integers as `int`.
//! - Configured rules are also compiled to a tree evaluated directly over
//!   the request's JSON ([`compiled`]); what that does not cover runs in
//!   the interpreter, per rule ([`CelProgram::mode`]).
//! - Evaluation runs under a budget ([`budget`]): at most
//!   [`budget::COST_LIMIT`] cost units and [`budget::TIME_LIMIT`] of wall
//!   time per evaluation. A program that runs out fails with an evaluation
//!   error; it never stalls the server.
//! - [`typecheck`] checks the expressions mrguard exports as the API
//!   server's CEL compiler does, types included.

pub mod budget;
mod compiled;
mod env;
mod escaping;
#[doc(hidden)]
pub mod gen;
mod json;
pub mod limits;
mod mutation;
mod reads;
pub mod typecheck;

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cel::common::ast::IdedExpr;
use cel::common::types::{CelBool, CelNull, CelOptional, CelString};
use cel::common::value::Val;
use serde_json::Value;

use crate::admission::model::{Action, Operation, Violation};
use crate::admission::review::Request;

pub use compiled::{Fail, Inputs, MemoNumbering, PathMemo};
pub use env::FUNCTIONS;
pub use escaping::escape_property;
pub use mutation::apply as apply_configuration;
pub use reads::{Need, Reads};

/// The variables of configured rules (docs/configuration.md).
pub const CONFIG_VARS: &[&str] = &["self", "oldSelf", "request"];
/// The variables of a CRD's `x-kubernetes-validations` rules.
pub const CRD_VARS: &[&str] = &["self", "oldSelf"];

/// A compiled CEL expression, shared read-only across requests.
#[derive(Clone)]
pub struct CelProgram {
    expr: Arc<IdedExpr>,
    uses_old_self: bool,
    reads: Arc<Reads>,
    /// The compiled fast path, or why there is none.
    fast: Result<Arc<compiled::Compiled>, Arc<str>>,
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
        Self::compile_inner(source, vars, false)
    }

    /// Compiles the expression of a MutatingAdmissionPolicy's mutation,
    /// which may also construct `JSONPatch{...}` and `Object{...}` values
    /// (read back with [`Self::eval_json`]).
    pub fn compile_mutation(source: &str, vars: &[&str]) -> Result<Self, CompileError> {
        Self::compile_inner(source, vars, true)
    }

    fn compile_inner(source: &str, vars: &[&str], mutation: bool) -> Result<Self, CompileError> {
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
        let (expr, facts) = on_compiler_stack(|| {
            let parser = env::ENV
                .parser()
                .max_recursion_depth(limits::MAX_PARSE_DEPTH);
            let mut expr = parser
                .parse(source)
                .map_err(|e| CompileError(e.to_string()))?;
            if mutation {
                let mut next_id = mutation::max_id(&expr);
                mutation::structs_to_maps(&mut expr, &mut next_id).map_err(CompileError)?;
            }
            let facts = limits::check(&mut expr, vars).map_err(CompileError)?;
            Ok((expr, facts))
        })?;
        // The fast path binds variables as configured rules do.
        let fast = if vars == CONFIG_VARS {
            compiled::compile(&expr)
                .map(Arc::new)
                .map_err(|why| Arc::from(why.as_str()))
        } else {
            Err(Arc::from("not a configured rule"))
        };
        Ok(Self {
            expr: Arc::new(expr),
            uses_old_self: facts.mentions_old_self,
            reads: Arc::new(facts.reads),
            fast,
        })
    }

    /// How a configured rule runs: `Ok` when compiled, else why it is
    /// interpreted (`calls `replace``, say).
    pub fn mode(&self) -> Result<(), &str> {
        self.fast.as_ref().map(|_| ()).map_err(|why| &**why)
    }

    /// Evaluates a configured rule on the compiled path; `None` when it
    /// hands over to the interpreter (not compiled, an error whose message
    /// the interpreter words, or a case the compiled path does not model).
    pub fn eval_compiled(&self, inputs: Inputs<'_>) -> Option<Result<bool, EvalError>> {
        self.eval_compiled_in(inputs, None)
    }

    /// [`Self::eval_compiled`], reading objects other rules of the same
    /// request already reached from `memo`.
    pub fn eval_compiled_in<'v>(
        &'v self,
        inputs: Inputs<'v>,
        memo: Option<&PathMemo<'v>>,
    ) -> Option<Result<bool, EvalError>> {
        let fast = self.fast.as_ref().ok()?;
        let guard = budget::Guard::arm(budget::COST_LIMIT, budget::TIME_LIMIT);
        let result = fast.eval(inputs, memo);
        if let Some(why) = guard.exceeded() {
            return Some(Err(exceeded(why)));
        }
        result.ok().map(Ok)
    }

    /// The compiled path's own answer, without handing over: for the
    /// differential fuzz target and tests. `None` when not compiled.
    #[doc(hidden)]
    pub fn eval_compiled_raw<'v>(
        &'v self,
        inputs: Inputs<'v>,
        memo: Option<&PathMemo<'v>>,
    ) -> Option<Result<bool, Fail>> {
        let fast = self.fast.as_ref().ok()?;
        let guard = budget::Guard::arm(budget::COST_LIMIT, budget::TIME_LIMIT);
        let result = fast.eval(inputs, memo);
        if guard.exceeded().is_some() {
            return Some(Err(Fail::Error));
        }
        Some(result)
    }

    /// Gives the prefixes of this rule's selection chains their slots in
    /// `numbering`'s memos ([`PathMemo`]); an interpreted rule has none.
    /// Only [`MemoNumbering::of`] numbers.
    fn number_paths(&self, numbering: &mut MemoNumbering) {
        if let Ok(fast) = &self.fast {
            fast.number_paths(numbering);
        }
    }

    /// Whether the expression reads `oldSelf`: in a CRD, a transition rule.
    pub fn uses_old_self(&self) -> bool {
        self.uses_old_self
    }

    /// What the program reads of its variables: build its [`Scope`] with
    /// [`Scope::reading`] and only that much is converted.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    fn run<R>(
        &self,
        scope: &Scope<'_>,
        read: impl FnOnce(&dyn Val) -> Result<R, EvalError>,
    ) -> Result<R, EvalError> {
        if let Some(built) = scope.reads {
            // A scope built for other programs may lack fields this one
            // reads; evaluating would then see them missing and give a
            // wrong verdict. Every caller in this crate builds the scope from
            // the programs it runs, so this is a bug if it happens.
            if !std::ptr::eq(built, &*self.reads) && !built.covers(&self.reads) {
                return Err(EvalError::Runtime(
                    "internal error: the scope was built without fields this expression reads"
                        .into(),
                ));
            }
        }
        let guard = budget::Guard::arm(budget::COST_LIMIT, budget::TIME_LIMIT);
        let result = cel::Value::resolve_val(&self.expr, &scope.ctx);
        if let Some(why) = guard.exceeded() {
            return Err(exceeded(why));
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

    /// Evaluates an expression whose result is read as JSON: a mutation's
    /// patch list or apply configuration.
    pub fn eval_json(&self, scope: &Scope<'_>) -> Result<Value, EvalError> {
        self.run(scope, |v| mutation::to_json(v).map_err(EvalError::Runtime))
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

fn exceeded(why: budget::Exceeded) -> EvalError {
    EvalError::Exceeded(match why {
        budget::Exceeded::Cost => format!("cost limit of {} exceeded", budget::COST_LIMIT),
        budget::Exceeded::Time => format!(
            "time limit of {}ms exceeded",
            budget::TIME_LIMIT.as_millis()
        ),
    })
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

/// What [`Scope::new`] converts of every variable.
static WHOLE: Need = Need::Whole;

/// The variables of one evaluation. Values borrow the JSON they come from;
/// build one scope per request and evaluate every rule against it.
pub struct Scope<'v> {
    ctx: cel::Context<'v, 'v>,
    /// What the bound JSON holds; `None`: all of it.
    reads: Option<&'v Reads>,
}

impl Default for Scope<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'v> Scope<'v> {
    /// A scope whose variables are converted whole: it serves any program.
    pub fn new() -> Self {
        Scope {
            ctx: cel::Context::with_env(env::ENV.clone()),
            reads: None,
        }
    }

    /// A scope that converts only what `reads` names: it serves the
    /// programs whose [`CelProgram::reads`] it covers (their
    /// [`Reads::union`]). A variable not read at all is not bound.
    pub fn reading(reads: &'v Reads) -> Self {
        Scope {
            ctx: cel::Context::with_env(env::ENV.clone()),
            reads: Some(reads),
        }
    }

    /// What to convert of `name`: `None` when nothing.
    fn need(&self, name: &str) -> Option<&'v Need> {
        match self.reads {
            None => Some(&WHOLE),
            Some(r) => r.of(name),
        }
    }

    /// Binds `name` to a JSON value, or to `null` when absent.
    pub fn bind(&mut self, name: &str, value: Option<&'v Value>) {
        let Some(need) = self.need(name) else {
            return;
        };
        let v: Box<dyn Val + 'v> = match value {
            Some(v) => json::to_val_reading(v, need),
            None => Box::new(CelNull),
        };
        self.ctx.add_variable_as_val(name, v);
    }

    /// Binds `name` to an optional: `optional.none()` when absent.
    pub fn bind_optional(&mut self, name: &str, value: Option<&'v Value>) {
        let Some(need) = self.need(name) else {
            return;
        };
        let v = match value {
            Some(v) => CelOptional::of(json::to_val_reading(v, need)),
            None => CelOptional::none(),
        };
        self.ctx.add_variable_as_val(name, Box::new(v));
    }

    /// `self`, `oldSelf` and `request` for a configured rule (docs/configuration.md):
    /// `object` is the object under judgment (the old one on DELETE).
    /// Only what `reads` names is converted (see [`CelRules::reads`]).
    pub fn for_request(
        req: &'v Request,
        object: &'v Value,
        old: Option<&'v Value>,
        reads: &'v Reads,
    ) -> Self {
        let mut scope = Self::reading(reads);
        scope.bind("self", Some(object));
        scope.bind("oldSelf", old);
        if scope.need("request").is_none() {
            return scope;
        }
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

/// The `celRules` of one `resources` entry, with what they read together,
/// so that one [`Scope`] per request serves them all and converts only that.
#[derive(Debug, Clone, Default)]
pub struct CelRules {
    rules: Vec<CelRule>,
    reads: Reads,
    /// What the interpreter reads when the compiled rules answer: the rules
    /// that are not compiled, and every message expression.
    interpreted_reads: Reads,
    /// `cel:<name>` of each rule, made once rather than per request.
    finding_names: Vec<String>,
    /// The slots of a request's [`PathMemo`], shared by these rules.
    numbering: MemoNumbering,
}

impl CelRules {
    /// The rules, and the union of what their expressions and message
    /// expressions read.
    pub fn new(rules: Vec<CelRule>) -> Self {
        let mut reads = Reads::default();
        let mut interpreted_reads = Reads::default();
        for r in &rules {
            reads.union(r.program.reads());
            if r.program.mode().is_err() {
                interpreted_reads.union(r.program.reads());
            }
            if let Some(m) = &r.message_program {
                reads.union(m.reads());
                interpreted_reads.union(m.reads());
            }
        }
        let finding_names = rules.iter().map(|r| format!("cel:{}", r.name)).collect();
        let numbering = MemoNumbering::of(rules.iter().map(|r| &r.program));
        CelRules {
            rules,
            reads,
            interpreted_reads,
            finding_names,
            numbering,
        }
    }

    /// Each rule with its finding name, `cel:<name>`.
    pub fn named(&self) -> impl Iterator<Item = (&CelRule, &str)> {
        self.rules
            .iter()
            .zip(self.finding_names.iter().map(String::as_str))
    }

    /// What the rules read: the argument of [`Scope::for_request`].
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// What the rules read in the interpreter when every compiled rule
    /// answers on the compiled path: the argument of [`RuleScope::new`].
    pub fn interpreted_reads(&self) -> &Reads {
        &self.interpreted_reads
    }
}

impl std::ops::Deref for CelRules {
    type Target = [CelRule];

    fn deref(&self) -> &[CelRule] {
        &self.rules
    }
}

impl<'a> IntoIterator for &'a CelRules {
    type Item = &'a CelRule;
    type IntoIter = std::slice::Iter<'a, CelRule>;

    fn into_iter(self) -> Self::IntoIter {
        self.rules.iter()
    }
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

/// The variables of configured rules for one request: the compiled path
/// reads the JSON directly, and the interpreter's [`Scope`] is built on
/// first use only (a rule not compiled, a failure message to evaluate).
pub struct RuleScope<'v> {
    inputs: Inputs<'v>,
    rules: &'v CelRules,
    /// For what the interpreter reads when compiled rules answer.
    scope: OnceCell<Scope<'v>>,
    /// For everything: a compiled rule handed over reads what `scope`
    /// may leave out.
    whole: OnceCell<Scope<'v>>,
    /// What the compiled rules' selections reached.
    memo: PathMemo<'v>,
}

impl<'v> RuleScope<'v> {
    /// The scope of `rules` on `inputs`.
    pub fn new(inputs: Inputs<'v>, rules: &'v CelRules) -> Self {
        RuleScope {
            inputs,
            rules,
            scope: OnceCell::new(),
            whole: OnceCell::new(),
            memo: PathMemo::new(&rules.numbering),
        }
    }

    fn build(&self, reads: &'v Reads) -> Scope<'v> {
        let i = self.inputs;
        Scope::for_request(i.request, i.object, i.old, reads)
    }

    /// The interpreter's scope, built on first use.
    pub fn scope(&self) -> &Scope<'v> {
        self.scope
            .get_or_init(|| self.build(self.rules.interpreted_reads()))
    }

    /// A scope for every rule and message, built on first use.
    fn whole(&self) -> &Scope<'v> {
        self.whole.get_or_init(|| self.build(self.rules.reads()))
    }
}

/// Evaluates a configured rule, compiled when it can be; `Some` when it
/// fails or cannot be evaluated. The verdict and message are those of
/// [`check_rule`].
pub fn check_configured<'v>(rule: &'v CelRule, at: &RuleScope<'v>) -> Option<Violation> {
    match rule.program.eval_compiled_in(at.inputs, Some(&at.memo)) {
        Some(Ok(true)) => None,
        Some(Ok(false)) => Some(Violation::new(failure_message(
            &rule.expression,
            rule.message.as_deref(),
            rule.message_program.as_ref(),
            at.scope(),
        ))),
        Some(Err(e)) => Some(Violation::new(format!("evaluation error: {e}"))),
        // A compiled rule handing over reads what the interpreter's scope
        // may have left out (errors are the rare case).
        None if rule.program.mode().is_ok() => check_rule(rule, at.whole()),
        None => check_rule(rule, at.scope()),
    }
}

/// The caller's monotonic clock, read around each configured rule to time
/// it (`admission::Decider::timed`): the crate reads no clock of its own,
/// and a test can time with a clock it controls.
pub type RuleClock<'a> = &'a (dyn Fn() -> Instant + Sync);

/// How long one configured rule's evaluation took in one decision, for
/// the server's `mrguard_cel_rule_duration_seconds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelTiming {
    /// The rule's finding name, `cel:<name>`: the metric's `rule` label.
    pub rule: String,
    /// From the end of the previous rule evaluated (or the first clock
    /// read) to the end of this one.
    pub took: Duration,
}

/// How the compiled path fared on one evaluation, in [`differential`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// The expression is not compiled.
    NotCompiled,
    /// The compiled path handed over to the interpreter.
    HandedOver,
    /// The compiled path answered as the interpreter did: the same
    /// verdict, or an error (whose message the interpreter then gives).
    Agreed,
}

/// Compiles `source` as a configured rule and evaluates it both ways on
/// `inputs`: `Err` describes a disagreement (a different verdict, or a
/// verdict where the interpreter fails, or the reverse, or a different
/// outcome once the hand-over is taken into account). For the differential
/// fuzz target and the unit tests.
#[doc(hidden)]
pub fn differential(source: &str, inputs: Inputs<'_>) -> Result<Agreement, String> {
    let Ok(p) = CelProgram::compile(source) else {
        return Ok(Agreement::NotCompiled);
    };
    let scope = Scope::for_request(inputs.request, inputs.object, inputs.old, p.reads());
    let interpreted = p.eval_bool(&scope);
    let Some(raw) = p.eval_compiled_raw(inputs, None) else {
        return Ok(Agreement::NotCompiled);
    };
    // The memo never changes an answer: neither filling it nor reading it
    // back (the second pass finds every object the first reached).
    let memo = PathMemo::new(&MemoNumbering::of([&p]));
    for pass in ["filling", "reading"] {
        let memoised = p.eval_compiled_raw(inputs, Some(&memo));
        if memoised != Some(raw) {
            return Err(format!(
                "{source}: compiled {raw:?}, {pass} the memo {memoised:?}"
            ));
        }
    }
    let agreed = match (&raw, &interpreted) {
        (Ok(a), Ok(b)) => a == b,
        (Err(Fail::Error), Err(_)) => true,
        (Err(Fail::Fallback), _) => true,
        _ => false,
    };
    if !agreed {
        return Err(format!(
            "{source}: compiled {raw:?}, interpreted {interpreted:?}"
        ));
    }
    let combined = p
        .eval_compiled(inputs)
        .unwrap_or_else(|| interpreted.clone());
    // Which limit stops a runaway program first depends on the clock.
    let both_stopped = matches!(
        (&combined, &interpreted),
        (Err(EvalError::Exceeded(_)), Err(EvalError::Exceeded(_)))
    );
    if combined != interpreted && !both_stopped {
        return Err(format!(
            "{source}: with hand-over {combined:?}, interpreted {interpreted:?}"
        ));
    }
    Ok(match raw {
        Err(Fail::Fallback) => Agreement::HandedOver,
        _ => Agreement::Agreed,
    })
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
