//! How a hook run becomes neutral outcomes (HOOK-10; hooks-reference §3):
//! the exit-code rules of both dialects side by side, and the JSON field
//! checks the dialects share. Each dialect's JSON output rules are in
//! [`super::claude`] and [`super::codex`]. Pure: a hook run comes in as a
//! [`RawRun`], neutral [`HookOutcome`]s come out.

use serde::Serialize;
use serde_json::{Map, Value};

use super::claude::claude_exit0;
use super::codex::codex_exit0;
use super::config::HookEvent;
use super::{Dialect, HookOutcome};

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

pub(super) fn str_field<'a>(
    o: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!(
            "invalid hook output: {key} must be a string, got {v}"
        )),
    }
}

pub(super) fn bool_field(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!(
            "invalid hook output: {key} must be a boolean, got {v}"
        )),
    }
}

/// The `hookSpecificOutput` object, checked against the event.
pub(super) fn specific(
    event: HookEvent,
    o: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
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
}
