//! Where users already work: shell completions, the man page, and the
//! binary as a kubectl plugin, run through a real bash and a real kubectl.

use std::path::PathBuf;
use std::process::Command;

use crate::support::bin::{self, stderr};
use crate::support::root;

fn stdout(args: &[&str]) -> String {
    let out = bin::run(args);
    assert!(out.status.success(), "mrguard {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// bash's completion of `words` (the last one being completed) with the
/// script `mrguard completion bash` prints.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("mrguard.bash");
    std::fs::write(&script, stdout(&["completion", "bash"])).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; _mrguard mrguard '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        words.join(" "),
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_flags_from_the_script() {
    let subcommands = bash_completes(&["mrguard", "ch"]);
    assert_eq!(subcommands, ["check"], "{subcommands:?}");
    let flags = bash_completes(&["mrguard", "check", "--requ"]);
    assert_eq!(flags, ["--require-crd"], "{flags:?}");
    let values = bash_completes(&["mrguard", "check", "--operation", ""]);
    for op in ["CREATE", "UPDATE", "DELETE"] {
        assert!(values.iter().any(|v| v == op), "{op} in {values:?}");
    }
}

#[test]
fn every_shell_gets_a_script_in_its_own_syntax() {
    for (shell, marker) in [
        ("bash", "complete -F _mrguard"),
        ("zsh", "#compdef mrguard"),
        ("fish", "complete -c mrguard"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "edit:completion:arg-completer[mrguard]"),
    ] {
        let script = stdout(&["completion", shell]);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        assert!(script.contains("explain"), "{shell} completes explain");
    }
    let out = bin::run(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid value 'tcsh'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_man_page_is_roff_with_every_command() {
    let page = stdout(&["man"]);
    assert!(
        page.contains(".TH mrguard 1"),
        "title: {}",
        &page[..200.min(page.len())]
    );
    for section in [
        ".SH NAME",
        ".SH \"MRGUARD CHECK\"",
        ".SH \"MRGUARD AUDIT\"",
        ".SH \"MRGUARD CERTS GENERATE\"",
    ] {
        assert!(page.contains(section), "{section}");
    }
}

fn kubectl() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file());
    found.expect(
        "kubectl not found on PATH (set KUBECTL): the plugin test runs through a real kubectl",
    )
}

/// `kubectl mrguard ...` as kubectl runs plugins: the binary is found on
/// PATH as `kubectl-mrguard` (here a symlink, as docs/cli.md installs it).
fn kubectl_mrguard(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_mrguard"),
        dir.path().join("kubectl-mrguard"),
    )
    .unwrap();
    let path = std::env::join_paths(std::iter::once(dir.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    Command::new(kubectl())
        .arg("mrguard")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", dir.path().join("none"))
        .current_dir(root())
        .output()
        .expect("kubectl runs")
}

#[test]
fn kubectl_runs_it_as_a_plugin_and_it_speaks_as_kubectl_mrguard() {
    let help = kubectl_mrguard(&["--help"]);
    assert!(help.status.success(), "{}", stderr(&help));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: kubectl mrguard [OPTIONS] <COMMAND>"),
        "{text}"
    );

    let sub = kubectl_mrguard(&["explain", "--help"]);
    let text = String::from_utf8_lossy(&sub.stdout);
    assert!(text.contains("Usage: kubectl mrguard explain"), "{text}");

    let wrong = kubectl_mrguard(&["chek"]);
    assert_eq!(wrong.status.code(), Some(2));
    let err = stderr(&wrong);
    assert!(err.contains("Usage: kubectl mrguard"), "{err}");
    assert!(err.contains("'check'"), "suggests the right command: {err}");

    // The plugin does real work, with the same exit codes.
    let denied = kubectl_mrguard(&["check", "-f", "examples/manifests/import-vpc.yaml"]);
    assert_eq!(denied.status.code(), Some(1), "{}", stderr(&denied));
    assert!(stderr(&denied).contains("observe-only-external-name"));
}

/// Run as itself, nothing changes: usage says `mrguard`.
#[test]
fn run_as_mrguard_it_speaks_as_mrguard() {
    let out = bin::run(&["chek"]);
    assert!(
        stderr(&out).contains("Usage: mrguard [OPTIONS] <COMMAND>"),
        "{}",
        stderr(&out)
    );
}

/// The krew manifest template installs this binary under the name kubectl
/// runs (krew links `kubectl-<metadata.name>` to `bin`), on each platform,
/// with the files the archives carry.
#[test]
fn the_krew_template_installs_the_binary_as_the_plugin() {
    let text = std::fs::read_to_string(root().join("plugins/krew/mrguard.yaml")).unwrap();
    let m: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "mrguard", "kubectl mrguard");
    let platforms = m["spec"]["platforms"].as_array().unwrap();
    assert!(platforms.len() >= 2);
    for p in platforms {
        assert_eq!(p["bin"], "mrguard", "{p}");
        let from: Vec<&str> = p["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["from"].as_str().unwrap())
            .collect();
        assert!(
            from.contains(&"mrguard") && from.contains(&"LICENSE"),
            "{p}"
        );
        assert!(
            p["sha256"].as_str().unwrap().starts_with("${SHA256_"),
            "{p}"
        );
    }
    assert!(root().join("LICENSE").is_file(), "the archives' LICENSE");
}
