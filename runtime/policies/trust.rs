//! The trust gate (TRUST-4, TRUST-5, TRUST-6): the first link of every call's
//! policy chain. It is always installed; without an approver, `ask` means
//! Don't Allow.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use crate::messages::approval::{ApprovalRequest, Approver};
use crate::messages::call::{CallPolicy, OutcomeKind, PolicyCall, PolicyVerdict};
use crate::messages::config::Scope;
use crate::messages::status::RuntimeEvent;
use crate::messages::trust::{Approval, Refusal, TrustDecision, TrustMode, decide, refusal_text};

/// How long an approver may take before the answer is Don't Allow (TRUST-5).
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// Ask the user about `call` (TRUST-5): the answer, or why there is none (no
/// approver, no answer within `limit`, the call was cancelled). Callers treat
/// every `Err` as Don't Allow. Used by the trust gate and by a hook's ask.
pub(crate) async fn ask_user(
    approver: Option<&dyn Approver>,
    call: &PolicyCall,
    reason: Option<String>,
    limit: Duration,
) -> Result<Approval, Refusal> {
    let Some(approver) = approver else {
        return Err(Refusal::NoApprover("no approver is configured"));
    };
    let request = ApprovalRequest::for_call(call, reason);
    if let Some(why) = approver.unavailable(&request) {
        return Err(Refusal::NoApprover(why));
    }
    tokio::select! {
        answer = tokio::time::timeout(limit, approver.ask(&request)) => {
            answer.map_err(|_| Refusal::TimedOut(limit.as_secs()))
        }
        _ = call.cancel.cancelled() => Err(Refusal::Cancelled),
    }
}

/// The gate: per-chat grants and `always` given at run time, in memory.
pub(crate) struct TrustGate {
    approver: Option<Arc<dyn Approver>>,
    approval_timeout: Duration,
    /// (scope, server, chat) granted "Allow This Chat".
    chat_grants: Mutex<HashSet<(Scope, String, String)>>,
    /// (scope, server) answered "Always Allow".
    always: Mutex<HashSet<(Scope, String)>>,
    events: broadcast::Sender<RuntimeEvent>,
}

impl TrustGate {
    pub(crate) fn new(
        approver: Option<Arc<dyn Approver>>,
        approval_timeout: Duration,
        events: broadcast::Sender<RuntimeEvent>,
    ) -> Self {
        Self {
            approver,
            approval_timeout,
            chat_grants: Mutex::default(),
            always: Mutex::default(),
            events,
        }
    }

    /// Forget every "Allow This Chat" grant of `chat`.
    pub(crate) fn end_chat(&self, chat: &str) {
        if let Ok(mut g) = self.chat_grants.lock() {
            g.retain(|(_, _, c)| c != chat);
        }
    }

    fn record(&self, call: &PolicyCall, decision: TrustDecision, approval: Option<Approval>) {
        if self.events.receiver_count() == 0 {
            return;
        }
        let _ = self.events.send(RuntimeEvent::TrustDecision {
            scope: call.scope.clone(),
            server: call.tool.server.clone(),
            tool: call.tool.name.clone(),
            chat: call.chat.clone(),
            decision,
            approval,
        });
    }
}

fn deny(call: &PolicyCall, why: Refusal) -> PolicyVerdict {
    PolicyVerdict::Deny {
        kind: OutcomeKind::RefusedByTrust,
        reason: refusal_text(&call.tool.server, &call.tool.name, why),
    }
}

