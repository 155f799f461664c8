//! The OpenAI Responses API (LOOP-5, issue 36): the request body (`input`
//! items, flat function tools with `strict: false`), and the stream decoder
//! that reassembles a round from its typed events — text from
//! `response.output_text.delta`, reasoning summaries as thinking, function
//! calls keyed by `output_index` from `response.function_call_arguments.delta`
//! (the item's own `arguments` at `response.output_item.done` win), usage
//! and the end from `response.completed`.
//!
//! Requests are sent with `store: false` (nothing is kept on the vendor's
//! side). A round's output items are kept as they came (`Round::raw`) and
//! replayed in the next round's `input`, without their `id`s (with `store:
//! false` an id names an item the API did not keep, which it refuses). A
//! reasoning model's reasoning items go back with the calls they led to
//! when the route asks for their encrypted content (`encrypted_reasoning`,
//! which only reasoning models accept); a reasoning item without it cannot
//! be sent back and is left out.

use serde_json::{Map, Value, json};

use super::openai::{clip, error_text};
use super::{
    Delta, Item, Offer, Provider, Round, StreamError, ToolCallRequest, ToolSpec, Usage,
    parse_arguments,
};
use crate::runtime::turn::search::SEARCH_TOOL;

/// The request body of one round (streamed). `tools` empty: no `tools` key
/// at all (TRUST-7).
pub fn request_body(
    model: &str,
    system: Option<&str>,
    tools: &[ToolSpec],
    items: &[Item],
    encrypted_reasoning: bool,
) -> Value {
    let mut input = Vec::new();
    for item in items {
        match item {
            Item::User(text) => input.push(json!({"role": "user", "content": text})),
            // A round as it came: its output items, reasoning included.
            Item::Assistant {
                raw: Some(Value::Array(output)),
                ..
            } => input.extend(output.iter().filter_map(replayable)),
            Item::Assistant { text, calls, .. } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for c in calls {
                    let arguments = match &c.arguments {
                        Ok(v) => v.to_string(),
                        Err(e) => e.raw.clone(),
                    };
                    input.push(json!({
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        "arguments": arguments,
                    }));
                }
            }
            Item::ToolResults(results) => {
                for r in results {
                    input.push(match &r.found {
                        // A client-executed search's answer: the found
                        // tools' definitions, loaded at the end of the
                        // context (the earlier prefix stays cached).
                        Some(found) => json!({
                            "type": "tool_search_output",
                            "call_id": r.call_id,
                            "execution": "client",
                            "status": "completed",
                            "tools": found.iter().map(|t| tool(t, true)).collect::<Vec<_>>(),
                        }),
                        None => json!({
                            "type": "function_call_output",
                            "call_id": r.call_id,
                            "output": r.content,
                        }),
                    });
                }
            }
        }
    }
    let mut body = json!({
        "model": model,
        "stream": true,
        "store": false,
        "input": input,
    });
    if encrypted_reasoning {
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    if let Some(s) = system {
        body["instructions"] = Value::String(s.to_owned());
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(
            tools
                .iter()
                .map(|t| match t.offer {
                    // The provider's own deferred loading, with the search
                    // run here: its answers are `tool_search_output` items.
                    Offer::NativeSearch => json!({
                        "type": "tool_search",
                        "execution": "client",
                        "description": t.description,
                        "parameters": t.parameters,
                    }),
                    Offer::Deferred => tool(t, true),
                    Offer::Eager => tool(t, false),
                })
                .collect(),
        );
    }
    body
}

/// A function tool. `strict` defaults to true, which needs every property
/// required and `additionalProperties: false`: MCP schemas rarely are.
fn tool(t: &ToolSpec, deferred: bool) -> Value {
    let mut f = json!({
        "type": "function",
        "name": t.name,
        "description": t.description,
        "parameters": t.parameters,
        "strict": false,
    });
    if deferred {
        f["defer_loading"] = Value::Bool(true);
    }
    f
}

/// An output item as the next request's input item: without its `id` (and
/// `status`), which name stored items; none for what cannot go back (a
/// reasoning item without its encrypted content, anything not an object).
fn replayable(item: &Value) -> Option<Value> {
    let m = item.as_object()?;
    if m.get("type").and_then(Value::as_str) == Some("reasoning")
        && m.get("encrypted_content").is_none_or(Value::is_null)
    {
        return None;
    }
    Some(Value::Object(
        m.iter()
            .filter(|(k, _)| k.as_str() != "id" && k.as_str() != "status")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Map<String, Value>>(),
    ))
}

/// One output item while it streams.
#[derive(Debug, Default)]
struct Output {
    /// The item as announced, then as finished.
    item: Value,
    /// A function call's arguments, from their deltas.
    arguments: String,
    /// `response.output_item.done` arrived: `item` is final.
    done: bool,
}

/// Reassembles one streamed round.
#[derive(Debug, Default)]
pub struct Decoder {
    text: String,
    /// By `output_index`, in the order they were announced.
    outputs: Vec<(u64, Output)>,
    usage: Usage,
    status: Option<String>,
    /// `response.completed` (or `response.incomplete`) arrived.
    pub(super) done: bool,
}

