//! A scripted model endpoint on 127.0.0.1 for the tool-loop tests
//! (LOOP-7): it speaks both real wire formats — OpenAI Chat Completions
//! chunks and Anthropic Messages events, as SSE written in small pieces so
//! chunk boundaries fall inside JSON — replays one scripted reply per
//! request, and records every request (path, headers, body) so a test
//! asserts on exactly what the runtime sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A 200 SSE stream with this body, written in pieces of a few bytes.
    Sse(String),
    /// The stream's first bytes, then the connection is dropped mid-body.
    Cut(String),
    /// The stream's first bytes, then nothing, ever (the connection stays open).
    Stall(String),
    /// An HTTP error with this JSON body (and `retry-after`, if given).
    Error {
        /// The status.
        status: u16,
        /// The body.
        body: String,
        /// `retry-after` seconds.
        retry_after: Option<u64>,
    },
}

/// A request the model endpoint received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The path (`/v1/chat/completions`, `/v1/messages`).
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its JSON body.
    pub body: Value,
}

#[derive(Default)]
struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The scripted endpoint; stops when dropped.
pub struct ScriptedModel {
    addr: SocketAddr,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ScriptedModel {
    /// Listen on a free loopback port and answer with `replies`, one per
    /// request, in order (then HTTP 500 "the script is exhausted").
    pub async fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        let state = Arc::new(State {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let st = state.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let st = st.clone();
            async move { answer(st, req).await }
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
        });
        Ok(Self {
            addr,
            state,
            server,
        })
    }

    /// `http://127.0.0.1:PORT` (an Anthropic endpoint; OpenAI's is `+ "/v1"`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn answer(st: Arc<State>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    st.requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Recorded {
            path: parts.uri.path().to_owned(),
            headers: parts.headers,
            body,
        });
    let next = st
        .replies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front();
    match next {
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":{"message":"the script is exhausted"}}"#,
        )
            .into_response(),
        Some(Reply::Error {
            status,
            body,
            retry_after,
        }) => {
            let mut r = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
            if let Some(s) = retry_after
                && let Ok(v) = s.to_string().parse()
            {
                r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
            }
            r
        }
        Some(Reply::Sse(text)) => sse(pieces(text, false)),
        Some(Reply::Cut(text)) => sse(pieces(text, true)),
        Some(Reply::Stall(text)) => {
            use futures::StreamExt;
            sse(pieces(text, false).chain(futures::stream::pending()))
        }
    }
}

/// The body in 7-byte pieces (chunk boundaries inside JSON); `cut`: the
/// stream then fails, and the connection is dropped mid-body.
fn pieces(
    text: String,
    cut: bool,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> {
    let bytes = text.into_bytes();
    let chunks: Vec<Vec<u8>> = bytes.chunks(7).map(<[u8]>::to_vec).collect();
    futures::stream::unfold((chunks.into_iter(), cut), |(mut it, cut)| async move {
        tokio::task::yield_now().await;
        match it.next() {
            Some(c) => Some((Ok(axum::body::Bytes::from(c)), (it, cut))),
            None if cut => Some((Err(std::io::Error::other("cut by the script")), (it, false))),
            None => None,
        }
    })
}

fn sse<S>(stream: S) -> Response
where
    S: futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> + Send + 'static,
{
    (
        [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// OpenAI chunks: `data: {json}` events then `data: [DONE]`.
fn openai_events(chunks: Vec<Value>) -> String {
    let mut s = String::new();
    for c in chunks {
        s.push_str(&format!("data: {c}\n\n"));
    }
    s.push_str("data: [DONE]\n\n");
    s
}

/// An OpenAI text answer.
pub fn openai_text(text: &str) -> Reply {
    let (a, b) = text.split_at(text.len() / 2);
    Reply::Sse(openai_events(vec![
        json!({"choices":[{"index":0,"delta":{"role":"assistant","content":a}}]}),
        json!({"choices":[{"index":0,"delta":{"content":b},"finish_reason":"stop"}]}),
        json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3}}),
    ]))
}

/// An OpenAI round calling these tools `(id, name, arguments JSON)` in
/// parallel: each call's arguments in two fragments, after every call has
/// opened (interleaved by `index`).
pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
    Reply::Sse(openai_events(openai_call_chunks(calls, true)))
}

/// The chunks of [`openai_tool_calls`]; `with_index: false` omits `index`
/// (servers that do).
pub fn openai_call_chunks(calls: &[(&str, &str, &str)], with_index: bool) -> Vec<Value> {
    let mut chunks = Vec::new();
    let with = |mut v: Value, i: usize| {
        if with_index {
            v["index"] = json!(i);
        }
        v
    };
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let (a, _) = args.split_at(args.len() / 2);
        chunks.push(json!({"choices":[{"index":0,"delta":{"tool_calls":[
            with(json!({"id": id, "type": "function", "function": {"name": name, "arguments": a}}), i)
        ]}}]}));
        if !with_index {
            let (_, b) = args.split_at(args.len() / 2);
            chunks.push(json!({"choices":[{"index":0,"delta":{"tool_calls":[
                json!({"function": {"arguments": b}})
            ]}}]}));
        }
    }
    if with_index {
        for (i, (_, _, args)) in calls.iter().enumerate() {
            let (_, b) = args.split_at(args.len() / 2);
            chunks.push(json!({"choices":[{"index":0,"delta":{"tool_calls":[
                with(json!({"function": {"arguments": b}}), i)
            ]}}]}));
        }
    }
    chunks.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}));
    chunks
}

