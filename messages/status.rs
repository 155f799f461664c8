//! Server state (CONN-10), status (OBS-1) and the typed event stream (OBS-2).

use std::fmt;

use serde::Serialize;

use super::config::Scope;

/// The state machine of one server instance (CONN-10).
///
/// ```text
///  stopped ─▶ connecting ─▶ ready(tools: N)
///                 │             │ lost
///                 ▼             ▼
///               failed   reconnecting(k of n) ─▶ connecting … ─▶ exhausted
///  ready ─idle─▶ idle_stopped ─call─▶ connecting
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
#[non_exhaustive]
pub enum ServerState {
    /// Not running (disabled, not started yet, or shut down).
    Stopped,
    /// Spawning/connecting, handshake and first catalog in progress.
    Connecting,
    /// Connected, catalog registered.
    Ready,
    /// Waiting before reconnect attempt `attempt` of `of`.
    Reconnecting {
        /// The attempt about to be made (1-based).
        attempt: u32,
        /// The budget (`max_attempts`).
        of: u32,
    },
    /// Failed and not retrying (initial failure without reconnect, close barrier, …).
    Failed,
    /// The reconnect budget is used up (RECO-4); only an explicit restart starts it again.
    Exhausted,
    /// Stopped after `idle_stop_after_s` without calls; the next call restarts it (RECO-6).
    IdleStopped,
}

impl ServerState {
    /// The snake_case name used by `status --json`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Reconnecting { .. } => "reconnecting",
            Self::Failed => "failed",
            Self::Exhausted => "exhausted",
            Self::IdleStopped => "idle_stopped",
        }
    }
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reconnecting { attempt, of } => {
                write!(f, "reconnecting (attempt {attempt} of {of})")
            }
            other => f.write_str(other.name()),
        }
    }
}

/// Status of one server instance (OBS-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ServerStatus {
    /// The scope the server is registered in.
    pub scope: Scope,
    /// `server_name`.
    pub server: String,
    /// Current state.
    #[serde(flatten)]
    pub state: ServerState,
    /// `stdio`, `streamable-http`, `in-process`.
    pub transport: &'static str,
    /// Child process id (stdio) while one is alive.
    pub pid: Option<u32>,
    /// Negotiated protocol version.
    pub protocol_version: Option<String>,
    /// `serverInfo.name` and `.version` from `initialize`.
    pub server_info: Option<String>,
    /// Connection generation (incremented on every connect).
    pub connection_generation: u64,
    /// Catalog generation of the registered tools (incremented on every swap).
    pub generation: u64,
    /// Registered tool count.
    pub tools: usize,
    /// The server provides resources (RES-1).
    pub resources: bool,
    /// The server provides prompts (`prompts/list`, `prompts/get`).
    pub prompts: bool,
    /// Restarts after a failure since the runtime started.
    pub restarts: u32,
    /// Failed attempts in the current outage.
    pub consecutive_failures: u32,
    /// Attempts left in the current outage's budget.
    pub budget_left: u32,
    /// Milliseconds the current connection has been up.
    pub uptime_ms: Option<u64>,
    /// When the last failure of a connection (or an attempt) was
    /// registered, in Unix milliseconds: the instant the reconnect delay
    /// runs from (RECO-1).
    pub last_failure_unix_ms: Option<u64>,
    /// Seconds until idle stop, when an idle timer runs.
    pub idle_stop_in_s: Option<u64>,
    /// Last error, with the stderr tail when there was one.
    pub error: Option<String>,
    /// The stderr tail (CONN-7).
    pub stderr_tail: String,
    /// Non-JSON lines seen on stdout in this connection (CONN-6).
    pub non_json_lines: u64,
    /// Warnings (first non-JSON line, dropped tool entries, degraded schemas…).
    pub warnings: Vec<String>,
    /// A catalog re-sync is running or due (SYNC-5): a `tools/list_changed`
    /// arrived that the registered catalog does not reflect yet.
    pub syncing: bool,
    /// The `CatalogSync` actor running now, by its number among the
    /// server's re-syncs (`None` when none runs; `syncing` may still be true
    /// while a follow-up waits for the burst to end).
    pub catalog_sync: Option<u64>,
    /// A call woke the server (RECO-6) and waits for it: calls that find it
    /// not connected wait for the same connection instead of failing.
    pub waking: bool,
}

