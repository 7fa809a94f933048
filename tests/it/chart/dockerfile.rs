//! The Dockerfile builds the binary the chart runs, as the non-root user
//! the chart sets, and agrees with scripts/image.sh.

use std::collections::BTreeSet;

use super::{container, port_named, render, strs, BINARY};
use crate::support::root;

struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<(String, String)>,
}

/// Splits a Dockerfile into stages of (INSTRUCTION, arguments), joining
/// continuation lines and dropping comments.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            logical.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for l in logical {
        let (ins, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let ins = ins.to_uppercase();
        let rest = rest.trim().to_string();
        if ins == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            stages.push(Stage {
                from: words[0].to_string(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(s) = stages.last_mut() {
            s.instructions.push((ins, rest));
        }
    }
    stages
}

#[test]
fn the_dockerfile_builds_the_binary_the_chart_runs_as_non_root() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stages = dockerfile_stages(&text);
    assert!(stages.len() >= 2, "multi-stage");
    let build = &stages[0];
    let runtime = stages.last().unwrap();
    let build_name = build.name.clone().expect("the build stage is named");
    assert!(
        build.from.starts_with("rust:"),
        "built in a Rust image: {}",
        build.from
    );
    let run = build
        .instructions
        .iter()
        .filter(|(i, _)| i == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        run.contains("cargo build --release --locked --bin mrguard"),
        "{run}"
    );

    assert!(
        runtime.from.starts_with("gcr.io/distroless/") || runtime.from == "scratch",
        "minimal runtime image: {}",
        runtime.from
    );
    let get = |ins: &str| -> Vec<&String> {
        runtime
            .instructions
            .iter()
            .filter(|(i, _)| i == ins)
            .map(|(_, a)| a)
            .collect()
    };
    // The binary comes from the build stage, from the path the build wrote.
    let copies = get("COPY");
    let copy = copies
        .iter()
        .find(|c| c.starts_with(&format!("--from={build_name} ")))
        .expect("COPY --from=<build stage>");
    let parts: Vec<&str> = copy.split_whitespace().collect();
    let (src, dst) = (parts[1], parts[2]);
    assert!(run.contains(src), "the build writes {src}");
    assert_eq!(dst, BINARY);

    // Non-root, numerically, so that runAsNonRoot can verify it.
    let user = get("USER");
    let user = user.last().expect("USER in the runtime stage");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    assert_ne!(uid, 0);

    let entry = get("ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(entry.last().unwrap()).expect("exec form");
    assert_eq!(entry, [dst, "serve"]);

    // The chart runs the same binary as the same user.
    let m = render(&[]);
    assert_eq!(strs(&container(&m)["command"]), entry);
    assert_eq!(container(&m)["securityContext"]["runAsUser"], uid);
    let exposed = get("EXPOSE")
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    for port in [port_named(&m, "https"), port_named(&m, "metrics")] {
        assert!(
            exposed.split_whitespace().any(|p| p == port.to_string()),
            "EXPOSE {port}"
        );
    }

    // Every base image is pinned by digest, next to the tag it came from.
    for stage in &stages {
        let (tag, digest) = stage
            .from
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{} is not pinned by digest", stage.from));
        assert!(tag.contains(':'), "{} names its tag", stage.from);
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            stage.from
        );
    }

    // scripts/image.sh builds the same image without a registry: same
    // user, entrypoint and ports.
    let script = std::fs::read_to_string(root().join("scripts/image.sh")).unwrap();
    let var = |name: &str| -> String {
        let line = script
            .lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("scripts/image.sh sets no {name}"));
        line[name.len() + 1..].trim_matches(['"', '\'']).to_string()
    };
    assert_eq!(&&var("IMAGE_USER"), user);
    let image_entry: Vec<String> = serde_json::from_str(&var("IMAGE_ENTRYPOINT")).unwrap();
    assert_eq!(image_entry, entry);
    assert_eq!(
        var("IMAGE_PORTS").split_whitespace().collect::<Vec<_>>(),
        exposed.split_whitespace().collect::<Vec<_>>()
    );

    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: BTreeSet<&str> = ignore.lines().map(str::trim).collect();
    for p in ["target", ".git", ".tools", "**/*.key"] {
        assert!(ignored.contains(p), ".dockerignore lacks {p}");
    }
    for needed in ["src", "Cargo.toml", "Cargo.lock"] {
        assert!(!ignored.contains(needed), ".dockerignore drops {needed}");
    }
}
