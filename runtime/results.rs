//! The result half of a call (CALL-3, CALL-6..8): validate the received
//! `CallToolResult`, admit images through the attachment store, project for
//! the model within the byte budget, and spill an oversized canonical value.
//! Runs in the caller's task, like the rest of the call path.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::messages::budget::{ResultLimits, budget_parts};
use crate::messages::call::{
    OUTCOME_META, OutcomeKind, SIDE_EFFECTS_META, SideEffects, ToolDefinition, ToolOutcome,
};
use crate::messages::images::{AdmittedImage, AttachmentStore, check_images};
use crate::messages::projection::{
    ImageRender, ProjectionPart, RAW_KEPT, check_call_tool_result, is_error, parts_to_text,
    project_parts_within,
};
use crate::messages::schema::validate;

/// What a result is judged with.
pub(crate) struct ResultContext<'a> {
    /// The tool.
    pub def: &'a ToolDefinition,
    /// The route declares image capability.
    pub images: bool,
    /// Where images (and spills) go.
    pub store: Option<&'a Arc<dyn AttachmentStore>>,
    /// Byte limits.
    pub limits: ResultLimits,
    /// The server is in process (the runtime's or the embedder's own
    /// code): its error results may name their CALL-4 kind.
    pub in_process: bool,
}

/// Validate, project and budget one received result.
pub(crate) async fn judge_result(ctx: &ResultContext<'_>, mut canonical: Value) -> ToolOutcome {
    if let Err(e) = check_call_tool_result(&canonical) {
        let mut o = ToolOutcome::failure(OutcomeKind::InvalidResult, e.to_string());
        o.canonical = Some(canonical);
        return o;
    }
    // Read before the metadata is dropped: what an error result says of
    // its kind and its side effects (SEAT-11).
    let declared = declared_failure(&canonical, ctx.in_process);
    let mut result_meta = None;
    if let Value::Object(m) = &mut canonical {
        // The result's `_meta` is for a client of a gateway, not the model.
        if let Some(Value::Object(meta)) = m.remove("_meta") {
            result_meta = Some(meta);
        }
        // CALL-3: content and structuredContent (and isError), no transport metadata.
        m.retain(|k, _| matches!(k.as_str(), "content" | "structuredContent" | "isError"));
    }
    let (mut kind, mut error) = classify(ctx.def, &canonical);
    let mut side_effects = kind.side_effects();
    if kind == OutcomeKind::ServerError {
        if let Some(k) = declared.kind.filter(|k| *k != OutcomeKind::ServerError) {
            kind = k;
            error = Some(format!("the tool reported {}", k.name()));
        }
        side_effects = declared.side_effects.unwrap_or(kind.side_effects());
    }
    let (renders, images) = admit_images(ctx, &canonical).await;
    let max = ctx.limits.max_result_bytes;
    let (parts, skipped) = project_parts_within(&canonical, &renders, max);
    let (mut parts, cut_bytes) = budget_parts(parts, max, skipped);
    if kind == OutcomeKind::OutputSchemaViolation
        && let Some(err) = &error
    {
        parts.insert(
            0,
            ProjectionPart::Text {
                text: format!("Tool call failed ({}): {err}", kind.name()),
            },
        );
    }
    let projection = parts_to_text(&parts);
    let canonical = spill_if_oversized(ctx, canonical).await;
    ToolOutcome {
        kind,
        side_effects,
        error,
        projection,
        parts,
        images,
        cut_bytes,
        canonical: Some(canonical),
        server: None,
        raw_name: None,
        generation: None,
        notes: Vec::new(),
        stop: None,
        model_edits: Vec::new(),
        rpc_error: None,
        result_meta,
    }
}

/// What an error result's `_meta` says of itself.
struct Declared {
    kind: Option<OutcomeKind>,
    side_effects: Option<SideEffects>,
}

/// The kind (in-process servers only, and only the kinds a tool can cause)
/// and the side effects an error result names in its `_meta`.
fn declared_failure(canonical: &Value, in_process: bool) -> Declared {
    let meta = canonical.get("_meta");
    let named = |key: &str| meta.and_then(|m| m.get(key)).and_then(Value::as_str);
    let kind = named(OUTCOME_META)
        .filter(|_| in_process)
        .and_then(OutcomeKind::from_name)
        .filter(|k| {
            matches!(
                k,
                OutcomeKind::InvalidArguments
                    | OutcomeKind::Timeout
                    | OutcomeKind::Cancelled
                    | OutcomeKind::TransportLostDuringCall
                    | OutcomeKind::ServerError
            )
        });
    Declared {
        kind,
        side_effects: named(SIDE_EFFECTS_META).and_then(SideEffects::from_name),
    }
}

