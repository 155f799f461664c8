//! Reading one stdout line: the scanning parsers that classify it without
//! a full parse, the fast paths of `tools/list` pages and `tools/call`
//! replies, and the line that cannot be read (CALL-4).

use super::*;

/// A `tools/list` reply, read once as raw JSON: its `tools` are kept for
/// the catalog fetch and rmcp gets the reply with an empty array (nothing
/// typed per tool, no re-serialisation; PERF-1). `None` when the line is
/// no awaited reply with a `tools` array (then it is read as usual, and a
/// malformed page still reaches the fetch).
pub(super) fn tools_page(diag: &Diagnostics, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    // The id first, by a scan that stops at it: a line that answers
    // something else is not parsed twice.
    let id = top_level_id(line)?.to_string();
    if !diag.take_tools_pending(&id) {
        return None;
    }
    let mut v = serde_json::from_slice::<serde_json::Value>(line).ok()?;
    let Some(serde_json::Value::Array(tools)) = v
        .pointer_mut("/result/tools")
        .map(|t| std::mem::replace(t, serde_json::Value::Array(Vec::new())))
    else {
        // Not a page (an error reply, no tools array): read as usual.
        return None;
    };
    diag.stash_tools_page(id, tools);
    // What rmcp cannot type (a bad nextCursor) is its CustomResult,
    // as before: the fetch takes the stashed page either way.
    serde_json::from_value(v).ok()
}

/// The reply to an awaited `tools/call`, read once as raw JSON: rmcp
/// gets its result as a `CustomResult`, which the call path takes as
/// the canonical value as it is (no typed copy, no re-serialisation,
/// none of the untagged result union's failed tries; PERF-1). Only a
/// result rmcp would type as a plain `CallToolResult` takes this path
/// (an object with a `content` array, no other `resultType` than
/// `complete`); `None` for anything else, which is read as usual.
pub(super) fn call_reply(
    pending: &mut std::collections::HashSet<rmcp::model::RequestId>,
    line: &[u8],
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let reply = serde_json::from_slice::<RawReply>(line).ok()?;
    let id = reply.id?;
    let result = match (reply.result, reply.error) {
        (Some(result), None) => result,
        // An error reply answers the call too: its id is not awaited any
        // more (rmcp reads the error as usual).
        (_, Some(_)) => {
            pending.remove(&id);
            return None;
        }
        // A request from the server: it has an id too, from its own id
        // space, and must not take an awaited one.
        (None, None) => return None,
    };
    if !pending.remove(&id) {
        return None;
    }
    let plain = result
        .get("content")
        .is_some_and(serde_json::Value::is_array)
        && result
            .get("resultType")
            .is_none_or(|t| t.as_str() == Some("complete"));
    if !plain {
        return None;
    }
    Some(rmcp::model::JsonRpcMessage::Response(
        rmcp::model::JsonRpcResponse {
            jsonrpc: rmcp::model::JsonRpcVersion2_0,
            id,
            result: rmcp::model::ServerResult::CustomResult(rmcp::model::CustomResult(result)),
        },
    ))
}

/// The chaos runner's `cross-replies` break switch: call X's reply goes
/// to another call Y still in flight, and Y's reply, when it comes, to X
/// (`map` holds Y → X): every call gets one reply, another call's.
pub(super) fn cross_reply(
    pending: &std::collections::HashSet<rmcp::model::RequestId>,
    map: &mut std::collections::HashMap<rmcp::model::RequestId, rmcp::model::RequestId>,
    msg: &mut RxJsonRpcMessage<RoleClient>,
) {
    let rmcp::model::JsonRpcMessage::Response(r) = msg else {
        return;
    };
    if let Some(to) = map.remove(&r.id) {
        r.id = to;
    } else if let Some(other) = pending
        .iter()
        .find(|p| !map.contains_key(*p) && !map.values().any(|v| v == *p))
        .cloned()
    {
        // Y stays awaited (its reply comes the fast way, then to X).
        let own = std::mem::replace(&mut r.id, other.clone());
        map.insert(other, own);
    }
}

/// A JSON-RPC id as the catalog fetch and the transport both key it: its
/// JSON text (`2`, `"abc"`).
pub(crate) fn request_id_key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_value(id)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

/// One line as rmcp's message: an awaited `tools/list` page or
/// `tools/call` reply by its fast path, anything else typed.
pub(super) fn decode(
    diag: &Diagnostics,
    calls_pending: &mut std::collections::HashSet<rmcp::model::RequestId>,
    line: &[u8],
    cross: &mut Option<std::collections::HashMap<rmcp::model::RequestId, rmcp::model::RequestId>>,
) -> Result<RxJsonRpcMessage<RoleClient>, serde_json::Error> {
    if diag.tools_awaited()
        && let Some(msg) = tools_page(diag, line)
    {
        return Ok(msg);
    }
    if !calls_pending.is_empty()
        && let Some(mut msg) = call_reply(calls_pending, line)
    {
        if let Some(map) = cross {
            cross_reply(calls_pending, map, &mut msg);
        }
        return Ok(msg);
    }
    serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line)
}

