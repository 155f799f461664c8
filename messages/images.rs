//! Image admission (CALL-7) and projection byte budgets (CALL-8, LOOP-3): the
//! pure rules. Saving admitted images is the attachment store's job
//! (`actors::attachments`).

use base64::Engine;
use serde::Serialize;
use serde_json::Value;

/// MIME types an image block may have (CALL-7).
pub const IMAGE_MIME_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

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
            // No data (absent, not a string, or empty) is no image: it
            // would be admitted and saved as an empty file.
            let data = b
                .get("data")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty());
            let mut problem = None;
            if !IMAGE_MIME_TYPES.contains(&mime.as_str()) {
                problem = Some(format!(
                    "MIME type {mime:?} is not one of {}",
                    IMAGE_MIME_TYPES.join(", ")
                ));
            }
            let decoded = data
                .ok_or_else(|| "the image has no base64 data".to_owned())
                .and_then(decode_canonical_base64);
            let bytes = match decoded {
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
    ) -> futures::future::BoxFuture<'a, Result<String, super::store::StoreError>>;
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
    fn an_image_block_without_data_is_flagged_not_admitted_empty() {
        // CALL-7: found by the property test
        // `an_image_without_base64_data_is_flagged`; the minimal input was
        // `{"type": "image", "mimeType": "image/png"}`, which was admitted
        // as a zero-byte image (and saved as an empty file).
        let v = json!({"content": [
            {"type": "image", "mimeType": "image/png"},
            {"type": "image", "mimeType": "image/png", "data": 7},
            {"type": "image", "mimeType": "image/png", "data": ""}
        ]});
        for c in check_images(&v) {
            assert_eq!(c.bytes, None);
            assert_eq!(
                c.problem.as_deref(),
                Some("the image has no base64 data"),
                "block {}",
                c.index
            );
        }
    }
}
