//! The chaos runner (CHAOS-1..3): seeded scenarios that drive the real runtime
//! against `fault-server`, and the invariants checked after every scenario.
//!
//! A scenario is a fault plan (derived from the seed) plus a workload:
//! connect, sequential and concurrent calls, the fault's trigger, more calls,
//! shutdown. While it runs, a sampler walks `/proc` every few milliseconds and
//! a recorder keeps every runtime event; afterwards the invariants judge what
//! was seen. The same seed always gives the same plan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpvisor::{
    CallOptions, ReconnectPolicy, Runtime, RuntimeEvent, Scope, ServerConfig, ServerState,
};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{descendants_of, fault_server_path, process_alive, unique_temp_path, wait_gone};

// ===== Seeds =====

/// splitmix64: a tiny, well-known generator; enough to derive fault parameters.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator for `seed` mixed with a stream id (the scenario index).
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

// ===== Faults =====

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
        }
    }

    /// The hook this fault installs: (Codex?, event, matcher, command,
    /// timeout s). Every process a hook leaves carries `--tag {tag}` so the
    /// sampler tracks it.
    fn hook(&self, tag: &str) -> Option<(bool, &'static str, &'static str, String, u64)> {
        let linger = format!("sh -c 'sleep 60; true # --tag {tag}' &");
        match self {
            Self::HookGrandchild => Some((
                false,
                "PreToolUse",
                "mcp__s__.*",
                format!("{linger} sleep 0.05"),
                10,
            )),
            Self::HookHang => Some((
                true,
                "PreToolUse",
                "structured_ok",
                format!("{linger} sleep 30"),
                1,
            )),
            Self::HookGarbage => Some((
                false,
                "PostToolUse",
                "",
                "head -c 200 /dev/urandom; exit 3".into(),
                10,
            )),
            _ => None,
        }
    }

    fn is_http(&self) -> bool {
        matches!(
            self,
            Self::Http401 | Self::Http500 | Self::HttpSessionLoss { .. } | Self::HttpStall
        )
    }

    /// fault-server flags for this fault.
    fn server_args(&self) -> Vec<String> {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match self {
            Self::CrashAtStart { code } => vec!["--crash-at-start".into(), code.to_string()],
            Self::CrashAfterCalls { n } => vec!["--crash-after-calls".into(), n.to_string()],
            Self::SlowResponses { ms } => vec!["--slow-ms".into(), ms.to_string()],
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
            Self::HookGrandchild | Self::HookHang | Self::HookGarbage => Vec::new(),
            Self::CrashMidCall
            | Self::HangOnCall
            | Self::IsError
            | Self::SchemaViolation
            | Self::AudioContent => Vec::new(),
        }
    }

    /// The tool the workload calls to trigger this fault, if any.
    fn trigger(&self) -> Option<&'static str> {
        match self {
            Self::CrashMidCall => Some("crash"),
            Self::HangOnCall | Self::HttpStall => Some("hang"),
            Self::NonJsonLines => Some("garbage"),
            Self::OverlongLine => Some("overlong"),
            Self::ListChangedStorm { .. } => Some("storm"),
            Self::InvalidResult => Some("invalid"),
            Self::IsError => Some("is_error"),
            Self::SchemaViolation => Some("structured_bad"),
            Self::HugeResult { .. } => Some("huge"),
            Self::AudioContent => Some("audio"),
            Self::HookHang => Some("structured_ok"),
            _ => None,
        }
    }

    /// Tools the fault adds to the catalog (beyond the ten fixed ones).
    fn extra_tools(&self) -> u64 {
        match self {
            Self::OverlongLine
            | Self::ListChangedStorm { .. }
            | Self::InvalidResult
            | Self::HugeResult { .. }
            | Self::LongNames
            | Self::BadCharNames
            | Self::CollidingNames => 1,
            Self::PaginatedCatalog { tools, .. } => *tools,
            _ => 0,
        }
    }
}

/// The ten tools every fault-server lists.
const FIXED_TOOLS: u64 = 10;

// ===== Scenarios =====

