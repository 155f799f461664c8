//! The trust gate against a real server (TRUST-4, TRUST-5, TRUST-6): a refused
//! call never reaches the server (checked in fault-server's request log), and
//! grants follow Always Allow / Allow This Chat / Don't Allow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mcpvisor::{
    Approval, CallOptions, OutcomeKind, Runtime, RuntimeBuilder, RuntimeEvent, Scope, ToolOutcome,
    TrustMode,
};
use mcpvisor_chaos::{
    RequestLog, ScriptedApprover, fault_server_config, shutdown_checked, start_logged_server,
    start_with_server,
};
use serde_json::json;

const G: Scope = Scope::Global;

/// A runtime from `builder` with one fault-server `srv` of that trust,
/// logging its requests, ready.
async fn runtime(builder: RuntimeBuilder, trust: TrustMode) -> (Runtime, RequestLog) {
    start_logged_server(builder, trust).await.unwrap()
}

async fn echo(rt: &Runtime, chat: &str, message: &str) -> ToolOutcome {
    let options = CallOptions {
        chat: Some(chat.into()),
        ..CallOptions::default()
    };
    rt.call(
        &G,
        "mcp__srv__echo",
        Some(json!({"message": message})),
        options,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_refuses_without_asking_and_the_server_never_sees_the_call() {
    let approver = Arc::new(ScriptedApprover::new(vec![Approval::AlwaysAllow]));
    let (rt, log) = runtime(
        Runtime::builder().approver(approver.clone()),
        TrustMode::Never,
    )
    .await;
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    // TRUST-6: an honest sentence for the model.
    assert!(
        out.projection.contains("does not allow the tool"),
        "{}",
        out.projection
    );
    assert!(approver.asked().is_empty(), "never does not ask");
    assert_eq!(log.tool_calls(), 0);
    shutdown_checked(&rt, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_without_an_approver_is_dont_allow() {
    let (rt, log) = runtime(Runtime::builder(), TrustMode::Ask).await;
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(
        out.projection.contains("no approver is configured"),
        "{}",
        out.projection
    );
    assert_eq!(log.tool_calls(), 0);
    shutdown_checked(&rt, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_the_answers_per_chat_and_always() {
    // Answers are popped from the end: DontAllow, then AllowThisChat, then AlwaysAllow.
    let approver = Arc::new(ScriptedApprover::new(vec![
        Approval::AlwaysAllow,
        Approval::AllowThisChat,
        Approval::DontAllow,
    ]));
    let (rt, log) = runtime(
        Runtime::builder().approver(approver.clone()),
        TrustMode::Ask,
    )
    .await;
    let mut events = rt.subscribe();
    // Don't Allow denies this one call; the next call asks again.
    let out = echo(&rt, "c1", "first").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(out.projection.contains("declined"), "{}", out.projection);
    // Allow This Chat: c1 is granted, the next call in c1 is not asked.
    assert!(echo(&rt, "c1", "second").await.is_ok());
    assert!(echo(&rt, "c1", "third").await.is_ok());
    assert_eq!(approver.asked().len(), 2);
    // Another chat asks again; Always Allow persists for every chat.
    assert!(echo(&rt, "c2", "fourth").await.is_ok());
    assert!(echo(&rt, "c3", "fifth").await.is_ok());
    let asked = approver.asked();
    assert_eq!(asked.len(), 3);
    assert_eq!(asked[0].server, "srv");
    assert_eq!(asked[0].tool, "mcp__srv__echo");
    assert_eq!(asked[0].arguments, json!({"message": "first"}));
    assert_eq!(
        log.tool_calls(),
        4,
        "the denied call never reached the server"
    );
    let mut decisions = 0;
    while let Ok(ev) = events.try_recv() {
        if matches!(ev, RuntimeEvent::TrustDecision { .. }) {
            decisions += 1;
        }
    }
    assert_eq!(decisions, 5, "every call's trust decision is an event");
    shutdown_checked(&rt, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust7_routes_without_tool_support_are_offered_no_tools() {
    let (rt, _log) = runtime(Runtime::builder(), TrustMode::Always).await;
    assert!(
        rt.tools_for_route(&G, true)
            .iter()
            .any(|t| t.name == "mcp__srv__echo")
    );
    assert!(rt.tools_for_route(&G, false).is_empty());
    shutdown_checked(&rt, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust4_per_tool_never_holds_even_after_always_allow() {
    let approver = Arc::new(ScriptedApprover::new(vec![Approval::AlwaysAllow]));
    let log = RequestLog::new("tool-trust.log");
    let mut cfg = fault_server_config("srv", log.args());
    cfg.trust = TrustMode::Ask;
    cfg.tool_trust.insert("echo".into(), TrustMode::Never);
    let rt = start_with_server(Runtime::builder().approver(approver.clone()), G, cfg)
        .await
        .unwrap();
    // Another tool of the server asks, and the answer is Always Allow.
    let ok = rt
        .call(&G, "mcp__srv__structured_ok", None, CallOptions::default())
        .await;
    assert!(ok.is_ok(), "{}", ok.projection);
    assert_eq!(approver.asked().len(), 1);
    // The tool configured `never` stays refused, without asking.
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(
        out.projection.contains("trust is set to never"),
        "{}",
        out.projection
    );
    assert_eq!(approver.asked().len(), 1);
    assert_eq!(log.tool_calls(), 1);
    shutdown_checked(&rt, &[]).await.assert_clean();
}
