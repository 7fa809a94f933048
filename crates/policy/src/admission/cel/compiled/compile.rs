//! Compiling a checked, metered AST into [`Node`]s, or saying why a rule
//! stays with the interpreter.

use cel::common::ast::{operators, CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue};

use super::{Cmp, Comp, Compiled, Fold, Lit, Node, Path, ReqField, Root, StrFn, SLOTS};
use crate::admission::cel::budget;
use crate::admission::cel::env::{MATCHES_FN, REPLACE_FN};

/// Why a program stays with the interpreter.
pub(in crate::admission::cel) type Why = String;

struct Compiler {
    /// Comprehension variables in scope, innermost last, with their slots.
    scope: Vec<(String, usize)>,
}

/// Compiles a checked, metered configured rule; `Err` says why it stays
/// with the interpreter.
pub(in crate::admission::cel) fn compile(e: &IdedExpr) -> Result<Compiled, Why> {
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
                // The settings of `matches` (crate::admission::cel::env), so a pattern that
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
        REPLACE_FN => "replace",
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
