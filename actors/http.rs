//! Streamable-HTTP transport glue for the `Connection` actor (CONN-9).
//!
//! rmcp's reqwest client does the protocol work: one POST per message, JSON or
//! SSE replies, `Mcp-Session-Id` capture and replay, `MCP-Protocol-Version` on
//! every request, re-initialisation after a 404 on a held session. We supply a
//! reqwest client with connection pooling (rmcp's default client disables it,
//! which costs a TCP handshake per call), no cross-origin redirects, TLS
//! through rustls, and the configured headers.

use std::collections::HashMap;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;

use crate::messages::config::HttpConfig;

/// Build the transport for one connection attempt.
pub fn transport(
    cfg: &HttpConfig,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let mut headers = HashMap::new();
    for (name, value) in &cfg.headers {
        let n = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header name {name:?} is invalid: {e}"))?;
        let v = http::HeaderValue::from_str(value)
            .map_err(|e| format!("header {name:?} has an invalid value: {e}"))?;
        headers.insert(n, v);
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))?;
    let config = StreamableHttpClientTransportConfig::with_uri(cfg.url.as_str())
        .custom_headers(headers)
        .reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(client, config))
}
