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
                .ok_or(ImageDataError::NoData)
                .and_then(decode_canonical_base64);
            let bytes = match decoded {
                Ok(b) => Some(b),
                Err(e) => {
                    problem.get_or_insert(e.to_string());
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
pub fn decode_canonical_base64(data: &str) -> Result<Vec<u8>, ImageDataError> {
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(data).map_err(ImageDataError::Invalid)?;
    if engine.encode(&bytes) != data {
        return Err(ImageDataError::NotCanonical);
    }
    Ok(bytes)
}

/// Why an image block's data is not an image's bytes (CALL-7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageDataError {
    /// No data: absent, not a string, or empty.
    #[error("the image has no base64 data")]
    NoData,
    /// Not base64.
    #[error("the base64 data is invalid: {0}")]
    Invalid(base64::DecodeError),
    /// Base64 that re-encodes differently (`AB==`).
    #[error("the base64 data is not canonical (re-encoding it differs)")]
    NotCanonical,
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

#[cfg(test)]
mod props {
    //! Property tests of the image admission checks.

    use super::*;
    use crate::messages::prop_gen::{config, json_value, tricky_text};
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;
    use serde_json::json;

    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    /// Ways to make canonical base64 non-canonical (or not base64 at all).
    #[derive(Debug, Clone)]
    enum Spoil {
        /// Drop the `=` padding.
        StripPadding,
        /// Set a trailing bit that padding says must be zero (`AB==`).
        TrailingBits,
        /// Whitespace or a line break somewhere.
        Whitespace(prop::sample::Index, &'static str),
        /// A character outside the standard alphabet (URL-safe, punctuation).
        Foreign(prop::sample::Index, char),
        /// One character too many.
        Append(char),
    }

    fn spoil() -> impl Strategy<Value = Spoil> {
        prop_oneof![
            Just(Spoil::StripPadding),
            Just(Spoil::TrailingBits),
            (
                any::<prop::sample::Index>(),
                prop::sample::select(vec![" ", "\n", "\r\n", "\t"])
            )
                .prop_map(|(i, w)| Spoil::Whitespace(i, w)),
            (
                any::<prop::sample::Index>(),
                prop::sample::select(vec!['-', '_', '.', '*', 'é'])
            )
                .prop_map(|(i, c)| Spoil::Foreign(i, c)),
            prop::sample::select(vec!['A', '=', '/']).prop_map(Spoil::Append),
        ]
    }

    /// `canonical` spoiled, or `None` where the spoiling does not apply.
    fn spoiled(canonical: &str, how: &Spoil) -> Option<String> {
        let mut s = canonical.to_owned();
        match how {
            Spoil::StripPadding => {
                s = s.trim_end_matches('=').to_owned();
                (s.len() != canonical.len()).then_some(s)
            }
            Spoil::TrailingBits => {
                let body = s.trim_end_matches('=');
                if body.len() == s.len() {
                    return None;
                }
                let last = body.len() - 1;
                let v = ALPHABET.iter().position(|c| *c == body.as_bytes()[last])?;
                let spoilt = ALPHABET[v | 1] as char;
                s.replace_range(last..=last, &spoilt.to_string());
                Some(s)
            }
            Spoil::Whitespace(at, w) => {
                s.insert_str(at.index(s.len() + 1), w);
                Some(s)
            }
            Spoil::Foreign(at, c) => {
                if s.is_empty() {
                    return None;
                }
                let i = at.index(s.len());
                s.replace_range(i..=i, &c.to_string());
                Some(s)
            }
            Spoil::Append(c) => {
                s.push(*c);
                Some(s)
            }
        }
    }

    fn mime() -> impl Strategy<Value = String> {
        prop::sample::select(IMAGE_MIME_TYPES.to_vec()).prop_map(str::to_owned)
    }

    /// A MIME type that is not one of the four: near misses and anything.
    fn wrong_mime() -> impl Strategy<Value = String> {
        prop_oneof![
            mime().prop_map(|m| m.to_uppercase()),
            mime().prop_map(|m| format!(" {m}")),
            mime().prop_map(|m| format!("{m}; charset=binary")),
            Just("image/tiff".to_owned()),
            Just("image/svg+xml".to_owned()),
            Just(String::new()),
            tricky_text(),
        ]
        .prop_filter("not an image MIME type", |m| {
            !IMAGE_MIME_TYPES.contains(&m.as_str())
        })
    }

    fn image(mime: String, data: String) -> Value {
        json!({"type": "image", "mimeType": mime, "data": data})
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_value_is_checked_without_panicking_one_check_per_image_block(v in json_value(), blocks in prop::collection::vec(json_value(), 0..6)) {
            // CALL-7: every image block is checked, in its position.
            for value in [v, json!({"content": blocks})] {
                let checks = check_images(&value);
                let images: Vec<usize> = value
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .filter(|(_, b)| b.get("type").and_then(Value::as_str) == Some("image"))
                    .map(|(i, _)| i)
                    .collect();
                prop_assert_eq!(checks.iter().map(|c| c.index).collect::<Vec<_>>(), images);
                for c in &checks {
                    // Admitted only when the MIME type is allowed and the
                    // data re-encodes to exactly what was sent.
                    if c.problem.is_none() {
                        let block = &value["content"][c.index];
                        prop_assert!(IMAGE_MIME_TYPES.contains(&c.mime.as_str()));
                        let bytes = c.bytes.as_ref().unwrap();
                        let again = STANDARD.encode(bytes);
                        prop_assert_eq!(block["data"].as_str(), Some(again.as_str()));
                    } else {
                        prop_assert!(c.bytes.is_none() || !IMAGE_MIME_TYPES.contains(&c.mime.as_str()));
                    }
                }
            }
        }

        #[test]
        fn canonical_base64_of_an_allowed_type_is_never_flagged(
            bytes in prop::collection::vec(any::<u8>(), 1..300),
            mime in mime(),
        ) {
            // CALL-7
            let checks = check_images(&json!({"content": [image(mime.clone(), STANDARD.encode(&bytes))]}));
            prop_assert_eq!(checks.len(), 1);
            prop_assert_eq!(&checks[0].problem, &None);
            prop_assert_eq!(checks[0].bytes.as_ref(), Some(&bytes));
            prop_assert_eq!(&checks[0].mime, &mime);
        }

        #[test]
        fn non_canonical_base64_is_always_flagged(
            bytes in prop::collection::vec(any::<u8>(), 1..300),
            how in spoil(),
            mime in mime(),
        ) {
            // CALL-7: standard alphabet, correct padding, re-encodes the same.
            let Some(data) = spoiled(&STANDARD.encode(&bytes), &how) else {
                return Ok(());
            };
            let checks = check_images(&json!({"content": [image(mime, data.clone())]}));
            let problem = checks[0].problem.clone().unwrap_or_default();
            prop_assert!(problem.contains("base64"), "{:?} not flagged: {:?}", data, problem);
            prop_assert_eq!(&checks[0].bytes, &None);
        }

        #[test]
        fn a_wrong_mime_type_is_always_flagged_naming_it(
            bytes in prop::collection::vec(any::<u8>(), 1..64),
            mime in wrong_mime(),
        ) {
            // CALL-7: only image/png, image/jpeg, image/webp, image/gif.
            let checks = check_images(&json!({"content": [image(mime.clone(), STANDARD.encode(&bytes))]}));
            let problem = checks[0].problem.clone().unwrap_or_default();
            let named = format!("MIME type {mime:?} is not one of");
            prop_assert!(problem.contains(&named), "{}", problem);
        }

        #[test]
        fn an_image_without_base64_data_is_flagged(
            data in prop_oneof![
                Just(None),
                Just(Some(json!(""))),
                json_value().prop_filter("not a string", |v| !v.is_string()).prop_map(Some),
            ],
            mime in mime(),
        ) {
            // CALL-7: no data, data that is not a string, or empty data is
            // no image.
            let mut block = json!({"type": "image", "mimeType": mime});
            if let Some(d) = data {
                block["data"] = d;
            }
            let checks = check_images(&json!({"content": [block]}));
            let problem = checks[0].problem.clone().unwrap_or_default();
            prop_assert!(problem.contains("base64"), "{:?}", checks[0]);
        }
    }
}
