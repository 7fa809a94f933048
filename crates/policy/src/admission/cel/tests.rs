use super::*;
use crate::admission::rules::testing::{mr, Case};
use serde_json::json;

/// Evaluates `expr` twice: with `self` converted whole, and with only what
/// the program reads converted. Every test through here checks that the
/// two agree, errors included.
fn eval_on(expr: &str, this: &Value) -> Result<bool, EvalError> {
    eval_with_old(expr, this, None)
}

fn eval_with_old(expr: &str, this: &Value, old: Option<&Value>) -> Result<bool, EvalError> {
    let p = CelProgram::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut full = Scope::new();
    full.bind("self", Some(this));
    full.bind("oldSelf", old);
    let mut lazy = Scope::reading(p.reads());
    lazy.bind("self", Some(this));
    lazy.bind("oldSelf", old);
    let whole = p.eval_bool(&full);
    assert_eq!(
        p.eval_bool(&lazy),
        whole,
        "{expr}: reads {:?}",
        p.reads().paths()
    );
    // And the compiled path agrees with both.
    let req = crate::admission::review::RequestBuilder::new(Operation::Create).build();
    let inputs = Inputs {
        request: &req,
        object: this,
        old,
    };
    if let Err(e) = differential(expr, inputs) {
        panic!("{e}");
    }
    whole
}

fn t(expr: &str, this: &Value) {
    assert_eq!(eval_on(expr, this), Ok(true), "{expr}");
}

fn compile_err(expr: &str) -> String {
    CelProgram::compile(expr)
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn empty_and_broken_sources_are_errors_not_panics() {
    for src in [
        "",
        " ",
        "(",
        "\t\n",
        ")",
        "self.",
        "'unterminated",
        "1 +",
        "[1, 2",
        "{'a': }",
    ] {
        let r = std::panic::catch_unwind(|| CelProgram::compile(src).map(|_| ()));
        match r {
            Ok(Err(e)) => assert!(!e.to_string().is_empty(), "{src:?}"),
            Ok(Ok(())) => panic!("{src:?} compiled"),
            Err(_) => panic!("{src:?} panicked"),
        }
    }
}

#[test]
fn json_integers_are_ints() {
    let obj =
        json!({"spec": {"size": 21, "replicas": 3, "ratio": 0.5, "big": 18446744073709551615u64}});
    t("self.spec.size * 2 == 42", &obj);
    t("self.spec.replicas == 3", &obj);
    t("self.spec.replicas > 2 && self.spec.replicas < 4", &obj);
    t("type(self.spec.replicas) == int", &obj);
    t("self.spec.size - 22 == -1", &obj);
    t("self.spec.ratio * 2.0 == 1.0", &obj);
    t("type(self.spec.big) == double", &obj);
    t("self.spec.replicas in [1, 2, 3]", &obj);
}

#[test]
fn kubernetes_idioms_used_by_provider_crds() {
    let obj = json!({
        "managementPolicies": ["Observe", "Create"],
        "forProvider": {"name": "x", "tags": {"team": "a"}, "cidrs": ["10.0.0.0/16", "10.1.0.0/16"]},
        "labels": {"app.kubernetes.io/name": "web"},
    });
    t("'Create' in self.managementPolicies", &obj);
    t("!('*' in self.managementPolicies)", &obj);
    t(
        "has(self.forProvider.name) && !has(self.forProvider.title)",
        &obj,
    );
    t(
        "!has(self.initProvider) || has(self.initProvider.name)",
        &obj,
    );
    t("self.forProvider.cidrs.all(c, c.startsWith('10.'))", &obj);
    t("self.forProvider.cidrs.exists(c, c.endsWith('/16'))", &obj);
    t(
        "self.forProvider.cidrs.exists_one(c, c.contains('.1.'))",
        &obj,
    );
    t(
        "self.forProvider.cidrs.map(c, c.split('/')[1]) == ['16', '16']",
        &obj,
    );
    t(
        "self.forProvider.cidrs.filter(c, c.matches('^10[.]1')).size() == 1",
        &obj,
    );
    t(
        "size(self.forProvider.tags) == 1 && 'team' in self.forProvider.tags",
        &obj,
    );
    t("self.forProvider.tags.all(k, k.lowerAscii() == k)", &obj);
    t("self.labels['app.kubernetes.io/name'] == 'web'", &obj);
    t("self == self", &obj);
    // Error absorption: the right side decides when the left one errors.
    t("self.forProvider.missing == 1 || true", &obj);
    t("!(self.forProvider.missing == 1 && false)", &obj);
    // Optional field access.
    t("self.?forProvider.?title.orValue('none') == 'none'", &obj);
    t("self.?forProvider.?name.hasValue()", &obj);
    t(
        "self.?forProvider.?title.optMap(t, t + '!').orValue('none') == 'none'",
        &obj,
    );
    t(
        "self.?forProvider.?name.optMap(t, t + '!').value() == 'x!'",
        &obj,
    );
}

#[test]
fn string_and_list_extension_functions() {
    let obj =
        json!({"s": "Hello, World", "n": [3, 1, 2], "sorted": [1, 2, 2, 5], "words": ["a", "b"]});
    for expr in [
        "self.s.charAt(0) == 'H'",
        "self.s.indexOf('o') == 4 && self.s.lastIndexOf('o') == 8",
        "self.s.lowerAscii() == 'hello, world' && self.s.upperAscii() == 'HELLO, WORLD'",
        "self.s.replace('l', 'L') == 'HeLLo, WorLd'",
        "self.s.replace('l', 'L', 1) == 'HeLlo, World'",
        "self.s.split(', ') == ['Hello', 'World']",
        "self.s.substring(7) == 'World' && self.s.substring(0, 5) == 'Hello'",
        "'  x '.trim() == 'x'",
        "self.words.join('-') == 'a-b' && self.words.join() == 'ab'",
        "'%s has %d'.format(['x', 2]) == 'x has 2'",
        "strings.quote('a') == '\"a\"'",
        "self.sorted.isSorted() && !self.n.isSorted()",
        "self.n.sum() == 6 && self.n.min() == 1 && self.n.max() == 3",
        "self.n.indexOf(2) == 2 && self.sorted.lastIndexOf(2) == 2 && self.n.indexOf(9) == -1",
        "self.s.find('[A-Z][a-z]+') == 'Hello' && self.s.findAll('[A-Z]') == ['H', 'W']",
        "self.s.findAll('l', 2) == ['l', 'l']",
        "sets.contains(self.n, [1, 2]) && !sets.contains(self.n, [4])",
        "sets.equivalent(self.n, [1, 2, 3, 3]) && sets.intersects(self.n, [9, 3])",
        "int('42') == 42 && string(42) == '42' && double(1) == 1.0",
        "duration('1h') > duration('30m')",
        "timestamp('2024-01-02T03:04:05Z').getFullYear() == 2024",
        "optional.of(1).value() == 1 && !optional.none().hasValue()",
    ] {
        t(expr, &obj);
    }
}

#[test]
fn every_listed_function_is_registered() {
    // A compile-time allowlist that named an unregistered function would
    // turn into "undeclared reference" at run time; each one is exercised
    // above, and here by name: evaluating a call with wrong argument types
    // must say "no matching overload", never "undeclared".
    for f in FUNCTIONS {
        let args = "self, self, self, self, self";
        let forms = match f.rsplit_once('.') {
            Some((ns, name)) => vec![format!("{ns}.{name}({args})")],
            None => vec![format!("{f}({args})"), format!("self.{f}({args})")],
        };
        let errors: Vec<String> = forms
            .iter()
            .map(|e| eval_on(e, &json!({"x": 1})).unwrap_err().to_string())
            .collect();
        assert!(
            errors.iter().any(|e| !e.contains("ndeclared")),
            "{f}: {errors:?}"
        );
    }
}

#[test]
fn unsupported_functions_and_variables_fail_at_compile_time() {
    let e = compile_err("url(self.spec.endpoint) == 'x'");
    assert!(e.contains("function 'url' is not supported"), "{e}");
    let e = compile_err("self.spec.endpoint.getHost() == 'x'");
    assert!(e.contains("function 'getHost' is not supported"), "{e}");
    let e = compile_err("self.spec.q.isQuantity()");
    assert!(e.contains("'isQuantity'"), "{e}");
    let e = compile_err("cel.bind(x, 1, x == 1)");
    assert!(e.contains("'cel.bind'"), "{e}");
    let e = compile_err("spec.size > 1");
    assert!(e.contains("undeclared reference to 'spec'"), "{e}");
    let e = compile_err("google.protobuf.Int64Value{value: 1} == 1");
    assert!(e.contains("not supported"), "{e}");
    // CRD rules have no `request`.
    let e = CelProgram::compile_with("request.name == 'x'", CRD_VARS)
        .unwrap_err()
        .to_string();
    assert!(e.contains("undeclared reference to 'request'"), "{e}");
    // Comprehension variables are in scope only inside their comprehension.
    assert!(CelProgram::compile("self.a.all(x, x > 0) && x > 0").is_err());
    assert!(CelProgram::compile("self.a.all(x, self.b.all(y, x > y))").is_ok());
}

#[test]
fn runtime_errors_and_non_bool_results() {
    let obj = json!({"spec": {"n": 1, "s": "a"}});
    let e = eval_on("self.spec.missing == 1", &obj).unwrap_err();
    assert!(
        matches!(&e, EvalError::Runtime(m) if m.contains("missing")),
        "{e}"
    );
    let e = eval_on("self.spec.n + self.spec.s == 'x'", &obj).unwrap_err();
    assert!(matches!(e, EvalError::Runtime(_)), "{e}");
    let e = eval_on("self.spec.n", &obj).unwrap_err();
    assert_eq!(e, EvalError::NotBool("int".into()));
    let e = eval_on("1 / (self.spec.n - 1) == 1", &obj).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("division"), "{e}");
}

