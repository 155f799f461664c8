//! Property tests of the stdout line reader and of the scanning parsers
//! that classify a line.

use super::*;
use crate::messages::budget::floor_char_boundary;
use crate::messages::prop_gen::{config, json_number, json_value, key, tricky_text};
use futures::FutureExt;
use proptest::prelude::*;
use rmcp::transport::Transport;
use serde_json::{Value, json};

// ===== What a server writes =====

/// One stdout line as a server writes it.
#[derive(Debug, Clone)]
enum Line {
    /// A reply the transport must hand out once, in order.
    Reply {
        id: Value,
        text: String,
        crlf: bool,
        lead: &'static str,
    },
    /// A reply nested past serde_json's limit: handed out as an error
    /// reply to the same id (CALL-4).
    Deep { id: Value, depth: usize, crlf: bool },
    /// A banner or stray log line: skipped and counted (CONN-6).
    NonJson { bytes: Vec<u8>, crlf: bool },
    /// Whitespace only: skipped, not counted.
    Blank(&'static str),
}

impl Line {
    fn bytes(&self) -> Vec<u8> {
        let end: &[u8] = match self {
            Line::Reply { crlf: true, .. }
            | Line::Deep { crlf: true, .. }
            | Line::NonJson { crlf: true, .. } => b"\r\n",
            _ => b"\n",
        };
        let mut out = match self {
                Line::Reply { id, text, lead, .. } => {
                    let reply = json!({
                        "jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": text}]}
                    });
                    format!("{lead}{reply}{lead}").into_bytes()
                }
                Line::Deep { id, depth, .. } => format!(
                    "{{\"jsonrpc\":\"2.0\",\"result\":{{\"structuredContent\":{{\"a\":{}{}}},\"content\":[]}},\"id\":{id}}}",
                    "[".repeat(*depth),
                    "]".repeat(*depth)
                )
                .into_bytes(),
                Line::NonJson { bytes, .. } => bytes.clone(),
                Line::Blank(ws) => ws.as_bytes().to_vec(),
            };
        out.extend_from_slice(end);
        out
    }

    /// What the transport hands out for this line: the id and the text
    /// (a reply) or the error code (a nested reply).
    fn expected(&self) -> Option<(Value, Value)> {
        match self {
            Line::Reply { id, text, .. } => Some((id.clone(), json!(text))),
            Line::Deep { id, .. } => Some((id.clone(), json!(UNREADABLE_REPLY_CODE))),
            _ => None,
        }
    }
}

/// A JSON-RPC id: an integer rmcp keeps, or any string.
fn rpc_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        (0i64..100).prop_map(Value::from),
        tricky_text().prop_map(Value::String),
    ]
}

/// Reply text of random size: a short piece of multi-byte text repeated,
/// sometimes past the reader's 64 KiB buffer.
fn reply_text() -> impl Strategy<Value = String> {
    let repeats = prop_oneof![
        6 => 0usize..20,
        3 => 20usize..2_000,
        1 => 2_000usize..12_000,
    ];
    ("[a-zé漢😀\"\\\\\n\t {}]{1,8}", repeats).prop_map(|(unit, n)| unit.repeat(n))
}

fn line() -> impl Strategy<Value = Line> {
    let non_json_start = prop::sample::select(vec![
        &b"Starting server on stdio"[..],
        b"[info] ",
        b"WARN: ",
        b"> ",
        b"#",
        b"{not json",
        b"\xff\xfe",
        b"npm notice ",
    ]);
    let non_json_rest = prop::collection::vec(
        any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
        0..300,
    );
    prop_oneof![
        6 => (rpc_id(), reply_text(), any::<bool>(), prop::sample::select(vec!["", " ", "\t", " \t "]))
            .prop_map(|(id, text, crlf, lead)| Line::Reply { id, text, crlf, lead }),
        1 => (rpc_id(), 129usize..400, any::<bool>())
            .prop_map(|(id, depth, crlf)| Line::Deep { id, depth, crlf }),
        3 => (non_json_start, non_json_rest, any::<bool>()).prop_map(|(start, rest, crlf)| {
            let mut bytes = start.to_vec();
            bytes.extend(rest);
            Line::NonJson { bytes, crlf }
        }),
        1 => prop::sample::select(vec!["", " ", "\t", "\r", " \r", "\x0c  "]).prop_map(Line::Blank),
    ]
}

// ===== How it arrives =====

