//! OpenAI-compatible Chat Completions (LOOP-5): the request body, and the
//! stream decoder that reassembles tool calls from their deltas — by
//! `index` when it is there, by a new `id` when the index is missing or
//! repeated for every call (servers that do either exist), and an
//! arguments-only delta continues the last call that was opened.

use serde_json::{Value, json};

use super::{
    Delta, Item, Provider, Round, StreamError, ToolCallRequest, ToolSpec, Usage, parse_arguments,
};

/// The request body of one round (streamed, with usage in the last chunk).
/// `tools` empty: no `tools` key at all (TRUST-7).
pub fn request_body(
    model: &str,
    system: Option<&str>,
    tools: &[ToolSpec],
    items: &[Item],
) -> Value {
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for item in items {
        match item {
            Item::User(text) => messages.push(json!({"role": "user", "content": text})),
            Item::Assistant { text, calls, .. } => {
                let mut m = json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { Value::String(text.clone()) },
                });
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(
                        calls
                            .iter()
                            .map(|c| {
                                let arguments = match &c.arguments {
                                    Ok(v) => v.to_string(),
                                    Err(e) => e.raw.clone(),
                                };
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": c.name, "arguments": arguments},
                                })
                            })
                            .collect(),
                    );
                }
                messages.push(m);
            }
            // One message per call.
            Item::ToolResults(results) => {
                for r in results {
                    messages.push(json!({
                        "role": "tool",
                        "tool_call_id": r.call_id,
                        "content": r.content,
                    }));
                }
            }
        }
    }
    let mut body = json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    });
    if !tools.is_empty() {
        body["tools"] = Value::Array(
            tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        },
                    })
                })
                .collect(),
        );
    }
    body
}

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Reassembles one streamed round.
#[derive(Debug, Default)]
pub struct Decoder {
    text: String,
    calls: Vec<PartialCall>,
    usage: Usage,
    finish_reason: Option<String>,
    /// `data: [DONE]` arrived.
    pub(super) done: bool,
}

impl Decoder {
    /// One `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<Vec<Delta>, StreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|source| StreamError::Unreadable {
                unit: "chunk",
                source,
                data: clip(data),
            })?;
        if let Some(err) = chunk.get("error") {
            return Err(StreamError::Endpoint(error_text(err)));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Usage {
                input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                output_tokens: u
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            };
        }
        let mut out = Vec::new();
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(out);
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(out);
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str)
            && !t.is_empty()
        {
            self.text.push_str(t);
            out.push(Delta::Text(t.to_owned()));
        }
        // DeepSeek-style and vLLM reasoning fields.
        for key in ["reasoning_content", "reasoning"] {
            if let Some(t) = delta.get(key).and_then(Value::as_str)
                && !t.is_empty()
            {
                out.push(Delta::Thinking(t.to_owned()));
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                self.tool_delta(c);
            }
        }
        Ok(out)
    }

    fn tool_delta(&mut self, c: &Value) {
        let index = c.get("index").and_then(Value::as_u64);
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let function = c.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let args = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        // A new id opens a new call, whatever the index says.
        let known_id = id.is_some_and(|id| self.calls.iter().any(|p| p.id == id));
        let slot = if id.is_some() && !known_id {
            // A new id: the call at this index that has no id yet (its
            // arguments came first), else a new call, whatever the index says.
            self.calls
                .iter()
                .rposition(|p| p.id.is_empty() && (index.is_none() || p.index == index))
        } else if let Some(id) = id {
            self.calls.iter().rposition(|p| p.id == id)
        } else if let Some(i) = index {
            // An index never seen, without an id: a call whose id comes later.
            self.calls.iter().rposition(|p| p.index == Some(i))
        } else if self.calls.is_empty() {
            None
        } else {
            // No index, no id: it continues the last call opened.
            Some(self.calls.len() - 1)
        };
        let pos = match slot {
            Some(pos) => pos,
            None => {
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let Some(call) = self.calls.get_mut(pos) else {
            return;
        };
        if call.index.is_none() {
            call.index = index;
        }
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        if let Some(n) = name
            && call.name.is_empty()
        {
            call.name = n.to_owned();
        }
        call.arguments.push_str(args);
    }

    /// The round; an error when the stream ended before `[DONE]` and
    /// before a finish reason.
    pub fn finish(self) -> Result<Round, StreamError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(StreamError::Cut {
                provider: Provider::OpenAi,
                in_call: !self.calls.is_empty(),
            });
        }
        let calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCallRequest {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: parse_arguments(&c.arguments),
            })
            .collect();
        Ok(Round {
            text: self.text,
            calls,
            usage: self.usage,
            stop_reason: self.finish_reason,
            raw: None,
        })
    }
}

