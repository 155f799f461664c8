//! The model's HTTP client: one round's request sent to the endpoint (the
//! endpoint rule, TRUST-3) and its SSE stream read through the codec's
//! decoder, with the vendor's error message kept.

use super::*;

impl Runtime {
    pub(super) async fn model_client(&self, route: &ModelRoute) -> Result<ModelClient, TurnError> {
        validate_endpoint(&route.endpoint).map_err(|e| TurnError::Route(e.to_string()))?;
        let key =
            match &route.key_secret {
                Some(name) => {
                    Some(self.inner.secrets.get(name).await.map_err(|e| {
                        TurnError::Route(format!("the model's API key {name:?}: {e}"))
                    })?)
                }
                None => None,
            };
        let base = route.endpoint.trim_end_matches('/');
        let url = match route.provider {
            Provider::OpenAi => format!("{base}/chat/completions"),
            Provider::Anthropic => format!("{base}/v1/messages"),
            Provider::OpenAiResponses => format!("{base}/responses"),
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(route.idle_timeout)
            .build()
            .map_err(|e| TurnError::Transport(e.to_string()))?;
        Ok(ModelClient {
            http,
            url,
            provider: route.provider,
            key,
        })
    }
}

/// The `anthropic-beta` value of tool search with deferred loading.
pub(super) const ANTHROPIC_TOOL_SEARCH_BETA: &str = "advanced-tool-use-2025-11-20";

/// One model endpoint, for the rounds of a turn.
pub(super) struct ModelClient {
    http: reqwest::Client,
    url: String,
    provider: Provider,
    key: Option<crate::messages::trust::Secret>,
}

impl ModelClient {
    /// Send one round's body and read its stream, emitting deltas.
    pub(super) async fn round(
        &self,
        body: &Value,
        emit: &impl Fn(TurnEvent),
    ) -> Result<Round, TurnError> {
        let mut req = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body.to_string());
        match (self.provider, &self.key) {
            (Provider::OpenAi | Provider::OpenAiResponses, Some(k)) => {
                req = req.header(
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", k.expose()),
                );
            }
            (Provider::Anthropic, key) => {
                req = req.header("anthropic-version", "2023-06-01");
                // Deferred loading (`defer_loading`, `tool_reference`) is
                // the tool search beta's.
                let deferring = body
                    .get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|t| t.iter().any(|t| t.get("defer_loading").is_some()));
                if deferring {
                    req = req.header("anthropic-beta", ANTHROPIC_TOOL_SEARCH_BETA);
                }
                if let Some(k) = key {
                    req = req.header("x-api-key", k.expose());
                }
            }
            (Provider::OpenAi | Provider::OpenAiResponses, None) => {}
        }
        let resp = req
            .send()
            .await
            .map_err(|e| TurnError::Transport(chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let text = resp.text().await.unwrap_or_default();
            return Err(TurnError::Http {
                status: status.as_u16(),
                message: http_error_message(&text),
                retry_after,
            });
        }
        let mut decoder = Decoder::new(self.provider);
        let mut stream = sse_stream::SseStream::from_bytes_stream(resp.bytes_stream());
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|e| {
                let why = match &e {
                    sse_stream::Error::Body(inner) => chain(inner.as_ref()),
                    other => other.to_string(),
                };
                TurnError::Stream(format!("the model's stream broke: {why}"))
            })?;
            let Some(data) = ev.data.as_deref() else {
                continue;
            };
            let deltas = decoder
                .feed(ev.event.as_deref(), data)
                .map_err(|e| TurnError::Stream(e.to_string()))?;
            for d in deltas {
                emit(match d {
                    Delta::Text(text) => TurnEvent::Text { text },
                    Delta::Thinking(text) => TurnEvent::Thinking { text },
                });
            }
            if decoder.is_done() {
                break;
            }
        }
        decoder
            .finish()
            .map_err(|e| TurnError::Stream(e.to_string()))
    }
}

/// An error and its sources, joined with `: ` (a read timeout says so).
pub(super) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The message of an error body: `error.message` of its JSON (both vendors
/// use that shape), else its start.
pub(super) fn http_error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| openai::clip(body.trim()))
}
