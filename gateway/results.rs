//! A runtime outcome as the `CallToolResult` a gateway client gets.

use rmcp::model::{CallToolResult, ContentBlock as Content};

use crate::messages::call::{ModelEdit, OutcomeKind, ToolOutcome};

/// The client's result for `outcome`:
/// - `ok` and `server_error` (the server's own `isError`): the backend's
///   result as received (secrets redacted; images, audio, resource links
///   and `structuredContent` kept), then what hooks did to the model's
///   text, replayed in order (appended context as text blocks; a
///   replacement drops the content, keeping `structuredContent` out too).
/// - every other kind: `isError` with the runtime's honest text (TRUST-6);
///   a trust refusal because nobody could be asked also says how to allow
///   the server.
pub(super) fn to_call_result(mut outcome: ToolOutcome) -> CallToolResult {
    // The canonical value is moved into the result, not copied (a large
    // result is materialised once).
    let backend = match (outcome.kind, outcome.canonical.take()) {
        (OutcomeKind::Ok | OutcomeKind::ServerError, Some(c)) => {
            serde_json::from_value::<CallToolResult>(c).ok()
        }
        _ => None,
    };
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
            && text.contains("none could be asked")
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