#[test]
fn compile_limits() {
    let long = format!("self.a == '{}'", "x".repeat(limits::MAX_SOURCE_LEN));
    assert!(compile_err(&long).contains("bytes long"));
    let nested = "self.a.all(a, a.all(b, b.all(c, c.all(d, d))))";
    assert!(compile_err(nested).contains("nested more than 3"));
    let deep = format!("{}true{}", "(".repeat(300), ")".repeat(300));
    let e = compile_err(&deep);
    assert!(e.contains("ecursion") || e.contains("deep"), "{e}");
    let big = (0..800)
        .map(|i| format!("self.a == {i}"))
        .collect::<Vec<_>>()
        .join(" || ");
    assert!(compile_err(&big).contains("too large"));
    // Legitimately long rules still compile.
    let ok = (0..100)
        .map(|i| format!("self.a != {i}"))
        .collect::<Vec<_>>()
        .join(" && ");
    CelProgram::compile(&ok).unwrap();
    let chain = (0..30)
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(" + ");
    CelProgram::compile(&format!("size({chain}) > 0")).unwrap();
    let chain = (0..60)
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(" + ");
    CelProgram::compile(&format!("size({chain}) > 0")).unwrap_err();
    let chain = (0..60)
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(" + ");
    assert!(compile_err(&format!("size({chain}) > 0")).contains("nested too deeply"));
}

#[test]
fn deep_programs_run_on_a_small_stack() {
    // Tokio workers have 2 MiB stacks; the deepest program accepted must
    // compile and evaluate there.
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let mut depth = 0;
            let mut expr = String::from("self.a");
            let mut last_ok = String::new();
            while depth < 100 {
                let next = format!("({expr} + 1)");
                if CelProgram::compile(&format!("{next} > 0")).is_err() {
                    break;
                }
                expr = next;
                last_ok = format!("{expr} > 0");
                depth += 1;
            }
            let p = CelProgram::compile(&last_ok).unwrap();
            let obj = json!({"a": 1});
            let mut scope = Scope::new();
            scope.bind("self", Some(&obj));
            (depth, p.eval_bool(&scope))
        })
        .unwrap();
    let (depth, r) = handle.join().unwrap();
    assert!(
        (10..40).contains(&depth),
        "{depth} levels of nesting compile"
    );
    assert_eq!(r, Ok(true));
}

