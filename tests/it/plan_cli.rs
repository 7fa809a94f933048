//! `mrguard plan` as CI runs it, offline on the example set of
//! docs/plan.md (tests/fixtures/plan): the JSON against the schema the
//! repository ships, the markdown through a CommonMark parser, the exit
//! codes, and clear failures for input that cannot be judged.

use std::process::Output;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde_json::{json, Value};

use crate::support::bin::{run as mrguard, stderr};
use crate::support::{fixtures, root};

/// `plan` of the example set with `extra` flags.
fn example(extra: &[&str]) -> Output {
    let (m, old, crd, cfg) = (
        fixtures::path("plan/manifests.yaml"),
        fixtures::path("plan/live.yaml"),
        fixtures::path("plan/crd.yaml"),
        fixtures::path("plan/plan-config.yaml"),
    );
    let mut args = vec![
        "plan",
        "-f",
        &m,
        "--old",
        &old,
        "--crd",
        &crd,
        "--config",
        &cfg,
        "--delete",
        "PlanDatabase/archive",
        "--prune",
        "-l",
        "app=shop",
    ];
    args.extend_from_slice(extra);
    mrguard(&args)
}

fn schema() -> Value {
    let text = std::fs::read_to_string(root().join("docs/plan.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn errors(schema: &Value, instance: &Value) -> Vec<String> {
    let v = jsonschema::validator_for(schema).expect("the schema compiles");
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect()
}

#[test]
fn plan_json_is_valid_against_the_shipped_schema() {
    let schema = schema();
    jsonschema::meta::validate(&schema).expect("a valid JSON Schema");
    let out = example(&["-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(errors(&schema, &plan), Vec::<String>::new());
    // Every action of the example and every mark kind is in it.
    let actions: Vec<&str> = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "update in place",
            "replace required (denied)",
            "replace required (documented, warned)",
            "update in place",
            "no change",
            "adopt",
            "create",
            "skipped",
            "delete external",
            "orphan external"
        ]
    );
    let kinds: std::collections::BTreeSet<&str> = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["fields"].as_array().unwrap())
        .map(|f| f["mark"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "drift",
            "forces-replacement",
            "in-place",
            "owned-by-provider"
        ]
    );
    // The schema is strict enough to catch a renamed action or mark.
    let mut bad = plan.clone();
    bad["entries"][0]["action"] = json!("update");
    bad["entries"][1]["fields"][0]["mark"]["kind"] = json!("replace");
    bad["summary"]["extra"] = json!(1);
    assert_eq!(
        errors(&schema, &bad).len(),
        3,
        "{:?}",
        errors(&schema, &bad)
    );
}

/// The text of the inline content between `start` and its end.
fn table(md: &str) -> Vec<Vec<Vec<String>>> {
    let mut tables = Vec::new();
    let (mut rows, mut row, mut cell): (Vec<Vec<String>>, Vec<String>, String) =
        (vec![], vec![], String::new());
    let mut in_table = false;
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES) {
        match ev {
            Event::Start(Tag::Table(_)) => {
                in_table = true;
                rows.clear();
            }
            Event::End(TagEnd::Table) => {
                in_table = false;
                tables.push(std::mem::take(&mut rows));
            }
            Event::End(TagEnd::TableHead) | Event::End(TagEnd::TableRow) => {
                rows.push(std::mem::take(&mut row))
            }
            Event::End(TagEnd::TableCell) => row.push(std::mem::take(&mut cell)),
            Event::Text(t) | Event::Code(t) if in_table => cell.push_str(&t),
            _ => {}
        }
    }
    tables
}

