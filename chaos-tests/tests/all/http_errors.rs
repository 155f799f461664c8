//! Streamable-HTTP failure modes against small axum endpoints on 127.0.0.1
//! that misbehave on purpose (CONN-9, CONN-14).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use mcpvisor::{Runtime, Scope, ServerConfig, ServerState};

/// Serve `handler` on POST /mcp at a free loopback port; returns the URL and
/// the task (aborted by the caller).
async fn endpoint<H, T>(handler: H) -> (String, tokio::task::JoinHandle<()>)
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/mcp", post(handler));
    let task = tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    (url, task)
}

async fn first_error(url: &str) -> String {
    let mut cfg = ServerConfig::http("remote", url);
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(10);
    let runtime = Runtime::builder().start().await.unwrap();
    runtime.add_server(Scope::Global, cfg).await.unwrap();
    let err = runtime
        .wait_ready(&Scope::Global, "remote", Duration::from_secs(15))
        .await
        .unwrap_err();
    let status = runtime.status().remove(0);
    assert_eq!(status.state, ServerState::Failed);
    assert!(runtime.shutdown(Duration::from_secs(20)).await.is_clean());
    err.to_string()
}

#[tokio::test]
async fn a_401_with_a_challenge_says_the_server_rejected_the_credentials() {
    // CONN-9: 401/403 become "the server rejected the credentials" with the status.
    let (url, task) = endpoint(|| async {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"test\"")],
            "no",
        )
            .into_response()
    })
    .await;
    let err = first_error(&url).await;
    assert!(
        err.contains("the server rejected the credentials (HTTP 401)"),
        "{err}"
    );
    task.abort();
}

/// The first error of a server with `[oauth]` at `url`, with or without
/// a secret store to keep its tokens in.
async fn first_oauth_error(url: &str, store: bool) -> String {
    let mut cfg = ServerConfig::http("remote", url);
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(10);
    if let mcpvisor::TransportConfig::StreamableHttp(h) = &mut cfg.transport {
        h.oauth = Some(Box::default());
    }
    let mut builder = Runtime::builder();
    if store {
        builder = builder.secrets(std::sync::Arc::new(mcpvisor::MemorySecretStore::new()));
    }
    let runtime = builder.start().await.unwrap();
    runtime.add_server(Scope::Global, cfg).await.unwrap();
    let err = runtime
        .wait_ready(&Scope::Global, "remote", Duration::from_secs(15))
        .await
        .unwrap_err();
    assert!(runtime.shutdown(Duration::from_secs(20)).await.is_clean());
    err.to_string()
}

#[tokio::test]
async fn an_oauth_server_not_logged_in_says_to_log_in() {
    // CONN-13: with no stored token the request goes out unauthenticated;
    // the 401 names the command that fixes it.
    let (url, task) = endpoint(|| async {
        (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Bearer resource_metadata=\"http://127.0.0.1:1/.well-known/oauth-protected-resource\"",
            )],
            "log in",
        )
            .into_response()
    })
    .await;
    let err = first_oauth_error(&url, true).await;
    assert!(
        err.contains("authorization required (HTTP 401)")
            && err.contains("mcpvisor auth login remote"),
        "{err}"
    );
    // The default store (the environment) cannot keep tokens, but the
    // server is still asked, and says the same.
    let err = first_oauth_error(&url, false).await;
    assert!(err.contains("mcpvisor auth login remote"), "{err}");
    task.abort();
}

#[tokio::test]
async fn a_plain_403_says_the_server_rejected_the_credentials() {
    let (url, task) =
        endpoint(|| async { (StatusCode::FORBIDDEN, "forbidden").into_response() }).await;
    let err = first_error(&url).await;
    assert!(
        err.contains("the server rejected the credentials (HTTP 403)"),
        "{err}"
    );
    task.abort();
}

#[tokio::test]
async fn an_endpoint_that_never_answers_fails_at_the_startup_timeout_not_never() {
    // CONN-14: every request has a timeout; a dead endpoint never hangs the runtime.
    let (url, task) = endpoint(|| async {
        std::future::pending::<()>().await;
        StatusCode::OK
    })
    .await;
    let mut cfg = ServerConfig::http("stalled", &url);
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_millis(500);
    let runtime = Runtime::builder().start().await.unwrap();
    runtime.add_server(Scope::Global, cfg).await.unwrap();
    let err = runtime
        .wait_ready(&Scope::Global, "stalled", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("startup timed out after 500 ms"),
        "{err}"
    );
    assert!(runtime.shutdown(Duration::from_secs(20)).await.is_clean());
    task.abort();
}

#[tokio::test]
async fn a_closed_port_says_connection_refused_without_type_names() {
    // The cause in words, no `WorkerTransport<…>`.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let err = first_error(&url).await;
    assert!(err.contains(&format!("cannot reach {url}")), "{err}");
    assert!(err.contains("connection refused"), "{err}");
    assert!(
        !err.contains("WorkerTransport") && !err.contains("::"),
        "{err}"
    );
}

#[tokio::test]
async fn a_401_with_no_credentials_configured_says_none_were_sent_and_how_to_send_them() {
    let (url, task) =
        endpoint(|| async { (StatusCode::UNAUTHORIZED, "who are you").into_response() }).await;
    let err = first_error(&url).await;
    assert!(err.contains("HTTP 401"), "{err}");
    assert!(
        err.contains("none were sent") && err.contains("header_secrets"),
        "{err}"
    );
    task.abort();
}

#[tokio::test]
async fn a_404_html_page_is_not_pasted_into_the_error() {
    let page = format!("<html><body>{}</body></html>", "Not Found. ".repeat(200));
    let (url, task) = endpoint(move || {
        let page = page.clone();
        async move {
            (
                StatusCode::NOT_FOUND,
                [(header::CONTENT_TYPE, "text/html")],
                page,
            )
                .into_response()
        }
    })
    .await;
    let err = first_error(&url).await;
    assert!(!err.contains("<html>") && err.len() < 600, "{err}");
    assert!(err.contains("404"), "{err}");
    task.abort();
}

#[tokio::test]
async fn a_legacy_sse_url_is_named_as_unsupported() {
    // A server's legacy HTTP+SSE endpoint is not a streamable one.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/sse",
        axum::routing::get(|| async { "event: endpoint\ndata: /messages\n\n" }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    let err = first_error(&url).await;
    assert!(
        err.contains("legacy HTTP+SSE transport, which is not supported"),
        "{err}"
    );
    task.abort();
}
