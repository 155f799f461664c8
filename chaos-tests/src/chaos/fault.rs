//! The fault kinds the runner injects, and what each one means for the
//! fault-server's flags, the hooks installed, the trigger call and the catalog.

use mcpvisor::Dialect;
use serde::Serialize;

/// Every fault kind the runner can inject. New kinds (hook scripts, browsers)
/// join as variants: the runner never matches on strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// The server exits with `code` before the handshake, every time.
    CrashAtStart {
        /// Exit status.
        code: i32,
    },
    /// The server exits when the `n`-th tools/call arrives.
    CrashAfterCalls {
        /// Which call.
        n: u64,
    },
    /// The `crash` tool exits mid-call.
    CrashMidCall,
    /// `initialize` is never answered.
    HangOnInitialize,
    /// The `hang` tool never answers.
    HangOnCall,
    /// Every call is delayed.
    SlowResponses {
        /// Delay per call.
        ms: u64,
    },
    /// A non-JSON line on stdout during the session.
    NonJsonLines,
    /// A stdout line longer than 8 MiB.
    OverlongLine,
    /// Banner lines on stdout before the handshake.
    NoiseBeforeHandshake {
        /// How many.
        lines: u64,
    },
    /// stdin close and SIGTERM are ignored: only SIGKILL ends it.
    IgnoreSigterm,
    /// A grandchild in the server's process group outlives nothing.
    Grandchild,
    /// A burst of tools/list_changed.
    ListChangedStorm {
        /// Notifications in the burst.
        count: u64,
    },
    /// `echo` listed twice.
    DuplicateNames,
    /// A second server whose tool's public name collides with the first's.
    CollidingNames,
    /// A CallToolResult whose content is not an array.
    InvalidResult,
    /// `isError: true`.
    IsError,
    /// structuredContent violating the output schema.
    SchemaViolation,
    /// A very large text result.
    HugeResult {
        /// Bytes of text.
        bytes: u64,
    },
    /// An audio block.
    AudioContent,
    /// tools/list in pages.
    PaginatedCatalog {
        /// Generated tools.
        tools: u64,
        /// Page size.
        page: u64,
    },
    /// A tool name over 64 characters.
    LongNames,
    /// A tool name with characters outside `[A-Za-z0-9_-]`.
    BadCharNames,
    /// stderr output, then exit, on the first tools/list.
    StderrThenExit,
    /// HTTP: every request answered 401.
    Http401,
    /// HTTP: every tools/call answered 500.
    Http500,
    /// HTTP: the session is lost (404) after `after` calls.
    HttpSessionLoss {
        /// Calls before the loss.
        after: u64,
    },
    /// HTTP: tools/call replies open an SSE stream that then stalls.
    HttpStall,
    /// A Claude Code PreToolUse hook on every call that backgrounds a
    /// long-lived process and exits: the group kill must reap it.
    HookGrandchild,
    /// A Codex PreToolUse hook (timeout 1 s) that hangs, with a background
    /// process, on the trigger call: timeout, group kill, fail open.
    HookHang,
    /// A Claude Code PostToolUse hook printing random bytes and exiting 3.
    HookGarbage,
    /// `echo` answers with valid JSON nested 300 deep (past serde_json's
    /// 128-level parse limit): every echo must end at once, invalid_result.
    DeepJson,
    /// The trigger `echo` freezes the server's only thread: it stops reading
    /// stdin and answers nothing; every later call must still end in time.
    StdinFreeze,
    /// Every `echo` reply arrives in three pieces `ms` apart, after a
    /// server→client ping and a `tools/list_changed`: the client answers the
    /// ping, re-syncs and sends the concurrent calls while replies are half
    /// read (CONN-6).
    SplitReplies {
        /// Pause between the pieces.
        ms: u64,
    },
    /// Replies to concurrent `echo` calls come out of order (a later call
    /// answers first), each after a server→client `ping` whose id is the
    /// call's own id as a string (`"3"` for 3): every call must get its
    /// own answer, whatever the order and the id types (CONN-6, CALL-4).
    ReorderedReplies,
    /// After the trigger phase the runner drives the admin paths against
    /// server `s`: `restart_server`, turning it off and on, removing it and
    /// adding it again; each must leave it ready, with its old process
    /// gone before the new one starts (RECO-3, TRUST-1).
    AdminPaths,
    /// Every workload call carries `bytes` of extra arguments (with
    /// [`Fault::StdinFreeze`]: a server that stops reading with large
    /// arguments queued).
    LargeArgs {
        /// Bytes of padding per call.
        bytes: u64,
    },
    /// The server's secret (`API_KEY`, from the run's secret store) comes
    /// back in every echo result, the `is_error` result and its stderr: no
    /// event, outcome, status or log line may show it (TRUST-2).
    SecretEcho,
    /// Server `s` serves resources only and is idle-stopped after `idle_ms`:
    /// the workload reads resources, some after the idle stop and some
    /// right at its deadline (RECO-6, RES-2).
    ResourcesOnlyIdle {
        /// `idle_stop_after`.
        idle_ms: u64,
    },
    /// After each trigger call, the server's supervisor fails (the `chaos`
    /// feature's `FailForChaos`), mid-outage: its scope restarts it, and the
    /// restart waits for every close the old one had not confirmed.
    SupervisorPanic,
    /// At start the server puts `sleep 1000` in a session of its own
    /// (`setsid`): no group signal reaches it; the runtime's tag in its
    /// environment must (RECO-7).
    DaemonizedGrandchild,
    /// The model endpoint of a tool-loop turn stops sending mid-tool-call
    /// (the turn fails at its idle timeout; nothing is called).
    ModelStall,
    /// The model's stream is cut mid-tool-call (the connection drops).
    ModelCutStream,
    /// The model's stream carries a line that is not JSON.
    ModelGarbageSse,
    /// The browser_use seat holds a browser-native provider whose
    /// browser will not die: its launcher ignores SIGTERM and lingers after
    /// Chromium exits. The run drives the browser (navigate, snapshot), and
    /// the shutdown must still kill and reap it, and report it reaped.
    BrowserWontDie,
    /// A JS mod's `tool.call` handler loops forever on the
    /// trigger call (stopped at its deadline; the call goes on).
    ModHang,
    /// A mod's `tool.call` handler throws on the trigger call.
    ModThrow,
    /// A mod's `tool.call` handler allocates without bound on the trigger
    /// call (stopped by the memory limit; the mod is disabled).
    ModMemory,
    /// The server changes protocol era at every start (session era first,
    /// then the stateless era): the era the runtime remembered is wrong
    /// after a restart (ERA-1).
    EraFlip,
    /// A stateless-era server whose trigger tool answers `input_required`
    /// on every round (ERA-5): the client must give up after its rounds.
    EndlessInput,
    /// A stateless-era server whose trigger tool requires a task and makes
    /// it one that never ends (ERA-6): the call must end at its deadline
    /// and cancel the task on the wire.
    EndlessTask,
    /// A stateless-era server ends its `subscriptions/listen` stream and
    /// adds a tool while it is down, with no notification (ERA-4): the
    /// client must open the stream again and fetch the list, or its
    /// catalog stays short of the server's.
    ListenBreak,
}

