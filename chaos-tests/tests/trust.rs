//! The trust gate against a real server (TRUST-4, TRUST-5, TRUST-6): a refused
//! call never reaches the server (checked in fault-server's request log), and
//! grants follow Always Allow / Allow This Chat / Don't Allow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use mcpvisor::{
    Approval, ApprovalRequest, Approver, CallOptions, OutcomeKind, Runtime, RuntimeEvent, Scope,
    ServerConfig, ToolOutcome, TrustMode,
};
use mcpvisor_chaos::{fault_server_path, shutdown_checked, unique_temp_path};
use serde_json::json;

const G: Scope = Scope::Global;

/// Answers from a script and records every request.
struct Scripted {
    answers: Mutex<Vec<Approval>>,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Scripted {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            self.asked.lock().unwrap().push(request.clone());
            self.answers
                .lock()
                .unwrap()
                .pop()
                .unwrap_or(Approval::DontAllow)
        })
    }
}

async fn runtime(
    trust: TrustMode,
    approver: Option<Arc<Scripted>>,
) -> (Runtime, std::path::PathBuf) {
    let log = unique_temp_path("trust.log");
    let mut b = Runtime::builder();
    if let Some(a) = approver {
        b = b.approver(a);
    }
    let rt = b.start().await.unwrap();
    let mut cfg = ServerConfig::stdio(
        "srv",
        fault_server_path().to_string_lossy(),
        vec!["--log-requests".into(), log.to_string_lossy().into_owned()],
    );
    cfg.trust = trust;
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "srv", Duration::from_secs(20))
        .await
        .unwrap();
    (rt, log)
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

fn calls_logged(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("tools/call"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_refuses_without_asking_and_the_server_never_sees_the_call() {
    let approver = Arc::new(Scripted {
        answers: Mutex::new(vec![Approval::AlwaysAllow]),
        asked: Mutex::default(),
    });
    let (rt, log) = runtime(TrustMode::Never, Some(approver.clone())).await;
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    // TRUST-6: an honest sentence for the model.
    assert!(
        out.projection.contains("does not allow the tool"),
        "{}",
        out.projection
    );
    assert!(
        approver.asked.lock().unwrap().is_empty(),
        "never does not ask"
    );
    assert_eq!(calls_logged(&log), 0);
    assert!(shutdown_checked(&rt, &[]).await.report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_without_an_approver_is_dont_allow() {
    let (rt, log) = runtime(TrustMode::Ask, None).await;
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(
        out.projection.contains("no approver is configured"),
        "{}",
        out.projection
    );
    assert_eq!(calls_logged(&log), 0);
    assert!(shutdown_checked(&rt, &[]).await.report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_the_answers_per_chat_and_always() {
    // Answers are popped from the end: DontAllow, then AllowThisChat, then AlwaysAllow.
    let approver = Arc::new(Scripted {
        answers: Mutex::new(vec![
            Approval::AlwaysAllow,
            Approval::AllowThisChat,
            Approval::DontAllow,
        ]),
        asked: Mutex::default(),
    });
    let (rt, log) = runtime(TrustMode::Ask, Some(approver.clone())).await;
    let mut events = rt.subscribe();
    // Don't Allow denies this one call; the next call asks again.
    let out = echo(&rt, "c1", "first").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(out.projection.contains("declined"), "{}", out.projection);
    // Allow This Chat: c1 is granted, the next call in c1 is not asked.
    assert!(echo(&rt, "c1", "second").await.is_ok());
    assert!(echo(&rt, "c1", "third").await.is_ok());
    assert_eq!(approver.asked.lock().unwrap().len(), 2);
    // Another chat asks again; Always Allow persists for every chat.
    assert!(echo(&rt, "c2", "fourth").await.is_ok());
    assert!(echo(&rt, "c3", "fifth").await.is_ok());
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert_eq!(asked[0].server, "srv");
    assert_eq!(asked[0].tool, "mcp__srv__echo");
    assert_eq!(asked[0].arguments, json!({"message": "first"}));
    assert_eq!(
        calls_logged(&log),
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
    assert!(shutdown_checked(&rt, &[]).await.report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust7_routes_without_tool_support_are_offered_no_tools() {
    let (rt, _log) = runtime(TrustMode::Always, None).await;
    assert!(
        rt.tools_for_route(&G, true)
            .iter()
            .any(|t| t.name == "mcp__srv__echo")
    );
    assert!(rt.tools_for_route(&G, false).is_empty());
    assert!(shutdown_checked(&rt, &[]).await.report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust4_per_tool_never_holds_even_after_always_allow() {
    let approver = Arc::new(Scripted {
        answers: Mutex::new(vec![Approval::AlwaysAllow]),
        asked: Mutex::default(),
    });
    let log = unique_temp_path("tool-trust.log");
    let rt = Runtime::builder()
        .approver(approver.clone())
        .start()
        .await
        .unwrap();
    let mut cfg = ServerConfig::stdio(
        "srv",
        fault_server_path().to_string_lossy(),
        vec!["--log-requests".into(), log.to_string_lossy().into_owned()],
    );
    cfg.trust = TrustMode::Ask;
    cfg.tool_trust.insert("echo".into(), TrustMode::Never);
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "srv", Duration::from_secs(20))
        .await
        .unwrap();
    // Another tool of the server asks, and the answer is Always Allow.
    let ok = rt
        .call(&G, "mcp__srv__structured_ok", None, CallOptions::default())
        .await;
    assert!(ok.is_ok(), "{}", ok.projection);
    assert_eq!(approver.asked.lock().unwrap().len(), 1);
    // The tool configured `never` stays refused, without asking.
    let out = echo(&rt, "c1", "x").await;
    assert_eq!(out.kind, OutcomeKind::RefusedByTrust);
    assert!(
        out.projection.contains("trust is set to never"),
        "{}",
        out.projection
    );
    assert_eq!(approver.asked.lock().unwrap().len(), 1);
    assert_eq!(calls_logged(&log), 1);
    assert!(shutdown_checked(&rt, &[]).await.report.is_clean());
}
