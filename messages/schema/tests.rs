use super::*;
use serde_json::json;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn weather_schema() -> Map<String, Value> {
    obj(json!({
        "type": "object",
        "properties": {
            "temperature": {"type": "number"},
            "conditions": {"type": "string"},
            "humidity": {"type": "number"}
        },
        "required": ["temperature", "conditions", "humidity"]
    }))
}

// SYNC-7: SDK-generated schemas carry $schema, format and title; all are annotations.
#[test]
fn an_sdk_generated_schema_is_supported() {
    let schema = obj(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "WeatherOutput",
        "type": "object",
        "properties": {
            "temperature": {"type": "number", "format": "double", "description": "Celsius"},
            "observed_at": {"type": "string", "format": "date-time", "title": "Observed at"},
            "count": {"type": "integer", "format": "uint32"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "unit": {"enum": ["c", "f"], "default": "c"},
            "kind": {"const": "weather", "examples": ["weather"]},
            "detail": {"oneOf": [{"type": "null"}, {"type": "string"}]},
            "anything": true
        },
        "required": ["temperature", "observed_at"],
        "additionalProperties": false
    }));
    assert_eq!(check_supported(&schema), Ok(()));
}

// SYNC-7: every problem is reported, with its path; a `$ref` must name a
// schema of the document.
#[test]
fn minimum_and_a_dangling_ref_are_both_reported() {
    let schema = obj(json!({
        "type": "object",
        "properties": {
            "temp": {"type": "number", "minimum": -273.15},
            "place": {"$ref": "#/$defs/Place"}
        }
    }));
    // Sorted: key order depends on serde_json's `preserve_order` feature.
    let mut problems = check_supported(&schema).err().unwrap_or_default();
    problems.sort();
    assert_eq!(
        problems,
        vec![
            "/properties/place: \"$ref\" \"#/$defs/Place\" names no schema in this document"
                .to_string(),
            "/properties/temp: unsupported keyword \"minimum\"".to_string(),
        ]
    );
}

// SYNC-7: forms outside the subset are rejected, each once.
#[test]
fn unsupported_forms_are_each_reported() {
    let schema = obj(json!({
        "type": ["string", "float"],
        "anyOf": {},
        "allOf": [{"not": {}}],
        "pattern": "x",
        "additionalProperties": 3,
        "items": [{"type": "string"}],
        "oneOf": [{"type": "float"}],
        "required": ["ghost"],
        "enum": "nope",
        "$ref": "other.json#/x"
    }));
    let problems = check_supported(&schema).err().unwrap_or_default();
    assert_eq!(problems.len(), 10, "{problems:#?}");
    assert!(problems.contains(&"/oneOf/0: unsupported type \"float\"".to_string()));
    assert!(
        problems.contains(
            &"/: required property \"ghost\" is not declared in \"properties\"".to_string()
        )
    );
}

// SYNC-7: problems deep inside items are found and the path says where.
#[test]
fn nested_problems_carry_their_path() {
    let schema = obj(json!({
        "type": "array",
        "items": {"type": "object", "properties": {"a/b": {"maxLength": 3}}}
    }));
    assert_eq!(
        check_supported(&schema),
        Err(vec![
            "/items/properties/a~1b: unsupported keyword \"maxLength\"".to_string()
        ])
    );
}

// CALL-3
#[test]
fn structured_weather_output_passes_its_schema() {
    let value = json!({"temperature": 22.5, "conditions": "Sunny", "humidity": 65});
    assert_eq!(validate(&value, &weather_schema()), vec![]);
}

// CALL-3: a violation says which path failed; all are reported.
#[test]
fn a_missing_property_and_a_wrong_type_give_two_violations() {
    let value = json!({"temperature": "hot", "conditions": "Sunny"});
    let violations = validate(&value, &weather_schema());
    assert_eq!(
        violations,
        vec![
            Violation {
                path: "/".to_string(),
                message: "missing required property \"humidity\"".to_string()
            },
            Violation {
                path: "/temperature".to_string(),
                message: "expected number, got string".to_string()
            },
        ]
    );
    assert_eq!(
        violations[1].to_string(),
        "/temperature: expected number, got string"
    );
}

