//! The streamable-HTTP requests of a server whose tokens are DPoP-bound
//! (RFC 9449, SEP-1932).
//!
//! rmcp's reqwest client sends a token under the `Bearer` scheme and keeps
//! none of a refusal's headers, so a server's `DPoP-Nonce` would be lost.
//! Here each request carries `Authorization: DPoP <token>` and a fresh
//! proof bound to the method, the URL and the token; a 401
//! `use_dpop_nonce` with a new nonce sends the request once more with it
//! (the server refused it unrun, RFC 9449 §9). The answer is read as
//! rmcp's client reads it: 202 accepted, a JSON reply, an SSE stream, 401
//! and 403 challenges, 404 on a held session, a refused `server/discover`
//! made into a JSON-RPC error for the opening's fallback.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorData, ServerJsonRpcMessage};
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, SseError, StreamableHttpError,
    StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

use crate::oauth::DpopKey;

type Error = StreamableHttpError<reqwest::Error>;

/// The longest error body kept for a message.
const MAX_ERROR_BODY: usize = 64 * 1024;
const SESSION_HEADER: &str = "mcp-session-id";
const LAST_EVENT_HEADER: &str = "last-event-id";

/// A DPoP-bound connection's requests.
#[derive(Clone)]
pub(crate) struct DpopWire {
    pub(crate) client: reqwest::Client,
    /// rmcp's authorization client: the token, refreshed when it expires.
    pub(crate) auth: AuthClient<reqwest::Client>,
    pub(crate) key: Arc<DpopKey>,
}

impl std::fmt::Debug for DpopWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopWire")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl DpopWire {
    /// Send a request built by `build`, authorized with a fresh proof;
    /// once more with a nonce the server asks for.
    async fn send(
        &self,
        method: reqwest::Method,
        uri: &str,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        let token = self.auth.get_access_token().await?;
        let mut first = true;
        loop {
            let proof = self
                .key
                .proof(method.as_str(), uri, Some(&token))
                .map_err(|e| Error::UnexpectedServerResponse(Cow::Owned(e.to_string())))?;
            let request = self
                .client
                .request(method.clone(), uri)
                .header(http::header::AUTHORIZATION, format!("DPoP {token}"))
                .header(crate::oauth::DPOP_HEADER, proof);
            let response = build(request).send().await?;
            let nonce = response
                .headers()
                .get(crate::oauth::NONCE_HEADER)
                .and_then(|v| v.to_str().ok());
            let new_nonce = nonce.is_some_and(|n| self.key.remember_nonce(uri, n));
            let asks_nonce = response.status() == StatusCode::UNAUTHORIZED
                && challenge(&response).is_some_and(|c| c.contains("use_dpop_nonce"));
            if first && asks_nonce && new_nonce {
                first = false;
                continue;
            }
            return Ok(response);
        }
    }

    pub(crate) async fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let body = serde_json::to_vec(&message)
            .map_err(|e| Error::UnexpectedServerResponse(Cow::Owned(e.to_string())))?;
        let response = self
            .send(reqwest::Method::POST, &uri, |r| {
                let mut r = r
                    .header(http::header::ACCEPT, "application/json, text/event-stream")
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
                for (name, value) in &custom_headers {
                    r = r.header(name, value);
                }
                if let Some(id) = &session_id {
                    r = r.header(SESSION_HEADER, id.as_ref());
                }
                r
            })
            .await?;
        refused(&response)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(Error::SessionExpired);
        }
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        let content_type = content_type(&response);
        if !status.is_success() {
            let body = bounded_text(response).await;
            if let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                serde_json::from_str::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session));
            }
            // A refused opening probe reads as the JSON-RPC error the
            // opening falls back on.
            if let ClientJsonRpcMessage::Request(r) = &message
                && matches!(r.request, ClientRequest::DiscoverRequest(_))
                && session_id.is_none()
                && status.is_client_error()
            {
                let error = ErrorData::invalid_request(
                    format!("server/discover rejected with HTTP {status}: {body}"),
                    None,
                );
                return Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::error(error, Some(r.id.clone())),
                    None,
                ));
            }
            return Err(Error::UnexpectedServerResponse(Cow::Owned(format!(
                "HTTP {status}: {body}"
            ))));
        }
        match content_type.as_deref() {
            Some(ct) if ct.starts_with("text/event-stream") => {
                Ok(StreamableHttpPostResponse::Sse(sse(response), session))
            }
            Some(ct) if ct.starts_with("application/json") => {
                let body = response.bytes().await?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(reply) => Ok(StreamableHttpPostResponse::Json(reply, session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(Error::UnexpectedServerResponse(Cow::Owned(format!(
                        "the reply is not JSON-RPC: {e}"
                    )))),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            _ => Err(Error::UnexpectedContentType(content_type)),
        }
    }

    pub(crate) async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let response = self
            .send(reqwest::Method::GET, &uri, |r| {
                let mut r = r.header(http::header::ACCEPT, "text/event-stream");
                for (name, value) in &custom_headers {
                    r = r.header(name, value);
                }
                if let Some(id) = &session_id {
                    r = r.header(SESSION_HEADER, id.as_ref());
                }
                if let Some(id) = &last_event_id {
                    r = r.header(LAST_EVENT_HEADER, id);
                }
                r
            })
            .await?;
        refused(&response)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(Error::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() {
            let status = response.status();
            let body = bounded_text(response).await;
            return Err(Error::UnexpectedServerResponse(Cow::Owned(format!(
                "HTTP {status}: {body}"
            ))));
        }
        match content_type(&response) {
            Some(ct) if ct.starts_with("text/event-stream") => Ok(sse(response)),
            other => Err(Error::UnexpectedContentType(other)),
        }
    }

    pub(crate) async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let response = self
            .send(reqwest::Method::DELETE, &uri, |r| {
                let mut r = r.header(SESSION_HEADER, session_id.as_ref());
                for (name, value) in &custom_headers {
                    r = r.header(name, value);
                }
                r
            })
            .await?;
        refused(&response)?;
        Ok(())
    }
}

