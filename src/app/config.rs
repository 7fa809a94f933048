//! `mrguard config` and `mrguard export`: a configuration file checked,
//! the built-in one printed, the configuration exported as
//! ValidatingAdmissionPolicies or a MutatingAdmissionPolicy.

use std::path::Path;

/// `mrguard config check`: 0 when the file is valid (warnings and notes on
/// stderr), 1 when it is not.
pub fn check(file: &Path) -> i32 {
    match crate::config::load_file(file) {
        Ok((config, bytes)) => {
            for w in config_warnings(&config, &bytes) {
                eprintln!("{}: warning: {w}", file.display());
            }
            for n in config_notes(&config) {
                eprintln!("{}: note: {n}", file.display());
            }
            println!("{}: valid", file.display());
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// `mrguard config default`: the built-in configuration on stdout.
pub fn print_default() -> i32 {
    print!("{}", mrguard_policy::admission::config::BUILTIN_YAML);
    0
}

/// `mrguard export vap`: the policies on stdout as YAML documents, what
/// was left out on stderr.
pub fn export_vap(config: Option<&Path>) -> i32 {
    let Some(config) = export_config(config) else {
        return 1;
    };
    let export = mrguard_policy::commands::export::vap::export(&config, jiff::Timestamp::now());
    write_export(&export.objects, &export.skipped)
}

/// `mrguard export map`: the MutatingAdmissionPolicy and its binding on
/// stdout as YAML documents, what a policy cannot express on stderr.
pub fn export_map(config: Option<&Path>) -> i32 {
    let Some(config) = export_config(config) else {
        return 1;
    };
    match mrguard_policy::commands::export::map::export(&config) {
        Ok(export) => write_export(&export.objects, &export.skipped),
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The configuration to export: the file, else the built-in one; `None`
/// after saying why the file is not valid.
fn export_config(config: Option<&Path>) -> Option<mrguard_policy::admission::config::Config> {
    match config {
        Some(p) => match crate::config::load_file(p) {
            Ok((c, _)) => Some(c),
            Err(e) => {
                eprintln!("{e}");
                None
            }
        },
        None => Some(mrguard_policy::admission::config::Config::builtin()),
    }
}

/// `objects` as YAML documents on stdout, `skipped` as `not exported:`
/// lines on stderr.
fn write_export(objects: &[serde_json::Value], skipped: &[String]) -> i32 {
    let mut out = String::new();
    for o in objects {
        match serde_saphyr::to_string(o) {
            Ok(y) => {
                out.push_str("---\n");
                out.push_str(&y);
            }
            Err(e) => {
                eprintln!("failed to write a policy as YAML: {e}");
                return 1;
            }
        }
    }
    print!("{out}");
    for s in skipped {
        eprintln!("not exported: {s}");
    }
    0
}

/// What a valid configuration file may still get wrong: being empty (it
/// then configures nothing, not the built-in defaults) and dropping the
/// built-in protections, which `--config` replaces whole.
fn config_warnings(
    config: &mrguard_policy::admission::config::Config,
    bytes: &[u8],
) -> Vec<String> {
    let mut out = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    let empty = serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .map(|docs| docs.iter().all(serde_json::Value::is_null))
        .unwrap_or(false);
    if empty {
        out.push(
            "the file is empty: it configures nothing, and replaces the built-in configuration \
             (print that with `mrguard config default`)"
                .to_string(),
        );
    }
    out.extend(config.lost_protections());
    out.extend(config.privileged_exemptions());
    let now = jiff::Timestamp::now();
    for e in config.expired_exceptions(now) {
        out.push(format!(
            "exception {} expired at {}: it no longer applies; remove it or extend expires",
            e.name,
            e.expires.map(|t| t.to_string()).unwrap_or_default()
        ));
    }
    out
}

/// What a valid configuration says that its reader should know: every
/// staged rule with the action in force now.
fn config_notes(config: &mrguard_policy::admission::config::Config) -> Vec<String> {
    let now = jiff::Timestamp::now();
    let mut out = Vec::new();
    let scopes = std::iter::once(("rules".to_string(), &config.rules)).chain(
        config
            .resources
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("resources[{i}].rules"), &r.rules)),
    );
    for (at, rules) in scopes {
        for (name, a) in rules {
            if a.warn_until.is_some() {
                out.push(format!("{at}[{name}]: {} now", a.describe(now)));
            }
        }
    }
    // Which CEL rules run compiled, and why the others are interpreted.
    out.extend(config.cel_mode_notes());
    out
}
