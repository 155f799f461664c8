//! Opt-in client capabilities (CONN-11).
//!
//! By default mcpvisor's client exposes no MCP capabilities: every
//! server→client request is answered with JSON-RPC -32601. An embedder opts in
//! per capability by installing a typed handler; a capability is declared in
//! `initialize` only when its handler is installed. Today: elicitation,
//! and, for a runtime that serves other clients (the gateway), the relay of
//! a server's requests to the client a call is made for ([`CallerRelay`]).

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

/// An `elicitation/create` request from a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationRequest {
    /// The server that asked.
    pub server: String,
    /// The human-readable message.
    pub message: String,
    /// Form mode: the requested schema (an object schema with primitive properties).
    pub requested_schema: Option<Value>,
    /// URL mode: where the user completes the request.
    pub url: Option<String>,
}

/// The answer to an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationResponse {
    /// Accepted with this content. Properties the content omits are filled from
    /// the schema's `default`s before the answer is sent.
    Accept(Map<String, Value>),
    /// Declined; the operation may continue.
    Decline,
    /// Cancelled.
    Cancel,
}

/// Answers elicitation requests (CONN-11 opt-in).
pub trait ElicitationHandler: Send + Sync + 'static {
    /// Answer one request.
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationResponse>;
}

/// An elicitation handler that accepts every form request with the schema's
/// defaults (what unattended hosts and the conformance suite expect), and
/// declines URL requests.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptSchemaDefaults;

impl ElicitationHandler for AcceptSchemaDefaults {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationResponse> {
        let response = match request.requested_schema {
            Some(_) => ElicitationResponse::Accept(Map::new()),
            None => ElicitationResponse::Decline,
        };
        Box::pin(async move { response })
    }
}

/// What the embedder supplies to every connection: opt-in client handlers
/// and the secret store (TRUST-2). Empty by default.
#[derive(Clone, Default)]
pub struct ClientHandlers {
    /// Elicitation, when installed.
    pub elicitation: Option<Arc<dyn ElicitationHandler>>,
    /// Where `env_secrets` / `header_secrets` values come from; the process
    /// environment when not set.
    pub secrets: Option<Arc<dyn crate::messages::trust::SecretStore>>,
    /// Declare elicitation, sampling and roots on every connection, so
    /// that a server may ask them of the client a call is made for
    /// ([`CallerRelay`], GW-2). Set by the gateway.
    pub relays: bool,
    /// Where a server's `notifications/resources/updated` and
    /// `notifications/progress` go: its scope and the runtime's event stream
    /// (set by the scope supervisor).
    pub notifications: Option<(
        crate::messages::config::Scope,
        tokio::sync::broadcast::Sender<crate::messages::status::RuntimeEvent>,
    )>,
}

impl fmt::Debug for ClientHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientHandlers")
            .field("elicitation", &self.elicitation.is_some())
            .field("secrets", &self.secrets.is_some())
            .field("relays", &self.relays)
            .finish()
    }
}

/// Which of a server's requests a calling client can answer: what it
/// declared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    /// `elicitation/create`.
    pub elicitation: bool,
    /// `sampling/createMessage`.
    pub sampling: bool,
    /// `roots/list`.
    pub roots: bool,
}

impl Offers {
    /// Whether the client answers `method`.
    pub fn answers(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation,
            "sampling/createMessage" => self.sampling,
            "roots/list" => self.roots,
            _ => false,
        }
    }
}

/// The client refused or could not answer a relayed request: its JSON-RPC
/// error, passed on to the server that asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RelayError {
    /// The JSON-RPC error code.
    pub code: i32,
    /// The error's message.
    pub message: String,
}

/// The client a call is made for, when that client is itself an MCP client
/// (the gateway's): a server's `elicitation/create`, `sampling/createMessage`
/// and `roots/list` that arrive while the call runs are passed to it
/// (GW-2). Set per call in [`CallOptions::relay`](crate::CallOptions::relay).
pub trait CallerRelay: Send + Sync + fmt::Debug + 'static {
    /// Which client this is: the calls of one client share the number.
    fn client(&self) -> u64;
    /// What the client declared it answers.
    fn offers(&self) -> Offers;
    /// Whether the client is gone (its connection closed): its calls
    /// still under way no longer claim a server's requests.
    fn gone(&self) -> bool {
        false
    }
    /// Pass the requests to the client, at once where it can take them
    /// at once (a stateless client's round); their results, by key.
    fn ask(
        &self,
        asks: Vec<RelayAsk>,
    ) -> BoxFuture<'static, Result<Map<String, Value>, RelayError>>;
}

/// One server request for a [`CallerRelay`].
#[derive(Debug, Clone, PartialEq)]
pub struct RelayAsk {
    /// Its key: the server's, in an `input_required` result; [`RELAY_KEY`]
    /// for a session-era request.
    pub key: String,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: String,
    /// Its parameters.
    pub params: Value,
}

/// The key of a session-era server's request (which has none of its own)
/// when it is passed on in an `input_required` round.
pub const RELAY_KEY: &str = "mcpvisor_relay";

/// Fill every property `content` lacks with the `default` the schema declares
/// for it. Present values are never overwritten.
pub fn apply_schema_defaults(
    mut content: Map<String, Value>,
    schema: &Value,
) -> Map<String, Value> {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            if let Some(default) = prop.get("default") {
                content
                    .entry(name.clone())
                    .or_insert_with(|| default.clone());
            }
        }
    }
    content
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_properties_take_the_schema_defaults_and_present_ones_stay() {
        // CONN-11 opt-in elicitation: the client fills defaults itself.
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"}
        }});
        let mut given = Map::new();
        given.insert("age".into(), json!(41));
        let filled = apply_schema_defaults(given, &schema);
        assert_eq!(
            Value::Object(filled),
            json!({"name": "John Doe", "age": 41})
        );
    }
}
