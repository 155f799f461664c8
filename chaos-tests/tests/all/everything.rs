//! Real-process tests against the reference server
//! `@modelcontextprotocol/server-everything` (installed by
//! `chaos-tests/peers/install.sh`), over stdio and streamable HTTP. Skipped with
//! a printed note when the peers are not installed.
//!
//! Requirement ids (CONN, SYNC, CALL, RECO) refer to shared/spec/mcp.md.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcpvisor::{CallOptions, OutcomeKind, Runtime, RuntimeEvent, Scope, ServerConfig, ServerState};
use mcpvisor_chaos::{call, everything_dir, shutdown_checked, wait_for};
use serde_json::json;
use tokio::sync::broadcast;

const G: Scope = Scope::Global;
/// server-everything 2026.8.31 lists 13 tools to a client with empty capabilities.
const TOOL_COUNT: usize = 13;
const CATALOG_WAIT: Duration = Duration::from_secs(20);

fn peers_or_skip(test: &str) -> Option<PathBuf> {
    let dir = everything_dir();
    if dir.is_none() {
        println!(
            "note: {test} SKIPPED (MCPVISOR_SKIP_PEERS=1): server-everything is not installed \
             (run chaos-tests/peers/install.sh, or set MCPVISOR_PEERS_DIR)"
        );
    }
    dir
}

fn entry_point(dir: &Path) -> String {
    mcpvisor_chaos::peers::everything_entry(dir)
}

/// server-everything over stdio, with idle stop off (tests wait on events).
fn everything_stdio(dir: &Path) -> ServerConfig {
    let mut cfg =
        ServerConfig::stdio("everything", "node", vec![entry_point(dir), "stdio".into()]).trusted();
    cfg.idle_stop_after = None;
    cfg
}

/// A runtime from `builder` with server-everything over stdio, ready with all
/// 13 tools.
async fn start_everything(builder: mcpvisor::RuntimeBuilder, dir: &Path) -> Runtime {
    let runtime = builder.start().await.unwrap();
    let mut events = runtime.subscribe();
    runtime.add_server(G, everything_stdio(dir)).await.unwrap();
    wait_all_tools(&runtime, &mut events).await;
    runtime
}

/// Wait until the server is ready with all 13 tools: `simulate-research-query`
/// is registered after `initialized` and announced with tools/list_changed
/// (SYNC-5), so the first catalog may hold 12.
async fn wait_all_tools(runtime: &Runtime, events: &mut broadcast::Receiver<RuntimeEvent>) {
    let found = wait_for(runtime, events, CATALOG_WAIT, |statuses| {
        statuses
            .iter()
            .find(|s| {
                s.server == "everything" && s.state == ServerState::Ready && s.tools == TOOL_COUNT
            })
            .cloned()
    })
    .await;
    if let Err(last) = found {
        let names: Vec<String> = runtime.tools(&G).iter().map(|t| t.name.clone()).collect();
        panic!(
            "not ready with {TOOL_COUNT} tools within {CATALOG_WAIT:?}: {last:#?}\ntools: {names:?}"
        );
    }
}

