//! PromQL helpers for the dashboard and alert tests. Self-contained (only
//! `promql-parser`, `serde_json` and std) so that the end-to-end suite can
//! include this file with `#[path = "../it/observability/promql.rs"] mod
//! promql;` and compare [`metric_names`] of [`dashboard_exprs`] (the parsed
//! charts/mrguard/dashboards/mrguard.json) and [`rule_exprs`] (the parsed
//! output of `helm template ... --set metrics.prometheusRule.enabled=true`)
//! with what a running mrguard exports ([`exported_series`] of its
//! `/metrics` text).

// Each binary that includes this file uses a different subset.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector};
use serde_json::Value;

/// Replaces Grafana's variables so that the expression is plain PromQL:
/// the interval built-ins become durations, `$__range_s` a number, and a
/// dashboard variable (`$namespace`, `${job}`) the text `var-<name>`, which is
/// valid only inside a label value, where the dashboard must use them.
pub(crate) fn substitute_grafana_vars(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (braced, body) = match after.strip_prefix('{') {
            Some(b) => (true, b),
            None => (false, after),
        };
        let len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let name = &body[..len];
        let mut consumed = len + usize::from(braced);
        if braced {
            assert!(
                body[len..].starts_with('}'),
                "unterminated ${{...}} variable in {expr:?}"
            );
            consumed += 1;
        }
        assert!(!name.is_empty(), "a lone '$' in {expr:?}");
        let value = match name {
            "__rate_interval" | "__interval" => "5m".to_string(),
            "__range" => "1h".to_string(),
            "__range_s" => "3600".to_string(),
            "__interval_ms" | "__range_ms" => "300000".to_string(),
            n if n.starts_with("__") => panic!("unknown Grafana variable ${n} in {expr:?}"),
            n => format!("var-{n}"),
        };
        out.push_str(&value);
        rest = &after[consumed..];
    }
    out.push_str(rest);
    out
}

/// Parses one expression as Prometheus would, after
/// [`substitute_grafana_vars`].
pub(crate) fn parse(expr: &str) -> Result<Expr, String> {
    parser::parse(&substitute_grafana_vars(expr))
}

/// Every vector selector in the expression (those inside range selectors
/// and subqueries too).
pub(crate) fn selectors(expr: &Expr) -> Vec<&VectorSelector> {
    let mut out = Vec::new();
    walk(expr, &mut |e| match e {
        Expr::VectorSelector(vs) => out.push(vs),
        Expr::MatrixSelector(ms) => out.push(&ms.vs),
        _ => {}
    });
    out
}

/// Calls `f` on the expression and every expression below it.
pub(crate) fn walk<'a>(expr: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
    f(expr);
    match expr {
        Expr::Aggregate(a) => {
            walk(&a.expr, f);
            if let Some(p) = &a.param {
                walk(p, f);
            }
        }
        Expr::Unary(u) => walk(&u.expr, f),
        Expr::Binary(b) => {
            walk(&b.lhs, f);
            walk(&b.rhs, f);
        }
        Expr::Paren(p) => walk(&p.expr, f),
        Expr::Subquery(s) => walk(&s.expr, f),
        Expr::Call(c) => {
            for a in &c.args.args {
                walk(a, f);
            }
        }
        Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::Extension(_) => {}
    }
}

/// The metric name a selector reads: `foo{...}` or `{__name__="foo"}`.
pub(crate) fn selector_name(vs: &VectorSelector) -> Option<String> {
    vs.name.clone().or_else(|| {
        vs.matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && matches!(m.op, MatchOp::Equal))
            .map(|m| m.value.clone())
    })
}

/// The label values a selector requires with `=`, by label name.
pub(crate) fn equality_matchers(vs: &VectorSelector) -> BTreeMap<String, String> {
    vs.matchers
        .matchers
        .iter()
        .filter(|m| matches!(m.op, MatchOp::Equal) && m.name != "__name__")
        .map(|m| (m.name.clone(), m.value.clone()))
        .collect()
}

/// Every metric name the expressions read, as written: a histogram is named
/// by its series (`..._bucket`, `..._sum`, `..._count`), exactly as a
/// `/metrics` page lists them. Panics, naming the expression, on one that
/// does not parse or reads a selector without a fixed name.
pub(crate) fn metric_names<I, S>(expr_sources: I) -> BTreeSet<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut names = BTreeSet::new();
    for source in expr_sources {
        let source = source.as_ref();
        let ast = parse(source).unwrap_or_else(|e| panic!("PromQL does not parse: {e}\n{source}"));
        for vs in selectors(&ast) {
            let name = selector_name(vs)
                .unwrap_or_else(|| panic!("a selector without a metric name in {source}"));
            names.insert(name);
        }
    }
    names
}

