use super::*;

#[test]
fn the_missing_binary_search_list_names_each_directory_once() {
    let err = resolve_executable(
        "no-such-binary-xyz",
        Some("/usr/local/bin:/bin:/usr/local/bin:/bin"),
        None,
    )
    .unwrap_err()
    .to_string();
    let searched: Vec<&str> = err
        .split("searched: ")
        .nth(1)
        .unwrap()
        .split(", ")
        .collect();
    assert_eq!(searched, ["/usr/local/bin", "/bin"], "{err}");
}

#[test]
fn stderr_ring_keeps_only_the_tail() {
    // CONN-7
    let d = Diagnostics::default();
    d.push_stderr(&vec![b'a'; STDERR_TAIL_BYTES]);
    d.push_stderr(b"LAST WORDS");
    let tail = d.stderr_tail();
    assert_eq!(tail.len(), STDERR_TAIL_BYTES);
    assert!(tail.ends_with("LAST WORDS"));
}

#[test]
fn environment_is_scrubbed_to_the_allowlist_plus_explicit_values() {
    // CONN-5
    let cfg = StdioConfig {
        command: "x".into(),
        args: vec![],
        env: [("FOO".to_owned(), "bar".to_owned())].into(),
        env_passthrough: vec!["EXTRA".into()],
        env_secrets: Default::default(),
        cwd: None,
    };
    let env = child_environment(&cfg, |n| match n {
        "PATH" => Some("/bin".into()),
        "EXTRA" => Some("1".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("nope".into()),
        _ => None,
    });
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, vec!["EXTRA", "FOO", "NO_COLOR", "PATH"]);
}

#[test]
fn missing_executable_error_names_what_was_searched() {
    // CONN-5
    let err = resolve_executable(
        "no-such-binary-xyz",
        Some("/nope1:/nope2"),
        Some(Path::new("/h")),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no-such-binary-xyz"), "{err}");
    assert!(
        err.contains("/nope1, /nope2, /usr/local/bin, /h/.local/bin, /h/.cargo/bin"),
        "{err}"
    );
}

#[test]
fn the_sse_tap_keeps_each_page_raw_by_its_id() {
    // SYNC-7 over HTTP: rmcp's typed Tool drops execution.taskSupport;
    // the page kept raw has it. Each fetch takes only its own page,
    // once: nothing accumulates.
    let d = Diagnostics::default();
    d.tap_tools_page(
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","execution":{"taskSupport":"required"}}]}}"#,
        );
    d.tap_tools_page(br#"{"jsonrpc":"2.0","id":"x","result":{"tools":[{"name":"c"}]}}"#);
    d.tap_tools_page(br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#);
    let page = d.take_tools_page("1").expect("page 1");
    assert_eq!(page[0]["execution"]["taskSupport"], "required");
    assert!(d.take_tools_page("1").is_none());
    assert_eq!(d.take_tools_page("\"x\"").expect("page x")[0]["name"], "c");
    assert!(
        d.take_tools_page("2").is_none(),
        "no tools array, nothing kept"
    );
}

/// A reply line as a server writes it.
fn reply_line(id: u64, text_bytes: usize) -> Vec<u8> {
    let reply = serde_json::json!({
        "jsonrpc": "2.0", "id": id,
        "result": {"content": [{"type": "text", "text": "x".repeat(text_bytes)}]}
    });
    format!("{reply}\n").into_bytes()
}

#[tokio::test]
async fn a_tools_call_reply_is_read_once_as_raw_json_and_only_an_awaited_one() {
    // PERF-1 / CALL-3: the reply to a tools/call the transport sent
    // reaches rmcp as a CustomResult holding the result exactly as the
    // server wrote it (a field rmcp's typed result would drop is kept).
    // Everything else is read as usual: a reply to an id never sent, a
    // request from the server reusing an awaited id, a result that is
    // not a plain CallToolResult, and the reply to a cancelled call.
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
        ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, NumberOrString,
        ServerResult,
    };
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let mut t = StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
    for id in [1, 2, 3, 4, 5] {
        let call = ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "echo",
            ))),
            NumberOrString::Number(id),
        );
        t.send(call).await.unwrap();
    }
    let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
        CancelledNotification::new(CancelledNotificationParam::new(
            Some(NumberOrString::Number(4)),
            None,
        )),
    ));
    t.send(cancel).await.unwrap();
    let raw = serde_json::json!({"content": [{"type": "text", "text": "hi", "extra": 1}],
            "isError": false});
    let lines = [
        // A request from the server that reuses awaited id 1.
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": raw}),
        serde_json::json!({"jsonrpc": "2.0", "id": 9, "result": raw}),
        // Not a plain CallToolResult: rmcp types it as before.
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "result": {"isError": true}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 3,
                "result": {"content": [], "resultType": "input_required"}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 4, "result": raw}),
        // An error reply answers awaited id 5.
        serde_json::json!({"jsonrpc": "2.0", "id": 5,
                "error": {"code": -32602, "message": "no such tool"}}),
    ];
    for line in &lines {
        server_out
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for _ in &lines {
        got.push(t.receive().await.unwrap());
    }
    let result = |m: &RxJsonRpcMessage<RoleClient>| match m {
        JsonRpcMessage::Response(r) => r.result.clone(),
        other => panic!("a response: {other:?}"),
    };
    let ServerResult::CustomResult(c) = result(&got[1]) else {
        panic!("the awaited reply, raw: {:?}", got[1]);
    };
    assert_eq!(c.0, raw, "as the server wrote it");
    // The others exactly as rmcp reads them.
    for (at, what) in [
        (0, "a request"),
        (2, "never sent"),
        (3, "no content"),
        (4, "another resultType"),
        (5, "cancelled"),
        (6, "an error reply"),
    ] {
        let usual: RxJsonRpcMessage<RoleClient> =
            serde_json::from_value(lines[at].clone()).unwrap();
        assert_eq!(
            format!("{:?}", got[at]),
            format!("{usual:?}"),
            "{what}: read as usual"
        );
    }
    assert!(
        matches!(result(&got[5]), ServerResult::CallToolResult(_)),
        "{:?}",
        got[5]
    );
    assert!(t.calls_pending.is_empty(), "{:?}", t.calls_pending);
}

