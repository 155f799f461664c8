//! `CallToolResult` shape check (CALL-3) and the model projection (CALL-6),
//! both working on the raw JSON as received so unknown block types survive
//! in the canonical value.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::budget::ceil_char_boundary;
use super::images::AdmittedImage;
use super::schema::kind;

/// The projection when a result has no model-visible content at all (CALL-6).
pub const NO_CONTENT: &str = "The tool returned no content.";

/// Sentence appended to every placeholder (CALL-6).
pub const RAW_KEPT: &str = "the raw data remains available to programmatic callers";

/// Checks that `value` has the shape of a `CallToolResult` (CALL-3).
///
/// It must be an object; `content`, if present, must be an array (it may be
/// absent only when `structuredContent` is present); `isError`, if present,
/// must be a boolean; `structuredContent` may be any JSON value. A `null`
/// counts as present (and so is a wrong type for `content` and `isError`).
/// Content blocks themselves are not checked: [`project`] handles any block.
pub fn check_call_tool_result(value: &Value) -> Result<(), String> {
    let Value::Object(result) = value else {
        return Err(format!("result must be an object, got {}", kind(value)));
    };
    match result.get("content") {
        Some(Value::Array(_)) => {}
        Some(other) => {
            return Err(format!(
                "result content must be an array, got {}",
                kind(other)
            ));
        }
        None => {
            if !result.contains_key("structuredContent") {
                return Err("result has no content array".to_string());
            }
        }
    }
    match result.get("isError") {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(other) => Err(format!(
            "result isError must be a boolean, got {}",
            kind(other)
        )),
    }
}

/// Whether the result is a failed outcome: `isError` is `true` (CALL-3).
pub fn is_error(value: &Value) -> bool {
    value.get("isError") == Some(&Value::Bool(true))
}

/// Decoded size of a base64 string, estimated from its length: `len * 3 / 4`
/// minus padding, ignoring ASCII whitespace.
fn base64_size(data: &str) -> usize {
    let len = data.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    let padding = data
        .trim_end()
        .bytes()
        .rev()
        .take(2)
        .take_while(|&b| b == b'=')
        .count();
    (len * 3 / 4).saturating_sub(padding)
}

/// A string field of an object, if present and a string.
fn str_field<'a>(block: &'a Value, key: &str) -> Option<&'a str> {
    block.get(key).and_then(Value::as_str)
}

/// Size in bytes of the base64 `data` field of a block (0 if absent).
fn data_size(block: &Value, key: &str) -> usize {
    str_field(block, key).map_or(0, base64_size)
}

/// Projects one content block to its model-visible line(s).
fn project_block(block: &Value) -> String {
    if !block.is_object() {
        return format!(
            "[unsupported content block: not an object ({})]",
            kind(block)
        );
    }
    let Some(block_type) = str_field(block, "type") else {
        return format!("[unsupported content block with no type — {RAW_KEPT}]");
    };
    match block_type {
        "text" => match str_field(block, "text") {
            Some(text) => text.to_string(),
            None => format!("[text block without text — {RAW_KEPT}]"),
        },
        "resource_link" => match (str_field(block, "name"), str_field(block, "uri")) {
            (Some(name), Some(uri)) => match str_field(block, "mimeType") {
                Some(mime) => format!("[resource link] {name}: {uri} ({mime})"),
                None => format!("[resource link] {name}: {uri}"),
            },
            (Some(name), None) => {
                format!("[resource link missing its URI (name: {name})]")
            }
            (None, Some(uri)) => {
                format!("[resource link missing its name (URI: {uri})]")
            }
            (None, None) => "[resource link missing its name and URI]".to_string(),
        },
        "resource" => {
            let resource = block.get("resource");
            let uri = resource
                .and_then(|r| str_field(r, "uri"))
                .unwrap_or("without URI");
            if let Some(text) = resource.and_then(|r| str_field(r, "text")) {
                text.to_string()
            } else if let Some(r) = resource.filter(|r| str_field(r, "blob").is_some()) {
                let mime = str_field(r, "mimeType").unwrap_or("unknown type");
                format!(
                    "[unsupported content: embedded blob resource {uri}, {mime}, {} bytes — {RAW_KEPT}]",
                    data_size(r, "blob")
                )
            } else {
                format!("[embedded resource {uri} has neither text nor blob — {RAW_KEPT}]")
            }
        }
        "audio" => {
            let mime = str_field(block, "mimeType").unwrap_or("unknown type");
            format!(
                "[unsupported content: audio {mime}, {} bytes — {RAW_KEPT}]",
                data_size(block, "data")
            )
        }
        "image" => {
            let mime = str_field(block, "mimeType").unwrap_or("unknown type");
            format!(
                "[image {mime}, {} bytes — not shown: this route does not admit images; {RAW_KEPT}]",
                data_size(block, "data")
            )
        }
        other => format!("[unsupported content block of type {other:?} — {RAW_KEPT}]"),
    }
}

