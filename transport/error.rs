//! [`WireError`]: why a request to a server, its handshake or its catalog
//! fetch failed; [`HttpSetupError`]: why an HTTP transport could not be
//! built. Their texts are what status, tool results and logs show.

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::ServiceError;
use serde_json::Value;

use super::client::{SPOKEN_VERSIONS, words};

/// Why a request to a server (or its `initialize`) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The server answered with a JSON-RPC error (`code` is e.g. -32601,
    /// method not found).
    #[error("{}", words(format!("Mcp error: {code}: {message}{}", data.as_ref().map(|d| format!("({d})")).unwrap_or_default())))]
    Rpc {
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
        /// The error's `data`, when it sent one.
        data: Option<Value>,
    },
    /// No answer within the request's timeout.
    #[error("{}", words(ServiceError::Timeout { timeout: *after }.to_string()))]
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// The transport closed before the answer.
    #[error("Transport closed")]
    Closed,
    /// A request's parameters, as given, are not the method's.
    #[error("the {method} parameters are not valid: {source}")]
    Params {
        /// The method.
        method: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// A stateless server acknowledged a listen stream without the resource
    /// asked for: it offers no subscription to it.
    #[error(
        "the server does not offer updates of {uri} (its subscriptions/listen acknowledgement left it out)"
    )]
    SubscriptionRefused {
        /// The resource.
        uri: String,
    },
    /// Any other failure of rmcp's service (the request not written, a
    /// cancellation, an answer of another type).
    #[error("{}", words(.0.to_string()))]
    Service(ServiceError),
    /// The result could not be turned into JSON.
    #[error("{0}")]
    Result(serde_json::Error),
    /// A request of `method` could not be sent.
    #[error("{method} could not be sent: {source}")]
    NotSent {
        /// The method.
        method: &'static str,
        /// Why.
        source: Box<WireError>,
    },
    /// A request of `method` failed.
    #[error("{method} failed: {source}")]
    Failed {
        /// The method.
        method: &'static str,
        /// Why.
        source: Box<WireError>,
    },
    /// `tools/list` answered with a result of another kind.
    #[error("{method} answered with an unexpected result type")]
    UnexpectedResult {
        /// The method.
        method: &'static str,
    },
    /// A `tools/list` page has no `tools` array.
    #[error("tools/list result has no tools array")]
    NoToolsArray,
    /// The catalog's cursor came back again (a loop).
    #[error("tools/list repeated cursor {cursor:?}: invalid catalog")]
    RepeatedCursor {
        /// The cursor.
        cursor: String,
    },
    /// The catalog has more pages than are read.
    #[error("tools/list exceeded {pages} pages: invalid catalog")]
    TooManyPages {
        /// The page limit.
        pages: usize,
    },
    /// `initialize` failed: the transport's cause in words (without rmcp's
    /// type names), or only that it failed when the transport already
    /// named the cause.
    #[error("{words}")]
    Initialize {
        /// The words.
        words: String,
    },
    /// `initialize` finished, but the server said nothing of itself.
    #[error("initialize finished without server info")]
    NoServerInfo,
    /// The server answered `initialize` with a version this client does not speak.
    #[error(
        "initialize failed: the server answered with protocol version {answered:?}, which this client does not speak: it offered {} and speaks {}",
        ProtocolVersion::LATEST_WITH_INITIALIZE,
        SPOKEN_VERSIONS.iter().map(ProtocolVersion::as_str).collect::<Vec<_>>().join(", ")
    )]
    Version {
        /// The version it answered with.
        answered: String,
    },
    /// The server's instructions are refused (too large, under
    /// `oversized_instructions = "fail"`).
    #[error("{0}")]
    Instructions(crate::messages::resources::InstructionsTooLong),
    /// The server's input request could not be answered (ERA-5).
    #[error("{0}")]
    Input(super::client::InputRefused),
    /// The server asked for input more often than `max_input_rounds`.
    #[error(
        "the server asked for more input (resultType \"input_required\") {rounds} time(s), past max_input_rounds = {max}"
    )]
    Rounds {
        /// The rounds asked.
        rounds: u32,
        /// The limit.
        max: u32,
    },
}

