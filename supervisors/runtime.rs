//! `Runtime`: the embedded API facade over the supervision tree.
//!
//! Lifecycle requests (add a server, restart, shut down) are messages to the
//! supervisors. Calls are not: a call resolves its tool in the scope's
//! published snapshot and runs the policy chain and the request in the
//! caller's task (design.md, "The call path"), so it never queues behind an
//! actor's mailbox.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::ServiceError;
use serde_json::{Map, Value};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::results::{ResultContext, judge_result};
use super::root::{RootArgs, RootMsg, RootSupervisor, ScopeHandle};
use super::scope::ScopeMsg;
use crate::actors::registry::ScopeSnapshot;
use crate::messages::call::{
    CallOptions, CallPolicy, OutcomeKind, PolicyCall, PolicyVerdict, ToolDefinition, ToolOutcome,
};
use crate::messages::capabilities::{ClientHandlers, ElicitationHandler};
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::images::{AttachmentStore, ResultLimits, apply_budget};
use crate::messages::projection::{parts_to_text, project_parts};
use crate::messages::resources::{ResourceOp, render_resource_result};
use crate::messages::server::ServerSupervisorMsg;
use crate::messages::status::{RuntimeEvent, ServerState, ServerStatus, ShutdownReport};

/// Default deadline of [`Runtime::shutdown`].
pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);
/// How long a lost call waits for the connection's real cause (CONN-8).
const CAUSE_WAIT: Duration = Duration::from_secs(3);

/// Errors of the runtime's lifecycle API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// A configuration problem.
    #[error(transparent)]
    Config(#[from] crate::messages::config::ConfigError),
    /// A server could not be added or did not come up (CONN-12).
    #[error("server \"{server}\": {message}")]
    Server {
        /// The server.
        server: String,
        /// What happened, with the stderr tail when there is one.
        message: String,
    },
    /// The runtime's actors could not be reached (it was shut down).
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
}

/// Builds a [`Runtime`].
#[derive(Default)]
pub struct RuntimeBuilder {
    servers: Vec<(Scope, ServerConfig)>,
    policies: Vec<Arc<dyn CallPolicy>>,
    handlers: ClientHandlers,
    attachments: Option<Arc<dyn AttachmentStore>>,
    limits: ResultLimits,
    event_log: Option<std::path::PathBuf>,
    approver: Option<Arc<dyn super::trust::Approver>>,
    hooks: super::hooks::HookSettings,
    approval_timeout: Option<Duration>,
    skip_close_barrier: bool,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("servers", &self.servers)
            .field("policies", &self.policies.len())
            .finish()
    }
}

impl RuntimeBuilder {
    /// Register a server in a scope at start.
    pub fn server(mut self, scope: Scope, config: ServerConfig) -> Self {
        self.servers.push((scope, config));
        self
    }

    /// Append a policy to the chain every call passes through (CALL-1).
    pub fn policy(mut self, policy: Arc<dyn CallPolicy>) -> Self {
        self.policies.push(policy);
        self
    }

    /// How long the approver may take before the answer is Don't Allow
    /// (TRUST-5; default 300 s).
    pub fn approval_timeout(mut self, limit: Duration) -> Self {
        self.approval_timeout = Some(limit);
        self
    }

    /// Command hooks of either or both dialects (HOOK-4): the files are read
    /// once, in `start`. PreToolUse / PostToolUse run for every call, right
    /// after the trust gate; the other events are `Runtime::hooks`.
    pub fn hooks(mut self, settings: super::hooks::HookSettings) -> Self {
        self.hooks = settings;
        self
    }

    /// Append a native typed guard (HOOK-5) to the policy chain: unlike a
    /// command hook, its error or panic denies the call.
    pub fn guard(mut self, guard: Arc<dyn super::hooks::ToolGuard>) -> Self {
        self.policies
            .push(Arc::new(super::hooks::GuardPolicy(guard)));
        self
    }

    /// Where admitted images and spilled results are saved (CALL-7, CALL-8).
    /// Without a store, images are projected as placeholders.
    pub fn attachments(mut self, store: Arc<dyn AttachmentStore>) -> Self {
        self.attachments = Some(store);
        self
    }

