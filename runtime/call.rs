//! The call pipeline (CALL-1..8, design.md "The call path"): everything a
//! tool call does, in the caller's task, with no actor hop for a ready server.
//!
//! ```text
//! Runtime::call            call id, CallStarted / CallFinished events (only when listened)
//! └ call_inner             resolve the public name in the scope's snapshot,
//!   │                      normalise the arguments, expected generation, taskSupport
//!   │                      (a task-only tool is refused in the session era)
//!   └ execute              the policy chain: trust gate → hook bridges → guards
//!     │                    → installed policies (policies/); re-resolve after it;
//!     │                    wake an idle-stopped server (the one actor hop, RECO-6)
//!     ├ send_call          tools/call with the server's timeout and the caller's
//!     │                    cancellation; a lost transport waits for its cause (CONN-8)
//!     │ ├ follow_task      a task handle polled to its end within the same
//!     │ │                  deadline, cancelled when the call ends first (ERA-6)
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
        #[cfg_attr(not(feature = "otlp"), allow(unused_mut))] mut options: CallOptions,
    ) -> ToolOutcome {
        let started = Instant::now();
        let call_id = self
            .inner
            .call_ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(to) = &options.id_to {
            let _ = to.send(call_id);
        }
        // Events cost a clone of the projection: build them only for listeners.
        let listened = self.inner.events.receiver_count() > 0;
        if listened {
            let _ = self.inner.events.send(RuntimeEvent::CallStarted {
                scope: scope.clone(),
                tool: name.to_owned(),
                call_id,
            });
        }
        // A call that continues a trace is a span of it (its id is what
        // the server is sent as the parent).
        let span = match &options.trace {
            Some(t) => tracing::info_span!(
                "mcpvisor.call",
                tool = name,
                call_id,
                trace_id = %t.trace_id,
                span_id = %t.span_id,
                parent_id = %t.parent_id,
            ),
            // Exported over OTLP, every call is a span: one that came
            // without a trace starts one.
            #[cfg(feature = "otlp")]
            None => tracing::info_span!(
                "mcpvisor.call",
                tool = name,
                call_id,
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty,
                parent_id = tracing::field::Empty,
            ),
            #[cfg(not(feature = "otlp"))]
            None => tracing::Span::none(),
        };
        // Exported over OTLP, the span is the caller's span's child (or a
        // root), and its id is the backend's parent.
        #[cfg(feature = "otlp")]
        match options.trace.as_mut() {
            Some(trace) => super::otel::continue_in(&span, trace),
            None => options.trace = super::otel::start_in(&span),
        }
        let mut outcome = tracing::Instrument::instrument(
            self.call_inner(scope, name, arguments, options, call_id),
            span,
        )
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
        // A tool that requires a task is callable in the stateless era only
        // (ERA-6): refused at once when the server is known to speak the
        // session era, checked again once the connection is in hand.
        if let Some(refused) = snap
            .servers
            .get(&def.server)
            .and_then(|e| e.live.as_ref())
            .and_then(|live| task_support_refused(&def, live))
        {
            return refused;
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
        let not_sent = |def: &ToolDefinition| {
            ToolOutcome::failure(
                OutcomeKind::Cancelled,
                "the call was cancelled before it was sent",
            )
            .not_sent()
            .for_tool(def)
        };
        // A round's calls: the chains run one at a time, in the model's order.
        if let Some(slot) = &options.round {
            tokio::select! {
                _ = slot.chain_turn() => {}
                _ = call.cancel.cancelled() => return not_sent(&def),
            }
        }
        let chain = std::iter::once(&self.inner.trust_gate)
            .chain(self.inner.hooks_policy.iter())
            .chain(self.inner.policies.iter());
        let hooks = usize::from(self.inner.hooks_policy.is_some());
        for (i, policy) in chain.enumerate() {
            let part = match i {
                0 => "trust",
                i if i <= hooks => "hooks",
                _ => "policy",
            };
            let before = tracing::Instrument::instrument(
                policy.before(call),
                tracing::debug_span!("mcpvisor.policy", part),
            );
            match before.await {
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
            return not_sent(&def);
        }
        // A round's call is sent once every chain of the round ran, within
        // the round's bound; the permit is held until the call ends.
        let _permit = match &options.round {
            Some(slot) => {
                slot.chain_done();
                tokio::select! {
                    p = slot.send_permit() => p,
                    _ = call.cancel.cancelled() => return not_sent(&def),
                }
            }
            None => None,
        };
        if let Some(op) = resource_op {
            let outcome = self
                .resource_call(
                    scope,
                    &snap,
                    op,
                    &call.arguments,
                    entry_timeout(&snap),
                    options.relay.as_ref(),
                )
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
        if let Some(refused) = task_support_refused(&def, &live) {
            return refused; // never sent: nothing for the after half to see
        }
        let backend = tracing::debug_span!(
            "mcpvisor.backend",
            server = %def.server,
            tool = %def.raw_name
        );
        let outcome = tracing::Instrument::instrument(
            self.send_call(
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
            ),
            backend,
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
/// A tool that requires a task, on a connection of the session era: the
/// tasks extension is of the stateless era (ERA-6), so the call is refused
/// unsent.
fn task_support_refused(def: &ToolDefinition, live: &LiveConn) -> Option<ToolOutcome> {
    (def.task_support_required && live.era == crate::messages::server::Era::Session).then(|| {
        ToolOutcome::failure(
            OutcomeKind::TaskSupportRequired,
            format!(
                "tool \"{}\" requires task-based execution (the tasks extension, io.modelcontextprotocol/tasks), which this client follows in the stateless era (2026-07-28) only; server \"{}\" speaks the session era",
                def.raw_name, def.server
            ),
        )
        .for_tool(def)
    })
}

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

mod send;
mod task;

use send::*;
pub(crate) use task::LiveTasks;

#[cfg(test)]
mod tests;
