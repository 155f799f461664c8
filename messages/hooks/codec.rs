//! The two dialects' payload codecs and outcome parsers (HOOK-9, HOOK-10;
//! hooks-reference §2 and §3). Pure: a hook run comes in as a [`RawRun`],
//! neutral [`HookOutcome`]s come out.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::config::HookEvent;
use super::{Dialect, HookOutcome};

/// What every payload shares: the session the hook runs for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HookSession {
    /// `session_id`.
    pub session_id: String,
    /// `cwd`, also the hook's working directory. Empty means the runtime's
    /// working directory when its hook engine started.
    pub cwd: String,
    /// The embedder's transcript path; Claude Code sends `""` and Codex `null` without one.
    pub transcript_path: Option<String>,
    /// `permission_mode`.
    pub permission_mode: String,
    /// `model` (Codex; Claude Code's SessionStart when non-empty).
    pub model: String,
    /// `turn_id` (Codex; not on SessionStart).
    pub turn_id: String,
}

impl Default for HookSession {
    fn default() -> Self {
        Self {
            session_id: String::new(),
            // Empty: the hook engine fills in the runtime's working
            // directory (the vocabulary reads no process state).
            cwd: String::new(),
            transcript_path: None,
            permission_mode: "default".into(),
            model: String::new(),
            turn_id: String::new(),
        }
    }
}

/// The event-specific half of a payload, dialect-neutral.
#[derive(Debug, Clone, PartialEq)]
pub enum HookInput {
    /// `source`: `startup`, `resume`, `clear`, `compact`.
    SessionStart {
        /// The source, also the matcher subject.
        source: String,
    },
    /// A prompt is submitted.
    UserPromptSubmit {
        /// The prompt text.
        prompt: String,
    },
    /// Before a tool runs.
    PreToolUse {
        /// The public tool name (HOOK-11).
        tool_name: String,
        /// The arguments.
        tool_input: Value,
        /// The call id.
        tool_use_id: String,
    },
    /// After a tool ran.
    PostToolUse {
        /// The public tool name.
        tool_name: String,
        /// The arguments.
        tool_input: Value,
        /// The result (Claude Code gets it as an object, Codex as a string).
        tool_response: Value,
        /// The call id.
        tool_use_id: String,
    },
    /// The turn is stopping.
    Stop {
        /// True when this stop follows a hook-forced continuation (HOOK-7).
        stop_hook_active: bool,
        /// The last assistant message, when the embedder has one.
        last_assistant_message: Option<String>,
    },
    /// A subagent starts.
    SubagentStart {
        /// Its id.
        agent_id: String,
        /// Its type, the matcher subject (default `general-purpose`).
        agent_type: String,
    },
    /// A subagent stops.
    SubagentStop {
        /// True after a hook-forced continuation.
        stop_hook_active: bool,
        /// Its id.
        agent_id: String,
        /// Its type.
        agent_type: String,
        /// Its transcript, when there is one.
        agent_transcript_path: Option<String>,
        /// Its last message.
        last_assistant_message: Option<String>,
    },
}

impl HookInput {
    /// The event this input is for.
    pub fn event(&self) -> HookEvent {
        match self {
            Self::SessionStart { .. } => HookEvent::SessionStart,
            Self::UserPromptSubmit { .. } => HookEvent::UserPromptSubmit,
            Self::PreToolUse { .. } => HookEvent::PreToolUse,
            Self::PostToolUse { .. } => HookEvent::PostToolUse,
            Self::Stop { .. } => HookEvent::Stop,
            Self::SubagentStart { .. } => HookEvent::SubagentStart,
            Self::SubagentStop { .. } => HookEvent::SubagentStop,
        }
    }

    /// The matcher subject: the tool name, the source, or the agent type.
    pub fn subject(&self) -> &str {
        match self {
            Self::SessionStart { source } => source,
            Self::PreToolUse { tool_name, .. } | Self::PostToolUse { tool_name, .. } => tool_name,
            Self::SubagentStart { agent_type, .. } | Self::SubagentStop { agent_type, .. } => {
                agent_type
            }
            Self::UserPromptSubmit { .. } | Self::Stop { .. } => "",
        }
    }

