//! Golden tests of the Responses codec, from the public wire format
//! (openai-python `types/responses/*`: `response_function_tool_call.py`,
//! `response_function_call_arguments_delta_event.py`,
//! `response_input_item_param.py`, `function_tool_param.py`).

use super::*;
use crate::runtime::turn::model::{ArgumentsError, ToolResultItem};

/// The stream of a reasoning model's round with two parallel calls, as
/// `(event, data)` pairs.
fn two_calls() -> Vec<(&'static str, String)> {
    let reasoning = json!({"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-secret"});
    let reasoning_done = json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Two cities."}], "encrypted_content": "gAAAAB-secret"});
    let call = |id: &str, call_id: &str, args: &str, status: &str| json!({"id": id, "type": "function_call", "status": status, "arguments": args, "call_id": call_id, "name": "mcp__w__get"});
    let paris = r#"{"city":"Paris"}"#;
    let rome = r#"{"city":"Rome"}"#;
    vec![
        ("response.created", json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "output": []}}).to_string()),
        ("response.output_item.added", json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": reasoning}).to_string()),
        ("response.reasoning_summary_text.delta", json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 2, "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Two cities."}).to_string()),
        ("response.output_item.done", json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": reasoning_done}).to_string()),
        ("response.output_item.added", json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1, "item": call("fc_1", "call_a", "", "in_progress")}).to_string()),
        ("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "sequence_number": 5, "item_id": "fc_1", "output_index": 1, "delta": "{\"city\":"}).to_string()),
        ("response.output_item.added", json!({"type": "response.output_item.added", "sequence_number": 6, "output_index": 2, "item": call("fc_2", "call_b", "", "in_progress")}).to_string()),
        ("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "sequence_number": 7, "item_id": "fc_2", "output_index": 2, "delta": rome}).to_string()),
        ("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "sequence_number": 8, "item_id": "fc_1", "output_index": 1, "delta": "\"Paris\"}"}).to_string()),
        ("response.function_call_arguments.done", json!({"type": "response.function_call_arguments.done", "sequence_number": 9, "item_id": "fc_1", "output_index": 1, "arguments": paris}).to_string()),
        ("response.output_item.done", json!({"type": "response.output_item.done", "sequence_number": 10, "output_index": 1, "item": call("fc_1", "call_a", paris, "completed")}).to_string()),
        ("response.output_item.done", json!({"type": "response.output_item.done", "sequence_number": 11, "output_index": 2, "item": call("fc_2", "call_b", rome, "completed")}).to_string()),
        ("response.completed", json!({"type": "response.completed", "sequence_number": 12, "response": {"id": "resp_1", "status": "completed", "output": [reasoning_done, call("fc_1", "call_a", paris, "completed"), call("fc_2", "call_b", rome, "completed")], "usage": {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}}}).to_string()),
    ]
}

fn decode(events: &[(&str, String)]) -> (Round, Vec<Delta>) {
    let mut d = Decoder::default();
    let mut deltas = Vec::new();
    for (event, data) in events {
        deltas.extend(d.feed(Some(event), data).unwrap());
    }
    (d.finish().unwrap(), deltas)
}

#[test]
fn parallel_calls_reasoning_and_usage_are_reassembled() {
    let (round, deltas) = decode(&two_calls());
    assert_eq!(deltas, vec![Delta::Thinking("Two cities.".into())]);
    assert_eq!(
        round.calls,
        vec![
            ToolCallRequest {
                id: "call_a".into(),
                name: "mcp__w__get".into(),
                arguments: Ok(json!({"city": "Paris"})),
            },
            ToolCallRequest {
                id: "call_b".into(),
                name: "mcp__w__get".into(),
                arguments: Ok(json!({"city": "Rome"})),
            },
        ]
    );
    assert_eq!(
        round.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 12
        }
    );
    assert_eq!(round.stop_reason.as_deref(), Some("completed"));
    let raw = round.raw.unwrap();
    assert_eq!(raw[0]["type"], "reasoning");
    assert_eq!(raw[0]["encrypted_content"], "gAAAAB-secret");
    assert_eq!(raw.as_array().unwrap().len(), 3);
}

