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
pub fn check_call_tool_result(value: &Value) -> Result<(), ResultShapeError> {
    let Value::Object(result) = value else {
        return Err(ResultShapeError::NotAnObject { got: kind(value) });
    };
    match result.get("content") {
        Some(Value::Array(_)) => {}
        Some(other) => {
            return Err(ResultShapeError::ContentNotAnArray { got: kind(other) });
        }
        None => {
            if !result.contains_key("structuredContent") {
                return Err(ResultShapeError::NoContent);
            }
        }
    }
    match result.get("isError") {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(other) => Err(ResultShapeError::IsErrorNotABoolean { got: kind(other) }),
    }
}

/// Why a result does not have the shape of a `CallToolResult` (CALL-3);
/// `got` is the JSON kind found (`array`, `string`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultShapeError {
    /// The result is not an object.
    #[error("result must be an object, got {got}")]
    NotAnObject {
        /// What it is.
        got: &'static str,
    },
    /// `content` is present and not an array.
    #[error("result content must be an array, got {got}")]
    ContentNotAnArray {
        /// What it is.
        got: &'static str,
    },
    /// No `content`, and no `structuredContent` either.
    #[error("result has no content array")]
    NoContent,
    /// `isError` is present and not a boolean.
    #[error("result isError must be a boolean, got {got}")]
    IsErrorNotABoolean {
        /// What it is.
        got: &'static str,
    },
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
mod tests;

#[cfg(test)]
mod props;