/// isError and the output schema (CALL-3).
fn classify(def: &ToolDefinition, canonical: &Value) -> (OutcomeKind, Option<String>) {
    if is_error(canonical) {
        return (
            OutcomeKind::ServerError,
            Some("the tool reported an error (isError: true)".into()),
        );
    }
    let Some(schema) = &def.output_schema else {
        return (OutcomeKind::Ok, None);
    };
    match canonical.get("structuredContent") {
        None | Some(Value::Null) => (
            OutcomeKind::OutputSchemaViolation,
            Some("the tool declares an output schema but returned no structuredContent".into()),
        ),
        Some(sc) => {
            let violations = validate(sc, schema);
            if violations.is_empty() {
                (OutcomeKind::Ok, None)
            } else {
                let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
                (
                    OutcomeKind::OutputSchemaViolation,
                    Some(format!(
                        "structuredContent violates the output schema: {}",
                        list.join("; ")
                    )),
                )
            }
        }
    }
}

/// CALL-7: check every image first; one invalid image turns every image into a
/// diagnostic line; without image capability or a store, images are lines;
/// otherwise each is saved and admitted in its position. Any failure falls
/// back to lines for all images; the call itself never fails here.
async fn admit_images(
    ctx: &ResultContext<'_>,
    canonical: &Value,
) -> (BTreeMap<usize, ImageRender>, Vec<AdmittedImage>) {
    let checks = check_images(canonical);
    let mut renders = BTreeMap::new();
    if checks.is_empty() {
        return (renders, Vec::new());
    }
    let size =
        |c: &crate::messages::images::ImageCheck| c.bytes.as_ref().map(Vec::len).unwrap_or(0);
    let fallback = |why: &str| -> BTreeMap<usize, ImageRender> {
        checks
            .iter()
            .map(|c| {
                let line = format!(
                    "[image {}, {} bytes — not shown: {why}; {RAW_KEPT}]",
                    c.mime,
                    size(c)
                );
                (c.index, ImageRender::Line(line))
            })
            .collect()
    };
    if checks.iter().any(|c| c.problem.is_some()) {
        for c in &checks {
            let line = match &c.problem {
                Some(p) => format!("[image rejected: {p}; {RAW_KEPT}]"),
                None => format!(
                    "[image {}, {} bytes — not shown: another image in this result was invalid; {RAW_KEPT}]",
                    c.mime,
                    size(c)
                ),
            };
            renders.insert(c.index, ImageRender::Line(line));
        }
        return (renders, Vec::new());
    }
    if !ctx.images {
        return (
            fallback("this route does not declare image capability"),
            Vec::new(),
        );
    }
    let Some(store) = ctx.store else {
        return (fallback("no attachment store is configured"), Vec::new());
    };
    let mut admitted = Vec::with_capacity(checks.len());
    for c in &checks {
        let bytes = c.bytes.as_deref().unwrap_or_default();
        match store.save(&c.mime, bytes).await {
            Ok(path) => admitted.push(AdmittedImage {
                index: c.index,
                mime: c.mime.clone(),
                bytes: bytes.len(),
                path,
            }),
            Err(e) => {
                return (
                    fallback(&format!("the attachment store failed ({e})")),
                    Vec::new(),
                );
            }
        }
    }
    for img in &admitted {
        renders.insert(img.index, ImageRender::Admitted(img.clone()));
    }
    (renders, admitted)
}

/// CALL-8: a canonical value over the hard cap goes to the attachment store
/// and is replaced by a pointer; without a store it is kept whole.
async fn spill_if_oversized(ctx: &ResultContext<'_>, canonical: Value) -> Value {
    let Some(store) = ctx.store else {
        return canonical;
    };
    // Measured without materialising it: most results are far below the cap.
    if serialized_len(&canonical) <= ctx.limits.canonical_hard_cap_bytes {
        return canonical;
    }
    let Ok(bytes) = serde_json::to_vec(&canonical) else {
        return canonical;
    };
    match store.save("application/json", &bytes).await {
        Ok(path) => json!({
            "spilled": {
                "path": path,
                "bytes": bytes.len(),
                "note": format!(
                    "the result was larger than the {}-byte hard cap and was saved whole at this path",
                    ctx.limits.canonical_hard_cap_bytes
                ),
            }
        }),
        Err(_) => canonical,
    }
}

