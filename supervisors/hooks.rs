//! The hook engine (HOOK-1, HOOK-3, HOOK-6..HOOK-12): runs the hooks of both
//! dialects at an extension point, each as a temporary [`HookRun`] actor
//! under the [`HooksSupervisor`], merges their outcomes, records the
//! matched → invoked → result triple, and plugs PreToolUse / PostToolUse into
//! the call pipeline as a [`CallPolicy`] right after the trust gate.
//!
//! Command hooks fail open (HOOK-5): a hook that cannot run is an `Error`
//! outcome and the operation continues. A policy that must fail closed is a
//! [`ToolGuard`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant as Deadline;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::trust::{Approver, ask_user};
use crate::actors::hook_run::{HookCommand, HookRun, HookRunArgs, HookShell};
use crate::messages::call::{CallPolicy, OutcomeKind, PolicyCall, PolicyVerdict, ToolOutcome};
use crate::messages::hook_codec::{
    HookInput, HookSession, RawRun, encode, parse_outcome, payload, substitute,
};
use crate::messages::hook_config::{HookEvent, HookSet};
use crate::messages::hooks::{Dialect, HookOutcome, Merged, merge};
use crate::messages::status::{HookRunInfo, RuntimeEvent};
use crate::messages::trust::{Approval, refusal_text};

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
pub struct HookReport {
    /// The merge.
    pub merged: Merged,
    /// Each run, in config order.
    pub runs: Vec<HookRunRecord>,
}