/// How one image block is shown to the model (CALL-7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRender {
    /// Admitted: the image itself goes to the model, in its position.
    Admitted(AdmittedImage),
    /// Not admitted: this line stands in its place.
    Line(String),
}

/// One part of the model projection, in block order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProjectionPart {
    /// Text (adjacent text blocks are joined with newlines).
    Text {
        /// The text.
        text: String,
    },
    /// An admitted image.
    Image(AdmittedImage),
}

/// The projection as parts: like [`project`], but image blocks are rendered as
/// `images` says (blocks without an entry get the default placeholder).
pub fn project_parts(value: &Value, images: &BTreeMap<usize, ImageRender>) -> Vec<ProjectionPart> {
    project_parts_within(value, images, usize::MAX).0
}

/// [`project_parts`] that copies at most `max + 1` bytes of text: a large
/// result's text is not copied in whole only to be cut to its budget
/// (design.md: a large result is materialised once). Returns the parts and
/// the text bytes not copied, which the budget counts as cut.
pub fn project_parts_within(
    value: &Value,
    images: &BTreeMap<usize, ImageRender>,
    max: usize,
) -> (Vec<ProjectionPart>, usize) {
    let mut parts: Vec<ProjectionPart> = Vec::new();
    // Text bytes that may still be copied (one over the budget, so the
    // budget sees the overflow and marks the cut), and those skipped.
    let mut room = max.saturating_add(1);
    let mut skipped = 0usize;
    let mut visible = false;
    let mut image_seen = false;
    let mut push_text = |parts: &mut Vec<ProjectionPart>, t: &str| {
        visible |= !t.trim().is_empty();
        let merge = matches!(parts.last(), Some(ProjectionPart::Text { .. }));
        if merge && room == 0 {
            skipped += t.len() + 1;
            return;
        }
        if merge {
            room -= 1; // the newline joining it to the previous text
        }
        // Up to the next character boundary at or past the room, so a text
        // over the budget is copied one character past it and the budget
        // sees, and marks, the cut.
        let body = ceil_char_boundary(t, t.len().min(room));
        room = room.saturating_sub(body);
        skipped += t.len() - body;
        match parts.last_mut() {
            Some(ProjectionPart::Text { text }) => {
                text.push('\n');
                text.push_str(&t[..body]);
            }
            _ => parts.push(ProjectionPart::Text {
                text: t[..body].to_owned(),
            }),
        }
    };
    if let Some(blocks) = value.get("content").and_then(Value::as_array) {
        for (i, block) in blocks.iter().enumerate() {
            match images.get(&i) {
                Some(ImageRender::Admitted(img)) => {
                    image_seen = true;
                    parts.push(ProjectionPart::Image(img.clone()));
                }
                Some(ImageRender::Line(line)) => push_text(&mut parts, line),
                // The text of a text block is borrowed, not projected anew.
                None => match (str_field(block, "type"), str_field(block, "text")) {
                    (Some("text"), Some(text)) => push_text(&mut parts, text),
                    _ => push_text(&mut parts, &project_block(block)),
                },
            }
        }
    }
    if visible || image_seen {
        return (parts, skipped);
    }
    let (text, skipped) = match value.get("structuredContent") {
        Some(structured) if !structured.is_null() => json_within(structured, max),
        _ => (NO_CONTENT.to_string(), 0),
    };
    (vec![ProjectionPart::Text { text }], skipped)
}