/// The length of a value's compact JSON, counted, not written.
fn serialized_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a Value into a writer that cannot fail cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::config::Scope;
    use futures::future::BoxFuture;
    use std::sync::Mutex;

    /// An in-memory store that records what it saved, or always fails.
    #[derive(Default)]
    struct MemStore {
        saved: Mutex<Vec<(String, usize)>>,
        fail: bool,
    }

    impl AttachmentStore for MemStore {
        fn save<'a>(
            &'a self,
            mime: &'a str,
            bytes: &'a [u8],
        ) -> BoxFuture<'a, Result<String, crate::messages::store::StoreError>> {
            Box::pin(async move {
                if self.fail {
                    return Err(crate::messages::store::StoreError::Unusable(
                        "disk full".into(),
                    ));
                }
                let mut saved = self.saved.lock().unwrap();
                saved.push((mime.to_owned(), bytes.len()));
                Ok(format!("mem://{}", saved.len()))
            })
        }
    }

    fn def() -> ToolDefinition {
        ToolDefinition {
            name: "mcp__s__t".into(),
            scope: Scope::Global,
            server: "s".into(),
            raw_name: "t".into(),
            generation: 1,
            title: None,
            description: None,
            input_schema: Arc::new(serde_json::Map::new()),
            output_schema: None,
            annotations: None,
            task_support_required: false,
        }
    }

    /// 1×1 PNG, canonical base64.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    fn result(blocks: Value) -> Value {
        json!({"content": blocks})
    }

    async fn judge(
        v: Value,
        images: bool,
        store: Option<Arc<dyn AttachmentStore>>,
        max: usize,
    ) -> ToolOutcome {
        let d = def();
        let ctx = ResultContext {
            def: &d,
            images,
            store: store.as_ref(),
            limits: ResultLimits {
                max_result_bytes: max,
                ..ResultLimits::default()
            },
            in_process: false,
        };
        judge_result(&ctx, v).await
    }

    async fn judge_from(v: Value, in_process: bool) -> ToolOutcome {
        let d = def();
        let ctx = ResultContext {
            def: &d,
            images: false,
            store: None,
            limits: ResultLimits::default(),
            in_process,
        };
        judge_result(&ctx, v).await
    }

    #[tokio::test]
    async fn an_error_result_states_its_side_effects_and_only_an_in_process_server_its_kind() {
        // SEAT-11, CALL-4: a provider's stale token is invalid arguments
        // with no side effect; a remote server cannot relabel its errors.
        let stale = json!({
            "content": [{"type": "text", "text": "token g1e2 is stale"}],
            "isError": true,
            "_meta": {OUTCOME_META: "invalid_arguments", SIDE_EFFECTS_META: "none"}
        });
        let own = judge_from(stale.clone(), true).await;
        assert_eq!(own.kind, OutcomeKind::InvalidArguments);
        assert_eq!(own.side_effects, SideEffects::None);
        assert!(
            own.projection.contains("g1e2 is stale"),
            "{}",
            own.projection
        );
        assert!(
            own.canonical
                .as_ref()
                .is_some_and(|c| c.get("_meta").is_none()),
            "no transport metadata in the canonical value (CALL-3)"
        );
        let remote = judge_from(stale, false).await;
        assert_eq!(remote.kind, OutcomeKind::ServerError);
        assert_eq!(
            remote.side_effects,
            SideEffects::None,
            "any server may say what it did"
        );
        // A kind a tool cannot cause is ignored, even in process.
        let forged = json!({"content": [], "isError": true, "_meta": {OUTCOME_META: "ok"}});
        let forged = judge_from(forged, true).await;
        assert_eq!(forged.kind, OutcomeKind::ServerError);
        assert_eq!(forged.side_effects, SideEffects::Unknown);
        // A success is a success whatever its metadata says.
        let fine =
            json!({"content": [], "_meta": {OUTCOME_META: "timeout", SIDE_EFFECTS_META: "none"}});
        let fine = judge_from(fine, true).await;
        assert_eq!(fine.kind, OutcomeKind::Ok);
        assert_eq!(fine.side_effects, SideEffects::Applied);
    }

    #[tokio::test]
    async fn admitted_images_keep_their_position_between_text_parts() {
        // CALL-7
        let store: Arc<dyn AttachmentStore> = Arc::new(MemStore::default());
        let v = result(json!([
            {"type": "text", "text": "before"},
            {"type": "image", "mimeType": "image/png", "data": PNG},
            {"type": "text", "text": "after"}
        ]));
        let o = judge(v.clone(), true, Some(store), 32 * 1024).await;
        assert_eq!(o.kind, OutcomeKind::Ok);
        assert_eq!(o.images.len(), 1);
        assert_eq!(o.images[0].index, 1);
        assert_eq!(o.images[0].path, "mem://1");
        assert!(matches!(
            &o.parts[..],
            [
                ProjectionPart::Text { .. },
                ProjectionPart::Image(_),
                ProjectionPart::Text { .. }
            ]
        ));
        assert_eq!(
            o.canonical,
            Some(v),
            "the canonical value keeps the raw image"
        );
    }

    #[tokio::test]
    async fn one_invalid_image_turns_every_image_into_a_diagnostic() {
        // CALL-7: all images are checked before any is admitted.
        let store = Arc::new(MemStore::default());
        let dyn_store: Arc<dyn AttachmentStore> = store.clone();
        let v = result(json!([
            {"type": "image", "mimeType": "image/png", "data": PNG},
            {"type": "image", "mimeType": "image/png", "data": "AB=="},
            {"type": "image", "mimeType": "image/bmp", "data": PNG}
        ]));
        let o = judge(v, true, Some(dyn_store), 32 * 1024).await;
        assert!(o.images.is_empty());
        assert!(store.saved.lock().unwrap().is_empty(), "nothing saved");
        assert!(
            o.projection
                .contains("another image in this result was invalid"),
            "{}",
            o.projection
        );
        assert!(o.projection.contains("base64"), "{}", o.projection);
        assert!(o.projection.contains("image/bmp"), "{}", o.projection);
    }

    #[tokio::test]
    async fn without_capability_or_with_a_failing_store_images_fall_back_to_text() {
        // CALL-7: a missing store or capability never fails the call.
        let v = result(json!([{"type": "image", "mimeType": "image/png", "data": PNG}]));
        let o = judge(v.clone(), false, None, 32 * 1024).await;
        assert_eq!(o.kind, OutcomeKind::Ok);
        assert!(
            o.projection.contains("does not declare image capability"),
            "{}",
            o.projection
        );
        let o = judge(v.clone(), true, None, 32 * 1024).await;
        assert!(
            o.projection.contains("no attachment store"),
            "{}",
            o.projection
        );
        let failing: Arc<dyn AttachmentStore> = Arc::new(MemStore {
            fail: true,
            ..Default::default()
        });
        let o = judge(v, true, Some(failing), 32 * 1024).await;
        assert_eq!(o.kind, OutcomeKind::Ok);
        assert!(o.projection.contains("disk full"), "{}", o.projection);
        assert!(o.images.is_empty());
    }

    #[tokio::test]
    async fn a_result_over_budget_is_cut_with_the_amount_and_the_canonical_stays_whole() {
        // CALL-8
        let long = "x".repeat(1000);
        let v = result(json!([{"type": "text", "text": long}, {"type": "text", "text": "tail"}]));
        let o = judge(v.clone(), false, None, 100).await;
        assert_eq!(o.cut_bytes, 1005 - 100);
        assert!(o.projection.starts_with(&"x".repeat(100)));
        assert!(
            o.projection
                .contains("[… 905 bytes cut: a tool result is limited to 100 bytes"),
            "{}",
            o.projection
        );
        assert_eq!(o.canonical, Some(v));
    }

    #[tokio::test]
    async fn a_canonical_value_over_the_hard_cap_is_spilled_with_a_pointer() {
        // CALL-8
        let store = Arc::new(MemStore::default());
        let dyn_store: Arc<dyn AttachmentStore> = store.clone();
        let d = def();
        let ctx = ResultContext {
            def: &d,
            images: false,
            store: Some(&dyn_store),
            limits: ResultLimits {
                canonical_hard_cap_bytes: 50,
                ..ResultLimits::default()
            },
            in_process: false,
        };
        let o = judge_result(
            &ctx,
            result(json!([{"type": "text", "text": "y".repeat(200)}])),
        )
        .await;
        let c = o.canonical.unwrap();
        assert_eq!(c.pointer("/spilled/path"), Some(&json!("mem://1")));
        assert_eq!(store.saved.lock().unwrap()[0].0, "application/json");
        assert!(
            o.projection.starts_with("yyy"),
            "the projection is unaffected"
        );
    }
}