/// The right-hand numbers of the comparisons in an expression (`x > 3`),
/// outer comparisons first: the thresholds of an alert.
pub(crate) fn thresholds(expr: &Expr) -> Vec<f64> {
    let mut out = Vec::new();
    walk(expr, &mut |e| {
        if let Expr::Binary(b) = e {
            if b.op.is_comparison_operator() {
                if let Expr::NumberLiteral(n) = b.rhs.as_ref() {
                    out.push(n.val);
                }
            }
        }
    });
    out
}

/// One sample line of the Prometheus text format: its labels.
pub(crate) type Labels = BTreeMap<String, String>;

/// The series of a Prometheus text-format page, by sample name
/// (`foo_bucket` for a histogram's buckets). Comment lines are skipped.
pub(crate) fn exported_series(text: &str) -> Result<BTreeMap<String, Vec<Labels>>, String> {
    let mut out: BTreeMap<String, Vec<Labels>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let end = line
            .find(['{', ' '])
            .ok_or_else(|| format!("line {}: no value: {line:?}", n + 1))?;
        let name = &line[..end];
        let labels = if line[end..].starts_with('{') {
            parse_labels(&line[end + 1..]).map_err(|e| format!("line {}: {e}: {line:?}", n + 1))?
        } else {
            Labels::new()
        };
        out.entry(name.to_string()).or_default().push(labels);
    }
    Ok(out)
}

/// `a="x",b="y\"z"} 1` → {a: x, b: y"z}.
fn parse_labels(s: &str) -> Result<Labels, String> {
    let mut labels = Labels::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek() == Some(&'}') {
            return Ok(labels);
        }
        let mut name = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            name.push(c);
        }
        if chars.next() != Some('"') {
            return Err(format!("label {name:?} has no quoted value"));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => return Err("a label value ends in '\\'".into()),
                },
                Some(c) => value.push(c),
                None => return Err(format!("label {name:?} is not terminated")),
            }
        }
        labels.insert(name.trim().to_string(), value);
    }
}

// ---------------------------------------------------------------- sources

/// Every panel of a Grafana dashboard, rows and panels of collapsed rows
/// included.
pub(crate) fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// The `expr` of each of a panel's targets.
pub(crate) fn panel_exprs(p: &Value) -> Vec<String> {
    p["targets"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    t["expr"]
                        .as_str()
                        .expect("a target without expr")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The PromQL inside a variable's query: `label_values(EXPR, label)` and
/// `query_result(EXPR)`; None for `label_values(label)`.
pub(crate) fn variable_expr(query: &str) -> Option<String> {
    if let Some(inner) = query
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return inner.rfind(',').map(|i| inner[..i].trim().to_string());
    }
    if let Some(inner) = query
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return Some(inner.to_string());
    }
    panic!("unknown variable query {query:?}")
}

/// A variable's query text, in the old (string) or new (object) form.
pub(crate) fn variable_query(v: &Value) -> Option<&str> {
    v["query"].as_str().or_else(|| v["query"]["query"].as_str())
}

/// `(where, expr)` of every PromQL expression in the dashboard: panel
/// targets and the query variables' queries.
pub(crate) fn dashboard_exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for e in panel_exprs(p) {
            out.push((format!("panel {:?}", p["title"].as_str().unwrap_or("")), e));
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            if let Some(e) = variable_query(v).and_then(variable_expr) {
                out.push((format!("variable {}", v["name"]), e));
            }
        }
    }
    out
}

/// `(alert, expr)` of every alerting rule of the PrometheusRules among
/// rendered objects.
pub(crate) fn rule_exprs(objects: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| o["kind"] == "PrometheusRule") {
        for g in o["spec"]["groups"].as_array().into_iter().flatten() {
            for r in g["rules"].as_array().into_iter().flatten() {
                if let (Some(alert), Some(expr)) = (r["alert"].as_str(), r["expr"].as_str()) {
                    out.push((alert.to_string(), expr.to_string()));
                }
            }
        }
    }
    out
}