impl CallPolicy for TrustGate {
    fn before<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, PolicyVerdict> {
        Box::pin(async move {
            // The scope's shared resource tools read data of servers that were
            // trusted to connect; they are not gated per call.
            if call.tool.server.is_empty() {
                return PolicyVerdict::Proceed;
            }
            // Only config sets never, and a runtime Always Allow never lifts it
            // (a tool configured `never` under a server answered Always Allow):
            // the grants are read for `ask` only (no lookup per call otherwise).
            let key = (call.trust == TrustMode::Ask)
                .then(|| (call.scope.clone(), call.tool.server.clone()));
            let mode = match &key {
                Some(k) if self.always.lock().is_ok_and(|a| a.contains(k)) => TrustMode::Always,
                _ => call.trust,
            };
            let granted = match (&key, &call.chat) {
                (Some((scope, server)), Some(chat)) => self
                    .chat_grants
                    .lock()
                    .map(|g| g.contains(&(scope.clone(), server.clone(), chat.clone())))
                    .unwrap_or(false),
                _ => false,
            };
            match decide(mode, granted) {
                TrustDecision::Allow => {
                    self.record(call, TrustDecision::Allow, None);
                    PolicyVerdict::Proceed
                }
                TrustDecision::Deny => {
                    self.record(call, TrustDecision::Deny, None);
                    deny(call, Refusal::Never)
                }
                TrustDecision::Ask => {
                    let asked =
                        ask_user(self.approver.as_deref(), call, None, self.approval_timeout).await;
                    let answer = match asked {
                        Ok(answer) => answer,
                        Err(why) => {
                            self.record(call, TrustDecision::Deny, Some(Approval::DontAllow));
                            return deny(call, why);
                        }
                    };
                    self.record(
                        call,
                        if answer == Approval::DontAllow {
                            TrustDecision::Deny
                        } else {
                            TrustDecision::Allow
                        },
                        Some(answer),
                    );
                    // Asked: the mode is `ask`, so the key was made.
                    match (answer, key) {
                        (Approval::AlwaysAllow, Some(key)) => {
                            if let Ok(mut a) = self.always.lock() {
                                a.insert(key);
                            }
                            PolicyVerdict::Proceed
                        }
                        (Approval::AllowThisChat, Some((scope, server))) => {
                            if let (Some(chat), Ok(mut g)) = (&call.chat, self.chat_grants.lock()) {
                                g.insert((scope, server, chat.clone()));
                            }
                            PolicyVerdict::Proceed
                        }
                        (Approval::AlwaysAllow | Approval::AllowThisChat, None) => {
                            PolicyVerdict::Proceed
                        }
                        (Approval::DontAllow, _) => deny(call, Refusal::Declined),
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::call::ToolDefinition;

    /// Never answers.
    /// Never answers; counts how often it was asked.
    #[derive(Default)]
    struct Silent(std::sync::atomic::AtomicUsize);

    impl Approver for Silent {
        fn ask<'a>(&'a self, _: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(futures::future::pending())
        }
    }

    fn call() -> PolicyCall {
        PolicyCall {
            scope: Scope::Global,
            tool: Arc::new(ToolDefinition {
                name: "mcp__srv__echo".into(),
                scope: Scope::Global,
                server: "srv".into(),
                raw_name: "echo".into(),
                generation: 1,
                title: None,
                description: None,
                input_schema: Arc::default(),
                output_schema: None,
                annotations: None,
                task_support_required: false,
            }),
            arguments: serde_json::Map::new(),
            chat: Some("c1".into()),
            trust: TrustMode::Ask,
            call_id: 1,
            cancel: Default::default(),
            mod_origin: None,
            annotations: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_approver_that_never_answers_is_dont_allow_after_the_timeout() {
        // TRUST-5: Don't Allow is also the answer when the approver times out.
        let (events, mut rx) = broadcast::channel(8);
        let silent = Arc::new(Silent::default());
        let gate = TrustGate::new(Some(silent.clone()), Duration::from_secs(30), events);
        let started = tokio::time::Instant::now();
        let verdict = gate.before(&call()).await;
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        match verdict {
            PolicyVerdict::Deny { kind, reason } => {
                assert_eq!(kind, OutcomeKind::RefusedByTrust);
                assert!(reason.contains("nobody answered within 30 s"), "{reason}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(matches!(
            rx.try_recv(),
            Ok(RuntimeEvent::TrustDecision {
                decision: TrustDecision::Deny,
                approval: Some(Approval::DontAllow),
                ..
            })
        ));
        // Nothing persisted: the next call asks again (a persisted `never`
        // would deny without asking) and times out again.
        let again = tokio::time::Instant::now();
        assert!(matches!(
            gate.before(&call()).await,
            PolicyVerdict::Deny { .. }
        ));
        assert_eq!(again.elapsed(), Duration::from_secs(30));
        assert_eq!(silent.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
