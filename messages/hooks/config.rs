//! Hook events and the hooks file (HOOK-4): the shared
//! `{"hooks": {"<Event>": [{"matcher": …, "hooks": [{"type": "command", …}]}]}}`
//! shape, parsed once per dialect into groups of handlers. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Dialect, Matcher};

/// The default hook timeout (HOOK-3): 600000 ms.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// An extension point, under the products' event names (HOOK-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum HookEvent {
    /// Session start (lifecycle, may run detached).
    SessionStart,
    /// Pre-step: a prompt is submitted.
    UserPromptSubmit,
    /// Before a tool runs.
    PreToolUse,
    /// After a tool ran.
    PostToolUse,
    /// After a tool call failed (Claude Code only), besides PostToolUse.
    PostToolUseFailure,
    /// After all calls of one model round ended, before the next model
    /// request (Claude Code only).
    PostToolBatch,
    /// The session ends (`chat` at its end).
    SessionEnd,
    /// The turn is stopping.
    Stop,
    /// A subagent starts (Claude Code only).
    SubagentStart,
    /// A subagent stops (Claude Code only).
    SubagentStop,
}

impl HookEvent {
    /// Every event.
    pub const ALL: [HookEvent; 10] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::PostToolBatch,
        Self::SessionEnd,
        Self::Stop,
        Self::SubagentStart,
        Self::SubagentStop,
    ];

    /// The product name (`PreToolUse`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::PostToolBatch => "PostToolBatch",
            Self::SessionEnd => "SessionEnd",
            Self::Stop => "Stop",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
        }
    }

    /// Parse a product name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether the dialect has this event (HOOK-9, HOOK-10: Codex has five).
    pub fn served_by(self, dialect: Dialect) -> bool {
        match dialect {
            Dialect::Claude => true,
            Dialect::Codex => !matches!(
                self,
                Self::SubagentStart
                    | Self::SubagentStop
                    | Self::PostToolUseFailure
                    | Self::PostToolBatch
            ),
        }
    }

    /// Matchers on these events are ignored: they always fire.
    fn ignores_matcher(self) -> bool {
        matches!(
            self,
            Self::UserPromptSubmit | Self::Stop | Self::PostToolBatch | Self::SessionEnd
        )
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One command handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookHandler {
    /// The command text as configured (substitution happens at run time).
    pub command: String,
    /// Converted from seconds, at least 1 s (HOOK-3).
    pub timeout: Duration,
    /// Hex SHA-256 of the command text (HOOK-12).
    pub hash: String,
}

/// A matcher group of one event.
#[derive(Debug, Clone)]
pub struct HookGroup {
    /// The pattern as configured.
    pub pattern: Option<String>,
    /// Its compiled form.
    pub matcher: Matcher,
    /// The handlers, in config order.
    pub handlers: Vec<HookHandler>,
}

/// Every hook of one dialect's file, read once (HOOK-4).
#[derive(Debug, Clone)]
pub struct HookSet {
    /// The dialect.
    pub dialect: Dialect,
    /// Where it came from (for messages).
    pub origin: String,
    /// Groups per event, in config order.
    pub groups: BTreeMap<HookEvent, Vec<HookGroup>>,
    /// Load warnings: skipped handlers, invalid matchers, unknown events.
    pub warnings: Vec<String>,
}

/// The hex SHA-256 of a hook command: what `--strict-hooks` approves (HOOK-12).
pub fn command_hash(command: &str) -> String {
    crate::messages::naming::hex(&Sha256::digest(command.as_bytes()))
}

impl HookSet {
    /// No hooks.
    pub fn empty(dialect: Dialect, origin: impl Into<String>) -> Self {
        Self {
            dialect,
            origin: origin.into(),
            groups: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Parse a hooks file. `Err` (the file is unusable: no hooks at all) when
    /// it is not JSON or not the shared shape; smaller problems skip the
    /// handler or group and are kept as warnings.
    pub fn parse(dialect: Dialect, origin: &str, text: &str) -> Result<Self, HookFileError> {
        let fail = |problem: String| HookFileError {
            origin: origin.to_owned(),
            problem,
        };
        let root: Value =
            serde_json::from_str(text).map_err(|e| fail(format!("not valid JSON: {e}")))?;
        let Value::Object(root) = root else {
            return Err(fail("expected a JSON object".into()));
        };
        let mut set = Self::empty(dialect, origin);
        // `{"hooks": {…}}` (a settings file may have other keys) or a bare
        // map of events (recognised by at least one event name).
        let none = serde_json::Map::new();
        let events = match root.get("hooks") {
            Some(Value::Object(events)) => events,
            Some(_) => return Err(fail("\"hooks\" must be an object".into())),
            None if root.keys().any(|k| HookEvent::parse(k).is_some()) => &root,
            None => {
                for k in root.keys() {
                    if let Some(e) = HookEvent::ALL
                        .iter()
                        .find(|e| e.name().eq_ignore_ascii_case(k))
                    {
                        set.warnings.push(format!(
                            "{origin}: no \"hooks\" key, and {k:?} is not an event name (event names are case-sensitive: {}); no hooks registered",
                            e.name()
                        ));
                    }
                }
                &none
            }
        };
        for (name, groups) in events {
            let Some(event) = HookEvent::parse(name) else {
                set.warnings
                    .push(format!("{origin}: unknown hook event {name:?} ignored"));
                continue;
            };
            if !event.served_by(dialect) {
                set.warnings.push(format!(
                    "{origin}: {name} is not a {} event; ignored",
                    dialect.product()
                ));
                continue;
            }
            let Value::Array(groups) = groups else {
                return Err(fail(format!("hooks.{name} must be an array of groups")));
            };
            for (gi, group) in groups.iter().enumerate() {
                let rel = format!("hooks.{name}[{gi}]");
                let at = format!("{origin}: {rel}");
                let Value::Object(group) = group else {
                    return Err(fail(format!("{rel} must be an object")));
                };
                let pattern = match group.get("matcher") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(fail(format!("{rel}.matcher must be a string"))),
                };
                let (matcher, pattern) = if event.ignores_matcher() {
                    (Matcher::All, None)
                } else {
                    match Matcher::compile(dialect, pattern.as_deref()) {
                        Ok((m, warning)) => {
                            if let Some(w) = warning {
                                set.warnings.push(format!("{at}: {w}"));
                            }
                            (m, pattern)
                        }
                        Err(e) => {
                            set.warnings.push(format!("{at}: {e}"));
                            continue;
                        }
                    }
                };
                let Some(Value::Array(handlers)) = group.get("hooks") else {
                    return Err(fail(format!("{rel}.hooks must be an array")));
                };
                let mut parsed = Vec::new();
                for (hi, h) in handlers.iter().enumerate() {
                    match parse_handler(dialect, h) {
                        Ok(handler) => parsed.push(handler),
                        Err(why) => set
                            .warnings
                            .push(format!("{at}.hooks[{hi}] skipped: {why}")),
                    }
                }
                set.groups.entry(event).or_default().push(HookGroup {
                    pattern,
                    matcher,
                    handlers: parsed,
                });
            }
        }
        Ok(set)
    }

    /// The handlers that fire for `event` on `subject` (a tool name, a
    /// source, an agent type), in config order. Claude Code de-duplicates
    /// identical handlers; Codex does not (HOOK-9, HOOK-10).
    pub fn select(&self, event: HookEvent, subject: &str) -> Vec<(&HookGroup, &HookHandler)> {
        let mut out: Vec<(&HookGroup, &HookHandler)> = Vec::new();
        for group in self.groups.get(&event).into_iter().flatten() {
            if !group.matcher.matches(subject) {
                continue;
            }
            for handler in &group.handlers {
                if self.dialect == Dialect::Claude && out.iter().any(|(_, h)| *h == handler) {
                    continue;
                }
                out.push((group, handler));
            }
        }
        out
    }

    /// Every handler, for listings.
    pub fn handlers(&self) -> impl Iterator<Item = (HookEvent, &HookGroup, &HookHandler)> {
        self.groups
            .iter()
            .flat_map(|(e, gs)| gs.iter().map(move |g| (*e, g)))
            .flat_map(|(e, g)| g.handlers.iter().map(move |h| (e, g, h)))
    }
}

/// Why one handler of a group is skipped (the others are kept).
#[derive(Debug, thiserror::Error)]
enum HandlerError {
    /// Not a JSON object.
    #[error("a handler must be an object")]
    NotAnObject,
    /// A `type` other than `command`.
    #[error("handler type {0:?} is not supported")]
    Type(String),
    /// `async: true`.
    #[error("async hooks are not supported")]
    Async,
    /// No `command`, or an empty one.
    #[error("no command")]
    NoCommand,
    /// A `timeout` that is not a number of seconds.
    #[error("timeout must be a number of seconds, got {0}")]
    Timeout(Value),
}

fn parse_handler(dialect: Dialect, h: &Value) -> Result<HookHandler, HandlerError> {
    let Value::Object(h) = h else {
        return Err(HandlerError::NotAnObject);
    };
    match h.get("type").and_then(Value::as_str).unwrap_or("command") {
        "command" => {}
        other => return Err(HandlerError::Type(other.to_owned())),
    }
    if h.get("async").and_then(Value::as_bool) == Some(true) {
        return Err(HandlerError::Async);
    }
    let command = h
        .get("command")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or(HandlerError::NoCommand)?
        .to_owned();
    let mut timeout_field = h.get("timeout");
    if dialect == Dialect::Codex && timeout_field.is_none() {
        timeout_field = h.get("timeoutSec");
    }
    let timeout = match timeout_field {
        None | Some(Value::Null) => DEFAULT_HOOK_TIMEOUT,
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s.min(86_400.0 * 7.0)),
            _ => return Err(HandlerError::Timeout(v.clone())),
        },
    }
    .max(Duration::from_secs(1));
    Ok(HookHandler {
        hash: command_hash(&command),
        command,
        timeout,
    })
}

