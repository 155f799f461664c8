//! The call pipeline (CALL-1..8, design.md "The call path"): everything a
//! tool call does, in the caller's task, with no actor hop for a ready server.
//!
//! ```text
//! Runtime::call            call id, CallStarted / CallFinished events (only when listened)
//! └ call_inner             resolve the public name in the scope's snapshot,
//!   │                      normalise the arguments, expected generation, taskSupport
//!   └ execute              the policy chain: trust gate → hook bridges → guards
//!     │                    → installed policies (policies/); re-resolve after it;
//!     │                    wake an idle-stopped server (the one actor hop, RECO-6)
//!     ├ send_call          tools/call with the server's timeout and the caller's
//!     │                    cancellation; a lost transport waits for its cause (CONN-8)
//!     │ └ judge_result     the result half (results.rs): validate, classify,
//!     │                    admit images, budget, spill (CALL-3/6/7/8)
//!     └ after_policies     PostToolUse hooks, then the installed policies' after half
//! ```
//!
//! The shared resource tools take the same chain and leave it for
//! `resources.rs` instead of `send_call`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ServerResult;
use rmcp::service::ServiceError;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::results::{ResultContext, judge_result};
use crate::messages::call::{
    CallOptions, OutcomeKind, PolicyCall, PolicyVerdict, ToolDefinition, ToolOutcome,
};
use crate::messages::config::Scope;
use crate::messages::projection::{parts_to_text, project_parts};
use crate::messages::registry::{ActivityGuard, Delivery, LiveConn, ScopeSnapshot, ServerEntry};
use crate::messages::resources::ResourceOp;
use crate::messages::schema::kind_with_article;
use crate::messages::status::{RuntimeEvent, ServerState};
use crate::messages::trust::{redact, redact_value};

use super::resources::entry_timeout;
use super::{CAUSE_WAIT, Runtime};

/// How long a call that timed out or was cancelled waits to hand the server
/// its cancel notice: every call ends within its timeout plus this margin,
/// whatever the server does (CALL-4).
pub const CANCEL_NOTICE_WAIT: Duration = Duration::from_secs(1);

/// A call resolved against the scope's snapshot, as the policy chain and
/// the request take it.
struct ResolvedCall<'a> {
    scope: &'a Scope,
    /// The public name the caller used.
    name: &'a str,
    /// The snapshot it was resolved in (re-read after the chain).
    snap: Arc<ScopeSnapshot>,
    def: Arc<ToolDefinition>,
    /// Set for the shared resource tools.
    resource_op: Option<ResourceOp>,
    options: &'a CallOptions,
}

