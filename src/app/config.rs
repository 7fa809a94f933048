//! `mrguard config`: a configuration file checked, the built-in one
//! printed.

use std::path::Path;

/// `mrguard config check`: 0 when the file is valid (warnings and notes on
/// stderr), 1 when it is not.
pub fn check(file: &Path) -> i32 {
    match crate::live_config::load_file(file) {
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