/// The message of an OpenAI-style error object.
pub(crate) fn error_text(err: &Value) -> String {
    err.get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| clip(&err.to_string()))
}

/// At most 300 bytes of `s`, for error messages.
pub(crate) fn clip(s: &str) -> String {
    let end = crate::messages::budget::floor_char_boundary(s, 300);
    if end < s.len() {
        format!("{}…", &s[..end])
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::turn::model::{ArgumentsError, Offer, ToolResultItem, Usage};

    fn decode(chunks: &[&str]) -> Round {
        let mut d = Decoder::default();
        for c in chunks {
            d.feed(c).unwrap();
        }
        d.finish().unwrap()
    }

    #[test]
    fn the_request_body_is_golden() {
        let tools = vec![ToolSpec {
            name: "mcp__s__echo".into(),
            description: "Echo".into(),
            parameters: json!({"type": "object", "properties": {"message": {"type": "string"}}}),
            offer: Offer::Eager,
        }];
        let items = vec![
            Item::User("hi".into()),
            Item::Assistant {
                text: String::new(),
                calls: vec![ToolCallRequest {
                    id: "call_1".into(),
                    name: "mcp__s__echo".into(),
                    arguments: Ok(json!({"message": "x"})),
                }],
                raw: None,
            },
            Item::ToolResults(vec![ToolResultItem {
                call_id: "call_1".into(),
                content: "x".into(),
                is_error: false,
                found: None,
            }]),
        ];
        let body = request_body("m", Some("be brief"), &tools, &items);
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "mcp__s__echo", "arguments": "{\"message\":\"x\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "x"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "mcp__s__echo", "description": "Echo",
                    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
                }}],
            })
        );
        // TRUST-7: no tools, no key.
        assert!(request_body("m", None, &[], &items).get("tools").is_none());
    }

    #[test]
    fn text_and_usage_stream_through() {
        let r = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
            "[DONE]",
        ]);
        assert_eq!(r.text, "Hello");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 5,
                output_tokens: 2
            }
        );
        assert!(r.calls.is_empty());
    }

    #[test]
    fn parallel_calls_by_index() {
        let r = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"t1","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"t2","arguments":"{\"y\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"2}"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(r.calls.len(), 2);
        assert_eq!(
            (r.calls[0].id.as_str(), r.calls[0].name.as_str()),
            ("a", "t1")
        );
        assert_eq!(r.calls[0].arguments, Ok(json!({"x": 1})));
        assert_eq!(r.calls[1].arguments, Ok(json!({"y": 2})));
    }

    #[test]
    fn parallel_calls_with_index_zero_for_every_call_are_split_by_id() {
        let r = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"t","arguments":"{\"n\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"t","arguments":"{\"n\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"2}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"t","arguments":"{\"n\":3}"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        let args: Vec<_> = r.calls.iter().map(|c| c.arguments.clone()).collect();
        assert_eq!(
            args,
            vec![
                Ok(json!({"n": 1})),
                Ok(json!({"n": 2})),
                Ok(json!({"n": 3}))
            ]
        );
    }

    #[test]
    fn calls_without_an_index_are_split_by_id_and_continued_by_order() {
        let r = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"t","arguments":"{\"n\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"u"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        assert_eq!(r.calls.len(), 2);
        assert_eq!(r.calls[0].arguments, Ok(json!({"n": 1})));
        assert_eq!(r.calls[1].name, "u");
        assert_eq!(r.calls[1].arguments, Ok(json!({})));
    }

    #[test]
    fn arguments_before_the_name_are_kept_and_empty_arguments_are_an_empty_object() {
        let r = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"late","arguments":"1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"y","function":{"name":"none"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(r.calls[0].name, "late");
        assert_eq!(r.calls[0].arguments, Ok(json!({"a": 1})));
        assert_eq!(r.calls[1].arguments, Ok(json!({})));
    }

    #[test]
    fn a_cut_stream_and_bad_arguments_are_named() {
        let mut d = Decoder::default();
        d.feed(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"t","arguments":"{\"x"}}]}}]}"#)
            .unwrap();
        let err = d.finish().unwrap_err().to_string();
        assert!(err.contains("cut in the middle of a tool call"), "{err}");
        let r = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"t","arguments":"[1,2]"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(
            r.calls[0].arguments,
            Err(ArgumentsError {
                raw: "[1,2]".to_owned()
            })
        );
        let mut d = Decoder::default();
        assert!(
            d.feed("not json")
                .unwrap_err()
                .to_string()
                .contains("unreadable")
        );
        let e = d
            .feed(r#"{"error":{"message":"rate limited","type":"x"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rate limited"), "{e}");
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the Chat Completions stream decoder: a round comes
    //! out the same however its text and each call's arguments are cut into
    //! deltas, and no chunk, however wrong, makes it panic.

    use super::*;
    use crate::messages::prop_gen::{config, cut, interleave, json_value, key, tricky_text};
    use proptest::prelude::*;
    use proptest::sample::Index;

    /// A tool call as the model makes it: its id, name and arguments' text.
    type Call = (String, String, String);

    /// What a round says, before it is streamed.
    #[derive(Debug, Clone)]
    struct Spoken {
        text: String,
        calls: Vec<Call>,
        usage: (u64, u64),
        finish_reason: String,
    }

    /// The arguments of a call as JSON text: an object, written compact or
    /// pretty, or nothing at all (`{}`).
    fn arguments() -> impl Strategy<Value = String> {
        let object = prop::collection::vec((key(), json_value()), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()));
        prop_oneof![
            4 => (object, any::<bool>()).prop_map(|(o, pretty)| if pretty {
                serde_json::to_string_pretty(&o).unwrap_or_default()
            } else {
                o.to_string()
            }),
            1 => Just(String::new()),
        ]
    }

    fn spoken() -> impl Strategy<Value = Spoken> {
        let call = ("[a-zA-Z0-9]{0,6}", tricky_text(), arguments());
        (
            prop_oneof![tricky_text(), "[a-z é😀\n]{0,300}"],
            prop::collection::vec(call, 0..4),
            (any::<u32>(), any::<u32>()),
            prop::sample::select(vec!["stop", "tool_calls", "length"]),
        )
            .prop_map(|(text, calls, (i, o), reason)| Spoken {
                text,
                calls: calls
                    .into_iter()
                    .enumerate()
                    .map(|(n, (tag, name, args))| (format!("call_{n}_{tag}"), name, args))
                    .collect(),
                usage: (u64::from(i), u64::from(o)),
                finish_reason: reason.to_owned(),
            })
    }

    /// The chunks of `round`: its text in `text_pieces`, each call's
    /// arguments in its pieces, interleaved as `picks` say (each call opened
    /// after the one before it), then the finish reason, usage and `[DONE]`.
    fn chunks(
        round: &Spoken,
        text_pieces: &[String],
        arg_pieces: &[Vec<String>],
        picks: &[Index],
    ) -> Vec<String> {
        let text: Vec<String> = text_pieces
            .iter()
            .map(|t| json!({"choices": [{"index": 0, "delta": {"content": t}}]}).to_string())
            .collect();
        let mut streams = vec![text];
        for (i, ((id, name, _), pieces)) in round.calls.iter().zip(arg_pieces).enumerate() {
            let calls = pieces.iter().enumerate().map(|(k, piece)| {
                let call = if k == 0 {
                    json!({"index": i, "id": id, "type": "function",
                        "function": {"name": name, "arguments": piece}})
                } else {
                    json!({"index": i, "function": {"arguments": piece}})
                };
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}).to_string()
            });
            streams.push(calls.collect());
        }
        // The text stream is not a call: any order against the calls.
        let text = streams.remove(0);
        let mut all = interleave(streams, picks, true);
        let mixed = interleave(vec![text, std::mem::take(&mut all)], picks, false);
        let (input, output) = round.usage;
        let end = [
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": round.finish_reason}]})
                .to_string(),
            json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}})
                .to_string(),
            "[DONE]".to_owned(),
        ];
        mixed.into_iter().chain(end).collect()
    }

    fn decode(chunks: &[String]) -> Result<Round, StreamError> {
        let mut d = Decoder::default();
        for c in chunks {
            d.feed(c)?;
        }
        d.finish()
    }

    /// A chunk roughly of the right shape, its fields of any type.
    fn rough_chunk() -> impl Strategy<Value = String> {
        let index = prop_oneof![
            (0u64..3).prop_map(|i| json!(i)),
            any::<u64>().prop_map(|i| json!(i)),
            json_value(),
        ];
        let call = (
            prop::option::of(index),
            prop::option::of(prop_oneof![
                "[ab]{0,1}".prop_map(Value::String),
                json_value()
            ]),
            prop::option::of(json_value()),
            prop::option::of(prop_oneof![
                tricky_text().prop_map(Value::String),
                json_value()
            ]),
        )
            .prop_map(|(index, id, name, arguments)| {
                let mut c = json!({"function": {}});
                if let Some(i) = index {
                    c["index"] = i;
                }
                if let Some(id) = id {
                    c["id"] = id;
                }
                if let Some(n) = name {
                    c["function"]["name"] = n;
                }
                if let Some(a) = arguments {
                    c["function"]["arguments"] = a;
                }
                c
            });
        let delta = (
            prop::option::of(prop_oneof![
                tricky_text().prop_map(Value::String),
                json_value()
            ]),
            prop::option::of(prop::collection::vec(
                prop_oneof![4 => call, 1 => json_value()],
                0..3,
            )),
            prop::option::of(json_value()),
        )
            .prop_map(|(content, calls, reasoning)| {
                let mut d = json!({});
                if let Some(c) = content {
                    d["content"] = c;
                }
                if let Some(calls) = calls {
                    d["tool_calls"] = Value::Array(calls);
                }
                if let Some(r) = reasoning {
                    d["reasoning_content"] = r;
                }
                d
            });
        let choice = (
            prop_oneof![4 => delta, 1 => json_value()],
            prop::option::of(json_value()),
        )
            .prop_map(|(delta, reason)| json!({"delta": delta, "finish_reason": reason}));
        prop_oneof![
            6 => choice.prop_map(|c| json!({"choices": [c]}).to_string()),
            1 => json_value().prop_map(|u| json!({"choices": [], "usage": u}).to_string()),
            1 => json_value().prop_map(|e| json!({"error": e}).to_string()),
            1 => json_value().prop_map(|v| v.to_string()),
            1 => tricky_text(),
            1 => Just("[DONE]".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn a_round_is_the_same_however_its_text_and_arguments_are_cut_into_deltas(
            round in spoken(),
            text_cuts in prop::collection::vec(any::<Index>(), 0..8),
            arg_cuts in prop::collection::vec(prop::collection::vec(any::<Index>(), 0..6), 4),
            picks in prop::collection::vec(any::<Index>(), 1..40),
        ) {
            // LOOP-5: text concatenated, each call's arguments reassembled
            // by its index and parsed, usage and finish reason kept, whether
            // each came in one delta or many, the calls' deltas interleaved.
            let whole_args: Vec<Vec<String>> =
                round.calls.iter().map(|(_, _, a)| vec![a.clone()]).collect();
            let whole = decode(&chunks(&round, std::slice::from_ref(&round.text), &whole_args, &[]));
            let arg_pieces: Vec<Vec<String>> = round
                .calls
                .iter()
                .zip(&arg_cuts)
                .map(|((_, _, a), cuts)| cut(a, cuts))
                .collect();
            let split = decode(&chunks(&round, &cut(&round.text, &text_cuts), &arg_pieces, &picks));
            // The same round, or the same error's text.
            prop_assert_eq!(
                split.as_ref().map_err(ToString::to_string),
                whole.as_ref().map_err(ToString::to_string)
            );
            let whole = whole.unwrap();
            prop_assert_eq!(&whole.text, &round.text);
            let calls: Vec<ToolCallRequest> = round
                .calls
                .iter()
                .map(|(id, name, args)| ToolCallRequest {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: Ok(serde_json::from_str(args).unwrap_or(json!({}))),
                })
                .collect();
            prop_assert_eq!(&whole.calls, &calls);
            prop_assert_eq!(whole.usage, Usage { input_tokens: round.usage.0, output_tokens: round.usage.1 });
            prop_assert_eq!(whole.stop_reason.as_deref(), Some(round.finish_reason.as_str()));
        }

        #[test]
        fn no_sequence_of_chunks_makes_the_decoder_panic(
            data in prop::collection::vec(rough_chunk(), 0..12),
        ) {
            // A model endpoint (or a proxy before it) may send anything: an
            // error, never a panic.
            let mut d = Decoder::default();
            for c in &data {
                let _ = d.feed(c);
            }
            let _ = d.finish();
        }
    }
}
