//! Entry points of the fuzz targets (feature `fuzzing`, see
//! `runtime::fuzzing`): a server's stdout, as bytes, through the line
//! reader and its scanners, and through the `tools/call` fast path. A
//! failed `assert!` here is the fuzzer's crash signal: an invariant the
//! transport relies on did not hold.

use super::*;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ListToolsRequest,
    NumberOrString,
};

/// The ids the fuzzed transport awaits: `tools/call` requests 0 to 7
/// and `"a"`, and a `tools/list` request 8 (the fast paths only look
/// at replies to requests that were sent).
fn awaited() -> Vec<ClientJsonRpcMessage> {
    let call = |id| {
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t"))),
            id,
        )
    };
    let mut sent: Vec<ClientJsonRpcMessage> =
        (0..8).map(|i| call(NumberOrString::Number(i))).collect();
    sent.push(call(NumberOrString::String("a".into())));
    sent.push(ClientJsonRpcMessage::request(
        ClientRequest::ListToolsRequest(ListToolsRequest::default()),
        NumberOrString::Number(8),
    ));
    sent
}

/// `data` as a server's whole stdout: every message the transport
/// hands out, then each line through the scanners the transport uses
/// on a line it cannot parse.
pub(crate) fn stdout(data: &[u8]) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async {
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(data.len() + 1);
        let (client_in, _server_in) = tokio::io::duplex(64);
        let mut t = StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
        for item in awaited() {
            t.note_sent(&item);
        }
        // Room for all of it: the write never waits for the reader.
        if server_out.write_all(data).await.is_err() {
            return;
        }
        drop(server_out);
        let lines = data.split(|b| *b == b'\n').count();
        let mut handed = 0;
        while let Some(msg) = t.receive().await {
            handed += 1;
            assert!(handed <= lines, "more messages than lines");
            assert!(
                serde_json::to_vec(&msg).is_ok(),
                "a message that cannot be written back"
            );
        }
    });
    for line in data.split(|b| *b == b'\n').map(trim_cr) {
        let id = top_level_id(line);
        assert!(
            id.as_ref().is_none_or(|v| v.is_number() || v.is_string()),
            "an id that is neither a number nor a string: {id:?}"
        );
        if let Some(fixed) = replace_lone_surrogates(line) {
            assert_eq!(
                replace_lone_surrogates(&fixed),
                None,
                "a lone surrogate left after replacing them"
            );
        }
        if let Some((msg, reply_id)) = unreadable_reply(line, "why") {
            assert_eq!(Some(&reply_id), id.as_ref(), "the error answers another id");
            assert!(
                matches!(msg, rmcp::model::JsonRpcMessage::Error(_)),
                "an unreadable reply that is not an error"
            );
        }
    }
}

/// `data` as one line through the `tools/call` fast path, with calls
/// awaited: a reply it hands out answers an awaited call, which is
/// awaited no more; it drops at most that one id otherwise.
pub(crate) fn call_reply(data: &[u8]) {
    let mut pending: std::collections::HashSet<rmcp::model::RequestId> = awaited()
        .iter()
        .filter_map(|m| match m {
            rmcp::model::JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::CallToolRequest(_)) =>
            {
                Some(r.id.clone())
            }
            _ => None,
        })
        .collect();
    let before = pending.clone();
    match super::call_reply(&mut pending, data) {
        Some(rmcp::model::JsonRpcMessage::Response(r)) => {
            assert!(
                before.contains(&r.id),
                "a reply to a call never sent: {:?}",
                r.id
            );
            assert!(
                !pending.contains(&r.id),
                "a call answered and still awaited"
            );
            assert_eq!(
                pending.len() + 1,
                before.len(),
                "more than its own call dropped"
            );
        }
        Some(other) => panic!("the fast path handed out a non-response: {other:?}"),
        None => assert!(
            pending.len() + 1 >= before.len(),
            "calls dropped unanswered"
        ),
    }
}
