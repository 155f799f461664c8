//! The workload of a run: sequential and concurrent echo calls, the faults'
//! trigger calls, and a tally of every call's outcome.

use std::collections::BTreeMap;
use std::time::Duration;

use mcpvisor::{CallOptions, Runtime, Scope, ServerState, ServerStatus, ToolOutcome};
use tokio::time::error::Elapsed;

use super::fault::Fault;
use super::rng::SeededRng;
use super::run::Run;
use crate::{wait_catalog_ready, wait_for, wait_for_status};

/// Every server's `tool_call_timeout`.
pub(super) const TOOL_CALL_TIMEOUT: Duration = Duration::from_millis(800);

/// The documented margin past a call's timeout (CALL-4: the cancel
/// notice is waited for at most 1 s, `CANCEL_NOTICE_WAIT`).
const CANCEL_MARGIN: Duration = Duration::from_secs(1);

/// Slack for a loaded 2-core machine, past a call's timeout and margin.
const LOAD_SLACK: Duration = Duration::from_millis(1500);

/// How much longer than its bound the runner waits for a call's outcome
/// before it counts the call as hung (then `one_outcome_per_call` fails).
const HANG_PAST_BOUND: Duration = Duration::from_secs(4);

/// A browser call's own timeout: the native provider's, two actions and a
/// launch (`BrowserNativeConfig`'s defaults, 15 s and 20 s).
const BROWSER_CALL_TIMEOUT: Duration = Duration::from_secs(15 * 2 + 20);

/// The bound of one call of server `s` (`bounded_outcome`): its timeout,
/// the margin, the PreToolUse hooks it waits for, and the load slack.
pub(super) fn call_bound(run: &Run<'_>) -> Duration {
    let hooks: u64 = run.sc.faults.iter().map(Fault::hook_wait_s).sum();
    run.sc.call_timeout() + CANCEL_MARGIN + Duration::from_secs(hooks) + LOAD_SLACK
}

/// The bound of a browser call: its own timeout, the margin and the slack.
fn browser_bound() -> Duration {
    BROWSER_CALL_TIMEOUT + CANCEL_MARGIN + LOAD_SLACK
}

