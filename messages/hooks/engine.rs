//! The hook engine's vocabulary: what the embedder configures
//! ([`HookSettings`]), what a run reports ([`HookRunRecord`], [`HookReport`]),
//! the Stop verdicts of HOOK-7, and the [`ToolGuard`] port (HOOK-5). Pure.

use std::collections::HashSet;
use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::Serialize;

use super::input::HookSession;
use super::{Dialect, HookOutcome, Merged};
use crate::messages::call::PolicyCall;

/// The default budget of consecutive Stop continuations (HOOK-7).
pub const DEFAULT_STOP_BUDGET: u32 = 8;

/// How the embedder configures hooks.
#[derive(Debug, Clone)]
pub struct HookSettings {
    /// A Claude Code hooks (or settings) file, read once at start (HOOK-4).
    pub claude: Option<PathBuf>,
    /// A Codex `hooks.json`, read once at start.
    pub codex: Option<PathBuf>,
    /// The session fields every payload carries.
    pub session: HookSession,
    /// `CLAUDE_PROJECT_DIR` (default: the session cwd).
    pub project_dir: Option<PathBuf>,
    /// `CLAUDE_PLUGIN_ROOT` (default: the directory of the Claude Code file).
    pub plugin_root: Option<PathBuf>,
    /// `CLAUDE_PLUGIN_DATA` (not set by default).
    pub plugin_data: Option<PathBuf>,
    /// HOOK-12: when set, only hooks whose command hash is in it run.
    pub approved: Option<HashSet<String>>,
    /// HOOK-7: consecutive Stop continuations allowed.
    pub stop_budget: u32,
}

impl Default for HookSettings {
    fn default() -> Self {
        Self {
            claude: None,
            codex: None,
            session: HookSession::default(),
            project_dir: None,
            plugin_root: None,
            plugin_data: None,
            approved: None,
            stop_budget: DEFAULT_STOP_BUDGET,
        }
    }
}

/// One hook's run, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookRunRecord {
    /// The dialect.
    pub dialect: Dialect,
    /// The command as configured.
    pub command: String,
    /// Its hash (HOOK-12).
    pub hash: String,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Wall time.
    pub duration_ms: u64,
    /// The timeout killed it.
    pub timed_out: bool,
    /// Not run: not approved under strict hooks.
    pub skipped: bool,
    /// Its neutral outcomes.
    pub outcomes: Vec<HookOutcome>,
}

/// Everything matched at one extension point, merged (HOOK-6).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HookReport {
    /// The merge.
    pub merged: Merged,
    /// Each run, in config order.
    pub runs: Vec<HookRunRecord>,
}

impl HookReport {
    /// Whether a Codex hook blocked (its feedback replaces a tool's output).
    pub(crate) fn codex_blocked(&self) -> bool {
        self.runs.iter().any(|r| {
            r.dialect == Dialect::Codex
                && r.outcomes
                    .iter()
                    .any(|o| matches!(o, HookOutcome::Block(_)))
        })
    }

    /// Warnings and errors, for the user.
    pub fn notes(&self) -> Vec<String> {
        let m = &self.merged;
        m.warnings
            .iter()
            .map(|w| format!("hook warning: {w}"))
            .chain(m.errors.iter().map(|e| format!("hook error: {e}")))
            .collect()
    }
}

/// What the loop does at turn-stopping (HOOK-7).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopVerdict {
    /// Let the turn stop.
    Stop,
    /// Inject this as a typed context message and request another step.
    Continue(String),
    /// A hook's `continue: false`: stop, with this reason.
    Halt(String),
    /// A hook kept continuing past the budget: stop.
    BudgetExhausted(u32),
}

/// The state of one turn's stopping: consecutive continuations so far.
#[derive(Debug, Clone, Default)]
pub struct StopState {
    pub(crate) continuations: u32,
}

/// A native, typed guard (HOOK-5): the fail-closed alternative to command
/// hooks. It runs in the same chain as the hook bridges; an `Err` or a panic
/// denies the call.
pub trait ToolGuard: Send + Sync + 'static {
    /// A short name for refusals.
    fn name(&self) -> &str;
    /// `Ok(None)`: allow. `Ok(Some(reason))`: deny. `Err`: deny (fail closed).
    fn check<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, Result<Option<String>, String>>;
}
