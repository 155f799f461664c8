//! One hook process to run: the command, its shell, its stdin, its
//! environment and its timeout, as the hook engine asks the hooks
//! supervisor for it (the `HookRun` actor runs it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the command text is handed to a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookShell {
    /// `sh -c` (Claude Code).
    Sh,
    /// `$SHELL -lc`, falling back to `/bin/sh` (Codex).
    Login,
}

/// One run to make.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// The command text (after any substitution).
    pub command: String,
    /// The shell.
    pub shell: HookShell,
    /// The stdin bytes (shared by every hook of one dialect at one point).
    pub stdin: Arc<[u8]>,
    /// Extra environment on top of the runtime's own.
    pub env: Vec<(String, String)>,
    /// The working directory, when it exists.
    pub cwd: Option<PathBuf>,
    /// The effective timeout.
    pub timeout: Duration,
}
