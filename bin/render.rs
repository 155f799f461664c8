//! Output shaping shared by the commands: status lines and JSON, outcomes,
//! tool definitions.

use mcpvisor::{ServerState, ServerStatus, ToolDefinition};
use serde_json::{Value, json};

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
