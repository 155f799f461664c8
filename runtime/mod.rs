//! `Runtime`: the embedded API facade over the supervision tree.
//!
//! Lifecycle requests (add a server, restart, shut down) are messages to the
//! supervisors. Calls are not: a call resolves its tool in the scope's
//! published snapshot and runs the policy chain and the request in the
//! caller's task (design.md, "The call path"), so it never queues behind an
//! actor's mailbox.
//!
//! The module's rooms: this file is the handle and its lifecycle API
//! (servers, switches, status, shutdown); `builder.rs` starts a runtime;
//! `call.rs` is the call pipeline and `results.rs` its result half;
//! `resources.rs` the shared resource tools; `policies/` the stages of the
//! policy chain (trust gate, hook bridges, guards); `hooks.rs` the hook
//! engine; `stores/` the adapters behind the attachment and secret ports.

mod builder;
pub(crate) mod config;
pub use builder::RuntimeBuilder;
mod call;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod hooks;
#[cfg(feature = "otlp")]
pub(crate) mod otel;
pub mod policies;
mod resources;
pub mod results;
mod seats;
pub use seats::Activation;
pub mod stores;
pub mod turn;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::messages::budget::ResultLimits;
use crate::messages::call::{CallPolicy, ToolDefinition};
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::images::AttachmentStore;
use crate::messages::registry::ScopeSnapshot;
use crate::messages::status::{RuntimeEvent, ServerState, ServerStatus, ShutdownReport};
use crate::messages::tree::{ScopeHandle, TreeError};
use crate::supervisors::root::RootHandle;
use crate::supervisors::spec::AskError;

/// Default deadline of [`Runtime::shutdown`].
pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);
/// How long a lost call waits for the connection's real cause (CONN-8).
const CAUSE_WAIT: Duration = Duration::from_secs(3);

/// Errors of the runtime's lifecycle API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A configuration problem.
    #[error(transparent)]
    Config(#[from] crate::messages::config::ConfigError),
    /// A scope could not be had (the runtime is shutting down, or the scope
    /// supervisor could not start).
    #[error("scope {scope}: {source}")]
    Scope {
        /// The scope.
        scope: Scope,
        /// Why.
        source: TreeError,
    },
    /// The tree refused a request about a server (the name is taken, the
    /// runtime is off or shutting down, no such server).
    #[error("server \"{server}\": {source}")]
    Refused {
        /// The server.
        server: String,
        /// Why.
        source: TreeError,
    },
    /// A server did not come up, or is not there (CONN-12): its own error,
    /// with the stderr tail when there is one.
    #[error("server \"{server}\": {message}")]
    Server {
        /// The server.
        server: String,
        /// What happened.
        message: String,
    },
    /// A provider seat or an activation refused (SEAT-1..10).
    #[error(transparent)]
    Seat(crate::messages::seat::SeatError),
    /// The runtime could not start (its event log, its tree).
    #[error("the runtime could not start: {0}")]
    Start(String),
    /// An actor of the runtime did not answer (the runtime was shut down).
    #[error("runtime unavailable: the {actor} {why}")]
    Unavailable {
        /// Which actor.
        actor: &'static str,
        /// Why.
        why: AskError,
    },
}

impl RuntimeError {
    fn unavailable(actor: &'static str) -> impl FnOnce(AskError) -> Self {
        move |why| Self::Unavailable { actor, why }
    }
}

