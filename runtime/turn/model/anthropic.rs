//! Anthropic Messages (LOOP-5): the request body — tools with
//! `input_schema`, `tool_use` blocks with the parsed input, and every
//! `tool_result` of a round in ONE user turn (else the API answers 400) —
//! and the stream decoder (`content_block_*` by index, `input_json_delta`
//! concatenated and parsed at the block's end, thinking kept to be echoed
//! unchanged within the turn).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::openai::clip;
use super::{
    ArgumentsError, Delta, Item, Offer, Provider, Round, StreamError, ToolCallRequest, ToolSpec,
    Usage, parse_arguments,
};

/// The request body of one round (streamed).
pub fn request_body(
    model: &str,
    max_tokens: u32,
    system: Option<&str>,
    tools: &[ToolSpec],
    items: &[Item],
) -> Value {
    let mut messages = Vec::new();
    for item in items {
        match item {
            Item::User(text) => messages.push(json!({"role": "user", "content": text})),
            Item::Assistant { text, calls, raw } => {
                // Within a turn the assistant's blocks go back exactly as
                // they came, thinking and signatures included.
                let content = match raw {
                    Some(blocks) => blocks.clone(),
                    None => {
                        let mut blocks = Vec::new();
                        if !text.is_empty() {
                            blocks.push(json!({"type": "text", "text": text}));
                        }
                        for c in calls {
                            blocks.push(json!({
                                "type": "tool_use",
                                "id": c.id,
                                "name": c.name,
                                "input": c.arguments.clone().unwrap_or_else(|_| Value::Object(Map::new())),
                            }));
                        }
                        Value::Array(blocks)
                    }
                };
                messages.push(json!({"role": "assistant", "content": content}));
            }
            Item::ToolResults(results) => {
                let blocks: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        // A native search's result names the tools it found
                        // (`tool_reference` blocks): their deferred
                        // definitions are loaded where the result stands.
                        let content = match &r.found {
                            Some(found) if !found.is_empty() => Value::Array(
                                found
                                    .iter()
                                    .map(|t| json!({"type": "tool_reference", "tool_name": t.name}))
                                    .collect(),
                            ),
                            _ => Value::String(r.content.clone()),
                        };
                        let mut b = json!({
                            "type": "tool_result",
                            "tool_use_id": r.call_id,
                            "content": content,
                        });
                        if r.is_error {
                            b["is_error"] = Value::Bool(true);
                        }
                        b
                    })
                    .collect();
                messages.push(json!({"role": "user", "content": blocks}));
            }
        }
    }
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": messages,
    });
    if let Some(s) = system {
        body["system"] = Value::String(s.to_owned());
    }
    if !tools.is_empty() {
        // A cache breakpoint after the tools the model sees: they come
        // first in the prompt and only grow at their end (deferred loading
        // appends what a search found, or loads it where the search's
        // result stands), so the prefix up to here is read from the prompt
        // cache next round. A deferred tool is not in the prompt.
        let last = tools.iter().rposition(|t| t.offer != Offer::Deferred);
        body["tools"] = Value::Array(
            tools
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut tool = json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.parameters,
                    });
                    if t.offer == Offer::Deferred {
                        tool["defer_loading"] = Value::Bool(true);
                    }
                    if Some(i) == last {
                        tool["cache_control"] = json!({"type": "ephemeral"});
                    }
                    tool
                })
                .collect(),
        );
    }
    body
}

#[derive(Debug)]
struct Block {
    /// The block as started, filled as its deltas arrive.
    value: Value,
    /// `input_json_delta` fragments of a `tool_use` block.
    json: String,
}

/// Reassembles one streamed round.
#[derive(Debug, Default)]
pub struct Decoder {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
    /// `message_stop` arrived.
    pub(super) done: bool,
}

