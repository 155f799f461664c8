//! Result projection and image admission against fault-server's content zoo
//! (CALL-6, CALL-7, CALL-8), over real stdio.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use mcpvisor::{
    CallOptions, FileAttachmentStore, OutcomeKind, ProjectionPart, ResultLimits, Runtime, Scope,
    ToolOutcome,
};
use mcpvisor_chaos::{fault_server_config, shutdown_checked, start_with_server, unique_temp_path};
use serde_json::json;

const G: Scope = Scope::Global;

async fn zoo(limits: ResultLimits) -> (Runtime, std::path::PathBuf) {
    let dir = unique_temp_path("zoo-attachments");
    let builder = Runtime::builder()
        .attachments(Arc::new(FileAttachmentStore::new(&dir)))
        .result_limits(limits);
    let cfg = fault_server_config("zoo", ["--content-zoo", "--huge-result", "200000"]).trusted();
    let runtime = start_with_server(builder, G, cfg).await.unwrap();
    (runtime, dir)
}

async fn call(rt: &Runtime, tool: &str, images: bool) -> ToolOutcome {
    let options = CallOptions {
        images,
        ..CallOptions::default()
    };
    rt.call(&G, &format!("mcp__zoo__{tool}"), Some(json!({})), options)
        .await
}

async fn done(rt: Runtime, dir: std::path::PathBuf) {
    let check = shutdown_checked(&rt, &[]).await;
    check.assert_clean();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_non_object_blocks_get_notices_and_nothing_is_dropped() {
    // CALL-6: never silently drop content; the canonical value keeps everything.
    let (rt, dir) = zoo(ResultLimits::default()).await;
    let o = call(&rt, "unknown_block", false).await;
    assert_eq!(o.kind, OutcomeKind::Ok, "{o:?}");
    let lines: Vec<&str> = o.projection.lines().collect();
    assert_eq!(lines[0], "before");
    assert!(lines[1].contains("\"hologram\""), "{}", o.projection);
    assert!(lines[2].contains("not an object"), "{}", o.projection);
    assert_eq!(lines[3], "after");
    assert_eq!(o.canonical.unwrap()["content"][1]["type"], "hologram");
    done(rt, dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_images_are_diagnosed_and_one_bad_image_blocks_all() {
    // CALL-7: non-canonical base64, a MIME outside the allowlist, and a valid
    // image beside an invalid one.
    let (rt, dir) = zoo(ResultLimits::default()).await;
    let bad = call(&rt, "bad_base64_image", true).await;
    assert_eq!(bad.kind, OutcomeKind::Ok, "the call never fails on images");
    assert!(bad.images.is_empty());
    assert!(
        bad.projection.contains("image rejected"),
        "{}",
        bad.projection
    );
    let mime = call(&rt, "wrong_mime_image", true).await;
    assert!(
        mime.projection.contains("image/tiff"),
        "{}",
        mime.projection
    );
    let mixed = call(&rt, "mixed_images", true).await;
    assert!(mixed.images.is_empty(), "{mixed:?}");
    assert!(
        mixed
            .projection
            .contains("another image in this result was invalid"),
        "{}",
        mixed.projection
    );
    assert!(mixed.projection.contains("between"));
    assert_eq!(
        mixed.canonical.unwrap()["content"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "the canonical value keeps the raw images"
    );
    done(rt, dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_and_audio_are_placeholders_and_oversized_results_are_cut() {
    // CALL-6 placeholders; CALL-8 budgets with the amount cut.
    let (rt, dir) = zoo(ResultLimits {
        max_result_bytes: 1000,
        ..ResultLimits::default()
    })
    .await;
    let blob = call(&rt, "blob_resource", false).await;
    assert!(
        blob.projection
            .contains("unsupported content: embedded blob resource mem://blob.bin"),
        "{}",
        blob.projection
    );
    let audio = call(&rt, "audio", false).await;
    assert!(
        audio
            .projection
            .contains("unsupported content: audio audio/wav"),
        "{}",
        audio.projection
    );
    let huge = call(&rt, "huge", false).await;
    assert_eq!(huge.kind, OutcomeKind::Ok);
    assert_eq!(huge.cut_bytes, 200_000 - 1000);
    assert!(
        huge.projection
            .contains("[… 199000 bytes cut: a tool result is limited to 1000 bytes"),
        "{}",
        &huge.projection[990..]
    );
    let text = huge.canonical.unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .len();
    assert_eq!(text, 200_000, "the canonical value is whole");
    assert!(matches!(&huge.parts[..], [ProjectionPart::Text { .. }]));
    let schema = call(&rt, "structured_bad", false).await;
    assert_eq!(schema.kind, OutcomeKind::OutputSchemaViolation);
    assert!(schema.error.unwrap().contains("/temp"));
    done(rt, dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_instructions_fail_the_connection_or_are_truncated_on_request() {
    // RES-5: the attributed text counts against max_instruction_bytes.
    let runtime = Runtime::builder().start().await.unwrap();
    let mut strict = fault_server_config("strict", Vec::<String>::new());
    strict.max_instruction_bytes = 40;
    strict.reconnect.enabled = false;
    let long = "Always be careful. ".repeat(30);
    let mut lenient = fault_server_config("lenient", ["--instructions".into(), long]);
    lenient.max_instruction_bytes = 200;
    lenient.oversized_instructions = mcpvisor::OversizedInstructions::Truncate;
    runtime.add_server(G, strict).await.unwrap();
    runtime.add_server(G, lenient).await.unwrap();
    let err = runtime
        .wait_ready(&G, "strict", Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("over max_instruction_bytes = 40"),
        "{err}"
    );
    runtime
        .wait_ready(&G, "lenient", Duration::from_secs(20))
        .await
        .unwrap();
    let instructions = runtime.instructions(&G);
    assert_eq!(instructions.len(), 1, "{instructions:?}");
    assert!(instructions[0].starts_with("## Instructions from MCP server \"lenient\""));
    assert!(
        instructions[0].ends_with("[… instructions cut to max_instruction_bytes = 200]"),
        "{}",
        instructions[0]
    );
    assert!(instructions[0].len() <= 200);
    assert!(instructions[0].contains("Always be careful."));
    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
}