#[test]
fn quadratic_expressions_hit_the_cost_limit() {
    let items: Vec<i64> = (0..5_000).collect();
    let obj = json!({"items": items});
    // 25 million comparisons: far over budget, stopped early.
    // (A debug build may hit the time limit first; both stop it.)
    let e = eval_on(
        "self.items.all(x, self.items.all(y, x == y || x != y))",
        &obj,
    )
    .unwrap_err();
    assert!(
        matches!(&e, EvalError::Exceeded(m) if m.contains("limit")),
        "{e}"
    );
    // `in` on a big list inside a loop is charged per element too.
    let e = eval_on("self.items.all(x, x in self.items)", &obj).unwrap_err();
    assert!(matches!(e, EvalError::Exceeded(_)), "{e}");
    // A linear pass is well within budget.
    t("self.items.all(x, x >= 0)", &obj);
    t("self.items.map(x, x * 2).size() == 5000", &obj);
    // The failed charge cannot be absorbed by `||`.
    let e = eval_on(
        "self.items.all(x, self.items.all(y, x == y || x != y)) || true",
        &obj,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::Exceeded(_)), "{e}");
}

#[test]
fn string_amplification_is_charged_before_allocating() {
    let obj = json!({"s": "x".repeat(100_000)});
    // 100k insertions of a 100 kB string would be 10 GB.
    let e = eval_on("self.s.replace('', self.s).size() > 0", &obj).unwrap_err();
    assert!(matches!(e, EvalError::Exceeded(_)), "{e}");
    let e = eval_on("sets.contains(self.s.split(''), self.s.split(''))", &obj).unwrap_err();
    assert!(matches!(e, EvalError::Exceeded(_)), "{e}");
}

#[test]
fn the_meter_is_per_evaluation() {
    // 600k units (debug builds are too slow to use more within the time
    // limit): fits once, and again, since each evaluation starts afresh.
    let items: Vec<i64> = (0..600).collect();
    let obj = json!({"items": items});
    for _ in 0..3 {
        t(
            "self.items.all(x, self.items.size() == 600 && x in self.items)",
            &obj,
        );
    }
}

// ---------------------------------------------------------------------------
// Configured rules through the rule registry.

const TEAM: &str = r#"
resources:
  - apiGroups: ["*"]
    kinds: ["*"]
    celRules:
      - name: team
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: "every MR needs a team label"
      - name: size-warn
        expression: "!has(self.spec.forProvider.size) || self.spec.forProvider.size * 2 <= 100"
        messageExpression: "'size ' + string(self.spec.forProvider.size) + ' of ' + self.metadata.name + ' is too big'"
        action: Warn
      - name: region-frozen
        expression: "oldSelf == null || self.spec.forProvider.region == oldSelf.spec.forProvider.region"
        message: "region is frozen"
        operations: [UPDATE]
      - name: no-robots
        expression: "!request.userInfo.username.startsWith('robot-') || request.dryRun"
        message: "robots only dry-run"
        operations: [CREATE, UPDATE, DELETE]
      - name: ops
        expression: "request.operation != 'DELETE' || self.metadata.name != 'keep'"
        message: "keep stays"
        operations: [DELETE]
"#;

fn findings(case: Case) -> Vec<(String, Action, String)> {
    case.config(TEAM)
        .evaluate()
        .into_iter()
        .filter(|f| f.rule.starts_with("cel:"))
        .map(|f| (f.rule.into_owned(), f.action, f.message))
        .collect()
}

fn labelled(labels: Value, spec: Value) -> Value {
    let mut o = mr(spec);
    o["metadata"]["labels"] = labels;
    o
}

#[test]
fn configured_rule_denies_and_passes() {
    let f = findings(Case::create(mr(json!({}))));
    assert_eq!(
        f,
        vec![(
            "cel:team".into(),
            Action::Deny,
            "every MR needs a team label".into()
        )]
    );
    let f = findings(Case::create(labelled(json!({"team": "a"}), json!({}))));
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn message_expression_and_warn_action() {
    let obj = labelled(json!({"team": "a"}), json!({"forProvider": {"size": 60}}));
    let f = findings(Case::create(obj));
    assert_eq!(
        f,
        vec![(
            "cel:size-warn".into(),
            Action::Warn,
            "size 60 of b is too big".into()
        )]
    );
}

#[test]
fn update_only_rule_sees_old_self() {
    let old = labelled(
        json!({"team": "a"}),
        json!({"forProvider": {"region": "eu-west-1"}}),
    );
    let new = labelled(
        json!({"team": "a"}),
        json!({"forProvider": {"region": "us-east-1"}}),
    );
    assert!(findings(Case::create(new.clone())).is_empty());
    let f = findings(Case::update(old.clone(), new));
    assert_eq!(
        f,
        vec![(
            "cel:region-frozen".into(),
            Action::Deny,
            "region is frozen".into()
        )]
    );
    assert!(findings(Case::update(old.clone(), old)).is_empty());
}

#[test]
fn request_variables() {
    let obj = labelled(json!({"team": "a"}), json!({}));
    let f = findings(Case::create(obj.clone()).user("robot-1"));
    assert_eq!(
        f,
        vec![(
            "cel:no-robots".into(),
            Action::Deny,
            "robots only dry-run".into()
        )]
    );
    assert!(findings(Case::create(obj.clone()).user("alice")).is_empty());
    // On DELETE `self` is the old object.
    let mut keep = obj;
    keep["metadata"]["name"] = json!("keep");
    let f = findings(Case::delete(keep));
    assert_eq!(
        f,
        vec![("cel:ops".into(), Action::Deny, "keep stays".into())]
    );
}

#[test]
fn request_namespace_name_groups_and_dry_run() {
    let obj = json!({"apiVersion": "g/v1", "kind": "K",
                     "metadata": {"name": "n1", "namespace": "team-a"},
                     "spec": {"forProvider": {}}});
    let groups = vec!["system:authenticated".to_string(), "admins".to_string()];
    let req = crate::admission::review::RequestBuilder::new(Operation::Update)
        .object(obj)
        .username("bob")
        .groups(groups)
        .dry_run(true)
        .build();
    let object = &req.object.as_ref().unwrap().value;
    let all = Reads::whole(CONFIG_VARS);
    let scope = Scope::for_request(&req, object, None, &all);
    for expr in [
        "request.operation == 'UPDATE'",
        "request.namespace == 'team-a' && request.name == 'n1'",
        "request.dryRun",
        "request.userInfo.username == 'bob' && 'admins' in request.userInfo.groups",
        "oldSelf == null",
        "self.spec == {'forProvider': {}}",
    ] {
        assert_eq!(
            CelProgram::compile(expr).unwrap().eval_bool(&scope),
            Ok(true),
            "{expr}"
        );
    }
}

#[test]
fn evaluation_errors_follow_the_rule_action() {
    let yaml = r#"
resources:
  - apiGroups: ["*"]
    kinds: ["*"]
    celRules:
      - {name: strict, expression: "self.spec.forProvider.nope == 1"}
      - {name: lenient, expression: "self.spec.forProvider.nope == 1", action: Warn}
      - {name: not-bool, expression: "self.metadata.name"}
      - {name: bad-message, expression: "false", message: "fallback", messageExpression: "self.nope"}
"#;
    let f = Case::create(mr(json!({}))).config(yaml).evaluate();
    let got: Vec<_> = f
        .iter()
        .map(|f| (f.rule.as_ref(), f.action, f.message.as_str()))
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0].0, "cel:strict");
    assert_eq!(got[0].1, Action::Deny);
    assert!(got[0].2.starts_with("evaluation error: "), "{}", got[0].2);
    assert_eq!((got[1].0, got[1].1), ("cel:lenient", Action::Warn));
    assert!(got[1].2.starts_with("evaluation error: "));
    assert_eq!(
        got[2].2,
        "evaluation error: the expression returned string, not a bool"
    );
    assert_eq!(got[3].2, "fallback");
}

