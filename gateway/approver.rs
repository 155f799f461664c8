//! `ask` in a gateway (TRUST-5): put to the calling client as an
//! elicitation when it declared that capability; otherwise nobody can be
//! asked and the call is refused with a sentence saying how to allow it.
//!
//! A stateless client (2026-07-28) cannot be sent a request: its call is
//! answered with an `input_required` result carrying the same elicitation,
//! and its retry brings the answer (GW-1). Here that is two calls of the
//! runtime for one chat: the first records the question and is refused;
//! the second finds the answer waiting ([`ClientApprover::expect_rounds`]).

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::BoxFuture;
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use crate::{Approval, ApprovalRequest, Approver};

/// The [`Approver`] of a gateway's runtime: finds the client session of a
/// call by its chat id (`gateway-<n>`) and asks that client. Build the
/// runtime with it (`RuntimeBuilder::approver`) and hand the same value to
/// [`super::Gateway::new`].
#[derive(Default)]
pub struct ClientApprover {
    clients: Mutex<HashMap<String, Peer<RoleServer>>>,
    /// Chats of stateless clients: asked through `input_required` rounds.
    rounds: Mutex<HashMap<String, Round>>,
}

/// A stateless chat's question and answer (see the module docs).
#[derive(Default)]
struct Round {
    /// What the trust gate asked, when it asked: (server, tool, the form).
    asked: Option<(String, String, Value)>,
    /// The client's answer for (server, tool), for the retried call.
    answer: Option<(String, String, Approval)>,
}

/// What a stateless client is to be asked: the server and tool, and the
/// elicitation's parameters.
pub(super) struct Question {
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) form: Value,
}

impl ClientApprover {
    /// A session's client, once it is initialized.
    pub(super) fn register(&self, chat: String, peer: Peer<RoleServer>) {
        if let Ok(mut c) = self.clients.lock() {
            c.retain(|_, p| !p.is_transport_closed());
            c.insert(chat, peer);
        }
    }

    fn peer(&self, chat: &str) -> Option<Peer<RoleServer>> {
        self.clients.lock().ok()?.get(chat).cloned()
    }

    fn round<T>(&self, chat: &str, f: impl FnOnce(&mut Round) -> T) -> Option<T> {
        self.rounds.lock().ok()?.get_mut(chat).map(f)
    }

    /// The calls of `chat` come from a stateless client: the trust gate's
    /// question is recorded (the call refused) instead of sent, and an
    /// answer given with [`Self::answer`] is used by the next call.
    pub(super) fn expect_rounds(&self, chat: &str) {
        if let Ok(mut r) = self.rounds.lock() {
            r.entry(chat.to_owned()).or_default();
        }
    }

    /// The question the trust gate recorded for `chat`, if it asked.
    pub(super) fn take_question(&self, chat: &str) -> Option<Question> {
        self.round(chat, |r| r.asked.take())
            .flatten()
            .map(|(server, tool, form)| Question { server, tool, form })
    }

    /// The client's answer for `server`'s `tool`, for `chat`'s next call.
    pub(super) fn answer(&self, chat: &str, server: &str, tool: &str, approval: Approval) {
        if let Ok(mut r) = self.rounds.lock() {
            r.entry(chat.to_owned()).or_default().answer =
                Some((server.to_owned(), tool.to_owned(), approval));
        }
    }

    /// `chat`'s round is over (its call ended).
    pub(super) fn forget(&self, chat: &str) {
        if let Ok(mut r) = self.rounds.lock() {
            r.remove(chat);
        }
    }
}

/// The elicitation's parameters for `request` (the question and the three
/// choices).
fn form(request: &ApprovalRequest) -> Value {
    let mut message = format!(
        "Allow the tool \"{}\" of server \"{}\"?",
        request.tool, request.server
    );
    if let Some(s) = &request.summary {
        message.push_str(&format!("\n{s}"));
    }
    if let Some(r) = &request.reason {
        message.push_str(&format!("\nA hook asks: {r}"));
    }
    let args = serde_json::to_string(&request.arguments).unwrap_or_default();
    let (args, _) = crate::apply_budget(&args, 2000, "the arguments shown");
    message.push_str(&format!("\nArguments: {args}"));
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "enum": CHOICES.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
                }
            },
            "required": ["decision"],
        }
    })
}

/// The approval an elicitation's answer (`action`, `content.decision`) gives.
pub(super) fn decision(answer: &Value) -> Approval {
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return Approval::DontAllow;
    }
    let picked = answer
        .get("content")
        .and_then(|c| c.get("decision"))
        .and_then(Value::as_str);
    CHOICES
        .iter()
        .find(|(k, _)| Some(*k) == picked)
        .map(|(_, a)| *a)
        .unwrap_or(Approval::DontAllow)
}

fn declares_elicitation(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// The choices offered, in the order a client shows them.
const CHOICES: [(&str, Approval); 3] = [
    ("allow_once_for_this_session", Approval::AllowThisChat),
    ("always_allow_this_server", Approval::AlwaysAllow),
    ("do_not_allow", Approval::DontAllow),
];

/// Why a gateway client cannot be asked.
pub const NO_ELICITATION: &str = "the gateway's client did not declare the elicitation capability";

impl Approver for ClientApprover {
    fn unavailable(&self, request: &ApprovalRequest) -> Option<&'static str> {
        if request
            .chat
            .as_deref()
            .and_then(|c| self.round(c, |_| ()))
            .is_some()
        {
            return None;
        }
        match request.chat.as_deref().and_then(|c| self.peer(c)) {
            Some(p) if declares_elicitation(&p) => None,
            Some(_) => Some(NO_ELICITATION),
            None => Some("the calling client is not connected to the gateway"),
        }
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            // A stateless client: its answer, if it gave one for this tool;
            // else the question is recorded and this call refused.
            if let Some(chat) = request.chat.as_deref()
                && let Some(given) = self.round(chat, |r| match r.answer.take() {
                    Some((s, t, a)) if s == request.server && t == request.tool => Some(a),
                    _ => {
                        r.asked =
                            Some((request.server.clone(), request.tool.clone(), form(request)));
                        None
                    }
                })
            {
                return given.unwrap_or(Approval::DontAllow);
            }
            let Some(peer) = request.chat.as_deref().and_then(|c| self.peer(c)) else {
                return Approval::DontAllow;
            };
            if !declares_elicitation(&peer) {
                return Approval::DontAllow;
            }
            let Ok(params) = serde_json::from_value::<ElicitRequestParams>(form(request)) else {
                return Approval::DontAllow;
            };
            // The trust gate bounds the wait (approval timeout) and the call's cancel.
            match peer.create_elicitation(params).await {
                Ok(r) if r.action == ElicitationAction::Accept => {
                    let picked = r
                        .content
                        .as_ref()
                        .and_then(|c| c.get("decision"))
                        .and_then(|d| d.as_str());
                    CHOICES
                        .iter()
                        .find(|(k, _)| Some(*k) == picked)
                        .map(|(_, a)| *a)
                        .unwrap_or(Approval::DontAllow)
                }
                _ => Approval::DontAllow,
            }
        })
    }
}