impl Decoder {
    /// One event: its `event:` name (the payload's `type` is used when
    /// there is none) and its `data:`.
    pub fn feed(&mut self, event: Option<&str>, data: &str) -> Result<Vec<Delta>, StreamError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Vec::new());
        }
        let ev: Value = serde_json::from_str(data).map_err(|source| StreamError::Unreadable {
            unit: "event",
            source,
            data: clip(data),
        })?;
        let kind = ev
            .get("type")
            .and_then(Value::as_str)
            .or(event)
            .unwrap_or_default();
        let index = ev.get("output_index").and_then(Value::as_u64);
        let delta = ev.get("delta").and_then(Value::as_str).unwrap_or_default();
        let mut out = Vec::new();
        match kind {
            "response.output_item.added" | "response.output_item.done" => {
                let (Some(i), Some(item)) = (index, ev.get("item")) else {
                    return Ok(out);
                };
                if !item.is_object() {
                    return Err(StreamError::BlockNotAnObject {
                        index: i,
                        kind: article(item),
                    });
                }
                let o = self.output(i);
                o.item = item.clone();
                o.done = kind.ends_with(".done");
            }
            // A refusal is the answer's text.
            "response.output_text.delta" | "response.refusal.delta" if !delta.is_empty() => {
                self.text.push_str(delta);
                out.push(Delta::Text(delta.to_owned()));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta"
                if !delta.is_empty() =>
            {
                out.push(Delta::Thinking(delta.to_owned()));
            }
            "response.function_call_arguments.delta" => {
                let Some(i) = index else { return Ok(out) };
                match self.outputs.iter_mut().find(|(at, _)| *at == i) {
                    Some((_, o)) => o.arguments.push_str(delta),
                    None => return Err(StreamError::NeverStarted { index: i }),
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(i), Some(all)) = (index, ev.get("arguments").and_then(Value::as_str)) {
                    match self.outputs.iter_mut().find(|(at, _)| *at == i) {
                        Some((_, o)) => o.arguments = all.to_owned(),
                        None => return Err(StreamError::NeverStarted { index: i }),
                    }
                }
            }
            "response.completed" | "response.incomplete" => {
                self.done = true;
                let response = ev.get("response");
                if let Some(u) = response.and_then(|r| r.get("usage")) {
                    self.usage = Usage {
                        input_tokens: u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
                        output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
                    };
                }
                self.status = response
                    .and_then(|r| {
                        r.pointer("/incomplete_details/reason")
                            .or_else(|| r.get("status"))
                    })
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                // The response's own output list is the whole round: an item
                // whose events were lost is still there.
                if let Some(Value::Array(items)) = response.and_then(|r| r.get("output")) {
                    for (i, item) in items.iter().enumerate() {
                        let i = u64::try_from(i).unwrap_or(u64::MAX);
                        let known = self.outputs.iter().any(|(at, o)| *at == i && o.done);
                        if !known && item.is_object() {
                            let o = self.output(i);
                            o.item = item.clone();
                            o.done = true;
                        }
                    }
                }
            }
            "response.failed" => {
                let why = ev
                    .pointer("/response/error")
                    .filter(|e| e.is_object())
                    .map(error_text)
                    .unwrap_or_else(|| "the response failed".to_owned());
                return Err(StreamError::Endpoint(why));
            }
            "error" => {
                let why = ev.get("error").map_or_else(|| error_text(&ev), error_text);
                return Err(StreamError::Endpoint(why));
            }
            _ => {}
        }
        Ok(out)
    }

    /// The output at `index`, announced now if it was not.
    fn output(&mut self, index: u64) -> &mut Output {
        let pos = match self.outputs.iter().position(|(at, _)| *at == index) {
            Some(pos) => pos,
            None => {
                self.outputs.push((index, Output::default()));
                self.outputs.len() - 1
            }
        };
        &mut self.outputs[pos].1
    }

    /// The round; an error when the stream ended before
    /// `response.completed`.
    pub fn finish(mut self) -> Result<Round, StreamError> {
        if !self.done {
            let in_call = self.outputs.iter().any(|(_, o)| {
                matches!(
                    o.item.get("type").and_then(Value::as_str),
                    Some("function_call" | "tool_search_call")
                )
            });
            return Err(StreamError::Cut {
                provider: Provider::OpenAiResponses,
                in_call,
            });
        }
        self.outputs.sort_by_key(|(i, _)| *i);
        let mut calls = Vec::new();
        let mut raw = Vec::new();
        for (i, o) in self.outputs {
            let mut item = o.item;
            if !item.is_object() {
                continue;
            }
            let kind = item.get("type").and_then(Value::as_str);
            // A client-executed search (the provider's own deferred
            // loading): a call of the search tool, answered here.
            if kind == Some("tool_search_call")
                && item.get("execution").and_then(Value::as_str) == Some("client")
            {
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .map_or_else(|| format!("call_{i}"), str::to_owned);
                item["call_id"] = Value::String(id.clone());
                let arguments = match item.get("arguments") {
                    Some(v @ Value::Object(_)) => Ok(v.clone()),
                    Some(Value::String(text)) => parse_arguments(text),
                    _ => parse_arguments(""),
                };
                calls.push(ToolCallRequest {
                    id,
                    name: SEARCH_TOOL.to_owned(),
                    arguments,
                });
            } else if kind == Some("function_call") {
                // The finished item's arguments are the whole text; the
                // deltas' are what streamed when it never finished.
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .filter(|a| o.done && !a.is_empty())
                    .map(str::to_owned)
                    .unwrap_or(o.arguments);
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .map_or_else(|| format!("call_{i}"), str::to_owned);
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                item["arguments"] = Value::String(arguments.clone());
                item["call_id"] = Value::String(id.clone());
                calls.push(ToolCallRequest {
                    id,
                    name,
                    arguments: parse_arguments(&arguments),
                });
            }
            raw.push(item);
        }
        Ok(Round {
            text: self.text,
            calls,
            usage: self.usage,
            stop_reason: self.status,
            raw: Some(Value::Array(raw)),
        })
    }
}

/// "a string", "an array"…, for a block that is not an object.
fn article(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests;
