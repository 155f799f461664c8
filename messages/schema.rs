//! The supported JSON Schema subset for tool output schemas (SYNC-7) and
//! validation of `structuredContent` against it (CALL-3).
//!
//! # The exact subset
//!
//! A schema is a JSON object; wherever a subschema is expected, the boolean
//! schemas `true` (anything) and `false` (nothing) are accepted too.
//!
//! | keyword | accepted form |
//! |---|---|
//! | `type` | one string: `object`, `array`, `string`, `number`, `integer`, `boolean`, `null` |
//! | `oneOf` | array of subschemas |
//! | `properties` | object of subschemas |
//! | `required` | array of strings, each declared in `properties` of the same schema |
//! | `additionalProperties` | boolean |
//! | `items` | one subschema |
//! | `enum` | array of any values |
//! | `const` | any value |
//! | `description`, `title`, `default`, `examples`, `$schema`, `$id`, `format` | annotations, ignored |
//!
//! Every other keyword (`$ref`, `anyOf`, `allOf`, `minimum`, `pattern`, …) and
//! every other form (`type` as an array, `additionalProperties` as a schema,
//! `items` as an array, …) is unsupported. [`check_supported`] reports every
//! problem, not just the first. Paths are JSON-pointer-like: `/` is the root,
//! children are `/`-joined with `~` escaped as `~0` and `/` as `~1`.

use serde_json::{Map, Value};
use std::fmt;

/// The type names accepted by the `type` keyword.
pub const SUPPORTED_TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Keywords accepted and ignored as annotations.
pub const ANNOTATIONS: [&str; 7] = [
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$id",
    "format",
];

/// The path of the root, in schema problems and violations.
const ROOT: &str = "/";

/// Appends one JSON-pointer segment to `path`, escaping `~` and `/`.
fn child(path: &str, segment: &str) -> String {
    let escaped = segment.replace('~', "~0").replace('/', "~1");
    if path == ROOT {
        format!("/{escaped}")
    } else {
        format!("{path}/{escaped}")
    }
}

/// The JSON kind of a value, as used in messages ("object", "null", …).
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// [`kind`] with its article, for sentences ("an object", "a string", "null").
pub fn kind_with_article(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Array(_) | Value::Object(_) => format!("an {}", kind(value)),
        _ => format!("a {}", kind(value)),
    }
}

