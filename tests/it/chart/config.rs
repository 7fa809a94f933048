//! The configuration the chart ships: its ConfigMap passes `mrguard config
//! check`, the default is the built-in configuration, and every flag the
//! chart passes is one `mrguard serve` knows.

use std::process::Output;

use serde_json::Value;

use super::{args_of, render, render_ha_off, Manifests};
use crate::support::bin::mrguard;

fn configmap_config(m: &Manifests) -> String {
    m.only("ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string()
}

fn config_check(text: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text).unwrap();
    mrguard()
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn the_configmap_config_passes_mrguard_config_check() {
    for m in [render(&[]), render_ha_off()] {
        let text = configmap_config(&m);
        let out = config_check(&text);
        assert!(
            out.status.success(),
            "config check failed:\n{}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Neither exempts Crossplane core.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("Crossplane's own service account"), "{err}");
    }
    // The check can fail: a typo in a key is caught.
    let bad = render(&["--set", "config.rulez.paused-delete=Warn"]);
    let out = config_check(&configmap_config(&bad));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rulez"));

    let ha = configmap_config(&render_ha_off());
    let v: Value = serde_saphyr::from_str(&ha).unwrap();
    assert_eq!(v["providerConfig"]["defaultName"], "aws-default");
    assert_eq!(
        v["resources"][0]["celRules"][0]["name"],
        "require-team-label"
    );
}

#[test]
fn the_default_config_value_is_the_builtin_configuration() {
    let out = mrguard().args(["config", "default"]).output().unwrap();
    assert!(out.status.success());
    let builtin: Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let rendered: Value = serde_saphyr::from_str(&configmap_config(&render(&[]))).unwrap();
    assert_eq!(
        rendered, builtin,
        "values.yaml `config` drifted from crates/policy/src/admission/config/builtin.yaml"
    );
}

/// Flags the chart passes that the controller work (issue "companion
/// controller") adds to `mrguard serve`. Remove each once it lands.
const PENDING_CONTROLLER_FLAGS: &[&str] = &[];

#[test]
fn every_flag_the_chart_passes_is_known_to_mrguard_serve() {
    let out = mrguard().args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let known = |f: &str| {
        help.lines()
            .any(|l| l.trim_start().split([' ', ',']).any(|w| w == f))
    };
    assert!(
        known("--listen") && known("--config"),
        "help parsing works:\n{help}"
    );
    for m in [render(&[]), render_ha_off()] {
        for arg in args_of(&m) {
            let name = arg.split('=').next().unwrap();
            if known(name) {
                continue;
            }
            assert!(
                PENDING_CONTROLLER_FLAGS.contains(&name),
                "the chart passes {arg}, which `mrguard serve` does not know"
            );
        }
    }
    let env_names = ["MRGUARD_LOG", "MRGUARD_LOG_FORMAT"];
    let top = mrguard().arg("--help").output().unwrap();
    let top = String::from_utf8(top.stdout).unwrap();
    for e in env_names {
        assert!(
            top.contains(e),
            "{e} is not an environment variable of mrguard"
        );
    }
}
