//! `mrguard explain` as text for a terminal.

use super::{CreationState, Explanation, FieldExplanation, SetBy};

/// The explanation as text for a terminal: the facts, the field table,
/// the documented immutable fields, then the hints.
pub fn render_text(e: &Explanation) -> String {
    let mut out = String::new();
    facts(e, &mut out);
    field_table(e, &mut out);
    documented(e, &mut out);
    hints(e, &mut out);
    out
}

/// The heading and one line per derived fact, deletion and identity.
fn facts(e: &Explanation, out: &mut String) {
    let scope = if e.namespace.is_empty() {
        "cluster-scoped".to_string()
    } else {
        format!("namespace {}", e.namespace)
    };
    out.push_str(&format!(
        "{}/{} ({}, {scope})\n",
        e.kind, e.name, e.api_version
    ));
    let c = &e.creation;
    let creation = match c.state {
        CreationState::NotAttempted => "not attempted".to_string(),
        CreationState::Succeeded => format!("succeeded at {}", c.since.as_deref().unwrap_or("?")),
        CreationState::Failed => format!(
            "last attempt failed at {}",
            c.since.as_deref().unwrap_or("?")
        ),
        CreationState::Incomplete => format!(
            "INCOMPLETE since {} (pending is later than succeeded/failed; the provider stopped)",
            c.since.as_deref().unwrap_or("?")
        ),
        CreationState::Attempted => "attempted (times unreadable)".to_string(),
    };
    let d = &e.deletion;
    let protection = if d.protected_by.is_empty() {
        "none".to_string()
    } else if d.protection_applies {
        format!(
            "{} (applies: the outcome is Delete)",
            d.protected_by.join(" and ")
        )
    } else {
        format!(
            "{} (does not apply: the outcome is Orphan)",
            d.protected_by.join(" and ")
        )
    };
    let rows: [(&str, String); 10] = [
        (
            "created",
            format!("{} ({})", yes_no(e.created.value), e.created.because),
        ),
        ("creation", creation),
        (
            "paused",
            format!("{} ({})", yes_no(e.paused.value), e.paused.because),
        ),
        (
            "policies",
            if e.policies.defaulted {
                format!(
                    "{} (managementPolicies absent: the default)",
                    e.policies.set
                )
            } else if e.policies.valid {
                e.policies.set.clone()
            } else {
                format!("INVALID: {}", e.policies.set)
            },
        ),
        ("on delete", format!("{} ({})", d.outcome, d.because)),
        ("protection", protection),
        ("delete now", verdict(&d.denied_by)),
        (
            "update now",
            if e.every_update_denied_by.is_empty() {
                "allowed unless a field below says otherwise".to_string()
            } else {
                format!(
                    "every update denied by {}",
                    e.every_update_denied_by.join(", ")
                )
            },
        ),
        (
            "findings",
            if e.findings.is_empty() {
                "none".to_string()
            } else {
                e.findings
                    .iter()
                    .map(|f| match &f.note {
                        Some(n) => format!("{} {} [{n}]: {}", f.action, f.rule, f.message),
                        None => format!("{} {}: {}", f.action, f.rule, f.message),
                    })
                    .collect::<Vec<_>>()
                    .join("\n              ")
            },
        ),
        (
            "exceptions",
            if e.exceptions.is_empty() {
                "none".to_string()
            } else {
                e.exceptions
                    .iter()
                    .map(|x| {
                        let mut s = format!("{} waives {}", x.name, x.rules.join(", "));
                        match (&x.expires, x.expired) {
                            (Some(t), true) => {
                                s.push_str(&format!(" (EXPIRED at {t}: no longer applies)"))
                            }
                            (Some(t), false) => s.push_str(&format!(" until {t}")),
                            _ => {}
                        }
                        if x.only_some_users {
                            s.push_str(" for some users");
                        }
                        s.push_str(&format!(": {}", x.reason));
                        s
                    })
                    .collect::<Vec<_>>()
                    .join("\n              ")
            },
        ),
    ];
    for (k, v) in rows {
        out.push_str(&format!("  {k:<11} {v}\n"));
    }
    for w in &d.warnings {
        out.push_str(&format!("  {:<11} a delete would warn: {w}\n", ""));
    }
    for l in e.identity.lines() {
        let (k, v) = l.split_once(": ").unwrap_or(("", &l));
        out.push_str(&format!("  {k:<11} {v}\n"));
    }
}

/// "allowed", or the rules that deny.
fn verdict(denied: &[String]) -> String {
    if denied.is_empty() {
        "allowed".to_string()
    } else {
        format!("denied by {}", denied.join(", "))
    }
}

/// One row per value under forProvider and initProvider, in columns.
fn field_table(e: &Explanation, out: &mut String) {
    if !e.fields.is_empty() {
        out.push('\n');
        let header = ["FIELD", "VALUE", "SET BY", "IMMUTABLE", "CHANGE NOW"];
        let rows: Vec<[String; 5]> = e
            .fields
            .iter()
            .map(|f| {
                let by = match f.set_by {
                    SetBy::Unknown => "?".to_string(),
                    SetBy::Provider => format!("{} (late-init)", f.managers.join(", ")),
                    SetBy::User => f.managers.join(", "),
                };
                [
                    f.path.clone(),
                    f.value.clone(),
                    by,
                    match (&f.documented, f.immutable) {
                        (_, true) => "yes".to_string(),
                        (Some(d), false) if d.condition.is_some() => "documented, if".to_string(),
                        (Some(_), false) => "documented".to_string(),
                        (None, false) => "no".to_string(),
                    },
                    verdict(&f.change_denied_by),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut s = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                s.push(' ');
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad + 2));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header));
        for r in &rows {
            out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
        }
    }
}

/// The fields the CRD documents as immutable that the configuration does
/// not list.
fn documented(e: &Explanation, out: &mut String) {
    let documented: Vec<&FieldExplanation> = e
        .fields
        .iter()
        .filter(|f| f.documented.is_some() && !f.immutable)
        .collect();
    if !documented.is_empty() {
        out.push_str(
            "\ndocumented immutable (the CRD's descriptions; rule documented-immutable-field):\n",
        );
        for f in documented {
            let Some(d) = &f.documented else { continue };
            out.push_str(&format!("  {}: {:?} ({})\n", f.path, d.sentence, d.crd));
            if let Some(c) = &d.condition {
                out.push_str(&format!("    condition: {c:?}\n"));
            }
        }
    }
}

/// What to do next, when anything stands out.
fn hints(e: &Explanation, out: &mut String) {
    if !e.hints.is_empty() {
        out.push_str("\nhints:\n");
        for h in &e.hints {
            out.push_str(&format!("  - {h}\n"));
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
