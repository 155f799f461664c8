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
        check_call_tool_result(&json!({"isError": true})).map_err(|e| e.to_string()),
        Err("result has no content array".to_string())
    );
}

// CALL-3: the error says what was wrong.
#[test]
fn wrong_shapes_are_rejected_with_a_reason() {
    assert_eq!(
        check_call_tool_result(&json!([1])).map_err(|e| e.to_string()),
        Err("result must be an object, got array".to_string())
    );
    assert_eq!(
        check_call_tool_result(&json!({"content": "hi"})).map_err(|e| e.to_string()),
        Err("result content must be an array, got string".to_string())
    );
    assert_eq!(
        check_call_tool_result(&json!({"content": [], "isError": "yes"}))
            .map_err(|e| e.to_string()),
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