    /// The approver asked when a server's trust is `ask` and the chat has no
    /// grant (TRUST-5). Without one, `ask` is Don't Allow.
    pub fn approver(mut self, approver: Arc<dyn super::trust::Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Append every runtime event as one JSON line to `path` (OBS-2): server
    /// states, catalog generations, calls and every model-visible text.
    pub fn event_log(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.event_log = Some(path.into());
        self
    }

    /// Byte limits of projections and canonical values (LOOP-3, CALL-8).
    pub fn result_limits(mut self, limits: ResultLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Where `env_secrets` and `header_secrets` values come from (TRUST-2).
    /// Without one, a secret name is read as an environment variable name.
    pub fn secrets(mut self, store: Arc<dyn crate::actors::secrets::SecretStore>) -> Self {
        self.handlers.secrets = Some(store);
        self
    }

    /// Opt in to elicitation (CONN-11): the capability is declared in
    /// `initialize` and server requests go to `handler`. Without it they get -32601.
    pub fn elicitation(mut self, handler: Arc<dyn ElicitationHandler>) -> Self {
        self.handlers.elicitation = Some(handler);
        self
    }

    /// Test-only: let a replacement connection start before the previous one
    /// confirmed its close. Exists so the chaos runner can show that its
    /// `no_overlap` invariant detects a broken close barrier.
    #[cfg(feature = "chaos")]
    pub fn skip_close_barrier_for_chaos(mut self) -> Self {
        self.skip_close_barrier = true;
        self
    }

    /// Start the tree and every configured server. Servers with
    /// `fail_on_startup_error` are awaited; if one fails, everything is shut
    /// down again and its error returned (CONN-12).
    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let (events, _) = broadcast::channel(4096);
        let approval_timeout = self
            .approval_timeout
            .unwrap_or(super::trust::DEFAULT_APPROVAL_TIMEOUT);
        let trust_gate: Arc<dyn CallPolicy> = Arc::new(super::trust::TrustGate::new(
            self.approver.clone(),
            approval_timeout,
            events.clone(),
        ));
        let event_log = match &self.event_log {
            Some(path) => Some(
                crate::actors::event_log::EventLogHandle::start(path.clone(), &events)
                    .await
                    .map_err(RuntimeError::Unavailable)?,
            ),
            None => None,
        };
        let hooks = Arc::new(
            super::hooks::HookEngine::start(self.hooks, events.clone())
                .await
                .map_err(RuntimeError::Unavailable)?,
        );
        let hooks_policy: Option<Arc<dyn CallPolicy>> = (hooks
            .has(crate::messages::hook_config::HookEvent::PreToolUse)
            || hooks.has(crate::messages::hook_config::HookEvent::PostToolUse))
        .then(|| {
            Arc::new(super::hooks::HooksPolicy {
                engine: hooks.clone(),
                approver: self.approver.clone(),
                approval_timeout,
            }) as Arc<dyn CallPolicy>
        });
        let args = RootArgs {
            events: events.clone(),
            skip_close_barrier: self.skip_close_barrier,
            handlers: self.handlers,
        };
        let (root, task) = Actor::spawn(None, RootSupervisor, args)
            .await
            .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
        let runtime = Runtime {
            inner: Arc::new(Inner {
                root,
                root_task: Mutex::new(Some(task)),
                scopes: RwLock::new(HashMap::new()),
                events,
                call_ids: std::sync::atomic::AtomicU64::new(1),
                off: std::sync::atomic::AtomicBool::new(false),
                servers_off: Mutex::default(),
                trust_gate,
                hooks,
                hooks_policy,
                event_log,
                policies: self.policies,
                attachments: self.attachments,
                limits: self.limits,
            }),
        };
        for (scope, config) in self.servers {
            if let Err(e) = runtime.add_server(scope, config).await {
                runtime.shutdown(DEFAULT_SHUTDOWN_DEADLINE).await;
                return Err(e);
            }
        }
        Ok(runtime)
    }
}

struct Inner {
    /// Turned off at run time (TRUST-1).
    off: std::sync::atomic::AtomicBool,
    /// Servers turned off one by one (TRUST-1), kept off by a global on.
    servers_off: Mutex<std::collections::HashSet<(Scope, String)>>,
    trust_gate: Arc<dyn CallPolicy>,
    hooks: Arc<super::hooks::HookEngine>,
    /// PreToolUse / PostToolUse, when any such hook is registered.
    hooks_policy: Option<Arc<dyn CallPolicy>>,
    call_ids: std::sync::atomic::AtomicU64,
    event_log: Option<crate::actors::event_log::EventLogHandle>,
    attachments: Option<Arc<dyn AttachmentStore>>,
    limits: ResultLimits,
    root: ActorRef<RootMsg>,
    root_task: Mutex<Option<JoinHandle<()>>>,
    scopes: RwLock<HashMap<Scope, ScopeHandle>>,
    events: broadcast::Sender<RuntimeEvent>,
    policies: Vec<Arc<dyn CallPolicy>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without an explicit shutdown, stopping the root kills the tree; every
        // process handle SIGKILLs its group on drop, and the reapers reap.
        // Running hooks see the cancellation and kill their groups.
        self.hooks.cancel_all();
        self.root.stop(None);
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
        let scope2 = scope.clone();
        let h = match self
            .inner
            .root
            .call(
                |reply| RootMsg::Scope {
                    scope: scope2,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(CallResult::Success(Ok(h))) => h,
            Ok(CallResult::Success(Err(e))) => return Err(RuntimeError::Unavailable(e)),
            Ok(other) => return Err(RuntimeError::Unavailable(format!("{other:?}"))),
            Err(e) => return Err(RuntimeError::Unavailable(e.to_string())),
        };
        if let Ok(mut map) = self.inner.scopes.write() {
            map.insert(scope.clone(), h.clone());
        }
        Ok(h)
    }