#[test]
fn compile_errors_name_the_rule() {
    let yaml = "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: broken, expression: 'self.a ==' }\n";
    let e = crate::admission::config::Config::from_yaml(yaml)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"broken\"") && e.contains("celRules[0].expression"),
        "{e}"
    );
    let yaml = "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: unknown-fn, expression: 'url(self.a) == 1' }\n";
    let e = crate::admission::config::Config::from_yaml(yaml)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"unknown-fn\"") && e.contains("'url'"), "{e}");
}

// ---------------------------------------------------------------------------
// Lazy conversion: a scope converts only what its programs read.

fn paths(expr: &str) -> Vec<String> {
    CelProgram::compile(expr)
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
        .reads()
        .paths()
}

#[test]
fn reads_name_the_selected_paths_and_fall_back_to_whole_subtrees() {
    let cases: &[(&str, &[&str])] = &[
        // The benchmark configuration's two rules.
        (
            "has(self.spec.forProvider.tags) && 'cost-center' in self.spec.forProvider.tags",
            &["self.spec.forProvider.tags"],
        ),
        (
            "!has(self.spec.forProvider.region) || self.spec.forProvider.region.startsWith('us-')",
            &["self.spec.forProvider.region"],
        ),
        // has() alone reads presence only.
        ("!has(self.status)", &["has(self.status)"]),
        // Optional selection and literal indexes select like `.`.
        ("self.?spec.?x.orValue(1) == 1", &["self.spec.x"]),
        ("self['spec'][?'x'].hasValue()", &["self.spec.x"]),
        // A list indexed, iterated or handed to a function is read whole.
        ("self.spec.list[0].name == 'a'", &["self.spec.list"]),
        ("self.spec.items.all(i, i.name != '')", &["self.spec.items"]),
        ("size(self.metadata.labels) < 3", &["self.metadata.labels"]),
        // `self` passed whole, or a computed key: the subtree is read whole.
        ("size(self) > 0", &["self"]),
        (
            "self.spec[self.metadata.name] == 1",
            &["self.metadata.name", "self.spec"],
        ),
        ("type(self.spec) == map", &["self.spec"]),
        // A comprehension variable named like a root variable shadows it.
        ("[{'a': 1}].all(self, self.a == 1)", &[]),
        // Transition rules read oldSelf the same way.
        (
            "self.spec.x == oldSelf.spec.x",
            &["oldSelf.spec.x", "self.spec.x"],
        ),
        ("oldSelf == null || has(oldSelf.spec)", &["oldSelf"]),
        (
            "request.userInfo.username != 'x'",
            &["request.userInfo.username"],
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(paths(expr), *want, "{expr}");
    }
}

/// An object as the API server sends it: managedFields and status as
/// large as its spec.
fn realistic() -> Value {
    json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1",
        "kind": "VPC",
        "metadata": {
            "name": "vpc-1",
            "labels": {"team": "platform", "env": "prod"},
            "annotations": {"crossplane.io/external-name": "vpc-0abc"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {"f:forProvider": {"f:region": {}}}}},
                {"manager": "provider", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}}
            ]
        },
        "spec": {
            "managementPolicies": ["*"],
            "forProvider": {
                "region": "eu-west-1",
                "cidrBlock": "10.0.0.0/16",
                "tags": {"cost-center": "42", "team": "platform"},
                "subnets": [{"name": "a", "az": "eu-west-1a"}, {"name": "b", "az": "eu-west-1b"}],
                "size": 3,
                "nothing": null
            },
            "providerConfigRef": {"name": "default"}
        },
        "status": {"atProvider": {"id": "vpc-0abc", "arn": "arn:aws:ec2:..."},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

#[test]
fn a_pruned_self_holds_only_what_is_read() {
    let mut reads = Reads::default();
    for expr in [
        "has(self.spec.forProvider.tags) && 'cost-center' in self.spec.forProvider.tags",
        "!has(self.spec.forProvider.region) || self.spec.forProvider.region.startsWith('us-')",
        "!has(self.status)",
    ] {
        reads.union(CelProgram::compile(expr).unwrap().reads());
    }
    let obj = realistic();
    let val = json::to_val_reading(&obj, reads.of("self").unwrap());
    // No metadata (so no managedFields), no other spec field, and status
    // only as a placeholder for has().
    assert_eq!(
        shape(val.as_ref()),
        json!({"spec": {"forProvider": {"region": "string", "tags": {"cost-center": "string", "team": "string"}}},
               "status": null})
    );
}

/// The keys of a CEL value's maps, with scalars as their type names.
fn shape(v: &dyn cel::common::value::Val) -> Value {
    use cel::common::types::{CelMap, CelMapKey};
    match v.downcast_ref::<CelMap<'_>>() {
        Some(m) => Value::Object(
            m.inner()
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        CelMapKey::String(s) => s.inner().to_string(),
                        other => format!("{other:?}"),
                    };
                    (key, shape(v.as_ref()))
                })
                .collect(),
        ),
        None if v.get_type().name() == "null_type" => Value::Null,
        None => Value::from(v.get_type().name()),
    }
}

