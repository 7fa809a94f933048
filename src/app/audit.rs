//! `mrguard audit`: the validation rules over every MR in a cluster, as the
//! controller's audit pass runs them, printed as a table or as JSON.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::cluster::{ClusterContext, ConfigOrigin};
use super::progress::Progress;
use crate::controller::leader::audit::listing::{
    discover, index_identities, pass, AuditFinding, PassEvent,
};
use mrguard_policy::cluster::Cluster;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuditOutput {
    Table,
    Json,
}

/// Arguments of `mrguard audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub(crate) cluster: super::cluster::ClusterArgs,
    /// Configuration file whose rules apply; the built-in default when absent.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub(crate) output: AuditOutput,
    /// No progress on stderr (shown only when stderr is a terminal).
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// Renders findings as aligned columns, sorted by kind, namespace and name.
pub(crate) fn render_table(findings: &[AuditFinding]) -> String {
    const HEADERS: [&str; 6] = ["KIND", "NAMESPACE", "NAME", "RULE", "ACTION", "MESSAGE"];
    let rows: Vec<[String; 6]> = findings
        .iter()
        .map(|f| {
            let message = match &f.fix {
                Some(fix) => format!("{} ({fix})", f.message),
                None => f.message.clone(),
            };
            [
                format!("{}.{}", f.kind, f.group),
                f.namespace.clone(),
                f.name.clone(),
                f.rule.clone(),
                // A waived finding enforces nothing: say which exception.
                match &f.exception {
                    Some(e) => format!("Skip ({e})"),
                    None => f.action.clone(),
                },
                message,
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 5 {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(HEADERS);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    out
}

fn sort(findings: &mut [AuditFinding]) {
    findings.sort_by(|a, b| {
        (&a.group, &a.kind, &a.namespace, &a.name, &a.rule).cmp(&(
            &b.group,
            &b.kind,
            &b.namespace,
            &b.name,
            &b.rule,
        ))
    });
}

/// Exit code: 0 when nothing is denied, 1 when a finding's action is Deny,
/// 2 when the cluster or the configuration could not be read.
pub(crate) fn run(args: AuditArgs) -> i32 {
    let Some(runtime) = super::cluster::runtime("audit") else {
        return 2;
    };
    // The configuration is judged before the cluster is asked: a wrong
    // file says so whatever the cluster's state.
    let origin = ConfigOrigin::from_flags(args.config.as_ref(), None);
    let config = match origin.read_local().and_then(|c| Ok(c.load()?)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mrguard audit: {e}");
            return 2;
        }
    };
    runtime.block_on(async move {
        let client = match ClusterContext::connect(&args.cluster, None, &origin).await {
            Ok(ctx) => ctx.client,
            Err(e) => {
                eprintln!("mrguard audit: {e}");
                return 2;
            }
        };
        let coverage = match discover(&client).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("mrguard audit: {e}");
                return 2;
            }
        };
        let mut findings = Vec::new();
        let (mut objects, mut failed) = (0, false);
        // The total of MRs is known only once every kind is listed, so the
        // bar counts kinds and its message the MRs judged so far.
        let progress = Progress::new(coverage.len() as u64, "kinds", args.quiet);
        // What the controller's identity watches would know: duplicate
        // claimants are findings here too.
        progress.message("indexing external identities".into());
        let cluster = Cluster::default();
        index_identities(&client, &coverage, &config, &cluster).await;
        let mut tick = None;
        pass(
            &client,
            coverage.kinds(),
            &config,
            &cluster,
            jiff::Timestamp::now(),
            |event| match event {
                PassEvent::Listing(kind) => {
                    tick = Some(progress.item());
                    progress.message(format!(
                        "{objects} MRs judged; listing {}.{}",
                        kind.plural, kind.group
                    ));
                }
                PassEvent::Done(_, result) => {
                    tick = None;
                    match result {
                        Ok(r) => {
                            objects += r.objects;
                            findings.extend(r.findings);
                        }
                        Err(e) => {
                            eprintln!("mrguard audit: {e}");
                            failed = true;
                        }
                    }
                }
            },
        )
        .await;
        drop(tick);
        progress.finish();
        sort(&mut findings);
        match args.output {
            AuditOutput::Json => match serde_json::to_string_pretty(&findings) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("mrguard audit: failed to encode the findings: {e}");
                    return 2;
                }
            },
            AuditOutput::Table if findings.is_empty() => {}
            AuditOutput::Table => print!("{}", render_table(&findings)),
        }
        eprintln!(
            "{} finding(s) in {objects} MR(s) of {} kind(s)",
            findings.len(),
            coverage.len()
        );
        // Safe-start (Crossplane v2): kinds whose MRD is inactive have no
        // CRD, so the pass above could not see them; name them.
        if let Ok(known) = super::activations::list(&client).await {
            if let Some(s) = known.inactive_summary(10) {
                eprintln!("mrguard audit: note: {s}");
            }
        }
        if failed {
            2
        } else if findings.iter().any(|f| f.action == "Deny") {
            1
        } else {
            0
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(ns: &str, name: &str, rule: &str, action: &str) -> AuditFinding {
        AuditFinding {
            group: "s3.aws.upbound.io".into(),
            kind: "Bucket".into(),
            namespace: ns.into(),
            name: name.into(),
            uid: "u".into(),
            rule: rule.into(),
            action: action.into(),
            message: "deletionPolicy \"delete\" is not Delete or Orphan".into(),
            fix: Some("use Delete".into()),
            exception: None,
        }
    }

    #[test]
    fn waived_findings_show_their_exception() {
        let mut f = finding("", "legacy", "paused-value", "Warn");
        f.exception = Some("legacy-pause".into());
        let t = render_table(&[f, finding("", "other", "paused-value", "Audit")]);
        assert!(t.contains("Skip (legacy-pause)"), "{t}");
        assert!(t.contains("Audit"), "{t}");
    }

    #[test]
    fn table_is_aligned_and_sorted() {
        let mut f = vec![
            finding("", "zeta", "deletion-policy", "Deny"),
            finding("", "alpha-long-name", "paused-value", "Warn"),
        ];
        sort(&mut f);
        let t = render_table(&f);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("KIND"));
        assert!(lines[1].contains("alpha-long-name") && lines[2].contains("zeta"));
        let col = |l: &str| {
            l.find("deletion-policy")
                .or_else(|| l.find("paused-value"))
                .or_else(|| l.find("RULE"))
        };
        assert_eq!(col(lines[0]), col(lines[1]));
        assert_eq!(col(lines[1]), col(lines[2]));
        assert!(lines[2].ends_with("(use Delete)"));
    }

    #[test]
    fn json_has_no_uid_and_names_the_object() {
        let v =
            serde_json::to_value(vec![finding("team-a", "b", "deletion-policy", "Deny")]).unwrap();
        assert_eq!(v[0]["namespace"], "team-a");
        assert_eq!(v[0]["rule"], "deletion-policy");
        assert!(v[0].get("uid").is_none());
    }
}