#[tokio::test]
async fn a_tools_list_reply_is_read_once_as_raw_json_and_rmcp_gets_an_empty_page() {
    // PERF-1 / SYNC-3, SYNC-7: the transport keeps the raw entries of
    // the reply to a tools/list request it sent (taskSupport and a
    // malformed entry included, for build_catalog to judge); rmcp's
    // typed page is empty but keeps nextCursor. A reply to any other
    // request is read as usual, "tools" key or not.
    use rmcp::model::{
        ClientJsonRpcMessage, ClientRequest, ListToolsRequest, NumberOrString, ServerResult,
    };
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    let list = ClientJsonRpcMessage::request(
        ClientRequest::ListToolsRequest(ListToolsRequest::default()),
        NumberOrString::Number(7),
    );
    t.send(list).await.unwrap();
    let tools = serde_json::json!([
        {"name": "a", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
        {"name": 3},
    ]);
    for (id, tools) in [(8, tools.clone()), (7, tools.clone())] {
        let reply = serde_json::json!({"jsonrpc": "2.0", "id": id,
                "result": {"tools": tools, "nextCursor": "p2"}});
        server_out
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .unwrap();
    }
    // Id 8 was never asked for: rmcp reads it whole (a malformed entry
    // makes it a CustomResult), and nothing is kept.
    let other = serde_json::to_value(t.receive().await.unwrap()).unwrap();
    assert_eq!(other["result"]["tools"], tools, "{other}");
    assert!(diag.take_tools_page("8").is_none());
    let msg = t.receive().await.unwrap();
    let rmcp::model::JsonRpcMessage::Response(r) = msg else {
        panic!("a response: {msg:?}");
    };
    let ServerResult::ListToolsResult(page) = r.result else {
        panic!("a typed page: {:?}", r.result);
    };
    assert!(page.tools.is_empty());
    assert_eq!(page.next_cursor.as_deref(), Some("p2"));
    assert_eq!(
        diag.take_tools_page("7"),
        Some(tools.as_array().unwrap().clone())
    );
    assert!(diag.take_tools_page("7").is_none(), "taken once");
    assert!(!diag.tools_awaited(), "the request was answered");
}

#[tokio::test]
async fn a_reply_split_across_reads_survives_receive_futures_dropped_in_between() {
    // CONN-6: rmcp drops a pending receive() whenever
    // another event wins its loop; the part of the line read so far must
    // stay. Each chunk is written, then one receive() is polled until it
    // has nothing more to read and dropped, as rmcp's select would.
    use futures::FutureExt;
    use rmcp::transport::Transport;
    for chunk in [1usize, 2, 3, 7, 64, 4096, 65_537, 300_000] {
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let mut bytes = reply_line(1, 200_000);
        bytes.extend(reply_line(2, 10));
        let mut got = Vec::new();
        for piece in bytes.chunks(chunk) {
            server_out.write_all(piece).await.unwrap();
            while let Some(msg) = t.receive().now_or_never() {
                got.push(msg.expect("a message, not the end"));
            }
        }
        let ids: Vec<String> = got
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["id"].to_string())
            .collect();
        assert_eq!(ids, vec!["1", "2"], "chunks of {chunk} bytes");
        assert_eq!(diag.non_json().0, 0, "nothing counted as non-JSON");
    }
}