/// A scenario: a name, the faults it injects (params from the seed).
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Name (stable across seeds).
    pub name: &'static str,
    /// The seed its plan came from.
    pub seed: u64,
    /// The fault plan.
    pub faults: Vec<Fault>,
    /// Sequential echo calls before and after the trigger.
    pub calls: u64,
    /// Concurrent echo calls.
    pub concurrent: u64,
}

/// Every scenario of the catalogue, with parameters drawn from `seed`.
pub fn scenarios(seed: u64) -> Vec<Scenario> {
    type Make = fn(&mut SeededRng) -> Vec<Fault>;
    let table: Vec<(&'static str, Make)> = vec![
        ("crash_at_start", |r| {
            vec![Fault::CrashAtStart {
                code: r.range(1, 9) as i32,
            }]
        }),
        ("crash_after_calls", |r| {
            vec![Fault::CrashAfterCalls { n: r.range(2, 6) }]
        }),
        ("crash_mid_call", |_| vec![Fault::CrashMidCall]),
        ("hang_on_initialize", |_| vec![Fault::HangOnInitialize]),
        ("hang_on_call", |_| vec![Fault::HangOnCall]),
        ("slow_responses", |r| {
            vec![Fault::SlowResponses { ms: r.range(5, 40) }]
        }),
        ("non_json_lines", |_| vec![Fault::NonJsonLines]),
        ("overlong_line", |_| vec![Fault::OverlongLine]),
        ("noise_before_handshake", |r| {
            vec![Fault::NoiseBeforeHandshake {
                lines: r.range(1, 20),
            }]
        }),
        ("ignore_sigterm", |_| vec![Fault::IgnoreSigterm]),
        ("grandchild", |_| vec![Fault::Grandchild]),
        ("list_changed_storm", |r| {
            vec![Fault::ListChangedStorm {
                count: r.range(10, 100),
            }]
        }),
        ("duplicate_names", |_| vec![Fault::DuplicateNames]),
        ("colliding_names", |_| vec![Fault::CollidingNames]),
        ("invalid_result", |_| vec![Fault::InvalidResult]),
        ("is_error", |_| vec![Fault::IsError]),
        ("schema_violation", |_| vec![Fault::SchemaViolation]),
        ("huge_result", |r| {
            vec![Fault::HugeResult {
                bytes: r.range(1, 4) * 1024 * 1024,
            }]
        }),
        ("audio_content", |_| vec![Fault::AudioContent]),
        ("paginated_catalog", |r| {
            vec![Fault::PaginatedCatalog {
                tools: r.range(20, 300),
                page: r.range(3, 50),
            }]
        }),
        ("long_and_bad_names", |_| {
            vec![Fault::LongNames, Fault::BadCharNames]
        }),
        ("stderr_then_exit", |_| vec![Fault::StderrThenExit]),
        ("http_401", |_| vec![Fault::Http401]),
        ("http_500", |_| vec![Fault::Http500]),
        ("http_session_loss", |r| {
            vec![Fault::HttpSessionLoss {
                after: r.range(1, 4),
            }]
        }),
        ("http_stall", |_| vec![Fault::HttpStall]),
        ("hook_grandchild", |_| vec![Fault::HookGrandchild]),
        ("hook_hang", |_| vec![Fault::HookHang]),
        ("hook_garbage", |_| vec![Fault::HookGarbage]),
        // Combinations: a connection that fails while its process refuses to die
        // is what the close barrier exists for (RECO-3).
        ("overlong_line_stubborn", |_| {
            vec![Fault::OverlongLine, Fault::IgnoreSigterm]
        }),
        ("crash_mid_call_with_grandchild", |_| {
            vec![Fault::CrashMidCall, Fault::Grandchild]
        }),
    ];
    table
        .into_iter()
        .enumerate()
        .map(|(i, (name, make))| {
            let mut rng = SeededRng::new(seed, i as u64);
            let faults = make(&mut rng);
            Scenario {
                name,
                seed,
                faults,
                calls: rng.range(3, 8),
                concurrent: rng.range(2, 16),
            }
        })
        .collect()
}