/// Each expression reads the object in another way; the lazy scope must
/// give the same answer as the whole one (checked by `eval_with_old`) and
/// the expected one, so dropping any field it reads fails here.
#[test]
fn lazy_scopes_agree_with_whole_ones() {
    let obj = realistic();
    let mut old = realistic();
    old["spec"]["forProvider"]["size"] = json!(2);
    old["metadata"]["labels"]["env"] = json!("dev");
    let cases: &[(&str, Result<bool, ()>)] = &[
        ("has(self.spec.forProvider.tags) && 'cost-center' in self.spec.forProvider.tags", Ok(true)),
        ("self.spec.forProvider.region.startsWith('eu-')", Ok(true)),
        ("has(self.status) && has(self.metadata.managedFields)", Ok(true)),
        ("!has(self.spec.forProvider.missing) && has(self.spec.forProvider.nothing)", Ok(true)),
        ("self.spec.forProvider.nothing == null", Ok(true)),
        ("self.?spec.?forProvider.?size.orValue(0) == 3", Ok(true)),
        ("self.?spec.?forProvider.?absent.orValue(7) == 7", Ok(true)),
        ("self['spec']['forProvider'][?'cidrBlock'].value() == '10.0.0.0/16'", Ok(true)),
        ("self.spec.forProvider.subnets[1].az == 'eu-west-1b'", Ok(true)),
        ("self.spec.forProvider.subnets.all(s, s.az.startsWith(self.spec.forProvider.region))", Ok(true)),
        ("self.spec.forProvider.subnets.map(s, s.name) == ['a', 'b']", Ok(true)),
        ("self.spec.forProvider.tags.exists(k, k == 'team')", Ok(true)),
        ("size(self.metadata.managedFields) == 2", Ok(true)),
        ("self.metadata.managedFields.exists(m, m.manager == 'provider')", Ok(true)),
        ("self.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')", Ok(true)),
        ("size(self) == 5 && 'status' in self", Ok(true)),
        ("self.spec.forProvider[self.metadata.labels.team == 'platform' ? 'region' : 'cidrBlock'] == 'eu-west-1'", Ok(true)),
        ("self.spec.forProvider.size * 2 == 6", Ok(true)),
        ("type(self.spec.forProvider.size) == int", Ok(true)),
        ("has(self.metadata.labels.team) && self.metadata.labels.env == 'prod'", Ok(true)),
        ("[self.spec.forProvider.region, self.metadata.name] == ['eu-west-1', 'vpc-1']", Ok(true)),
        ("{'r': self.spec.forProvider.region}.r == 'eu-west-1'", Ok(true)),
        ("optional.of(self.spec).value().forProvider.size == 3", Ok(true)),
        ("[{'spec': 1}].all(self, self.spec == 1)", Ok(true)),
        // Transition rules.
        ("self.spec.forProvider.size > oldSelf.spec.forProvider.size", Ok(true)),
        ("self.metadata.labels != oldSelf.metadata.labels", Ok(true)),
        ("self.status == oldSelf.status && self.metadata.managedFields == oldSelf.metadata.managedFields", Ok(true)),
        ("self != oldSelf", Ok(true)),
        ("has(oldSelf.status) && oldSelf.status.atProvider.id == self.status.atProvider.id", Ok(true)),
        // Errors stay the same errors.
        ("self.spec.forProvider.absent == 1", Err(())),
        ("self.spec.forProvider.region.x == 1", Err(())),
        ("has(self.spec.forProvider.region.x)", Err(())),
        ("self.spec.forProvider.subnets.name == 'a'", Err(())),
    ];
    for (expr, want) in cases {
        let got = eval_with_old(expr, &obj, Some(&old));
        match want {
            Ok(b) => assert_eq!(got, Ok(*b), "{expr}"),
            Err(()) => assert!(got.is_err(), "{expr}: {got:?}"),
        }
    }
}

#[test]
fn a_scope_refuses_programs_it_was_not_built_for() {
    let obj = realistic();
    let region = CelProgram::compile("self.spec.forProvider.region == 'eu-west-1'").unwrap();
    let tags = CelProgram::compile("has(self.spec.forProvider.tags)").unwrap();
    let mut scope = Scope::reading(region.reads());
    scope.bind("self", Some(&obj));
    assert_eq!(region.eval_bool(&scope), Ok(true));
    // Without the check this would be a silent `false`.
    let e = tags.eval_bool(&scope).unwrap_err();
    assert!(e.to_string().contains("internal error"), "{e}");
    // A scope built for the union serves both.
    let mut both = region.reads().clone();
    both.union(tags.reads());
    let mut scope = Scope::reading(&both);
    scope.bind("self", Some(&obj));
    assert_eq!(region.eval_bool(&scope), Ok(true));
    assert_eq!(tags.eval_bool(&scope), Ok(true));
}

#[test]
fn a_configured_message_expression_reads_what_its_rule_does_not() {
    // The rule reads spec.forProvider.size; its message also reads
    // metadata.name. The entry's scope is built for both.
    let config = crate::admission::config::Config::from_yaml(TEAM).unwrap();
    let reads = config.resources[0].cel_rules.reads().paths();
    for p in [
        "self.metadata.name",
        "self.spec.forProvider.size",
        "request.userInfo.username",
    ] {
        assert!(reads.iter().any(|r| r == p), "{p} not in {reads:?}");
    }
    assert!(!reads.iter().any(|r| r.contains("status")), "{reads:?}");
}

