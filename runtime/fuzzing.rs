//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`, off by
//! default; not API): each takes the fuzzer's bytes and runs one decoder
//! that reads outside input, as the runtime runs it. A panic, or a failed
//! `assert!` on an invariant the runtime relies on, is the fuzzer's crash
//! signal; an error returned by the decoder is not.
//!
//! | entry point | what reads the bytes |
//! |---|---|
//! | [`stdio_stdout`] | a stdio server's stdout: the line reader, `decode` (the `tools/list` and `tools/call` fast paths, rmcp's typed parse), `replace_lone_surrogates`, `unreadable_reply`, `top_level_id` |
//! | [`stdio_call_reply`] | one line through the `tools/call` reply fast path |
//! | [`model_openai`], [`model_anthropic`] | a model endpoint's SSE body through the stream decoder of each provider |
//! | [`import`] | `mcpvisor import`: `mcpServers` JSON (hooks included) or Codex TOML |
//! | [`hook_output`] | a hook's exit code, stdout and stderr, under both dialects |
//! | [`schema`] | a server's output schema (the subset check) and a value validated against it |

use futures::StreamExt;

use crate::messages::hooks::Dialect;
use crate::messages::hooks::codec::{RawRun, parse_outcome};
use crate::messages::hooks::config::HookEvent;
use crate::runtime::turn::model::{Decoder, Provider};

/// A stdio server's whole stdout (see [the table](self)).
pub fn stdio_stdout(data: &[u8]) {
    crate::transport::stdio::fuzz::stdout(data);
}

/// One stdout line through the `tools/call` reply fast path.
pub fn stdio_call_reply(data: &[u8]) {
    crate::transport::stdio::fuzz::call_reply(data);
}

/// An OpenAI-compatible endpoint's SSE body.
pub fn model_openai(data: &[u8]) {
    model(Provider::OpenAi, data);
}

/// An Anthropic endpoint's SSE body.
pub fn model_anthropic(data: &[u8]) {
    model(Provider::Anthropic, data);
}

/// An OpenAI Responses API endpoint's SSE body.
pub fn model_responses(data: &[u8]) {
    model(Provider::OpenAiResponses, data);
}

/// The body, after its first byte, as the turn reads it (`runtime::turn`):
/// SSE events into the decoder until it is done or fails, then the round.
/// The first byte says where the body is cut in two reads, so events
/// split across reads are met too.
fn model(provider: Provider, data: &[u8]) {
    let (cut, body) = match data.split_first() {
        Some((cut, body)) => (usize::from(*cut) % (body.len() + 1), body),
        None => (0, data),
    };
    let (head, tail) = body.split_at(cut);
    let reads = futures::stream::iter([head, tail].map(Ok::<&[u8], std::io::Error>));
    futures::executor::block_on(async {
        let mut events = std::pin::pin!(sse_stream::SseStream::from_bytes_stream(reads));
        let mut decoder = Decoder::new(provider);
        while let Some(event) = events.next().await {
            let Ok(event) = event else { return };
            let Some(data) = event.data.as_deref() else {
                continue;
            };
            if decoder.feed(event.event.as_deref(), data).is_err() {
                return;
            }
            if decoder.is_done() {
                break;
            }
        }
        let _ = decoder.finish();
    });
}

/// A file to import (as lossy UTF-8): whatever it converts to must be
/// TOML, whatever names and values the source holds.
pub fn import(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(got) =
        crate::import::import_file("fuzz.json", "/fuzz/.claude/settings.json", &text, None)
    {
        let parsed = toml::from_str::<toml::Table>(&got.toml);
        assert!(
            parsed.is_ok(),
            "the import wrote no TOML: {parsed:?}\n{}",
            got.toml
        );
    }
}

/// A hook's run: the first byte picks the dialect and the event, the
/// second the exit code; the rest (lossy UTF-8) is stdout, then stderr
/// after the first NUL. Every run yields at least one outcome.
pub fn hook_output(data: &[u8]) {
    let (pick, rest) = data.split_first().unwrap_or((&0, data));
    let (code, rest) = rest.split_first().unwrap_or((&0, rest));
    let dialect = if pick & 1 == 0 {
        Dialect::Claude
    } else {
        Dialect::Codex
    };
    let event = HookEvent::ALL[usize::from(pick >> 1) % HookEvent::ALL.len()];
    let exit_code = match code % 5 {
        0 => Some(0),
        1 => Some(2),
        2 => Some(1),
        3 => None,
        _ => Some(i32::from(*code) - 128),
    };
    let text = String::from_utf8_lossy(rest);
    let (stdout, stderr) = text.split_once('\0').unwrap_or((&text, ""));
    let run = RawRun {
        exit_code,
        stdout: stdout.to_owned(),
        stderr: stderr.to_owned(),
        ..RawRun::default()
    };
    let outcomes = parse_outcome(dialect, event, &run);
    assert!(!outcomes.is_empty(), "a run with no outcome");
    let _ = crate::messages::hooks::merge(&outcomes);
}

/// JSON: `[schema, value]`, or a schema alone (validated against itself).
/// The subset check and the validator, whatever the schema holds.
pub fn schema(data: &[u8]) {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let (schema, value) = match &json {
        serde_json::Value::Array(pair) => match pair.as_slice() {
            [schema, value, ..] => (schema, value),
            _ => return,
        },
        other => (other, other),
    };
    let serde_json::Value::Object(schema) = schema else {
        return;
    };
    let _ = crate::messages::schema::check_supported(schema);
    let _ = crate::messages::schema::validate(value, schema);
}