/// Why a hooks file is unusable as a whole (HOOK-4): it registers no hooks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {problem}")]
pub struct HookFileError {
    /// The file, as named in the configuration.
    pub origin: String,
    /// What is wrong, with the JSON path (`hooks.PreToolUse[0].hooks must be an array`).
    pub problem: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(d: Dialect, text: &str) -> HookSet {
        HookSet::parse(d, "test.json", text).unwrap()
    }

    #[test]
    fn timeouts_are_seconds_with_a_one_second_floor_and_codex_accepts_timeout_sec() {
        // HOOK-3
        let text = r#"{"hooks":{"PreToolUse":[{"hooks":[
            {"type":"command","command":"a"},
            {"type":"command","command":"b","timeout":30},
            {"type":"command","command":"c","timeout":0},
            {"type":"command","command":"d","timeoutSec":5}]}]}}"#;
        let timeouts = |d| {
            set(d, text)
                .select(HookEvent::PreToolUse, "Bash")
                .iter()
                .map(|(_, h)| h.timeout.as_millis())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            timeouts(Dialect::Claude),
            vec![600_000, 30_000, 1000, 600_000]
        );
        assert_eq!(timeouts(Dialect::Codex), vec![600_000, 30_000, 1000, 5000]);
    }

    #[test]
    fn unsupported_handlers_are_skipped_with_a_warning() {
        // HOOK-4
        let s = set(
            Dialect::Claude,
            r#"{"hooks":{"PreToolUse":[{"hooks":[
                {"type":"prompt","prompt":"x"},{"type":"agent"},
                {"type":"command","command":"a","async":true},
                {"type":"command","command":"  "},
                {"command":"ok"}]}]},"permissions":{}}"#,
        );
        let sel = s.select(HookEvent::PreToolUse, "Bash");
        assert_eq!(sel.len(), 1);
        assert_eq!(sel[0].1.command, "ok");
        assert_eq!(s.warnings.len(), 4, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("\"prompt\" is not supported"));
    }

    #[test]
    fn unusable_files_are_errors_and_unknown_events_warnings() {
        assert!(HookSet::parse(Dialect::Claude, "x", "{not json").is_err());
        assert!(HookSet::parse(Dialect::Codex, "x", r#"{"hooks":[]}"#).is_err());
        assert!(HookSet::parse(Dialect::Codex, "x", r#"{"hooks":{"Stop":{}}}"#).is_err());
        let s = set(
            Dialect::Codex,
            r#"{"hooks":{"Nope":[],"SubagentStart":[{"hooks":[{"command":"x"}]}]}}"#,
        );
        assert!(s.groups.is_empty());
        assert_eq!(s.warnings.len(), 2);
        // A bare map is accepted too; a misspelled event in it is warned about.
        let s = set(
            Dialect::Claude,
            r#"{"Stop":[{"hooks":[{"command":"x"}]}],"PreTooluse":[]}"#,
        );
        assert_eq!(s.select(HookEvent::Stop, "").len(), 1);
        assert!(s.warnings[0].contains("unknown hook event \"PreTooluse\""));
        let s = set(Dialect::Claude, r#"{"pretooluse":[]}"#);
        assert!(s.groups.is_empty());
        assert!(
            s.warnings[0].contains("case-sensitive: PreToolUse"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn claude_deduplicates_identical_handlers_and_codex_does_not() {
        // T20
        let text = r#"{"hooks":{"PreToolUse":[
            {"matcher":"Bash","hooks":[{"type":"command","command":"echo x"}]},
            {"hooks":[{"type":"command","command":"echo x"}]}]}}"#;
        assert_eq!(
            set(Dialect::Claude, text)
                .select(HookEvent::PreToolUse, "Bash")
                .len(),
            1
        );
        assert_eq!(
            set(Dialect::Codex, text)
                .select(HookEvent::PreToolUse, "Bash")
                .len(),
            2
        );
    }

    #[test]
    fn matchers_on_prompt_and_stop_are_ignored_and_invalid_codex_groups_dropped() {
        // T19
        let text = r#"{"hooks":{
            "UserPromptSubmit":[{"matcher":"[","hooks":[{"command":"u"}]}],
            "PreToolUse":[{"matcher":"[","hooks":[{"command":"p"}]},
                          {"matcher":"Bash","hooks":[{"command":"q"}]}]}}"#;
        let cx = set(Dialect::Codex, text);
        assert_eq!(cx.select(HookEvent::UserPromptSubmit, "").len(), 1);
        assert_eq!(cx.groups[&HookEvent::PreToolUse].len(), 1);
        assert!(cx.warnings.iter().any(|w| w.contains("skipped")));
        let cc = set(Dialect::Claude, text);
        assert_eq!(cc.select(HookEvent::UserPromptSubmit, "").len(), 1);
        assert_eq!(cc.groups[&HookEvent::PreToolUse].len(), 2);
        assert_eq!(cc.select(HookEvent::PreToolUse, "[").len(), 0);
        assert_eq!(command_hash("u").len(), 64);
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the hooks file parser.

    use super::*;
    use crate::messages::prop_gen::{config, json_number, json_value, tricky_text};
    use proptest::prelude::*;
    use serde_json::{Map, json};

    fn dialect() -> impl Strategy<Value = Dialect> {
        prop_oneof![Just(Dialect::Claude), Just(Dialect::Codex)]
    }

    /// Where the file came from, as the configuration names it.
    fn origin() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z/._-]{1,20}", tricky_text()]
    }

    /// An event name: real, misspelled, in the wrong case, or anything.
    fn event_name() -> impl Strategy<Value = String> {
        let real = prop::sample::select(HookEvent::ALL.to_vec()).prop_map(|e| e.name().to_owned());
        prop_oneof![
            6 => real.clone(),
            1 => real.clone().prop_map(|n| n.to_lowercase()),
            1 => Just("PreTooluse".to_owned()),
            1 => tricky_text(),
        ]
    }

    /// Anything, or a value of one of the types a field expects.
    fn maybe(good: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        prop_oneof![4 => good, 1 => json_value()]
    }

    fn matcher() -> impl Strategy<Value = Value> {
        let pattern = prop_oneof![
            Just(""),
            Just("*"),
            Just("Bash"),
            Just("Edit|Write"),
            Just("mcp__.*"),
            Just("^(?!Read)"),
            Just("(?i)bash"),
            Just("["),
            Just("a{99999}"),
            Just("\\"),
        ];
        maybe(prop_oneof![
            pattern.prop_map(|p| json!(p)),
            "[a-z|.*+?()\\[\\]{}^$\\\\]{0,10}".prop_map(Value::String),
        ])
    }

    fn timeout() -> impl Strategy<Value = Value> {
        maybe(prop_oneof![
            json_number(),
            Just(json!(-0.0)),
            Just(json!(1e308)),
            Just(json!(0.5)),
            Just(json!(30)),
        ])
    }

    /// A handler object, roughly right.
    fn handler() -> impl Strategy<Value = Value> {
        let kind = maybe(
            prop::sample::select(vec!["command", "prompt", "agent", "http"]).prop_map(|k| json!(k)),
        );
        let command = maybe(prop_oneof![
            "[a-z ./${}_-]{0,20}".prop_map(Value::String),
            Just(json!("   ")),
        ]);
        (
            prop::option::weighted(0.7, kind),
            prop::option::weighted(0.9, command),
            prop::option::weighted(0.4, timeout()),
            prop::option::weighted(0.2, timeout()),
            prop::option::weighted(0.1, maybe(any::<bool>().prop_map(Value::Bool))),
        )
            .prop_map(|(kind, command, timeout, timeout_sec, async_)| {
                let mut h = Map::new();
                for (k, v) in [
                    ("type", kind),
                    ("command", command),
                    ("timeout", timeout),
                    ("timeoutSec", timeout_sec),
                    ("async", async_),
                ] {
                    if let Some(v) = v {
                        h.insert(k.into(), v);
                    }
                }
                Value::Object(h)
            })
    }

    fn group() -> impl Strategy<Value = Value> {
        let group = (
            prop::option::weighted(0.7, matcher()),
            prop::option::weighted(
                0.95,
                maybe(prop::collection::vec(maybe(handler()), 0..4).prop_map(Value::Array)),
            ),
        )
            .prop_map(|(matcher, hooks)| {
                let mut g = Map::new();
                if let Some(m) = matcher {
                    g.insert("matcher".into(), m);
                }
                if let Some(h) = hooks {
                    g.insert("hooks".into(), h);
                }
                Value::Object(g)
            });
        maybe(group)
    }

    /// JSON shaped roughly like a hooks file.
    fn hooks_file() -> impl Strategy<Value = String> {
        let events = prop::collection::vec(
            (
                event_name(),
                maybe(prop::collection::vec(group(), 0..3).prop_map(Value::Array)),
            ),
            0..4,
        )
        .prop_map(|events| Value::Object(events.into_iter().collect()));
        (events, 0u8..4, json_value()).prop_map(|(events, shape, other)| {
            match shape {
                // A settings file with other keys.
                0 | 1 => json!({"hooks": events, "permissions": other}),
                // A bare map of events.
                2 => events,
                // "hooks" of any type.
                _ => json!({ "hooks": other }),
            }
            .to_string()
        })
    }

    /// A hooks file that is right in every part: (event, matcher, commands)
    /// groups; commands padded with blanks, which the parser trims.
    type Valid = Vec<(HookEvent, Option<&'static str>, Vec<(String, Option<f64>)>)>;

    fn valid(dialect: Dialect) -> impl Strategy<Value = Valid> {
        let events: Vec<HookEvent> = HookEvent::ALL
            .into_iter()
            .filter(|e| e.served_by(dialect))
            .collect();
        let matcher = prop::option::of(prop::sample::select(vec![
            "",
            "*",
            "Bash",
            "Edit|Write",
            "mcp__.*",
            "^Read$",
        ]));
        let command = ("[ \t]{0,2}", "[a-z0-9 ./${}_-]{0,24}[a-z]", "[ \t]{0,2}")
            .prop_map(|(a, c, b)| format!("{a}{c}{b}"));
        let seconds = prop::option::of(prop_oneof![0.0..1.0f64, 1.0..100_000.0f64, 1e6..1e9f64]);
        prop::collection::vec(
            (
                prop::sample::select(events),
                matcher,
                prop::collection::vec((command, seconds), 0..4),
            ),
            0..6,
        )
    }

    fn valid_text(dialect: Dialect, groups: &Valid, seconds_key: bool) -> String {
        let mut events: Map<String, Value> = Map::new();
        for (event, matcher, handlers) in groups {
            let handlers: Vec<Value> = handlers
                .iter()
                .map(|(command, secs)| {
                    let mut h = json!({"type": "command", "command": command});
                    if let Some(s) = secs {
                        let key = if dialect == Dialect::Codex && seconds_key {
                            "timeoutSec"
                        } else {
                            "timeout"
                        };
                        h[key] = json!(s);
                    }
                    h
                })
                .collect();
            let mut g = json!({"hooks": handlers});
            if let Some(m) = matcher {
                g["matcher"] = json!(m);
            }
            let list = events.entry(event.name()).or_insert_with(|| json!([]));
            if let Value::Array(list) = list {
                list.push(g);
            }
        }
        json!({"hooks": events}).to_string()
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_text_parses_or_fails_naming_its_file(d in dialect(), origin in origin(), text in prop_oneof![tricky_text(), json_value().prop_map(|v| v.to_string())]) {
            // HOOK-4: a file that cannot be parsed registers no hooks, and
            // says which file it was.
            let named = format!("{origin}: ");
            match HookSet::parse(d, &origin, &text) {
                Ok(set) => {
                    prop_assert_eq!(&set.origin, &origin);
                    prop_assert!(set.warnings.iter().all(|w| w.starts_with(&named)));
                }
                Err(e) => {
                    prop_assert_eq!(&e.origin, &origin);
                    prop_assert!(e.to_string().starts_with(&named));
                }
            }
        }

        #[test]
        fn a_roughly_right_hooks_file_never_panics_and_every_message_names_the_file(
            d in dialect(),
            origin in origin(),
            text in hooks_file(),
        ) {
            // HOOK-3, HOOK-4: unusable parts are errors or warnings, each
            // naming the file; what is kept is a handler that can run.
            let named = format!("{origin}: ");
            match HookSet::parse(d, &origin, &text) {
                Ok(set) => {
                    for w in &set.warnings {
                        prop_assert!(w.starts_with(&named), "{}", w);
                    }
                    for (event, _, h) in set.handlers() {
                        prop_assert!(event.served_by(d));
                        prop_assert!(!h.command.is_empty());
                        prop_assert_eq!(h.command.trim(), h.command.as_str());
                        prop_assert!(h.timeout >= Duration::from_secs(1));
                        prop_assert!(h.timeout <= Duration::from_secs(86_400 * 7).max(DEFAULT_HOOK_TIMEOUT));
                        prop_assert_eq!(&h.hash, &command_hash(&h.command));
                    }
                }
                Err(e) => {
                    prop_assert!(e.to_string().starts_with(&named), "{}", e);
                }
            }
        }

        #[test]
        fn a_valid_hooks_file_keeps_every_handler_in_order(
            (d, groups) in dialect().prop_flat_map(|d| (Just(d), valid(d))),
            seconds_key in any::<bool>(),
        ) {
            // HOOK-3, HOOK-4: every handler, its command trimmed, its
            // timeout in seconds with a one-second floor, in config order.
            let text = valid_text(d, &groups, seconds_key);
            let set = HookSet::parse(d, "hooks.json", &text).unwrap();
            prop_assert!(set.warnings.is_empty(), "{:?}", set.warnings);
            let mut expected: Vec<(HookEvent, String, Duration)> = Vec::new();
            for event in HookEvent::ALL {
                for (e, _, handlers) in &groups {
                    if *e != event {
                        continue;
                    }
                    for (command, secs) in handlers {
                        let timeout = secs
                            .map(|s| Duration::from_secs_f64(s.min(86_400.0 * 7.0)))
                            .unwrap_or(DEFAULT_HOOK_TIMEOUT)
                            .max(Duration::from_secs(1));
                        expected.push((event, command.trim().to_owned(), timeout));
                    }
                }
            }
            let got: Vec<(HookEvent, String, Duration)> = set
                .handlers()
                .map(|(e, _, h)| (e, h.command.clone(), h.timeout))
                .collect();
            // serde_json reads a float back only to within an ulp or so
            // (10460.632539403501 → …403 s vs …404 s): timeouts agree to 1 µs.
            let key = |v: &[(HookEvent, String, Duration)]| {
                v.iter().map(|(e, c, _)| (*e, c.clone())).collect::<Vec<_>>()
            };
            prop_assert_eq!(key(&got), key(&expected));
            for ((_, c, g), (_, _, w)) in got.iter().zip(&expected) {
                prop_assert!(g.abs_diff(*w) <= Duration::from_micros(1), "{c}: {g:?} vs {w:?}");
            }
            let group_count: usize = set.groups.values().map(Vec::len).sum();
            prop_assert_eq!(group_count, groups.len());
        }
    }
}