// ===== Invariants =====

/// The invariants of CHAOS-2, each a named check with a verdict per scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// No descendant of the runner alive after shutdown.
    NoOrphans,
    /// Never two live children of one server.
    NoOverlap,
    /// The registry never shows a half catalog or two generations of one server.
    OneGeneration,
    /// Attempts ≤ max_attempts and delays within the schedule.
    BudgetRespected,
    /// No tool call arrives at a server twice.
    NoDoubleSend,
    /// Every call gets exactly one outcome.
    OneOutcomePerCall,
    /// The shutdown report arrives within its deadline, clean.
    ShutdownWithinDeadline,
    /// Memory stays bounded (soak only).
    BoundedMemory,
}

impl Invariant {
    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoOrphans => "no_orphans",
            Self::NoOverlap => "no_overlap",
            Self::OneGeneration => "one_generation",
            Self::BudgetRespected => "budget_respected",
            Self::NoDoubleSend => "no_double_send",
            Self::OneOutcomePerCall => "one_outcome_per_call",
            Self::ShutdownWithinDeadline => "shutdown_within_deadline",
            Self::BoundedMemory => "bounded_memory",
        }
    }
}

/// A verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Held.
    Pass,
    /// Violated, with what was seen.
    Fail(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pass => f.write_str("pass"),
            Self::Fail(_) => f.write_str("fail"),
        }
    }
}

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Scenario name.
    pub name: String,
    /// Seed.
    pub seed: u64,
    /// Fault names.
    pub faults: Vec<String>,
    /// The fault plan with its parameters.
    pub plan: Vec<Fault>,
    /// Verdict per invariant.
    pub invariants: BTreeMap<Invariant, Verdict>,
    /// Wall time.
    pub duration_ms: u64,
    /// Calls issued and their outcome kinds.
    pub outcomes: BTreeMap<String, u64>,
}

impl ScenarioReport {
    /// The invariants that failed.
    pub fn violations(&self) -> Vec<(Invariant, String)> {
        self.invariants
            .iter()
            .filter_map(|(i, v)| match v {
                Verdict::Fail(why) => Some((*i, why.clone())),
                Verdict::Pass => None,
            })
            .collect()
    }
}

/// Runner options.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Deliberately break the runtime: skip the close barrier (to show that
    /// `no_overlap` can fail).
    pub break_close_barrier: bool,
    /// Check memory (soak).
    pub check_memory: bool,
}

// ===== Observation =====

#[derive(Default)]
struct Observed {
    /// Every pid of this run ever seen: tagged server processes and their descendants.
    seen: HashSet<u32>,
    /// Overlap evidence: server tag → (pids alive together).
    overlaps: Vec<String>,
    /// one_generation violations seen at events.
    generation_problems: Vec<String>,
}

