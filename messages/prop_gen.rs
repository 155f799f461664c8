//! Generators shared by the property tests of the decoders that read outside
//! input: text that is hard to escape and scan, and arbitrary JSON.
//! Test-only.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// A proptest config for one `proptest!` block: a fixed number of cases
/// (CI runs a fixed amount) and no regression files written into the tree.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that is hard on escaping and scanning: quotes, backslashes, braces,
/// `"id":`, control characters, multi-byte and astral UTF-8; or anything.
pub(crate) fn tricky_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[\"\\\\{}\\[\\]:, a-z0-9\u{0}\n\r\té漢😀]{0,12}",
        1 => Just("\"id\":1,".to_owned()),
        1 => Just("{\"id\":\"}\\\"".to_owned()),
        2 => any::<String>(),
    ]
    .boxed()
}

/// An object key: often `id`, or near it.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just("id".to_owned()),
        1 => Just("\"id\"".to_owned()),
        1 => Just("id\\".to_owned()),
        4 => "[a-zA-Z_]{1,8}",
        2 => tricky_text(),
    ]
}

/// A JSON number of any kind serde_json can hold.
pub(crate) fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        (-3i64..3).prop_map(Value::from),
    ]
}

/// A JSON scalar.
pub(crate) fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        tricky_text().prop_map(Value::String),
    ]
}

/// Any JSON value, a few levels deep, with `id` keys in nested objects.
pub(crate) fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// A name of any Unicode and any length, long ones included.
pub(crate) fn any_name() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[A-Za-z0-9_-]{0,70}",
        1 => ("[a-z😀é._ -]{1,3}", 0usize..60).prop_map(|(unit, n)| unit.repeat(n)),
        1 => tricky_text(),
    ]
    .boxed()
}

/// `text` cut at the char boundaries nearest `cuts` (in any order, repeats
/// allowed): the pieces, some maybe empty, that concatenate back to `text`.
pub(crate) fn cut(text: &str, cuts: &[prop::sample::Index]) -> Vec<String> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| crate::messages::budget::floor_char_boundary(text, c.index(text.len() + 1)))
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut from = 0;
    for to in at {
        pieces.push(text[from..to].to_owned());
        from = to;
    }
    pieces.push(text[from..].to_owned());
    pieces
}

/// One sequence made of `streams`, each stream's items in their order,
/// the streams' items interleaved as `picks` choose. With `starts_in_order`
/// a stream's first item comes only after the first item of every stream
/// before it (calls that open in the order they were made).
pub(crate) fn interleave<T>(
    streams: Vec<Vec<T>>,
    picks: &[prop::sample::Index],
    starts_in_order: bool,
) -> Vec<T> {
    let mut streams: Vec<std::collections::VecDeque<T>> =
        streams.into_iter().map(Into::into).collect();
    let mut started = vec![false; streams.len()];
    let mut out = Vec::new();
    let mut picks = picks.iter().cycle();
    loop {
        // The streams that may give their next item now.
        let ready: Vec<usize> = (0..streams.len())
            .filter(|&s| !streams[s].is_empty())
            .filter(|&s| !starts_in_order || started[s] || started[..s].iter().all(|b| *b))
            .collect();
        let Some(&first) = ready.first() else {
            return out;
        };
        let s = picks.next().map_or(first, |p| ready[p.index(ready.len())]);
        started[s] = true;
        out.extend(streams[s].pop_front());
    }
}
