//! `mrguard test DIR` (docs/policy-operations.md#mrguard-test): YAML test
//! suites of a configuration, each case a request with the verdict it
//! expects, judged offline by the same functions as the webhooks. Text
//! output, `--junit FILE` for CI, and an exit code.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;
use serde_json::Value;

use mrguard_policy::admission::config::{Config, ConfigError};
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::commands::test::{
    compare, junit, text_report, CaseResult, Expect, SuiteResult,
};

/// Arguments of `mrguard test`.
#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// A suite file, or a folder searched recursively for `*.test.yaml`
    /// suites (other YAML files there are objects and configurations the
    /// suites name).
    pub(crate) path: PathBuf,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
}

/// Why the suites could not be run (exit code 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SuiteError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A suite or object file is not what it should be.
    #[error("failed to parse {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A suite's configuration is invalid.
    #[error("failed to load the configuration of {path}: {source}")]
    Config {
        /// The suite.
        path: String,
        /// Why.
        #[source]
        source: ConfigError,
    },
    /// The folder holds no suite.
    #[error("no *.test.yaml suite in {0}")]
    Empty(String),
    /// The JUnit file could not be written.
    #[error("failed to write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSuite {
    name: Option<String>,
    /// The configuration, inline.
    config: Option<Value>,
    /// Or a configuration file, relative to the suite.
    config_file: Option<String>,
    /// A CRD file or folder, relative to the suite: their schemas are
    /// applied as `check --crd` does, and the immutable fields their
    /// documentation names are known, as in a cluster with them.
    crds: Option<String>,
    cases: Vec<RawCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCase {
    name: String,
    operation: Option<Operation>,
    user: Option<String>,
    object: Option<Value>,
    object_file: Option<String>,
    old_object: Option<Value>,
    old_object_file: Option<String>,
    expect: Expect,
}

/// The suites under `path`: the file itself, or every `*.test.yaml` and
/// `*.test.yml` below the folder, sorted.
fn suites(path: &Path) -> Result<Vec<PathBuf>, SuiteError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| SuiteError::Read {
            path: dir.display().to_string(),
            source,
        })?;
        for e in entries {
            let p = e
                .map_err(|source| SuiteError::Read {
                    path: dir.display().to_string(),
                    source,
                })?
                .path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".test.yaml") || name.ends_with(".test.yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(SuiteError::Empty(path.display().to_string()));
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, SuiteError> {
    std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The first document of an object file.
fn object_file(base: &Path, rel: &str) -> Result<Value, SuiteError> {
    let path = base.join(rel);
    let text = read(&path)?;
    serde_saphyr::from_multiple::<Value>(&text)
        .map_err(|e| SuiteError::Parse {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?
        .into_iter()
        .find(|v| !v.is_null())
        .ok_or_else(|| SuiteError::Parse {
            path: path.display().to_string(),
            reason: "holds no object".into(),
        })
}

fn one_of(
    file: &str,
    what: &str,
    inline: Option<Value>,
    from: Option<&str>,
    base: &Path,
) -> Result<Option<Value>, SuiteError> {
    match (inline, from) {
        (Some(_), Some(_)) => Err(SuiteError::Parse {
            path: file.to_string(),
            reason: format!("{what}: give {what} or {what}File, not both"),
        }),
        (Some(v), None) => Ok(Some(v)),
        (None, Some(f)) => object_file(base, f)
            .map(Some)
            .map_err(|e| SuiteError::Parse {
                path: file.to_string(),
                reason: format!("{what}File: {e}"),
            }),
        (None, None) => Ok(None),
    }
}

/// Runs one suite file, judging its cases at `now`.
pub(crate) fn run_suite(path: &Path, now: jiff::Timestamp) -> Result<SuiteResult, SuiteError> {
    let file = path.display().to_string();
    let base = path.parent().unwrap_or(Path::new("."));
    let raw: RawSuite = serde_saphyr::from_str(&read(path)?).map_err(|e| SuiteError::Parse {
        path: file.clone(),
        reason: e.to_string(),
    })?;
    let config = match (&raw.config, &raw.config_file) {
        (Some(_), Some(_)) => {
            return Err(SuiteError::Parse {
                path: file,
                reason: "give config or configFile, not both".into(),
            })
        }
        // JSON is YAML: the inline mapping goes through the same parser.
        (Some(v), None) => Config::from_yaml(&v.to_string()),
        (None, Some(f)) => Config::from_yaml(&read(&base.join(f))?),
        (None, None) => Ok(Config::builtin()),
    }
    .map_err(|source| SuiteError::Config {
        path: file.clone(),
        source,
    })?;
    let crds = match &raw.crds {
        Some(p) => Some(
            super::check::load_crds(
                &base.join(p),
                None,
                mrguard_policy::admission::kube_version::KubeVersion::NEWEST,
            )
            .map_err(|e| SuiteError::Parse {
                path: file.clone(),
                reason: format!("crds: {e}"),
            })?,
        ),
        None => None,
    };
    let cluster = crds
        .as_ref()
        .map(mrguard_policy::admission::crd::Crds::cluster)
        .unwrap_or_default();
    let mut cases = Vec::new();
    for (i, c) in raw.cases.into_iter().enumerate() {
        let at = format!("cases[{i}] ({})", c.name);
        let object = one_of(&file, "object", c.object, c.object_file.as_deref(), base)?;
        let old = one_of(
            &file,
            "oldObject",
            c.old_object,
            c.old_object_file.as_deref(),
            base,
        )?;
        let op = c.operation.unwrap_or(if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        });
        // A DELETE judges the object being deleted, given either way.
        let (object, old) = match (op, object, old) {
            (Operation::Delete, None, Some(o)) => (Some(o), None),
            (_, o, old) => (o, old),
        };
        let Some(object) = object else {
            return Err(SuiteError::Parse {
                path: file,
                reason: format!("{at}: no object or objectFile"),
            });
        };
        if op == Operation::Update && old.is_none() {
            return Err(SuiteError::Parse {
                path: file,
                reason: format!("{at}: UPDATE needs oldObject or oldObjectFile"),
            });
        }
        let user = c.user.as_deref().unwrap_or("mrguard-test");
        let s = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
        let crd = match crds.as_ref().map(|c| c.lookup(s("apiVersion"), s("kind"))) {
            Some(mrguard_policy::admission::crd::Lookup::Found(v)) => Some(v),
            _ => None,
        };
        let judged =
            Decider::new(&config, &cluster, now).judge(op, &object, old.as_ref(), user, crd);
        let failures = match judged {
            Ok(j) => compare(&c.expect, &j),
            Err(e) => vec![format!("the request could not be judged: {e}")],
        };
        cases.push(CaseResult {
            name: c.name,
            failures,
        });
    }
    Ok(SuiteResult {
        name: raw.name.unwrap_or_else(|| file.clone()),
        file,
        cases,
    })
}

fn execute(args: &TestArgs) -> Result<bool, SuiteError> {
    let mut results = Vec::new();
    // Every suite is judged at one instant.
    let now = jiff::Timestamp::now();
    for p in suites(&args.path)? {
        results.push(run_suite(&p, now)?);
    }
    let (text, _, failed) = text_report(&results);
    print!("{text}");
    if let Some(f) = &args.junit {
        std::fs::write(f, junit(&results)).map_err(|source| SuiteError::Write {
            path: f.display().to_string(),
            source,
        })?;
    }
    Ok(failed == 0)
}

/// Runs the suites; 0 when every case passes, 1 when one fails, 2 when a
/// suite cannot be run.
pub(crate) fn run(args: TestArgs) -> i32 {
    match execute(&args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}
