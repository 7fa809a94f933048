//! The values table of the chart README, generated from values.yaml the way
//! helm-docs does it (no helm-docs binary: only package registries are
//! reachable here). What is followed:
//!
//! - a key's description is the `# -- text` comment directly above it (a
//!   contiguous block of comment lines; only the last `# --` group of the
//!   block counts), continued by the comment lines after it, joined with
//!   spaces; `# -- (type) text` overrides the type;
//! - `# @default -- text` replaces the Default column;
//! - keys are dotted paths (`image.tag`, list items `[0]`; a key with a dot
//!   or space is quoted); rows are sorted by key;
//! - a described map or list is one row with its whole default as JSON, and
//!   its children get rows only when they have their own description; an
//!   undescribed leaf gets a row with an empty description (which
//!   [`undocumented`] reports);
//! - Default is the JSON of the value (Go's encoding: sorted keys, `<>&`
//!   escaped) in backticks, `nil` for null.
//!
//! Deviations, for the table to render: `|` in a cell is escaped, and so are
//! `<` and `>` outside code spans (GitHub drops `<name>` as an unknown tag).

use std::collections::BTreeMap;

use granit_parser::{Event, Options, Parser, ScalarStyle};

/// One row of the values table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) key: String,
    pub(crate) kind: String,
    pub(crate) default: String,
    pub(crate) description: String,
}

#[derive(Debug, Clone)]
enum Node {
    /// Keys in file order, each with the 1-based line it is on.
    Map(Vec<(String, usize, Node)>),
    Seq(Vec<Node>),
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

#[derive(Debug, Default, Clone)]
struct Description {
    text: String,
    kind: Option<String>,
    default: Option<String>,
}

/// The rows of the values table of a values.yaml.
pub(crate) fn rows(values_yaml: &str) -> Result<Vec<Row>, String> {
    let root = parse(values_yaml)?;
    let lines: Vec<&str> = values_yaml.lines().collect();
    let mut descriptions = BTreeMap::new();
    collect_descriptions(&root, "", &lines, &mut descriptions);
    let mut rows = Vec::new();
    if let Node::Map(entries) = &root {
        for (k, _, v) in entries {
            rows_of(&key_path("", k), v, &descriptions, true, &mut rows);
        }
    } else {
        return Err("values.yaml is not a mapping".into());
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(rows)
}

/// Keys whose row has no description.
pub(crate) fn undocumented(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.description.trim().is_empty())
        .map(|r| r.key.clone())
        .collect()
}

/// Lines (1-based) with a `# --` comment that no key picks up, e.g. one
/// separated from its key by a blank line.
pub(crate) fn orphan_descriptions(values_yaml: &str) -> Result<Vec<usize>, String> {
    let root = parse(values_yaml)?;
    let lines: Vec<&str> = values_yaml.lines().collect();
    let mut used = Vec::new();
    key_lines(&root, &mut used);
    let mut attached = std::collections::BTreeSet::new();
    for line in used {
        for (i, _) in comment_block(&lines, line) {
            attached.insert(i + 1);
        }
    }
    Ok(lines
        .iter()
        .enumerate()
        .filter(|(i, l)| l.trim_start().starts_with("# --") && !attached.contains(&(i + 1)))
        .map(|(i, _)| i + 1)
        .collect())
}

/// The markdown table.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(&r.key),
            cell(&r.kind),
            cell(&r.default),
            cell(&r.description)
        ));
    }
    out
}

