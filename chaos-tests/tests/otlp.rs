//! Issue 35 (SCALE-6): the call spans exported over OTLP (feature `otlp`,
//! the `tracing` ecosystem's layer). A call continuing a W3C trace is
//! exported as the caller's span's child in the same trace, its policy and
//! backend spans as its children, and the backend is sent that exported
//! span as its parent: the hops join up in a tracing backend. A call that
//! came with no trace starts one. The
//! collector is a loopback OTLP/HTTP endpoint taking `http/json`. Its own
//! test binary: it sets the process's environment and global subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpvisor::{CallOptions, OtlpExport, Runtime, Scope, TraceContext, TrustMode};
use mcpvisor_chaos::{RequestLog, fault_server_config, start_with_server};
use serde_json::{Value, json};

/// An OTLP/HTTP traces endpoint on loopback: its address and the bodies
/// it took.
async fn collector() -> (std::net::SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    "{}",
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, got)
}

/// Every exported span: (name, traceId, spanId, parentSpanId).
fn spans(bodies: &[Value]) -> Vec<(String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    bodies
        .iter()
        .flat_map(|b| b["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["spans"].as_array().cloned().unwrap_or_default())
        .map(|sp| {
            (
                s(&sp["name"]),
                s(&sp["traceId"]),
                s(&sp["spanId"]),
                s(&sp["parentSpanId"]),
            )
        })
        .collect()
}

#[test]
fn a_traced_call_is_exported_as_the_callers_child_and_the_backends_parent() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, got) = rt.block_on(collector());
    // SAFETY: this binary's one test sets them before any other thread of
    // its own reads the environment.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"));
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    }
    let export = OtlpExport::from_env("mcpvisor-test")
        .unwrap()
        .expect("an endpoint is set");
    {
        use tracing_subscriber::prelude::*;
        tracing_subscriber::registry().with(export.layer()).init();
    }
    let (trace, parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let log = RequestLog::new("otlp");
    let outcome = rt.block_on(async {
        let mut cfg = fault_server_config("s", log.args());
        cfg.trust = TrustMode::Always;
        let runtime = start_with_server(Runtime::builder(), Scope::Global, cfg)
            .await
            .unwrap();
        let options = CallOptions {
            trace: TraceContext::continue_from(
                &format!("00-{trace}-{parent}-01"),
                Some("congo=t61rcWkgMzE"),
            ),
            ..CallOptions::default()
        };
        let outcome = runtime
            .call(
                &Scope::Global,
                "mcp__s__echo",
                Some(json!({"message": "traced"})),
                options,
            )
            .await;
        // A call that came with no trace starts one.
        let untraced = runtime
            .call(
                &Scope::Global,
                "mcp__s__echo",
                Some(json!({"message": "untraced"})),
                CallOptions::default(),
            )
            .await;
        assert!(untraced.is_ok(), "{}", untraced.projection);
        assert!(runtime.shutdown(Duration::from_secs(20)).await.is_clean());
        outcome
    });
    assert!(outcome.is_ok(), "{}", outcome.projection);
    // The batch goes out when the exporter stops.
    export.shutdown().unwrap();
    let spans = spans(&got.lock().unwrap());
    // Only the call's spans: not the actors' per-message ones.
    assert!(
        spans.iter().all(|s| s.0.starts_with("mcpvisor.")),
        "{spans:?}"
    );
    let call = spans
        .iter()
        .find(|s| s.0 == "mcpvisor.call" && s.1 == trace)
        .unwrap_or_else(|| panic!("no call span in {spans:?}"));
    assert_eq!(
        (call.1.as_str(), call.3.as_str()),
        (trace, parent),
        "{spans:?}"
    );
    for child in ["mcpvisor.backend", "mcpvisor.policy"] {
        let c = spans
            .iter()
            .find(|s| s.0 == child)
            .unwrap_or_else(|| panic!("no {child} span in {spans:?}"));
        assert_eq!(
            (c.1.as_str(), c.3.as_str()),
            (trace, call.2.as_str()),
            "{spans:?}"
        );
    }
    // The backend's parent is the exported call span.
    let sent = log.traceparent_of("traced");
    assert_eq!(
        sent,
        Some(format!("00-{trace}-{}-01", call.2)),
        "{}",
        log.text()
    );
    // The untraced call: a root span of a trace of its own, the backend's
    // parent all the same.
    let root = spans
        .iter()
        .find(|s| s.0 == "mcpvisor.call" && s.1 != trace)
        .unwrap_or_else(|| panic!("no root call span in {spans:?}"));
    assert_eq!(root.3, "", "{spans:?}");
    assert_eq!(
        log.traceparent_of("untraced"),
        Some(format!("00-{}-{}-01", root.1, root.2)),
        "{}",
        log.text()
    );
    rt.shutdown_timeout(Duration::from_secs(2));
}