/// The calls of a run and what came of them.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Calls issued.
    pub(super) issued: u64,
    /// Calls that returned an outcome.
    pub(super) returned: u64,
    /// Calls with no outcome within their bound plus [`HANG_PAST_BOUND`].
    pub(super) hung: Vec<String>,
    /// Calls whose outcome came after their own bound, with how long each
    /// took and its bound.
    pub(super) over_bound: Vec<String>,
    /// Outcome kind → count.
    pub(super) outcomes: BTreeMap<String, u64>,
    /// The last echo nonce used.
    nonce: u64,
    /// The longest time a call took to its outcome, and which call.
    pub(super) slowest: (Duration, String),
    /// Workload calls (not triggers) that ended other than `ok`, with how.
    pub(super) not_ok: Vec<String>,
    /// Every workload call's nonce, outcome kind and error text.
    pub(super) by_nonce: Vec<(String, String, String)>,
    /// Outcomes that showed the run's secret value.
    pub(super) leaks: Vec<String>,
    /// The nonces of the workload calls that ended `ok`.
    pub(super) ok_nonces: Vec<String>,
    /// Each trigger call's tool, outcome kind and notes.
    pub(super) triggers: Vec<(&'static str, String, String)>,
    /// Each workload call's outcome kind.
    pub(super) workload_kinds: Vec<String>,
    /// Each workload call's notes, joined.
    pub(super) workload_notes: Vec<String>,
    /// How long each workload call took to its outcome.
    pub(super) workload_took: Vec<Duration>,
    /// When the runner made the server's supervisor fail (a restart starts
    /// the reconnect schedule anew, so `budget_respected` skips across it),
    /// on the runner's clock and as Unix ms (fault-server's start lines);
    /// the Unix ms also hold when an admin path started it anew.
    pub(super) supervisor_failures: Vec<std::time::Instant>,
    pub(super) supervisor_failures_ms: Vec<u128>,
    /// Each model fault's turn: the fault, its `TurnError` kind and
    /// message (`none` when it finished), and the `tools/call` requests the
    /// server received during it.
    pub(super) turns: Vec<(&'static str, String, String, usize)>,
    /// Workload calls that ended `ok` with another call's answer (the echo
    /// or the resource names a nonce that is not theirs).
    pub(super) crossed: Vec<String>,
    /// Workload calls that ended `ok` (each answer was checked).
    pub(super) answered: u64,
    /// The trigger phase is over: workload calls from now on are the
    /// recovery's.
    pub(super) after_trigger: bool,
    /// Each workload call's outcome kind after the trigger phase.
    pub(super) after_trigger_kinds: Vec<String>,
    /// `secret_echo`: every request a tool-loop turn sent the model, as
    /// JSON (its tools, instructions and tool results come from the leaky
    /// server).
    pub(super) model_requests: String,
    /// `browser_wont_die`: each browser call and its outcome kind, and the
    /// browser's pid (the seat's owned pid) before the shutdown.
    pub(super) browser: Vec<(&'static str, String)>,
    pub(super) browser_pid: Option<u32>,
}

impl Tally {
    /// The next workload call: its tool and arguments, carrying a nonce
    /// unique to this run.
    fn next_call(&mut self, run: &Run<'_>) -> (&'static str, serde_json::Value, String) {
        self.nonce += 1;
        let nonce = format!("{}#{}", run.ids.run_id, self.nonce);
        let (tool, args) = run.sc.workload_call(&nonce);
        (tool, args, nonce)
    }

    /// Count what came of one call; `what` names it. A workload call (one
    /// with a `nonce`, not a trigger) that ends other than `ok` is kept for
    /// `no_lost_reply`, one that ends `ok` for `no_double_send`; an outcome
    /// showing `secret` is kept for `no_secret_leak`.
    fn record(
        &mut self,
        (result, took, bound): (Result<ToolOutcome, Elapsed>, Duration, Duration),
        what: String,
        nonce: Option<String>,
        secret: &str,
    ) {
        if took > bound {
            self.over_bound
                .push(format!("{what} took {took:?}, over its bound of {bound:?}"));
        }
        if let Ok(o) = &result {
            if let Some(nonce) = &nonce {
                self.by_nonce.push((
                    nonce.clone(),
                    o.kind.name().to_owned(),
                    o.error.clone().unwrap_or_default(),
                ));
            }
            if nonce.is_some() {
                self.workload_kinds.push(o.kind.name().to_owned());
                self.workload_notes.push(o.notes.join("\n"));
                self.workload_took.push(took);
            }
            if let Some(nonce) = &nonce
                && o.kind.name() == "ok"
            {
                self.ok_nonces.push(nonce.clone());
                self.answered += 1;
                if !answers(&o.projection, nonce) {
                    self.crossed
                        .push(format!("{what} ({nonce}) got {:?}", clip(&o.projection)));
                }
            }
            if nonce.is_some() && self.after_trigger {
                self.after_trigger_kinds.push(o.kind.name().to_owned());
            }
            if nonce.is_some() && o.kind.name() != "ok" {
                let why = o.error.as_deref().unwrap_or_default();
                self.not_ok
                    .push(format!("{what}: {} ({why})", o.kind.name()));
            }
            if shows_secret(o, secret) {
                self.leaks.push(format!("the outcome of {what}"));
            }
        }
        if took > self.slowest.0 {
            self.slowest = match &result {
                Ok(o) => (took, format!("{what} ({})", o.kind.name())),
                Err(_) => (took, what.clone()),
            };
        }
        match result {
            Ok(o) => {
                self.returned += 1;
                *self.outcomes.entry(o.kind.name().to_owned()).or_default() += 1;
            }
            Err(_) => self.hung.push(what),
        }
    }
}

/// True when `projection` is the answer to the call carrying `nonce`: it
/// names that nonce (the echo's text, the resource's URI), and not as the
/// start of a longer one (`run#1` in `run#12`).
pub(super) fn answers(projection: &str, nonce: &str) -> bool {
    projection.match_indices(nonce).any(|(at, _)| {
        !projection[at + nonce.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// The first 80 characters of `text`, for a violation's message.
fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// True when anything of `o` the caller or the model sees shows `secret`
/// (or a piece of it, see [`super::run::shows_part`]).
fn shows_secret(o: &ToolOutcome, secret: &str) -> bool {
    let shows = |t: &str| super::run::shows_part(t, secret);
    shows(&o.projection)
        || o.error.as_deref().is_some_and(shows)
        || o.canonical.as_ref().is_some_and(|c| shows(&c.to_string()))
        || o.notes.iter().any(|n| shows(n))
}

/// `secret_echo`: a tool-loop turn against a scripted model that calls
/// `echo` once, then answers: the requests it got carry the scope's tools,
/// the servers' instructions and the tool's result, all of them from the
/// leaky server (TRUST-2).
async fn secret_turn(run: &Run<'_>, tally: &mut Tally) {
    use crate::model::{ScriptedModel, openai_text, openai_tool_calls};
    let replies = vec![
        openai_tool_calls(&[("c1", "mcp__s__echo", r#"{"message":"from the model"}"#)]),
        openai_text("done"),
    ];
    let Ok(model) = ScriptedModel::start(replies).await else {
        tally.not_ok.push("the scripted model did not start".into());
        return;
    };
    let mut route = mcpvisor::ModelRoute::new(
        mcpvisor::Provider::OpenAi,
        format!("{}/v1", model.base_url()),
        "chaos",
    );
    route.idle_timeout = MODEL_IDLE;
    let request = mcpvisor::TurnRequest::new(Scope::Global, route, "echo something");
    // The turn's one tool call is a call of the run (its CallFinished).
    tally.issued += 1;
    tally.returned += 1;
    let limit = (call_bound(run) + HANG_PAST_BOUND) * 2;
    let _ = tokio::time::timeout(limit, run.runtime.turn(request, None)).await;
    tally.model_requests = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n");
}

/// Call the public tool `name`, whose outcome is due within `bound`;
/// waited for at most [`HANG_PAST_BOUND`] longer.
async fn call(
    runtime: &Runtime,
    name: &str,
    args: serde_json::Value,
    bound: Duration,
) -> (Result<ToolOutcome, Elapsed>, Duration, Duration) {
    let started = tokio::time::Instant::now();
    let result = tokio::time::timeout(
        bound + HANG_PAST_BOUND,
        runtime.call(&Scope::Global, name, Some(args), CallOptions::default()),
    )
    .await;
    (result, started.elapsed(), bound)
}

/// The scenario's sequential workload calls, one after the other. Under an
/// idle stop, each waits first: every other one until the server has been
/// idle-stopped (the call wakes it), the rest for about the idle deadline,
/// to land in the window where the stop is under way (RECO-6).
pub(super) async fn sequential_calls(run: &Run<'_>, tally: &mut Tally) {
    let mut rng = SeededRng::new(run.sc.seed, 1_000 + tally.nonce);
    for i in 0..run.sc.calls {
        if let Some(idle) = run.sc.idle_stop() {
            if i % 2 == 0 {
                let mut events = run.runtime.subscribe();
                let stopped = wait_for_status(
                    &run.runtime,
                    &mut events,
                    "s",
                    idle + Duration::from_secs(3),
                    |s| s.state == ServerState::IdleStopped,
                )
                .await;
                // The plan promised an idle stop: without one the wake
                // path was never exercised, which is a failed scenario.
                if stopped.is_err() {
                    tally.not_ok.push(format!(
                        "call #{}: s was never idle-stopped",
                        tally.nonce + 1
                    ));
                }
            } else {
                let near = idle.as_millis() as u64 + rng.range(0, 30);
                tokio::time::sleep(Duration::from_millis(near.saturating_sub(15))).await;
            }
        }
        let (tool, args, nonce) = tally.next_call(run);
        let n = tally.nonce;
        tally.issued += 1;
        let result = call(&run.runtime, tool, args, call_bound(run)).await;
        tally.record(result, format!("{tool} #{n}"), Some(nonce), &run.ids.secret);
    }
}

/// How long the recovery probe waits for the server to be ready again: a
/// close that waits out a stubborn process's grace, the backoff, a spawn
/// and a handshake on a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_secs(15);

/// A fault the server recovers from is judged on a call made once it is
/// back. The workload's calls after the trigger may all fall inside the
/// outage (a restarted supervisor waiting out the close of a process that
/// ignores SIGTERM: seed 137 of `supervisor_panic_mid_close`), which proves
/// nothing either way; so when none of them ended `ok`, wait (bounded) for
/// the server to be ready with its catalog and make one more call. A server
/// that never comes back, or whose calls are refused after it did, still
/// fails `expected_consequences`.
pub(super) async fn recovery_probe(run: &Run<'_>, tally: &mut Tally) {
    if run.sc.calls == 0
        || !run.sc.faults.iter().any(Fault::recovers)
        || tally.after_trigger_kinds.iter().any(|k| k == "ok")
    {
        return;
    }
    let mut events = run.runtime.subscribe();
    let _ = wait_catalog_ready(
        &run.runtime,
        &mut events,
        &Scope::Global,
        "s",
        0,
        RECOVERY_BOUND,
    )
    .await;
    let (tool, args, nonce) = tally.next_call(run);
    let n = tally.nonce;
    tally.issued += 1;
    let result = call(&run.runtime, tool, args, call_bound(run)).await;
    tally.record(
        result,
        format!("{tool} #{n} (recovery probe)"),
        Some(nonce),
        &run.ids.secret,
    );
}

/// The scenario's concurrent workload calls, all at once.
pub(super) async fn concurrent_calls(run: &Run<'_>, tally: &mut Tally) {
    let batch: Vec<_> = (0..run.sc.concurrent)
        .map(|_| {
            let (tool, args, nonce) = tally.next_call(run);
            (
                (tool, nonce),
                call(&run.runtime, tool, args, call_bound(run)),
            )
        })
        .collect();
    tally.issued += run.sc.concurrent;
    let (names, calls): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    for ((tool, nonce), result) in names
        .into_iter()
        .zip(futures::future::join_all(calls).await)
    {
        tally.record(
            result,
            format!("concurrent {tool}"),
            Some(nonce),
            &run.ids.secret,
        );
    }
}

/// How long a model fault's endpoint may be silent before the round fails.
const MODEL_IDLE: Duration = Duration::from_secs(1);

/// A model fault's turn (LOOP-7 under fault): the scripted endpoint's
/// first reply is the fault; the turn must fail in time, typed, and call
/// nothing.
async fn model_turn(run: &Run<'_>, fault: &Fault, tally: &mut Tally) {
    let Some(reply) = fault.model_reply() else {
        return;
    };
    let calls_before = tool_calls_logged(run);
    let model = match crate::model::ScriptedModel::start(vec![reply]).await {
        Ok(m) => m,
        Err(e) => {
            tally
                .turns
                .push((fault.name(), "runner".into(), e.to_string(), 0));
            return;
        }
    };
    let mut route = mcpvisor::ModelRoute::new(
        mcpvisor::Provider::OpenAi,
        format!("{}/v1", model.base_url()),
        "chaos",
    );
    route.idle_timeout = MODEL_IDLE;
    let request = mcpvisor::TurnRequest::new(Scope::Global, route, "use echo");
    let started = tokio::time::Instant::now();
    let bound = call_bound(run);
    let outcome =
        tokio::time::timeout(bound + HANG_PAST_BOUND, run.runtime.turn(request, None)).await;
    let took = started.elapsed();
    let what = format!("the {} turn", fault.name());
    if took > tally.slowest.0 {
        tally.slowest = (took, what.clone());
    }
    if took > bound {
        tally
            .over_bound
            .push(format!("{what} took {took:?}, over its bound of {bound:?}"));
    }
    let (kind, message) = match outcome {
        Err(_) => ("no outcome".to_owned(), String::new()),
        Ok(o) => match &o.error {
            None => ("none".to_owned(), String::new()),
            Some(e) => (
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
                    .unwrap_or_default(),
                e.to_string(),
            ),
        },
    };
    let ran = tool_calls_logged(run).saturating_sub(calls_before);
    tally.turns.push((fault.name(), kind, message, ran));
}

/// `browser_wont_die`: drive the stubborn browser (it starts on the first
/// call), and note its pid for the shutdown's judgement.
async fn browser_calls(run: &Run<'_>, tally: &mut Tally) {
    let page =
        serde_json::json!({"url": "data:text/html,<title>chaos</title><button>press</button>"});
    for (what, tool, args) in [
        ("navigate", "mcp__browser__navigate", page),
        ("snapshot", "mcp__browser__snapshot", serde_json::json!({})),
    ] {
        tally.issued += 1;
        let result = call(&run.runtime, tool, args, browser_bound()).await;
        let kind = match &result.0 {
            Ok(o) => o.kind.name().to_owned(),
            Err(_) => "no outcome".to_owned(),
        };
        tally.browser.push((what, kind));
        tally.record(result, format!("browser {what}"), None, &run.ids.secret);
    }
    tally.browser_pid = run
        .runtime
        .seats()
        .await
        .into_iter()
        .find(|s| s.seat == "browser_use")
        .and_then(|s| s.pids.first().copied());
}

/// `tools/call` lines in the run's request log.
fn tool_calls_logged(run: &Run<'_>) -> usize {
    std::fs::read_to_string(&run.ids.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("tools/call"))
        .count()
}

/// Each fault's trigger call (then, under `Fault::SupervisorPanic`, the
/// server supervisor's failure, mid-outage), then a bounded wait for any
/// reconnect it caused.
pub(super) async fn trigger(run: &Run<'_>, tally: &mut Tally) {
    for fault in &run.sc.faults {
        model_turn(run, fault, tally).await;
        if *fault == Fault::SecretEcho {
            secret_turn(run, tally).await;
        }
        if *fault == Fault::BrowserWontDie {
            browser_calls(run, tally).await;
        }
        let Some(tool) = fault.trigger() else {
            continue;
        };
        tally.issued += 1;
        let generation = run
            .runtime
            .status()
            .iter()
            .find(|s| s.server == "s")
            .map_or(0, |s| s.generation);
        let name = mcpvisor::public_tool_name("s", tool);
        // The trigger carries a nonce too (no_double_send): a call that
        // crashes or hangs its server is the one most likely lost in
        // flight, and it must not be sent twice either.
        let nonce = format!("{}#trigger-{tool}", run.ids.run_id);
        let mut args = fault.trigger_args();
        if let Some(map) = args.as_object_mut() {
            map.insert("nonce".into(), nonce.clone().into());
        }
        let result = call(&run.runtime, &name, args, call_bound(run)).await;
        let (kind, notes) = match &result.0 {
            Ok(o) => (o.kind.name().to_owned(), o.notes.join("; ")),
            Err(_) => ("no outcome".to_owned(), String::new()),
        };
        if kind == "ok" {
            tally.ok_nonces.push(nonce);
        }
        tally.triggers.push((tool, kind, notes));
        tally.record(result, format!("trigger {tool}"), None, &run.ids.secret);
        // Re-syncs the trigger starts come after it returned: wait (bounded)
        // for them to be swapped in, so that the end's judges see them: a
        // storm's sync and its one follow-up (SYNC-5, counted by
        // `expected_consequences`); a broken listen stream's re-sync after
        // its first backoff of 1 s (ERA-4, judged by `one_generation` and
        // `expected_consequences`).
        let resyncs = match fault {
            Fault::ListChangedStorm { .. } => Some((2, Duration::from_secs(3))),
            Fault::ListenBreak => Some((1, Duration::from_secs(5))),
            _ => None,
        };
        if let Some((syncs, limit)) = resyncs {
            let mut events = run.runtime.subscribe();
            let _ = wait_for_status(&run.runtime, &mut events, "s", limit, |s| {
                !s.syncing && s.generation >= generation + syncs
            })
            .await;
        }
        if run.sc.panics_supervisor() {
            tally.supervisor_failures.push(std::time::Instant::now());
            tally.supervisor_failures_ms.push(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis()),
            );
            let _ = run
                .runtime
                .fail_server_supervisor_for_chaos(&Scope::Global, "s");
        }
    }
    if run.sc.faults.contains(&Fault::AdminPaths) {
        admin_paths(run, tally).await;
    }
    // A lost session is mended by a reconnect, and the last phase's calls
    // are to go over it: wait for it, bounded. (`settle` alone can return
    // before the supervisor has even seen the 404'd connection go; then the
    // last calls all end `server_not_ready` and the shutdown comes before
    // the second `initialize`: seed 112 of the 1000-seed run.) A session
    // re-initialised in place (the session-replay break) shows in the log.
    if run
        .sc
        .faults
        .iter()
        .any(|f| matches!(f, Fault::HttpSessionLoss { .. }))
        && super::run::requests_logged(&run.ids.log, "initialize") < 2
    {
        let mut events = run.runtime.subscribe();
        let _ = wait_for_status(
            &run.runtime,
            &mut events,
            "s",
            Duration::from_secs(5),
            |s| s.state == ServerState::Ready && s.connection_generation >= 2,
        )
        .await;
    }
    // Give a reconnect the chance to happen, bounded.
    settle(&run.runtime, Duration::from_secs(5)).await;
}

/// How long one admin operation, and the server's return to `ready`
/// after it, may take (a stubborn old process needs about 2.5 s to close).
const ADMIN_LIMIT: Duration = Duration::from_secs(15);

/// `admin_paths`: restart server `s`, turn it off and on, remove it and
/// add it again, each time waiting until it is ready on a new connection.
/// What goes wrong is a workload failure (`no_lost_reply`); that no two
/// processes of `s` overlapped on the way is `no_overlap`'s.
async fn admin_paths(run: &Run<'_>, tally: &mut Tally) {
    let g = Scope::Global;
    let rt = &run.runtime;
    let conn_gen = || {
        rt.status()
            .iter()
            .find(|s| s.server == "s")
            .map_or(0, |s| s.connection_generation)
    };
    let mut problems = Vec::new();
    for op in ["restart", "off and on", "remove and add"] {
        let before = conn_gen();
        // An admin path starts the server anew, with no backoff: the
        // reconnect schedule is judged around it, not across it.
        tally.supervisor_failures_ms.push(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
        );
        let mut events = rt.subscribe();
        let done = tokio::time::timeout(ADMIN_LIMIT, async {
            match op {
                "restart" => rt.restart_server(&g, "s").await.map_err(|e| e.to_string()),
                "off and on" => {
                    rt.set_server_enabled(&g, "s", false)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())?;
                    rt.set_server_enabled(&g, "s", true)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                _ => {
                    rt.remove_server(&g, "s")
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())?;
                    let Some(cfg) = run.main_config.clone() else {
                        return Err("no config of s to add again".to_owned());
                    };
                    rt.add_server(g.clone(), cfg)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            }
        })
        .await;
        match done {
            Err(_) => problems.push(format!("{op}: no answer within {ADMIN_LIMIT:?}")),
            Ok(Err(e)) => problems.push(format!("{op}: {e}")),
            Ok(Ok(())) => {
                // A re-added server counts its connections anew.
                let fresh = op == "remove and add";
                let back = wait_for_status(rt, &mut events, "s", ADMIN_LIMIT, |s| {
                    s.state == ServerState::Ready
                        && s.tools > 0
                        && (fresh || s.connection_generation > before)
                })
                .await;
                if let Err(e) = back {
                    problems.push(format!("{op}: not ready again: {e}"));
                }
            }
        }
    }
    tally
        .not_ok
        .extend(problems.into_iter().map(|p| format!("admin path {p}")));
}

/// Wait until every server has left `connecting`/`reconnecting` and no
/// catalog sync is running or due, for at most `limit`.
pub(super) async fn settle(runtime: &Runtime, limit: Duration) {
    let mut events = runtime.subscribe();
    let _ = wait_for(runtime, &mut events, limit, |statuses| {
        (!statuses.iter().any(busy)).then_some(())
    })
    .await;
}

/// True while a server is still connecting or reconnecting, or syncing.
fn busy(s: &ServerStatus) -> bool {
    s.syncing
        || matches!(
            s.state,
            ServerState::Connecting | ServerState::Reconnecting { .. }
        )
}
