//! Image admission (CALL-7) and projection byte budgets (CALL-8, LOOP-3): the
//! pure rules. Saving admitted images is the attachment store's job
//! (`actors::attachments`).

use base64::Engine;
use serde::Serialize;
use serde_json::Value;

/// MIME types an image block may have (CALL-7).
pub const IMAGE_MIME_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Default `max_result_bytes` (LOOP-3): the projection of one result.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 32 * 1024;
/// Default `max_turn_result_bytes` (LOOP-3): all projections of one turn.
pub const DEFAULT_MAX_TURN_RESULT_BYTES: usize = 128 * 1024;
/// Default hard cap of a canonical value kept in memory; past it the value is
/// spilled to the attachment store and replaced by a pointer (CALL-8).
pub const DEFAULT_CANONICAL_HARD_CAP_BYTES: usize = 16 * 1024 * 1024;

/// One image block checked for admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageCheck {
    /// Index of the block in `content`.
    pub index: usize,
    /// The declared MIME type.
    pub mime: String,
    /// Decoded bytes, when the base64 was canonical.
    pub bytes: Option<Vec<u8>>,
    /// Why it is not admissible, if it is not.
    pub problem: Option<String>,
}

/// Check every image of a result before any is admitted (CALL-7).
pub fn check_images(canonical: &Value) -> Vec<ImageCheck> {
    let Some(content) = canonical.get("content").and_then(Value::as_array) else {
        return Vec::new();
    };
    content
        .iter()
        .enumerate()
        .filter(|(_, b)| b.get("type").and_then(Value::as_str) == Some("image"))
        .map(|(index, b)| {
            let mime = b
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let data = b.get("data").and_then(Value::as_str).unwrap_or("");
            let mut problem = None;
            if !IMAGE_MIME_TYPES.contains(&mime.as_str()) {
                problem = Some(format!(
                    "MIME type {mime:?} is not one of {}",
                    IMAGE_MIME_TYPES.join(", ")
                ));
            }
            let bytes = match decode_canonical_base64(data) {
                Ok(b) => Some(b),
                Err(e) => {
                    problem.get_or_insert(e);
                    None
                }
            };
            ImageCheck {
                index,
                mime,
                bytes,
                problem,
            }
        })
        .collect()
}

/// Decode base64 only if it is canonical: standard alphabet, correct padding,
/// and re-encoding the bytes gives the same string (`AB==` is not canonical,
/// `AQ==` is).
pub fn decode_canonical_base64(data: &str) -> Result<Vec<u8>, String> {
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine
        .decode(data)
        .map_err(|e| format!("the base64 data is invalid: {e}"))?;
    if engine.encode(&bytes) != data {
        return Err("the base64 data is not canonical (re-encoding it differs)".into());
    }
    Ok(bytes)
}

/// The file extension for an admitted MIME type.
pub fn extension_for(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/webp" => "webp",
        "image/gif" => "gif",
        _ => "bin",
    }
}

/// An image admitted into the projection (CALL-7), saved by the attachment store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdmittedImage {
    /// Index of the block in `content`.
    pub index: usize,
    /// MIME type.
    pub mime: String,
    /// Decoded size.
    pub bytes: usize,
    /// Where the store saved it.
    pub path: String,
}

/// Where admitted images (and spilled canonical values) are saved (CALL-7,
/// CALL-8). The runtime never fails a call because the store is missing or
/// fails: the projection falls back to text.
pub trait AttachmentStore: Send + Sync + 'static {
    /// Save `bytes` of type `mime`; returns where (a path or URI).
    fn save<'a>(
        &'a self,
        mime: &'a str,
        bytes: &'a [u8],
    ) -> futures::future::BoxFuture<'a, Result<String, String>>;
}

/// Byte limits on what goes back to the model (LOOP-3, CALL-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultLimits {
    /// Projection bytes per result.
    pub max_result_bytes: usize,
    /// Projection bytes per turn (applied by [`TurnBudget`]).
    pub max_turn_result_bytes: usize,
    /// A canonical value larger than this is spilled to the attachment store.
    pub canonical_hard_cap_bytes: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        Self {
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_turn_result_bytes: DEFAULT_MAX_TURN_RESULT_BYTES,
            canonical_hard_cap_bytes: DEFAULT_CANONICAL_HARD_CAP_BYTES,
        }
    }
}

