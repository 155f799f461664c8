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
                HookEvent::PostToolUse
                | HookEvent::PostToolUseFailure
                | HookEvent::PostToolBatch => HookOutcome::Context(reason),
                HookEvent::Stop | HookEvent::SubagentStop => HookOutcome::Continue(reason),
                // Shown to the user only (T21).
                HookEvent::SessionStart | HookEvent::SubagentStart | HookEvent::SessionEnd => {
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
        (Dialect::Codex, Some(2))
            if !matches!(event, HookEvent::SessionStart | HookEvent::SessionEnd) =>
        {
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

/// Why a hook's JSON output is refused: a field of the wrong type, or an
/// answer to another event (Claude's rules; Codex reads any of these as
/// invalid output).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum HookOutputError {
    /// A field that is not of its type (`expected` with its article).
    #[error("invalid hook output: {key} must be {expected}, got {got}")]
    WrongType {
        /// The field.
        key: String,
        /// `a string`, `a boolean`, `an object`.
        expected: &'static str,
        /// What it is.
        got: Value,
    },
    /// `hookSpecificOutput` answers another event.
    #[error("hookSpecificOutput.hookEventName is {got:?}, expected {expected:?}")]
    OtherEvent {
        /// The name it gave.
        got: String,
        /// The event that ran.
        expected: &'static str,
    },
    /// A `permissionDecision` Claude Code does not know.
    #[error("unknown permissionDecision {0:?}")]
    UnknownPermissionDecision(String),
    /// A (legacy) `decision` Claude Code does not know.
    #[error("unknown decision {0:?}")]
    UnknownDecision(String),
    /// `decision: "block"` at Stop without the reason the model is given.
    #[error("decision \"block\" at Stop requires a reason")]
    StopWithoutReason,
}

pub(super) fn str_field<'a>(
    o: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, HookOutputError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(HookOutputError::WrongType {
            key: key.to_owned(),
            expected: "a string",
            got: v.clone(),
        }),
    }
}

pub(super) fn bool_field(
    o: &Map<String, Value>,
    key: &str,
) -> Result<Option<bool>, HookOutputError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(HookOutputError::WrongType {
            key: key.to_owned(),
            expected: "a boolean",
            got: v.clone(),
        }),
    }
}

/// The `hookSpecificOutput` object, checked against the event.
pub(super) fn specific(
    event: HookEvent,
    o: &Map<String, Value>,
) -> Result<Map<String, Value>, HookOutputError> {
    match o.get("hookSpecificOutput") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(s)) => {
            let name = str_field(s, "hookEventName")?.unwrap_or("");
            if name != event.name() {
                return Err(HookOutputError::OtherEvent {
                    got: name.to_owned(),
                    expected: event.name(),
                });
            }
            Ok(s.clone())
        }
        Some(v) => Err(HookOutputError::WrongType {
            key: "hookSpecificOutput".to_owned(),
            expected: "an object",
            got: v.clone(),
        }),
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

#[cfg(test)]
mod props {
    //! Property tests of both hook-output parsers: whatever a hook prints
    //! and however it exits.

    use super::*;
    use crate::messages::prop_gen::{config, json_value, tricky_text};
    use proptest::prelude::*;
    use serde_json::json;

    fn dialect() -> impl Strategy<Value = Dialect> {
        prop_oneof![Just(Dialect::Claude), Just(Dialect::Codex)]
    }

    fn event() -> impl Strategy<Value = HookEvent> {
        prop::sample::select(HookEvent::ALL.to_vec())
    }

    /// A value for a known key: often one of the words the parsers look for.
    fn field_value() -> impl Strategy<Value = Value> {
        let word = prop::sample::select(vec![
            "deny", "ask", "allow", "defer", "block", "approve", "", "  ", "no rm",
        ]);
        prop_oneof![
            3 => word.prop_map(|w| json!(w)),
            1 => any::<bool>().prop_map(Value::Bool),
            1 => Just(Value::Null),
            2 => json_value(),
        ]
    }