    /// Build an input for `event` from a loose JSON object (the `hooks test`
    /// `--payload`): missing fields take neutral defaults.
    pub fn from_fields(event: HookEvent, fields: &Map<String, Value>) -> Self {
        let s = |k: &str, d: &str| {
            fields
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or(d)
                .to_owned()
        };
        let opt = |k: &str| fields.get(k).and_then(Value::as_str).map(str::to_owned);
        let active = fields
            .get("stop_hook_active")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let v = |k: &str| fields.get(k).cloned().unwrap_or_else(|| json!({}));
        match event {
            HookEvent::SessionStart => Self::SessionStart {
                source: s("source", "startup"),
            },
            HookEvent::UserPromptSubmit => Self::UserPromptSubmit {
                prompt: s("prompt", ""),
            },
            HookEvent::PreToolUse => Self::PreToolUse {
                tool_name: s("tool_name", ""),
                tool_input: v("tool_input"),
                tool_use_id: s("tool_use_id", "call-1"),
            },
            HookEvent::PostToolUse => Self::PostToolUse {
                tool_name: s("tool_name", ""),
                tool_input: v("tool_input"),
                tool_response: v("tool_response"),
                tool_use_id: s("tool_use_id", "call-1"),
            },
            HookEvent::Stop => Self::Stop {
                stop_hook_active: active,
                last_assistant_message: opt("last_assistant_message"),
            },
            HookEvent::SubagentStart => Self::SubagentStart {
                agent_id: s("agent_id", "agent-1"),
                agent_type: s("agent_type", "general-purpose"),
            },
            HookEvent::SubagentStop => Self::SubagentStop {
                stop_hook_active: active,
                agent_id: s("agent_id", "agent-1"),
                agent_type: s("agent_type", "general-purpose"),
                agent_transcript_path: opt("agent_transcript_path"),
                last_assistant_message: opt("last_assistant_message"),
            },
        }
    }
}

/// The payload a dialect's hook gets on stdin (hooks-reference §2).
pub fn payload(dialect: Dialect, session: &HookSession, input: &HookInput) -> Value {
    let event = input.event();
    let mut p = Map::new();
    let mut put = |k: &str, v: Value| {
        p.insert(k.to_owned(), v);
    };
    put("session_id", json!(session.session_id));
    match dialect {
        Dialect::Claude => {
            put(
                "transcript_path",
                json!(session.transcript_path.clone().unwrap_or_default()),
            );
            put("cwd", json!(session.cwd));
            put("permission_mode", json!(session.permission_mode));
            put("hook_event_name", json!(event.name()));
        }
        Dialect::Codex => {
            if event != HookEvent::SessionStart {
                put("turn_id", json!(session.turn_id));
            }
            put("transcript_path", json!(session.transcript_path));
            put("cwd", json!(session.cwd));
            put("hook_event_name", json!(event.name()));
            put("model", json!(session.model));
            put("permission_mode", json!(session.permission_mode));
        }
    }
    match input {
        HookInput::SessionStart { source } => {
            put("source", json!(source));
            if dialect == Dialect::Claude && !session.model.is_empty() {
                put("model", json!(session.model));
            }
        }
        HookInput::UserPromptSubmit { prompt } => put("prompt", json!(prompt)),
        HookInput::PreToolUse {
            tool_name,
            tool_input,
            tool_use_id,
        } => {
            put("tool_name", json!(tool_name));
            put("tool_input", dialect_tool_input(dialect, tool_input));
            put("tool_use_id", json!(tool_use_id));
        }
        HookInput::PostToolUse {
            tool_name,
            tool_input,
            tool_response,
            tool_use_id,
        } => {
            put("tool_name", json!(tool_name));
            put("tool_input", dialect_tool_input(dialect, tool_input));
            let response = match (dialect, tool_response) {
                (Dialect::Claude, v) => v.clone(),
                (Dialect::Codex, Value::String(s)) => json!(s),
                (Dialect::Codex, v) => json!(v.to_string()),
            };
            put("tool_response", response);
            put("tool_use_id", json!(tool_use_id));
        }
        HookInput::Stop {
            stop_hook_active,
            last_assistant_message,
        } => {
            put("stop_hook_active", json!(stop_hook_active));
            match (dialect, last_assistant_message) {
                (Dialect::Codex, m) => put("last_assistant_message", json!(m)),
                (Dialect::Claude, Some(m)) => put("last_assistant_message", json!(m)),
                (Dialect::Claude, None) => {}
            }
        }
        HookInput::SubagentStart {
            agent_id,
            agent_type,
        } => {
            put("agent_id", json!(agent_id));
            put("agent_type", json!(agent_type));
        }
        HookInput::SubagentStop {
            stop_hook_active,
            agent_id,
            agent_type,
            agent_transcript_path,
            last_assistant_message,
        } => {
            put("stop_hook_active", json!(stop_hook_active));
            put("agent_id", json!(agent_id));
            put("agent_type", json!(agent_type));
            put(
                "agent_transcript_path",
                json!(agent_transcript_path.clone().unwrap_or_default()),
            );
            if let Some(m) = last_assistant_message {
                put("last_assistant_message", json!(m));
            }
        }
    }
    Value::Object(p)
}

