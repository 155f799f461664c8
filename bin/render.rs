//! Output shaping shared by the commands: status lines and JSON, outcomes,
//! tool definitions.

use std::borrow::Cow;

use mcpvisor::{ServerState, ServerStatus, ToolDefinition};
use serde_json::{Value, json};

/// `text` made safe for a terminal, for human output: every control
/// character but newline and tab (C0, DEL, C1: escape sequences such as an
/// OSC 52 clipboard write, a carriage return that overwrites a line) and
/// every bidirectional override (text that reads other than it is) is
/// written as a visible escape, `\x1b` or `\u{202e}`. What servers and
/// models send reaches the screen this way; `--json` keeps the exact
/// strings (JSON escapes them itself).
pub(crate) fn term(text: &str) -> Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// `println!` for human output: the line goes through [`term`].
macro_rules! outln {
    ($($arg:tt)*) => {
        println!("{}", $crate::render::term(&format!($($arg)*)))
    };
}
pub(crate) use outln;

/// `eprintln!` for human output: the line goes through [`term`].
macro_rules! errln {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::render::term(&format!($($arg)*)))
    };
}
pub(crate) use errln;

/// One status as a line: server, state, tools, generation, protocol, pid.
pub(crate) fn status_line(s: &ServerStatus) -> String {
    let mut line = format!(
        "{:<16} {:<28} tools={:<4} gen={}",
        s.server,
        s.state.to_string(),
        s.tools,
        s.generation
    );
    if let Some(v) = &s.protocol_version {
        line.push_str(&format!(" protocol={v}"));
    }
    if let Some(p) = s.pid {
        line.push_str(&format!(" pid={p}"));
    }
    line
}

/// One status as JSON, with `attempt` while reconnecting.
pub(crate) fn status_json(s: &ServerStatus) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
    if let (Value::Object(m), ServerState::Reconnecting { attempt, .. }) = (&mut v, &s.state) {
        m.insert("attempt".into(), json!(attempt));
    }
    v
}

/// A call's outcome as `--json` prints it.
pub(crate) fn outcome_json(o: &mcpvisor::ToolOutcome) -> Value {
    json!({
        "outcome": o.kind.name(),
        "side_effects": o.side_effects.name(),
        "projection": o.projection,
        "canonical": o.canonical,
        "error": o.error,
        "server": o.server,
        "raw_name": o.raw_name,
        "generation": o.generation,
        "images": o.images,
        "cut_bytes": o.cut_bytes,
        "notes": o.notes,
        "stop": o.stop,
    })
}

/// One tool as `tools --json` prints it.
pub(crate) fn tool_json(t: &ToolDefinition) -> Value {
    let mut o = json!({
        "name": t.name, "server": t.server, "raw_name": t.raw_name, "generation": t.generation,
        "title": t.title, "description": t.description, "input_schema": &*t.input_schema,
        "task_support_required": t.task_support_required,
    });
    if let (Some(schema), Value::Object(m)) = (&t.output_schema, &mut o) {
        m.insert("output_schema".into(), Value::Object((**schema).clone()));
    }
    o
}

/// `text` with every line prefixed by `pad`.
pub(crate) fn indent(text: &str, pad: &str) -> String {
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_bidi_overrides_are_shown_not_obeyed() {
        // An OSC 52 clipboard write from a server.
        assert_eq!(
            term("copy\x1b]52;c;ZXZpbA==\x07 me\r\nnext\tcol"),
            "copy\\x1b]52;c;ZXZpbA==\\x07 me\\x0d\nnext\tcol"
        );
        assert_eq!(
            term("a\u{9b}31m b\u{202e}gpj.exe"),
            "a\\x9b31m b\\u{202e}gpj.exe"
        );
        assert!(matches!(term("plain: é 😀\n"), Cow::Borrowed(_)));
    }
}