    /// The `hookSpecificOutput` object, with the event's name (or not).
    fn specific_output(event: HookEvent) -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "permissionDecision",
            "permissionDecisionReason",
            "updatedInput",
            "additionalContext",
            "updatedMCPToolOutput",
            "updatedToolOutput",
            "unknownKey",
        ]);
        let name = prop_oneof![
            4 => Just(json!(event.name())),
            1 => prop::sample::select(HookEvent::ALL.to_vec()).prop_map(|e| json!(e.name())),
            1 => field_value(),
        ];
        (
            prop::option::weighted(0.9, name),
            prop::collection::vec((keys, field_value()), 0..4),
        )
            .prop_map(|(name, fields)| {
                let mut o: Map<String, Value> =
                    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                if let Some(name) = name {
                    o.insert("hookEventName".into(), name);
                }
                Value::Object(o)
            })
    }

    /// A JSON object of the known keys of both dialects, of random types.
    fn hook_json(event: HookEvent) -> BoxedStrategy<Map<String, Value>> {
        let keys = prop::sample::select(vec![
            "decision",
            "reason",
            "continue",
            "stopReason",
            "suppressOutput",
            "systemMessage",
        ]);
        let spec = prop_oneof![
            4 => specific_output(event),
            1 => field_value(),
        ];
        (
            prop::collection::vec((keys, field_value()), 0..5),
            prop::option::weighted(0.6, spec),
        )
            .prop_map(|(fields, spec)| {
                let mut o: Map<String, Value> =
                    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                if let Some(spec) = spec {
                    o.insert("hookSpecificOutput".into(), spec);
                }
                o
            })
            .boxed()
    }

    /// What a hook prints on stdout: anything, any JSON, a hook-shaped
    /// object, or one cut short.
    fn stdout(event: HookEvent) -> BoxedStrategy<String> {
        prop_oneof![
            2 => tricky_text(),
            2 => json_value().prop_map(|v| v.to_string()),
            4 => hook_json(event).prop_map(|o| Value::Object(o).to_string()),
            1 => (hook_json(event), any::<prop::sample::Index>()).prop_map(|(o, at)| {
                let text = Value::Object(o).to_string();
                let mut end = at.index(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[..end].to_owned()
            }),
            1 => (hook_json(event), "[ \n\t]{0,3}").prop_map(|(o, ws)| format!("{ws}{}{ws}", Value::Object(o))),
        ]
        .boxed()
    }

    fn exit_code() -> impl Strategy<Value = Option<i32>> {
        prop_oneof![
            4 => Just(Some(0)),
            2 => Just(Some(2)),
            1 => Just(Some(1)),
            1 => Just(None),
            1 => any::<i32>().prop_map(Some),
        ]
    }

    /// An event and a run of a hook for it.
    fn run() -> impl Strategy<Value = (HookEvent, RawRun)> {
        event().prop_flat_map(|event| {
            (
                Just(event),
                (
                    exit_code(),
                    stdout(event),
                    tricky_text(),
                    prop::bool::weighted(0.05),
                    prop::bool::weighted(0.05),
                    prop::option::weighted(0.05, tricky_text()),
                    any::<u64>(),
                )
                    .prop_map(
                        |(
                            exit_code,
                            stdout,
                            stderr,
                            timed_out,
                            cancelled,
                            failed_to_run,
                            timeout_ms,
                        )| {
                            RawRun {
                                exit_code,
                                stdout,
                                stderr,
                                timed_out,
                                cancelled,
                                failed_to_run,
                                timeout_ms,
                            }
                        },
                    ),
            )
        })
    }

    /// Codex's name for an event in its "invalid … JSON output" errors.
    fn codex_label(event: HookEvent) -> &'static str {
        match event {
            HookEvent::PreToolUse => "pre-tool-use",
            HookEvent::PostToolUse => "post-tool-use",
            HookEvent::UserPromptSubmit => "user-prompt-submit",
            HookEvent::Stop => "stop",
            HookEvent::SessionEnd => "session-end",
            _ => "session-start",
        }
    }

    fn only_error(outcomes: &[HookOutcome]) -> Option<&str> {
        match outcomes {
            [HookOutcome::Error(e)] => Some(e),
            _ => None,
        }
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn every_run_yields_at_least_one_outcome_and_decisions_only_where_they_belong(
            d in dialect(),
            (event, run) in run(),
        ) {
            // HOOK-2, HOOK-9, HOOK-10: "never fails": whatever the hook
            // printed, there is an outcome; errors say something; a deny only
            // comes from a pre-tool hook, an ask only from Claude Code's.
            let out = parse_outcome(d, event, &run);
            prop_assert!(!out.is_empty());
            for o in &out {
                match o {
                    HookOutcome::Error(e) => prop_assert!(!e.trim().is_empty()),
                    HookOutcome::Deny(r) => {
                        prop_assert_eq!(event, HookEvent::PreToolUse);
                        // HOOK-10: Codex denies only with a non-empty reason.
                        prop_assert!(d == Dialect::Claude || !r.trim().is_empty(), "{:?}", out);
                    }
                    HookOutcome::Ask(_) => {
                        prop_assert_eq!(event, HookEvent::PreToolUse);
                        prop_assert_eq!(d, Dialect::Claude);
                    }
                    _ => {}
                }
            }
        }

        #[test]
        fn a_hook_that_cannot_run_fails_open_with_one_error_whatever_it_printed(
            d in dialect(),
            (event, mut run) in run(),
            why in 0u8..4,
        ) {
            // HOOK-5: spawn failure, timeout, cancellation, signal death.
            match why {
                0 => run.failed_to_run = Some(run.failed_to_run.clone().unwrap_or_else(|| "no shell".into())),
                1 => {
                    run.failed_to_run = None;
                    run.timed_out = true;
                }
                2 => {
                    run.failed_to_run = None;
                    run.timed_out = false;
                    run.cancelled = true;
                }
                _ => {
                    run.failed_to_run = None;
                    run.timed_out = false;
                    run.cancelled = false;
                    run.exit_code = None;
                }
            }
            let out = parse_outcome(d, event, &run);
            let e = only_error(&out);
            prop_assert!(e.is_some(), "{:?}", out);
            let e = e.unwrap_or_default();
            match why {
                0 => prop_assert!(e.contains(run.failed_to_run.as_deref().unwrap_or_default())),
                1 => {
                    let said = format!("timed out after {} ms", run.timeout_ms);
                    prop_assert!(e.contains(&said), "{}", e);
                }
                2 => prop_assert!(e.contains("cancelled")),
                _ => prop_assert!(e.contains("signal")),
            }
        }

        #[test]
        fn malformed_json_on_exit_0_is_an_error_naming_it_for_codex_and_plain_text_for_claude(
            event in event(),
            o in event().prop_flat_map(hook_json),
            cut in any::<prop::sample::Index>(),
            array in any::<bool>(),
        ) {
            // HOOK-10 (malformed or non-object JSON → an Error naming the
            // event's invalid JSON output), HOOK-9 / T17 (plain text).
            let stdout = if array {
                // Valid JSON, not an object.
                Value::Array(vec![Value::Object(o)]).to_string()
            } else {
                // Any strict prefix of an object is malformed.
                let text = Value::Object(o).to_string();
                let mut end = 1 + cut.index(text.len() - 1);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[..end].to_owned()
            };
            prop_assert!(serde_json::from_str::<Map<String, Value>>(&stdout).is_err());
            let run = RawRun { exit_code: Some(0), stdout: stdout.clone(), ..RawRun::default() };
            if event.served_by(Dialect::Codex) {
                let out = parse_outcome(Dialect::Codex, event, &run);
                let said = format!("hook returned invalid {} JSON output", codex_label(event));
                prop_assert_eq!(only_error(&out), Some(said.as_str()));
            }
            let plain = match event {
                HookEvent::SessionStart | HookEvent::UserPromptSubmit => {
                    HookOutcome::Context(stdout.trim().to_owned())
                }
                _ => HookOutcome::Proceed,
            };
            prop_assert_eq!(parse_outcome(Dialect::Claude, event, &run), vec![plain]);
        }

        #[test]
        fn unknown_keys_are_ignored_by_claude_and_invalid_for_codex(
            event in event(),
            o in event().prop_flat_map(hook_json),
            extra in json_value(),
        ) {
            // HOOK-9: unknown JSON keys are ignored. HOOK-10: JSON is strict.
            let run = |o: &Map<String, Value>| RawRun {
                exit_code: Some(0),
                stdout: Value::Object(o.clone()).to_string(),
                ..RawRun::default()
            };
            let mut with_extra = o.clone();
            with_extra.insert("someFutureKey".into(), extra);
            prop_assert_eq!(
                parse_outcome(Dialect::Claude, event, &run(&with_extra)),
                parse_outcome(Dialect::Claude, event, &run(&o))
            );
            if event.served_by(Dialect::Codex) {
                let out = parse_outcome(Dialect::Codex, event, &run(&with_extra));
                let said = format!("hook returned invalid {} JSON output", codex_label(event));
                prop_assert_eq!(only_error(&out), Some(said.as_str()));
            }
        }
    }
}
