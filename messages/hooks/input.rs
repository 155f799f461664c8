//! What a hook is given (HOOK-9; hooks-reference §2): the session, the
//! event-specific input, each dialect's payload shape and stdin framing, and
//! Claude Code's `${VAR}` substitution. Pure.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::Dialect;
use super::config::HookEvent;

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
    /// After a tool call failed (besides PostToolUse).
    PostToolUseFailure {
        /// The public tool name (the matcher subject).
        tool_name: String,
        /// The arguments.
        tool_input: Value,
        /// The call id.
        tool_use_id: String,
        /// What the model is told of the failure.
        error: String,
        /// The call was cancelled (the user interrupted it).
        is_interrupt: bool,
    },
    /// All calls of one model round ended.
    PostToolBatch {
        /// Each call, in the model's order: `{tool_name, tool_input,
        /// tool_use_id, tool_response}` (the response is what the model is
        /// given, `is_error` when the call failed).
        tool_calls: Vec<Value>,
    },
    /// The session ends.
    SessionEnd {
        /// Why: `prompt_input_exit` (end of input, `/exit`), `other`.
        reason: String,
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
            Self::PostToolUseFailure { .. } => HookEvent::PostToolUseFailure,
            Self::PostToolBatch { .. } => HookEvent::PostToolBatch,
            Self::SessionEnd { .. } => HookEvent::SessionEnd,
            Self::Stop { .. } => HookEvent::Stop,
            Self::SubagentStart { .. } => HookEvent::SubagentStart,
            Self::SubagentStop { .. } => HookEvent::SubagentStop,
        }
    }

    /// The matcher subject: the tool name, the source, or the agent type.
    pub fn subject(&self) -> &str {
        match self {
            Self::SessionStart { source } => source,
            Self::PreToolUse { tool_name, .. }
            | Self::PostToolUse { tool_name, .. }
            | Self::PostToolUseFailure { tool_name, .. } => tool_name,
            Self::SessionEnd { reason } => reason,
            Self::SubagentStart { agent_type, .. } | Self::SubagentStop { agent_type, .. } => {
                agent_type
            }
            Self::UserPromptSubmit { .. } | Self::Stop { .. } | Self::PostToolBatch { .. } => "",
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
            HookEvent::PostToolUseFailure => Self::PostToolUseFailure {
                tool_name: s("tool_name", ""),
                tool_input: v("tool_input"),
                tool_use_id: s("tool_use_id", "call-1"),
                error: s("error", ""),
                is_interrupt: fields
                    .get("is_interrupt")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            HookEvent::PostToolBatch => Self::PostToolBatch {
                tool_calls: fields
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            },
            HookEvent::SessionEnd => Self::SessionEnd {
                reason: s("reason", "other"),
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
        HookInput::PostToolUseFailure {
            tool_name,
            tool_input,
            tool_use_id,
            error,
            is_interrupt,
        } => {
            put("tool_name", json!(tool_name));
            put("tool_input", dialect_tool_input(dialect, tool_input));
            put("tool_use_id", json!(tool_use_id));
            put("error", json!(error));
            put("is_interrupt", json!(is_interrupt));
        }
        HookInput::PostToolBatch { tool_calls } => put("tool_calls", json!(tool_calls)),
        HookInput::SessionEnd { reason } => put("reason", json!(reason)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use Dialect::{Claude as CC, Codex as CX};

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