impl Runtime {
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
        let mut outcome = self
            .call_inner(scope, name, arguments, options, call_id)
            .await;
        let chaos = self.inner.chaos;
        if chaos.wrong_kinds() && outcome.kind == OutcomeKind::ServerError {
            outcome.kind = OutcomeKind::Ok;
        }
        if chaos.leak() {
            let _: &'static mut [u8] = Box::leak(vec![1u8; 256 * 1024].into_boxed_slice());
        }
        if listened && !(chaos.silent_outcomes() && call_id.is_multiple_of(3)) {
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
        let Some(snap) = self.snapshot(scope) else {
            return not_found(None, name);
        };
        let unknown = || not_found(Some(&snap), name);
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
                    format!(
                        "arguments must be a JSON object, got {}",
                        kind_with_article(&other)
                    ),
                )
                .for_tool(&def);
            }
        };
        if let Some(stale) = stale_generation(&def, &options) {
            return stale;
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
            mod_origin: options.mod_origin,
            annotations: Default::default(),
        };
        let annotations = call.annotations.clone();
        let mut outcome = self
            .execute(
                &mut call,
                ResolvedCall {
                    scope,
                    name,
                    snap,
                    def,
                    resource_op,
                    options: &options,
                },
            )
            .await;
        if let Ok(mut a) = annotations.lock() {
            outcome.annotate(std::mem::take(&mut *a));
        }
        outcome
    }

    /// The policy chain and the call itself (CALL-1): trust, the hook bridges,
    /// the installed policies, the call, then the after half.
    async fn execute(&self, call: &mut PolicyCall, resolved: ResolvedCall<'_>) -> ToolOutcome {
        let ResolvedCall {
            scope,
            name,
            mut snap,
            mut def,
            resource_op,
            options,
        } = resolved;
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
                    .not_sent()
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
            .not_sent()
            .for_tool(&def);
        }
        if let Some(op) = resource_op {
            let outcome = self
                .resource_call(scope, &snap, op, &call.arguments, entry_timeout(&snap))
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
                None => return not_found(Some(&snap), name),
            }
        }
        // SYNC-6 / CALL-1: the generation the caller expects is checked
        // against the catalog the call is sent with, not the one it started in.
        if let Some(stale) = stale_generation(&def, options) {
            return stale;
        }
        // Wake an idle-stopped server (RECO-6), and one whose idle stop was
        // claimed between the snapshot and the start of this call (then
        // nothing was sent: wait for the wake instead, once).
        let mut woken = false;
        let (live, _activity) = loop {
            let idle = snap
                .servers
                .get(&def.server)
                .filter(|e| e.live.is_none() && needs_wake(&e.status));
            let stopping = match idle {
                Some(entry) => Some(entry),
                None => match begin_on_live(&snap, &def.server) {
                    Started::Live(live, activity) => break (live, activity),
                    Started::NotLive => {
                        let entry = snap.servers.get(&def.server);
                        let why = entry
                            .and_then(|e| e.status.error.clone())
                            .unwrap_or_else(|| "not connected".into());
                        let state = entry.map(|e| e.status.state.to_string());
                        return ToolOutcome::failure(
                            OutcomeKind::ServerNotReady,
                            format!(
                                "server \"{}\" is {}: {why}",
                                def.server,
                                state.unwrap_or_else(|| "gone".into())
                            ),
                        )
                        .for_tool(&def);
                    }
                    Started::Closing(entry) => Some(entry),
                },
            };
            let Some(entry) = stopping.filter(|_| !woken) else {
                return ToolOutcome::failure(
                    OutcomeKind::ServerNotReady,
                    format!("server \"{}\" stopped again while waking", def.server),
                )
                .for_tool(&def);
            };
            woken = true;
            if let Err(why) = self.wake(entry).await {
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
            if let Some(stale) = stale_generation(&def, options) {
                return stale;
            }
        };
        // Borrowed from the snapshot: no per-call copy of the entry.
        let Some(entry) = snap.servers.get(&def.server) else {
            return not_found(Some(&snap), name);
        };
        let outcome = self
            .send_call(
                scope,
                &def,
                &live,
                Outgoing {
                    // The after half sees the arguments only when one exists.
                    arguments: if self.has_after_half() {
                        call.arguments.clone()
                    } else {
                        std::mem::take(&mut call.arguments)
                    },
                    call_id: call.call_id,
                },
                entry,
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
    /// Whether anything runs after the call (PostToolUse hooks, installed
    /// policies) and so may read the call's arguments.
    fn has_after_half(&self) -> bool {
        self.inner.hooks_policy.is_some() || !self.inner.policies.is_empty()
    }

    async fn after_policies(&self, call: &PolicyCall, mut outcome: ToolOutcome) -> ToolOutcome {
        // PostToolUse hooks first. They only add to or replace what the
        // model sees, never the canonical value, so they need no change check.
        if let Some(hooks) = &self.inner.hooks_policy {
            hooks.after(call, &mut outcome).await;
        }
        if self.inner.policies.is_empty() {
            return outcome; // nothing else can change the value: no copy
        }
        // A fingerprint, not a copy, tells whether a policy changed the value.
        let prepared = outcome.canonical.as_ref().map(fingerprint);
        for policy in &self.inner.policies {
            policy.after(call, &mut outcome).await;
        }
        if outcome.canonical.as_ref().map(fingerprint) != prepared {
            // CALL-7: a policy changed the value after the projection was
            // prepared; the prepared projection no longer matches. Project the
            // new value again (images as placeholders: the admitted ones belonged
            // to the old value) instead of silently keeping either.
            reproject(&mut outcome);
        }
        outcome
    }

    /// Send `out` on `live` and turn what comes back into the outcome.
    async fn send_call(
        &self,
        scope: &Scope,
        def: &ToolDefinition,
        live: &crate::messages::registry::LiveConn,
        out: Outgoing,
        entry: &ServerEntry,
        options: &CallOptions,
    ) -> ToolOutcome {
        let timeout = entry.config.tool_call_timeout;
        if self.inner.chaos.no_recovery() && live.conn_gen > 1 {
            return ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!("server \"{}\" never came back (chaos)", def.server),
            );
        }
        // Handing the request to rmcp's service loop is inside the call's
        // deadline too: a loop stuck on a blocked transport must not hold
        // the caller (CALL-4).
        // One deadline for both halves: a timer is registered only if the
        // hand-over does not finish at once.
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        // The call id is the progress token: the server's
        // `notifications/progress` become this very call's events.
        let sending = live
            .client
            .send_call(&def.raw_name, out.arguments, out.call_id);
        let handed = tokio::select! {
            biased;
            handed = sending => Ok(handed),
            () = &mut deadline => Err(()),
        };
        let mut handle = match handed {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                return self
                    .lost(
                        scope,
                        def,
                        live.conn_gen,
                        crate::transport::client::service_words(&e),
                        Lost::NotSent,
                    )
                    .await;
            }
            Err(_) => {
                return ToolOutcome::failure(
                    OutcomeKind::Timeout,
                    format!(
                        "the request could not be handed to the transport within tool_call_timeout_ms = {}; side effects unknown",
                        timeout.as_millis()
                    ),
                );
            }
        };
        #[allow(clippy::large_enum_variant)] // a local, moved once
        enum Ended {
            Response(
                Result<Result<ServerResult, ServiceError>, tokio::sync::oneshot::error::RecvError>,
            ),
            Timeout,
            Cancelled,
        }
        // No token of its own when the caller gave none: nothing can cancel it.
        let cancelled = async {
            match &options.cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        // A reply that is there wins over a deadline that passed with it.
        let ended = tokio::select! {
            biased;
            r = &mut handle.rx => Ended::Response(r),
            () = &mut deadline => Ended::Timeout,
            _ = cancelled => Ended::Cancelled,
        };
        // CALL-5: where the transport can tell, a failed call the server
        // never received says so (not sent, nothing ran), and only one it
        // may have received says "side effects unknown".
        let delivered = live.deliveries.as_ref().map(|d| {
            let id = crate::transport::stdio::request_id_key(&handle.id);
            let delivery = d.of(&id);
            d.forget(&id);
            delivery
        });
        let lost_as = match delivered {
            Some(Delivery::NotSent) => Lost::NotSent,
            Some(Delivery::Refused(why)) => Lost::Refused(why),
            Some(Delivery::MayHaveArrived) | None => Lost::InFlight,
        };
        let response = match ended {
            Ended::Response(Ok(r)) => r,
            Ended::Response(Err(_)) => Err(ServiceError::TransportClosed),
            Ended::Timeout => {
                if self.inner.chaos.late_timeouts() {
                    tokio::time::sleep(Duration::from_secs(4)).await;
                }
                // The notice is best effort, within a bounded margin (CALL-4).
                let notice = handle.cancel(Some("tool call timed out".into()));
                let _ = tokio::time::timeout(CANCEL_NOTICE_WAIT, notice).await;
                return ToolOutcome::failure(
                    OutcomeKind::Timeout,
                    format!(
                        "no result within tool_call_timeout_ms = {}; the server was told to cancel; side effects unknown",
                        timeout.as_millis()
                    ),
                );
            }
            Ended::Cancelled => {
                // The notice is best effort, within a bounded margin (CALL-4).
                let notice = handle.cancel(Some("cancelled by the caller".into()));
                let _ = tokio::time::timeout(CANCEL_NOTICE_WAIT, notice).await;
                return ToolOutcome::failure(
                    OutcomeKind::Cancelled,
                    "cancelled by the caller; the server was told to cancel; side effects unknown",
                );
            }
        };
        let mut canonical = match response {
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
            // The stdio reader's answer for a reply it could not read
            // (not JSON-RPC, nested past serde_json's limit): the server
            // did answer.
            Err(ServiceError::McpError(e))
                if e.code.0 == crate::transport::stdio::UNREADABLE_REPLY_CODE
                    && e.message
                        .starts_with(crate::transport::stdio::UNREADABLE_REPLY_PREFIX) =>
            {
                return ToolOutcome::failure(OutcomeKind::InvalidResult, e.message.to_string());
            }
            Err(ServiceError::McpError(e)) => {
                return ToolOutcome::failure(
                    OutcomeKind::ServerError,
                    redact(
                        &format!(
                            "the server answered with JSON-RPC error {}: {}",
                            e.code.0, e.message
                        ),
                        &live.redactions,
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
                        lost_as,
                    )
                    .await;
            }
            // 401/403 on this request (CONN-13): the server refused it
            // before running it.
            Err(e) if e.auth_challenge().is_some() => {
                let challenge = e.auth_challenge().unwrap_or_default();
                let oauth = matches!(
                    &entry.config.transport,
                    crate::messages::config::TransportConfig::StreamableHttp(h) if h.oauth.is_some()
                );
                return ToolOutcome::failure(
                    OutcomeKind::ServerError,
                    authorization_refused(&def.server, oauth, challenge),
                )
                .not_sent();
            }
            Err(e) if live.client.is_closed() => {
                return self
                    .lost(
                        scope,
                        def,
                        live.conn_gen,
                        crate::transport::client::service_words(&e),
                        lost_as,
                    )
                    .await;
            }
            // The transport is still up (e.g. HTTP 500 on this one request): no
            // connection-level cause to wait for.
            Err(e) => {
                return match lost_as {
                    Lost::Refused(why) => not_sent(def, &why),
                    Lost::NotSent | Lost::InFlight => ToolOutcome::failure(
                        OutcomeKind::TransportLostDuringCall,
                        format!(
                            "the request failed in transport, side effects unknown: {}",
                            crate::transport::client::service_words(&e)
                        ),
                    ),
                };
            }
        };
        // TRUST-2: a server that echoes its own secret shows "[redacted]",
        // in the value itself, before anything is projected or cut from it.
        if !live.redactions.is_empty() {
            redact_value(&mut canonical, &live.redactions);
        }
        let ctx = ResultContext {
            def,
            images: options.images,
            store: self.inner.attachments.as_ref(),
            limits: self.inner.limits,
            in_process: matches!(
                entry.config.transport,
                crate::messages::config::TransportConfig::InProcess(_)
            ),
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
        how: Lost,
    ) -> ToolOutcome {
        if let Lost::Refused(why) = how {
            return not_sent(def, &why);
        }
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
        match how {
            Lost::InFlight => ToolOutcome::failure(
                OutcomeKind::TransportLostDuringCall,
                format!("connection lost during the call, side effects unknown: {cause}"),
            ),
            Lost::NotSent | Lost::Refused(_) => ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!(
                    "server \"{}\": not sent, nothing ran: the connection ended before the request left ({cause})",
                    def.server
                ),
            ),
        }
    }
}

/// What goes on the wire of one call.
struct Outgoing {
    /// The arguments, an object (CALL-2).
    arguments: Map<String, Value>,
    /// The call's id, also its progress token.
    call_id: u64,
}

/// How a call's connection was lost, as far as the request goes.
enum Lost {
    /// The request was never handed to the wire.
    NotSent,
    /// The server refused it unrun (why, in words).
    Refused(String),
    /// The server may have received it.
    InFlight,
}

/// A call the server never ran: `server_not_ready`, side effects none,
/// with `why` (CALL-5; docs/runtime-semantics.md "Outcomes of a lost
/// connection").
fn not_sent(def: &ToolDefinition, why: &str) -> ToolOutcome {
    ToolOutcome::failure(
        OutcomeKind::ServerNotReady,
        format!(
            "server \"{}\": not sent, nothing ran: {why}; the next call reconnects",
            def.server
        ),
    )
}

/// The text of a call the server refused for its authorization (CONN-13):
/// nothing was executed; what scope it wants, and how to get it.
fn authorization_refused(server: &str, oauth: bool, challenge: &str) -> String {
    let scope = challenge
        .split_once("scope=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(s, _)| s.to_owned())
        .filter(|s| !s.is_empty());
    let (status, needs) = if challenge.contains("insufficient_scope") {
        ("HTTP 403 insufficient_scope", "more authorization")
    } else {
        ("HTTP 401/403", "authorization")
    };
    let wanted = scope
        .as_deref()
        .map(|s| format!(", scope \"{s}\""))
        .unwrap_or_default();
    let fix = if oauth {
        format!(
            "run `mcpvisor auth login {server}{}`, then call again",
            scope
                .as_deref()
                .map(|s| format!(" --scope \"{s}\""))
                .unwrap_or_default()
        )
    } else {
        format!(
            "check the credentials in [servers.{server}] (`headers`, `header_secrets`), or add a [servers.{server}.oauth] table if it uses OAuth"
        )
    };
    format!(
        "the server requires {needs} for this call ({status}{wanted}); nothing was executed: {fix}"
    )
}

/// True when a call that finds the server not connected wakes it and waits
/// (RECO-6): it was idle-stopped, or another call's wake is under way.
pub(super) fn needs_wake(status: &crate::messages::status::ServerStatus) -> bool {
    status.state == ServerState::IdleStopped || status.waking
}

/// How a call could start on a server's live connection (RECO-6).
pub(super) enum Started<'a> {
    /// Counted as activity on this live connection: send.
    Live(LiveConn, ActivityGuard),
    /// No live connection, and not idle-stopped: not ready.
    NotLive,
    /// An idle stop claimed the live connection first: nothing may be sent
    /// on it; wake the server (its entry) instead.
    Closing(&'a Arc<ServerEntry>),
}

/// Start a call's activity on `server`'s live connection in `snap`, unless
/// an idle stop claimed that connection first (see
/// [`crate::messages::registry::Activity::claim_idle_stop`]).
pub(super) fn begin_on_live<'a>(snap: &'a ScopeSnapshot, server: &str) -> Started<'a> {
    let Some(entry) = snap.servers.get(server) else {
        return Started::NotLive;
    };
    let Some(live) = entry.live.clone() else {
        return Started::NotLive;
    };
    let activity = entry.activity.begin();
    if entry.activity.closing(live.conn_gen) {
        return Started::Closing(entry);
    }
    Started::Live(live, activity)
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

/// A 64-bit fingerprint of a value's serialization, computed without
/// materialising it (CALL-7's change check, design.md's one-copy rule).
fn fingerprint(value: &Value) -> u64 {
    use std::hash::Hasher;
    struct HashWriter(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(std::collections::hash_map::DefaultHasher::new());
    // Serializing a Value into a writer that cannot fail cannot fail.
    let _ = serde_json::to_writer(&mut w, value);
    w.0.finish()
}

/// The outcome of a name that resolves to no tool: `server_not_ready` with
/// the server's state and last error when the name is one of a configured
/// server that is connecting, reconnecting, failed or out of budget and has
/// no tools registered (they are unknown until it is back; a known catalog
/// without the name is an unknown tool); else `unknown_tool`, with the closest
/// listed name when one is close (a typo), and what a live server with no
/// such tool reports (a rejected catalog).
fn not_found(snap: Option<&ScopeSnapshot>, name: &str) -> ToolOutcome {
    let Some(snap) = snap else {
        return ToolOutcome::failure(
            OutcomeKind::UnknownTool,
            format!("No tool named \"{name}\" is available here."),
        );
    };
    let owner = snap
        .servers
        .iter()
        .filter(|(server, _)| name.starts_with(&format!("mcp__{server}__")))
        .max_by_key(|(server, _)| server.len());
    if let Some((server, entry)) = owner
        && entry.live.is_none()
        && entry.tools.is_empty()
        && matches!(
            entry.status.state,
            ServerState::Connecting
                | ServerState::Reconnecting { .. }
                | ServerState::Failed
                | ServerState::Exhausted
        )
    {
        let mut why = format!(
            "The server \"{server}\" is not ready ({}), so its tool \"{name}\" is not available",
            entry.status.state
        );
        match &entry.status.error {
            Some(e) => why.push_str(&format!(": {e}")),
            None => why.push('.'),
        }
        return ToolOutcome::failure(OutcomeKind::ServerNotReady, why);
    }
    let mut why = format!("No tool named \"{name}\" is available here.");
    let names: Vec<String> = snap.tools().iter().map(|d| d.name.clone()).collect();
    if let Some(close) = crate::messages::naming::closest(name, names.iter().map(String::as_str)) {
        why.push_str(&format!(" Did you mean \"{close}\"?"));
    }
    if let Some((server, entry)) = owner
        && let Some(e) = &entry.status.error
    {
        why.push_str(&format!(" (server \"{server}\" reports: {e})"));
    }
    ToolOutcome::failure(OutcomeKind::UnknownTool, why)
}

/// `stale_generation` (CALL-4) when the caller expected another catalog
/// generation of the tool than `def`'s.
fn stale_generation(def: &Arc<ToolDefinition>, options: &CallOptions) -> Option<ToolOutcome> {
    let expected = options.expected_generation?;
    (expected != def.generation).then(|| {
        ToolOutcome::failure(
            OutcomeKind::StaleGeneration,
            format!(
                "expected catalog generation {expected}, current is {}",
                def.generation
            ),
        )
        .for_tool(def)
    })
}

#[cfg(test)]
mod tests;