/// Codex sends only `{"command": …}` when the tool has a string command
/// argument, else `{}` (HOOK-10); Claude Code sends the arguments.
fn dialect_tool_input(dialect: Dialect, input: &Value) -> Value {
    match dialect {
        Dialect::Claude => input.clone(),
        Dialect::Codex => match input.get("command") {
            Some(Value::String(c)) => json!({ "command": c }),
            _ => json!({}),
        },
    }
}

/// The stdin bytes: Claude Code ends the JSON with `"\n"`, Codex does not.
pub fn encode(dialect: Dialect, payload: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(payload).unwrap_or_else(|_| b"{}".to_vec());
    if dialect == Dialect::Claude {
        bytes.push(b'\n');
    }
    bytes
}

/// Claude Code's command-text substitution: only the `${VAR}` form of the
/// given variables; `$VAR` is left to the shell (HOOK-9).
pub fn substitute(command: &str, vars: &[(&str, &str)]) -> String {
    let mut out = command.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("${{{name}}}"), value);
    }
    out
}

/// How one hook process ended, as `run_hook` saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RawRun {
    /// The exit code; `None` for a signal death or a run that never exited.
    pub exit_code: Option<i32>,
    /// Captured stdout (capped).
    pub stdout: String,
    /// Captured stderr (capped).
    pub stderr: String,
    /// The timeout elapsed and the group was killed.
    pub timed_out: bool,
    /// The operation was cancelled and the group was killed.
    pub cancelled: bool,
    /// The hook could not be started (spawn or stdin failure).
    pub failed_to_run: Option<String>,
    /// The effective timeout, in ms.
    pub timeout_ms: u64,
}

/// Map one run to neutral outcomes for `event` under `dialect`'s rules
/// (hooks-reference §3). Never fails: malformed output is an `Error` outcome
/// or plain text, per dialect.
pub fn parse_outcome(dialect: Dialect, event: HookEvent, run: &RawRun) -> Vec<HookOutcome> {
    if let Some(why) = &run.failed_to_run {
        return vec![HookOutcome::Error(format!("hook failed to run: {why}"))];
    }
    if run.timed_out {
        return vec![HookOutcome::Error(format!(
            "hook timed out after {} ms",
            run.timeout_ms
        ))];
    }
    if run.cancelled {
        return vec![HookOutcome::Error("hook cancelled".into())];
    }
    let stdout = run.stdout.trim();
    let stderr = run.stderr.trim();
    match (dialect, run.exit_code) {
        (_, None) => vec![HookOutcome::Error(
            "hook exited without a status code (killed by a signal)".into(),
        )],
        (Dialect::Claude, Some(0)) => claude_exit0(event, stdout),
        (Dialect::Claude, Some(2)) => {
            let reason = if stderr.is_empty() {
                "No stderr output".to_owned()
            } else {
                stderr.to_owned()
            };
            vec![match event {
                HookEvent::PreToolUse => HookOutcome::Deny(reason),
                HookEvent::UserPromptSubmit => HookOutcome::Block(reason),
                // Feedback next to the result, no block (T18).
                HookEvent::PostToolUse => HookOutcome::Context(reason),
                HookEvent::Stop | HookEvent::SubagentStop => HookOutcome::Continue(reason),
                // Shown to the user only (T21).
                HookEvent::SessionStart | HookEvent::SubagentStart => {
                    HookOutcome::Error(format!("hook exited with code 2: {reason}"))
                }
            }]
        }
        (Dialect::Claude, Some(code)) => {
            let first = stderr.lines().next().unwrap_or("");
            vec![HookOutcome::Error(format!(
                "hook failed with non-blocking status code {code}: {first}"
            ))]
        }
        (Dialect::Codex, Some(0)) => codex_exit0(event, stdout),
        (Dialect::Codex, Some(2)) if event != HookEvent::SessionStart => {
            if stderr.is_empty() {
                return vec![HookOutcome::Error(
                    "hook exited with code 2 but did not write a blocking reason to stderr".into(),
                )];
            }
            let r = stderr.to_owned();
            vec![match event {
                HookEvent::PreToolUse => HookOutcome::Deny(r),
                HookEvent::Stop => HookOutcome::Continue(r),
                _ => HookOutcome::Block(r),
            }]
        }
        (Dialect::Codex, Some(code)) => {
            vec![HookOutcome::Error(format!("hook exited with code {code}"))]
        }
    }
}

