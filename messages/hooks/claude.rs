//! Claude Code's rules for a hook's exit-0 output (pinned to v2.1.88;
//! hooks-reference §3): plain text or lenient JSON, unknown keys ignored,
//! malformed JSON read as plain text (T17).

use serde_json::{Map, Value};

use super::HookOutcome;
use super::codec::{HookOutputError, bool_field, specific, str_field};
use super::config::HookEvent;

pub(super) fn claude_exit0(event: HookEvent, stdout: &str) -> Vec<HookOutcome> {
    let plain = |text: &str| match event {
        HookEvent::SessionStart | HookEvent::UserPromptSubmit if !text.is_empty() => {
            vec![HookOutcome::Context(text.to_owned())]
        }
        _ => vec![HookOutcome::Proceed],
    };
    if !stdout.starts_with('{') {
        return plain(stdout);
    }
    // Malformed JSON is plain text (T17); unknown keys are ignored.
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(stdout) else {
        return plain(stdout);
    };
    claude_json(event, &o).unwrap_or_else(|e| vec![HookOutcome::Error(e.to_string())])
}

fn claude_json(
    event: HookEvent,
    o: &Map<String, Value>,
) -> Result<Vec<HookOutcome>, HookOutputError> {
    let mut out = Vec::new();
    let spec = specific(event, o)?;
    if let Some(m) = str_field(o, "systemMessage")? {
        out.push(HookOutcome::Warn(m.to_owned()));
    }
    if bool_field(o, "continue")? == Some(false) {
        let r = str_field(o, "stopReason")?.unwrap_or("");
        out.push(HookOutcome::Stop(r.to_owned()));
    }
    let decision = str_field(o, "decision")?;
    let reason = str_field(o, "reason")?.filter(|r| !r.trim().is_empty());
    if let Some(c) = str_field(&spec, "additionalContext")? {
        out.push(HookOutcome::Context(c.to_owned()));
    }
    const DEFAULT: &str = "Blocked by hook";
    match event {
        HookEvent::PreToolUse => {
            let pd = str_field(&spec, "permissionDecision")?;
            let pr = str_field(&spec, "permissionDecisionReason")?.filter(|r| !r.trim().is_empty());
            if spec.contains_key("updatedInput") {
                out.push(HookOutcome::Warn(
                    "updatedInput ignored: mcpvisor never rewrites tool input from a hook".into(),
                ));
            }
            match (pd, decision) {
                (Some("deny"), _) | (None, Some("block")) => {
                    out.push(HookOutcome::Deny(pr.or(reason).unwrap_or(DEFAULT).into()))
                }
                (Some("ask"), _) => out.push(HookOutcome::Ask(pr.or(reason).unwrap_or("").into())),
                // allow never skips approval (a deliberate deviation); defer
                // only exists in Claude Code's -p mode.
                (Some("allow" | "defer"), _) | (None, Some("approve") | None) => {}
                (Some(other), _) => {
                    return Err(HookOutputError::UnknownPermissionDecision(other.to_owned()));
                }
                (None, Some(other)) => {
                    return Err(HookOutputError::UnknownDecision(other.to_owned()));
                }
            }
        }
        HookEvent::UserPromptSubmit
        | HookEvent::PostToolUse
        | HookEvent::PostToolUseFailure
        | HookEvent::PostToolBatch => {
            if spec.contains_key("updatedMCPToolOutput") || spec.contains_key("updatedToolOutput") {
                out.push(HookOutcome::Warn(
                    "updatedMCPToolOutput ignored: mcpvisor never rewrites a tool result".into(),
                ));
            }
            if decision == Some("block") {
                out.push(HookOutcome::Block(reason.unwrap_or(DEFAULT).into()));
            }
        }
        HookEvent::Stop | HookEvent::SubagentStop => {
            if decision == Some("block") {
                match reason {
                    Some(r) => out.push(HookOutcome::Continue(r.into())),
                    None => return Err(HookOutputError::StopWithoutReason),
                }
            }
        }
        HookEvent::SessionStart | HookEvent::SubagentStart | HookEvent::SessionEnd => {}
    }
    if out.is_empty() {
        out.push(HookOutcome::Proceed);
    }
    Ok(out)
}