impl Decoder {
    /// One event (`event:` name and `data:`).
    pub fn feed(&mut self, event: Option<&str>, data: &str) -> Result<Vec<Delta>, StreamError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let v: Value = serde_json::from_str(data).map_err(|source| StreamError::Unreadable {
            unit: "event",
            source,
            data: clip(data),
        })?;
        let kind = event
            .map(str::to_owned)
            .or_else(|| v.get("type").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut out = Vec::new();
        match kind.as_str() {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.usage.input_tokens =
                        u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0);
                    self.usage.output_tokens =
                        u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
                }
            }
            "content_block_start" => {
                let mut value = v.get("content_block").cloned().unwrap_or(Value::Null);
                // Its deltas are written into it as keys: anything but an
                // object (or nothing yet) cannot take them.
                if !(value.is_object() || value.is_null()) {
                    return Err(StreamError::BlockNotAnObject {
                        index,
                        kind: crate::messages::schema::kind_with_article(&value),
                    });
                }
                if value.get("type").and_then(Value::as_str) == Some("tool_use") {
                    // The input comes as input_json_delta fragments.
                    value["input"] = Value::Object(Map::new());
                }
                self.blocks.insert(
                    index,
                    Block {
                        value,
                        json: String::new(),
                    },
                );
            }
            "content_block_delta" => {
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let Some(block) = self.blocks.get_mut(&index) else {
                    return Err(StreamError::NeverStarted { index });
                };
                let append = |block: &mut Block, key: &str, text: &str| {
                    let prev = block.value.get(key).and_then(Value::as_str).unwrap_or("");
                    block.value[key] = Value::String(format!("{prev}{text}"));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        append(block, "text", t);
                        out.push(Delta::Text(t.to_owned()));
                    }
                    Some("thinking_delta") => {
                        let t = delta.get("thinking").and_then(Value::as_str).unwrap_or("");
                        append(block, "thinking", t);
                        out.push(Delta::Thinking(t.to_owned()));
                    }
                    Some("signature_delta") => {
                        let t = delta.get("signature").and_then(Value::as_str).unwrap_or("");
                        append(block, "signature", t);
                    }
                    Some("input_json_delta") => {
                        block.json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        );
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = self.blocks.get_mut(&index)
                    && block.value.get("type").and_then(Value::as_str) == Some("tool_use")
                {
                    block.value["input"] = match parse_arguments(&block.json) {
                        Ok(v) => v,
                        Err(e) => Value::String(e.raw),
                    };
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(n) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = n;
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let msg = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| clip(data));
                return Err(StreamError::Endpoint(msg));
            }
            // ping, and what newer APIs add.
            _ => {}
        }
        Ok(out)
    }

    /// The round; an error when the stream ended before `message_stop`.
    pub fn finish(self) -> Result<Round, StreamError> {
        if !self.done {
            let in_call = self
                .blocks
                .values()
                .any(|b| b.value.get("type").and_then(Value::as_str) == Some("tool_use"));
            return Err(StreamError::Cut {
                provider: Provider::Anthropic,
                in_call,
            });
        }
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut raw = Vec::new();
        for block in self.blocks.into_values() {
            match block.value.get("type").and_then(Value::as_str) {
                Some("text") => {
                    text.push_str(
                        block
                            .value
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                    );
                }
                Some("tool_use") => {
                    let arguments = match block.value.get("input") {
                        Some(v @ Value::Object(_)) => Ok(v.clone()),
                        Some(Value::String(raw)) => Err(ArgumentsError { raw: raw.clone() }),
                        _ => Ok(Value::Object(Map::new())),
                    };
                    calls.push(ToolCallRequest {
                        id: block
                            .value
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        name: block
                            .value
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        arguments,
                    });
                }
                _ => {}
            }
            raw.push(block.value);
        }
        Ok(Round {
            text,
            calls,
            usage: self.usage,
            stop_reason: self.stop_reason,
            raw: Some(Value::Array(raw)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::turn::model::ToolResultItem;

    /// The provider's own deferred loading (tool search tool docs, "custom
    /// tool search implementation"): every tool is sent deferred, the
    /// cache breakpoint sits on the last tool the model sees, and a
    /// search's answer is `tool_reference` blocks (text when it found
    /// nothing).
    #[test]
    fn deferred_tools_are_marked_and_a_search_answers_with_tool_references() {
        let spec = |name: &str, offer| ToolSpec {
            name: name.into(),
            description: name.to_uppercase(),
            parameters: json!({"type": "object"}),
            offer,
        };
        let tools = vec![
            spec("mcpvisor_tool_search", Offer::NativeSearch),
            spec("mcp__s__a", Offer::Deferred),
            spec("mcp__s__b", Offer::Deferred),
        ];
        let search = |id: &str| ToolCallRequest {
            id: id.into(),
            name: "mcpvisor_tool_search".into(),
            arguments: Ok(json!({"query": "b"})),
        };
        let items = vec![
            Item::User("go".into()),
            Item::Assistant {
                text: String::new(),
                calls: vec![search("toolu_1"), search("toolu_2")],
                raw: None,
            },
            Item::ToolResults(vec![
                ToolResultItem {
                    call_id: "toolu_1".into(),
                    content: "definitions as text".into(),
                    is_error: false,
                    found: Some(vec![tools[2].clone()]),
                },
                ToolResultItem {
                    call_id: "toolu_2".into(),
                    content: "No tool matched \"b\".".into(),
                    is_error: false,
                    found: Some(Vec::new()),
                },
            ]),
        ];
        let body = request_body("claude", 1024, None, &tools, &items);
        assert_eq!(
            body["tools"],
            json!([
                {"name": "mcpvisor_tool_search", "description": "MCPVISOR_TOOL_SEARCH", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
                {"name": "mcp__s__a", "description": "MCP__S__A", "input_schema": {"type": "object"}, "defer_loading": true},
                {"name": "mcp__s__b", "description": "MCP__S__B", "input_schema": {"type": "object"}, "defer_loading": true},
            ])
        );
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "tool_reference", "tool_name": "mcp__s__b"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "No tool matched \"b\"."},
            ])
        );
    }

    fn decode(events: &[(&str, &str)]) -> Round {
        let mut d = Decoder::default();
        for (e, data) in events {
            d.feed(Some(e), data).unwrap();
        }
        d.finish().unwrap()
    }

    #[test]
    fn every_tool_result_of_a_round_is_one_user_turn() {
        let items = vec![
            Item::User("go".into()),
            Item::Assistant {
                text: "two calls".into(),
                calls: vec![
                    ToolCallRequest {
                        id: "toolu_1".into(),
                        name: "a".into(),
                        arguments: Ok(json!({"x": 1})),
                    },
                    ToolCallRequest {
                        id: "toolu_2".into(),
                        name: "b".into(),
                        arguments: Ok(json!({})),
                    },
                ],
                raw: None,
            },
            Item::ToolResults(vec![
                ToolResultItem {
                    call_id: "toolu_1".into(),
                    content: "one".into(),
                    is_error: false,
                    found: None,
                },
                ToolResultItem {
                    call_id: "toolu_2".into(),
                    content: "refused".into(),
                    is_error: true,
                    found: None,
                },
            ]),
        ];
        let tools = vec![ToolSpec {
            name: "a".into(),
            description: "A".into(),
            parameters: json!({"type": "object"}),
            offer: Offer::Eager,
        }];
        let body = request_body("claude", 1024, Some("sys"), &tools, &items);
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": 1024,
                "stream": true,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "two calls"},
                        {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {"x": 1}},
                        {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "refused", "is_error": true},
                    ]},
                ],
                "tools": [{"name": "a", "description": "A", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            })
        );
    }

    #[test]
    fn a_recorded_tool_use_stream_reassembles_and_thinking_is_echoed_unchanged() {
        let r = decode(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_x","name":"json","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"elements\": [1,"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"2]}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].id, "toolu_x");
        assert_eq!(r.calls[0].arguments, Ok(json!({"elements": [1, 2]})));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 30
            }
        );
        assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
        let raw = r.raw.clone().unwrap();
        assert_eq!(
            raw[0],
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig"})
        );
        // Echoed as received in the next request.
        let items = vec![Item::Assistant {
            text: r.text.clone(),
            calls: r.calls.clone(),
            raw: r.raw.clone(),
        }];
        let body = request_body("m", 10, None, &[], &items);
        assert_eq!(body["messages"][0]["content"], raw);
    }

    #[test]
    fn text_streams_and_a_cut_or_an_error_is_named() {
        let r = decode(&[
            (
                "content_block_start",
                r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":0,"delta":{"type":"text_delta","text":"Hi "}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":0,"delta":{"type":"text_delta","text":"there"}}"#,
            ),
            ("message_stop", "{}"),
        ]);
        assert_eq!(r.text, "Hi there");
        let mut d = Decoder::default();
        d.feed(
            Some("content_block_start"),
            r#"{"index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
        )
        .unwrap();
        assert!(
            d.finish()
                .unwrap_err()
                .to_string()
                .contains("middle of a tool call")
        );
        let mut d = Decoder::default();
        let e = d
            .feed(
                Some("error"),
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("Overloaded"), "{e}");
    }

    #[test]
    fn a_content_block_that_is_not_an_object_is_an_error_not_a_panic() {
        // Found by `no_sequence_of_events_makes_the_decoder_panic` (issue
        // 31): a block started as `5` (or `false`, `[…]`, `"…"`) and then
        // given a text delta panicked in serde_json's `value["text"] = …`,
        // taking the turn's task with it. Now the start is refused.
        let mut d = Decoder::default();
        let e = d
            .feed(
                Some("content_block_start"),
                r#"{"index":0,"content_block":5}"#,
            )
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "an unreadable stream event: content block 0 is a number, not an object"
        );
        let e = d
            .feed(
                Some("content_block_delta"),
                r#"{"index":0,"delta":{"type":"text_delta","text":"x"}}"#,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("never started"), "{e}");
        // A start with no block at all still takes its deltas.
        d.feed(Some("content_block_start"), r#"{"index":1}"#)
            .unwrap();
        d.feed(
            Some("content_block_delta"),
            r#"{"index":1,"delta":{"type":"text_delta","text":"x"}}"#,
        )
        .unwrap();
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the Messages stream decoder: a round comes out the
    //! same however its text, thinking and each tool call's `partial_json`
    //! are cut into deltas and the blocks' deltas interleaved, and no event,
    //! however wrong, makes it panic.

    use super::*;
    use crate::messages::prop_gen::{config, cut, interleave, json_value, key, tricky_text};
    use proptest::prelude::*;
    use proptest::sample::Index;

    /// One content block as the model says it.
    #[derive(Debug, Clone)]
    enum Said {
        Text(String),
        Thinking {
            thinking: String,
            signature: String,
        },
        ToolUse {
            id: String,
            name: String,
            input: String,
        },
    }

    impl Said {
        /// The block's start, and the texts its deltas carry, each with
        /// the delta's shape: `(delta type, field)`.
        fn start(&self) -> (Value, &'static str, &'static str, &str) {
            match self {
                Said::Text(t) => (json!({"type": "text", "text": ""}), "text_delta", "text", t),
                Said::Thinking { thinking, .. } => (
                    json!({"type": "thinking", "thinking": ""}),
                    "thinking_delta",
                    "thinking",
                    thinking,
                ),
                Said::ToolUse { id, name, input } => (
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    "input_json_delta",
                    "partial_json",
                    input,
                ),
            }
        }
    }

    /// A tool call's input as JSON text: an object, compact or pretty, or
    /// nothing at all (`{}`).
    fn input() -> impl Strategy<Value = String> {
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

    fn block() -> impl Strategy<Value = Said> {
        prop_oneof![
            2 => prop_oneof![tricky_text(), "[a-z é😀\n]{0,200}"].prop_map(Said::Text),
            1 => (tricky_text(), "[A-Za-z0-9+/]{0,20}")
                .prop_map(|(thinking, signature)| Said::Thinking { thinking, signature }),
            2 => ("toolu_[a-z0-9]{1,6}", tricky_text(), input())
                .prop_map(|(id, name, input)| Said::ToolUse { id, name, input }),
        ]
    }

    /// The events of a round of `blocks`: each block's start, deltas (its
    /// text in `pieces[i]`) and stop, the blocks interleaved as `picks`
    /// say; usage and the stop reason around them. `named`: the SSE
    /// `event:` name is sent too (else the decoder reads `type`).
    fn events(
        blocks: &[Said],
        pieces: &[Vec<String>],
        picks: &[Index],
        usage: (u64, u64),
        named: bool,
    ) -> Vec<(Option<String>, String)> {
        let event = |v: Value| {
            let name = v["type"].as_str().map(str::to_owned).filter(|_| named);
            (name, v.to_string())
        };
        let mut streams = Vec::new();
        for (i, (b, pieces)) in blocks.iter().zip(pieces).enumerate() {
            let (start, kind, field, _) = b.start();
            let mut s = vec![event(
                json!({"type": "content_block_start", "index": i, "content_block": start}),
            )];
            for p in pieces {
                s.push(event(json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": kind, field: p}})));
            }
            if let Said::Thinking { signature, .. } = b {
                s.push(event(json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "signature_delta", "signature": signature}})));
            }
            s.push(event(json!({"type": "content_block_stop", "index": i})));
            streams.push(s);
        }
        let start = event(json!({"type": "message_start",
            "message": {"content": [], "usage": {"input_tokens": usage.0, "output_tokens": 1}}}));
        let end = [
            event(
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": usage.1}}),
            ),
            event(json!({"type": "message_stop"})),
        ];
        std::iter::once(start)
            .chain(interleave(streams, picks, false))
            .chain(end)
            .collect()
    }

    fn decode(events: &[(Option<String>, String)]) -> Result<Round, StreamError> {
        let mut d = Decoder::default();
        for (name, data) in events {
            d.feed(name.as_deref(), data)?;
        }
        d.finish()
    }

    /// An event roughly of the right shape, its fields of any type.
    fn rough_event() -> impl Strategy<Value = (Option<String>, String)> {
        let kind = prop::sample::select(vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
            "error",
            "ping",
        ]);
        let index = prop_oneof![
            8 => (0u64..2).prop_map(|i| json!(i)),
            1 => any::<u64>().prop_map(|i| json!(i)),
            1 => json_value(),
        ];
        let block = prop_oneof![
            3 => prop::sample::select(vec!["text", "thinking", "tool_use", "image"])
                .prop_map(|t| json!({"type": t})),
            2 => json_value(),
        ];
        let delta = prop_oneof![
            3 => (
                prop::sample::select(vec![
                    "text_delta", "thinking_delta", "signature_delta", "input_json_delta", "other",
                ]),
                prop_oneof![tricky_text().prop_map(Value::String), json_value()],
            )
                .prop_map(|(t, v)| json!({"type": t, "text": v, "thinking": v,
                    "signature": v, "partial_json": v})),
            1 => json_value(),
        ];
        // The `event:` name: none (the decoder reads `type`), the same as
        // `type`, or another.
        let named = prop_oneof![
            3 => Just(None),
            3 => Just(Some(None)),
            1 => tricky_text().prop_map(|t| Some(Some(t))),
        ];
        prop_oneof![
            6 => (named, kind, index, block, delta, json_value()).prop_map(
                |(named, kind, index, block, delta, other)| {
                    let v = json!({"type": kind, "index": index, "content_block": block,
                        "delta": delta, "message": {"usage": other}, "usage": other,
                        "error": other});
                    let named = named.map(|n| n.unwrap_or_else(|| kind.to_owned()));
                    (named, v.to_string())
                }
            ),
            1 => json_value().prop_map(|v| (None, v.to_string())),
            1 => tricky_text().prop_map(|t| (None, t)),
        ]
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn a_round_is_the_same_however_its_blocks_are_cut_into_deltas(
            blocks in prop::collection::vec(block(), 0..5),
            cuts in prop::collection::vec(prop::collection::vec(any::<Index>(), 0..6), 5),
            picks in prop::collection::vec(any::<Index>(), 1..40),
            usage in (any::<u32>(), any::<u32>()),
            named in any::<bool>(),
        ) {
            // LOOP-5: text blocks concatenated in index order, each tool
            // call's input reassembled and parsed at its block's stop,
            // thinking and signatures kept for the echo, usage kept,
            // whether each came in one delta or many.
            let usage = (u64::from(usage.0), u64::from(usage.1));
            let texts: Vec<&str> = blocks.iter().map(|b| b.start().3).collect();
            let whole_pieces: Vec<Vec<String>> = texts.iter().map(|t| vec![(*t).to_owned()]).collect();
            let whole = decode(&events(&blocks, &whole_pieces, &[], usage, named));
            let pieces: Vec<Vec<String>> = texts.iter().zip(&cuts).map(|(t, c)| cut(t, c)).collect();
            let split = decode(&events(&blocks, &pieces, &picks, usage, named));
            // The same round, or the same error's text.
            prop_assert_eq!(
                split.as_ref().map_err(ToString::to_string),
                whole.as_ref().map_err(ToString::to_string)
            );
            let whole = whole.unwrap();
            let text: String = blocks
                .iter()
                .filter_map(|b| match b {
                    Said::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(&whole.text, &text);
            let calls: Vec<ToolCallRequest> = blocks
                .iter()
                .filter_map(|b| match b {
                    Said::ToolUse { id, name, input } => Some(ToolCallRequest {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: Ok(serde_json::from_str(input).unwrap_or(json!({}))),
                    }),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(&whole.calls, &calls);
            prop_assert_eq!(whole.usage, Usage { input_tokens: usage.0, output_tokens: usage.1 });
            let thinking: Vec<Value> = blocks
                .iter()
                .filter_map(|b| match b {
                    Said::Thinking { thinking, signature } => Some(
                        json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                    ),
                    _ => None,
                })
                .collect();
            let echoed: Vec<Value> = whole
                .raw
                .iter()
                .flat_map(|r| r.as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == "thinking")
                .collect();
            prop_assert_eq!(echoed, thinking, "thinking echoed unchanged");
        }

        #[test]
        fn no_sequence_of_events_makes_the_decoder_panic(
            events in prop::collection::vec(rough_event(), 0..16),
        ) {
            // A model endpoint (or a proxy before it) may send anything: an
            // error, never a panic.
            let mut d = Decoder::default();
            for (name, data) in &events {
                let _ = d.feed(name.as_deref(), data);
            }
            let _ = d.finish();
        }
    }
}