#[test]
fn the_request_body_is_golden_and_replays_the_round_without_ids() {
    let (round, _) = decode(&two_calls());
    let tools = vec![ToolSpec {
        name: "mcp__w__get".into(),
        description: "Weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        offer: Offer::Eager,
    }];
    let items = vec![
        Item::User("weather?".into()),
        Item::Assistant {
            text: round.text.clone(),
            calls: round.calls.clone(),
            raw: round.raw.clone(),
        },
        Item::ToolResults(vec![
            ToolResultItem {
                call_id: "call_a".into(),
                content: "sunny".into(),
                is_error: false,
                found: None,
            },
            ToolResultItem {
                call_id: "call_b".into(),
                content: "the tool failed".into(),
                is_error: true,
                found: None,
            },
        ]),
    ];
    let body = request_body("gpt-5", Some("be brief"), &tools, &items, true);
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Two cities."}], "encrypted_content": "gAAAAB-secret"},
                {"type": "function_call", "arguments": "{\"city\":\"Paris\"}", "call_id": "call_a", "name": "mcp__w__get"},
                {"type": "function_call", "arguments": "{\"city\":\"Rome\"}", "call_id": "call_b", "name": "mcp__w__get"},
                {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_b", "output": "the tool failed"},
            ],
            "tools": [{
                "type": "function",
                "name": "mcp__w__get",
                "description": "Weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": false,
            }],
        })
    );
    // No tools: no `tools` key (TRUST-7); a round without its items (built
    // in code) is rendered from its text and calls.
    let body = request_body(
        "m",
        None,
        &[],
        &[Item::Assistant {
            text: "hello".into(),
            calls: vec![ToolCallRequest {
                id: "c".into(),
                name: "t".into(),
                arguments: Err(ArgumentsError {
                    raw: "{oops".into(),
                }),
            }],
            raw: None,
        }],
        false,
    );
    assert!(
        body.get("tools").is_none()
            && body.get("instructions").is_none()
            && body.get("include").is_none()
    );
    assert_eq!(
        body["input"],
        json!([
            {"role": "assistant", "content": "hello"},
            {"type": "function_call", "call_id": "c", "name": "t", "arguments": "{oops"},
        ])
    );
}

#[test]
fn text_streams_as_it_comes() {
    let events = [
        ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}).to_string()),
        ("response.output_text.delta", json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hel"}).to_string()),
        ("response.output_text.delta", json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "lo"}).to_string()),
        ("response.completed", json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 3, "output_tokens": 2}}}).to_string()),
    ];
    let (round, deltas) = decode(&events);
    assert_eq!(
        deltas,
        vec![Delta::Text("Hel".into()), Delta::Text("lo".into())]
    );
    assert_eq!(round.text, "Hello");
    assert!(round.calls.is_empty());
}

#[test]
fn arguments_that_only_streamed_are_used_and_bad_ones_are_kept_raw() {
    // No `output_item.done`, no output list: the deltas are the arguments.
    let events = [
        ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "call_id": "c1", "name": "a", "arguments": ""}}).to_string()),
        ("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{\"x\":1}"}).to_string()),
        ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "call_id": "c2", "name": "b", "arguments": ""}}).to_string()),
        ("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "[1]"}).to_string()),
        ("response.incomplete", json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}).to_string()),
    ];
    let (round, _) = decode(&events);
    assert_eq!(round.calls[0].arguments, Ok(json!({"x": 1})));
    assert_eq!(
        round.calls[1].arguments,
        Err(ArgumentsError { raw: "[1]".into() })
    );
    assert_eq!(round.stop_reason.as_deref(), Some("max_output_tokens"));
}

#[test]
fn a_cut_stream_and_the_endpoints_errors_are_named() {
    let mut d = Decoder::default();
    for (event, data) in &two_calls()[..6] {
        d.feed(Some(event), data).unwrap();
    }
    let e = d.finish().unwrap_err();
    assert_eq!(
        e.to_string(),
        "the model's stream was cut in the middle of a tool call (no response.completed)"
    );
    let mut d = Decoder::default();
    let e = d
        .feed(
            Some("response.failed"),
            &json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "overloaded"}}}).to_string(),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the model endpoint sent an error: overloaded"
    );
    let e = d
        .feed(
            Some("error"),
            &json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down"})
                .to_string(),
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "the model endpoint sent an error: slow down");
    let e = d
        .feed(
            None,
            &json!({"type": "response.function_call_arguments.delta", "output_index": 7, "delta": "{"}).to_string(),
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "a delta for block 7, which never started");
    assert!(d.feed(None, "{not json").is_err());
}