/// The compact JSON of `value`, copied like the text of
/// [`project_parts_within`]: at most `max + 1` bytes, then up to the end of
/// the character they cut. Returns it and the bytes not copied.
fn json_within(value: &Value, max: usize) -> (String, usize) {
    struct Within {
        kept: Vec<u8>,
        room: usize,
        full: bool,
        skipped: usize,
    }
    impl std::io::Write for Within {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut take = 0;
            if !self.full {
                take = buf.len().min(self.room.saturating_sub(self.kept.len()));
                // Past the room, only the rest of a character begun
                // (UTF-8 continuation bytes).
                while take < buf.len() && self.kept.len() + take >= self.room {
                    if buf[take] & 0xC0 != 0x80 {
                        self.full = true;
                        break;
                    }
                    take += 1;
                }
                self.kept.extend_from_slice(&buf[..take]);
            }
            self.skipped += buf.len() - take;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Within {
        kept: Vec::new(),
        room: max.saturating_add(1),
        full: false,
        skipped: 0,
    };
    // Serializing a Value into a writer that cannot fail cannot fail.
    let _ = serde_json::to_writer(&mut w, value);
    let text = String::from_utf8(w.kept)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    (text, w.skipped)
}

/// Render parts as one text, admitted images as marker lines.
pub fn parts_to_text(parts: &[ProjectionPart]) -> String {
    parts
        .iter()
        .map(|p| match p {
            ProjectionPart::Text { text } => text.clone(),
            ProjectionPart::Image(img) => format!(
                "[image {}, {} bytes, attached as {}]",
                img.mime, img.bytes, img.path
            ),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The model projection of a `CallToolResult` (CALL-6): one line (or text)
/// per content block, in order, joined with `"\n"`.
///
/// When `content` is missing, not an array, empty, or projects to whitespace
/// only, and `structuredContent` is present and not `null`, the projection is
/// the compact JSON of `structuredContent`; when both have content, the
/// content wins. With nothing model-visible at all, it is [`NO_CONTENT`].
/// The rule as one string, for the tests; the pipeline projects to parts
/// ([`project_parts`]) and joins them ([`parts_to_text`]).
#[cfg(test)]
fn project(value: &Value) -> String {
    let projected = value
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .map(project_block)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    if !projected.trim().is_empty() {
        return projected;
    }
    match value.get("structuredContent") {
        Some(structured) if !structured.is_null() => structured.to_string(),
        _ => NO_CONTENT.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // CALL-3
    #[test]
    fn a_result_with_a_content_array_is_well_formed() {
        assert_eq!(
            check_call_tool_result(&json!({"content": [], "isError": false})),
            Ok(())
        );
        assert_eq!(
            check_call_tool_result(&json!({"content": [{"type": "weird"}, 3]})),
            Ok(())
        );
    }

    // CALL-3
    #[test]
    fn missing_content_is_allowed_only_with_structured_content() {
        assert_eq!(
            check_call_tool_result(&json!({"structuredContent": {"a": 1}})),
            Ok(())
        );
        assert_eq!(
            check_call_tool_result(&json!({"isError": true})),
            Err("result has no content array".to_string())
        );
    }

    // CALL-3: the error says what was wrong.
    #[test]
    fn wrong_shapes_are_rejected_with_a_reason() {
        assert_eq!(
            check_call_tool_result(&json!([1])),
            Err("result must be an object, got array".to_string())
        );
        assert_eq!(
            check_call_tool_result(&json!({"content": "hi"})),
            Err("result content must be an array, got string".to_string())
        );
        assert_eq!(
            check_call_tool_result(&json!({"content": [], "isError": "yes"})),
            Err("result isError must be a boolean, got string".to_string())
        );
    }

    // CALL-3
    #[test]
    fn is_error_is_true_only_for_a_true_flag() {
        assert!(is_error(&json!({"content": [], "isError": true})));
        assert!(!is_error(&json!({"content": [], "isError": false})));
        assert!(!is_error(&json!({"content": []})));
        assert!(!is_error(&json!({"content": [], "isError": "true"})));
    }

    // CALL-6: text blocks merged in order.
    #[test]
    fn text_blocks_are_joined_in_order() {
        let v = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two"}
        ]});
        assert_eq!(project(&v), "one\ntwo");
    }

    // CALL-6: an image between texts keeps its place.
    #[test]
    fn text_image_text_keeps_order() {
        let v = json!({"content": [
            {"type": "text", "text": "before"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "text", "text": "after"}
        ]});
        assert_eq!(
            project(&v),
            "before\n[image image/png, 8 bytes — not shown: this route does not admit images; the raw data remains available to programmatic callers]\nafter"
        );
    }

    // CALL-6: resource_link → its name and URI.
    #[test]
    fn a_resource_link_becomes_a_line_with_name_and_uri() {
        let v = json!({"content": [
            {"type": "resource_link", "name": "report", "uri": "file:///r.pdf", "mimeType": "application/pdf"},
            {"type": "resource_link", "name": "notes", "uri": "file:///n.txt"}
        ]});
        assert_eq!(
            project(&v),
            "[resource link] report: file:///r.pdf (application/pdf)\n[resource link] notes: file:///n.txt"
        );
    }

    // CALL-6: a link missing its name or URI → a notice saying which.
    #[test]
    fn a_resource_link_missing_name_or_uri_gets_a_notice() {
        let v = json!({"content": [
            {"type": "resource_link", "uri": "file:///a"},
            {"type": "resource_link", "name": "a"},
            {"type": "resource_link"}
        ]});
        assert_eq!(
            project(&v),
            "[resource link missing its name (URI: file:///a)]\n[resource link missing its URI (name: a)]\n[resource link missing its name and URI]"
        );
    }

    // CALL-6: an embedded text resource → its text.
    #[test]
    fn an_embedded_text_resource_shows_its_text() {
        let v = json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}
        ]});
        assert_eq!(project(&v), "hello");
    }

    // CALL-6: a blob resource → placeholder naming URI, type and size.
    #[test]
    fn an_embedded_blob_resource_gets_a_placeholder() {
        let v = json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": "AAECAw=="}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAEC"}}
        ]});
        assert_eq!(
            project(&v),
            "[unsupported content: embedded blob resource file:///a.bin, application/octet-stream, 4 bytes — the raw data remains available to programmatic callers]\n\
             [unsupported content: embedded blob resource file:///b.bin, unknown type, 3 bytes — the raw data remains available to programmatic callers]"
        );
    }

    // CALL-6: audio → placeholder naming type and size.
    #[test]
    fn audio_gets_a_placeholder_naming_type_and_size() {
        let v = json!({"content": [
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg"}
        ]});
        assert_eq!(
            project(&v),
            "[unsupported content: audio audio/wav, 4 bytes — the raw data remains available to programmatic callers]"
        );
    }

    // CALL-6: unknown types and non-object blocks → explicit notices.
    #[test]
    fn unknown_and_non_object_blocks_get_notices() {
        let v = json!({"content": [
            {"type": "hologram", "data": "x"},
            "just a string",
            42,
            {"text": "untyped"}
        ]});
        assert_eq!(
            project(&v),
            "[unsupported content block of type \"hologram\" — the raw data remains available to programmatic callers]\n\
             [unsupported content block: not an object (string)]\n\
             [unsupported content block: not an object (number)]\n\
             [unsupported content block with no type — the raw data remains available to programmatic callers]"
        );
    }

    // CALL-6: never silently drop content.
    #[test]
    fn content_is_kept_when_structured_content_also_exists() {
        let v = json!({
            "content": [{"type": "text", "text": "22.5 C, sunny"}],
            "structuredContent": {"temperature": 22.5}
        });
        assert_eq!(project(&v), "22.5 C, sunny");
    }

    // CALL-6: only structuredContent → its JSON.
    #[test]
    fn only_structured_content_becomes_its_json() {
        let v = json!({"structuredContent": {"temperature": 22.5, "conditions": "Sunny"}});
        let projected: Value = serde_json::from_str(&project(&v)).unwrap_or_default();
        assert_eq!(
            projected,
            json!({"temperature": 22.5, "conditions": "Sunny"})
        );
        assert!(!project(&v).contains('\n'), "compact JSON");
        let v = json!({"content": [], "structuredContent": [1, 2]});
        assert_eq!(project(&v), "[1,2]");
    }

    // CALL-6: nothing model-visible → a line saying so.
    #[test]
    fn an_empty_result_says_the_tool_returned_no_content() {
        assert_eq!(project(&json!({"content": []})), NO_CONTENT);
        assert_eq!(project(&json!({})), NO_CONTENT);
        assert_eq!(
            project(&json!({"content": [{"type": "text", "text": ""}]})),
            NO_CONTENT
        );
        assert_eq!(
            project(&json!({"content": [], "structuredContent": null})),
            NO_CONTENT
        );
    }

    // CALL-8, design.md: found by the property test
    // `projecting_within_a_budget_is_projecting_whole_then_cutting`: with
    // only `structuredContent` (the minimal input was `{}` and a budget of
    // 0), the whole JSON was copied, however large, before being cut.
    #[test]
    fn a_large_structured_only_result_is_copied_only_up_to_its_budget() {
        let big = "é".repeat(512 * 1024);
        let v = json!({"structuredContent": {"blob": big}});
        let full = v["structuredContent"].to_string();
        for max in [0, 1, 10, 11, 100, 4096] {
            let (parts, skipped) = project_parts_within(&v, &BTreeMap::new(), max);
            let [ProjectionPart::Text { text }] = &parts[..] else {
                panic!("one text part: {parts:?}");
            };
            assert!(text.len() <= max + 4, "{max}: {} bytes copied", text.len());
            assert!(full.starts_with(text.as_str()));
            assert_eq!(text.len() + skipped, full.len());
            let cut = crate::messages::budget::budget_parts(parts.clone(), max, skipped);
            let whole =
                crate::messages::budget::budget_parts(project_parts(&v, &BTreeMap::new()), max, 0);
            assert_eq!(cut, whole, "{max}");
        }
        let (parts, skipped) = project_parts_within(&v, &BTreeMap::new(), usize::MAX);
        assert_eq!(parts, vec![ProjectionPart::Text { text: full }]);
        assert_eq!(skipped, 0);
    }

    #[test]
    fn a_budget_that_ends_inside_a_character_spread_over_two_writes_does_not_panic() {
        // Found by the projection property: the character that the budget
        // cuts is finished past the room, and serde_json's next write found
        // the room already overrun (an overflow in the subtraction).
        let v = json!({"structuredContent": {"a\u{1fa70}\u{180f}\\": null}});
        let full = v["structuredContent"].to_string();
        for max in 0..full.len() + 2 {
            let (parts, skipped) = project_parts_within(&v, &BTreeMap::new(), max);
            let [ProjectionPart::Text { text }] = &parts[..] else {
                panic!("one text part: {parts:?}");
            };
            assert!(full.starts_with(text.as_str()), "{max}");
            assert_eq!(text.len() + skipped, full.len(), "{max}");
        }
    }

    // CALL-6: the size is estimated from the base64 length minus padding.
    #[test]
    fn base64_sizes_account_for_padding() {
        assert_eq!(base64_size(""), 0);
        assert_eq!(base64_size("QQ=="), 1);
        assert_eq!(base64_size("QUI="), 2);
        assert_eq!(base64_size("QUJD"), 3);
        assert_eq!(base64_size("QUJD\nREVG"), 6);
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the result shape check and the model projection.

    use super::*;
    use crate::messages::budget::{budget_parts, cut_marker, floor_char_boundary};
    use crate::messages::prop_gen::{config, json_value, tricky_text};
    use proptest::prelude::*;
    use serde_json::json;

    /// Text of random size, multi-byte and astral characters included.
    fn text() -> BoxedStrategy<String> {
        prop_oneof![
            3 => tricky_text(),
            1 => ("[a-zé漢😀 \n]{1,4}", 0usize..400).prop_map(|(unit, n)| unit.repeat(n)),
            1 => "[ \n\t]{0,3}",
        ]
        .boxed()
    }

    /// A content block of every kind the projection knows, fields missing
    /// or of the wrong type at times, and anything else.
    fn block() -> BoxedStrategy<Value> {
        let maybe_text = || prop_oneof![4 => text().prop_map(Value::String), 1 => json_value()];
        prop_oneof![
            4 => maybe_text().prop_map(|t| json!({"type": "text", "text": t})),
            1 => Just(json!({"type": "text"})),
            1 => (prop::option::of(maybe_text()), prop::option::of(maybe_text()), prop::option::of(maybe_text()))
                .prop_map(|(name, uri, mime)| {
                    let mut b = json!({"type": "resource_link"});
                    for (k, v) in [("name", name), ("uri", uri), ("mimeType", mime)] {
                        if let Some(v) = v {
                            b[k] = v;
                        }
                    }
                    b
                }),
            1 => (maybe_text(), prop::option::of(maybe_text()), prop::option::of(maybe_text()))
                .prop_map(|(uri, text, blob)| {
                    let mut r = json!({"uri": uri});
                    if let Some(t) = text {
                        r["text"] = t;
                    }
                    if let Some(b) = blob {
                        r["blob"] = b;
                    }
                    json!({"type": "resource", "resource": r})
                }),
            1 => (prop::sample::select(vec!["image", "audio"]), maybe_text(), maybe_text())
                .prop_map(|(kind, mime, data)| json!({"type": kind, "mimeType": mime, "data": data})),
            1 => tricky_text().prop_map(|t| json!({"type": t})),
            1 => json_value(),
        ]
        .boxed()
    }

    /// A tool result: mostly `CallToolResult`-shaped, sometimes anything.
    fn result() -> impl Strategy<Value = Value> {
        let shaped = (
            prop::option::weighted(0.9, prop_oneof![9 => prop::collection::vec(block(), 0..6).prop_map(Value::Array), 1 => json_value()]),
            prop::option::weighted(0.3, json_value()),
            prop::option::weighted(0.3, prop_oneof![any::<bool>().prop_map(Value::Bool), json_value()]),
        )
            .prop_map(|(content, structured, is_error)| {
                let mut o = serde_json::Map::new();
                for (k, v) in [("content", content), ("structuredContent", structured), ("isError", is_error)] {
                    if let Some(v) = v {
                        o.insert(k.into(), v);
                    }
                }
                Value::Object(o)
            });
        prop_oneof![5 => shaped, 1 => json_value()]
    }

    /// How the pipeline renders some of the blocks (as if they were images).
    fn renders() -> impl Strategy<Value = BTreeMap<usize, ImageRender>> {
        let render = prop_oneof![
            text().prop_map(ImageRender::Line),
            (0usize..10_000, "[a-z/]{1,12}").prop_map(|(bytes, path)| {
                ImageRender::Admitted(AdmittedImage {
                    index: 0,
                    mime: "image/png".into(),
                    bytes,
                    path,
                })
            }),
        ];
        prop::collection::btree_map(0usize..6, render, 0..3)
    }

    fn budget() -> impl Strategy<Value = usize> {
        prop_oneof![0usize..16, 16usize..600, Just(usize::MAX)]
    }

    fn text_len(parts: &[ProjectionPart]) -> usize {
        parts
            .iter()
            .map(|p| match p {
                ProjectionPart::Text { text } => text.len(),
                ProjectionPart::Image(_) => 0,
            })
            .sum()
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn the_shape_check_is_its_documented_rule_and_is_error_only_a_true_flag(v in result()) {
            // CALL-3: an object; `content` an array, absent only beside
            // `structuredContent`; `isError`, if present, a boolean.
            let ok = match &v {
                Value::Object(o) => {
                    let content = match o.get("content") {
                        Some(c) => c.is_array(),
                        None => o.contains_key("structuredContent"),
                    };
                    content && o.get("isError").is_none_or(Value::is_boolean)
                }
                _ => false,
            };
            let checked = check_call_tool_result(&v);
            prop_assert_eq!(checked.is_ok(), ok, "{:?}", checked);
            if let Err(e) = checked {
                prop_assert!(e.starts_with("result "), "{}", e);
            }
            prop_assert_eq!(is_error(&v), v.get("isError") == Some(&json!(true)));
        }

        #[test]
        fn any_result_projects_to_some_text_and_never_drops_a_block(v in result(), images in renders()) {
            // CALL-6: never silently drop content; nothing visible says so.
            let parts = project_parts(&v, &images);
            prop_assert!(!parts.is_empty());
            let text = parts_to_text(&parts);
            prop_assert!(!text.is_empty());
            let blocks = v.get("content").and_then(Value::as_array).map_or(0, Vec::len);
            let admitted = images
                .iter()
                .filter(|(i, r)| **i < blocks && matches!(r, ImageRender::Admitted(_)))
                .count();
            let images_out = parts.iter().filter(|p| matches!(p, ProjectionPart::Image(_))).count();
            prop_assert_eq!(images_out, admitted, "admitted images keep their place");
            if images.is_empty() {
                prop_assert_eq!(text, project(&v));
            }
        }

        #[test]
        fn projecting_within_a_budget_is_projecting_whole_then_cutting(
            v in result(),
            images in renders(),
            max in budget(),
        ) {
            // CALL-8, design.md's one-copy rule: copying at most the budget
            // changes nothing the model sees.
            let whole = budget_parts(project_parts(&v, &images), max, 0);
            let (parts, skipped) = project_parts_within(&v, &images, max);
            // At most one character past `max + 1` bytes is copied.
            prop_assert!(text_len(&parts) <= max.saturating_add(4).max(NO_CONTENT.len()));
            prop_assert_eq!(budget_parts(parts, max, skipped), whole);
        }

        #[test]
        fn a_budgeted_projection_keeps_at_most_the_budget_cut_on_a_char_boundary(
            v in result(),
            images in renders(),
            max in budget(),
        ) {
            // CALL-8: the text kept is at most `max` bytes, each part a prefix
            // of its whole text cut where floor_char_boundary says, with one
            // marker saying how much was cut in all; images keep their places.
            let whole = project_parts(&v, &images);
            let total = text_len(&whole);
            let (out, cut) = budget_parts(whole.clone(), max, 0);
            if total <= max {
                prop_assert_eq!(cut, 0);
                prop_assert_eq!(out, whole);
                return Ok(());
            }
            let marker = cut_marker(cut, "a tool result", max);
            let mut kept = 0usize;
            let mut out = out.into_iter();
            let mut cut_seen = false;
            for part in whole {
                match part {
                    ProjectionPart::Image(img) => {
                        prop_assert_eq!(out.next(), Some(ProjectionPart::Image(img)));
                    }
                    // After the cut, text parts are dropped.
                    ProjectionPart::Text { .. } if cut_seen => {}
                    ProjectionPart::Text { text } => {
                        let Some(ProjectionPart::Text { text: got }) = out.next() else {
                            prop_assert!(false, "a text part is missing");
                            unreachable!();
                        };
                        if kept + text.len() <= max {
                            prop_assert_eq!(&got, &text);
                            kept += text.len();
                        } else {
                            cut_seen = true;
                            let body = got.strip_suffix(marker.as_str());
                            prop_assert!(body.is_some(), "the cut part ends with the marker: {:?}", got);
                            let body = body.unwrap_or_default();
                            let end = floor_char_boundary(&text, max - kept);
                            prop_assert_eq!(body, &text[..end]);
                            kept += end;
                        }
                    }
                }
            }
            prop_assert!(cut_seen);
            prop_assert_eq!(out.next(), None);
            prop_assert!(kept <= max);
            prop_assert_eq!(kept + cut, total);
        }
    }
}