/// Checks that `schema` stays inside the supported subset (SYNC-7).
///
/// Returns every problem found, recursively, each as `"{path}: {problem}"`,
/// e.g. `/properties/temp: unsupported keyword "minimum"`.
pub fn check_supported(schema: &Map<String, Value>) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_object(schema, ROOT, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Checks one subschema position: an object schema or a boolean schema.
fn check_subschema(value: &Value, path: &str, problems: &mut Vec<String>) {
    match value {
        Value::Object(map) => check_object(map, path, problems),
        Value::Bool(_) => {}
        other => problems.push(format!(
            "{path}: a schema must be an object or a boolean, not {}",
            kind(other)
        )),
    }
}

/// Checks one object schema.
fn check_object(schema: &Map<String, Value>, path: &str, problems: &mut Vec<String>) {
    for (keyword, value) in schema {
        match keyword.as_str() {
            "type" => match value {
                Value::String(t) if SUPPORTED_TYPES.contains(&t.as_str()) => {}
                Value::String(t) => {
                    problems.push(format!("{path}: unsupported type {t:?}"));
                }
                Value::Array(_) => problems.push(format!(
                    "{path}: \"type\" must be a single type name, not an array"
                )),
                other => problems.push(format!(
                    "{path}: \"type\" must be a string, not {}",
                    kind(other)
                )),
            },
            "oneOf" => match value {
                Value::Array(branches) => {
                    let here = child(path, "oneOf");
                    for (i, branch) in branches.iter().enumerate() {
                        check_subschema(branch, &child(&here, &i.to_string()), problems);
                    }
                }
                other => problems.push(format!(
                    "{path}: \"oneOf\" must be an array of schemas, not {}",
                    kind(other)
                )),
            },
            "properties" => match value {
                Value::Object(props) => {
                    let here = child(path, "properties");
                    for (name, sub) in props {
                        check_subschema(sub, &child(&here, name), problems);
                    }
                }
                other => problems.push(format!(
                    "{path}: \"properties\" must be an object of schemas, not {}",
                    kind(other)
                )),
            },
            "required" => match value {
                Value::Array(names) => {
                    let declared = schema.get("properties").and_then(Value::as_object);
                    for name in names {
                        match name {
                            Value::String(n) => {
                                if !declared.is_some_and(|d| d.contains_key(n)) {
                                    problems.push(format!(
                                        "{path}: required property {n:?} is not declared in \"properties\""
                                    ));
                                }
                            }
                            other => problems.push(format!(
                                "{path}: \"required\" must list strings, found {}",
                                kind(other)
                            )),
                        }
                    }
                }
                other => problems.push(format!(
                    "{path}: \"required\" must be an array of strings, not {}",
                    kind(other)
                )),
            },
            "additionalProperties" => {
                if !value.is_boolean() {
                    problems.push(format!(
                        "{path}: \"additionalProperties\" must be a boolean, not {}",
                        kind(value)
                    ));
                }
            }
            "items" => match value {
                Value::Object(_) | Value::Bool(_) => {
                    check_subschema(value, &child(path, "items"), problems);
                }
                other => problems.push(format!(
                    "{path}: \"items\" must be one schema, not {}",
                    kind(other)
                )),
            },
            "enum" => {
                if !value.is_array() {
                    problems.push(format!(
                        "{path}: \"enum\" must be an array, not {}",
                        kind(value)
                    ));
                }
            }
            "const" => {}
            k if ANNOTATIONS.contains(&k) => {}
            other => problems.push(format!("{path}: unsupported keyword {other:?}")),
        }
    }
}

/// One way a value fails its schema (CALL-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where in the value: `/` for the root, otherwise like `/items/0/name`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Validates `value` against `schema` and returns every violation (empty
/// means valid).
///
/// Meant for schemas that passed [`check_supported`]; keywords outside the
/// subset, and malformed forms of supported ones, are ignored. Every keyword
/// applies independently (a type mismatch does not stop `enum` from being
/// checked). `enum` and `const` compare as JSON: numbers by value, so `1`
/// equals `1.0`.
pub fn validate(value: &Value, schema: &Map<String, Value>) -> Vec<Violation> {
    let mut out = Vec::new();
    validate_object(value, schema, ROOT, &mut out);
    out
}

/// Validates against a subschema position (object or boolean schema).
fn validate_subschema(value: &Value, schema: &Value, path: &str, out: &mut Vec<Violation>) {
    match schema {
        Value::Object(map) => validate_object(value, map, path, out),
        Value::Bool(false) => out.push(violation(path, "no value is allowed here".to_string())),
        _ => {}
    }
}

/// Builds a violation.
fn violation(path: &str, message: String) -> Violation {
    Violation {
        path: path.to_string(),
        message,
    }
}

/// Whether `value` is of the named JSON Schema type.
fn has_type(value: &Value, type_name: &str) -> bool {
    match type_name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64()
                    || n.is_u64()
                    || n.as_f64()
                        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
            }
            _ => false,
        },
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// JSON equality: like `==`, but numbers compare by value (`1` equals `1.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else if x.is_f64() || y.is_f64() {
                x.as_f64() == y.as_f64()
            } else {
                // One negative i64 and one u64 above i64::MAX.
                false
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Validates against one object schema.
fn validate_object(
    value: &Value,
    schema: &Map<String, Value>,
    path: &str,
    out: &mut Vec<Violation>,
) {
    if let Some(Value::String(t)) = schema.get("type")
        && !has_type(value, t)
    {
        out.push(violation(
            path,
            format!("expected {t}, got {}", kind(value)),
        ));
    }
    if let Some(Value::Array(branches)) = schema.get("oneOf") {
        let matched = branches
            .iter()
            .filter(|branch| {
                let mut sub = Vec::new();
                validate_subschema(value, branch, path, &mut sub);
                sub.is_empty()
            })
            .count();
        let n = branches.len();
        if matched == 0 {
            out.push(violation(path, format!("matched none of {n} alternatives")));
        } else if matched > 1 {
            out.push(violation(
                path,
                format!("matched {matched} of {n} alternatives, exactly one required"),
            ));
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        out.push(violation(
            path,
            format!("value is not one of the {} allowed values", allowed.len()),
        ));
    }
    if let Some(expected) = schema.get("const")
        && !json_equal(expected, value)
    {
        out.push(violation(path, format!("value must equal {expected}")));
    }
    if let Value::Object(obj) = value {
        let props = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    out.push(violation(
                        path,
                        format!("missing required property {name:?}"),
                    ));
                }
            }
        }
        for (key, field) in obj {
            match props.and_then(|p| p.get(key)) {
                Some(sub) => validate_subschema(field, sub, &child(path, key), out),
                None => {
                    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                        out.push(violation(
                            path,
                            format!("unexpected property {key:?} (additionalProperties is false)"),
                        ));
                    }
                }
            }
        }
    }
    if let (Value::Array(elements), Some(items)) = (value, schema.get("items")) {
        for (i, element) in elements.iter().enumerate() {
            validate_subschema(element, items, &child(path, &i.to_string()), out);
        }
    }
}