#[test]
fn matches_keeps_cel_semantics_with_a_cached_regex() {
    let obj = json!({"name": "vpc-1", "bad": "(", "patterns": (0..100).map(|i| format!("^x{i}$")).collect::<Vec<_>>()});
    for _ in 0..3 {
        t("self.name.matches('^[a-z0-9-]{3,63}$')", &obj);
        t("matches(self.name, '^vpc-[0-9]+$')", &obj);
        t("!self.name.matches('^[A-Z]+$')", &obj);
        t("self.name.matches('pc-')", &obj);
    }
    // More patterns than the cache holds, each still right.
    t("self.patterns.all(p, !self.name.matches(p))", &obj);
    t("self.patterns.exists(p, 'x42'.matches(p))", &obj);
    let e = eval_on("self.name.matches(self.bad)", &obj).unwrap_err();
    assert!(e.to_string().contains("not a valid regex"), "{e}");
    // Twice: an invalid pattern is not cached as valid.
    let e = eval_on("self.name.matches(self.bad)", &obj).unwrap_err();
    assert!(e.to_string().contains("not a valid regex"), "{e}");
}

// The compiled fast path (compiled.rs). Every test above that goes through
// `eval_with_old` also checks that it agrees with the interpreter.

fn inputs<'v>(req: &'v crate::admission::review::Request, this: &'v Value) -> Inputs<'v> {
    Inputs {
        request: req,
        object: this,
        old: None,
    }
}

/// The compiled path's own verdict, checked against the interpreter.
fn compiled(expr: &str, this: &Value) -> Option<Result<bool, Fail>> {
    let req = crate::admission::review::RequestBuilder::new(Operation::Create).build();
    differential(expr, inputs(&req, this)).unwrap_or_else(|e| panic!("{e}"));
    CelProgram::compile(expr)
        .unwrap()
        .eval_compiled_raw(inputs(&req, this), None)
}

#[test]
fn which_rules_are_compiled_and_why_others_are_not() {
    for expr in [
        "self.spec.forProvider.region == 'us-east-1'",
        "has(self.spec.tags) && 'team' in self.spec.tags",
        "self.metadata.name.startsWith('a') || self.metadata.name.endsWith('z')",
        "self.metadata.name.contains('x') ? size(self.metadata.name) < 10 : !false",
        "self.metadata.name.matches('^[a-z]+$')",
        "self.spec.items.all(i, i.name.size() > 0) && self.spec.tags.exists(k, k == 'a')",
        "self.metadata.labels['app'] != oldSelf.metadata.labels['app']",
        "request.operation == 'CREATE' && 'admins' in request.userInfo.groups",
        "request.userInfo.username != '' && request.namespace == request.name && !request.dryRun",
        "self.spec.size >= 1u && self.spec.ratio <= 2.5 && null == self.spec.x",
        "!has(self.spec.cidr) || int(self.spec.cidr.split('/')[1]) >= 16",
    ] {
        let p = CelProgram::compile(expr).unwrap();
        assert_eq!(p.mode(), Ok(()), "{expr}");
    }
    for (expr, why) in [
        ("self.spec.name.replace('a', 'b') == 'c'", "calls `replace`"),
        ("self.spec.size + 1 == 2", "calls `+`"),
        (
            "self.spec.name.split('') == []",
            "`split` on the empty separator",
        ),
        (
            "self.spec.name.split(self.spec.sep) == []",
            "`split` with a computed separator",
        ),
        ("self.spec.name.split('/', 2) == []", "calls `split`"),
        (
            "self.spec.name.matches(self.spec.pattern)",
            "computed pattern",
        ),
        ("self.spec.items.map(i, i.name).size() > 0", "calls `+`"),
        ("self.spec == {'a': 1}", "a map literal"),
        ("self.spec.a in [self.spec.b]", "computed elements"),
        ("request.userInfo == {}", "selects `request.userInfo`"),
        ("has(request.name)", "uses `request` whole"),
        ("type(self.spec.a) == int", "calls `type`"),
        ("self.spec.?a.hasValue()", "calls `hasValue`"),
        ("self.spec.tags.exists_one(k, k == 'a')", "calls `+`"),
    ] {
        let p = CelProgram::compile(expr).unwrap();
        let got = p.mode().unwrap_err();
        assert!(got.contains(why), "{expr}: {got}");
    }
    // CRD rules and VAP expressions keep the interpreter.
    let crd = CelProgram::compile_with("self.a == 1", CRD_VARS).unwrap();
    assert_eq!(crd.mode(), Err("not a configured rule"));
}