// CALL-3
#[test]
fn integer_accepts_whole_numbers_only() {
    let schema = obj(json!({"type": "integer"}));
    for ok in [json!(3), json!(-3), json!(3.0), json!(u64::MAX)] {
        assert_eq!(validate(&ok, &schema), vec![], "{ok}");
    }
    for bad in [json!(3.5), json!("3"), json!(null)] {
        assert_eq!(validate(&bad, &schema).len(), 1, "{bad}");
    }
    assert_eq!(
        validate(&json!(3.5), &obj(json!({"type": "number"}))),
        vec![]
    );
}

// CALL-3: oneOf needs exactly one matching branch.
#[test]
fn one_of_requires_exactly_one_match() {
    let schema = obj(json!({"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "null"}]}));
    assert_eq!(validate(&json!(null), &schema), vec![]);
    assert_eq!(validate(&json!(1.5), &schema), vec![]);
    assert_eq!(
        validate(&json!(2), &schema)[0].message,
        "matched 2 of 3 alternatives, exactly one required"
    );
    assert_eq!(
        validate(&json!("x"), &schema)[0].message,
        "matched none of 3 alternatives"
    );
}

// CALL-3: items get indexed paths; extra keys are reported one by one.
#[test]
fn array_items_and_extra_keys_are_reported_with_paths() {
    let schema = obj(json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "additionalProperties": false
        }}},
        "additionalProperties": false
    }));
    let value = json!({"items": [{"name": "ok"}, {"name": 7, "x": 1, "y": 2}], "z": 0});
    let got: Vec<String> = validate(&value, &schema)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        vec![
            "/items/1/name: expected string, got number",
            "/items/1: unexpected property \"x\" (additionalProperties is false)",
            "/items/1: unexpected property \"y\" (additionalProperties is false)",
            "/: unexpected property \"z\" (additionalProperties is false)",
        ]
    );
}

// CALL-3: enum and const compare as JSON values.
#[test]
fn enum_and_const_compare_by_json_equality() {
    let schema = obj(json!({"enum": [1, "a", {"k": [true]}]}));
    assert_eq!(validate(&json!(1.0), &schema), vec![]);
    assert_eq!(validate(&json!({"k": [true]}), &schema), vec![]);
    assert_eq!(validate(&json!("b"), &schema).len(), 1);
    let schema = obj(json!({"const": {"a": 1}}));
    assert_eq!(validate(&json!({"a": 1}), &schema), vec![]);
    assert_eq!(
        validate(&json!({"a": 2}), &schema),
        vec![Violation {
            path: "/".to_string(),
            message: "value must equal {\"a\":1}".to_string()
        }]
    );
}

// SYNC-7: boolean subschemas are part of the subset.
#[test]
fn a_false_subschema_rejects_and_true_accepts() {
    let schema = obj(json!({"properties": {"no": false, "yes": true}}));
    assert_eq!(validate(&json!({"yes": [1]}), &schema), vec![]);
    assert_eq!(
        validate(&json!({"no": 1}), &schema)[0].to_string(),
        "/no: no value is allowed here"
    );
}