// A reasoning item that came without its encrypted content (a route that
// did not ask for it) cannot go back: it is left out, the calls are not.
#[test]
fn reasoning_without_its_encrypted_content_is_not_replayed() {
    let raw = json!([
        {"id": "rs_1", "type": "reasoning", "summary": []},
        {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"},
    ]);
    let body = request_body(
        "m",
        None,
        &[],
        &[Item::Assistant {
            text: String::new(),
            calls: Vec::new(),
            raw: Some(raw),
        }],
        false,
    );
    assert_eq!(
        body["input"],
        json!([{"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"}])
    );
}

/// The provider's own deferred loading, searched here (openai-python
/// `types/responses/tool_search_tool_param.py`,
/// `response_tool_search_call.py`, `response_tool_search_output_item_param.py`):
/// a client-executed `tool_search_call` is a call of the search tool, and
/// its answer goes back as a `tool_search_output` carrying the found
/// functions, deferred.
#[test]
fn a_client_executed_tool_search_is_a_search_call_answered_by_tool_search_output() {
    let search_call = |status: &str| json!({"id": "tsc_1", "type": "tool_search_call", "status": status, "call_id": "call_s", "execution": "client", "arguments": {"query": "weather", "limit": 2}});
    let events = vec![
        ("response.created", json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress", "output": []}}).to_string()),
        ("response.output_item.added", json!({"type": "response.output_item.added", "output_index": 0, "item": search_call("in_progress")}).to_string()),
        ("response.output_item.done", json!({"type": "response.output_item.done", "output_index": 0, "item": search_call("completed")}).to_string()),
        ("response.completed", json!({"type": "response.completed", "response": {"id": "resp_2", "status": "completed", "output": [search_call("completed")], "usage": {"input_tokens": 9, "output_tokens": 3}}}).to_string()),
    ];
    let (round, _) = decode(&events);
    assert_eq!(
        round.calls,
        vec![ToolCallRequest {
            id: "call_s".into(),
            name: SEARCH_TOOL.into(),
            arguments: Ok(json!({"query": "weather", "limit": 2})),
        }]
    );
    let search = ToolSpec {
        name: SEARCH_TOOL.into(),
        description: "Search the tools".into(),
        parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        offer: Offer::NativeSearch,
    };
    let get = ToolSpec {
        name: "mcp__w__get".into(),
        description: "Weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        offer: Offer::Eager,
    };
    let items = vec![
        Item::User("weather?".into()),
        Item::Assistant {
            text: String::new(),
            calls: round.calls.clone(),
            raw: round.raw.clone(),
        },
        Item::ToolResults(vec![ToolResultItem {
            call_id: "call_s".into(),
            content: "the definitions as text".into(),
            is_error: false,
            found: Some(vec![get]),
        }]),
    ];
    let body = request_body("gpt-5.4", None, &[search], &items, false);
    assert_eq!(
        body["tools"],
        json!([{
            "type": "tool_search",
            "execution": "client",
            "description": "Search the tools",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        }])
    );
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": "weather?"},
            {"type": "tool_search_call", "call_id": "call_s", "execution": "client", "arguments": {"query": "weather", "limit": 2}},
            {
                "type": "tool_search_output",
                "call_id": "call_s",
                "execution": "client",
                "status": "completed",
                "tools": [{
                    "type": "function",
                    "name": "mcp__w__get",
                    "description": "Weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    "strict": false,
                    "defer_loading": true,
                }],
            },
        ])
    );
}

/// A search the API ran itself (`execution: "server"`) is not a call to
/// answer: it stays in the round, replayed, and nothing is called.
#[test]
fn a_server_executed_tool_search_is_not_a_call() {
    let item = json!({"id": "tsc_2", "type": "tool_search_call", "status": "completed", "call_id": null, "execution": "server", "arguments": {"query": "x"}});
    let events = vec![(
        "response.completed",
        json!({"type": "response.completed", "response": {"status": "completed", "output": [item]}}).to_string(),
    )];
    let (round, _) = decode(&events);
    assert!(round.calls.is_empty());
    assert_eq!(round.raw.unwrap()[0]["type"], "tool_search_call");
}
