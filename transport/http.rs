//! Streamable-HTTP transport glue for the `Connection` actor (CONN-9).
//!
//! rmcp's reqwest client does the protocol work: one POST per message, JSON or
//! SSE replies, `Mcp-Session-Id` capture and replay, `MCP-Protocol-Version` on
//! every request, re-initialisation after a 404 on a held session. We supply a
//! reqwest client with connection pooling (rmcp's default client disables it,
//! which costs a TCP handshake per call), no redirects, TLS through rustls,
//! and the configured headers, and wrap it in [`TappedClient`], which
//!
//! - turns 401/403 into "the server rejected the credentials (HTTP n)" in the
//!   connection's diagnostics (CONN-9), so the failure says why;
//! - reads `execution.taskSupport` from `tools/list` replies streamed as SSE,
//!   which rmcp's typed `Tool` model drops (SYNC-7, as the stdio transport does);
//! - turns a 404 on the held session into the end of the connection (CALL-5).
//!   rmcp's own recovery (`reinit_on_expired_session`) re-sends the request
//!   that got the 404 on a new session, and CALL-5 says a call is never sent
//!   twice. So the recovery is off: the call that got the 404 ends
//!   `server_not_ready` (the server proved it never ran it), and the
//!   reconnect policy opens a new connection, with a new session, for the
//!   next calls;
//! - records which `tools/call` requests reached the wire, and which were
//!   refused unrun (`Deliveries`): a call lost with its connection is "not
//!   sent" (side effects none) or "side effects unknown" by that record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use http::{HeaderName, HeaderValue};

use super::HttpSetupError;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use tokio_util::sync::CancellationToken;

use super::diagnostics::Diagnostics;
use crate::messages::config::HttpConfig;

/// Reconnects of the standalone SSE stream before rmcp gives up on it.
const SSE_RETRIES: usize = 8;

/// What one connection attempt is built from.
pub struct HttpParts {
    /// `header_secrets` values, fetched.
    pub secret_headers: Vec<(String, crate::messages::trust::Secret)>,
    /// The connection's diagnostics.
    pub diag: Arc<Diagnostics>,
    /// Cancelled when the server answers 404 for the held session.
    pub session_lost: CancellationToken,
    /// Test-only: rmcp's replay of an expired session's request.
    pub replay_for_chaos: bool,
    /// The server's name (for the OAuth hints).
    pub server: String,
    /// Where OAuth tokens are kept (CONN-13), when a store is installed.
    #[cfg_attr(not(feature = "oauth"), allow(dead_code))]
    pub secrets: Option<Arc<dyn crate::messages::trust::SecretStore>>,
}

/// Build the transport for one connection attempt: with `[oauth]`, the
/// stored token is sent and refreshed (CONN-13).
pub async fn connect(
    cfg: &HttpConfig,
    parts: HttpParts,
) -> Result<StreamableHttpClientTransport<TappedClient>, HttpSetupError> {
    if cfg.oauth.is_none() {
        return transport(cfg, parts, None);
    }
    #[cfg(feature = "oauth")]
    {
        let Some(store) = parts.secrets.clone() else {
            return Err(HttpSetupError::NoSecretStore {
                server: parts.server.clone(),
            });
        };
        let machine = matches!(
            cfg.oauth.as_ref().map(|o| o.grant),
            Some(
                crate::messages::config::OAuthGrant::ClientCredentials
                    | crate::messages::config::OAuthGrant::Enterprise
                    | crate::messages::config::OAuthGrant::JwtBearer
            )
        );
        if machine {
            // A machine client needs nobody: a fresh token at every connect.
            // rmcp's client-credentials future is not Send (it holds the
            // JWT signer across an await), so it runs on a blocking thread
            // of this runtime.
            let (server, cfg, store) = (parts.server.clone(), cfg.clone(), store.clone());
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                handle.block_on(async move {
                    let nobody = crate::oauth::HeadlessAuthorization::default();
                    let ask = crate::oauth::LoginRequest::default();
                    crate::oauth::login(&server, &cfg, store, &nobody, &ask).await
                })
            })
            .await
            .map_err(|source| HttpSetupError::TokenTask {
                server: parts.server.clone(),
                source,
            })??;
        }
        let connecting = crate::oauth::manager(&parts.server, &cfg.url, store.clone()).await?;
        // TRUST-2: a server that echoes its token shows "[redacted]".
        parts
            .diag
            .add_redactions(crate::oauth::token_values(&parts.server, &cfg.url, store).await);
        // Without a stored token the requests go out unauthenticated: a
        // server that wants one answers 401, and the error says to log in.
        transport(cfg, parts, Some((connecting.manager, connecting.dpop)))
    }
    #[cfg(not(feature = "oauth"))]
    Err(HttpSetupError::NoOAuthFeature {
        server: parts.server,
    })
}