struct Inner {
    trust_gate: Arc<dyn CallPolicy>,
    /// The same gate, for what only it answers ([`Runtime::end_chat`]).
    trust: Arc<self::policies::trust::TrustGate>,
    hooks: Arc<self::hooks::HookEngine>,
    /// PreToolUse / PostToolUse, when any such hook is registered.
    hooks_policy: Option<Arc<dyn CallPolicy>>,
    call_ids: std::sync::atomic::AtomicU64,
    attachments: Option<Arc<dyn AttachmentStore>>,
    limits: ResultLimits,
    root: RootHandle,
    root_task: Mutex<Option<JoinHandle<()>>>,
    scopes: RwLock<HashMap<Scope, ScopeHandle>>,
    events: broadcast::Sender<RuntimeEvent>,
    policies: Vec<Arc<dyn CallPolicy>>,
    /// This runtime's part of `MCPVISOR_TAG` (RECO-7): random per runtime.
    tag: String,
    /// Test-only break switches (all off outside the chaos runner).
    chaos: crate::messages::config::ChaosSwitches,
    /// Where secret values come from (TRUST-2): servers' and model routes' keys.
    secrets: Arc<dyn crate::messages::trust::SecretStore>,
    /// The provider seats (children of the root).
    seats: Vec<crate::supervisors::seat::SeatHandle>,
    /// Live activations, one per scope (SEAT-7).
    activations: Mutex<HashMap<Scope, crate::messages::seat::ActivationId>>,
    /// Activation ids minted so far.
    activation_ids: std::sync::atomic::AtomicU64,
    /// Activations opened by the builder (`activate`), held until shutdown.
    held_activations: Mutex<Vec<Activation>>,
    /// The JS mods' host (MOD-1), when mods are enabled.
    #[cfg(feature = "mods")]
    mods: Option<Arc<crate::mods::ModHost>>,
    /// A shutdown completed: a later one finds the root gone, and that is
    /// not a failure.
    shut_down: std::sync::atomic::AtomicBool,
    /// The tasks calls follow (ERA-6): the shutdown cancels them.
    tasks: call::LiveTasks,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without an explicit shutdown, stopping the root kills the tree; every
        // process handle SIGKILLs its group on drop, and the reapers reap.
        // Running hooks see the cancellation and kill their groups.
        self.hooks.cancel_all();
        self.root.stop();
    }
}

