//! Property tests of the raw reply fast paths (`call_reply` and
//! `tools_page`, reached through `decode`): replies to awaited calls and
//! to a `tools/list`, in any order, among decoys that must never answer
//! them.

use super::*;
use crate::messages::prop_gen::{config, tricky_text};
use proptest::prelude::*;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonRpcMessage,
    ListToolsRequest, NumberOrString,
};
use rmcp::transport::Transport;
use serde_json::{Value, json};

/// One stdout line of the server's.
#[derive(Debug, Clone)]
enum Wire {
    /// The reply to awaited call `id`, its text its own.
    Reply { id: i64, text: String },
    /// A reply to awaited call `id` with both `result` and `error`:
    /// the call's only answer, which the transport makes an error.
    Both { id: i64 },
    /// A reply whose id is the string form of awaited call `id`
    /// (`"3"` for 3): JSON-RPC ids are typed, it answers no call.
    StringId { id: i64, text: String },
    /// A request of the server's, with an id from its own id space
    /// (a string, or a number an awaited call has too).
    Request { id: Value },
    /// The page answering the awaited `tools/list` `id`.
    Page { id: i64, tools: Vec<Value> },
    /// A page whose id is the string form of the awaited `tools/list`'s.
    StringPage { id: i64, tools: Vec<Value> },
}

impl Wire {
    fn line(&self) -> String {
        let result = |text: &str| json!({"content": [{"type": "text", "text": text}]});
        let v = match self {
            Wire::Reply { id, text } => {
                json!({"jsonrpc": "2.0", "id": id, "result": result(text)})
            }
            Wire::Both { id } => json!({"jsonrpc": "2.0", "id": id,
                    "result": result("both"), "error": {"code": 1, "message": "both"}}),
            Wire::StringId { id, text } => {
                json!({"jsonrpc": "2.0", "id": id.to_string(), "result": result(text)})
            }
            Wire::Request { id } => json!({"jsonrpc": "2.0", "id": id, "method": "ping"}),
            Wire::Page { id, tools } => {
                json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}})
            }
            Wire::StringPage { id, tools } => {
                json!({"jsonrpc": "2.0", "id": id.to_string(), "result": {"tools": tools}})
            }
        };
        format!("{v}\n")
    }
}

/// The tools of a page: well formed, or not (the catalog judges them).
fn tools() -> impl Strategy<Value = Vec<Value>> {
    let tool = prop_oneof![
        3 => tricky_text().prop_map(|name| json!({"name": name, "inputSchema": {"type": "object"}})),
        1 => tricky_text().prop_map(|t| json!({"name": 3, "title": t})),
    ];
    prop::collection::vec(tool, 0..4)
}

/// An exchange: the calls sent (distinct numeric ids; each answered by
/// its reply with its own text, or by a reply with both `result` and
/// `error`), maybe a `tools/list` sent (an id no call has), and every
/// line the server writes, shuffled.
type Exchange = (Vec<i64>, Option<i64>, Vec<Wire>);