/// What happens between two writes: rmcp polls `receive()` and drops it
/// whenever another event wins its select.
#[derive(Debug, Clone, Copy)]
enum Polls {
    /// No receive() at all.
    None,
    /// This many receive() futures, each polled once and dropped.
    Once(u8),
    /// receive() futures polled until one is pending, which is dropped.
    UntilPending,
}

/// A write of this many bytes, then the polls.
type Step = (usize, Polls);

fn schedule() -> impl Strategy<Value = Vec<Step>> {
    let len = prop_oneof![1usize..8, 8usize..300, 300usize..70_000];
    let polls = prop_oneof![
        Just(Polls::None),
        (1u8..4).prop_map(Polls::Once),
        Just(Polls::UntilPending),
    ];
    prop::collection::vec((len, polls), 1..12)
}

/// Write `bytes` through a duplex pipe as `steps` say (cycled), then
/// close it and receive what is left. Returns the messages as (id,
/// text or error code), and the connection's diagnostics.
fn run(bytes: &[u8], steps: &[Step]) -> (Vec<(Value, Value)>, Arc<Diagnostics>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let diag = Arc::new(Diagnostics::default());
    let got = rt.block_on(async {
        // Room for everything: a write never waits for the reader.
        let (client_out, mut server_out) = tokio::io::duplex(bytes.len() + 1);
        let (client_in, _server_in) = tokio::io::duplex(64);
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let mut got = Vec::new();
        let mut rest = bytes;
        for &(len, polls) in steps.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let n = len.min(rest.len());
            server_out.write_all(&rest[..n]).await.unwrap();
            rest = &rest[n..];
            let mut poll = |got: &mut Vec<_>| match t.receive().now_or_never() {
                Some(Some(msg)) => {
                    got.push(msg);
                    true
                }
                Some(None) => panic!("the transport ended before its input did"),
                None => false,
            };
            match polls {
                Polls::None => {}
                Polls::Once(k) => {
                    for _ in 0..k {
                        poll(&mut got);
                    }
                }
                Polls::UntilPending => while poll(&mut got) {},
            }
        }
        drop(server_out);
        while let Some(msg) = t.receive().await {
            got.push(msg);
        }
        got
    });
    let got = got
        .iter()
        .map(|m| {
            let v = serde_json::to_value(m).unwrap();
            let body = match v.pointer("/result/content/0/text") {
                Some(text) => text.clone(),
                None => v["error"]["code"].clone(),
            };
            (v["id"].clone(), body)
        })
        .collect();
    (got, diag)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn conn6_every_reply_comes_out_once_in_order_whatever_the_chunking_and_dropped_receives(
        lines in prop::collection::vec(line(), 0..12),
        steps in schedule(),
    ) {
        // CONN-6, CALL-4: a reply split
        // across reads survives receive() futures dropped in between; no
        // message is lost, duplicated or reordered; non-JSON lines are
        // skipped and counted, blank ones skipped.
        let bytes: Vec<u8> = lines.iter().flat_map(Line::bytes).collect();
        let expected: Vec<(Value, Value)> = lines.iter().filter_map(Line::expected).collect();
        let (got, diag) = run(&bytes, &steps);
        prop_assert_eq!(&got, &expected);
        let (whole, _) = run(&bytes, &[(usize::MAX, Polls::UntilPending)]);
        prop_assert_eq!(&got, &whole, "the same messages whatever the chunking");

        let non_json: Vec<&Vec<u8>> = lines
            .iter()
            .filter_map(|l| match l {
                Line::NonJson { bytes, .. } => Some(bytes),
                _ => None,
            })
            .collect();
        let (count, first) = diag.non_json();
        prop_assert_eq!(count, non_json.len() as u64);
        // The first one's start is kept (CONN-6), cut on a char boundary.
        let first_expected = non_json.first().map(|b| {
            let whole = String::from_utf8_lossy(trim_cr(b)).into_owned();
            whole[..floor_char_boundary(&whole, 200)].trim().to_owned()
        });
        prop_assert_eq!(first, first_expected);
        prop_assert_eq!(diag.fatal(), None);
    }
}

// ===== Line classification =====

/// Whitespace JSON allows between tokens.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\t", "\r\n", "  \n "])
}

/// The text of a key: as serde_json writes it, or with `\u` escapes.
fn key_text(key: &str, escaped: bool) -> String {
    if escaped {
        let mut out = String::from("\"");
        for unit in key.encode_utf16() {
            out.push_str(&format!("\\u{unit:04x}"));
        }
        out.push('"');
        out
    } else {
        serde_json::to_string(key).unwrap()
    }
}