#[test]
fn compiled_verdicts_agree_with_the_interpreter() {
    let obj = json!({
        "metadata": {"name": "bucket-a", "labels": {"app": "web", "tier": "1"}},
        "spec": {
            "size": 3, "big": 18446744073709551615u64, "ratio": 0.5, "neg": -1,
            "name": "ünïcode", "empty": "", "nothing": null, "flag": true,
            "tags": {"team": "a", "env": "prod"},
            "list": [1, 2.0, "x", null, true, {"a": 1}, [1]],
            "items": [{"name": "a", "n": 1}, {"name": "bb"}, {"n": 3}],
        }
    });
    let agreed = [
        ("self.spec.size == 3", true),
        ("self.spec.size == 3.0", true),
        ("self.spec.size == 3u", true),
        ("self.spec.size < 3.5 && self.spec.size > 2u", true),
        ("self.spec.neg < 0u", true),
        ("self.spec.big > 9223372036854775807", true),
        ("self.spec.ratio == 0.5 && self.spec.ratio < 1", true),
        ("self.spec.size == 'a'", false),
        ("self.spec.size != null", true),
        ("self.spec.nothing == null", true),
        ("self.spec.tags == null", false),
        ("self.spec.tags != 'a'", true),
        ("'a' < 'b' && 'b' >= 'b' && true > false", true),
        ("size(self.spec.name) == 7 && self.spec.name.size() == 7", true),
        ("size(self.spec.tags) == 2 && size(self.spec.list) == 7", true),
        ("size([1, 2]) == 2", true),
        ("self.spec.empty.startsWith('') && 'abc'.endsWith('bc')", true),
        ("self.metadata.name.contains('et-')", true),
        ("self.metadata.name.matches('^bucket-[a-z]$')", true),
        ("matches(self.metadata.name, 'x')", false),
        ("'team' in self.spec.tags && !('owner' in self.spec.tags)", true),
        ("1 in self.spec.tags || true in self.spec.tags", false),
        ("2 in self.spec.list && 'x' in self.spec.list && null in self.spec.list", true),
        ("2u in self.spec.list && 1.0 in self.spec.list", true),
        ("'y' in self.spec.list", false),
        ("self.spec.size in [1, 2, 3] && !(4 in [1, 2, 3])", true),
        ("'prod' in ['dev', 'prod']", true),
        ("has(self.spec.tags) && !has(self.spec.missing)", true),
        ("has(self.spec.nothing)", true),
        ("has(self.metadata.labels.app)", true),
        ("self.metadata.labels['app'] == 'web'", true),
        ("self.spec.list[0] == 1 && self.spec.list[2u] == 'x'", true),
        ("self.spec.items.all(i, has(i.name) || has(i.n))", true),
        ("self.spec.items.exists(i, has(i.name) && i.name == 'bb')", true),
        ("self.spec.tags.all(k, k.size() > 2)", true),
        ("self.spec.tags.exists(k, self.spec.tags[k] == 'prod')", true),
        ("[1, 2, 3].all(x, x > 0) && ![1, 2].exists(x, x > 5)", true),
        (
            "self.spec.items.all(i, self.spec.items.exists(j, has(j.n) && has(i.n) ? j.n == i.n : true))",
            true,
        ),
        ("self.spec.flag ? self.spec.size == 3 : false", true),
        ("oldSelf == null", true),
        ("self.spec.tags == self.spec.tags && self.spec.list == self.spec.list", true),
        ("self.spec.items[0] == self.spec.items[1]", false),
        ("[1, 2] == [1u, 2.0] && [1] != [1, 2]", true),
        ("[1] in self.spec.list && ['a'] != self.spec.list", true),
        ("[1, 2][1] == 2 && self.spec.list[5]['a'] == 1", true),
        // Commutative error absorption.
        ("self.spec.missing == 1 || true", true),
        ("true || self.spec.missing == 1", true),
        ("self.spec.missing == 1 && false", false),
        ("false && self.spec.missing == 1", false),
        ("self.spec.size || true", true),
        ("self.spec.items.all(i, i.name.size() > 1)", false),
        ("self.spec.items.exists(i, i.name == 'a')", true),
        ("self.spec.items.exists(i, i.n == 3)", true),
        // split with a literal separator, and int.
        ("int('16') == 16 && int('+7') == 7 && int('-3') == -3", true),
        ("int(self.spec.ratio) == 0 && int(2.9) == 2 && int(3u) == 3 && int(self.spec.neg) == -1", true),
        ("'10.0.0.0/16'.split('/')[1] == '16' && int('10.0.0.0/16'.split('/')[1]) >= 16", true),
        ("size('a/b/c'.split('/')) == 3 && size('abc'.split('/')) == 1 && size(''.split('/')) == 1", true),
        ("'b' in 'a/b'.split('/') && !('c' in 'a/b'.split('/'))", true),
        ("'a//b'.split('/').exists(x, x == '') && 'a/b'.split('/').all(x, size(x) == 1)", true),
        ("'a/b'.split('/') == ['a', 'b'] && 'a/b'.split('/') != ['a']", true),
        ("self.metadata.name.split('-')[0] == 'bucket'", true),
        // Separators longer than a byte take the substring search.
        ("'a, b'.split(', ') == ['a', 'b'] && 'aéb'.split('é') == ['a', 'b']", true),
        ("size('ab'.split('ab')) == 2 && 'x--y'.split('--')[1] == 'y'", true),
        // Chains of selections on a comprehension variable.
        ("self.spec.items.exists(i, has(i.name) && i.name.size() == 2)", true),
    ];
    for (expr, want) in agreed {
        assert_eq!(compiled(expr, &obj), Some(Ok(want)), "{expr}");
    }
    let errors = [
        "self.spec.missing == 1",
        // A chain of selections stops at a value that is not an object.
        "self.spec.list.a == 1",
        "self.spec.name.x == 1",
        "self.spec.nothing.x == 1",
        "oldSelf.spec.x == 1",
        "self.spec.missing == 1 || false",
        "true && self.spec.missing == 1",
        "self.spec.size < 'a'",
        "self.spec.nothing < 1",
        "!self.spec.size",
        "self.spec.size ? true : false",
        "self.spec.size && true",
        "self.spec.items.all(i, i.name != '')",
        "self.spec.items.exists(i, i.n == 5)",
        "self.metadata.labels['nope'] == 'x'",
        "self.spec.list[7] == 1",
        "self.spec.list[-1] == 1",
        "self.spec.nothing.x == 1",
        "self.spec.list.x == 1",
        "has(self.spec.name.x)",
        "has(self.spec.list.x)",
        "self.spec.size.startsWith('a')",
        "size(self.spec.size) == 1",
        "self.spec.list < self.spec.list",
        "1 in self.spec.size",
        "null in self.spec.tags",
        "self.spec.size.all(x, true)",
        "int('x') == 1",
        "int('1.5') == 1",
        "int(self.spec.big) == 1",
        "int(18446744073709551615u) == 1",
        "int(self.spec.nothing) == 1",
        "int(self.spec.tags) == 1",
        "self.spec.size.split('/')[0] == 'a'",
        "'a/b'.split('/')[2] == 'a'",
    ];
    for expr in errors {
        assert_eq!(compiled(expr, &obj), Some(Err(Fail::Error)), "{expr}");
    }
    // Shapes the compiled path leaves to the interpreter at run time.
    let handed_over = ["self.spec.list[1.0] == 2", "self.spec.size"];
    for expr in handed_over {
        assert_eq!(compiled(expr, &obj), Some(Err(Fail::Fallback)), "{expr}");
    }
}

