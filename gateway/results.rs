//! A runtime outcome as the `CallToolResult` a gateway client gets.

use rmcp::model::{CallToolResult, ContentBlock as Content};

use crate::{ModelEdit, OUTCOME_META, OutcomeKind, SIDE_EFFECTS_META, ToolOutcome};

/// The client's result for `outcome`:
/// - `ok` and `server_error` (the server's own `isError`): the backend's
///   result as received (secrets redacted; images, audio, resource links
///   and `structuredContent` kept), then what hooks did to the model's
///   text, replayed in order (appended context as text blocks; a
///   replacement drops the content, keeping `structuredContent` out too).
/// - every other kind: `isError` with the runtime's honest text (TRUST-6);
///   a trust refusal because nobody could be asked also says how to allow
///   the server.
///
/// Every failure's `_meta` names its kind and its side effects
/// ([`OUTCOME_META`], [`SIDE_EFFECTS_META`]), so that a client can tell a
/// call that never ran from one whose effect is unknown (SEAT-11).
pub(super) fn to_call_result(outcome: ToolOutcome) -> CallToolResult {
    let failed = (!outcome.is_ok()).then_some((outcome.kind, outcome.side_effects));
    let mut result = backend_or_runtime_result(outcome);
    // A backend's result read back from its raw form has no `resultType`
    // (a session-era backend sends none); a 2026-07-28 client requires it.
    // rmcp takes it off again for a session-era client.
    result.result_type = Some(rmcp::model::ResultType::COMPLETE);
    if let Some((kind, side_effects)) = failed {
        let meta = result
            .meta
            .get_or_insert_with(|| rmcp::model::MetaObject(serde_json::Map::new()));
        meta.0.insert(OUTCOME_META.into(), kind.name().into());
        meta.0
            .insert(SIDE_EFFECTS_META.into(), side_effects.name().into());
    }
    result
}

/// The JSON-RPC errors of a backend that reach the client as that error,
/// not as an `isError` result: `-32021`, a client capability the server
/// requires is missing (2026-07-28) — a protocol answer about the client,
/// which the client must see as one; the call did not run.
const PASSED_ON: [i32; 1] = [-32021];

/// The error the client gets instead of a result, when the backend
/// answered the call with one of [`PASSED_ON`].
pub(super) fn passed_on_error(outcome: &ToolOutcome) -> Option<rmcp::ErrorData> {
    let e = outcome
        .rpc_error
        .as_ref()
        .filter(|_| outcome.kind == OutcomeKind::ServerError)?;
    PASSED_ON.contains(&e.code).then(|| {
        rmcp::ErrorData::new(
            rmcp::model::ErrorCode(e.code),
            e.message.clone(),
            e.data.clone(),
        )
    })
}

/// The namespace of the `_meta` keys the gateway writes itself.
const GATEWAY_META_PREFIX: &str = "io.mcpvisor/";