    fn cached_scope(&self, scope: &Scope) -> Option<ScopeHandle> {
        self.inner
            .scopes
            .read()
            .ok()
            .and_then(|m| m.get(scope).cloned())
    }

    fn snapshot(&self, scope: &Scope) -> Option<Arc<ScopeSnapshot>> {
        self.cached_scope(scope)
            .map(|h| h.snapshot.borrow().clone())
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
        if self.inner.off.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(RuntimeError::Server {
                server: config.server_name.clone(),
                message: "the runtime is turned off (TRUST-1): turn it on before adding servers"
                    .into(),
            });
        }
        let requested = config
            .display_name
            .clone()
            .filter(|_| config.server_name.is_empty())
            .unwrap_or_else(|| config.server_name.clone());
        let strict = config.fail_on_startup_error && config.enabled;
        let wait = config.startup_timeout + Duration::from_secs(2);
        let handle = self.scope_handle(&scope).await?;
        let added = handle
            .actor
            .call(
                |reply| ScopeMsg::AddServer {
                    config: Box::new(config),
                    reply,
                },
                None,
            )
            .await;
        let name = match added {
            Ok(CallResult::Success(Ok(name))) => name,
            Ok(CallResult::Success(Err(message))) => {
                return Err(RuntimeError::Server {
                    server: requested,
                    message,
                });
            }
            Ok(other) => return Err(RuntimeError::Unavailable(format!("{other:?}"))),
            Err(e) => return Err(RuntimeError::Unavailable(e.to_string())),
        };
        if strict {
            self.wait_outcome(&scope, &name, wait, Wait::FirstAttempt)
                .await?;
        }
        Ok(name)
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
        self.inner
            .off
            .store(!enabled, std::sync::atomic::Ordering::SeqCst);
        let handles: Vec<(Scope, ScopeHandle)> = self
            .inner
            .scopes
            .read()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        // Servers switched off one by one stay off when the runtime comes on.
        let kept_off = self
            .inner
            .servers_off
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        let supervisors: Vec<ActorRef<ServerSupervisorMsg>> = handles
            .iter()
            .flat_map(|(scope, h)| {
                h.snapshot
                    .borrow()
                    .servers
                    .iter()
                    .filter(|(name, e)| {
                        e.config.enabled
                            && !(enabled && kept_off.contains(&(scope.clone(), (*name).clone())))
                    })
                    .map(|(_, e)| e.supervisor.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let waits = supervisors.iter().map(|s| switch(s, enabled));
        let mut report = ShutdownReport::default();
        for r in futures::future::join_all(waits).await {
            match r {
                Ok(r) => report.absorb(r),
                Err(e) => report.unconfirmed.push(e),
            }
        }
        report
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
        if enabled && self.inner.off.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(RuntimeError::Server {
                server: server.to_owned(),
                message: "the runtime is turned off (TRUST-1): turn it on first".into(),
            });
        }
        let entry = self.server_entry(scope, server)?;
        if let Ok(mut off) = self.inner.servers_off.lock() {
            let key = (scope.clone(), server.to_owned());
            if enabled {
                off.remove(&key);
            } else {
                off.insert(key);
            }
        }
        switch(&entry.supervisor, enabled)
            .await
            .map_err(RuntimeError::Unavailable)
    }

    /// A server's entry in its scope's snapshot.
    fn server_entry(
        &self,
        scope: &Scope,
        server: &str,
    ) -> Result<crate::actors::registry::ServerEntry, RuntimeError> {
        self.snapshot(scope)
            .and_then(|s| s.servers.get(server).cloned())
            .ok_or_else(|| RuntimeError::Server {
                server: server.to_owned(),
                message: format!("no such server in scope {scope}"),
            })
    }

    /// Restart a server explicitly: resets its budget (RECO-4).
    pub async fn restart_server(&self, scope: &Scope, server: &str) -> Result<(), RuntimeError> {
        let entry = self.server_entry(scope, server)?;
        entry
            .supervisor
            .call(
                |reply| ServerSupervisorMsg::Restart { reply },
                Some(Duration::from_secs(5)),
            )
            .await
            .map_err(|e| RuntimeError::Unavailable(e.to_string()))
            .and_then(|r| match r {
                CallResult::Success(()) => Ok(()),
                other => Err(RuntimeError::Unavailable(format!(
                    "restart not confirmed: {other:?}"
                ))),
            })
    }

    /// The tools of a scope, ordered by server (SYNC-8).
    pub fn tools(&self, scope: &Scope) -> Vec<Arc<ToolDefinition>> {
        self.snapshot(scope).map(|s| s.tools()).unwrap_or_default()
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

    /// The hook engine: run the extension points the runtime does not run
    /// itself (UserPromptSubmit, Stop, SessionStart, Subagent*), list hooks.
    pub fn hooks(&self) -> Arc<super::hooks::HookEngine> {
        self.inner.hooks.clone()
    }

    /// Subscribe to runtime events (OBS-2).
    pub fn subscribe(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.inner.events.subscribe()
    }

    /// Call a tool by public name (CALL-1..6). Exactly one outcome per call.
    pub async fn call(
        &self,
        scope: &Scope,
        name: &str,
        arguments: Option<Value>,
        options: CallOptions,
    ) -> ToolOutcome {
        let started = Instant::now();
        let call_id = self
            .inner
            .call_ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Events cost a clone of the projection: build them only for listeners.
        let listened = self.inner.events.receiver_count() > 0;
        if listened {
            let _ = self.inner.events.send(RuntimeEvent::CallStarted {
                scope: scope.clone(),
                tool: name.to_owned(),
                call_id,
            });
        }
        let outcome = self
            .call_inner(scope, name, arguments, options, call_id)
            .await;
        if listened {
            let _ = self.inner.events.send(RuntimeEvent::CallFinished {
                scope: scope.clone(),
                tool: name.to_owned(),
                call_id,
                outcome: outcome.kind.name(),
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                projection: outcome.projection.clone(),
            });
        }
        outcome
    }

    async fn call_inner(
        &self,
        scope: &Scope,
        name: &str,
        arguments: Option<Value>,
        options: CallOptions,
        call_id: u64,
    ) -> ToolOutcome {
        let unknown = || {
            ToolOutcome::failure(
                OutcomeKind::UnknownTool,
                format!("no tool named \"{name}\" in scope {scope}"),
            )
        };
        let Some(snap) = self.snapshot(scope) else {
            return unknown();
        };
        let resource_op =
            ResourceOp::from_tool_name(name).filter(|_| snap.resource_tool(name).is_some());
        let found = match resource_op {
            Some(_) => snap.resource_tool(name).cloned(),
            None => snap.resolve(name).map(|(_, d)| d.clone()),
        };
        let Some(def) = found else {
            return unknown();
        };
        let arguments = match arguments {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(other) => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidArguments,
                    format!("arguments must be a JSON object, got {}", json_kind(&other)),
                )
                .for_tool(&def);
            }
        };
        if let Some(expected) = options.expected_generation
            && expected != def.generation
        {
            return ToolOutcome::failure(
                OutcomeKind::StaleGeneration,
                format!(
                    "expected catalog generation {expected}, current is {}",
                    def.generation
                ),
            )
            .for_tool(&def);
        }
        if def.task_support_required {
            return ToolOutcome::failure(
                OutcomeKind::TaskSupportRequired,
                format!(
                    "tool \"{}\" requires task-based execution, which mcpvisor does not implement",
                    def.raw_name
                ),
            )
            .for_tool(&def);
        }
        let trust = snap
            .servers
            .get(&def.server)
            .map(|e| {
                e.config
                    .tool_trust
                    .get(&def.raw_name)
                    .copied()
                    .unwrap_or(e.config.trust)
            })
            .unwrap_or_default();
        let mut call = PolicyCall {
            scope: scope.clone(),
            tool: def.clone(),
            arguments,
            chat: options.chat.clone(),
            trust,
            call_id,
            cancel: options.cancel.clone().unwrap_or_default(),
            annotations: Default::default(),
        };
        let annotations = call.annotations.clone();
        let mut outcome = self
            .execute(scope, name, &mut call, snap, def, resource_op, &options)
            .await;
        if let Ok(mut a) = annotations.lock() {
            outcome.annotate(std::mem::take(&mut *a));
        }
        outcome
    }

