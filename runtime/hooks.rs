//! The hook engine (HOOK-1, HOOK-3, HOOK-6..HOOK-12): runs the hooks of both
//! dialects at an extension point, each as a temporary `HookRun` actor under
//! the `HooksSupervisor`, merges their outcomes, and records the matched →
//! invoked → result triple. PreToolUse / PostToolUse enter the call pipeline
//! through `runtime::policies::hooks`, right after the trust gate.
//!
//! Command hooks fail open (HOOK-5): a hook that cannot run is an `Error`
//! outcome and the operation continues. A policy that must fail closed is a
//! `ToolGuard`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant as Deadline;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::messages::hooks::codec::{RawRun, parse_outcome};
use crate::messages::hooks::config::{HookEvent, HookFileError, HookSet};
use crate::messages::hooks::engine::{
    HookReport, HookRunRecord, HookSettings, StopState, StopVerdict,
};
use crate::messages::hooks::input::{HookInput, HookSession, encode, payload, substitute};
use crate::messages::hooks::run::{HookCommand, HookShell};
use crate::messages::hooks::{Dialect, HookOutcome, merge};
use crate::messages::status::{HookRunInfo, RuntimeEvent};
use crate::supervisors::hooks::HooksHandle;

// ===== The engine =====

/// Runs hooks. One per runtime: `Runtime::hooks`.
pub struct HookEngine {
    sets: Vec<HookSet>,
    /// With `plugin_root` resolved (default: the Claude Code file's directory).
    pub(crate) settings: HookSettings,
    supervisor: HooksHandle,
    events: broadcast::Sender<RuntimeEvent>,
    run_ids: AtomicU64,
    /// Hook processes running now.
    running: AtomicUsize,
    detached: TaskTracker,
    /// Cancelled at dispose: every run watches it besides its call's token.
    disposed: CancellationToken,
    /// `MCPVISOR_TAG` of every hook process (`<runtime>/hooks`, RECO-7).
    tag: String,
}

impl std::fmt::Debug for HookEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookEngine")
            .field("sets", &self.sets.len())
            .finish_non_exhaustive()
    }
}

/// Read a hooks file once (HOOK-4): a relative path resolves against the
/// process working directory. A file that cannot be read or parsed registers
/// no hooks; why is the set's first warning,
/// `could not load hook config: PATH: WHY; no hooks registered`.
pub fn load_hook_file(dialect: Dialect, path: &Path) -> HookSet {
    let shown = path.display().to_string();
    let loaded = std::fs::read_to_string(path)
        .map_err(|e| HookFileError {
            origin: shown.clone(),
            problem: e.to_string(),
        })
        .and_then(|text| HookSet::parse(dialect, &shown, &text));
    loaded.unwrap_or_else(|e| {
        let mut set = HookSet::empty(dialect, shown);
        set.warnings.push(format!(
            "could not load hook config: {e}; no hooks registered"
        ));
        set
    })
}

