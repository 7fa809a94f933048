//! The plan as text (for a terminal, coloured or plain) and as
//! GitHub-flavoured markdown (a summary table, one collapsible section per
//! entry) for a pull-request comment.

use serde_json::Value;

use super::{FieldChange, Mark, Plan, PlanAction};

/// Values longer than this many characters are shortened.
const WIDTH: usize = 60;

fn show(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(none)".into();
    };
    let s = v.to_string();
    if s.chars().count() > WIDTH {
        let cut: String = s.chars().take(WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// The one-line count of the plan.
pub fn summary_line(plan: &Plan) -> String {
    let s = &plan.summary;
    format!(
        "{} to create, {} to adopt, {} to update in place, {} to replace, {} to delete, {} to orphan, {} ignored, {} unchanged, {} skipped; {} denied",
        s.create, s.adopt, s.update, s.replace, s.delete, s.orphan, s.ignored, s.no_change, s.skipped, s.denied
    )
}

/// ANSI colours, or none.
struct Paint(bool);

impl Paint {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn action(&self, a: PlanAction, s: &str) -> String {
        let code = match a {
            PlanAction::Create | PlanAction::Adopt => "32",
            PlanAction::UpdateInPlace => "33",
            PlanAction::ReplaceDenied | PlanAction::ReplaceWarned | PlanAction::DeleteExternal => {
                "31"
            }
            PlanAction::OrphanExternal => "36",
            PlanAction::NoChange | PlanAction::Ignored | PlanAction::Skipped => "2",
        };
        self.wrap(code, s)
    }
    fn mark(&self, m: &Mark) -> String {
        let code = match m {
            Mark::InPlace => "33",
            Mark::ForcesReplacement { .. } => "31",
            Mark::OwnedByProvider { .. } => "35",
            Mark::Ignored { .. } => "2",
            Mark::Drift { .. } => "36",
        };
        self.wrap(code, &m.text())
    }
}

fn mark_detail(m: &Mark) -> Option<&str> {
    match m {
        Mark::Ignored { reason } => Some(reason),
        Mark::Drift { then, .. } => Some(then),
        _ => None,
    }
}

fn field_line(f: &FieldChange) -> String {
    match &f.mark {
        Mark::Drift { .. } => format!("{}: {}", f.path, show(f.new.as_ref())),
        _ => format!(
            "{}: {} → {}",
            f.path,
            show(f.old.as_ref()),
            show(f.new.as_ref())
        ),
    }
}

/// The plan as text, one block per entry; `color` adds ANSI colours.
pub fn render_text(plan: &Plan, color: bool) -> String {
    let p = Paint(color);
    let mut s = String::new();
    for e in &plan.entries {
        let verdict = if e.is_denied() {
            p.wrap("1;31", &e.verdict)
        } else {
            e.verdict.clone()
        };
        s.push_str(&format!(
            "{} {}: {} [{verdict}]\n",
            p.action(e.action, e.action.sign()),
            e.object,
            p.action(e.action, e.action.as_str()),
        ));
        if let (Some(file), Some(line)) = (&e.file, e.line) {
            s.push_str(&format!("    {file}:{line}\n"));
        }
        for f in &e.fields {
            s.push_str(&format!("    {}  {}", field_line(f), p.mark(&f.mark)));
            if let Some(d) = mark_detail(&f.mark) {
                s.push_str(&format!(": {d}"));
            }
            s.push('\n');
        }
        for f in &e.findings {
            s.push_str(&format!(
                "    {} {}: {}\n",
                f.action.to_lowercase(),
                f.rule,
                f.message
            ));
        }
        for w in e.warnings.iter().filter(|w| {
            !e.findings
                .iter()
                .any(|f| w.starts_with(&format!("{}: ", f.rule)))
        }) {
            s.push_str(&format!("    warning: {w}\n"));
        }
        if let Some(i) = &e.invalid {
            s.push_str(&format!("    invalid: {i}\n"));
        }
        for n in &e.notes {
            s.push_str(&format!("    note: {n}\n"));
        }
    }
    s.push_str(&format!("\nPlan: {}.\n", summary_line(plan)));
    s
}

/// Text for a table cell: no line breaks, pipes escaped.
fn cell(s: &str) -> String {
    s.replace('\n', " ").replace('|', "\\|")
}

/// A code span for a table cell.
fn code(s: &str) -> String {
    format!("`{}`", cell(&s.replace('`', "'")))
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plan as GitHub-flavoured markdown: the counts, a summary table with
/// one row per entry, then one `<details>` section per entry.
pub fn render_markdown(plan: &Plan) -> String {
    let mut s = String::from("## mrguard plan\n\n");
    s.push_str(&format!("**Plan:** {}.\n\n", summary_line(plan)));
    s.push_str("| Object | Action | Verdict | Fields | Findings | Manifest |\n");
    s.push_str("|---|---|---|---|---|---|\n");
    for e in &plan.entries {
        let manifest = match (&e.file, e.line) {
            (Some(f), Some(l)) => code(&format!("{f}:{l}")),
            _ => "(deletion)".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {manifest} |\n",
            code(&e.object),
            e.action.as_str(),
            if e.is_denied() {
                format!("**{}**", e.verdict)
            } else {
                e.verdict.clone()
            },
            e.fields.len(),
            e.findings.len(),
        ));
    }
    for e in &plan.entries {
        s.push_str(&format!(
            "\n<details>\n<summary><code>{}</code>: {} [{}]</summary>\n\n",
            html(&e.object),
            html(e.action.as_str()),
            html(&e.verdict)
        ));
        if !e.fields.is_empty() {
            s.push_str("| Field | Old | New | Mark |\n|---|---|---|---|\n");
            for f in &e.fields {
                let mut mark = cell(&f.mark.text());
                if let Some(d) = mark_detail(&f.mark) {
                    mark.push_str(&format!(": {}", cell(d)));
                }
                s.push_str(&format!(
                    "| {} | {} | {} | {mark} |\n",
                    code(&f.path),
                    code(&show(f.old.as_ref())),
                    code(&show(f.new.as_ref())),
                ));
            }
            s.push('\n');
        }
        let mut items = Vec::new();
        for f in &e.findings {
            items.push(format!(
                "**{}** `{}`: {}",
                f.action.to_lowercase(),
                f.rule,
                cell(&f.message)
            ));
        }
        if let Some(i) = &e.invalid {
            items.push(format!("**invalid**: {}", cell(i)));
        }
        for n in &e.notes {
            items.push(format!("note: {}", cell(n)));
        }
        if e.fields.is_empty() && items.is_empty() {
            items.push("nothing changes".into());
        }
        for i in items {
            s.push_str(&format!("- {i}\n"));
        }
        s.push_str("\n</details>\n");
    }
    s
}