/// The authorization manager, and the DPoP key its tokens are bound to.
#[cfg(feature = "oauth")]
type Manager = (
    rmcp::transport::auth::AuthorizationManager,
    Option<Arc<crate::oauth::DpopKey>>,
);
#[cfg(not(feature = "oauth"))]
type Manager = std::convert::Infallible;

fn transport(
    cfg: &HttpConfig,
    parts: HttpParts,
    manager: Option<Manager>,
) -> Result<StreamableHttpClientTransport<TappedClient>, HttpSetupError> {
    let HttpParts {
        secret_headers,
        diag,
        session_lost,
        replay_for_chaos,
        server,
        secrets: _,
    } = parts;
    // TRUST-3: checked again at dial time (a config built in code may skip validate()).
    crate::messages::trust::validate_endpoint(&cfg.url)?;
    let mut headers = HashMap::new();
    for (name, value) in &cfg.headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|source| {
            HttpSetupError::HeaderName {
                name: name.clone(),
                source,
            }
        })?;
        let v = HeaderValue::from_str(value).map_err(|source| HttpSetupError::HeaderValue {
            name: name.clone(),
            source,
        })?;
        headers.insert(n, v);
    }
    for (name, secret) in &secret_headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|source| {
            HttpSetupError::HeaderName {
                name: name.clone(),
                source,
            }
        })?;
        // The error never quotes the value.
        let mut v = HeaderValue::from_str(secret.expose())
            .map_err(|_| HttpSetupError::SecretHeaderValue { name: name.clone() })?;
        v.set_sensitive(true);
        headers.insert(n, v);
    }
    let inner = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(HttpSetupError::Client)?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(cfg.url.as_str())
        .custom_headers(headers)
        .reinit_on_expired_session(replay_for_chaos);
    let mut retry = ExponentialBackoff::default();
    retry.max_times = Some(SSE_RETRIES);
    retry.max_delay = Some(Duration::from_secs(10));
    config.retry_config = Arc::new(retry);
    let no_credentials = cfg.headers.is_empty() && secret_headers.is_empty() && manager.is_none();
    let oauth_server = cfg.oauth.as_ref().map(|_| server);
    let inner = match manager {
        None => Inner::Plain(inner),
        #[cfg(feature = "oauth")]
        Some((m, None)) => Inner::Auth(rmcp::transport::auth::AuthClient::new(inner, m)),
        #[cfg(feature = "oauth")]
        Some((m, Some(key))) => Inner::Dpop(super::dpop::DpopWire {
            client: inner.clone(),
            auth: rmcp::transport::auth::AuthClient::new(inner, m),
            key,
        }),
        #[cfg(not(feature = "oauth"))]
        Some(never) => match never {},
    };
    Ok(StreamableHttpClientTransport::with_client(
        TappedClient {
            inner,
            diag,
            session_lost,
            replay_for_chaos,
            no_credentials,
            oauth_server,
        },
        config,
    ))
}