/// The process's working directory, as payloads show it.
fn process_cwd() -> String {
    std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Counts a running hook process for as long as it lives.
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Self(n)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl HookEngine {
    /// Read the hook files once (HOOK-4); runs are spawned under `supervisor`.
    pub(crate) fn start(
        mut settings: HookSettings,
        supervisor: HooksHandle,
        events: broadcast::Sender<RuntimeEvent>,
        runtime_tag: &str,
    ) -> Self {
        if settings.session.cwd.is_empty() {
            settings.session.cwd = process_cwd();
        }
        let mut sets = Vec::new();
        for (dialect, path) in [
            (Dialect::Claude, settings.claude.clone()),
            (Dialect::Codex, settings.codex.clone()),
        ] {
            let Some(path) = path else { continue };
            let path = std::path::absolute(&path).unwrap_or(path);
            if dialect == Dialect::Claude && settings.plugin_root.is_none() {
                settings.plugin_root = path.parent().map(Path::to_path_buf);
            }
            let set = load_hook_file(dialect, &path);
            for w in &set.warnings {
                tracing::warn!("{w}");
                let _ = events.send(RuntimeEvent::HookNotice { text: w.clone() });
            }
            sets.push(set);
        }
        Self {
            sets,
            settings,
            supervisor,
            events,
            run_ids: AtomicU64::new(1),
            running: AtomicUsize::new(0),
            detached: TaskTracker::new(),
            disposed: CancellationToken::new(),
            tag: format!("{runtime_tag}/hooks"),
        }
    }

    /// The loaded hook sets (with their load warnings).
    pub fn sets(&self) -> &[HookSet] {
        &self.sets
    }

    /// The session fields payloads carry by default.
    pub fn session(&self) -> &HookSession {
        &self.settings.session
    }

    /// Whether any hook is registered for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.sets
            .iter()
            .any(|s| s.groups.get(&event).is_some_and(|g| !g.is_empty()))
    }

    /// Send an event built only when someone listens.
    fn emit(&self, event: impl FnOnce() -> RuntimeEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(event());
        }
    }

    /// Run every hook of `event` (in every configured dialect, or only
    /// `dialect`) concurrently, and merge in config order (HOOK-6).
    pub async fn run(
        &self,
        session: &HookSession,
        input: &HookInput,
        dialect: Option<Dialect>,
        cancel: &CancellationToken,
    ) -> HookReport {
        self.run_at(session, input, dialect, cancel, false).await
    }

    async fn run_at(
        &self,
        session: &HookSession,
        input: &HookInput,
        dialect: Option<Dialect>,
        cancel: &CancellationToken,
        detached: bool,
    ) -> HookReport {
        let filled;
        let session = if session.cwd.is_empty() {
            filled = HookSession {
                cwd: self.settings.session.cwd.clone(),
                ..session.clone()
            };
            &filled
        } else {
            session
        };
        let event = input.event();
        let mut jobs = Vec::new();
        for set in self
            .sets
            .iter()
            .filter(|s| dialect.is_none_or(|d| d == s.dialect))
        {
            let selected = set.select(event, input.subject());
            if selected.is_empty() {
                continue; // no payload is built for a dialect nobody listens in
            }
            let stdin: Arc<[u8]> =
                encode(set.dialect, &payload(set.dialect, session, input)).into();
            for (group, handler) in selected {
                let info = HookRunInfo {
                    run_id: self.run_ids.fetch_add(1, Ordering::Relaxed),
                    dialect: set.dialect,
                    point: event,
                    command: handler.command.clone(),
                    hash: handler.hash.clone(),
                    matcher: group.pattern.clone(),
                    detached,
                };
                self.emit(|| RuntimeEvent::HookMatched(info.clone()));
                let approved = self
                    .settings
                    .approved
                    .as_ref()
                    .is_none_or(|a| a.contains(&handler.hash));
                let command =
                    approved.then(|| self.command(set.dialect, handler, session, stdin.clone()));
                jobs.push(self.run_one(info, command, cancel));
            }
        }
        let runs = futures::future::join_all(jobs).await;
        HookReport {
            merged: merge(runs.iter().flat_map(|r| &r.outcomes)),
            runs,
        }
    }

    /// The dialect's command: Claude Code substitutes `${VAR}` and exports the
    /// project and plugin variables, runs `sh -c`; Codex runs the text as is
    /// with `$SHELL -lc` and no extra environment.
    fn command(
        &self,
        dialect: Dialect,
        handler: &crate::messages::hooks::config::HookHandler,
        session: &HookSession,
        stdin: Arc<[u8]>,
    ) -> HookCommand {
        let cwd = (!session.cwd.is_empty()).then(|| PathBuf::from(&session.cwd));
        let (command, shell, env) = match dialect {
            Dialect::Claude => {
                let s = &self.settings;
                let project = s
                    .project_dir
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| session.cwd.clone());
                let mut vars = vec![("CLAUDE_PROJECT_DIR".to_owned(), project)];
                for (name, dir) in [
                    ("CLAUDE_PLUGIN_ROOT", &s.plugin_root),
                    ("CLAUDE_PLUGIN_DATA", &s.plugin_data),
                ] {
                    if let Some(dir) = dir {
                        vars.push((name.to_owned(), dir.display().to_string()));
                    }
                }
                let refs: Vec<(&str, &str)> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                (substitute(&handler.command, &refs), HookShell::Sh, vars)
            }
            Dialect::Codex => (handler.command.clone(), HookShell::Login, Vec::new()),
        };
        // RECO-7: what a hook leaves behind outside its group is found by it.
        let mut env = env;
        env.push((crate::process::TAG_VAR.to_owned(), self.tag.clone()));
        HookCommand {
            command,
            shell,
            stdin,
            env,
            cwd,
            timeout: handler.timeout,
        }
    }

    async fn run_one(
        &self,
        info: HookRunInfo,
        command: Option<HookCommand>,
        cancel: &CancellationToken,
    ) -> HookRunRecord {
        let started = Instant::now();
        let mut record = HookRunRecord {
            dialect: info.dialect,
            command: info.command.clone(),
            hash: info.hash.clone(),
            exit_code: None,
            duration_ms: 0,
            timed_out: false,
            skipped: false,
            outcomes: Vec::new(),
        };
        match command {
            None => {
                record.skipped = true;
                record.outcomes = vec![HookOutcome::Warn(format!(
                    "hook {:?} (sha256 {}) is not approved; skipped",
                    info.command, info.hash
                ))];
            }
            Some(command) => {
                self.emit(|| RuntimeEvent::HookInvoked {
                    run_id: info.run_id,
                });
                let raw = self.spawn_run(command, cancel).await;
                record.exit_code = raw.exit_code;
                record.timed_out = raw.timed_out;
                record.outcomes = parse_outcome(info.dialect, info.point, &raw);
            }
        }
        record.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.emit(|| RuntimeEvent::HookResult {
            run_id: info.run_id,
            exit_code: record.exit_code,
            duration_ms: record.duration_ms,
            timed_out: record.timed_out,
            outcomes: record.outcomes.clone(),
        });
        record
    }

    /// One temporary `HookRun` actor under the hooks supervisor. Dropping
    /// this future (a caller that gave up on the call) cancels the run.
    async fn spawn_run(&self, command: HookCommand, cancel: &CancellationToken) -> RawRun {
        let timeout_ms = u64::try_from(command.timeout.as_millis()).unwrap_or(u64::MAX);
        let (reply, answer) = oneshot::channel();
        let token = cancel.child_token();
        let _cancel_on_drop = token.clone().drop_guard();
        let _running = Running::new(&self.running);
        let asked = self
            .supervisor
            .run(command, token, self.disposed.clone(), reply);
        match asked {
            Ok(()) => answer.await.unwrap_or(RawRun {
                cancelled: true,
                timeout_ms,
                ..RawRun::default()
            }),
            Err(e) => RawRun {
                failed_to_run: Some(format!("the hooks supervisor is gone: {e}")),
                timeout_ms,
                ..RawRun::default()
            },
        }
    }

    /// Run a lifecycle event (SessionStart, Subagent*) detached (HOOK-8): the
    /// run is tracked, and disposing the runtime aborts and drains it. Await
    /// the handle for its report (e.g. SessionStart context).
    pub fn run_detached(
        self: &Arc<Self>,
        session: HookSession,
        input: HookInput,
    ) -> tokio::task::JoinHandle<HookReport> {
        let engine = self.clone();
        let cancel = self.disposed.child_token();
        self.detached
            .spawn(async move { engine.run_at(&session, &input, None, &cancel, true).await })
    }

    /// HOOK-7: run the Stop hooks for a turn that is about to stop. A
    /// `Continue` asks the loop for another step; the next Stop payload then
    /// carries `stop_hook_active: true`. More than the budget of consecutive
    /// continuations ends the turn with a `HookNotice`.
    pub async fn on_stop(
        &self,
        state: &mut StopState,
        session: &HookSession,
        last_assistant_message: Option<String>,
        cancel: &CancellationToken,
    ) -> (StopVerdict, HookReport) {
        let input = HookInput::Stop {
            stop_hook_active: state.continuations > 0,
            last_assistant_message,
        };
        let report = self.run(session, &input, None, cancel).await;
        let verdict = if let Some(r) = &report.merged.stop {
            StopVerdict::Halt(r.clone())
        } else if let Some(prompt) = &report.merged.continue_with {
            if state.continuations >= self.settings.stop_budget {
                let budget = self.settings.stop_budget;
                self.emit(|| RuntimeEvent::HookNotice {
                    text: format!(
                        "Stop hooks asked to continue {budget} times in a row; the turn ends here"
                    ),
                });
                state.continuations = 0;
                StopVerdict::BudgetExhausted(budget)
            } else {
                state.continuations += 1;
                StopVerdict::Continue(prompt.clone())
            }
        } else {
            state.continuations = 0;
            StopVerdict::Stop
        };
        (verdict, report)
    }

    pub(crate) fn cancel_all(&self) {
        self.disposed.cancel();
        self.supervisor.stop();
    }

    /// Hook processes running now.
    pub(crate) fn running_count(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Abort and drain every running hook, detached ones included (HOOK-8),
    /// within `limit`. Returns how many runs were still going.
    pub async fn dispose(&self, limit: Duration) -> usize {
        let deadline = Deadline::now() + limit;
        let n = self.running.load(Ordering::SeqCst);
        self.disposed.cancel();
        self.detached.close();
        self.supervisor.drain(limit).await;
        let _ = tokio::time::timeout_at(deadline, self.detached.wait()).await;
        // The supervisor itself is the root's child: the root stops it.
        n
    }
}
