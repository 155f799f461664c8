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
            prop_assert!(e.to_string().starts_with("result "), "{}", e);
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