/// The per-turn budget (LOOP-3): every projection of a turn is charged
/// against it; past it, projections are cut with a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnBudget {
    max: usize,
    used: usize,
}

impl TurnBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { max, used: 0 }
    }

    /// Charge one projection; returns it (cut if the turn is over budget) and the bytes cut.
    pub fn charge(&mut self, projection: &str) -> (String, usize) {
        let left = self.max.saturating_sub(self.used);
        let (text, cut) = apply_budget(projection, left, "the tool results of one turn");
        self.used += projection.len() - cut;
        (text, cut)
    }
}

/// Cut `text` to at most `max` bytes on a UTF-8 boundary, with an explicit
/// marker saying how much was cut (CALL-8). Returns the text and the bytes cut.
pub fn apply_budget(text: &str, max: usize, what: &str) -> (String, usize) {
    if text.len() <= max {
        return (text.to_owned(), 0);
    }
    let mut cut_at = max;
    while cut_at > 0 && !text.is_char_boundary(cut_at) {
        cut_at -= 1;
    }
    let cut = text.len() - cut_at;
    (
        format!(
            "{}\n[… {cut} bytes cut: {what} is limited to {max} bytes; the full value remains available to programmatic callers]",
            &text[..cut_at]
        ),
        cut,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_canonical_base64_is_admitted() {
        // CALL-7: `AB==` is not canonical, `AQ==` is.
        assert_eq!(decode_canonical_base64("AQ==").unwrap(), vec![1]);
        assert!(
            decode_canonical_base64("AB==").is_err(),
            "non-zero trailing bits"
        );
        assert!(decode_canonical_base64(" AQ==").is_err(), "no whitespace");
        assert!(
            decode_canonical_base64("AQ").is_err(),
            "padding is required"
        );
        assert!(
            decode_canonical_base64("A-_=").is_err(),
            "standard alphabet only"
        );
    }

    #[test]
    fn every_image_is_checked_with_its_problem() {
        let v = json!({"content": [
            {"type": "text", "text": "x"},
            {"type": "image", "mimeType": "image/png", "data": "AQ=="},
            {"type": "image", "mimeType": "image/tiff", "data": "AQ=="},
            {"type": "image", "mimeType": "image/gif", "data": "AB=="}
        ]});
        let checks = check_images(&v);
        assert_eq!(checks.len(), 3);
        assert_eq!(checks[0].index, 1);
        assert!(checks[0].problem.is_none());
        assert!(checks[1].problem.as_deref().unwrap().contains("image/tiff"));
        assert!(checks[2].problem.as_deref().unwrap().contains("base64"));
    }

    #[test]
    fn a_turn_budget_is_shared_by_every_result_of_the_turn() {
        // LOOP-3
        let mut b = TurnBudget::new(10);
        assert_eq!(b.charge("123456"), ("123456".to_owned(), 0));
        let (t, cut) = b.charge("abcdefgh");
        assert_eq!(cut, 4);
        assert!(
            t.starts_with("abcd\n[… 4 bytes cut: the tool results of one turn"),
            "{t}"
        );
        let (t, cut) = b.charge("x");
        assert_eq!(cut, 1);
        assert!(t.starts_with("\n[… 1 bytes cut"), "{t}");
    }

    #[test]
    fn budgets_cut_on_a_char_boundary_and_say_how_much() {
        // CALL-8
        let (t, cut) = apply_budget("héllo wörld", 2, "a tool result");
        assert_eq!(cut, "héllo wörld".len() - 1);
        assert!(
            t.starts_with("h\n[… 12 bytes cut: a tool result is limited to 2 bytes"),
            "{t}"
        );
        assert_eq!(apply_budget("short", 10, "x"), ("short".to_owned(), 0));
    }
}