impl WireError {
    /// The JSON-RPC error code the server answered with, when that is why
    /// the request failed (-32601: the method is not known).
    // Read by the protocol-era fallback (the next issue) and the tests.
    #[allow(dead_code)]
    pub fn code(&self) -> Option<i32> {
        match self {
            Self::Rpc { code, .. } => Some(*code),
            Self::NotSent { source, .. } | Self::Failed { source, .. } => source.code(),
            _ => None,
        }
    }
}

impl From<ServiceError> for WireError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::McpError(e) => Self::Rpc {
                code: e.code.0,
                message: e.message.into_owned(),
                data: e.data,
            },
            ServiceError::Timeout { timeout } => Self::Timeout { after: timeout },
            ServiceError::TransportClosed => Self::Closed,
            other => Self::Service(other),
        }
    }
}

/// Why the streamable-HTTP transport of a connection could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpSetupError {
    /// The server uses OAuth and the runtime has no secret store.
    #[error(
        "server {server} uses OAuth, which keeps its tokens in the secret store, but none is installed: configure [secrets]"
    )]
    NoSecretStore {
        /// The server.
        server: String,
    },
    /// The machine grant's token request did not finish (its task failed).
    #[error("server {server}: the token request failed: {source}")]
    TokenTask {
        /// The server.
        server: String,
        /// The task's error.
        source: tokio::task::JoinError,
    },
    /// An OAuth step failed.
    #[cfg(feature = "oauth")]
    #[error(transparent)]
    OAuth(#[from] crate::oauth::OAuthError),
    /// The server has an `[oauth]` table and this build has no OAuth.
    #[cfg(not(feature = "oauth"))]
    #[error(
        "server {server}: [servers.{server}.oauth] needs mcpvisor built with the `oauth` feature"
    )]
    NoOAuthFeature {
        /// The server.
        server: String,
    },
    /// The server's URL is refused (TRUST-3).
    #[error(transparent)]
    Endpoint(#[from] crate::messages::trust::EndpointError),
    /// A configured header's name is not a header name.
    #[error("header name {name:?} is invalid: {source}")]
    HeaderName {
        /// The name.
        name: String,
        /// Why.
        source: http::header::InvalidHeaderName,
    },
    /// A configured header's value is not a header value.
    #[error("header {name:?} has an invalid value: {source}")]
    HeaderValue {
        /// The header.
        name: String,
        /// Why.
        source: http::header::InvalidHeaderValue,
    },
    /// A secret header's value is not a header value (never quoted).
    #[error("the secret for header {name:?} is not a valid header value")]
    SecretHeaderValue {
        /// The header.
        name: String,
    },
    /// reqwest could not build the client.
    #[error("could not build the HTTP client: {0}")]
    Client(reqwest::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_rpc_error_keeps_its_code_and_reads_as_rmcps_words() {
        let data = Some(serde_json::json!({"m": "x"}));
        let rmcp_error = || {
            ServiceError::McpError(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(-32601),
                "Method not found",
                data.clone(),
            ))
        };
        let words = super::super::client::service_words(&rmcp_error());
        let e = WireError::Failed {
            method: "tools/list",
            source: Box::new(rmcp_error().into()),
        };
        assert_eq!(e.code(), Some(-32601));
        assert_eq!(e.to_string(), format!("tools/list failed: {words}"));
        let timeout = Duration::from_millis(1500);
        assert_eq!(
            WireError::from(ServiceError::Timeout { timeout }).to_string(),
            super::super::client::service_words(&ServiceError::Timeout { timeout })
        );
        assert_eq!(
            WireError::from(ServiceError::TransportClosed).to_string(),
            super::super::client::service_words(&ServiceError::TransportClosed)
        );
    }
}