fn claude_exit0(event: HookEvent, stdout: &str) -> Vec<HookOutcome> {
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
    claude_json(event, &o).unwrap_or_else(|e| vec![HookOutcome::Error(e)])
}

fn str_field<'a>(o: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!(
            "invalid hook output: {key} must be a string, got {v}"
        )),
    }
}

fn bool_field(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!(
            "invalid hook output: {key} must be a boolean, got {v}"
        )),
    }
}

/// The `hookSpecificOutput` object, checked against the event.
fn specific(event: HookEvent, o: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    match o.get("hookSpecificOutput") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(s)) => {
            let name = str_field(s, "hookEventName")?.unwrap_or("");
            if name != event.name() {
                return Err(format!(
                    "hookSpecificOutput.hookEventName is {name:?}, expected {:?}",
                    event.name()
                ));
            }
            Ok(s.clone())
        }
        Some(v) => Err(format!(
            "invalid hook output: hookSpecificOutput must be an object, got {v}"
        )),
    }
}

fn claude_json(event: HookEvent, o: &Map<String, Value>) -> Result<Vec<HookOutcome>, String> {
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
                    return Err(format!("unknown permissionDecision {other:?}"));
                }
                (None, Some(other)) => return Err(format!("unknown decision {other:?}")),
            }
        }
        HookEvent::UserPromptSubmit | HookEvent::PostToolUse => {
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
                    None => return Err("decision \"block\" at Stop requires a reason".into()),
                }
            }
        }
        HookEvent::SessionStart | HookEvent::SubagentStart => {}
    }
    if out.is_empty() {
        out.push(HookOutcome::Proceed);
    }
    Ok(out)
}

