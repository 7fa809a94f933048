//! The chart's Deployment arguments parsed by mrguard itself, and the RBAC
//! tables of docs/controller.md generated from the chart. These need helm,
//! not an API server, so they always run.

use std::fmt::Write as _;

use clap::Parser;
use serde_json::Value;

use crate::support::chart::Rendered;
use crate::support::repo_root;

fn render(values: &str) -> Rendered {
    Rendered::render("mrguard", "crossplane-system", values).unwrap_or_else(|e| panic!("{e}"))
}

/// `extraArgs` that repeat a flag the chart already sets win, as the last
/// occurrence; were the second occurrence refused ("cannot be used
/// multiple times"), the pod would crash-loop.
#[test]
fn extra_args_override_the_flags_the_chart_sets() {
    let rendered = render(
        r#"{"extraArgs": ["--audit-interval=30s", "--listen=127.0.0.1:19443",
                          "--metrics-listen=127.0.0.1:18080", "--lease-name=other-leader",
                          "--controller", "--cert-extra-names=127.0.0.1"]}"#,
    );
    let cmd = rendered
        .pod_command("crossplane-system", "mrguard-0")
        .unwrap();
    // The image's binary (the Dockerfile's path); the suite runs the same
    // arguments with the binary cargo built.
    assert_eq!(cmd.binary, "/usr/local/bin/mrguard");
    // The chart does set these before extraArgs.
    for flag in [
        "--audit-interval=10m",
        "--listen=0.0.0.0:9443",
        "--lease-name=mrguard-leader",
    ] {
        assert!(
            cmd.args.iter().any(|a| a == flag),
            "{flag} missing from {:?}",
            cmd.args
        );
    }
    let argv: Vec<String> = std::iter::once("mrguard".to_string())
        .chain(cmd.args.iter().cloned())
        .collect();
    let cli = mrguard::cli::Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("mrguard refuses the chart's arguments {argv:?}:\n{e}"));
    let parsed = format!("{cli:?}");
    for want in [
        "audit_interval: 30s",
        "listen: 127.0.0.1:19443",
        "metrics_listen: 127.0.0.1:18080",
        "lease_name: \"other-leader\"",
        "cert_extra_names: [\"127.0.0.1\"]",
        "controller: true",
    ] {
        assert!(parsed.contains(want), "{want} not in {parsed}");
    }
    // Without extraArgs the chart's own values hold.
    let cmd = render("{}")
        .pod_command("crossplane-system", "mrguard-0")
        .unwrap();
    let argv: Vec<String> = std::iter::once("mrguard".to_string())
        .chain(cmd.args)
        .collect();
    let parsed = format!("{:?}", mrguard::cli::Cli::try_parse_from(&argv).unwrap());
    assert!(parsed.contains("audit_interval: 600s"), "{parsed}");
    assert!(
        parsed.contains("namespace: Some(\"crossplane-system\")"),
        "{parsed}"
    );
}

/// One rule of a Role or ClusterRole as a Markdown table row.
fn row(rule: &Value, groups_note: Option<&str>) -> String {
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let code = |v: Vec<String>| {
        v.iter()
            .map(|s| format!("`{}`", if s.is_empty() { "\"\"" } else { s }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let groups = match groups_note {
        Some(note) => note.to_string(),
        None => code(list(&rule["apiGroups"])),
    };
    let names = list(&rule["resourceNames"]);
    format!(
        "| {groups} | {} | {} | {} |\n",
        code(list(&rule["resources"])),
        code(list(&rule["verbs"])),
        if names.is_empty() {
            String::new()
        } else {
            code(names)
        },
    )
}

/// The RBAC section's tables, from the chart rendered with its default
/// values (release `mrguard` in `crossplane-system`).
pub(crate) fn rbac_tables() -> String {
    let r = render("{}");
    let mut out = String::new();
    let header = "| apiGroups | resources | verbs | resourceNames |\n|---|---|---|---|\n";
    for role in r.of_kind("Role") {
        let _ = write!(
            out,
            "Role `{}` in the release namespace:\n\n{header}",
            role["metadata"]["name"].as_str().unwrap_or_default()
        );
        for rule in role["rules"].as_array().into_iter().flatten() {
            out.push_str(&row(rule, None));
        }
        out.push('\n');
    }
    for role in r.of_kind("ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let audit = name.ends_with("-audit");
        let _ = write!(
            out,
            "ClusterRole `{name}`{}:\n\n{header}",
            if audit {
                " (`rbac.audit.enabled`, default mode `groups`)"
            } else {
                ""
            }
        );
        for rule in role["rules"].as_array().into_iter().flatten() {
            // The services' groups are summarised; the provider config rule
            // (families' own groups) is listed as it is.
            let all = rule["resources"] == serde_json::json!(["*"]);
            let note = (audit && all).then(|| {
                let n = rule["apiGroups"].as_array().map_or(0, Vec::len);
                format!(
                    "{n} groups: `rbac.audit.apiGroups` and every service of `rbac.audit.providerFamilies` \
                     (e.g. `s3.aws.upbound.io`, `s3.aws.m.upbound.io`)"
                )
            });
            out.push_str(&row(rule, note.as_deref()));
        }
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

/// Replaces the text between the markers of `name` in `file`, or checks
/// that it is what the generator makes (MRGUARD_UPDATE_DOCS=1 rewrites).
pub(crate) fn check_generated(file: &str, name: &str, generated: &str) {
    let path = repo_root().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
    let end = format!("<!-- END GENERATED: {name} -->");
    let (Some(b), Some(e)) = (text.find(&begin), text.find(&end)) else {
        panic!("{file} has no {begin:?} … {end:?} markers");
    };
    let current = &text[b + begin.len()..e];
    if current == generated {
        return;
    }
    if std::env::var("MRGUARD_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        let updated = format!("{}{generated}{}", &text[..b + begin.len()], &text[e..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    let mut diff = String::new();
    let (old, new): (Vec<&str>, Vec<&str>) =
        (current.lines().collect(), generated.lines().collect());
    for i in 0..old.len().max(new.len()) {
        match (old.get(i), new.get(i)) {
            (Some(o), Some(n)) if o == n => {}
            (o, n) => {
                let _ = writeln!(
                    diff,
                    "line {}:\n- {}\n+ {}",
                    i + 1,
                    o.unwrap_or(&""),
                    n.unwrap_or(&"")
                );
            }
        }
    }
    panic!(
        "{file}: the generated section {name:?} is out of date (regenerate with \
         MRGUARD_UPDATE_DOCS=1 cargo test -p mrguard --test e2e):\n{diff}"
    );
}

/// docs/controller.md's RBAC tables are the chart's rules, generated.
#[test]
fn the_rbac_tables_in_the_docs_are_the_charts() {
    check_generated("docs/controller.md", "rbac", &rbac_tables());
}