impl ServerStatus {
    /// A `stopped` server with nothing known yet.
    pub fn new(
        scope: Scope,
        server: impl Into<String>,
        transport: &'static str,
        budget: u32,
    ) -> Self {
        Self {
            scope,
            server: server.into(),
            state: ServerState::Stopped,
            transport,
            pid: None,
            protocol_version: None,
            server_info: None,
            connection_generation: 0,
            generation: 0,
            tools: 0,
            resources: false,
            prompts: false,
            restarts: 0,
            consecutive_failures: 0,
            budget_left: budget,
            uptime_ms: None,
            last_failure_unix_ms: None,
            idle_stop_in_s: None,
            error: None,
            stderr_tail: String::new(),
            non_json_lines: 0,
            syncing: false,
            catalog_sync: None,
            waking: false,
            warnings: Vec::new(),
        }
    }
}

/// A typed runtime event (OBS-2). Subscribe with `Runtime::subscribe`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RuntimeEvent {
    /// A server's status changed (state, pid, tools, error…).
    ServerStatus(Box<ServerStatus>),
    /// A new catalog generation was registered (or the tools were removed).
    CatalogChanged {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// The new catalog generation.
        generation: u64,
        /// Tool count after the change.
        tools: usize,
    },
    /// A server said a resource it serves changed
    /// (`notifications/resources/updated`, after a subscribe).
    ResourceUpdated {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// The resource's URI, as the server sent it.
        uri: String,
    },
    /// A server's log message (`notifications/message`), its data with the
    /// server's secrets redacted (TRUST-2).
    ServerLog {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// Its level (`debug` … `emergency`, as the server sent it).
        level: String,
        /// Its logger, when it named one.
        logger: Option<String>,
        /// Its data.
        data: serde_json::Value,
    },
    /// A server said its prompt or resource list changed
    /// (`notifications/prompts/list_changed`,
    /// `notifications/resources/list_changed`). The runtime keeps no such
    /// list; this is for those that do (the gateway's clients).
    ListChanged {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// Which list: `prompts` or `resources`.
        list: &'static str,
    },
    /// A server reported progress on a call (`notifications/progress`).
    /// Every call carries its `call_id` as its progress token, so the
    /// notification names the call it belongs to.
    CallProgress {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// The call (as in `CallStarted`).
        call_id: u64,
        /// The progress so far, as the server sent it.
        progress: f64,
        /// The total, when the server knows it.
        total: Option<f64>,
        /// The server's message, when it sent one.
        message: Option<String>,
    },
    /// A call started (before the tool is resolved and the policy chain runs).
    CallStarted {
        /// Scope.
        scope: Scope,
        /// Public tool name.
        tool: String,
        /// Per-runtime call id, shared with `CallFinished`.
        call_id: u64,
    },
    /// A call finished with an outcome.
    CallFinished {
        /// Scope.
        scope: Scope,
        /// Public tool name.
        tool: String,
        /// Per-runtime call id.
        call_id: u64,
        /// The outcome kind, snake_case.
        outcome: &'static str,
        /// Wall time.
        duration_ms: u64,
        /// What the model sees of the outcome (model-visible text, RES-5/OBS-2).
        projection: String,
    },
    /// The trust gate decided on a call (TRUST-4/5).
    TrustDecision {
        /// Scope.
        scope: Scope,
        /// Server.
        server: String,
        /// Public tool name.
        tool: String,
        /// The chat, when named.
        chat: Option<String>,
        /// `allow` or `deny` (never `ask`: the event records what was decided).
        decision: super::trust::TrustDecision,
        /// The approver's answer, when one was asked.
        approval: Option<super::trust::Approval>,
    },
    /// Other model-visible text the runtime produced: attributed server
    /// instructions and the shared resource tools' descriptions (RES-5, OBS-2).
    ModelText {
        /// Scope.
        scope: Scope,
        /// Where it comes from: `instructions:<server>` or `resource_tools`.
        origin: String,
        /// The text (empty when withdrawn).
        text: String,
    },
    /// A hook matched an extension point (HOOK-8, first of a triple).
    HookMatched(HookRunInfo),
    /// The matched hook's process was started (or refused: see `HookResult`).
    HookInvoked {
        /// The run.
        run_id: u64,
    },
    /// The hook's neutral outcomes (last of the triple).
    HookResult {
        /// The run.
        run_id: u64,
        /// The exit code, when it exited.
        exit_code: Option<i32>,
        /// Wall time.
        duration_ms: u64,
        /// The timeout killed it.
        timed_out: bool,
        /// Neutral outcomes.
        outcomes: Vec<super::hooks::HookOutcome>,
    },
    /// Something about hooks the user should know: a hooks file that could
    /// not be loaded, a skipped handler, an exhausted continuation budget.
    HookNotice {
        /// The text.
        text: String,
    },
}