fn exchange() -> impl Strategy<Value = Exchange> {
    let ids = prop::collection::btree_set(prop_oneof![3 => 0i64..20, 1 => any::<i64>()], 1..8);
    ids.prop_flat_map(|ids| {
        let ids: Vec<i64> = ids.into_iter().collect();
        let n = ids.len();
        let answers = prop::collection::vec((tricky_text(), prop::bool::weighted(0.2)), n);
        let decoy = prop_oneof![
            (0..n, tricky_text()).prop_map(|(at, text)| (at, Some(text), None)),
            (
                0..n,
                prop_oneof![Just(json!("1")), tricky_text().prop_map(Value::String)]
            )
                .prop_map(|(at, id)| (at, None, Some(id))),
            (0..n).prop_map(|at| (at, None, None)),
        ];
        let decoys = prop::collection::vec(decoy, 0..6);
        // The list's id, its page, and whether a string-id page comes too.
        let taken = ids.clone();
        let list = prop::option::weighted(0.5, (0i64..40, tools(), tools(), any::<bool>()))
            .prop_map(move |l| l.filter(|(id, ..)| !taken.contains(id)));
        (Just(ids), answers, decoys, list)
    })
    .prop_flat_map(|(ids, answers, decoys, list)| {
        let mut lines: Vec<Wire> = ids
            .iter()
            .zip(answers)
            .map(|(&id, (text, both))| {
                if both {
                    Wire::Both { id }
                } else {
                    Wire::Reply { id, text }
                }
            })
            .collect();
        for (at, text, request_id) in decoys {
            let id = ids[at];
            lines.push(match (text, request_id) {
                (Some(text), _) => Wire::StringId { id, text },
                (None, Some(rid)) => Wire::Request { id: rid },
                // A request reusing an awaited call's number.
                (None, None) => Wire::Request { id: json!(id) },
            });
        }
        let list_id = list.as_ref().map(|(id, ..)| *id);
        if let Some((id, tools, decoy_tools, decoy)) = list {
            lines.push(Wire::Page { id, tools });
            if decoy {
                lines.push(Wire::StringPage {
                    id,
                    tools: decoy_tools,
                });
            }
        }
        (Just(ids), Just(list_id), Just(lines).prop_shuffle())
    })
}

/// What the transport handed out, in order, how many calls it still
/// awaits, and the connection's diagnostics (with the stashed pages).
type Run = (Vec<RxJsonRpcMessage<RoleClient>>, usize, Arc<Diagnostics>);

/// Mark `ids` as sent `tools/call` requests (and `list` as a sent
/// `tools/list`), write `lines`, close stdout, and read every message
/// the transport hands out.
fn run(ids: &[i64], list: Option<i64>, lines: &[Wire]) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bytes: String = lines.iter().map(Wire::line).collect();
        let (client_out, mut server_out) = tokio::io::duplex(bytes.len() + 1);
        let (client_in, _server_in) = tokio::io::duplex(64);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        if let Some(id) = list {
            t.note_sent(&ClientJsonRpcMessage::request(
                ClientRequest::ListToolsRequest(ListToolsRequest::default()),
                NumberOrString::Number(id),
            ));
        }
        for &id in ids {
            t.note_sent(&ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                    "echo",
                ))),
                NumberOrString::Number(id),
            ));
        }
        server_out.write_all(bytes.as_bytes()).await.unwrap();
        drop(server_out);
        let mut got = Vec::new();
        while let Some(msg) = t.receive().await {
            got.push(msg);
        }
        (got, t.calls_pending.len(), diag)
    })
}