/// Anthropic events: `event: NAME` + `data: {json}`.
fn anthropic_events(events: Vec<(&str, Value)>) -> String {
    let mut s = String::new();
    for (name, data) in events {
        s.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    s
}

/// An Anthropic text answer.
pub fn anthropic_text(text: &str) -> Reply {
    let (a, b) = text.split_at(text.len() / 2);
    Reply::Sse(anthropic_events(vec![
        (
            "message_start",
            json!({"type":"message_start","message":{"content":[],"usage":{"input_tokens":9,"output_tokens":1}}}),
        ),
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":a}}),
        ),
        ("ping", json!({"type":"ping"})),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":b}}),
        ),
        (
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
        (
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}),
        ),
        ("message_stop", json!({"type":"message_stop"})),
    ]))
}

/// An Anthropic round: a thinking block, then these `tool_use` calls
/// `(id, name, input JSON)`, each input in `input_json_delta` fragments.
pub fn anthropic_tool_use(calls: &[(&str, &str, &str)]) -> Reply {
    let mut ev = vec![
        (
            "message_start",
            json!({"type":"message_start","message":{"content":[],"usage":{"input_tokens":20,"output_tokens":1}}}),
        ),
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I should call a tool."}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2lnbmF0dXJl"}}),
        ),
        (
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
    ];
    for (i, (id, name, input)) in calls.iter().enumerate() {
        let index = i + 1;
        let (a, b) = input.split_at(input.len() / 2);
        ev.push(("content_block_start", json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}})));
        ev.push(("content_block_delta", json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":""}})));
        ev.push(("content_block_delta", json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":a}})));
        ev.push(("content_block_delta", json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":b}})));
        ev.push((
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        ));
    }
    ev.push(("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":40}})));
    ev.push(("message_stop", json!({"type":"message_stop"})));
    Reply::Sse(anthropic_events(ev))
}

/// The SSE text of OpenAI `chunks` without `[DONE]` and without a finish
/// reason after them: for a cut stream.
pub fn openai_partial(chunks: Vec<Value>) -> String {
    let mut s = String::new();
    for c in chunks {
        s.push_str(&format!("data: {c}\n\n"));
    }
    s
}

/// OpenAI-format chunks as a complete stream (`[DONE]` appended).
pub fn openai_stream(chunks: Vec<Value>) -> Reply {
    Reply::Sse(openai_events(chunks))
}

/// Responses API events as `event:` + `data:` pairs.
fn responses_events(events: Vec<Value>) -> String {
    let mut s = String::new();
    for e in events {
        let kind = e["type"].as_str().unwrap_or("").to_owned();
        s.push_str(&format!("event: {kind}\ndata: {e}\n\n"));
    }
    s
}

/// A Responses API text answer.
pub fn responses_text(text: &str) -> Reply {
    let (a, b) = text.split_at(text.len() / 2);
    let message = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]});
    Reply::Sse(responses_events(vec![
        json!({"type": "response.created", "response": {"id": "resp_t", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": a}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": b}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
        json!({"type": "response.completed", "response": {"id": "resp_t", "status": "completed", "output": [message],
            "usage": {"input_tokens": 30, "output_tokens": 4, "total_tokens": 34}}}),
    ]))
}

/// A Responses API round of a reasoning model: a reasoning item (with
/// encrypted content, to be sent back), then these `function_call` items
/// `(call_id, name, arguments JSON)`, their arguments in two deltas each,
/// interleaved across calls.
pub fn responses_tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
    let reasoning = json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Calling tools."}], "encrypted_content": "ENCRYPTED-REASONING"});
    let item = |i: usize, call_id: &str, name: &str, args: &str, status: &str| json!({"id": format!("fc_{i}"), "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": args});
    let mut ev = vec![
        json!({"type": "response.created", "response": {"id": "resp_c", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Calling tools."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
    ];
    for (i, (call_id, name, _)) in calls.iter().enumerate() {
        ev.push(json!({"type": "response.output_item.added", "output_index": i + 1, "item": item(i, call_id, name, "", "in_progress")}));
    }
    for half in 0..2 {
        for (i, (_, _, args)) in calls.iter().enumerate() {
            let (a, b) = args.split_at(args.len() / 2);
            ev.push(json!({"type": "response.function_call_arguments.delta", "item_id": format!("fc_{i}"), "output_index": i + 1, "delta": if half == 0 { a } else { b }}));
        }
    }
    let mut output = vec![reasoning];
    for (i, (call_id, name, args)) in calls.iter().enumerate() {
        let done = item(i, call_id, name, args, "completed");
        ev.push(json!({"type": "response.function_call_arguments.done", "item_id": format!("fc_{i}"), "output_index": i + 1, "arguments": args}));
        ev.push(json!({"type": "response.output_item.done", "output_index": i + 1, "item": done}));
        output.push(done);
    }
    ev.push(json!({"type": "response.completed", "response": {"id": "resp_c", "status": "completed", "output": output,
        "usage": {"input_tokens": 50, "output_tokens": 20, "total_tokens": 70}}}));
    Reply::Sse(responses_events(ev))
}

/// A Responses API round whose one item is a client-executed
/// `tool_search_call` (the provider's own deferred loading, searched by
/// the caller) with these arguments.
pub fn responses_tool_search(call_id: &str, arguments: Value) -> Reply {
    let item = |status: &str| json!({"id": "tsc_1", "type": "tool_search_call", "status": status, "call_id": call_id, "execution": "client", "arguments": arguments});
    Reply::Sse(responses_events(vec![
        json!({"type": "response.created", "response": {"id": "resp_s", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("in_progress")}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item("completed")}),
        json!({"type": "response.completed", "response": {"id": "resp_s", "status": "completed", "output": [item("completed")],
            "usage": {"input_tokens": 12, "output_tokens": 6, "total_tokens": 18}}}),
    ]))
}