#[cfg(test)]
mod tests {
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

    // SYNC-7: every problem is reported, with its path.
    #[test]
    fn minimum_and_ref_are_both_reported() {
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
                "/properties/place: unsupported keyword \"$ref\"".to_string(),
                "/properties/temp: unsupported keyword \"minimum\"".to_string(),
            ]
        );
    }

    // SYNC-7: forms outside the subset are rejected, each once.
    #[test]
    fn unsupported_forms_are_each_reported() {
        let schema = obj(json!({
            "type": ["string", "null"],
            "anyOf": [],
            "allOf": [],
            "pattern": "x",
            "additionalProperties": {"type": "string"},
            "items": [{"type": "string"}],
            "oneOf": [{"type": "float"}],
            "required": ["ghost"],
            "enum": "nope"
        }));
        let problems = check_supported(&schema).err().unwrap_or_default();
        assert_eq!(problems.len(), 9, "{problems:#?}");
        assert!(problems.contains(&"/oneOf/0: unsupported type \"float\"".to_string()));
        assert!(problems.contains(
            &"/: required property \"ghost\" is not declared in \"properties\"".to_string()
        ));
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
        let schema =
            obj(json!({"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "null"}]}));
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
}

#[cfg(test)]
mod props {
    //! Property tests of the schema subset check and the validator under
    //! hostile schemas:
    //! `pattern` (and its regex) is outside the subset, reported where it
    //! is and never evaluated, so no regex a server writes, however it
    //! backtracks, can hold a call's validation.

    use super::*;
    use crate::messages::prop_gen::{config, json_value, key, tricky_text};
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    /// Regexes that backtrack catastrophically in a backtracking engine,
    /// long alternations, or anything regex-like.
    fn hostile_regex() -> impl Strategy<Value = String> {
        let alternation = (2usize..400).prop_map(|n| {
            let words: Vec<String> = (0..n).map(|i| format!("a{i}")).collect();
            format!("^({})+$", words.join("|"))
        });
        prop_oneof![
            3 => prop::sample::select(vec![
                "(a+)+$",
                "(a|a)*$",
                "(a|aa)+$",
                "^(a?){30}a{30}$",
                "(x+x+)+y",
                "((a|b|ab)*)*c",
                "(.*a){25}",
                "(?=(a+))+b",
                "(a*)*\\1b",
                "a{99999}",
                "[",
            ])
            .prop_map(str::to_owned),
            1 => alternation,
            1 => "[a-z|.*+?()\\[\\]{}^$\\\\]{0,30}",
        ]
    }

    /// A schema of the subset, with `pattern` (and other keywords the
    /// subset leaves out) sprinkled in.
    fn schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            prop::sample::select(SUPPORTED_TYPES.to_vec()).prop_map(|t| json!({"type": t})),
            hostile_regex().prop_map(|p| json!({"type": "string", "pattern": p})),
            Just(json!(true)),
            Just(json!(false)),
            prop::collection::vec(json_value(), 0..4).prop_map(|e| json!({"enum": e})),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                (
                    prop::collection::vec((key(), inner.clone()), 0..4),
                    any::<bool>(),
                    prop::option::of(hostile_regex())
                )
                    .prop_map(|(props, closed, pattern)| {
                        let required: Vec<Value> =
                            props.iter().map(|(k, _)| json!(k)).take(2).collect();
                        let mut s = json!({
                            "type": "object",
                            "properties": Value::Object(props.into_iter().collect()),
                            "required": required,
                            "additionalProperties": !closed,
                        });
                        if let Some(p) = pattern {
                            s["patternProperties"] = json!({p: {"type": "string"}});
                        }
                        s
                    }),
                inner
                    .clone()
                    .prop_map(|items| json!({"type": "array", "items": items})),
                prop::collection::vec(inner, 1..4).prop_map(|b| json!({"oneOf": b})),
            ]
        })
    }

    /// Strings up to a few KiB that make a backtracking engine work: runs
    /// of `a` (or `x`) that almost match, then fail at the end.
    fn hostile_text() -> impl Strategy<Value = String> {
        prop_oneof![
            (0usize..4096, prop::sample::select(vec!["", "!", "b", "y"]))
                .prop_map(|(n, end)| format!("{}{end}", "a".repeat(n))),
            (0usize..2048).prop_map(|n| format!("{}y", "x".repeat(n))),
            tricky_text(),
        ]
    }

    /// A value shaped somewhat like a schema's instances, its strings hostile.
    fn instance() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            3 => hostile_text().prop_map(Value::String),
            1 => json_value(),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A value shaped like `schema`'s instances (its object keys, its
    /// arrays' items, a branch of its `oneOf`), each string hostile.
    fn instance_for(schema: &Value) -> BoxedStrategy<Value> {
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                let props: Vec<(String, Value)> = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default();
                let fields: Vec<BoxedStrategy<(String, Value)>> = props
                    .iter()
                    .map(|(k, sub)| {
                        let k = k.clone();
                        instance_for(sub).prop_map(move |v| (k.clone(), v)).boxed()
                    })
                    .collect();
                fields
                    .prop_map(|f| Value::Object(f.into_iter().collect()))
                    .boxed()
            }
            Some("array") => {
                let items = schema.get("items").cloned().unwrap_or(json!(true));
                prop::collection::vec(instance_for(&items), 0..4)
                    .prop_map(Value::Array)
                    .boxed()
            }
            Some("string") => hostile_text().prop_map(Value::String).boxed(),
            _ => match schema.get("oneOf").and_then(Value::as_array) {
                Some(branches) if !branches.is_empty() => {
                    let branches: Vec<BoxedStrategy<Value>> =
                        branches.iter().map(instance_for).collect();
                    (any::<prop::sample::Index>(), branches)
                        .prop_map(|(at, values)| values[at.index(values.len())].clone())
                        .boxed()
                }
                _ => instance().boxed(),
            },
        }
    }

    /// Where each `pattern` keyword sits, as check_supported names it.
    fn pattern_paths(schema: &Value, path: &str, out: &mut Vec<String>) {
        let Value::Object(map) = schema else { return };
        for (k, v) in map {
            match k.as_str() {
                "pattern" | "patternProperties" => {
                    out.push(format!("{path}: unsupported keyword {k:?}"))
                }
                "properties" => {
                    for (name, sub) in v.as_object().into_iter().flatten() {
                        pattern_paths(sub, &child(&child(path, "properties"), name), out);
                    }
                }
                "items" => pattern_paths(v, &child(path, "items"), out),
                "oneOf" => {
                    for (i, sub) in v.as_array().into_iter().flatten().enumerate() {
                        pattern_paths(sub, &child(&child(path, "oneOf"), &i.to_string()), out);
                    }
                }
                _ => {}
            }
        }
    }

    /// `schema` without its `pattern` and `patternProperties` keywords.
    fn without_patterns(schema: &Value) -> Value {
        match schema {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "pattern" | "patternProperties"))
                    .map(|(k, v)| {
                        let v = match k.as_str() {
                            "properties" => Value::Object(
                                v.as_object()
                                    .into_iter()
                                    .flatten()
                                    .map(|(n, s)| (n.clone(), without_patterns(s)))
                                    .collect(),
                            ),
                            "items" => without_patterns(v),
                            "oneOf" => Value::Array(
                                v.as_array()
                                    .into_iter()
                                    .flatten()
                                    .map(without_patterns)
                                    .collect(),
                            ),
                            _ => v.clone(),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A bound against catastrophic backtracking, not a speed test: the
    /// work here is linear in the schema and value sizes, microseconds.
    const BOUND: Duration = Duration::from_secs(2);

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn a_hostile_pattern_is_reported_where_it_is_and_never_evaluated(
            (schema, value) in schema()
                .prop_filter("an object schema", Value::is_object)
                .prop_flat_map(|s| {
                    let value = prop_oneof![3 => instance_for(&s), 1 => instance()];
                    (Just(s), value)
                }),
        ) {
            // SYNC-7, CALL-3: `pattern` is outside the subset, so the
            // catalog reports it (every one, with its path); the validator
            // ignores it, so its result is the one without it, and it ends
            // in bounded time whatever the regex and the value.
            let Value::Object(map) = &schema else { unreachable!() };
            let started = Instant::now();
            let problems = check_supported(map).err().unwrap_or_default();
            let violations = validate(&value, map);
            let took = started.elapsed();
            prop_assert!(took < BOUND, "{:?} for {} on {}", took, schema, value);
            let mut expected = Vec::new();
            pattern_paths(&schema, ROOT, &mut expected);
            for p in &expected {
                prop_assert!(problems.contains(p), "{} not in {:?}", p, problems);
            }
            let Value::Object(plain) = without_patterns(&schema) else { unreachable!() };
            prop_assert_eq!(violations, validate(&value, &plain));
        }
    }
}