    /// The policy chain and the call itself (CALL-1): trust, the hook bridges,
    /// the installed policies, the call, then the after half.
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        scope: &Scope,
        name: &str,
        call: &mut PolicyCall,
        mut snap: Arc<ScopeSnapshot>,
        mut def: Arc<ToolDefinition>,
        resource_op: Option<ResourceOp>,
        options: &CallOptions,
    ) -> ToolOutcome {
        let unknown = || {
            ToolOutcome::failure(
                OutcomeKind::UnknownTool,
                format!("no tool named \"{name}\" in scope {scope}"),
            )
        };
        let chain = std::iter::once(&self.inner.trust_gate)
            .chain(self.inner.hooks_policy.iter())
            .chain(self.inner.policies.iter());
        for policy in chain {
            match policy.before(call).await {
                PolicyVerdict::Proceed => {}
                PolicyVerdict::ProceedWith(args) => call.arguments = args,
                // A refusal caused by the caller cancelling (while the
                // approver was asked) is the caller's cancellation.
                PolicyVerdict::Deny { .. } if call.cancel.is_cancelled() => {
                    return ToolOutcome::failure(
                        OutcomeKind::Cancelled,
                        "the call was cancelled before it was sent",
                    )
                    .for_tool(&def);
                }
                PolicyVerdict::Deny { kind, reason } => {
                    return ToolOutcome::failure(kind, reason).for_tool(&def);
                }
            }
        }
        // Cancelled while a policy waited (an approver, a hook): the server
        // never sees the call.
        if call.cancel.is_cancelled() {
            return ToolOutcome::failure(
                OutcomeKind::Cancelled,
                "the call was cancelled before it was sent",
            )
            .for_tool(&def);
        }
        if let Some(op) = resource_op {
            let outcome = self
                .resource_call(&snap, op, &call.arguments, entry_timeout(&snap))
                .await
                .for_tool(&def);
            return self.after_policies(call, outcome).await;
        }
        // The chain may have waited (an approver, a hook): resolve against
        // the current snapshot, not the one the call started with.
        if let Some(s) = self.snapshot(scope) {
            snap = s;
            match snap.resolve(name) {
                Some((_, d)) => def = d.clone(),
                None => return unknown(),
            }
        }
        // Wake an idle-stopped server (RECO-6).
        let idle = snap
            .servers
            .get(&def.server)
            .filter(|e| e.live.is_none() && e.status.state == ServerState::IdleStopped)
            .map(|e| (e.supervisor.clone(), e.config.startup_timeout));
        if let Some((supervisor, startup_timeout)) = idle {
            let limit = startup_timeout + Duration::from_secs(1);
            let woke = supervisor
                .call(|reply| ServerSupervisorMsg::Wake { reply }, Some(limit))
                .await;
            let failed = match woke {
                Ok(CallResult::Success(Ok(()))) => None,
                Ok(CallResult::Success(Err(e))) => Some(e),
                Ok(CallResult::Timeout) => Some("the server did not come back in time".into()),
                Ok(CallResult::SenderError) | Err(_) => {
                    Some("the server's supervisor is gone".into())
                }
            };
            if let Some(why) = failed {
                return ToolOutcome::failure(
                    OutcomeKind::ServerNotReady,
                    format!("server \"{}\": {why}", def.server),
                )
                .for_tool(&def);
            }
            if let Some(s) = self.snapshot(scope) {
                snap = s;
                if let Some((_, d)) = snap.resolve(name) {
                    def = d.clone();
                }
            }
        }
        // Borrowed from the snapshot: no per-call copy of the entry.
        let Some(entry) = snap.servers.get(&def.server) else {
            return unknown();
        };
        let Some(live) = entry.live.clone() else {
            let why = entry
                .status
                .error
                .clone()
                .unwrap_or_else(|| "not connected".into());
            return ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!("server \"{}\" is {}: {why}", def.server, entry.status.state),
            )
            .for_tool(&def);
        };
        let _activity = entry.activity.begin();
        let outcome = self
            .send_call(
                scope,
                &def,
                &live,
                call.arguments.clone(),
                entry.config.tool_call_timeout,
                options,
            )
            .await
            .for_tool(&def);
        if outcome.kind == OutcomeKind::ServerNotReady {
            return outcome; // never sent: nothing for the after half to see
        }
        self.after_policies(call, outcome).await
    }

    /// The after half of the policy chain, and the post-policy change check (CALL-7).
    async fn after_policies(&self, call: &PolicyCall, mut outcome: ToolOutcome) -> ToolOutcome {
        // PostToolUse hooks first. They only add to or replace what the
        // model sees, never the canonical value, so they need no change check.
        if let Some(hooks) = &self.inner.hooks_policy {
            hooks.after(call, &mut outcome).await;
        }
        if self.inner.policies.is_empty() {
            return outcome; // nothing else can change the value: no copy
        }
        let prepared = outcome.canonical.clone();
        for policy in &self.inner.policies {
            policy.after(call, &mut outcome).await;
        }
        if outcome.canonical != prepared {
            // CALL-7: a policy changed the value after the projection was
            // prepared; the prepared projection no longer matches. Project the
            // new value again (images as placeholders: the admitted ones belonged
            // to the old value) instead of silently keeping either.
            reproject(&mut outcome);
        }
        outcome
    }

    async fn send_call(
        &self,
        scope: &Scope,
        def: &ToolDefinition,
        live: &crate::actors::registry::LiveConn,
        arguments: Map<String, Value>,
        timeout: Duration,
        options: &CallOptions,
    ) -> ToolOutcome {
        let params = CallToolRequestParams::new(def.raw_name.clone()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = match live
            .peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await
        {
            Ok(h) => h,
            Err(e) => {
                return self
                    .lost(scope, def, live.conn_gen, e.to_string(), false)
                    .await;
            }
        };
        let cancel = options.cancel.clone().unwrap_or_default();
        #[allow(clippy::large_enum_variant)] // a local, moved once
        enum Ended {
            Response(
                Result<Result<ServerResult, ServiceError>, tokio::sync::oneshot::error::RecvError>,
            ),
            Timeout,
            Cancelled,
        }
        let ended = tokio::select! {
            r = &mut handle.rx => Ended::Response(r),
            _ = tokio::time::sleep(timeout) => Ended::Timeout,
            _ = cancel.cancelled() => Ended::Cancelled,
        };
        let response = match ended {
            Ended::Response(Ok(r)) => r,
            Ended::Response(Err(_)) => Err(ServiceError::TransportClosed),
            Ended::Timeout => {
                let _ = handle.cancel(Some("tool call timed out".into())).await;
                return ToolOutcome::failure(
                    OutcomeKind::Timeout,
                    format!(
                        "no result within tool_call_timeout_ms = {}; the server was told to cancel; side effects unknown",
                        timeout.as_millis()
                    ),
                );
            }
            Ended::Cancelled => {
                let _ = handle.cancel(Some("cancelled by the caller".into())).await;
                return ToolOutcome::failure(
                    OutcomeKind::Cancelled,
                    "cancelled by the caller; the server was told to cancel; side effects unknown",
                );
            }
        };
        let canonical = match response {
            Ok(ServerResult::CallToolResult(r)) => match serde_json::to_value(&r) {
                Ok(v) => v,
                Err(e) => return ToolOutcome::failure(OutcomeKind::InvalidResult, e.to_string()),
            },
            Ok(ServerResult::CustomResult(v)) => v.0,
            Ok(_) => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidResult,
                    "the server answered tools/call with another result type",
                );
            }
            Err(ServiceError::McpError(e)) => {
                return ToolOutcome::failure(
                    OutcomeKind::ServerError,
                    format!(
                        "the server answered with JSON-RPC error {}: {}",
                        e.code.0, e.message
                    ),
                );
            }
            Err(ServiceError::TransportClosed) => {
                return self
                    .lost(
                        scope,
                        def,
                        live.conn_gen,
                        "the transport closed".into(),
                        true,
                    )
                    .await;
            }
            Err(e) if live.peer.is_transport_closed() => {
                return self
                    .lost(scope, def, live.conn_gen, e.to_string(), true)
                    .await;
            }
            // The transport is still up (e.g. HTTP 500 on this one request): no
            // connection-level cause to wait for.
            Err(e) => {
                return ToolOutcome::failure(
                    OutcomeKind::TransportLostDuringCall,
                    format!("the request failed in transport, side effects unknown: {e}"),
                );
            }
        };
        let ctx = ResultContext {
            def,
            images: options.images,
            store: self.inner.attachments.as_ref(),
            limits: self.inner.limits,
        };
        judge_result(&ctx, canonical).await
    }

    /// The connection was lost (or a send failed): wait briefly for the
    /// connection's real cause so the outcome names it (CONN-8).
    async fn lost(
        &self,
        scope: &Scope,
        def: &ToolDefinition,
        conn_gen: u64,
        fallback: String,
        in_flight: bool,
    ) -> ToolOutcome {
        let mut cause = fallback;
        if let Some(h) = self.cached_scope(scope) {
            let mut rx = h.snapshot.clone();
            let server = def.server.clone();
            let waited = tokio::time::timeout(CAUSE_WAIT, async move {
                loop {
                    let found = rx.borrow_and_update().servers.get(&server).and_then(|e| {
                        let moved_on = e.live.as_ref().map(|l| l.conn_gen) != Some(conn_gen);
                        (moved_on && e.status.error.is_some())
                            .then(|| e.status.error.clone())
                            .flatten()
                    });
                    if found.is_some() || rx.changed().await.is_err() {
                        return found;
                    }
                }
            })
            .await;
            if let Ok(Some(real)) = waited {
                cause = real;
            }
        }
        if in_flight {
            ToolOutcome::failure(
                OutcomeKind::TransportLostDuringCall,
                format!("connection lost during the call, side effects unknown: {cause}"),
            )
        } else {
            ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!("server \"{}\": {cause}", def.server),
            )
        }
    }

    /// A shared resource tool (RES-2..4, RES-6): resolve the server in the
    /// caller's scope (an invisible server gets the same error as an unknown
    /// one), pass cursors and URIs through untouched, and show the model the
    /// server name plus compact JSON with blobs replaced by their length.
    async fn resource_call(
        &self,
        snap: &ScopeSnapshot,
        op: ResourceOp,
        args: &Map<String, Value>,
        timeout: Duration,
    ) -> ToolOutcome {
        let server = args.get("server").and_then(Value::as_str);
        let cursor = args
            .get("cursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let targets: Vec<&str> = match server {
            Some(s) if snap.resource_providers.iter().any(|p| p == s) => vec![s],
            Some(s) => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidArguments,
                    format!(
                        "unknown resource server \"{s}\"; known: {}",
                        snap.resource_providers.join(", ")
                    ),
                );
            }
            None if op == ResourceOp::Read => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidArguments,
                    "\"server\" is required",
                );
            }
            None => snap.resource_providers.iter().map(String::as_str).collect(),
        };
        let uri = args.get("uri").and_then(Value::as_str);
        if op == ResourceOp::Read && uri.is_none() {
            return ToolOutcome::failure(OutcomeKind::InvalidArguments, "\"uri\" is required");
        }
        let mut canonical = Map::new();
        let mut shown = Vec::new();
        for target in targets {
            let Some(live) = snap.servers.get(target).and_then(|e| e.live.clone()) else {
                continue;
            };
            let request = match op {
                ResourceOp::List => ClientRequest::ListResourcesRequest(
                    rmcp::model::ListResourcesRequest::with_param(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
                    ),
                ),
                ResourceOp::Templates => ClientRequest::ListResourceTemplatesRequest(
                    rmcp::model::ListResourceTemplatesRequest::with_param(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
                    ),
                ),
                ResourceOp::Read => {
                    ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(
                        rmcp::model::ReadResourceRequestParams::new(uri.unwrap_or_default()),
                    ))
                }
            };
            let value = match request_value(&live.peer, request, timeout).await {
                Ok(v) => v,
                Err(e) if server.is_some() => {
                    return ToolOutcome::failure(
                        OutcomeKind::ServerError,
                        format!("server \"{target}\": {e}"),
                    );
                }
                // Listing across servers: one failing server does not hide the others.
                Err(e) => {
                    shown.push(format!("[MCP server \"{target}\"] failed: {e}"));
                    continue;
                }
            };
            shown.push(render_resource_result(target, &value));
            canonical.insert(target.to_owned(), value);
        }
        let projection = if shown.is_empty() {
            "No resource server answered.".to_owned()
        } else {
            shown.join("\n")
        };
        let (projection, cut_bytes) = apply_budget(
            &projection,
            self.inner.limits.max_result_bytes,
            "a tool result",
        );
        ToolOutcome {
            kind: OutcomeKind::Ok,
            error: None,
            parts: vec![crate::messages::projection::ProjectionPart::Text {
                text: projection.clone(),
            }],
            projection,
            images: Vec::new(),
            cut_bytes,
            canonical: Some(Value::Object(canonical)),
            server: None,
            raw_name: None,
            generation: None,
            notes: Vec::new(),
            stop: None,
        }
    }

    /// Shut everything down quiescently (RECO-7). Idempotent: a second call
    /// returns an empty report.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let started = Instant::now();
        // The tree and the running hooks (HOOK-8) stop side by side.
        let (stopped, hook_runs_aborted) = tokio::join!(
            self.inner
                .root
                .call(|reply| RootMsg::Shutdown { reply }, Some(deadline)),
            self.inner.hooks.dispose(deadline)
        );
        let mut report = match stopped {
            Ok(CallResult::Success(r)) => r,
            Ok(CallResult::Timeout) => ShutdownReport {
                unconfirmed: vec![format!(
                    "the shutdown did not finish within {} ms",
                    deadline.as_millis()
                )],
                ..Default::default()
            },
            _ => ShutdownReport::default(),
        };
        report.hook_runs_aborted = hook_runs_aborted;
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
        report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(log) = &self.inner.event_log {
            log.stop().await; // after the tree: the shutdown's own events are in the file
        }
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

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Project a changed canonical value again, text-only for images, and say so.
/// `SetEnabled` to one server supervisor, within its shutdown deadline.
async fn switch(
    supervisor: &ActorRef<ServerSupervisorMsg>,
    enabled: bool,
) -> Result<ShutdownReport, String> {
    let limit = Some(super::server::SHUTDOWN_DEADLINE + Duration::from_secs(2));
    match supervisor
        .call(
            |reply| ServerSupervisorMsg::SetEnabled { enabled, reply },
            limit,
        )
        .await
    {
        Ok(CallResult::Success(r)) => Ok(r),
        Ok(_) | Err(_) => Err("a server supervisor did not answer".into()),
    }
}

fn reproject(outcome: &mut ToolOutcome) {
    let Some(value) = &outcome.canonical else {
        return;
    };
    let mut parts = project_parts(value, &std::collections::BTreeMap::new());
    parts.push(crate::messages::projection::ProjectionPart::Text {
        text: "[note: a policy changed this result after it was projected; it was projected again]"
            .into(),
    });
    outcome.projection = parts_to_text(&parts);
    outcome.parts = parts;
    outcome.images.clear();
}

/// The longest request timeout of a snapshot's servers (resource requests).
fn entry_timeout(snap: &ScopeSnapshot) -> Duration {
    snap.servers
        .values()
        .map(|e| e.config.request_timeout)
        .max()
        .unwrap_or(Duration::from_secs(15))
}

/// Send one request with a timeout and return its result as raw JSON.
async fn request_value(
    peer: &rmcp::service::Peer<rmcp::service::RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<Value, String> {
    let handle = peer
        .send_request_with_option(
            request,
            rmcp::service::PeerRequestOptions::with_timeout(timeout),
        )
        .await
        .map_err(|e| e.to_string())?;
    let result = handle.await_response().await.map_err(|e| e.to_string())?;
    serde_json::to_value(&result).map_err(|e| e.to_string())
}
