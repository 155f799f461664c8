//! The hook bridges in the call pipeline (CALL-1): PreToolUse / PostToolUse
//! for every call (HOOK-11) right after the trust gate, and the native
//! [`ToolGuard`]s (HOOK-5), which fail closed.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::trust::ask_user;
use crate::messages::approval::Approver;
use crate::messages::call::{CallPolicy, OutcomeKind, PolicyCall, PolicyVerdict, ToolOutcome};
use crate::messages::hooks::HookDecision;
use crate::messages::hooks::config::HookEvent;
use crate::messages::hooks::engine::ToolGuard;
use crate::messages::hooks::input::{HookInput, HookSession};
use crate::messages::trust::{Approval, refusal_text};
use crate::runtime::hooks::HookEngine;

/// A native guard in the chain (HOOK-5): its error or panic denies the call.
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
                Some(HookDecision::Deny) => deny(
                    m.reason
                        .clone()
                        .unwrap_or_else(|| "blocked by PreToolUse hook".into()),
                ),
                Some(HookDecision::Ask) => {
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
            if self.engine.has(HookEvent::PostToolUse) {
                let response = outcome.canonical.clone().unwrap_or_else(
                    || json!({ "error": outcome.error.clone().unwrap_or_default() }),
                );
                let input = HookInput::PostToolUse {
                    tool_name: call.tool.name.clone(),
                    tool_input: Value::Object(call.arguments.clone()),
                    tool_response: response,
                    tool_use_id: format!("call-{}", call.call_id),
                };
                self.after_hooks(call, outcome, &input).await;
            }
            // A failed call: PostToolUseFailure too (Claude Code), with what
            // the model is told of the failure.
            if outcome.kind != OutcomeKind::Ok && self.engine.has(HookEvent::PostToolUseFailure) {
                let input = HookInput::PostToolUseFailure {
                    tool_name: call.tool.name.clone(),
                    tool_input: Value::Object(call.arguments.clone()),
                    tool_use_id: format!("call-{}", call.call_id),
                    error: outcome.projection.clone(),
                    is_interrupt: outcome.kind == OutcomeKind::Cancelled,
                };
                self.after_hooks(call, outcome, &input).await;
            }
        })
    }
}

impl HooksPolicy {
    /// Run the hooks of an after-call event and apply them to `outcome`:
    /// their context, a block's feedback (next to the result, or in its
    /// place for Codex), their notes and a stop.
    async fn after_hooks(&self, call: &PolicyCall, outcome: &mut ToolOutcome, input: &HookInput) {
        let event = input.event();
        let report = self
            .engine
            .run(&self.session(call), input, None, &call.cancel)
            .await;
        let m = &report.merged;
        if let Some(r) = m
            .reason
            .as_deref()
            .filter(|_| m.decision == Some(HookDecision::Block))
        {
            // Codex replaces the output the model sees; Claude Code puts
            // the feedback next to it. The side effect stays either way.
            let feedback = format!("{event} hook feedback: {r}");
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
    }
}
