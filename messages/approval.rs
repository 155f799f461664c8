//! Asking the user (TRUST-5): what the approver is asked, and the
//! [`Approver`] port the embedder implements (the reference binary's is a
//! terminal prompt).

use futures::future::BoxFuture;
use serde::Serialize;

use super::call::PolicyCall;
use super::config::Scope;
use super::trust::Approval;

/// What the approver is asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    /// The scope of the call.
    pub scope: Scope,
    /// The chat, when the caller named one.
    pub chat: Option<String>,
    /// The server.
    pub server: String,
    /// Public tool name.
    pub tool: String,
    /// Tool title or description, for the prompt.
    pub summary: Option<String>,
    /// The arguments that would be sent.
    pub arguments: serde_json::Value,
    /// Why a PreToolUse hook asks (HOOK-6), when it is a hook that asks.
    pub reason: Option<String>,
}

impl ApprovalRequest {
    /// The request for `call`; `reason` is a hook's, when a hook asks.
    pub(crate) fn for_call(call: &PolicyCall, reason: Option<String>) -> Self {
        Self {
            scope: call.scope.clone(),
            chat: call.chat.clone(),
            server: call.tool.server.clone(),
            tool: call.tool.name.clone(),
            summary: call
                .tool
                .title
                .clone()
                .or_else(|| call.tool.description.clone()),
            arguments: serde_json::Value::Object(call.arguments.clone()),
            reason,
        }
    }
}

/// Asks the user (TRUST-5). The reference binary implements an interactive
/// terminal prompt; with no approver every `ask` is Don't Allow.
pub trait Approver: Send + Sync + 'static {
    /// Ask once.
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval>;

    /// Why nobody can be asked about `request`, when that is known before
    /// asking (a gateway's client without elicitation): the call is then
    /// refused as "not approved (no one to ask: …)" with this reason, not
    /// as declined.
    fn unavailable(&self, request: &ApprovalRequest) -> Option<&'static str> {
        let _ = request;
        None
    }
}