/// A request that never got an answer, in words: a refused
/// connection, a DNS failure, a TLS failure and a timeout read
/// differently, each keeping its own text, and no type names.
pub(crate) fn reqwest_cause(e: &reqwest::Error) -> String {
    let url = e
        .url()
        .map(|u| u.to_string())
        .unwrap_or_else(|| "the server".into());
    let mut chain = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        chain.push(x.to_string());
        cur = x.source();
    }
    let lower = chain.join(" | ").to_lowercase();
    let deepest = chain.last().cloned().unwrap_or_default();
    let cause = if e.is_timeout() || lower.contains("timed out") {
        "no answer in time (timeout)".to_owned()
    } else if lower.contains("connection refused") {
        "connection refused (nothing listens there)".to_owned()
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        let dns = chain
            .iter()
            .rev()
            .find(|c| c.to_lowercase().contains("lookup") || c.to_lowercase().contains("dns"))
            .cloned()
            .unwrap_or(deepest);
        format!("dns error: {}", dns.trim_start_matches("dns error: "))
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("ssl") {
        format!("TLS failure: {deepest}")
    } else {
        deepest
    };
    format!("cannot reach {url}: {cause}")
}

/// An HTTP answer that is not MCP, short: its status, and at most a
/// 200-byte excerpt of a text body; an HTML page is named, not pasted.
fn unexpected_response(text: &str) -> String {
    let (head, body) = text.split_once(": ").unwrap_or((text, ""));
    let body = body.trim();
    let lower = body.to_lowercase();
    if lower.starts_with("<!doctype") || lower.starts_with("<html") || lower.contains("<body") {
        return format!(
            "the server answered {head} with an HTML page, not MCP: is the URL the MCP endpoint (often ending in /mcp)?"
        );
    }
    if body.is_empty() {
        return format!("the server answered {head}, not MCP");
    }
    let end = crate::messages::budget::floor_char_boundary(body, 200);
    let more = if end < body.len() { "…" } else { "" };
    format!(
        "the server answered {head}, not MCP: {}{more}",
        &body[..end]
    )
}

/// Why a POST that failed with `e` certainly did not run its request, in
/// words; `None` when the server may have received it.
fn refused_unrun(e: &StreamableHttpError<reqwest::Error>) -> Option<String> {
    match e {
        StreamableHttpError::SessionExpired => Some(
            "the server had ended the session (HTTP 404 for its Mcp-Session-Id) and refused the request"
                .into(),
        ),
        StreamableHttpError::Client(re) if re.is_connect() => {
            Some(format!("the request never reached the server ({})", reqwest_cause(re)))
        }
        _ => None,
    }
}

/// The client under the taps: plain, sending an OAuth token (CONN-13),
/// or sending a DPoP-bound one with its proofs (ERA-8).
#[derive(Clone, Debug)]
enum Inner {
    Plain(reqwest::Client),
    #[cfg(feature = "oauth")]
    Auth(rmcp::transport::auth::AuthClient<reqwest::Client>),
    #[cfg(feature = "oauth")]
    Dpop(super::dpop::DpopWire),
}

/// Call the same method on whichever rmcp client is under the taps, or
/// the DPoP one's own.
macro_rules! on_inner {
    ($self:expr, $c:ident => $call:expr, $d:ident => $dpop:expr) => {
        match &$self.inner {
            Inner::Plain($c) => $call,
            #[cfg(feature = "oauth")]
            Inner::Auth($c) => $call,
            #[cfg(feature = "oauth")]
            Inner::Dpop($d) => $dpop,
        }
    };
}

/// rmcp's reqwest client with the taps described in the module docs.
#[derive(Clone, Debug)]
pub struct TappedClient {
    inner: Inner,
    diag: Arc<Diagnostics>,
    /// Cancelled when the server answers 404 for the held session.
    session_lost: CancellationToken,
    /// Test-only (`ChaosSwitches::replay_expired_sessions`): rmcp's replay.
    replay_for_chaos: bool,
    /// No header was configured at all: a 401 then means none were sent.
    no_credentials: bool,
    /// The server's name when it uses OAuth: a 401 then says to log in.
    oauth_server: Option<String>,
}

