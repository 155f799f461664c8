//! `ask` in a gateway (TRUST-5): put to the calling client as an
//! elicitation when it declared that capability; otherwise nobody can be
//! asked and the call is refused with a sentence saying how to allow it.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::BoxFuture;
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{Peer, RoleServer};
use serde_json::json;

use crate::{Approval, ApprovalRequest, Approver};

/// The [`Approver`] of a gateway's runtime: finds the client session of a
/// call by its chat id (`gateway-<n>`) and asks that client. Build the
/// runtime with it (`RuntimeBuilder::approver`) and hand the same value to
/// [`super::Gateway::new`].
#[derive(Default)]
pub struct ClientApprover {
    clients: Mutex<HashMap<String, Peer<RoleServer>>>,
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
        match request.chat.as_deref().and_then(|c| self.peer(c)) {
            Some(p) if declares_elicitation(&p) => None,
            Some(_) => Some(NO_ELICITATION),
            None => Some("the calling client is not connected to the gateway"),
        }
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            let Some(peer) = request.chat.as_deref().and_then(|c| self.peer(c)) else {
                return Approval::DontAllow;
            };
            if !declares_elicitation(&peer) {
                return Approval::DontAllow;
            }
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
            let params = json!({
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
            });
            let Ok(params) = serde_json::from_value::<ElicitRequestParams>(params) else {
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
