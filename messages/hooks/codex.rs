//! Codex's rules for a hook's exit-0 output (hooks-reference §3): strict
//! wire structs, where an unknown key or a wrong type makes the whole output
//! invalid, and fields an event does not support are refused.

use serde_json::{Map, Value};

use super::HookOutcome;
use super::codec::{bool_field, specific, str_field};
use super::config::HookEvent;

pub(super) fn codex_exit0(event: HookEvent, stdout: &str) -> Vec<HookOutcome> {
    if stdout.is_empty() {
        return vec![HookOutcome::Proceed];
    }
    let label = match event {
        HookEvent::PreToolUse => "pre-tool-use",
        HookEvent::PostToolUse => "post-tool-use",
        HookEvent::UserPromptSubmit => "user-prompt-submit",
        HookEvent::Stop => "stop",
        HookEvent::SessionEnd => "session-end",
        _ => "session-start",
    };
    if !stdout.starts_with('{') && !stdout.starts_with('[') {
        return match event {
            HookEvent::SessionStart | HookEvent::UserPromptSubmit => {
                vec![HookOutcome::Context(stdout.to_owned())]
            }
            HookEvent::Stop => vec![HookOutcome::Error(
                "hook returned invalid stop hook JSON output (Stop requires JSON)".into(),
            )],
            _ => vec![HookOutcome::Proceed],
        };
    }
    let parsed = match serde_json::from_str::<Value>(stdout) {
        Ok(Value::Object(o)) => codex_json(event, &o),
        _ => Err(Reject::Invalid),
    };
    match parsed {
        Ok(out) if out.is_empty() => vec![HookOutcome::Proceed],
        Ok(out) => out,
        Err(Reject::Invalid) => vec![HookOutcome::Error(format!(
            "hook returned invalid {label} JSON output"
        ))],
        Err(Reject::Unsupported(why)) => vec![HookOutcome::Error(format!(
            "{} hook returned {why}",
            event.name()
        ))],
    }
}

/// Why Codex refuses a JSON output (fail open either way).
enum Reject {
    /// Not the event's wire struct: an unknown key or a wrong type.
    Invalid,
    /// A field the struct has but the event does not support.
    Unsupported(String),
}

fn unsupported<T>(what: impl Into<String>) -> Result<T, Reject> {
    Err(Reject::Unsupported(what.into()))
}

/// Codex's strict wire structs (`deny_unknown_fields`): an unknown key or a
/// wrong type makes the whole output invalid.
fn codex_json(event: HookEvent, o: &Map<String, Value>) -> Result<Vec<HookOutcome>, Reject> {
    let (top, spec_keys): (&[&str], &[&str]) = match event {
        HookEvent::PreToolUse => (
            &["decision", "reason", "hookSpecificOutput"],
            &[
                "hookEventName",
                "permissionDecision",
                "permissionDecisionReason",
                "updatedInput",
                "additionalContext",
            ],
        ),
        HookEvent::PostToolUse => (
            &["decision", "reason", "hookSpecificOutput"],
            &["hookEventName", "additionalContext", "updatedMCPToolOutput"],
        ),
        HookEvent::UserPromptSubmit => (
            &["decision", "reason", "hookSpecificOutput"],
            &["hookEventName", "additionalContext"],
        ),
        HookEvent::Stop => (&["decision", "reason"], &[]),
        _ => (
            &["hookSpecificOutput"],
            &["hookEventName", "additionalContext"],
        ),
    };
    const UNIVERSAL: [&str; 4] = ["continue", "stopReason", "suppressOutput", "systemMessage"];
    let known = |k: &String, list: &[&str]| list.contains(&k.as_str());
    if o.keys().any(|k| !known(k, &UNIVERSAL) && !known(k, top)) {
        return Err(Reject::Invalid);
    }
    let spec = specific(event, o).map_err(|_| Reject::Invalid)?;
    if spec.keys().any(|k| !known(k, spec_keys)) {
        return Err(Reject::Invalid);
    }
    let s = |m: &Map<String, Value>, k: &str| {
        str_field(m, k)
            .map(|v| v.map(str::to_owned))
            .map_err(|_| Reject::Invalid)
    };
    let stop = bool_field(o, "continue").map_err(|_| Reject::Invalid)? == Some(false);
    let stop_reason = s(o, "stopReason")?;
    let suppress = bool_field(o, "suppressOutput").map_err(|_| Reject::Invalid)? == Some(true);
    let system = s(o, "systemMessage")?;
    let decision = s(o, "decision")?;
    let reason = s(o, "reason")?.filter(|r| !r.trim().is_empty());
    let context = s(&spec, "additionalContext")?;
    let mut out = Vec::new();
    if let Some(m) = system {
        out.push(HookOutcome::Warn(m));
    }
    if event == HookEvent::PreToolUse {
        if spec.contains_key("updatedInput") {
            return unsupported("unsupported updatedInput");
        }
        if context.is_some() {
            return unsupported("unsupported additionalContext");
        }
        if stop {
            return unsupported("unsupported continue:false");
        }
        if stop_reason.is_some() {
            return unsupported("unsupported stopReason");
        }
        if suppress {
            return unsupported("unsupported suppressOutput");
        }
        let pd = s(&spec, "permissionDecision")?;
        let pr = s(&spec, "permissionDecisionReason")?;
        match (pd.as_deref(), decision.as_deref()) {
            (Some("deny"), _) => match pr.filter(|r| !r.trim().is_empty()) {
                Some(r) => out.push(HookOutcome::Deny(r)),
                None => return unsupported("deny without a non-empty permissionDecisionReason"),
            },
            (Some(other), _) => {
                return unsupported(format!("unsupported permissionDecision:{other}"));
            }
            (None, Some("block")) => match reason {
                Some(r) => out.push(HookOutcome::Deny(r)),
                None => return unsupported("decision:block without a non-empty reason"),
            },
            (None, Some(other)) => return unsupported(format!("unsupported decision:{other}")),
            (None, None) if pr.is_some() || reason.is_some() => {
                return unsupported("a reason without a decision");
            }
            (None, None) => {}
        }
        return Ok(out);
    }
    if suppress && event == HookEvent::PostToolUse {
        return unsupported("unsupported suppressOutput");
    }
    if spec.contains_key("updatedMCPToolOutput") {
        return unsupported("unsupported updatedMCPToolOutput");
    }
    let block = match (decision.as_deref(), reason) {
        (Some("block"), Some(r)) => Some(r),
        (Some("block"), None) => return unsupported("decision:block without a non-empty reason"),
        (Some(other), _) => return unsupported(format!("unsupported decision:{other}")),
        (None, Some(_)) => return unsupported("a reason without a decision"),
        (None, None) => None,
    };
    match (event, block) {
        (HookEvent::Stop, Some(r)) => out.push(HookOutcome::Continue(r)),
        // PostToolUse `continue:false`: the output is replaced (by the block
        // reason, the stop reason or a default) and the turn goes on.
        (HookEvent::PostToolUse, block) if stop => out.push(HookOutcome::Block(
            block
                .or(stop_reason.clone().filter(|r| !r.trim().is_empty()))
                .unwrap_or_else(|| "The tool output was withheld by a PostToolUse hook.".into()),
        )),
        (_, Some(r)) => out.push(HookOutcome::Block(r)),
        (_, None) => {}
    }
    if let Some(c) = context {
        out.push(HookOutcome::Context(c));
    }
    if stop && event != HookEvent::PostToolUse {
        out.push(HookOutcome::Stop(stop_reason.unwrap_or_default()));
    }
    Ok(out)
}