/// The echo message on which the mod faults' handlers misbehave.
pub(super) const MOD_TRIGGER: &str = "mod-trigger";

/// The mod a mod fault installs (its `tool.call` handler misbehaves only
/// on the trigger call), or `None`.
pub(super) fn mod_source(fault: &Fault) -> Option<String> {
    let body = match fault {
        Fault::ModHang => "while (true) {}",
        Fault::ModThrow => "throw new Error(\"chaos mod\");",
        Fault::ModMemory => "const a = []; while (true) a.push(new Array(100000).fill(7));",
        _ => return None,
    };
    Some(format!(
        "export function register(on) {{\n  on(\"tool.call\", (e, next) => {{\n    if (e.input && e.input.message === \"{MOD_TRIGGER}\") {{ {body} }}\n    next();\n  }});\n}}\n"
    ))
}

/// What a model fault's turn must end with: its `TurnError` kind and a
/// piece of its message.
pub(super) struct ModelExpectation {
    /// The `TurnError` variant, snake_case.
    pub(super) kind: &'static str,
    /// Text its message contains.
    pub(super) says: &'static str,
}

impl Fault {
    /// The snake_case name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CrashAtStart { .. } => "crash_at_start",
            Self::CrashAfterCalls { .. } => "crash_after_calls",
            Self::CrashMidCall => "crash_mid_call",
            Self::HangOnInitialize => "hang_on_initialize",
            Self::HangOnCall => "hang_on_call",
            Self::SlowResponses { .. } => "slow_responses",
            Self::ReorderedReplies => "reordered_replies",
            Self::AdminPaths => "admin_paths",
            Self::NonJsonLines => "non_json_lines",
            Self::OverlongLine => "overlong_line",
            Self::NoiseBeforeHandshake { .. } => "noise_before_handshake",
            Self::IgnoreSigterm => "ignore_sigterm",
            Self::Grandchild => "grandchild",
            Self::ListChangedStorm { .. } => "list_changed_storm",
            Self::DuplicateNames => "duplicate_names",
            Self::CollidingNames => "colliding_names",
            Self::InvalidResult => "invalid_result",
            Self::IsError => "is_error",
            Self::SchemaViolation => "schema_violation",
            Self::HugeResult { .. } => "huge_result",
            Self::AudioContent => "audio_content",
            Self::PaginatedCatalog { .. } => "paginated_catalog",
            Self::LongNames => "long_names",
            Self::BadCharNames => "bad_char_names",
            Self::StderrThenExit => "stderr_then_exit",
            Self::Http401 => "http_401",
            Self::Http500 => "http_500",
            Self::HttpSessionLoss { .. } => "http_session_loss",
            Self::HttpStall => "http_stall",
            Self::HookGrandchild => "hook_grandchild",
            Self::HookHang => "hook_hang",
            Self::HookGarbage => "hook_garbage",
            Self::DeepJson => "deep_json",
            Self::StdinFreeze => "stdin_freeze",
            Self::SplitReplies { .. } => "split_replies",
            Self::LargeArgs { .. } => "large_args",
            Self::SecretEcho => "secret_echo",
            Self::ResourcesOnlyIdle { .. } => "resources_only_idle",
            Self::SupervisorPanic => "supervisor_panic",
            Self::DaemonizedGrandchild => "daemonized_grandchild",
            Self::ModelStall => "model_stall",
            Self::BrowserWontDie => "browser_wont_die",
            Self::ModHang => "mod_hang",
            Self::ModThrow => "mod_throw",
            Self::ModMemory => "mod_memory",
            Self::EraFlip => "era_flip",
            Self::EndlessInput => "endless_input",
            Self::EndlessTask => "endless_task",
            Self::ListenBreak => "listen_break",
            Self::ModelCutStream => "model_cut_stream",
            Self::ModelGarbageSse => "model_garbage_sse",
        }
    }

    /// The scripted model reply of a model fault (the first round of its
    /// turn): a tool call to `mcp__s__echo` that never completes, or garbage.
    pub(super) fn model_reply(&self) -> Option<crate::model::Reply> {
        use crate::model::{Reply, openai_call_chunks, openai_partial};
        let half = || {
            let chunks =
                openai_call_chunks(&[("x", "mcp__s__echo", r#"{"message":"never"}"#)], true);
            openai_partial(chunks[..2].to_vec())
        };
        match self {
            Self::ModelStall => Some(Reply::Stall(half())),
            Self::ModelCutStream => Some(Reply::Cut(half())),
            Self::ModelGarbageSse => Some(Reply::Sse(format!("{}data: {{not json\n\n", half()))),
            _ => None,
        }
    }

    /// How a model fault's turn must end.
    pub(super) fn expected_turn(&self) -> Option<ModelExpectation> {
        let (kind, says) = match self {
            // The idle timeout fires while the body is being read.
            Self::ModelStall => ("stream", "timed out"),
            Self::ModelCutStream => ("stream", "broke"),
            Self::ModelGarbageSse => ("stream", "unreadable"),
            _ => return None,
        };
        Some(ModelExpectation { kind, says })
    }

    /// The hook this fault installs, if any.
    pub(super) fn hook(&self) -> Option<FaultHook> {
        self.effects().hook
    }

    /// True for the faults of a fault-server served over streamable HTTP.
    pub(super) fn is_http(&self) -> bool {
        matches!(
            self,
            Self::Http401 | Self::Http500 | Self::HttpSessionLoss { .. } | Self::HttpStall
        )
    }

    /// fault-server flags for this fault.
    pub(super) fn server_args(&self) -> Vec<String> {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match self {
            Self::CrashAtStart { code } => vec!["--crash-at-start".into(), code.to_string()],
            Self::CrashAfterCalls { n } => vec!["--crash-after-calls".into(), n.to_string()],
            Self::SlowResponses { ms } => vec!["--slow-ms".into(), ms.to_string()],
            Self::ReorderedReplies => v(&["--reorder-replies"]),
            Self::AdminPaths => Vec::new(),
            Self::NonJsonLines => v(&["--garbage-on-call"]),
            Self::OverlongLine => v(&["--overlong-line"]),
            Self::HangOnInitialize => v(&["--hang-on-initialize"]),
            Self::NoiseBeforeHandshake { lines } => {
                vec!["--garbage-before-handshake".into(), lines.to_string()]
            }
            Self::IgnoreSigterm => v(&["--ignore-sigterm"]),
            Self::Grandchild => v(&["--grandchild"]),
            Self::ListChangedStorm { count } => vec!["--storm".into(), count.to_string()],
            Self::DuplicateNames => v(&["--duplicate-names"]),
            Self::CollidingNames => v(&["--extra-tool", "t__echo"]),
            Self::InvalidResult => v(&["--invalid-result"]),
            Self::HugeResult { bytes } => vec!["--huge-result".into(), bytes.to_string()],
            Self::PaginatedCatalog { tools, page } => vec![
                "--tools".into(),
                tools.to_string(),
                "--page-size".into(),
                page.to_string(),
            ],
            Self::LongNames => v(&["--long-names"]),
            Self::BadCharNames => v(&["--bad-char-names"]),
            Self::StderrThenExit => v(&["--stderr-then-exit", "fatal: config is broken"]),
            Self::Http401 => v(&["--http-fault", "401"]),
            Self::Http500 => v(&["--http-fault", "500"]),
            Self::HttpSessionLoss { after } => {
                vec!["--http-fault".into(), format!("session-loss:{after}")]
            }
            Self::HttpStall => v(&["--http-fault", "stall"]),
            Self::DeepJson => v(&["--deep-echo", "300"]),
            Self::StdinFreeze => v(&["--freeze-on-echo"]),
            Self::SplitReplies { ms } => vec!["--split-replies".into(), ms.to_string()],
            Self::SecretEcho => vec!["--leak-env".into(), SECRET_ENV.into()],
            Self::ResourcesOnlyIdle { .. } => v(&["--resources-only"]),
            Self::DaemonizedGrandchild => v(&["--daemonize"]),
            Self::LargeArgs { .. } | Self::SupervisorPanic => Vec::new(),
            Self::ModelStall | Self::ModelCutStream | Self::ModelGarbageSse => Vec::new(),
            Self::BrowserWontDie => Vec::new(),
            Self::ModHang | Self::ModThrow | Self::ModMemory => Vec::new(),
            Self::EraFlip => v(&["--era-flip"]),
            Self::EndlessInput => v(&["--era", "both", "--input-loop"]),
            Self::EndlessTask => v(&["--era", "both", "--task-tools"]),
            Self::ListenBreak => v(&["--era", "stateless", "--listen-break"]),
            Self::HookGrandchild | Self::HookHang | Self::HookGarbage => Vec::new(),
            Self::CrashMidCall
            | Self::HangOnCall
            | Self::IsError
            | Self::SchemaViolation
            | Self::AudioContent => Vec::new(),
        }
    }

    /// The tool the workload calls to trigger this fault, if any.
    pub(super) fn trigger(&self) -> Option<&'static str> {
        self.effects().trigger
    }

    /// The arguments of the trigger call.
    pub(super) fn trigger_args(&self) -> serde_json::Value {
        match self {
            Self::StdinFreeze => serde_json::json!({"message": "freeze"}),
            Self::ModHang | Self::ModThrow | Self::ModMemory => {
                serde_json::json!({"message": MOD_TRIGGER})
            }
            _ => serde_json::json!({}),
        }
    }

    /// The longest hook this fault makes a call wait for, in seconds.
    pub(super) fn hook_wait_s(&self) -> u64 {
        self.hook()
            .filter(|h| h.event == "PreToolUse")
            .map_or(0, |h| h.timeout_s.min(2))
    }

    /// Tools the fault adds to the catalog (beyond the [`FIXED_TOOLS`]).
    pub(super) fn extra_tools(&self) -> u64 {
        self.effects().extra_tools
    }

    /// True when server `s` lists no tools under this fault.
    pub(super) fn no_tools(&self) -> bool {
        self.effects().no_tools
    }

    /// True when the fault leaves the server answering every workload call:
    /// then each of them must end `ok` (`no_lost_reply`). Faults that lose
    /// the connection, slow it past the timeout, or break `echo` itself do
    /// not promise that.
    pub(super) fn keeps_answering(&self) -> bool {
        match self {
            Self::SlowResponses { .. }
            | Self::ReorderedReplies
            | Self::AdminPaths
            | Self::NonJsonLines
            | Self::NoiseBeforeHandshake { .. }
            | Self::IgnoreSigterm
            | Self::Grandchild
            | Self::ListChangedStorm { .. }
            // `s` registers first and keeps its names (SYNC-4).
            | Self::CollidingNames
            | Self::InvalidResult
            | Self::IsError
            | Self::SchemaViolation
            | Self::HugeResult { .. }
            | Self::AudioContent
            | Self::PaginatedCatalog { .. }
            | Self::LongNames
            | Self::BadCharNames
            | Self::HangOnCall
            | Self::HookGrandchild
            | Self::HookHang
            | Self::HookGarbage
            | Self::SplitReplies { .. }
            | Self::LargeArgs { .. }
            | Self::SecretEcho
            | Self::DaemonizedGrandchild
            | Self::ResourcesOnlyIdle { .. }
            // The model side fails; the server answers every workload call.
            | Self::ModelStall
            | Self::ModelCutStream
            | Self::ModelGarbageSse
            // The browser is beside the server, which answers every call.
            | Self::BrowserWontDie
            // A mod never stops a call: its handler's failure is reported.
            | Self::ModHang
            | Self::ModThrow
            | Self::ModMemory => true,
            // The connection is lost with the crash it comes with.
            Self::EraFlip => false,
            Self::EndlessInput | Self::EndlessTask | Self::ListenBreak => true,
            Self::CrashAtStart { .. }
            | Self::CrashAfterCalls { .. }
            | Self::CrashMidCall
            | Self::HangOnInitialize
            | Self::OverlongLine
            | Self::DuplicateNames
            | Self::StderrThenExit
            | Self::Http401
            | Self::Http500
            | Self::HttpSessionLoss { .. }
            | Self::HttpStall
            | Self::DeepJson
            | Self::StdinFreeze
            | Self::SupervisorPanic => false,
        }
    }

    /// The outcome kind this fault's trigger call must end with (its
    /// consequence in docs/chaos.md), when it has one for certain.
    pub(super) fn expected_trigger(&self) -> Option<&'static str> {
        Some(match self {
            Self::HangOnCall | Self::HttpStall | Self::StdinFreeze => "timeout",
            Self::CrashMidCall | Self::OverlongLine => "transport_lost_during_call",
            Self::HookHang => "ok",
            Self::ModHang | Self::ModThrow | Self::ModMemory => "ok",
            Self::InvalidResult | Self::DeepJson => "invalid_result",
            // Past max_input_rounds (10), within the call's deadline.
            Self::EndlessInput => "invalid_result",
            // At the call's deadline, the task cancelled on the wire.
            Self::EndlessTask => "timeout",
            Self::ListenBreak => "ok",
            Self::IsError | Self::SecretEcho => "server_error",
            Self::SchemaViolation => "output_schema_violation",
            Self::HugeResult { .. } | Self::AudioContent | Self::ListChangedStorm { .. } => "ok",
            // Answered `ok` only when the raw name reached the server.
            Self::LongNames | Self::BadCharNames => "ok",
            // CONN-6: the garbage line is skipped; the reply after it counts.
            Self::NonJsonLines => "ok",
            _ => return None,
        })
    }

    /// The outcome kind every workload call must end with, when the fault
    /// decides it for all of them: a server that never connects gives
    /// `server_not_ready` (its name is known, its tools are not there); a
    /// live server whose catalog was rejected gives `unknown_tool`; one
    /// whose every call is answered HTTP 500 gives `transport_lost_during_call`.
    pub(super) fn expected_workload(&self) -> Option<&'static str> {
        match self {
            Self::CrashAtStart { .. }
            | Self::HangOnInitialize
            | Self::StderrThenExit
            | Self::Http401 => Some("server_not_ready"),
            Self::DuplicateNames => Some("unknown_tool"),
            Self::Http500 => Some("transport_lost_during_call"),
            // Hooks the call must survive: a PreToolUse hook whose
            // backgrounded process the group kill takes (HOOK-8), and a
            // PostToolUse hook that prints garbage and exits 3 (a
            // non-blocking error: the result stands).
            Self::HookGrandchild | Self::HookGarbage => Some("ok"),
            _ => None,
        }
    }

    /// Outcome kinds at least one workload call each must end with: the
    /// call the server died on (`crash_after_calls`: it exits when the n-th
    /// call arrives, and every plan makes at least n calls); the call
    /// answered 404 for its lost session, then calls on the new session;
    /// the calls after a supervisor's restart. (That the 404'd call is
    /// never replayed is `no_double_send`'s.)
    pub(super) fn expected_in_workload(&self) -> &'static [&'static str] {
        match self {
            Self::CrashAfterCalls { .. } => &["transport_lost_during_call"],
            _ => &[],
        }
    }

    /// The server comes back after this fault's trigger (a reconnect, a new
    /// session, a restarted supervisor): a workload call made after the
    /// trigger ends `ok`. Counted after the trigger only: calls made before
    /// the fault prove nothing.
    pub(super) fn recovers(&self) -> bool {
        matches!(
            self,
            Self::CrashMidCall
                | Self::HttpSessionLoss { .. }
                | Self::SupervisorPanic
                | Self::AdminPaths
                | Self::EraFlip
        )
    }

    /// How often the server must have been asked `method`, at least, over
    /// the run (its request log): a lost HTTP session is followed by a new
    /// session's `initialize`; a reply split around a `tools/list_changed`
    /// still leads to the re-sync's `tools/list` (CONN-6: the client reads
    /// on while a reply is half read).
    pub(super) fn expected_requests_at_least(&self) -> Option<(&'static str, usize)> {
        match self {
            Self::HttpSessionLoss { .. } => Some(("initialize", 2)),
            Self::SplitReplies { .. } => Some(("tools/list", 2)),
            // The session era's probe, and the probe again once the
            // remembered era failed against the upgraded server.
            Self::EraFlip => Some(("server/discover", 2)),
            // The task the trigger call gave up on was cancelled (ERA-6).
            Self::EndlessTask => Some(("tasks/cancel", 1)),
            // The stream the server ended was opened again (ERA-4).
            Self::ListenBreak => Some(("subscriptions/listen", 2)),
            _ => None,
        }
    }

    /// The least time every workload call must have taken: the delay the
    /// server adds, waited out (a call answered sooner was not this server's
    /// answer).
    pub(super) fn expected_least_call_time(&self) -> Option<std::time::Duration> {
        match self {
            Self::SlowResponses { ms } => Some(std::time::Duration::from_millis(*ms)),
            _ => None,
        }
    }

    /// Text every workload call's notes must contain: the PostToolUse hook's
    /// exit 3 is reported to the user (Claude Code's non-blocking error).
    pub(super) fn expected_workload_note(&self) -> Option<&'static str> {
        match self {
            Self::HookGarbage => Some("non-blocking status code 3"),
            _ => None,
        }
    }

    /// A process the server starts and names on stderr (`<prefix><pid>`):
    /// it must be gone after the shutdown, and be in the report's `escaped`
    /// exactly when it left the server's process group (RECO-7): the
    /// grandchild dies with its group, the daemon is found by its tag.
    pub(super) fn expected_gone(&self) -> Option<(&'static str, bool)> {
        match self {
            Self::Grandchild => Some(("grandchild pid ", false)),
            Self::DaemonizedGrandchild => Some(("daemon pid ", true)),
            _ => None,
        }
    }

    /// Text the trigger call's notes must contain (what the user is told).
    pub(super) fn expected_trigger_note(&self) -> Option<&'static str> {
        match self {
            // HOOK-3: the hung hook was killed at its 1 s timeout; the call
            // went on (fail open) with a note saying so.
            Self::HookHang => Some("timed out after 1000 ms"),
            // MOD-3: reported in the call's notes; the call went on.
            Self::ModHang => Some("did not finish within 200 ms"),
            Self::ModThrow => Some("threw: chaos mod"),
            Self::ModMemory => Some("exceeded the memory limit"),
            _ => None,
        }
    }

    /// Text the server's status must show at the end of the run (the error
    /// quoting the server's own words, or naming the cause).
    pub(super) fn expected_in_status(&self) -> Option<String> {
        let text = match self {
            Self::CrashAtStart { .. } => "fatal: boom at start",
            Self::StderrThenExit => "fatal: config is broken",
            Self::Http401 => "the server rejected the credentials (HTTP 401)",
            // SYNC-4: the later server, `s__t`, ends with zero tools.
            Self::CollidingNames => {
                "tool name \\\"mcp__s__t__echo\\\" is already registered by server \\\"s\\\""
            }
            // SYNC-3: the whole catalog is rejected, and the status says why.
            Self::DuplicateNames => "duplicate tool name \\\"echo\\\" in one catalog",
            // CONN-6: every banner line before the handshake was skipped and counted.
            Self::NoiseBeforeHandshake { lines } => {
                return Some(format!("\"non_json_lines\":{lines}"));
            }
            _ => return None,
        };
        Some(text.to_owned())
    }

    /// How many `tools/list` requests the server must have received over the
    /// run: the connect's, the sync the first notification starts, and one
    /// follow-up for the rest of the burst (SYNC-5).
    ///
    /// A paginated catalog is fetched once, page by page (SYNC-3): one
    /// request per page of the fixed tools plus the generated ones.
    /// `ignore_sigterm`, alone in its scenario: the shutdown must have gone
    /// through the whole close sequence (CONN-8: stdin EOF ignored, 1 s;
    /// SIGTERM ignored, 1.5 s; then SIGKILL), so it takes at least this
    /// long and reaps the server.
    pub(super) fn expected_shutdown_at_least(&self) -> Option<std::time::Duration> {
        match self {
            Self::IgnoreSigterm => Some(std::time::Duration::from_millis(2300)),
            _ => None,
        }
    }

    /// `large_args`: the size of the `pad` argument every echo the server
    /// logged must carry whole (nothing cut on the way, CALL-2).
    pub(super) fn expected_pad(&self) -> Option<usize> {
        match self {
            Self::LargeArgs { bytes } => usize::try_from(*bytes).ok(),
            _ => None,
        }
    }

    /// A tool the scope's published catalog must hold just before the
    /// shutdown: one the server added after the start, which only a
    /// re-sync shows.
    pub(super) fn expected_published_tool(&self) -> Option<&'static str> {
        match self {
            Self::ListenBreak => Some("mcp__s__after_break"),
            _ => None,
        }
    }

    pub(super) fn expected_lists(&self) -> Option<usize> {
        match self {
            Self::ListChangedStorm { .. } => Some(3),
            Self::PaginatedCatalog { tools, page } => {
                Some((FIXED_TOOLS + tools).div_ceil((*page).max(1)) as usize)
            }
            _ => None,
        }
    }

    /// What this fault asks of a run besides the fault-server's flags.
    fn effects(&self) -> Effects {
        match self {
            Self::CrashAtStart { .. }
            | Self::CrashAfterCalls { .. }
            | Self::HangOnInitialize
            | Self::SlowResponses { .. }
            | Self::ReorderedReplies
            | Self::AdminPaths
            | Self::NoiseBeforeHandshake { .. }
            | Self::IgnoreSigterm
            | Self::Grandchild
            | Self::DuplicateNames
            | Self::StderrThenExit
            | Self::Http401
            | Self::Http500
            | Self::HttpSessionLoss { .. }
            | Self::SplitReplies { .. }
            | Self::LargeArgs { .. }
            | Self::DaemonizedGrandchild
            | Self::SupervisorPanic
            | Self::ModelStall
            | Self::ModelCutStream
            | Self::ModelGarbageSse
            | Self::BrowserWontDie
            | Self::EraFlip => Effects::NONE,
            Self::ModHang | Self::ModThrow | Self::ModMemory => Effects::trigger("echo"),
            Self::SecretEcho => Effects::trigger("is_error"),
            Self::ResourcesOnlyIdle { .. } => Effects::NONE.removing_tools(),
            Self::CrashMidCall => Effects::trigger("crash"),
            Self::HangOnCall | Self::HttpStall => Effects::trigger("hang"),
            Self::NonJsonLines => Effects::trigger("garbage"),
            Self::OverlongLine => Effects::trigger("overlong").adding(1),
            Self::ListChangedStorm { .. } => Effects::trigger("storm").adding(1),
            Self::InvalidResult => Effects::trigger("invalid").adding(1),
            Self::EndlessInput => Effects::trigger("input_loop").adding(1),
            Self::EndlessTask => Effects::trigger("task_forever").adding(4),
            // `break_listen`, and `before_break`, which becomes `after_break`
            // (expected_published_tool).
            Self::ListenBreak => Effects::trigger("break_listen").adding(2),
            Self::IsError => Effects::trigger("is_error"),
            Self::SchemaViolation => Effects::trigger("structured_bad"),
            Self::HugeResult { .. } => Effects::trigger("huge").adding(1),
            Self::AudioContent => Effects::trigger("audio"),
            Self::PaginatedCatalog { tools, .. } => Effects::NONE.adding(*tools),
            // SYNC-1 end to end: the hashed / replaced public name is called,
            // and the server must get its own (raw) name on the wire.
            Self::LongNames => Effects::trigger(LONG_TOOL_NAME).adding(1),
            Self::BadCharNames => Effects::trigger(BAD_TOOL_NAME).adding(1),
            Self::CollidingNames => Effects::NONE.adding(1),
            Self::HookGrandchild => Effects::NONE.hook(FaultHook {
                dialect: Dialect::Claude,
                event: "PreToolUse",
                matcher: "mcp__s__.*",
                lingers: true,
                command: "sleep 0.05",
                timeout_s: 10,
            }),
            Self::HookHang => Effects::trigger("structured_ok").hook(FaultHook {
                dialect: Dialect::Codex,
                event: "PreToolUse",
                matcher: "structured_ok",
                lingers: true,
                command: "sleep 30",
                timeout_s: 1,
            }),
            Self::DeepJson => Effects::trigger("echo"),
            Self::StdinFreeze => Effects::trigger("echo"),
            Self::HookGarbage => Effects::NONE.hook(FaultHook {
                dialect: Dialect::Claude,
                event: "PostToolUse",
                matcher: "",
                lingers: false,
                command: "head -c 200 /dev/urandom; exit 3",
                timeout_s: 10,
            }),
        }
    }
}