impl HookReport {
    /// Whether a Codex hook blocked (its feedback replaces a tool's output).
    fn codex_blocked(&self) -> bool {
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
    continuations: u32,
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

pub(crate) struct GuardPolicy(pub(crate) Arc<dyn ToolGuard>);

impl CallPolicy for GuardPolicy {
    fn before<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, PolicyVerdict> {
        Box::pin(async move {
            let name = self.0.name();
            let checked = std::panic::AssertUnwindSafe(self.0.check(call))
                .catch_unwind()
                .await;
            let reason = match checked {
                Ok(Ok(None)) => return PolicyVerdict::Proceed,
                Ok(Ok(Some(reason))) => format!("denied by guard {name}: {reason}"),
                Ok(Err(e)) => format!("guard {name} failed ({e}); guards fail closed"),
                Err(_) => format!("guard {name} panicked; guards fail closed"),
            };
            PolicyVerdict::Deny {
                kind: OutcomeKind::DeniedByHook,
                reason,
            }
        })
    }
}

// ===== The supervisor of hook runs =====

/// Messages of the hooks supervisor.
pub enum HooksMsg {
    /// Stop every running hook (their groups are killed and reaped), then
    /// answer; runs still going after `limit` are left to their own kill.
    Drain {
        /// How long to wait.
        limit: Duration,
        /// Answered once every run has stopped.
        reply: RpcReplyPort<()>,
    },
}

/// Parent of every [`HookRun`]: temporary children, never restarted.
#[derive(Debug, Default)]
pub struct HooksSupervisor;

impl Actor for HooksSupervisor {
    type Msg = HooksMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let HooksMsg::Drain { limit, reply } = msg;
        myself
            .stop_children_and_wait(Some("hook bridge disposed".into()), Some(limit))
            .await;
        let _ = reply.send(());
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        // Temporary children: a failed run is reported by its caller (the
        // reply is dropped, which reads as a cancelled run); never restarted.
        if let SupervisionEvent::ActorFailed(cell, e) = evt {
            tracing::warn!(actor = %cell.get_id(), error = %e, "hook run failed");
        }
        Ok(())
    }
}

// ===== The engine =====

/// Runs hooks. One per runtime: `Runtime::hooks`.
pub struct HookEngine {
    sets: Vec<HookSet>,
    /// With `plugin_root` resolved (default: the Claude Code file's directory).
    settings: HookSettings,
    supervisor: ActorRef<HooksMsg>,
    events: broadcast::Sender<RuntimeEvent>,
    run_ids: AtomicU64,
    /// Hook processes running now.
    running: AtomicUsize,
    detached: TaskTracker,
    /// Cancelled at dispose: every run watches it besides its call's token.
    disposed: CancellationToken,
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
        .map_err(|e| format!("{shown}: {e}"))
        .and_then(|text| HookSet::parse(dialect, &shown, &text));
    loaded.unwrap_or_else(|e| {
        let mut set = HookSet::empty(dialect, shown);
        set.warnings.push(format!(
            "could not load hook config: {e}; no hooks registered"
        ));
        set
    })
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
    pub(crate) async fn start(
        mut settings: HookSettings,
        events: broadcast::Sender<RuntimeEvent>,
    ) -> Result<Self, String> {
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
        let (supervisor, _) = Actor::spawn(None, HooksSupervisor, ())
            .await
            .map_err(|e| format!("could not start the hooks supervisor: {e}"))?;
        Ok(Self {
            sets,
            settings,
            supervisor,
            events,
            run_ids: AtomicU64::new(1),
            running: AtomicUsize::new(0),
            detached: TaskTracker::new(),
            disposed: CancellationToken::new(),
        })
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
        handler: &crate::messages::hook_config::HookHandler,
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
        let args = HookRunArgs {
            command,
            cancel: token,
            disposed: self.disposed.clone(),
            reply,
        };
        match Actor::spawn_linked(None, HookRun, args, self.supervisor.get_cell()).await {
            Ok(_) => answer.await.unwrap_or(RawRun {
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
        self.supervisor.stop(None);
    }

    /// Abort and drain every running hook, detached ones included (HOOK-8),
    /// within `limit`. Returns how many runs were still going.
    pub async fn dispose(&self, limit: Duration) -> usize {
        let deadline = Deadline::now() + limit;
        let n = self.running.load(Ordering::SeqCst);
        self.disposed.cancel();
        self.detached.close();
        let _ = ractor::call!(self.supervisor, |reply| HooksMsg::Drain { limit, reply });
        let _ = tokio::time::timeout_at(deadline, self.detached.wait()).await;
        self.supervisor.stop(None);
        n
    }
}

// ===== The bridges in the call pipeline =====

/// PreToolUse / PostToolUse for every call (HOOK-11), right after the trust
/// gate (CALL-1).
pub(crate) struct HooksPolicy {
    pub(crate) engine: Arc<HookEngine>,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) approval_timeout: Duration,
}

impl HooksPolicy {
    fn session(&self, call: &PolicyCall) -> HookSession {
        let mut s = self.engine.settings.session.clone();
        if s.turn_id.is_empty() {
            s.turn_id = call
                .chat
                .clone()
                .unwrap_or_else(|| format!("call-{}", call.call_id));
        }
        s
    }
}

impl CallPolicy for HooksPolicy {
    fn before<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, PolicyVerdict> {
        Box::pin(async move {
            if !self.engine.has(HookEvent::PreToolUse) {
                return PolicyVerdict::Proceed;
            }
            let input = HookInput::PreToolUse {
                tool_name: call.tool.name.clone(),
                tool_input: Value::Object(call.arguments.clone()),
                tool_use_id: format!("call-{}", call.call_id),
            };
            let report = self
                .engine
                .run(&self.session(call), &input, None, &call.cancel)
                .await;
            let m = &report.merged;
            call.annotate(|a| {
                a.context.extend(m.context.iter().cloned());
                a.notes.extend(report.notes());
            });
            let deny = |reason: String| PolicyVerdict::Deny {
                kind: OutcomeKind::DeniedByHook,
                reason,
            };
            if let Some(r) = &m.stop {
                call.annotate(|a| a.stop = Some(r.clone()));
                let why = if r.is_empty() { "no reason given" } else { r };
                return deny(format!("a PreToolUse hook stopped the turn: {why}"));
            }
            match m.decision {
                Some("deny") => deny(
                    m.reason
                        .clone()
                        .unwrap_or_else(|| "blocked by PreToolUse hook".into()),
                ),
                Some("ask") => {
                    let asked = ask_user(
                        self.approver.as_deref(),
                        call,
                        m.reason.clone(),
                        self.approval_timeout,
                    )
                    .await;
                    let why = match asked {
                        // A hook's ask approves this call only; no grant is kept.
                        Ok(Approval::AllowThisChat | Approval::AlwaysAllow) => {
                            return PolicyVerdict::Proceed;
                        }
                        Ok(Approval::DontAllow) => crate::messages::trust::Refusal::Declined,
                        Err(why) => why,
                    };
                    let hook = m.reason.as_deref().unwrap_or("no reason given");
                    deny(format!(
                        "A PreToolUse hook asked for approval ({hook}). {}",
                        refusal_text(&call.tool.server, &call.tool.name, why)
                    ))
                }
                _ => PolicyVerdict::Proceed,
            }
        })
    }

    fn after<'a>(
        &'a self,
        call: &'a PolicyCall,
        outcome: &'a mut ToolOutcome,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.engine.has(HookEvent::PostToolUse) {
                return;
            }
            let response = outcome
                .canonical
                .clone()
                .unwrap_or_else(|| json!({ "error": outcome.error.clone().unwrap_or_default() }));
            let input = HookInput::PostToolUse {
                tool_name: call.tool.name.clone(),
                tool_input: Value::Object(call.arguments.clone()),
                tool_response: response,
                tool_use_id: format!("call-{}", call.call_id),
            };
            let report = self
                .engine
                .run(&self.session(call), &input, None, &call.cancel)
                .await;
            let m = &report.merged;
            if let Some(r) = m.reason.as_deref().filter(|_| m.decision == Some("block")) {
                // Codex replaces the output the model sees; Claude Code puts
                // the feedback next to it. The side effect stays either way.
                let feedback = format!("PostToolUse hook feedback: {r}");
                if report.codex_blocked() {
                    outcome.replace_model_text(&feedback);
                } else {
                    outcome.append_model_text(&feedback);
                }
            }
            for c in &m.context {
                outcome.append_model_text(c);
            }
            outcome.notes.extend(report.notes());
            if outcome.stop.is_none() {
                outcome.stop = m.stop.clone();
            }
        })
    }
}
