//! CEL: compiled once when the configuration loads, evaluated per request.

use std::sync::Arc;

use crate::config::Operation;
use crate::rules::Action;

/// A compiled CEL expression, shared read-only across requests.
#[derive(Clone)]
pub struct CelProgram {
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for CelProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CelProgram")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(String);

impl CelProgram {
    pub fn compile(source: &str) -> Result<Self, CompileError> {
        if source.trim().is_empty() {
            return Err(CompileError("the expression is empty".into()));
        }
        let program = cel::Program::compile(source).map_err(|e| CompileError(e.to_string()))?;
        Ok(Self {
            program: Arc::new(program),
        })
    }

    pub fn program(&self) -> &cel::Program {
        &self.program
    }
}

/// A `celRules` entry of the configuration, compiled.
#[derive(Debug, Clone)]
pub struct CelRule {
    pub name: String,
    pub expression: String,
    pub program: CelProgram,
    pub message: Option<String>,
    pub message_program: Option<CelProgram>,
    pub action: Action,
    pub operations: Vec<Operation>,
}

/// Evaluates a configured rule; `Some` when it fails. Filled in by the CEL
/// engine; until then every rule passes.
pub fn check_rule(
    _rule: &CelRule,
    _ctx: &crate::rules::RuleContext,
) -> Option<crate::rules::Violation> {
    None
}