/// The calls both transports must answer the same way (CALL-3, CALL-4).
async fn common_calls(runtime: &Runtime) {
    let names: Vec<String> = runtime.tools(&G).iter().map(|t| t.name.clone()).collect();
    for raw in [
        "echo",
        "get-sum",
        "get-annotated-message",
        "get-tiny-image",
        "get-structured-content",
        "simulate-research-query",
    ] {
        // SYNC-1: `-` is allowed, so these names are kept as they are.
        let public = format!("mcp__everything__{raw}");
        assert!(names.contains(&public), "missing {public} in {names:?}");
    }
    let echo = call(runtime, "mcp__everything__echo", json!({"message": "hi"})).await;
    assert_eq!(echo.kind, OutcomeKind::Ok, "{echo:?}");
    assert_eq!(echo.projection, "Echo: hi");
    let sum = call(
        runtime,
        "mcp__everything__get-sum",
        json!({"a": 2, "b": 40}),
    )
    .await;
    assert_eq!(sum.kind, OutcomeKind::Ok, "{sum:?}");
    assert_eq!(sum.projection, "The sum of 2 and 40 is 42.");
    let bad = call(
        runtime,
        "mcp__everything__get-sum",
        json!({"a": "two", "b": 40}),
    )
    .await;
    assert_eq!(bad.kind, OutcomeKind::ServerError, "{bad:?}");
    assert!(bad.projection.contains("-32602"), "{}", bad.projection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_handshakes_lists_13_tools_and_answers_calls() {
    // CONN-10 handshake; SYNC-5 list_changed re-sync; CALL-3/4 outcomes;
    // SYNC-7 taskSupport "required" → listed but refused; RECO-7 clean shutdown.
    let Some(dir) = peers_or_skip("everything_over_stdio") else {
        return;
    };
    let runtime = start_everything(Runtime::builder(), &dir).await;
    let status = runtime.status().remove(0);
    assert_eq!(status.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(status.transport, "stdio");
    assert!(
        status
            .server_info
            .as_deref()
            .unwrap_or("")
            .contains("everything")
    );
    let pid = status.pid.unwrap();
    common_calls(&runtime).await;

    let research = runtime
        .tools(&G)
        .into_iter()
        .find(|t| t.name == "mcp__everything__simulate-research-query")
        .unwrap();
    assert!(research.task_support_required, "{research:?}");
    let refused = call(
        &runtime,
        "mcp__everything__simulate-research-query",
        json!({"topic": "otters"}),
    )
    .await;
    assert_eq!(
        refused.kind,
        OutcomeKind::TaskSupportRequired,
        "{refused:?}"
    );

    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
    assert!(check.report.processes_reaped.contains(&pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http_handshakes_lists_13_tools_and_answers_calls() {
    // CONN-9 streamable HTTP; CONN-10 handshake; CALL-3/4 outcomes.
    let Some(dir) = peers_or_skip("everything_over_streamable_http") else {
        return;
    };
    let peer = mcpvisor_chaos::peers::EverythingHttp::start(&dir)
        .await
        .unwrap();
    let runtime = Runtime::builder().start().await.unwrap();
    let mut events = runtime.subscribe();
    runtime
        .add_server(G, ServerConfig::http("everything", peer.url()).trusted())
        .await
        .unwrap();
    wait_all_tools(&runtime, &mut events).await;
    let status = runtime.status().remove(0);
    assert_eq!(status.transport, "streamable-http");
    assert_eq!(status.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(status.pid, None);
    common_calls(&runtime).await;

    // SYNC-7 over HTTP: the tapped client reads execution.taskSupport from the
    // SSE reply of tools/list, so the call is refused without reaching the server.
    let research = call(
        &runtime,
        "mcp__everything__simulate-research-query",
        json!({"topic": "otters"}),
    )
    .await;
    assert_eq!(
        research.kind,
        OutcomeKind::TaskSupportRequired,
        "{research:?}"
    );

    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
    assert_eq!(
        check.report.servers_stopped,
        vec!["global/everything".to_owned()]
    );
    assert!(peer.stop().await, "server-everything reaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_opt_in_is_declared_and_answered_with_schema_defaults() {
    // CONN-11: a capability is declared only when its handler is installed;
    // server-everything then lists trigger-elicitation-request, and the request
    // it sends mid-call is answered by the handler with the schema's defaults.
    let Some(dir) = peers_or_skip("elicitation_opt_in") else {
        return;
    };
    let cfg = everything_stdio(&dir);
    let runtime = Runtime::builder()
        .elicitation(std::sync::Arc::new(mcpvisor::AcceptSchemaDefaults))
        .start()
        .await
        .unwrap();
    let mut events = runtime.subscribe();
    runtime.add_server(G, cfg).await.unwrap();
    let found = wait_for(&runtime, &mut events, CATALOG_WAIT, |_| {
        runtime
            .tools(&G)
            .iter()
            .any(|t| t.raw_name == "trigger-elicitation-request")
            .then_some(())
    })
    .await;
    assert!(found.is_ok(), "trigger-elicitation-request never listed");
    let out = call(
        &runtime,
        "mcp__everything__trigger-elicitation-request",
        json!({}),
    )
    .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    // The schema declares these defaults; the handler supplied no content.
    for expected in [
        "\"action\": \"accept\"",
        "\"integer\": 42",
        "\"number\": 3.14",
    ] {
        assert!(
            out.projection.contains(expected),
            "{expected} in {}",
            out.projection
        );
    }
    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_results_project_every_block_type_and_admit_real_images() {
    // CALL-6 on server-everything's real content; CALL-7 image admission with a
    // file attachment store; images keep their position.
    let Some(dir) = peers_or_skip("everything_results") else {
        return;
    };
    let attachments = mcpvisor_chaos::unique_temp_path("attachments");
    let builder = Runtime::builder().attachments(std::sync::Arc::new(
        mcpvisor::FileAttachmentStore::new(&attachments),
    ));
    let runtime = start_everything(builder, &dir).await;
    let with_images = CallOptions {
        images: true,
        ..CallOptions::default()
    };

    // get-tiny-image: text, image, text — the image admitted in the middle.
    let tiny = runtime
        .call(
            &G,
            "mcp__everything__get-tiny-image",
            Some(json!({})),
            with_images.clone(),
        )
        .await;
    assert_eq!(tiny.kind, OutcomeKind::Ok, "{tiny:?}");
    assert_eq!(tiny.images.len(), 1, "{tiny:?}");
    assert_eq!(tiny.images[0].mime, "image/png");
    let saved = std::fs::read(&tiny.images[0].path).unwrap();
    assert_eq!(&saved[..4], b"\x89PNG");
    assert!(
        matches!(
            &tiny.parts[..],
            [
                mcpvisor::ProjectionPart::Text { .. },
                mcpvisor::ProjectionPart::Image(_),
                mcpvisor::ProjectionPart::Text { .. }
            ]
        ),
        "{:?}",
        tiny.parts
    );
    // Without image capability the same result is text with a placeholder, and
    // the canonical value still holds the raw image.
    let plain = call(&runtime, "mcp__everything__get-tiny-image", json!({})).await;
    assert!(plain.images.is_empty());
    assert!(
        plain
            .projection
            .contains("does not declare image capability"),
        "{}",
        plain.projection
    );
    let raw = plain.canonical.unwrap();
    assert!(raw.to_string().contains("\"type\":\"image\""));

    // get-annotated-message with an image.
    let annotated = runtime
        .call(
            &G,
            "mcp__everything__get-annotated-message",
            Some(json!({"messageType": "success", "includeImage": true})),
            with_images.clone(),
        )
        .await;
    assert_eq!(annotated.kind, OutcomeKind::Ok, "{annotated:?}");
    assert_eq!(annotated.images.len(), 1);

    // resource links → "[resource link] name: uri" lines.
    let links = call(
        &runtime,
        "mcp__everything__get-resource-links",
        json!({"count": 2}),
    )
    .await;
    assert_eq!(links.kind, OutcomeKind::Ok, "{links:?}");
    assert_eq!(
        links.projection.matches("[resource link]").count(),
        2,
        "{}",
        links.projection
    );
    assert!(
        links.projection.contains("demo://resource/dynamic/"),
        "{}",
        links.projection
    );

    // An embedded text resource shows its text.
    let reference = call(
        &runtime,
        "mcp__everything__get-resource-reference",
        json!({"resourceType": "Text", "resourceId": 1}),
    )
    .await;
    assert_eq!(reference.kind, OutcomeKind::Ok, "{reference:?}");
    assert!(
        !reference.projection.contains("unsupported content"),
        "{}",
        reference.projection
    );

    // structuredContent + content: the content is kept; the output schema holds.
    let structured = call(
        &runtime,
        "mcp__everything__get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    assert_eq!(structured.kind, OutcomeKind::Ok, "{structured:?}");
    assert!(
        structured
            .canonical
            .unwrap()
            .get("structuredContent")
            .is_some()
    );

    // An embedded blob resource (gzip of a data: URI, no network) → placeholder.
    let gz = call(
        &runtime,
        "mcp__everything__gzip-file-as-resource",
        json!({"name": "hello.txt.gz", "data": "data:text/plain;base64,aGVsbG8gd29ybGQ=", "outputType": "resource"}),
    )
    .await;
    assert_eq!(gz.kind, OutcomeKind::Ok, "{gz:?}");
    assert!(
        gz.projection
            .contains("unsupported content: embedded blob resource"),
        "{}",
        gz.projection
    );

    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
    let _ = std::fs::remove_dir_all(&attachments);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_resources_are_listed_read_and_blobs_reach_the_model_as_lengths() {
    // RES-1..4, RES-6 against server-everything's real resources.
    let Some(dir) = peers_or_skip("everything_resources") else {
        return;
    };
    let runtime = start_everything(Runtime::builder(), &dir).await;
    let names: Vec<String> = runtime.tools(&G).iter().map(|t| t.name.clone()).collect();
    for shared in [
        "list_mcp_resources",
        "list_mcp_resource_templates",
        "read_mcp_resource",
    ] {
        assert!(
            names.contains(&shared.to_owned()),
            "{shared} missing from {names:?}"
        );
    }
    let listed = call(&runtime, "list_mcp_resources", json!({})).await;
    assert_eq!(listed.kind, OutcomeKind::Ok, "{listed:?}");
    assert!(
        listed.projection.starts_with("[MCP server \"everything\"]"),
        "{}",
        listed.projection
    );
    assert!(
        listed
            .projection
            .contains("demo://resource/static/document/"),
        "{}",
        listed.projection
    );
    let templates = call(
        &runtime,
        "list_mcp_resource_templates",
        json!({"server": "everything"}),
    )
    .await;
    assert!(
        templates
            .projection
            .contains("demo://resource/dynamic/text/{resourceId}"),
        "{}",
        templates.projection
    );
    let text = call(
        &runtime,
        "read_mcp_resource",
        json!({"server": "everything", "uri": "demo://resource/dynamic/text/1"}),
    )
    .await;
    assert_eq!(text.kind, OutcomeKind::Ok, "{text:?}");
    assert!(text.projection.contains("\"text\""), "{}", text.projection);
    let blob = call(
        &runtime,
        "read_mcp_resource",
        json!({"server": "everything", "uri": "demo://resource/dynamic/blob/1"}),
    )
    .await;
    assert_eq!(blob.kind, OutcomeKind::Ok, "{blob:?}");
    assert!(
        blob.projection.contains("base64 characters omitted"),
        "{}",
        blob.projection
    );
    let raw_blob = blob
        .canonical
        .unwrap()
        .pointer("/everything/contents/0/blob")
        .and_then(|b| b.as_str())
        .map(str::len)
        .unwrap_or(0);
    assert!(raw_blob > 0, "the canonical value keeps the bytes");
    let unknown = call(
        &runtime,
        "read_mcp_resource",
        json!({"server": "nope", "uri": "x"}),
    )
    .await;
    assert_eq!(unknown.kind, OutcomeKind::InvalidArguments);
    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
}