/// The numeric id a response or an error answers, if any.
fn answered(msg: &RxJsonRpcMessage<RoleClient>) -> Option<i64> {
    let id = match msg {
        JsonRpcMessage::Response(r) => &r.id,
        JsonRpcMessage::Error(e) => e.id.as_ref()?,
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => return None,
    };
    match id {
        NumberOrString::Number(n) => Some(*n),
        NumberOrString::String(_) => None,
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn every_awaited_call_gets_its_own_reply_once_and_decoys_answer_none(
        (ids, list, lines) in exchange(),
    ) {
        // CALL-3, CALL-4: whatever the order, each awaited
        // call is answered once, by its own reply (or, for a reply with
        // both result and error, by an unreadable-reply error); a reply
        // whose id is the string "3" answers no call 3; a server request
        // keeps its id, whatever number it reuses. The awaited
        // tools/list's page is stashed raw, its string twin is not.
        let (got, still_pending, diag) = run(&ids, list, &lines);
        prop_assert_eq!(got.len(), lines.len(), "one message per line: {:?}", got);
        prop_assert_eq!(still_pending, 0, "calls_pending ends empty");
        let mut answers: Vec<i64> = got.iter().filter_map(answered).collect();
        answers.sort_unstable();
        let mut expected = ids.clone();
        expected.extend(list);
        expected.sort_unstable();
        prop_assert_eq!(&answers, &expected, "each awaited request answered exactly once");

        for (wire, msg) in lines.iter().zip(&got) {
            let v = serde_json::to_value(msg).unwrap();
            let line = wire.line();
            let typed = serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&line);
            match wire {
                Wire::Reply { id, text } => {
                    prop_assert_eq!(answered(msg), Some(*id), "{}", v);
                    prop_assert_eq!(&v["result"]["content"][0]["text"], &json!(text));
                    // The raw path's result is the typed parse's.
                    let typed = serde_json::to_value(typed.unwrap()).unwrap();
                    prop_assert_eq!(&v["result"]["content"], &typed["result"]["content"]);
                    prop_assert_eq!(&v["id"], &typed["id"]);
                }
                Wire::Both { id } => {
                    prop_assert!(typed.is_err(), "rmcp reads neither: {:?}", typed);
                    prop_assert!(matches!(msg, JsonRpcMessage::Error(_)), "{}", v);
                    prop_assert_eq!(answered(msg), Some(*id));
                    prop_assert_eq!(&v["error"]["code"], &json!(UNREADABLE_REPLY_CODE));
                }
                Wire::Page { id, tools } => {
                    prop_assert_eq!(answered(msg), Some(*id), "{}", v);
                    // rmcp gets the page with no tools; the fetch takes
                    // them raw, once.
                    let mut typed = serde_json::to_value(typed.unwrap()).unwrap();
                    typed["result"]["tools"] = json!([]);
                    prop_assert_eq!(&v["result"]["tools"], &json!([]));
                    prop_assert_eq!(&v["id"], &typed["id"]);
                    prop_assert_eq!(diag.take_tools_page(&id.to_string()), Some(tools.clone()));
                }
                Wire::StringPage { id, .. } => {
                    prop_assert_eq!(answered(msg), None, "{}", v);
                    let typed = serde_json::to_value(typed.unwrap()).unwrap();
                    prop_assert_eq!(&v, &typed);
                    prop_assert_eq!(diag.take_tools_page(&json!(id.to_string()).to_string()), None);
                }
                Wire::StringId { .. } | Wire::Request { .. } => {
                    // Read exactly as rmcp reads it, and never a call's answer.
                    prop_assert_eq!(answered(msg), None, "{}", v);
                    let typed = serde_json::to_value(typed.unwrap()).unwrap();
                    prop_assert_eq!(&v, &typed);
                }
            }
        }
    }
}

#[tokio::test]
async fn a_reply_with_two_id_keys_ends_the_call_of_the_first_as_unreadable_and_not_the_second() {
    // CALL-4: `{"id":1,"id":2,…}` is no message rmcp reads (nor the
    // fast path: a duplicate field); the transport's scan takes the
    // FIRST id, so call 1 ends
    // at once with the parser's reason, and call 2 is still awaited
    // (serde_json's Value would have kept the last).
    let (client_out, mut server_out) = tokio::io::duplex(1 << 16);
    let (client_in, _server_in) = tokio::io::duplex(64);
    let mut t = StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
    for id in [1, 2] {
        t.note_sent(&ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "echo",
            ))),
            NumberOrString::Number(id),
        ));
    }
    let line =
        r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"content":[{"type":"text","text":"x"}]}}"#;
    server_out.write_all(line.as_bytes()).await.unwrap();
    server_out.write_all(b"\n").await.unwrap();
    drop(server_out);
    let msg = t.receive().await.unwrap();
    assert_eq!(
        serde_json::to_value(&msg).unwrap(),
        json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": UNREADABLE_REPLY_CODE,
            "message": "the server's reply cannot be read: unrecognized JSON-RPC message",
        }})
    );
    assert!(t.receive().await.is_none());
    assert_eq!(
        t.calls_pending,
        [NumberOrString::Number(2)].into_iter().collect()
    );
}