/// What a fault asks of a run besides the fault-server's flags.
#[derive(Debug, Clone, Copy)]
struct Effects {
    /// The tool whose call triggers the fault.
    trigger: Option<&'static str>,
    /// Tools the fault adds to server `s`'s catalog.
    extra_tools: u64,
    /// The hook the fault installs.
    hook: Option<FaultHook>,
    /// The server lists no tools at all (its catalog is empty by design).
    no_tools: bool,
}

impl Effects {
    /// Nothing beyond the flags.
    const NONE: Self = Self {
        trigger: None,
        extra_tools: 0,
        hook: None,
        no_tools: false,
    };

    /// Triggered by a call of `tool`.
    const fn trigger(tool: &'static str) -> Self {
        Self {
            trigger: Some(tool),
            ..Self::NONE
        }
    }

    /// Also adds `tools` tools to the catalog.
    const fn adding(self, tools: u64) -> Self {
        Self {
            extra_tools: tools,
            ..self
        }
    }

    /// The server lists no tools.
    const fn removing_tools(self) -> Self {
        Self {
            no_tools: true,
            ..self
        }
    }

    /// Also installs `hook`.
    const fn hook(self, hook: FaultHook) -> Self {
        Self {
            hook: Some(hook),
            ..self
        }
    }
}