fn challenge(response: &reqwest::Response) -> Option<&str> {
    response
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
}

/// A 401 or 403 with a challenge, as rmcp's client reports it.
fn refused(response: &reqwest::Response) -> Result<(), Error> {
    let Some(challenge) = challenge(response) else {
        return Ok(());
    };
    match response.status() {
        StatusCode::UNAUTHORIZED => Err(Error::AuthRequired(AuthRequiredError::new(
            challenge.to_owned(),
        ))),
        StatusCode::FORBIDDEN => {
            let scope = challenge
                .split_once("scope=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(s, _)| s.to_owned());
            Err(Error::InsufficientScope(InsufficientScopeError::new(
                challenge.to_owned(),
                scope,
            )))
        }
        _ => Ok(()),
    }
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase())
}

/// The largest SSE event read (as rmcp's client bounds it).
const MAX_SSE_EVENT: usize = 16 * 1024 * 1024;

/// Why an SSE body stopped.
#[derive(Debug, thiserror::Error)]
enum SseBodyError {
    /// The body could not be read.
    #[error(transparent)]
    Read(reqwest::Error),
    /// An event is longer than [`MAX_SSE_EVENT`].
    #[error("an SSE event of the server is longer than {MAX_SSE_EVENT} bytes")]
    TooLong,
}

/// The body's events; a stream whose event outgrows [`MAX_SSE_EVENT`]
/// ends with an error instead of growing without bound.
fn sse(response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
    let mut since_boundary = 0usize;
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(SseBodyError::Read)?;
        since_boundary = match chunk.windows(2).rposition(|w| w == b"\n\n") {
            Some(at) => chunk.len() - at - 2,
            None => since_boundary.saturating_add(chunk.len()),
        };
        if since_boundary > MAX_SSE_EVENT {
            return Err(SseBodyError::TooLong);
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// At most [`MAX_ERROR_BODY`] bytes of a body, as text.
async fn bounded_text(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = MAX_ERROR_BODY.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}