#[tokio::test(start_paused = true)]
async fn a_quiet_connection_gives_its_read_buffer_back_and_a_partial_line_is_kept() {
    // PERF-1 (memory per idle connection): stdout is read straight into
    // the line buffer; a large reply grows it, and once the connection
    // has been quiet for IDLE_SHRINK_AFTER with nothing partial held,
    // the buffer is given back. A partial line is never dropped by it.
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    server_out.write_all(&reply_line(1, 200_000)).await.unwrap();
    assert!(t.receive().await.is_some());
    assert!(t.line.capacity() > 200_000, "the buffer grew for the reply");
    // Half of the next reply, then quiet for longer than the shrink delay.
    let next = reply_line(2, 50_000);
    let (head, tail) = next.split_at(next.len() / 2);
    server_out.write_all(head).await.unwrap();
    let waited = tokio::time::timeout(IDLE_SHRINK_AFTER * 3, t.receive()).await;
    assert!(waited.is_err(), "no whole line yet");
    assert!(t.line.capacity() >= head.len(), "the partial line is kept");
    server_out.write_all(tail).await.unwrap();
    let msg = t.receive().await.expect("the second reply, whole");
    assert_eq!(serde_json::to_value(&msg).unwrap()["id"], 2);
    // Now quiet with nothing partial: the buffer goes back.
    let waited = tokio::time::timeout(IDLE_SHRINK_AFTER * 2, t.receive()).await;
    assert!(waited.is_err(), "nothing more was sent");
    assert!(
        t.line.capacity() <= IDLE_KEEP,
        "an idle connection holds {} bytes",
        t.line.capacity()
    );
    // And it still reads what comes next.
    server_out.write_all(&reply_line(3, 10)).await.unwrap();
    let msg = t.receive().await.expect("the third reply");
    assert_eq!(serde_json::to_value(&msg).unwrap()["id"], 3);
}