/// Command line of `pid`, NUL-separated arguments joined by spaces.
fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// `tags` are servers' (never two alive at once); `tracked` only are followed
/// for orphans (hook processes, many at once by design).
fn sampler(
    observed: Arc<Mutex<Observed>>,
    tags: Vec<String>,
    tracked: Vec<String>,
    exclude: Arc<Mutex<HashSet<u32>>>,
    stop: tokio_util_stop::Stop,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let me = std::process::id();
        while !stop.is_set() {
            let excluded = exclude.lock().map(|e| e.clone()).unwrap_or_default();
            let pids: Vec<u32> = descendants_of(me)
                .into_iter()
                .filter(|p| !excluded.contains(p))
                .collect();
            let mut per_tag: HashMap<&str, Vec<u32>> = HashMap::new();
            for &pid in &pids {
                if !process_alive(pid) {
                    continue;
                }
                let cmd = cmdline(pid);
                for tag in tags.iter().chain(&tracked) {
                    if cmd.contains(&format!("--tag {tag} "))
                        || cmd.ends_with(&format!("--tag {tag}"))
                    {
                        per_tag.entry(tag.as_str()).or_default().push(pid);
                    }
                }
            }
            // Ours: the processes carrying one of our tags, and everything below them
            // (a grandchild), so runs in parallel never judge each other's processes.
            let ours: Vec<u32> = per_tag
                .values()
                .flatten()
                .flat_map(|p| crate::process_tree(*p))
                .collect();
            if let Ok(mut o) = observed.lock() {
                o.seen.extend(ours);
                for (tag, live) in per_tag {
                    if tracked.iter().any(|t| t == tag) {
                        continue;
                    }
                    // A child of a tagged process (e.g. a grandchild between fork
                    // and exec, which still shows its parent's command line) is
                    // not a second server.
                    let servers: Vec<u32> = live
                        .iter()
                        .copied()
                        .filter(|p| !crate::parent_of(*p).is_some_and(|pp| live.contains(&pp)))
                        .collect();
                    if servers.len() > 1 {
                        let live = servers;
                        o.overlaps
                            .push(format!("{tag}: pids {live:?} alive at once"));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// A tiny stop flag (no extra dependency).
mod tokio_util_stop {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Clone, Default)]
    pub(super) struct Stop(Arc<AtomicBool>);

    impl Stop {
        pub(super) fn set(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        pub(super) fn is_set(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

/// A runner-owned fault-server over HTTP.
struct HttpPeer {
    child: tokio::process::Child,
    url: String,
}

async fn start_http_peer(args: Vec<String>) -> Result<HttpPeer, String> {
    let mut child = tokio::process::Command::new(fault_server_path())
        .args(["--http", "0"])
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the HTTP fault-server: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("listening on ") {
                return Some(url.trim().to_owned());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or("the HTTP fault-server did not announce its port")?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(HttpPeer { child, url })
}

fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(160),
        max_attempts: 3,
        jitter: false,
    }
}

const TOOL_CALL_TIMEOUT: Duration = Duration::from_millis(800);
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(15);

/// Resident set size of this process in KiB (from /proc/self/status).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Run one scenario and judge it.
pub async fn run_scenario(sc: &Scenario, opts: &RunOptions) -> ScenarioReport {
    let started = Instant::now();
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let run_id = format!("{}-{}-{}-{run}", sc.name, sc.seed, std::process::id());
    let log = unique_temp_path(&format!("{}-requests.log", sc.name));
    let _ = std::fs::remove_file(&log);
    let mut server_args: Vec<String> =
        vec!["--log-requests".into(), log.to_string_lossy().into_owned()];
    for f in &sc.faults {
        server_args.extend(f.server_args());
    }
    let http = sc.faults.iter().any(Fault::is_http);
    let colliding = sc.faults.contains(&Fault::CollidingNames);
    let main_tag = format!("{run_id}-s");
    let other_tag = format!("{run_id}-s__t");
    let tags = vec![main_tag.clone(), other_tag.clone()];
    let observed = Arc::new(Mutex::new(Observed::default()));
    let exclude = Arc::new(Mutex::new(HashSet::new()));
    let stop = tokio_util_stop::Stop::default();
    let hook_tag = format!("{run_id}-h");
    let sampler = sampler(
        observed.clone(),
        tags,
        vec![hook_tag.clone()],
        exclude.clone(),
        stop.clone(),
    );

    // The runtime and its servers.
    let mut builder = Runtime::builder();
    let mut hook_files = Vec::new();
    let hooks: Vec<_> = sc.faults.iter().filter_map(|f| f.hook(&hook_tag)).collect();
    if !hooks.is_empty() {
        let mut settings = mcpvisor::HookSettings::default();
        for codex in [false, true] {
            let mut events: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
            for (_, event, matcher, command, timeout) in hooks.iter().filter(|h| h.0 == codex) {
                events
                    .entry(event)
                    .or_default()
                    .push(json!({"matcher": matcher,
                    "hooks": [{"type": "command", "command": command, "timeout": timeout}]}));
            }
            if events.is_empty() {
                continue;
            }
            let path = unique_temp_path(&format!("{}-hooks-{codex}.json", sc.name));
            let _ = std::fs::write(&path, json!({ "hooks": events }).to_string());
            if codex {
                settings.codex = Some(path.clone());
            } else {
                settings.claude = Some(path.clone());
            }
            hook_files.push(path);
        }
        builder = builder.hooks(settings);
    }
    if opts.break_close_barrier {
        builder = builder.skip_close_barrier_for_chaos();
    }
    let mut problems: Vec<String> = Vec::new();
    if !fault_server_path().exists() {
        problems.push(format!(
            "{} does not exist: build it with cargo build -p mcpvisor-chaos --bins",
            fault_server_path().display()
        ));
    }
    let runtime = match builder.start().await {
        Ok(r) => r,
        Err(e) => {
            stop.set();
            let _ = sampler.await;
            let mut invariants = BTreeMap::new();
            invariants.insert(
                Invariant::ShutdownWithinDeadline,
                Verdict::Fail(format!("runtime did not start: {e}")),
            );
            return report(sc, invariants, started, BTreeMap::new());
        }
    };
    let mut events = runtime.subscribe();
    let recorded: Arc<Mutex<Vec<(Instant, RuntimeEvent)>>> = Arc::default();
    // A catalog is whole or empty: server "s" lists the fixed tools plus the
    // fault's extras (a duplicate name rejects it whole); "s__t" the fixed ones.
    let mut expected: HashMap<String, u64> = HashMap::new();
    let extras: u64 = sc.faults.iter().map(Fault::extra_tools).sum();
    let whole = if sc.faults.contains(&Fault::DuplicateNames) {
        0
    } else {
        FIXED_TOOLS + extras
    };
    expected.insert("s".into(), whole);
    expected.insert("s__t".into(), FIXED_TOOLS);
    let recorder = {
        let recorded = recorded.clone();
        let rt = runtime.clone();
        let observed = observed.clone();
        let expected = expected.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(ev) => {
                        if matches!(
                            ev,
                            RuntimeEvent::CatalogChanged { .. } | RuntimeEvent::ServerStatus(_)
                        ) {
                            check_generations(&rt, &observed, &expected);
                        }
                        if let Ok(mut r) = recorded.lock() {
                            r.push((Instant::now(), ev));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        if let Ok(mut o) = observed.lock() {
                            o.generation_problems
                                .push(format!("event recorder lagged by {n}"));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        })
    };

    let mut peer = None;
    let mut configs = Vec::new();
    let tagged = |tag: &str, extra: &[String]| {
        let mut a = vec!["--tag".to_owned(), tag.to_owned()];
        a.extend(extra.iter().cloned());
        a
    };
    if http {
        match start_http_peer(tagged(&main_tag, &server_args)).await {
            Ok(p) => {
                if let (Some(pid), Ok(mut e)) = (p.child.id(), exclude.lock()) {
                    e.insert(pid);
                }
                configs.push(ServerConfig::http("s", p.url.clone()));
                peer = Some(p);
            }
            Err(e) => problems.push(e),
        }
    } else {
        configs.push(ServerConfig::stdio(
            "s",
            fault_server_path().to_string_lossy(),
            tagged(&main_tag, &server_args),
        ));
        if colliding {
            configs.push(ServerConfig::stdio(
                "s__t",
                fault_server_path().to_string_lossy(),
                tagged(
                    &other_tag,
                    &["--log-requests".into(), log.to_string_lossy().into_owned()],
                ),
            ));
        }
    }
    let hang_init = sc.faults.contains(&Fault::HangOnInitialize);
    for mut cfg in configs {
        cfg = cfg.trusted();
        cfg.reconnect = policy();
        cfg.tool_call_timeout = TOOL_CALL_TIMEOUT;
        cfg.startup_timeout = if hang_init {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(10)
        };
        cfg.request_timeout = Duration::from_secs(5);
        cfg.idle_stop_after = None;
        if let Err(e) = runtime.add_server(Scope::Global, cfg).await {
            problems.push(e.to_string());
        }
    }

    // Settle: every server ready, or failed/exhausted.
    settle(&runtime, Duration::from_secs(15)).await;

    // Workload.
    let mut issued = 0u64;
    let mut returned = 0u64;
    let mut hung = Vec::new();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut nonce = 0u64;
    let call_limit = TOOL_CALL_TIMEOUT + Duration::from_secs(6);
    let one_call = |tool: &str, args: serde_json::Value| {
        let rt = runtime.clone();
        let name = format!("mcp__s__{tool}");
        async move {
            tokio::time::timeout(
                call_limit,
                rt.call(&Scope::Global, &name, Some(args), CallOptions::default()),
            )
            .await
        }
    };
    for round in 0..2 {
        for _ in 0..sc.calls {
            nonce += 1;
            issued += 1;
            match one_call("echo", json!({"message": format!("{run_id}#{nonce}")})).await {
                Ok(o) => {
                    returned += 1;
                    *outcomes.entry(o.kind.name().to_owned()).or_default() += 1;
                }
                Err(_) => hung.push(format!("echo #{nonce}")),
            }
        }
        if round == 0 {
            let batch: Vec<_> = (0..sc.concurrent)
                .map(|_| {
                    nonce += 1;
                    one_call("echo", json!({"message": format!("{run_id}#{nonce}")}))
                })
                .collect();
            issued += sc.concurrent;
            for r in futures::future::join_all(batch).await {
                match r {
                    Ok(o) => {
                        returned += 1;
                        *outcomes.entry(o.kind.name().to_owned()).or_default() += 1;
                    }
                    Err(_) => hung.push("concurrent echo".into()),
                }
            }
            for f in &sc.faults {
                if let Some(tool) = f.trigger() {
                    issued += 1;
                    match one_call(tool, json!({})).await {
                        Ok(o) => {
                            returned += 1;
                            *outcomes.entry(o.kind.name().to_owned()).or_default() += 1;
                        }
                        Err(_) => hung.push(format!("trigger {tool}")),
                    }
                }
            }
            // Give a reconnect the chance to happen, bounded.
            settle(&runtime, Duration::from_secs(5)).await;
        }
    }

    // Shutdown.
    let shut_started = Instant::now();
    let report_sd = runtime.shutdown(SHUTDOWN_DEADLINE).await;
    let shut_took = shut_started.elapsed();
    if let Some(mut p) = peer.take() {
        let _ = p.child.kill().await;
        let _ = p.child.wait().await;
    }
    // The recorder holds a runtime handle, so the event channel never closes: stop it.
    tokio::task::yield_now().await;
    recorder.abort();
    // One last sample after the shutdown, then stop the sampler.
    tokio::time::sleep(Duration::from_millis(10)).await;
    stop.set();
    let _ = sampler.await;

    let mut invariants = BTreeMap::new();
    let obs = observed
        .lock()
        .map(|o| {
            (
                o.seen.clone(),
                o.overlaps.clone(),
                o.generation_problems.clone(),
            )
        })
        .unwrap_or_default();
    let (seen, overlaps, gen_problems) = obs;

    // no_orphans: every process seen below the runner is gone.
    let excluded = exclude.lock().map(|e| e.clone()).unwrap_or_default();
    let mut orphans = Vec::new();
    for pid in seen.iter().filter(|p| !excluded.contains(p)) {
        if !wait_gone(*pid, Duration::from_secs(2)).await {
            orphans.push(format!("{pid} ({})", cmdline(*pid).trim()));
        }
    }
    invariants.insert(
        Invariant::NoOrphans,
        verdict(orphans.is_empty(), || {
            format!("alive after shutdown: {orphans:?}")
        }),
    );
    invariants.insert(
        Invariant::NoOverlap,
        verdict(overlaps.is_empty(), || {
            overlaps.first().cloned().unwrap_or_default()
        }),
    );
    invariants.insert(
        Invariant::OneGeneration,
        verdict(gen_problems.is_empty(), || gen_problems.join("; ")),
    );

    let events = recorded.lock().map(|r| r.clone()).unwrap_or_default();
    let budget = check_budget(&events, &policy());
    invariants.insert(
        Invariant::BudgetRespected,
        verdict(budget.is_empty(), || budget.join("; ")),
    );

    let doubles = check_double_send(&log, &run_id);
    invariants.insert(
        Invariant::NoDoubleSend,
        verdict(doubles.is_empty(), || doubles.join("; ")),
    );

    let finished = events
        .iter()
        .filter(|(_, e)| matches!(e, RuntimeEvent::CallFinished { .. }))
        .count() as u64;
    let outcome_ok = hung.is_empty() && returned == issued && finished == issued;
    invariants.insert(
        Invariant::OneOutcomePerCall,
        verdict(outcome_ok, || format!("issued {issued}, returned {returned}, CallFinished events {finished}, no outcome: {hung:?}")),
    );
    let in_time = shut_took <= SHUTDOWN_DEADLINE + Duration::from_secs(1);
    invariants.insert(
        Invariant::ShutdownWithinDeadline,
        verdict(
            in_time && report_sd.is_clean() && problems.is_empty(),
            || {
                format!(
                    "took {shut_took:?}; unconfirmed {:?}; setup problems {problems:?}",
                    report_sd.unconfirmed
                )
            },
        ),
    );
    if opts.check_memory {
        invariants.insert(Invariant::BoundedMemory, Verdict::Pass);
    }
    let _ = std::fs::remove_file(&log);
    for f in hook_files {
        let _ = std::fs::remove_file(f);
    }
    report(sc, invariants, started, outcomes)
}

fn report(
    sc: &Scenario,
    invariants: BTreeMap<Invariant, Verdict>,
    started: Instant,
    outcomes: BTreeMap<String, u64>,
) -> ScenarioReport {
    ScenarioReport {
        name: sc.name.to_owned(),
        seed: sc.seed,
        faults: sc.faults.iter().map(|f| f.name().to_owned()).collect(),
        plan: sc.faults.clone(),
        invariants,
        duration_ms: started.elapsed().as_millis() as u64,
        outcomes,
    }
}

fn verdict(ok: bool, why: impl FnOnce() -> String) -> Verdict {
    if ok {
        Verdict::Pass
    } else {
        Verdict::Fail(why())
    }
}

/// Wait until every server has left `connecting`/`reconnecting` (bounded).
async fn settle(runtime: &Runtime, limit: Duration) {
    let mut events = runtime.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let busy = runtime.status().iter().any(|s| {
            matches!(
                s.state,
                ServerState::Connecting | ServerState::Reconnecting { .. }
            )
        });
        if !busy {
            return;
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) | Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
            Ok(_) => {}
        }
    }
}

/// one_generation: the registered tools of each server share one generation,
/// and each server shows either no tools or its whole catalog.
fn check_generations(
    rt: &Runtime,
    observed: &Arc<Mutex<Observed>>,
    expected: &HashMap<String, u64>,
) {
    let tools = rt.tools(&Scope::Global);
    let mut per_server: HashMap<&str, (HashSet<u64>, u64)> = HashMap::new();
    for t in &tools {
        let e = per_server.entry(t.server.as_str()).or_default();
        e.0.insert(t.generation);
        e.1 += 1;
    }
    let mut problems = Vec::new();
    for (server, (gens, count)) in per_server {
        if gens.len() > 1 {
            problems.push(format!("{server}: generations {gens:?} registered at once"));
        }
        if let Some(&whole) = expected.get(server)
            && count != whole
        {
            problems.push(format!(
                "{server}: {count} tools registered, the whole catalog has {whole}"
            ));
        }
    }
    if !problems.is_empty()
        && let Ok(mut o) = observed.lock()
    {
        o.generation_problems.extend(problems);
    }
}

/// budget_respected: attempt k never exceeds max_attempts, and the next
/// connection after `reconnecting(k)` starts no earlier than delay(k).
fn check_budget(events: &[(Instant, RuntimeEvent)], policy: &ReconnectPolicy) -> Vec<String> {
    let mut problems = Vec::new();
    let mut pending: HashMap<String, (Instant, u32, u64)> = HashMap::new();
    for (at, ev) in events {
        let RuntimeEvent::ServerStatus(s) = ev else {
            continue;
        };
        if let ServerState::Reconnecting { attempt, of } = s.state {
            if attempt > policy.max_attempts || of != policy.max_attempts {
                problems.push(format!(
                    "{}: reconnecting attempt {attempt} of {of}",
                    s.server
                ));
            }
            pending
                .entry(s.server.clone())
                .or_insert((*at, attempt, s.connection_generation));
        } else if let Some((since, attempt, conn_gen)) = pending.get(&s.server).cloned()
            && s.connection_generation > conn_gen
        {
            let waited = at.duration_since(since);
            let want = policy.delay_for_attempt(attempt);
            if waited + Duration::from_millis(2) < want {
                problems.push(format!(
                    "{}: attempt {attempt} started after {waited:?}, schedule says {want:?}",
                    s.server
                ));
            }
            pending.remove(&s.server);
        }
        if s.state == ServerState::Exhausted && s.consecutive_failures <= policy.max_attempts {
            problems.push(format!(
                "{}: exhausted after only {} failures",
                s.server, s.consecutive_failures
            ));
        }
    }
    problems
}

/// no_double_send: every nonce of this run appears at most once in the request log.
fn check_double_send(log: &PathBuf, run_id: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for line in text.lines().filter(|l| l.starts_with("tools/call")) {
        if let Some(start) = line.find(run_id) {
            let rest = &line[start..];
            let end = rest.find('"').unwrap_or(rest.len());
            *counts.entry(&rest[..end]).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(nonce, n)| format!("{nonce} arrived {n} times"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        let a = serde_json::to_string(&scenarios(7)).unwrap();
        let b = serde_json::to_string(&scenarios(7)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, serde_json::to_string(&scenarios(8)).unwrap());
    }

    fn status(state: ServerState, conn_gen: u64, failures: u32) -> RuntimeEvent {
        let mut s = mcpvisor::ServerStatus::new(Scope::Global, "s", "stdio", 0);
        s.state = state;
        s.connection_generation = conn_gen;
        s.consecutive_failures = failures;
        RuntimeEvent::ServerStatus(Box::new(s))
    }

    #[test]
    fn budget_check_flags_an_early_reconnect_and_an_attempt_past_the_budget() {
        // CHAOS-2 budget_respected can fail.
        let p = policy();
        let t0 = Instant::now();
        let early = vec![
            (
                t0,
                status(ServerState::Reconnecting { attempt: 2, of: 3 }, 1, 2),
            ),
            (
                t0 + Duration::from_millis(5),
                status(ServerState::Connecting, 2, 2),
            ),
        ];
        let problems = check_budget(&early, &p);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("schedule says 40ms"), "{problems:?}");
        let past = vec![(
            t0,
            status(ServerState::Reconnecting { attempt: 4, of: 3 }, 1, 4),
        )];
        assert_eq!(check_budget(&past, &p).len(), 1);
        let on_time = vec![
            (
                t0,
                status(ServerState::Reconnecting { attempt: 1, of: 3 }, 1, 1),
            ),
            (
                t0 + Duration::from_millis(20),
                status(ServerState::Connecting, 2, 1),
            ),
        ];
        assert!(check_budget(&on_time, &p).is_empty());
    }

    #[test]
    fn double_send_check_flags_a_nonce_that_arrived_twice() {
        // CHAOS-2 no_double_send can fail.
        let log = unique_temp_path("dbl.log");
        std::fs::write(
            &log,
            "tools/call 1 echo {\"message\":\"run#1\"}\ntools/call 2 echo {\"message\":\"run#2\"}\ntools/call 3 echo {\"message\":\"run#1\"}\n",
        )
        .unwrap();
        let problems = check_double_send(&log, "run");
        let _ = std::fs::remove_file(&log);
        assert_eq!(problems, vec!["run#1 arrived 2 times".to_owned()]);
    }

    #[test]
    fn the_catalogue_exercises_at_least_25_fault_kinds() {
        let kinds: HashSet<&str> = scenarios(1)
            .iter()
            .flat_map(|s| s.faults.iter().map(Fault::name))
            .collect();
        assert!(kinds.len() >= 25, "{} kinds: {kinds:?}", kinds.len());
    }
}