impl TappedClient {
    fn note_error<T>(
        &self,
        r: Result<T, StreamableHttpError<reqwest::Error>>,
    ) -> Result<T, StreamableHttpError<reqwest::Error>> {
        if let Err(e) = &r {
            let status = match e {
                StreamableHttpError::AuthRequired(_) => Some(401),
                // A step-up refusal is one call's (its outcome says so), not
                // the connection's: it must not become the cause of a later end.
                StreamableHttpError::InsufficientScope(_) => None,
                // An unchallenged 401/403 keeps its status in the error text.
                StreamableHttpError::UnexpectedServerResponse(text) => text
                    .split(|c: char| !c.is_ascii_digit())
                    .find(|w| *w == "401" || *w == "403")
                    .and_then(|w| w.parse().ok()),
                _ => None,
            };
            if let Some(status) = status {
                let mut why = format!("the server rejected the credentials (HTTP {status})");
                if let Some(server) = &self.oauth_server {
                    why = format!(
                        "authorization required (HTTP {status}): run `mcpvisor auth login {server}`"
                    );
                } else if self.no_credentials {
                    why.push_str(
                        ": none were sent; add `headers`, or `header_secrets` naming a secret of [secrets], to the server's section, or an `[servers.<name>.oauth]` table for OAuth",
                    );
                }
                self.diag.set_fatal(why);
            }
            #[cfg(feature = "oauth")]
            if let (StreamableHttpError::Auth(a), Some(server)) = (e, &self.oauth_server) {
                self.diag.set_fatal(crate::oauth::describe(server, a));
            }
            if let StreamableHttpError::Client(re) = e {
                self.diag.set_fatal(reqwest_cause(re));
            }
            if let StreamableHttpError::UnexpectedServerResponse(text) = e
                && status.is_none()
            {
                self.diag.set_fatal(unexpected_response(text));
            }
            if matches!(e, StreamableHttpError::SessionExpired) && !self.replay_for_chaos {
                self.diag.set_fatal(
                    "the server ended the session (HTTP 404 for its Mcp-Session-Id)".into(),
                );
                self.session_lost.cancel();
            }
        }
        r
    }

    fn tap_stream(
        &self,
        stream: BoxStream<'static, Result<Sse, SseError>>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        let diag = self.diag.clone();
        stream
            .inspect(move |event| {
                if let Ok(Sse {
                    data: Some(data), ..
                }) = event
                    && data.contains("\"tools\"")
                {
                    diag.tap_tools_page(data.as_bytes());
                }
            })
            .boxed()
    }
}

impl StreamableHttpClient for TappedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        // CALL-5: a failed call the server never received is "not sent",
        // so what reached the wire is recorded, and what was refused unrun.
        let call_id = match &message {
            rmcp::model::JsonRpcMessage::Request(r)
                if matches!(r.request, rmcp::model::ClientRequest::CallToolRequest(_)) =>
            {
                let key = super::stdio::request_id_key(&r.id);
                self.diag.deliveries.handed(key.clone());
                Some(key)
            }
            _ => None,
        };
        let r = on_inner!(self, c => c
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await,
            d => d.post(uri, message, session_id, custom_headers).await);
        if let (Some(id), Err(e)) = (&call_id, &r)
            && let Some(why) = refused_unrun(e)
        {
            self.diag.deliveries.refused(id, why);
        }
        // A step-up refusal of anything but a call (the opening, a list)
        // is the connection's: its end says which scope to log in with.
        if let (None, Err(StreamableHttpError::InsufficientScope(e))) = (&call_id, &r) {
            let scope = e.required_scope.as_deref().unwrap_or_default();
            let mut why = format!(
                "the server requires more authorization (HTTP 403 insufficient_scope, scope \"{scope}\")"
            );
            if let Some(server) = &self.oauth_server {
                why.push_str(&format!(
                    ": run `mcpvisor auth login {server} --scope \"{scope}\"`"
                ));
            }
            self.diag.set_fatal(why);
        }
        match self.note_error(r)? {
            StreamableHttpPostResponse::Sse(stream, session) => Ok(
                StreamableHttpPostResponse::Sse(self.tap_stream(stream), session),
            ),
            other => Ok(other),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        on_inner!(self, c => c
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await,
            d => d.delete_session(uri, session_id, custom_headers).await)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let r = on_inner!(self, c => c
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await,
            d => d.get_stream(uri, session_id, last_event_id, custom_headers).await);
        self.note_error(r)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let r = on_inner!(self, c => c
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await,
            d => d.get_stream(uri, session_id, last_event_id, custom_headers).await);
        self.note_error(r)
    }
}