#[tokio::test]
async fn the_line_guard_counts_across_dropped_receive_futures() {
    // CONN-6: the 8 MiB guard holds for a line read in pieces too.
    use futures::FutureExt;
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    let piece = vec![b'x'; 512 * 1024];
    let mut ended = false;
    for _ in 0..(MAX_LINE_BYTES / piece.len() + 2) {
        server_out.write_all(&piece).await.unwrap();
        if let Some(end) = t.receive().now_or_never() {
            assert!(end.is_none(), "an over-long line ends the transport");
            ended = true;
            break;
        }
    }
    assert!(ended, "the guard fired");
    assert!(
        diag.fatal()
            .unwrap_or_default()
            .contains("longer than 8 MiB")
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_stops_reading_stdin_makes_the_transport_dead_after_the_deadline() {
    // CALL-4, CONN-14: a write blocked past the
    // deadline fails, and the transport ends so that reconnecting takes over.
    use rmcp::transport::Transport;
    let (client_out, _server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in_never_read) = tokio::io::duplex(64);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    let big = rmcp::model::ClientJsonRpcMessage::notification(
        rmcp::model::ClientNotification::CancelledNotification(
            rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
                Some(rmcp::model::NumberOrString::Number(1)),
                Some("y".repeat(100_000)),
            )),
        ),
    );
    let started = tokio::time::Instant::now();
    let sent = t.send(big).await;
    assert_eq!(sent.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(started.elapsed(), WRITE_STALL_DEADLINE);
    assert!(t.receive().await.is_none(), "the transport is dead");
    assert!(
        diag.fatal()
            .unwrap_or_default()
            .contains("stopped reading its stdin")
    );
}

#[tokio::test]
async fn a_reply_nested_past_the_parse_limit_becomes_an_error_for_its_call() {
    // CALL-4: not a skipped line, so the call does
    // not wait its whole timeout.
    use futures::FutureExt;
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"result\":{{\"structuredContent\":{{\"a\":{deep}}},\"content\":[]}},\"id\":7}}\n"
    );
    server_out.write_all(line.as_bytes()).await.unwrap();
    let msg = t.receive().now_or_never().flatten().expect("a message");
    let v = serde_json::to_value(&msg).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["error"]["code"], UNREADABLE_REPLY_CODE);
    assert_eq!(
        v["error"]["message"],
        "the server's reply cannot be read: it is nested more than 128 levels deep"
    );
    assert_eq!(diag.non_json().0, 0);
    assert_eq!(
        top_level_id(br#"{"a":{"id":1},"id":"x\"y"}"#),
        Some(serde_json::json!("x\"y"))
    );
    assert_eq!(top_level_id(br#"{"method":"n"}"#), None);
}

#[test]
fn lone_surrogate_escapes_become_the_replacement_character_and_pairs_stay() {
    // CALL-4: read leniently, as JS and Python do.
    let fixed =
        |s: &str| replace_lone_surrogates(s.as_bytes()).map(|b| String::from_utf8(b).unwrap());
    assert_eq!(
        fixed(r#"{"t":"a\ud83d"}"#).as_deref(),
        Some(r#"{"t":"a\uFFFD"}"#)
    );
    assert_eq!(
        fixed(r#"{"t":"\udc00x\ud800\u0041"}"#).as_deref(),
        Some(r#"{"t":"\uFFFDx\uFFFD\u0041"}"#)
    );
    assert_eq!(
        fixed(r#"{"t":"\ud83d\ude00 and \\ud800"}"#),
        None,
        "a pair, and an escaped backslash"
    );
    assert_eq!(
        fixed(r#"{"t":"\ud83d\ud83d\ude00"}"#).as_deref(),
        Some(r#"{"t":"\uFFFD\ud83d\ude00"}"#)
    );
    let v: serde_json::Value =
        serde_json::from_str(&fixed(r#"{"t":"cut \ud83d"}"#).unwrap()).unwrap();
    assert_eq!(v["t"], "cut \u{fffd}");
}

#[tokio::test]
async fn a_reply_that_cannot_be_read_answers_its_id_and_a_server_request_stays_noise() {
    // CALL-4: invalid UTF-8 and result+error end
    // the call at once with the parser's reason; a broken line that is
    // the server's own request (a `method`) has an id of the server's
    // id space and must never end a call of ours.
    use futures::FutureExt;
    use rmcp::transport::Transport;
    let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
    let (client_in, _server_in) = tokio::io::duplex(1 << 20);
    let diag = Arc::new(Diagnostics::default());
    let mut t = StdioTransport::new(client_in, client_out, diag.clone());
    let mut lines: Vec<Vec<u8>> = vec![
        br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"x":"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":4,"result":{"content":[]},"error":{"code":1,"message":"m"}}"#
            .to_vec(),
    ];
    let mut bad =
        br#"{"jsonrpc":"2.0","id":"s","result":{"content":[{"type":"text","text":""#.to_vec();
    bad.extend_from_slice(b"\xff\"}]}}");
    lines.push(bad);
    for l in &lines {
        server_out.write_all(l).await.unwrap();
        server_out.write_all(b"\n").await.unwrap();
    }
    for want in [serde_json::json!(4), serde_json::json!("s")] {
        let msg = t.receive().now_or_never().flatten().expect("a message");
        let v = serde_json::to_value(&msg).unwrap();
        assert_eq!(v["id"], want, "{v}");
        assert_eq!(v["error"]["code"], UNREADABLE_REPLY_CODE);
        let why = v["error"]["message"].as_str().unwrap();
        assert!(
            why.starts_with("the server's reply cannot be read: "),
            "{why}"
        );
    }
    assert_eq!(diag.non_json().0, 1, "the broken request is noise");
    assert!(top_level_key(br#"{"id":1,"method":"x"}"#, "method"));
    assert!(!top_level_key(
        br#"{"id":1,"result":{"method":"x"}}"#,
        "method"
    ));
}

#[test]
fn a_top_level_id_key_written_with_escapes_is_still_the_id() {
    // CALL-4: found by the property test
    // `top_level_id_is_the_id_serde_json_reads_and_nothing_nested`; the
    // minimal input was `{"\u0069\u0064":0}`. A too-deep reply with such
    // a key got no error reply, and its call waited its whole timeout.
    assert_eq!(
        top_level_id(br#"{"\u0069\u0064":0}"#),
        Some(serde_json::json!(0))
    );
    assert_eq!(
        top_level_id(br#"{"a":{"i\u0064":1},"\u0069d":"x"}"#),
        Some(serde_json::json!("x"))
    );
    assert_eq!(top_level_id(br#"{"i\u0064x":1}"#), None);
}
