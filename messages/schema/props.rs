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