fn codex_exit0(event: HookEvent, stdout: &str) -> Vec<HookOutcome> {
    if stdout.is_empty() {
        return vec![HookOutcome::Proceed];
    }
    let label = match event {
        HookEvent::PreToolUse => "pre-tool-use",
        HookEvent::PostToolUse => "post-tool-use",
        HookEvent::UserPromptSubmit => "user-prompt-submit",
        HookEvent::Stop => "stop",
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

#[cfg(test)]
mod tests {
    use super::*;
    use Dialect::{Claude as CC, Codex as CX};
    use HookEvent::*;

    fn exit0(stdout: &str) -> RawRun {
        RawRun {
            exit_code: Some(0),
            stdout: stdout.into(),
            ..RawRun::default()
        }
    }

    fn exit(code: i32, stderr: &str) -> RawRun {
        RawRun {
            exit_code: Some(code),
            stderr: stderr.into(),
            ..RawRun::default()
        }
    }

    fn err_contains(o: &[HookOutcome], text: &str) -> bool {
        o.iter()
            .any(|o| matches!(o, HookOutcome::Error(e) if e.contains(text)))
    }

    const DENY: &str = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}"#;

    #[test]
    fn t3_t4_t8_permission_decisions() {
        let deny = exit0(DENY);
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, PreToolUse, &deny),
                vec![HookOutcome::Deny("no rm".into())]
            );
        }
        let ask = exit0(&DENY.replace("\"deny\"", "\"ask\""));
        assert_eq!(
            parse_outcome(CC, PreToolUse, &ask),
            vec![HookOutcome::Ask("no rm".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &ask),
            "unsupported permissionDecision:ask"
        ));
        let bare = exit0(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny"}}"#,
        );
        assert_eq!(
            parse_outcome(CC, PreToolUse, &bare),
            vec![HookOutcome::Deny("Blocked by hook".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &bare),
            "deny without a non-empty permissionDecisionReason"
        ));
    }

    #[test]
    fn t5_updated_input_is_never_applied() {
        let run = exit0(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"ls"}}}"#,
        );
        let cc = parse_outcome(CC, PreToolUse, &run);
        assert!(matches!(&cc[..], [HookOutcome::Warn(w)] if w.contains("updatedInput ignored")));
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &run),
            "unsupported updatedInput"
        ));
    }

    #[test]
    fn t6_t7_t10_exit_codes() {
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, PreToolUse, &exit(2, "blocked by policy\n")),
                vec![HookOutcome::Deny("blocked by policy".into())]
            );
        }
        assert_eq!(
            parse_outcome(CC, PreToolUse, &exit(2, "")),
            vec![HookOutcome::Deny("No stderr output".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &exit(2, "")),
            "exited with code 2 but did not write a blocking reason"
        ));
        assert!(err_contains(
            &parse_outcome(CC, PostToolUse, &exit(1, "boom\nmore")),
            "boom"
        ));
        assert!(err_contains(
            &parse_outcome(CX, Stop, &exit(1, "boom")),
            "exited with code 1"
        ));
    }

    #[test]
    fn t9_legacy_decisions() {
        let block = exit0(r#"{"decision":"block","reason":"legacy"}"#);
        let approve = exit0(r#"{"decision":"approve"}"#);
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, PreToolUse, &block),
                vec![HookOutcome::Deny("legacy".into())]
            );
        }
        assert_eq!(
            parse_outcome(CC, PreToolUse, &approve),
            vec![HookOutcome::Proceed]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &approve),
            "unsupported decision:approve"
        ));
    }

    #[test]
    fn t11_t12_infrastructure_failures_are_errors() {
        let timed = RawRun {
            timed_out: true,
            timeout_ms: 1000,
            ..RawRun::default()
        };
        let failed = RawRun {
            failed_to_run: Some("no shell".into()),
            ..RawRun::default()
        };
        for d in [CC, CX] {
            assert!(err_contains(
                &parse_outcome(d, PreToolUse, &timed),
                "timed out after 1000 ms"
            ));
            assert!(err_contains(
                &parse_outcome(d, PreToolUse, &failed),
                "no shell"
            ));
            assert!(err_contains(
                &parse_outcome(d, PreToolUse, &exit(127, "sh: not found")),
                "127"
            ));
        }
    }

    #[test]
    fn t13_t14_t17_prompt_submit() {
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, UserPromptSubmit, &exit0("branch: main\n")),
                vec![HookOutcome::Context("branch: main".into())]
            );
            assert_eq!(
                parse_outcome(
                    d,
                    UserPromptSubmit,
                    &exit0(r#"{"decision":"block","reason":"secret detected"}"#)
                ),
                vec![HookOutcome::Block("secret detected".into())]
            );
        }
        let bare = exit0(r#"{"decision":"block"}"#);
        assert_eq!(
            parse_outcome(CC, UserPromptSubmit, &bare),
            vec![HookOutcome::Block("Blocked by hook".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, UserPromptSubmit, &bare),
            "reason"
        ));
        assert_eq!(
            parse_outcome(CC, UserPromptSubmit, &exit0("{not json")),
            vec![HookOutcome::Context("{not json".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, UserPromptSubmit, &exit0("{not json")),
            "invalid user-prompt-submit JSON output"
        ));
        // Unknown keys: ignored by CC, invalid for CX.
        assert_eq!(
            parse_outcome(CC, PreToolUse, &exit0(r#"{"foo":1}"#)),
            vec![HookOutcome::Proceed]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &exit0(r#"{"foo":1}"#)),
            "invalid pre-tool-use JSON output"
        ));
    }

    #[test]
    fn t15_t16_stop_and_continue_false() {
        let block = exit0(r#"{"decision":"block","reason":"run tests"}"#);
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, Stop, &block),
                vec![HookOutcome::Continue("run tests".into())]
            );
        }
        assert_eq!(
            parse_outcome(CC, Stop, &exit0("done")),
            vec![HookOutcome::Proceed]
        );
        assert!(err_contains(
            &parse_outcome(CX, Stop, &exit0("done")),
            "invalid stop hook JSON output"
        ));
        let halt = exit0(r#"{"continue":false,"stopReason":"maintenance"}"#);
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, SessionStart, &halt),
                vec![HookOutcome::Stop("maintenance".into())]
            );
        }
        assert_eq!(
            parse_outcome(CC, PreToolUse, &halt),
            vec![HookOutcome::Stop("maintenance".into())]
        );
        assert!(err_contains(
            &parse_outcome(CX, PreToolUse, &halt),
            "unsupported continue:false"
        ));
    }

    #[test]
    fn codex_post_tool_continue_false_replaces_the_output_and_the_turn_goes_on() {
        let run = exit0(r#"{"continue":false,"stopReason":"quota"}"#);
        assert_eq!(
            parse_outcome(CX, PostToolUse, &run),
            vec![HookOutcome::Block("quota".into())]
        );
        // Elsewhere it is a neutral stop.
        assert_eq!(
            parse_outcome(CX, UserPromptSubmit, &run),
            vec![HookOutcome::Stop("quota".into())]
        );
    }

    #[test]
    fn t18_post_tool_feedback() {
        let warn = exit0(r#"{"systemMessage":"lint warnings"}"#);
        for d in [CC, CX] {
            assert_eq!(
                parse_outcome(d, PostToolUse, &warn),
                vec![HookOutcome::Warn("lint warnings".into())]
            );
        }
        assert_eq!(
            parse_outcome(CC, PostToolUse, &exit(2, "fix lint")),
            vec![HookOutcome::Context("fix lint".into())]
        );
        assert_eq!(
            parse_outcome(CX, PostToolUse, &exit(2, "fix lint")),
            vec![HookOutcome::Block("fix lint".into())]
        );
    }

    #[test]
    fn t21_subagent_events_and_event_name_guard() {
        let ctx = exit0(
            r#"{"hookSpecificOutput":{"hookEventName":"SubagentStart","additionalContext":"be terse"}}"#,
        );
        assert_eq!(
            parse_outcome(CC, SubagentStart, &ctx),
            vec![HookOutcome::Context("be terse".into())]
        );
        assert_eq!(
            parse_outcome(
                CC,
                SubagentStop,
                &exit0(r#"{"decision":"block","reason":"verify"}"#)
            ),
            vec![HookOutcome::Continue("verify".into())]
        );
        assert!(err_contains(
            &parse_outcome(CC, SubagentStart, &exit(2, "no")),
            "code 2"
        ));
        // A mismatched hookEventName does not deny.
        assert!(err_contains(
            &parse_outcome(CC, PreToolUse, &ctx),
            "expected \"PreToolUse\""
        ));
    }

    #[test]
    fn t1_payload_shapes_and_framing() {
        let session = HookSession {
            session_id: "s1".into(),
            cwd: "/tmp/x".into(),
            model: "m".into(),
            turn_id: "t1".into(),
            ..HookSession::default()
        };
        let input = HookInput::PreToolUse {
            tool_name: "Bash".into(),
            tool_input: json!({"command": "rm -rf build", "description": "d"}),
            tool_use_id: "call-1".into(),
        };
        let cc = payload(CC, &session, &input);
        assert_eq!(cc["transcript_path"], json!(""));
        assert_eq!(cc["tool_input"]["description"], json!("d"));
        assert_eq!(cc["hook_event_name"], json!("PreToolUse"));
        assert_eq!(cc["permission_mode"], json!("default"));
        assert!(encode(CC, &cc).ends_with(b"}\n"));
        let cx = payload(CX, &session, &input);
        assert_eq!(cx["tool_input"], json!({"command": "rm -rf build"}));
        assert_eq!(cx["transcript_path"], Value::Null);
        assert_eq!(cx["turn_id"], json!("t1"));
        assert_eq!(cx["model"], json!("m"));
        assert!(encode(CX, &cx).ends_with(b"}"));
        let start = payload(
            CX,
            &session,
            &HookInput::SessionStart {
                source: "startup".into(),
            },
        );
        assert!(start.get("turn_id").is_none());
        let post = HookInput::PostToolUse {
            tool_name: "t".into(),
            tool_input: json!({"path": "/x"}),
            tool_response: json!({"content": []}),
            tool_use_id: "c".into(),
        };
        assert!(payload(CC, &session, &post)["tool_response"].is_object());
        assert!(payload(CX, &session, &post)["tool_response"].is_string());
        assert_eq!(payload(CX, &session, &post)["tool_input"], json!({}));
        assert_eq!(
            substitute(
                "${CLAUDE_PLUGIN_ROOT}/h.sh $CLAUDE_PLUGIN_ROOT",
                &[("CLAUDE_PLUGIN_ROOT", "/p")]
            ),
            "/p/h.sh $CLAUDE_PLUGIN_ROOT"
        );
    }
}