// SYNC-7: what SDK-generated schemas hold is inside the subset: pydantic's
// `$defs`/`$ref`, `anyOf` for an optional field, a `type` array, a map's
// `additionalProperties` schema (the official time server's shape).
#[test]
fn generated_schemas_with_defs_refs_and_any_of_are_supported() {
    let schema = obj(json!({
        "$defs": {"Zone": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        "type": "object",
        "properties": {
            "zone": {"$ref": "#/$defs/Zone"},
            "offset": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "both": {"allOf": [{"$ref": "#/$defs/Zone"}, {"required": ["name"], "properties": {"name": {"const": "UTC"}}}]}
        },
        "required": ["zone"]
    }));
    assert_eq!(check_supported(&schema), Ok(()));
    let ok = json!({"zone": {"name": "UTC"}, "offset": null, "tags": null, "labels": {"a": "b"}, "both": {"name": "UTC"}});
    assert_eq!(validate(&ok, &schema), vec![]);
    let bad = json!({"zone": {"nom": 1}, "offset": "x", "tags": 3, "labels": {"a": 1}, "both": {"name": "CET"}});
    let mut got: Vec<String> = validate(&bad, &schema)
        .iter()
        .map(|v| v.to_string())
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            "/both/name: value must equal \"UTC\"".to_string(),
            "/labels/a: expected string, got number".to_string(),
            "/offset: matched none of 2 alternatives (anyOf)".to_string(),
            "/tags: expected array or null, got number".to_string(),
            "/zone: missing required property \"name\"".to_string(),
        ]
    );
}

// A `$ref` that refers to itself without descending is reported, not
// followed forever.
#[test]
fn a_ref_loop_is_a_violation_not_a_hang() {
    let schema = obj(json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}));
    assert_eq!(check_supported(&schema), Ok(()));
    let got = validate(&json!(1), &schema);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].message.contains("loops"), "{got:?}");
}

// A hostile server's schema cannot wedge or crash the call path: branching
// `allOf` over `$ref`s (2^64 paths) and a chain of distinct definitions
// stop at the step budget with one violation saying so, on a thread with a
// small stack; a `$ref` may not point into what was never checked.
#[test]
fn a_hostile_schema_is_bounded_and_refs_point_only_at_schemas() {
    let branching = obj(json!({
        "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}},
        "$ref": "#/$defs/a"
    }));
    assert_eq!(check_supported(&branching), Ok(()));
    let mut chain = serde_json::Map::new();
    for i in 0..40 {
        let next = format!("#/$defs/d{}", i + 1);
        chain.insert(
            format!("d{i}"),
            json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    chain.insert("d40".into(), json!({"type": "string"}));
    let chain = obj(json!({"$defs": chain, "$ref": "#/$defs/d0"}));
    assert_eq!(check_supported(&chain), Ok(()));
    let got = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || (validate(&json!(1), &branching), validate(&json!(1), &chain)))
        .unwrap()
        .join()
        .unwrap();
    for v in [got.0, got.1] {
        assert!(
            v.iter().any(|v| v.message.contains("too complex to check")),
            "{v:?}"
        );
    }
    let bad = obj(
        json!({"properties": {"x": {"enum": [{"type": "string", "pattern": "x"}]}, "y": {"$ref": "#/properties/x/enum/0"}}}),
    );
    assert_eq!(
        check_supported(&bad),
        Err(vec![
            "/properties/y: \"$ref\" \"#/properties/x/enum/0\" names no schema in this document"
                .to_string()
        ])
    );
    assert!(check_supported(&obj(json!({"anyOf": []}))).is_err());
}

// A `$ref` to a boolean schema is enforced, and a recursive shape is as
// deep as its value: a list 100 links long is valid, not a loop.
#[test]
fn a_ref_to_false_refuses_and_a_deep_recursive_value_is_no_loop() {
    let no = obj(json!({"$defs": {"no": false}, "properties": {"x": {"$ref": "#/$defs/no"}}}));
    assert_eq!(check_supported(&no), Ok(()));
    assert_eq!(validate(&json!({"x": 1}), &no).len(), 1);
    let list = obj(json!({
        "$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}},
        "$ref": "#/$defs/node"
    }));
    // 127 links: as deep as a value read from JSON gets (serde_json's limit
    // is 128), checked on a 2 MiB stack, tokio's worker size.
    let mut value = json!({"next": null});
    for _ in 0..126 {
        value = json!({"next": value});
    }
    let got = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || validate(&value, &list))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(got, vec![]);
}