#[test]
fn request_fields_on_the_compiled_path() {
    let obj = json!({"metadata": {"name": "n1", "namespace": "team-a"}, "spec": {}});
    let req = crate::admission::review::RequestBuilder::new(Operation::Update)
        .object(obj.clone())
        .username("bob")
        .groups(vec!["admins".to_string()])
        .dry_run(true)
        .build();
    for (expr, want) in [
        ("request.operation == 'UPDATE'", true),
        (
            "request.namespace == 'team-a' && request.name == 'n1'",
            true,
        ),
        ("request.dryRun", true),
        ("request.userInfo.username == 'bob'", true),
        ("'admins' in request.userInfo.groups", true),
        ("request.userInfo.groups.all(g, g.startsWith('ad'))", true),
        ("size(request.userInfo.groups) == 2", false),
    ] {
        let i = inputs(&req, &obj);
        assert_eq!(differential(expr, i), Ok(Agreement::Agreed), "{expr}");
        let p = CelProgram::compile(expr).unwrap();
        assert_eq!(p.eval_compiled(i), Some(Ok(want)), "{expr}");
    }
    // No username, no groups: empty, as the interpreter binds them.
    let anon = crate::admission::review::RequestBuilder::new(Operation::Create)
        .object(obj.clone())
        .build();
    for expr in [
        "request.userInfo.username == '' && size(request.userInfo.groups) == 0",
        "!('x' in request.userInfo.groups)",
    ] {
        assert_eq!(
            differential(expr, inputs(&anon, &obj)),
            Ok(Agreement::Agreed),
            "{expr}"
        );
    }
}

#[test]
fn the_compiled_path_keeps_the_budget() {
    // Each charge of a 4 KB string is about 500 units: the cost limit is
    // reached within a few thousand iterations, well before the clock.
    let items: Vec<String> = (0..200)
        .map(|i| format!("item-{i}-{}", "a".repeat(4000)))
        .collect();
    let obj = json!({"spec": {"l": items}});
    let expr = "self.spec.l.all(x, self.spec.l.all(y, y.startsWith('item')))";
    let p = CelProgram::compile(expr).unwrap();
    assert_eq!(p.mode(), Ok(()));
    let req = crate::admission::review::RequestBuilder::new(Operation::Create).build();
    let i = inputs(&req, &obj);
    let want = Err(EvalError::Exceeded(format!(
        "cost limit of {} exceeded",
        budget::COST_LIMIT
    )));
    assert_eq!(p.eval_compiled(i), Some(want.clone()));
    // The interpreter, slower, may hit the time limit first.
    let scope = Scope::for_request(&req, &obj, None, p.reads());
    assert!(matches!(p.eval_bool(&scope), Err(EvalError::Exceeded(_))));
    // An exhausted budget is not absorbed by `||`.
    let absorbed = format!("({expr}) || true");
    let p = CelProgram::compile(&absorbed).unwrap();
    assert_eq!(p.eval_compiled(i), Some(want));
    // Within budget, the same rule answers on the compiled path.
    let small = json!({"spec": {"l": ["item-1", "item-2"]}});
    assert_eq!(
        CelProgram::compile(expr)
            .unwrap()
            .eval_compiled(inputs(&req, &small)),
        Some(Ok(true))
    );
}

#[test]
fn configured_rules_give_the_same_findings_compiled_or_not() {
    // One rule of each kind: compiled and passing, compiled and failing
    // with a message expression, compiled and erroring (handed over for
    // the interpreter's message), and interpreted.
    let yaml = r#"
resources:
  - apiGroups: ["*"]
    kinds: ["*"]
    celRules:
      - name: region
        expression: "self.spec.forProvider.region == 'us-east-1'"
        messageExpression: "'region ' + self.spec.forProvider.region + ' is not allowed'"
      - name: missing
        expression: "self.spec.forProvider.missing == 1"
        action: Warn
      - name: interpreted
        expression: "self.metadata.name + 'x' == 'nx'"
      - name: fine
        expression: "has(self.spec.forProvider)"
"#;
    let obj = mr(json!({"forProvider": {"region": "eu-west-1"}}));
    let f: Vec<_> = Case::create(obj)
        .config(yaml)
        .evaluate()
        .into_iter()
        .filter(|f| f.rule.starts_with("cel:"))
        .map(|f| (f.rule.into_owned(), f.action, f.message))
        .collect();
    let names: Vec<_> = f.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["cel:region", "cel:missing", "cel:interpreted"]);
    assert_eq!(f[0].2, "region eu-west-1 is not allowed");
    assert_eq!(f[1].1, Action::Warn);
    assert!(
        f[1].2.starts_with("evaluation error: ") && f[1].2.contains("missing"),
        "{}",
        f[1].2
    );
}

/// The differential test of the `cel_differential` fuzz target, on
/// pseudo-random bytes: a few thousand generated programs and objects on
/// every test run.
#[test]
fn generated_programs_agree_compiled_and_interpreted() {
    generated_programs(0x9e37_79b9_7f4a_7c15, 3000);
}

/// More of them, from another seed: `MRGUARD_CEL_DIFF_CASES=200000 cargo
/// test -p mrguard-policy --lib cel::tests::many -- --ignored`.
#[test]
#[ignore]
fn many_generated_programs_agree_compiled_and_interpreted() {
    let n = std::env::var("MRGUARD_CEL_DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    generated_programs(0x2545_f491_4f6c_dd1d, n);
}

fn generated_programs(seed: u64, cases: usize) {
    let mut state = seed;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut agreed, mut handed, mut interpreted) = (0, 0, 0);
    for _ in 0..cases {
        let len = 16 + (next() % 200) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        match gen::run(&data) {
            Ok(Agreement::Agreed) => agreed += 1,
            Ok(Agreement::HandedOver) => handed += 1,
            Ok(Agreement::NotCompiled) => interpreted += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // The generator reaches the compiled path most of the time.
    assert!(
        agreed > cases / 2 && handed > 0,
        "{agreed} agreed, {handed} handed over, {interpreted} interpreted"
    );
}