/// A command hook a fault installs in the runtime's hook files.
#[derive(Debug, Clone, Copy)]
pub(super) struct FaultHook {
    /// Which dialect's file it goes in.
    pub(super) dialect: Dialect,
    /// The hook event (`PreToolUse`, `PostToolUse`).
    pub(super) event: &'static str,
    /// The group's matcher (empty: every tool).
    pub(super) matcher: &'static str,
    /// Whether the hook first backgrounds a long-lived process (which the
    /// group kill must reap).
    lingers: bool,
    /// The shell command (after the lingering process, if any).
    command: &'static str,
    /// The hook's own timeout, in seconds.
    pub(super) timeout_s: u64,
}

impl FaultHook {
    /// The shell command; a lingering process carries `--tag {tag}` so the
    /// sampler tracks it.
    pub(super) fn command(&self, tag: &str) -> String {
        if self.lingers {
            format!("sh -c 'sleep 60; true # --tag {tag}' & {}", self.command)
        } else {
            self.command.to_owned()
        }
    }
}

/// The environment variable every stdio server of a run gets its secret in.
pub(super) const SECRET_ENV: &str = "API_KEY";

/// The ten tools every fault-server lists.
pub(super) const FIXED_TOOLS: u64 = 10;

/// The 80-character tool name of fault-server's `--long-names` (its public
/// name is hashed, SYNC-1).
pub const LONG_TOOL_NAME: &str =
    "a_tool_name_that_is_much_longer_than_sixty_four_characters_to_exercise_hashing_x";
/// The tool name of fault-server's `--bad-char-names` (its public name has
/// the characters replaced, and is hashed).
pub const BAD_TOOL_NAME: &str = "read file.v2/😀";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lingering_hook_backgrounds_a_tagged_process_before_its_command() {
        let grandchild = Fault::HookGrandchild.hook().unwrap();
        assert_eq!(
            grandchild.command("run-h"),
            "sh -c 'sleep 60; true # --tag run-h' & sleep 0.05"
        );
        let garbage = Fault::HookGarbage.hook().unwrap();
        assert_eq!(garbage.command("run-h"), "head -c 200 /dev/urandom; exit 3");
        assert_eq!(Fault::HookHang.trigger(), Some("structured_ok"));
        assert!(Fault::IsError.hook().is_none());
    }
}