/// One matched hook's run, as the event log records it (HOOK-8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookRunInfo {
    /// Per-runtime run id, shared by the matched / invoked / result triple.
    pub run_id: u64,
    /// `claude` or `codex`.
    pub dialect: super::hooks::Dialect,
    /// The extension point.
    pub point: super::hooks::config::HookEvent,
    /// The command as configured.
    pub command: String,
    /// Its hash (HOOK-12).
    pub hash: String,
    /// The group's matcher, when it had one.
    pub matcher: Option<String>,
    /// A detached lifecycle run (not part of a turn).
    pub detached: bool,
}

/// What `Runtime::shutdown` returns (RECO-7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Servers stopped.
    pub servers_stopped: Vec<String>,
    /// Child processes confirmed reaped.
    pub processes_reaped: Vec<u32>,
    /// Calls that were in flight when their server was stopped; each ends with
    /// its own outcome (transport lost, side effects unknown).
    pub calls_cancelled: u64,
    /// Hook runs still going at shutdown: aborted, their groups killed and reaped (HOOK-8).
    pub hook_runs_aborted: usize,
    /// Anything that did not confirm before its deadline.
    pub unconfirmed: Vec<String>,
    /// Processes that had left their server's or hook's process group
    /// (`setsid`), found by the runtime's tag in their environment and
    /// SIGKILLed (RECO-7). One still running after that is in `unconfirmed`.
    pub escaped: Vec<u32>,
    /// Whole shutdown wall time.
    pub duration_ms: u64,
    /// Tasks (the tasks extension, ERA-6) that calls were following when the
    /// shutdown began: each was sent `tasks/cancel`, and its call ended
    /// `cancelled`.
    pub tasks_cancelled: Vec<CancelledTask>,
}

/// A task the shutdown cancelled (ERA-6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CancelledTask {
    /// The scope of the call.
    pub scope: String,
    /// The server that ran it.
    pub server: String,
    /// The tool's name on the wire.
    pub tool: String,
    /// The server's task id.
    pub task_id: String,
    /// The server acknowledged `tasks/cancel` within the notice wait
    /// (cancellation is cooperative: the task may still end otherwise).
    pub acknowledged: bool,
}

impl ShutdownReport {
    /// True when every server stopped and every process was confirmed reaped.
    pub fn is_clean(&self) -> bool {
        self.unconfirmed.is_empty()
    }

    /// Merge a child's report into this one.
    pub fn absorb(&mut self, other: ShutdownReport) {
        self.servers_stopped.extend(other.servers_stopped);
        self.processes_reaped.extend(other.processes_reaped);
        self.calls_cancelled += other.calls_cancelled;
        self.hook_runs_aborted += other.hook_runs_aborted;
        self.unconfirmed.extend(other.unconfirmed);
        self.escaped.extend(other.escaped);
        self.tasks_cancelled.extend(other.tasks_cancelled);
    }
}