fn backend_or_runtime_result(mut outcome: ToolOutcome) -> CallToolResult {
    // The canonical value is moved into the result, not copied (a large
    // result is materialised once).
    let backend = match (outcome.kind, outcome.canonical.take()) {
        (OutcomeKind::Ok | OutcomeKind::ServerError, Some(c)) => {
            serde_json::from_value::<CallToolResult>(c).ok()
        }
        _ => None,
    };
    // The backend's own `_meta` goes back to the client as it came (ERA-7),
    // but for the gateway's own keys: what they say (a failure's kind and
    // side effects, a handle) only this gateway says, and a backend (a
    // server of any kind, or another gateway) cannot say it for it.
    let backend = backend.map(|mut result| {
        result.meta = outcome.result_meta.take().map(|mut meta| {
            meta.retain(|k, _| !k.starts_with(GATEWAY_META_PREFIX));
            rmcp::model::MetaObject(meta)
        });
        result
    });
    let Some(mut result) = backend else {
        // An `ok` whose canonical value was spilled to the attachment store
        // (over the hard cap) is still a success: the client gets the
        // projection, which says where the full value is.
        if outcome.kind == OutcomeKind::Ok {
            return CallToolResult::success(vec![Content::text(outcome.projection)]);
        }
        let mut text = outcome.projection;
        // Nobody could be asked (no approver, or a client without
        // elicitation): say how to allow the server, never allow silently.
        if outcome.kind == OutcomeKind::RefusedByTrust
            && text.contains("(no one to ask: ")
            && let Some(server) = &outcome.server
        {
            text.push_str(&format!(
                "\nTo allow it through this gateway, set `trust = \"always\"` in the `[servers.{server}]` section of the gateway's config, or connect with a client that supports elicitation."
            ));
        }
        return CallToolResult::error(vec![Content::text(text)]);
    };
    for edit in &outcome.model_edits {
        match edit {
            ModelEdit::Append(t) => result.content.push(Content::text(t.clone())),
            ModelEdit::Replace(t) => {
                result.content = vec![Content::text(t.clone())];
                result.structured_content = None;
            }
        }
    }
    if outcome.kind == OutcomeKind::ServerError {
        result.is_error = Some(true);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(r: &CallToolResult, key: &str) -> Option<String> {
        r.meta
            .as_ref()
            .and_then(|m| m.0.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    }

    #[test]
    fn a_failure_names_its_kind_and_side_effects_and_a_success_carries_neither() {
        // SEAT-11: a client can tell a call that never ran from one whose
        // effect is unknown.
        let refused = to_call_result(ToolOutcome::failure(OutcomeKind::RefusedByTrust, "no"));
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(
            meta(&refused, OUTCOME_META).as_deref(),
            Some("refused_by_trust")
        );
        assert_eq!(meta(&refused, SIDE_EFFECTS_META).as_deref(), Some("none"));
        let lost = to_call_result(ToolOutcome::failure(
            OutcomeKind::TransportLostDuringCall,
            "gone",
        ));
        assert_eq!(meta(&lost, SIDE_EFFECTS_META).as_deref(), Some("unknown"));
        // The backend's own error result keeps its content and gets the keys.
        let mut backend = ToolOutcome::failure(OutcomeKind::ServerError, "isError");
        backend.canonical =
            Some(json!({"content": [{"type": "text", "text": "disk full"}], "isError": true}));
        let backend = to_call_result(backend);
        assert_eq!(backend.content.len(), 1);
        assert_eq!(
            meta(&backend, OUTCOME_META).as_deref(),
            Some("server_error")
        );
        let mut ok = ToolOutcome::failure(OutcomeKind::Ok, "");
        ok.canonical = Some(json!({"content": []}));
        assert!(to_call_result(ok).meta.is_none());
    }

    #[test]
    fn a_backends_result_meta_passes_but_for_the_gateways_own_keys() {
        // ERA-7: the backend's `_meta` reaches the client; a backend cannot
        // label its success a failure, nor hand out a handle, in the
        // gateway's name.
        let mut ok = ToolOutcome::failure(OutcomeKind::Ok, "");
        ok.canonical = Some(json!({"content": []}));
        ok.result_meta = json!({
            "example.com/trace": "t1",
            OUTCOME_META: "refused_by_trust",
            "io.mcpvisor/handle": "x~0123456789abcdef.1",
        })
        .as_object()
        .cloned();
        let r = to_call_result(ok);
        assert_eq!(meta(&r, "example.com/trace").as_deref(), Some("t1"));
        assert_eq!(meta(&r, OUTCOME_META), None);
        assert_eq!(meta(&r, "io.mcpvisor/handle"), None);
        // A failure's keys are the gateway's own, whatever the backend said.
        let mut failed = ToolOutcome::failure(OutcomeKind::ServerError, "isError");
        failed.canonical = Some(json!({"content": [], "isError": true}));
        failed.result_meta = json!({OUTCOME_META: "ok", "example.com/trace": "t2"})
            .as_object()
            .cloned();
        let r = to_call_result(failed);
        assert_eq!(meta(&r, OUTCOME_META).as_deref(), Some("server_error"));
        assert_eq!(meta(&r, "example.com/trace").as_deref(), Some("t2"));
    }
}