#[test]
fn plan_markdown_is_a_summary_table_and_one_section_per_mr() {
    let out = example(&["-o", "markdown"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let md = String::from_utf8(out.stdout).unwrap();
    let tables = table(&md);
    let summary = &tables[0];
    assert_eq!(
        summary[0],
        ["Object", "Action", "Verdict", "Fields", "Findings", "Manifest"]
    );
    assert_eq!(summary.len(), 11, "a header and ten entries: {summary:?}");
    assert_eq!(summary[2][0], "PlanDatabase/billing");
    assert_eq!(summary[2][1], "replace required (denied)");
    assert_eq!(summary[2][2], "denied");
    assert_eq!(summary[10][1], "orphan external");
    // One collapsible section per entry, each with its summary line; the
    // field tables inside them parse as tables too.
    let html: Vec<String> = Parser::new_ext(&md, Options::ENABLE_TABLES)
        .filter_map(|e| match e {
            Event::Html(h) | Event::InlineHtml(h) => Some(h.to_string()),
            _ => None,
        })
        .collect();
    let joined = html.concat();
    assert_eq!(joined.matches("<details>").count(), 10, "{joined}");
    assert_eq!(joined.matches("</details>").count(), 10);
    assert!(
        joined.contains(
            "<summary><code>PlanDatabase/search</code>: update in place [allowed]</summary>"
        ),
        "{joined}"
    );
    let search = tables
        .iter()
        .find(|t| t.iter().any(|r| r[0] == "spec.forProvider.engineVersion"))
        .expect("the field table of search");
    assert_eq!(search[0], ["Field", "Old", "New", "Mark"]);
    assert_eq!(
        search[1],
        [
            "spec.forProvider.engineVersion",
            "\"16.1\"",
            "\"15.4\"",
            "owned by the provider (field manager provider)"
        ]
    );
}

#[test]
fn exit_codes_follow_terraform_with_detailed_exitcode() {
    let dir = tempfile::tempdir().unwrap();
    let same = crate::support::write(
        dir.path(),
        "same.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    );
    let create = crate::support::write(
        dir.path(),
        "create.yaml",
        "apiVersion: plan.aws.upbound.io/v1beta1\nkind: PlanDatabase\nmetadata:\n  name: n\nspec:\n  forProvider:\n    region: eu-west-1\n",
    );
    let code = |args: &[&str]| mrguard(args).status.code();
    // Nothing changes: 0 either way.
    assert_eq!(code(&["plan", "-f", &same]), Some(0));
    assert_eq!(code(&["plan", "-f", &same, "--detailed-exitcode"]), Some(0));
    // Changes, none denied: 0, or 2 with --detailed-exitcode.
    assert_eq!(code(&["plan", "-f", &create]), Some(0));
    assert_eq!(
        code(&["plan", "-f", &create, "--detailed-exitcode"]),
        Some(2)
    );
    // Denied: 1 either way.
    assert_eq!(example(&[]).status.code(), Some(1));
    assert_eq!(example(&["--detailed-exitcode"]).status.code(), Some(1));
    // Cannot be judged: 2, or 3 with --detailed-exitcode.
    let missing = dir.path().join("missing.yaml").display().to_string();
    assert_eq!(code(&["plan", "-f", &missing]), Some(2));
    assert_eq!(
        code(&["plan", "-f", &missing, "--detailed-exitcode"]),
        Some(3)
    );
}

#[test]
fn bad_input_fails_clearly_and_prints_no_plan() {
    let out = example(&["--delete", "PlanDatabase"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("failed to read --delete \"PlanDatabase\": want KIND[.GROUP]/NAME"),
        "{}",
        stderr(&out)
    );
    let out = example(&["--delete", "PlanDatabase/nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("failed to plan --delete \"PlanDatabase/nope\": no such object"),
        "{}",
        stderr(&out)
    );
    let out = example(&["--prune", "-l", "app in shop"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("failed to parse the label selector"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unreachable_cluster_exits_2_with_the_reason_and_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig = crate::support::write(
        dir.path(),
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    );
    let m = fixtures::path("plan/manifests.yaml");
    let out = mrguard(&["plan", "--live", "-f", &m, "--kubeconfig", &kubeconfig]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no plan that only looks complete");
    let err = stderr(&out);
    assert!(err.starts_with("mrguard plan: failed to "), "{err}");
    assert!(err.contains("(Connect)"), "the reason: {err}");
}

/// The GitHub Action's plan mode: the markdown in the job summary and in a
/// file a later step can post, and the exit code as an output.
#[test]
fn the_action_writes_the_plan_to_the_job_summary_and_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (md, summary, outputs) = (
        dir.path().join("plan.md"),
        dir.path().join("summary"),
        dir.path().join("outputs"),
    );
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/action-check.sh"))
        .env("MRGUARD_BIN", env!("CARGO_BIN_EXE_mrguard"))
        .env("INPUT_MODE", "plan")
        .env("INPUT_FILES", "tests/fixtures/plan/manifests.yaml")
        .env("INPUT_CONFIG", "tests/fixtures/plan/plan-config.yaml")
        .env("INPUT_CRD", "tests/fixtures/plan/crd.yaml")
        .env(
            "INPUT_PLAN_ARGS",
            "--old tests/fixtures/plan/live.yaml --delete PlanDatabase/archive",
        )
        .env("INPUT_PLAN_MARKDOWN", &md)
        .env("INPUT_FAIL_ON_DENY", "false")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &outputs)
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md_text = std::fs::read_to_string(&md).unwrap();
    assert!(md_text.starts_with("## mrguard plan\n"), "{md_text}");
    assert!(md_text.contains("| `PlanDatabase/archive` | delete external |"));
    assert_eq!(
        std::fs::read_to_string(&summary).unwrap(),
        format!("earlier step\n{md_text}")
    );
    let outputs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outputs.contains("exit-code=1"), "{outputs}");
    assert!(
        outputs.contains(&format!("plan={}", md.display())),
        "{outputs}"
    );

    // The action declares the mode and hands every input to the script.
    let a: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join("action.yml")).unwrap())
            .unwrap();
    assert_eq!(a["inputs"]["mode"]["default"], "check");
    for var in ["INPUT_MODE", "INPUT_PLAN_ARGS", "INPUT_PLAN_MARKDOWN"] {
        assert!(a["runs"]["steps"][0]["env"].get(var).is_some(), "{var}");
    }
    assert!(a["outputs"].get("plan").is_some());
}

/// docs/plan.md shows what the binary prints for the example set, text
/// and markdown, byte for byte.
#[test]
fn the_documented_example_is_what_the_binary_prints() {
    let doc = std::fs::read_to_string(root().join("docs/plan.md")).unwrap();
    let args = [
        "plan",
        "-f",
        "tests/fixtures/plan/manifests.yaml",
        "--old",
        "tests/fixtures/plan/live.yaml",
        "--crd",
        "tests/fixtures/plan/crd.yaml",
        "--config",
        "tests/fixtures/plan/plan-config.yaml",
        "--delete",
        "PlanDatabase/archive",
        "--prune",
        "-l",
        "app=shop",
    ];
    for (output, fence) in [("text", "```text\n"), ("markdown", "````markdown\n")] {
        let out = crate::support::bin::mrguard()
            .args(args)
            .args(["-o", output])
            .current_dir(root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let printed = String::from_utf8(out.stdout).unwrap();
        assert!(
            doc.contains(&format!("{fence}{printed}")),
            "docs/plan.md's {output} example is stale; it is now:\n{printed}"
        );
    }
}