/// The JSON-RPC error code of a reply the runtime could not read (not
/// JSON-RPC, invalid UTF-8, both `result` and `error`, nested past
/// serde_json's 128-level limit); the call path maps it to
/// `invalid_result` (CALL-4).
pub const UNREADABLE_REPLY_CODE: i32 = -32099;

/// How the message of an [`UNREADABLE_REPLY_CODE`] error starts.
pub const UNREADABLE_REPLY_PREFIX: &str = "the server's reply cannot be read";

/// Why a line was not a message, as the call's outcome says it.
pub(super) fn unreadable_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("recursion limit") {
        format!("{UNREADABLE_REPLY_PREFIX}: it is nested more than 128 levels deep")
    } else {
        format!("{UNREADABLE_REPLY_PREFIX}: {text}")
    }
}

/// For a reply that cannot be read: an error response to the same request
/// id, so the call ends at once with `reason`, and that id. `None` when
/// the line has no top-level `id`, or has a `method` (a request or a
/// notification of the server's: its id is from the server's own id
/// space, and nothing of ours waits for it).
pub(super) fn unreadable_reply(
    line: &[u8],
    reason: &str,
) -> Option<(RxJsonRpcMessage<RoleClient>, serde_json::Value)> {
    let id = top_level_id(line)?;
    if top_level_key(line, "method") {
        return None;
    }
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": UNREADABLE_REPLY_CODE,
            "message": reason,
        },
    });
    Some((serde_json::from_value(error).ok()?, id))
}

/// `line` with every lone UTF-16 surrogate escape (a `\uD800`–`\uDFFF`
/// not in a high–low pair) written as `\uFFFD`; `None` when it has none.
pub(super) fn replace_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    fn hex4(line: &[u8], at: usize) -> Option<u16> {
        let digits = std::str::from_utf8(line.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    }
    // `\u` + 4 hex digits at `at` (the backslash's index).
    let unit = |at: usize| -> Option<u16> {
        (line.get(at + 1) == Some(&b'u'))
            .then(|| hex4(line, at + 2))
            .flatten()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            // Any other escape: two bytes.
            i += 2;
            continue;
        };
        let lone = match u {
            0xD800..=0xDBFF => match unit(i + 6) {
                Some(0xDC00..=0xDFFF) => {
                    i += 12;
                    continue;
                }
                _ => true,
            },
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let o = out.get_or_insert_with(|| Vec::with_capacity(line.len()));
            o.extend_from_slice(&line[copied..i]);
            o.extend_from_slice(b"\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    let mut out = out?;
    out.extend_from_slice(&line[copied..]);
    Some(out)
}

/// The value of the top-level `"id"` of a JSON object, found by scanning
/// (no recursion): a number or a string, as JSON.
pub(super) fn top_level_id(line: &[u8]) -> Option<serde_json::Value> {
    let i = top_level_value_at(line, "id")?;
    let value_end = if line.get(i) == Some(&b'"') {
        string_end(line, i + 1)? + 1
    } else {
        let len = line[i..]
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(line.len() - i);
        i + len
    };
    let id: serde_json::Value = serde_json::from_slice(&line[i..value_end]).ok()?;
    (id.is_number() || id.is_string()).then_some(id)
}

/// Whether the JSON object in `line` has the top-level key `key`, found
/// by scanning (no recursion).
pub(super) fn top_level_key(line: &[u8], key: &str) -> bool {
    top_level_value_at(line, key).is_some()
}

/// Where the value of the first top-level `key` of the JSON object in
/// `line` starts, found by scanning (no recursion).
pub(super) fn top_level_value_at(line: &[u8], wanted: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let start = i + 1;
                let end = string_end(line, start)?;
                let key = &line[start..end];
                // A key may be spelt with escapes (`"\u0069d"`): decode those.
                let is_wanted = depth == 1
                    && (key == wanted.as_bytes()
                        || (key.contains(&b'\\')
                            && serde_json::from_slice::<String>(&line[i..=end])
                                .is_ok_and(|k| k == wanted)));
                i = end + 1;
                if is_wanted {
                    while i < line.len() && line[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    if line.get(i) != Some(&b':') {
                        continue;
                    }
                    i += 1;
                    while i < line.len() && line[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    return Some(i);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote that closes the string starting at `start`.
pub(super) fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

pub(super) fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}