fn cell(s: &str) -> String {
    // `<name>` outside a code span would be read as an HTML tag and vanish.
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.replace('|', "\\|");
            if i % 2 == 0 {
                part.replace('<', "&lt;").replace('>', "&gt;")
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

fn key_path(prefix: &str, key: &str) -> String {
    let key = if key.contains('.') || key.contains(' ') {
        format!("\"{key}\"")
    } else {
        key.to_string()
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

fn rows_of(
    path: &str,
    node: &Node,
    descriptions: &BTreeMap<String, Description>,
    document_leaves: bool,
    out: &mut Vec<Row>,
) {
    let described = descriptions.get(path);
    let row = |node: &Node| {
        let d = described.cloned().unwrap_or_default();
        let (kind, default) = match node {
            Node::Null => (
                d.kind.clone().unwrap_or_else(|| "string".into()),
                "`nil`".to_string(),
            ),
            _ => (
                d.kind.clone().unwrap_or_else(|| type_name(node).into()),
                format!("`{}`", json(node)),
            ),
        };
        Row {
            key: path.to_string(),
            kind,
            default: d.default.clone().unwrap_or(default),
            description: d.text,
        }
    };
    match node {
        _ if is_empty(node) => {
            if document_leaves || described.is_some() {
                out.push(row(node));
            }
        }
        Node::Map(entries) => {
            let mut leaves = document_leaves;
            if described.is_some() {
                out.push(row(node));
                leaves = false;
            }
            for (k, _, v) in entries {
                rows_of(&key_path(path, k), v, descriptions, leaves, out);
            }
        }
        Node::Seq(items) => {
            let mut leaves = document_leaves;
            if described.is_some() {
                out.push(row(node));
                leaves = false;
            }
            for (i, v) in items.iter().enumerate() {
                rows_of(&format!("{path}[{i}]"), v, descriptions, leaves, out);
            }
        }
        _ => {
            if document_leaves || described.is_some() {
                out.push(row(node));
            }
        }
    }
}

fn is_empty(node: &Node) -> bool {
    match node {
        Node::Map(e) => e.is_empty(),
        Node::Seq(s) => s.is_empty(),
        _ => false,
    }
}

fn type_name(node: &Node) -> &'static str {
    match node {
        Node::Map(_) => "object",
        Node::Seq(_) => "list",
        Node::Bool(_) => "bool",
        Node::Int(_) => "int",
        Node::Float(_) => "float",
        Node::Null | Node::Str(_) => "string",
    }
}

/// Compact JSON as Go's encoding/json writes it.
fn json(node: &Node) -> String {
    match node {
        Node::Null => "null".into(),
        Node::Bool(b) => b.to_string(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{}", *f as i64),
        Node::Float(f) => f.to_string(),
        Node::Str(s) => go_string(s),
        Node::Seq(items) => format!("[{}]", items.iter().map(json).collect::<Vec<_>>().join(",")),
        Node::Map(entries) => {
            let sorted: BTreeMap<&str, &Node> =
                entries.iter().map(|(k, _, v)| (k.as_str(), v)).collect();
            format!(
                "{{{}}}",
                sorted
                    .iter()
                    .map(|(k, v)| format!("{}:{}", go_string(k), json(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
    }
}

fn go_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn collect_descriptions(
    node: &Node,
    prefix: &str,
    lines: &[&str],
    out: &mut BTreeMap<String, Description>,
) {
    match node {
        Node::Map(entries) => {
            for (k, line, v) in entries {
                let path = key_path(prefix, k);
                let block: Vec<&str> = comment_block(lines, *line)
                    .into_iter()
                    .map(|(_, l)| l)
                    .collect();
                if let Some(d) = parse_comment(&block) {
                    out.insert(path.clone(), d);
                }
                collect_descriptions(v, &path, lines, out);
            }
        }
        Node::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_descriptions(v, &format!("{prefix}[{i}]"), lines, out);
            }
        }
        _ => {}
    }
}

fn key_lines(node: &Node, out: &mut Vec<usize>) {
    match node {
        Node::Map(entries) => {
            for (_, line, v) in entries {
                out.push(*line);
                key_lines(v, out);
            }
        }
        Node::Seq(items) => items.iter().for_each(|v| key_lines(v, out)),
        _ => {}
    }
}

/// The comment lines directly above 1-based `line`, top to bottom, with
/// their 0-based indexes; a blank or other line ends the block.
fn comment_block<'a>(lines: &[&'a str], line: usize) -> Vec<(usize, &'a str)> {
    let mut block = Vec::new();
    let mut i = line.saturating_sub(1);
    while i > 0 {
        let l = lines[i - 1].trim_start();
        if !l.starts_with('#') {
            break;
        }
        block.push((i - 1, l));
        i -= 1;
    }
    block.reverse();
    block
}

/// helm-docs' reading of one key's comment block.
fn parse_comment(block: &[&str]) -> Option<Description> {
    let start = block.iter().rposition(|l| l.starts_with("# --"))?;
    let first = block[start].trim_start_matches('#').trim_start();
    let mut text = first.strip_prefix("--")?.trim_start().to_string();
    let mut d = Description::default();
    if let Some(rest) = text.strip_prefix('(') {
        if let Some(end) = rest.find(')') {
            d.kind = Some(rest[..end].to_string());
            text = rest[end + 1..].trim_start().to_string();
        }
    }
    let mut raw = false;
    for line in &block[start + 1..] {
        let body = line.trim_start();
        if let Some(v) = body.strip_prefix("# @default -- ") {
            d.default = Some(v.to_string());
            continue;
        }
        let after_hash = body.trim_start_matches('#');
        if after_hash.trim_start().starts_with("@raw") {
            raw = true;
            continue;
        }
        if body.starts_with("# @section -- ")
            || after_hash.trim_start().starts_with("@notationType")
            || after_hash.trim_start().starts_with("@ignore")
        {
            continue;
        }
        let rest = body.strip_prefix('#').unwrap_or(body);
        let rest = rest
            .strip_prefix(|c: char| c.is_whitespace())
            .unwrap_or(rest);
        text.push(if raw { '\n' } else { ' ' });
        text.push_str(rest);
    }
    d.text = text;
    Some(d)
}

fn parse(yaml: &str) -> Result<Node, String> {
    let mut options = Options::default();
    options.emit_comments = false;
    let mut parser = Parser::new_from_str_with_options(yaml, options);
    let mut next = move || -> Result<(Event<'_>, usize), String> {
        match parser.next_event() {
            Some(Ok((ev, span))) => Ok((ev, span.start.line())),
            Some(Err(e)) => Err(format!("values.yaml is not YAML: {e}")),
            None => Err("values.yaml ended early".into()),
        }
    };
    // Stream and document start, the root node, then the end.
    loop {
        match next()?.0 {
            Event::StreamStart | Event::DocumentStart(..) => continue,
            ev => return node(ev, &mut next),
        }
    }
}

fn node<'a>(
    ev: Event<'a>,
    next: &mut impl FnMut() -> Result<(Event<'a>, usize), String>,
) -> Result<Node, String> {
    match ev {
        Event::MappingStart(..) => {
            let mut entries = Vec::new();
            loop {
                match next()? {
                    (Event::MappingEnd, _) => return Ok(Node::Map(entries)),
                    (Event::Scalar(k, ..), line) => {
                        let (v, _) = next()?;
                        entries.push((k.into_owned(), line, node(v, next)?));
                    }
                    (other, line) => {
                        return Err(format!(
                            "line {line}: a mapping key that is not a scalar: {other:?}"
                        ))
                    }
                }
            }
        }
        Event::SequenceStart(..) => {
            let mut items = Vec::new();
            loop {
                match next()? {
                    (Event::SequenceEnd, _) => return Ok(Node::Seq(items)),
                    (ev, _) => items.push(node(ev, next)?),
                }
            }
        }
        Event::Scalar(v, style, _, tag) => Ok(scalar(
            &v,
            style,
            tag.as_ref()
                .and_then(|t| t.core_suffix().map(str::to_string)),
        )),
        other => Err(format!("unexpected YAML event in values.yaml: {other:?}")),
    }
}

/// The YAML 1.2 core schema, as yaml.v3 resolves plain scalars.
fn scalar(v: &str, style: ScalarStyle, tag: Option<String>) -> Node {
    match tag.as_deref() {
        Some("str") => return Node::Str(v.into()),
        Some("int") => return v.parse().map(Node::Int).unwrap_or(Node::Str(v.into())),
        Some("float") => return v.parse().map(Node::Float).unwrap_or(Node::Str(v.into())),
        Some("bool") => return Node::Bool(matches!(v, "true" | "True" | "TRUE")),
        Some("null") => return Node::Null,
        _ => {}
    }
    if style != ScalarStyle::Plain {
        return Node::Str(v.into());
    }
    match v {
        "" | "~" | "null" | "Null" | "NULL" => return Node::Null,
        "true" | "True" | "TRUE" => return Node::Bool(true),
        "false" | "False" | "FALSE" => return Node::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" => return Node::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Node::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Node::Float(f64::NAN),
        _ => {}
    }
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(i) = v.parse() {
            return Node::Int(i);
        }
    }
    if let Some(hex) = v.strip_prefix("0x") {
        if let Ok(i) = i64::from_str_radix(hex, 16) {
            return Node::Int(i);
        }
    }
    if let Some(oct) = v.strip_prefix("0o") {
        if let Ok(i) = i64::from_str_radix(oct, 8) {
            return Node::Int(i);
        }
    }
    let looks_float = digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if looks_float {
        if let Ok(f) = v.parse() {
            return Node::Float(f);
        }
    }
    Node::Str(v.into())
}