/// A JSON object written by hand, so that members keep their order and
/// whitespace varies: `members` (key, value's JSON text, key escaped) in
/// order, with `id` (if any) at `at`.
fn object_text(
    members: &[(String, String, bool)],
    id: Option<&(Value, bool)>,
    at: usize,
    spaces: &[&str],
) -> String {
    let mut all: Vec<(String, String)> = members
        .iter()
        .map(|(k, v, escaped)| (key_text(k, *escaped), v.clone()))
        .collect();
    if let Some((id, escaped)) = id {
        all.insert(
            at.min(all.len()),
            (key_text("id", *escaped), id.to_string()),
        );
    }
    let mut sp = spaces.iter().cycle();
    let mut s = || *sp.next().unwrap();
    let mut out = format!("{}{{", s());
    for (i, (k, v)) in all.iter().enumerate() {
        if i > 0 {
            out.push_str(&format!("{},", s()));
        }
        out.push_str(&format!("{}{k}{}:{}{v}", s(), s(), s()));
    }
    out.push_str(&format!("{}}}{}", s(), s()));
    out
}

/// Object members other than `id`: (key, value's JSON text, key escaped).
fn members(n: usize) -> impl Strategy<Value = Vec<(String, String, bool)>> {
    prop::collection::vec(
        (
            key(),
            json_value(),
            prop::bool::weighted(0.1),
            any::<bool>(),
        ),
        0..n,
    )
    .prop_map(|members| {
        members
            .into_iter()
            .filter(|(k, ..)| k != "id")
            .map(|(k, v, escaped, pretty)| {
                let text = if pretty {
                    serde_json::to_string_pretty(&v).unwrap()
                } else {
                    v.to_string()
                };
                (k, text, escaped)
            })
            .collect()
    })
}

/// JSON-looking bytes: tokens that make the scanners work.
fn jsonish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        &b"{"[..],
        b"}",
        b"[",
        b"]",
        b"\"",
        b"\\",
        b"\\\"",
        b"id",
        b"\"id\"",
        b":",
        b",",
        b" ",
        b"1",
        b"-",
        b"e",
        b".",
        b"\xff",
        b"\"x\"",
    ]);
    prop_oneof![
        prop::collection::vec(token, 0..40).prop_map(|t| t.concat()),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn line_scanners_never_panic_on_arbitrary_bytes(bytes in jsonish_bytes(), start in 0usize..64) {
        let id = top_level_id(&bytes);
        prop_assert!(id.as_ref().is_none_or(|v| v.is_number() || v.is_string()));
        let _ = unreadable_reply(&bytes, "why");
        let _ = replace_lone_surrogates(&bytes);
        let start = start.min(bytes.len());
        if let Some(end) = string_end(&bytes, start) {
            prop_assert!(end >= start && bytes[end] == b'"');
        }
    }

    #[test]
    fn top_level_id_is_the_id_serde_json_reads_and_nothing_nested(
        members in members(6),
        id in prop::option::weighted(0.8, (prop_oneof![json_number(), tricky_text().prop_map(Value::String)], prop::bool::weighted(0.1))),
        at in 0usize..8,
        spaces in prop::collection::vec(ws(), 1..8),
    ) {
        // CALL-4: the id of a reply too deep to parse is found by
        // scanning; it must be the id a parser reads, never one nested
        // in a value or spelled inside a string.
        let text = object_text(&members, id.as_ref(), at, &spaces);
        let parsed: Value = serde_json::from_str(&text).unwrap();
        let expected = parsed.get("id").filter(|v| v.is_number() || v.is_string()).cloned();
        // (serde_json reads floats back only nearly exactly: compare
        // with what it parses, not with what was generated.)
        prop_assert_eq!(expected.is_some(), id.is_some());
        prop_assert_eq!(top_level_id(text.as_bytes()), expected);
    }

    #[test]
    fn a_reply_too_deep_to_parse_becomes_an_error_for_its_own_id(
        id in rpc_id(),
        mut members in members(4),
        at in 0usize..6,
        depth in 129usize..300,
        spaces in prop::collection::vec(ws(), 1..4),
    ) {
        // CALL-4: whatever sits around it.
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let deep_at = at % (members.len() + 1);
        members.insert(deep_at, ("deep".to_owned(), deep, false));
        let text = object_text(&members, Some(&(id.clone(), false)), at, &spaces);
        let (msg, _) = unreadable_reply(text.as_bytes(), "why").expect("an error reply");
        let v = serde_json::to_value(&msg).unwrap();
        prop_assert_eq!(&v["id"], &id);
        prop_assert_eq!(&v["error"]["code"], &json!(UNREADABLE_REPLY_CODE));
    }
}
