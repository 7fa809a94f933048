//! `mrguard export`: the configuration exported as
//! ValidatingAdmissionPolicies (`export vap`) or a MutatingAdmissionPolicy
//! (`export map`), for the API server to enforce itself.

use std::path::Path;

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
        Some(p) => match crate::live_config::load_file(p) {
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