/// The embedded runtime. Cheap to clone; all clones share one tree.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// A builder.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    async fn scope_handle(&self, scope: &Scope) -> Result<ScopeHandle, RuntimeError> {
        if let Some(h) = self.cached_scope(scope) {
            return Ok(h);
        }
        let h = self
            .inner
            .root
            .scope(scope)
            .await
            .map_err(RuntimeError::unavailable("root supervisor"))?
            .map_err(|source| RuntimeError::Scope {
                scope: scope.clone(),
                source,
            })?;
        if let Ok(mut map) = self.inner.scopes.write() {
            map.insert(scope.clone(), h.clone());
        }
        Ok(h)
    }

    /// The cached handle of a scope whose supervisor still runs (a failed
    /// scope is dropped by the root and made again on next use).
    /// `f` of the scope's live handle, read in place (no handle cloned).
    fn with_scope<T>(&self, scope: &Scope, f: impl FnOnce(&ScopeHandle) -> T) -> Option<T> {
        self.inner
            .scopes
            .read()
            .ok()
            .and_then(|m| m.get(scope).filter(|h| h.is_alive()).map(f))
    }

    fn cached_scope(&self, scope: &Scope) -> Option<ScopeHandle> {
        self.with_scope(scope, ScopeHandle::clone)
    }

    /// Every call reads it (twice): in place, the handle is not cloned.
    fn snapshot(&self, scope: &Scope) -> Option<Arc<ScopeSnapshot>> {
        self.with_scope(scope, |h| h.snapshot.borrow().clone())
    }

    /// Add and start a server in a scope (CONN-4) and return its server_name
    /// (derived from `display_name` when the name is empty, SYNC-2). With
    /// `fail_on_startup_error` this waits for the first connection and returns
    /// its error (CONN-12).
    pub async fn add_server(
        &self,
        scope: Scope,
        config: ServerConfig,
    ) -> Result<String, RuntimeError> {
        config.validate()?;
        let mut config = config;
        let named = match &config.display_name {
            Some(d) if config.server_name.is_empty() => d.clone(),
            _ => config.server_name.clone(),
        };
        if let crate::messages::config::TransportConfig::Stdio(stdio) = &mut config.transport
            && !self.inner.chaos.untagged_children()
        {
            // RECO-7: every descendant of the server, also one that leaves
            // its process group, carries the server's tag.
            stdio.env.insert(
                crate::process::TAG_VAR.to_owned(),
                format!("{}/{scope}/{named}", self.inner.tag),
            );
        }
        let requested = config
            .display_name
            .clone()
            .filter(|_| config.server_name.is_empty())
            .unwrap_or_else(|| config.server_name.clone());
        let strict = config.fail_on_startup_error && config.enabled;
        let wait = config.startup_timeout + Duration::from_secs(2);
        let handle = self.scope_handle(&scope).await?;
        let name = handle
            .add_server(Box::new(config))
            .await
            .map_err(RuntimeError::unavailable("scope supervisor"))?
            .map_err(|source| RuntimeError::Refused {
                server: requested,
                source,
            })?;
        if strict {
            self.wait_outcome(&scope, &name, wait, Wait::FirstAttempt)
                .await?;
        }
        Ok(name)
    }

    /// The chat `chat` is over: its "Allow This Chat" grants (TRUST-4) are
    /// forgotten. A gateway ends the chat of each stateless client's call
    /// once the call is over (a stateless client has no session to scope
    /// a grant to).
    pub fn end_chat(&self, chat: &str) {
        self.inner.trust.end_chat(chat);
    }

    /// Wait until the server is ready, up to `limit` (CONN-12's `first_ready`).
    /// Reconnect attempts in between are waited through; `failed` and
    /// `exhausted` end the wait with the server's error.
    pub async fn wait_ready(
        &self,
        scope: &Scope,
        server: &str,
        limit: Duration,
    ) -> Result<ServerStatus, RuntimeError> {
        self.wait_outcome(scope, server, limit, Wait::Ready).await
    }

    /// Wait until `server`'s state settles as `wait` asks: `Ready` waits through
    /// reconnects; `FirstAttempt` ends at the first failure, and also fails a
    /// server that came up with a rejected or conflicting catalog (strict
    /// initial mode, CONN-12 / SYNC-4).
    async fn wait_outcome(
        &self,
        scope: &Scope,
        server: &str,
        limit: Duration,
        wait: Wait,
    ) -> Result<ServerStatus, RuntimeError> {
        let handle = self.scope_handle(scope).await?;
        let mut rx = handle.snapshot.clone();
        let waited = tokio::time::timeout(limit, async {
            loop {
                let verdict = rx.borrow_and_update().servers.get(server).and_then(|e| {
                    let s = &e.status;
                    match s.state {
                        ServerState::Ready if e.live.is_some() => match wait {
                            Wait::FirstAttempt if s.error.is_some() => Some(Err(s.clone())),
                            _ => Some(Ok(s.clone())),
                        },
                        ServerState::Failed | ServerState::Exhausted => Some(Err(s.clone())),
                        _ if wait == Wait::FirstAttempt && s.consecutive_failures > 0 => {
                            Some(Err(s.clone()))
                        }
                        _ => None,
                    }
                });
                if let Some(v) = verdict {
                    return v;
                }
                if rx.changed().await.is_err() {
                    return Err(initial_unknown(scope, server));
                }
            }
        })
        .await;
        let err = |message: String| RuntimeError::Server {
            server: server.to_owned(),
            message,
        };
        match waited {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(s)) => Err(err(s.error.unwrap_or_else(|| s.state.to_string()))),
            Err(_) => Err(err(format!("not ready within {} ms", limit.as_millis()))),
        }
    }

    /// The global switch (TRUST-1). Off: every server is stopped quiescently
    /// (the report says what was reaped), no process runs and no tool is
    /// exposed until it is turned on again, which starts every enabled server
    /// except those turned off one by one with `set_server_enabled`. Returns
    /// the merged report of the stops.
    pub async fn set_enabled(&self, enabled: bool) -> ShutdownReport {
        match self.inner.root.set_enabled(enabled).await {
            Ok(report) => report,
            Err(e) => ShutdownReport {
                unconfirmed: vec![format!("the root supervisor {e}")],
                ..Default::default()
            },
        }
    }

    /// Turn one server off (quiescently) or on again (TRUST-1). It stays off
    /// across a global off and on; turning it on while the runtime is off
    /// is refused.
    pub async fn set_server_enabled(
        &self,
        scope: &Scope,
        server: &str,
        enabled: bool,
    ) -> Result<ShutdownReport, RuntimeError> {
        let handle = self.scope_handle(scope).await?;
        handle
            .set_server_enabled(server, enabled)
            .await
            .map_err(RuntimeError::unavailable("scope supervisor"))?
            .map_err(|source| RuntimeError::Refused {
                server: server.to_owned(),
                source,
            })
    }

    /// Stop a server quiescently and remove it from its scope: its tools
    /// and status go (a `CatalogChanged` with 0 tools), and its name is free
    /// for `add_server` again — a config reload removes and re-adds a
    /// server whose config changed. Returns the stop's report.
    pub async fn remove_server(
        &self,
        scope: &Scope,
        server: &str,
    ) -> Result<ShutdownReport, RuntimeError> {
        let handle = self.scope_handle(scope).await?;
        handle
            .remove_server(server)
            .await
            .map_err(RuntimeError::unavailable("scope supervisor"))?
            .map_err(|source| RuntimeError::Refused {
                server: server.to_owned(),
                source,
            })
    }

    /// A server's entry in its scope's snapshot.
    fn server_entry(
        &self,
        scope: &Scope,
        server: &str,
    ) -> Result<Arc<crate::messages::registry::ServerEntry>, RuntimeError> {
        self.snapshot(scope)
            .and_then(|s| s.servers.get(server).cloned())
            .ok_or_else(|| RuntimeError::Server {
                server: server.to_owned(),
                message: format!("no such server in scope {scope}"),
            })
    }

    /// Restart a server explicitly: resets its budget (RECO-4). Once this
    /// returns, the snapshot no longer shows the old connection as live, so
    /// a [`Runtime::wait_ready`] right after it waits for the new one.
    pub async fn restart_server(&self, scope: &Scope, server: &str) -> Result<(), RuntimeError> {
        let entry = self.server_entry(scope, server)?;
        let old = entry.live.as_ref().map(|l| l.conn_gen);
        entry
            .supervisor
            .restart()
            .await
            .map_err(RuntimeError::unavailable("server supervisor"))?
            .map_err(|message| RuntimeError::Server {
                server: server.to_owned(),
                message,
            })?;
        // The supervisor answers before the registry has applied the
        // restart's publish (a message of its own): wait for it, bounded,
        // or a `wait_ready` right after this would see the old connection's
        // `ready` and calls would go to a closing connection.
        if let Some(old) = old {
            let mut rx = self.scope_handle(scope).await?.snapshot;
            let gone = async {
                loop {
                    let still_live = rx
                        .borrow_and_update()
                        .servers
                        .get(server)
                        .is_some_and(|e| e.live.as_ref().is_some_and(|l| l.conn_gen == old));
                    if !still_live || rx.changed().await.is_err() {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), gone).await;
        }
        Ok(())
    }

    /// Test-only (feature `chaos`): make a server's supervisor fail, as a bug
    /// in it would; its scope restarts it within that server's intensity.
    #[cfg(feature = "chaos")]
    pub fn fail_server_supervisor_for_chaos(
        &self,
        scope: &Scope,
        server: &str,
    ) -> Result<(), RuntimeError> {
        let entry = self.server_entry(scope, server)?;
        entry
            .supervisor
            .fail_for_chaos()
            .map_err(RuntimeError::unavailable("server supervisor"))
    }

    /// Wake an idle-stopped server (RECO-6): answered once it is ready, or
    /// with why not, within its startup timeout.
    pub(super) async fn wake(
        &self,
        entry: &crate::messages::registry::ServerEntry,
    ) -> Result<(), String> {
        let limit = entry.config.startup_timeout + Duration::from_secs(1);
        entry.supervisor.wake(limit).await
    }

    /// Test-only: a server's supervisor, to send it what its own timers would.
    #[cfg(test)]
    pub(crate) fn supervisor_of(
        &self,
        scope: &Scope,
        server: &str,
    ) -> Option<ractor::ActorRef<crate::messages::server::ServerSupervisorMsg>> {
        self.server_entry(scope, server)
            .ok()
            .map(|e| e.supervisor.actor().clone())
    }

    /// The tools of a scope, ordered by server (SYNC-8).
    pub fn tools(&self, scope: &Scope) -> Vec<Arc<ToolDefinition>> {
        self.snapshot(scope).map(|s| s.tools()).unwrap_or_default()
    }

    /// Each server of a scope with its registered tools, both read from one
    /// published snapshot, so the status's `tools` count and `generation`
    /// describe exactly the tools beside it (a catalog is swapped whole,
    /// SYNC-6; a server with no tools is listed with none).
    pub fn catalogs(&self, scope: &Scope) -> Vec<(ServerStatus, Arc<Vec<Arc<ToolDefinition>>>)> {
        self.snapshot(scope)
            .map(|s| {
                s.servers
                    .values()
                    .map(|e| (e.status.clone(), e.tools.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The tools to offer a model route (TRUST-7): the scope's tools when the
    /// route supports tool calling, none otherwise, so the model answers
    /// normally instead of being sent tools it cannot call.
    pub fn tools_for_route(
        &self,
        scope: &Scope,
        route_supports_tools: bool,
    ) -> Vec<Arc<ToolDefinition>> {
        if route_supports_tools {
            self.tools(scope)
        } else {
            Vec::new()
        }
    }

    /// The attributed instructions of a scope's ready servers (RES-5).
    pub fn instructions(&self, scope: &Scope) -> Vec<String> {
        self.snapshot(scope)
            .map(|s| {
                s.servers
                    .values()
                    .filter_map(|e| e.instructions.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Status of every server in every scope (OBS-1).
    pub fn status(&self) -> Vec<ServerStatus> {
        let handles: Vec<ScopeHandle> = self
            .inner
            .scopes
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for h in handles {
            let snap = h.snapshot.borrow().clone();
            for e in snap.servers.values() {
                let mut s = e.status.clone();
                let output = e.output.lock().ok().and_then(|o| o.clone());
                if let Some(output) = output {
                    s.stderr_tail = output.stderr_tail();
                    s.non_json_lines = output.non_json_lines();
                }
                s.uptime_ms = e
                    .up_since
                    .filter(|_| e.live.is_some())
                    .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX));
                s.idle_stop_in_s = match (&e.live, e.config.idle_stop_after, e.activity.idle_for())
                {
                    (Some(_), Some(limit), Some(idle)) if s.transport != "streamable-http" => {
                        Some(limit.saturating_sub(idle).as_secs())
                    }
                    _ => None,
                };
                out.push(s);
            }
        }
        out.sort_by(|a, b| (&a.scope, &a.server).cmp(&(&b.scope, &b.server)));
        out
    }

    /// The JS mods' host, when the builder was given mods (MOD-1).
    #[cfg(feature = "mods")]
    pub fn mods(&self) -> Option<Arc<crate::mods::ModHost>> {
        self.inner.mods.clone()
    }

    /// `callTool`'s way into this runtime: a call through the whole
    /// pipeline, marked with the calling mod (MOD-5), holding the runtime
    /// weakly.
    #[cfg(feature = "mods")]
    fn mod_caller(&self) -> crate::mods::ToolCaller {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move |c: crate::mods::ModToolCall| {
            let weak = weak.clone();
            Box::pin(async move {
                let Some(inner) = weak.upgrade() else {
                    return serde_json::json!({"refused": "the runtime has shut down"});
                };
                let runtime = Runtime { inner };
                let options = crate::messages::call::CallOptions {
                    cancel: Some(c.cancel),
                    mod_origin: Some(c.origin),
                    ..Default::default()
                };
                let out = runtime
                    .call(&c.scope, &c.name, Some(c.arguments), options)
                    .await;
                crate::mods::outcome_json(&out)
            })
        })
    }

    /// The hook engine: run the extension points the runtime does not run
    /// itself (UserPromptSubmit, Stop, SessionStart, Subagent*), list hooks.
    pub fn hooks(&self) -> Arc<self::hooks::HookEngine> {
        self.inner.hooks.clone()
    }

    /// Subscribe to runtime events (OBS-2).
    pub fn subscribe(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.inner.events.subscribe()
    }

    /// Shut everything down quiescently (RECO-7). Idempotent: a second call
    /// returns an empty report.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let started = Instant::now();
        // Counted before anything stops: the root's fan-out drains the hooks
        // supervisor too, and may end a run before `dispose` first runs.
        let hook_runs_aborted = self.inner.hooks.running_count();
        // Tasks first (ERA-6): `tasks/cancel` needs the connections the
        // tree is about to close.
        let tasks_cancelled = self
            .inner
            .tasks
            .cancel_all(call::CANCEL_NOTICE_WAIT.min(deadline))
            .await;
        if self.inner.chaos.dead_root() {
            self.inner.root.kill();
        }
        // The tree and the running hooks (HOOK-8) stop side by side.
        let (stopped, _) = tokio::join!(
            self.inner.root.shutdown(
                deadline
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(100))
            ),
            self.inner.hooks.dispose(deadline)
        );
        let mut report = match stopped {
            Ok(r) => r,
            Err(AskError::Timeout(_)) => ShutdownReport {
                unconfirmed: vec![format!(
                    "the shutdown did not finish within {} ms",
                    deadline.as_millis()
                )],
                ..Default::default()
            },
            // Already shut down: nothing is left to stop (idempotent).
            Err(AskError::Gone) if self.inner.shut_down.load(Ordering::SeqCst) => {
                ShutdownReport::default()
            }
            // The root died on its own (a failure, a kill): nothing it held
            // can be confirmed, and the report must not say clean.
            Err(AskError::Gone) => ShutdownReport {
                unconfirmed: vec![
                    "the root supervisor was already gone (it failed or was killed): no server's stop and no process's reap could be confirmed".into(),
                ],
                ..Default::default()
            },
        };
        report.hook_runs_aborted = hook_runs_aborted;
        report.tasks_cancelled = tasks_cancelled;
        // RECO-7: what left its server's or hook's process group is found by
        // this runtime's tag, killed, and reported.
        let swept = crate::process::kill_tagged(&format!("{}/", self.inner.tag), true, None);
        let escaped = swept.escaped;
        for pid in crate::process::still_running(&escaped, crate::process::SWEPT_EXIT_WAIT).await {
            report.unconfirmed.push(format!(
                "process {pid} had left its process group and still runs after SIGKILL"
            ));
        }
        report.escaped.extend(escaped);
        let task = self.inner.root_task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let left = deadline
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(100));
            if tokio::time::timeout(left, task).await.is_err() {
                report
                    .unconfirmed
                    .push("the root supervisor did not stop".into());
                self.inner.root.kill();
            }
        }
        if let Ok(mut m) = self.inner.scopes.write() {
            m.clear();
        }
        // The seats released their activations' resources above.
        let held = self
            .inner
            .held_activations
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default();
        drop(held);
        report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.inner.shut_down.store(true, Ordering::SeqCst);
        report
    }
}

/// What [`Runtime::wait_outcome`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Ready,
    FirstAttempt,
}

fn initial_unknown(scope: &Scope, server: &str) -> ServerStatus {
    let mut s = ServerStatus::new(scope.clone(), server, "unknown", 0);
    s.error = Some("the scope was shut down".into());
    s
}
