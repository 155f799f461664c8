//! One scenario run, phase by phase: setup, workload, trigger, shutdown,
//! judge. Each phase is a function over the run's context ([`Run`]).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcpvisor::{Runtime, RuntimeEvent, ShutdownReport};

use super::fault::Fault;
use super::invariant::{
    Invariant, ScenarioReport, Verdict, check_budget, check_double_send, check_restarts,
    check_spawns, verdict,
};
use super::observe::{Observed, Recorder, Sampler};
use super::scenario::Scenario;
use super::setup::{policy, setup};
use super::workload::{Tally, concurrent_calls, recovery_probe, sequential_calls, trigger};
use crate::{HttpFaultServer, tagged_processes, unique_temp_path, wait_gone};

/// The environment variable every server of a run gets: its run id. It is
/// inherited by every descendant, also one that left its process group.
pub(super) const CHAOS_TAG: &str = "CHAOS_TAG";

/// How long the runtime's shutdown may take.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(15);

/// Runner options.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Deliberately break the runtime: skip the close barrier (to show that
    /// `no_overlap` can fail).
    pub break_close_barrier: bool,
    /// Check memory (soak).
    pub check_memory: bool,
    /// Deliberately break the runtime: start servers without its tag, so a
    /// process that leaves its group survives (to show that `no_orphans`
    /// can fail).
    pub break_escape_sweep: bool,
    /// The other break switches, one per invariant (see [`BREAKS`]).
    pub breaks: mcpvisor::ChaosSwitches,
    /// No other run is in flight while a run judges its orphans (the
    /// `chaos` binary without `--jobs`): every process below the runner is
    /// then this run's, also one that carries no tag (see no_orphans).
    pub sole: bool,
    /// Runner-side fault for the test of the subreaper: the daemon of
    /// `daemonized_grandchild` clears its environment, so neither the
    /// runtime's tag sweep nor the runner's `CHAOS_TAG` finds it; only the
    /// walk below the runner does (`--break untagged-daemon`).
    pub untagged_daemon: bool,
    /// Readings of `/proc`, shared by the samplers of the runs in flight
    /// with these options (`chaos --jobs N`).
    pub procs: std::sync::Arc<crate::ProcWatch>,
}

/// Every break switch by its command-line name, with the invariant it
/// exists to show failing and a scenario where it does (tested in
/// chaos_runner.rs: that invariant fails, and only it).
pub const BREAKS: &[(&str, Invariant, &str)] = &[
    (
        "close-barrier",
        Invariant::NoOverlap,
        "overlong_line_stubborn",
    ),
    // The same switch on the admin paths: a restart, a switch-on and a
    // re-add must wait for the stubborn old process too.
    (
        "close-barrier",
        Invariant::NoOverlap,
        "admin_paths_stubborn",
    ),
    (
        "escape-sweep",
        Invariant::NoOrphans,
        "daemonized_grandchild",
    ),
    (
        "session-replay",
        Invariant::NoDoubleSend,
        "http_session_loss",
    ),
    ("redaction", Invariant::NoSecretLeak, "secret_echo"),
    ("line-reader", Invariant::NoLostReply, "split_replies"),
    ("timeouts", Invariant::BoundedOutcome, "hang_on_call"),
    ("catalogs", Invariant::OneGeneration, "slow_responses"),
    ("root", Invariant::ShutdownWithinDeadline, "slow_responses"),
    ("backoff", Invariant::BudgetRespected, "crash_at_start"),
    (
        "outcome-events",
        Invariant::OneOutcomePerCall,
        "slow_responses",
    ),
    ("outcome-kinds", Invariant::ExpectedConsequences, "is_error"),
    ("cross-replies", Invariant::ReplyToItsCall, "slow_responses"),
    (
        "no-recovery",
        Invariant::ExpectedConsequences,
        "crash_mid_call",
    ),
];

impl RunOptions {
    /// Turn on the break switch named `name` (see [`BREAKS`]); false for an
    /// unknown name.
    pub fn set_break(&mut self, name: &str) -> bool {
        let b = &mut self.breaks;
        match name {
            "close-barrier" => self.break_close_barrier = true,
            "escape-sweep" => self.break_escape_sweep = true,
            "session-replay" => b.replay_expired_sessions = true,
            "redaction" => b.no_redaction = true,
            "line-reader" => b.lossy_line_reader = true,
            "timeouts" => b.late_timeouts = true,
            "catalogs" => b.half_catalogs = true,
            "root" => b.dead_root = true,
            "backoff" => b.no_backoff = true,
            "outcome-events" => b.silent_outcomes = true,
            "outcome-kinds" => b.wrong_kinds = true,
            "cross-replies" => b.cross_replies = true,
            "no-recovery" => b.no_recovery = true,
            // Judged over a soak only (chaos --soak): see chaos_runner.rs.
            "leak" => b.leak = true,
            // A harder fault than the runtime handles (RECO-7's documented
            // gap), for the runner's subreaper walk: see chaos_runner.rs.
            "untagged-daemon" => self.untagged_daemon = true,
            _ => return false,
        }
        true
    }
}

/// The names one run gives its processes and files, unique per run so runs
/// in parallel never judge each other's.
#[derive(Debug, Clone)]
pub(super) struct RunIds {
    /// `<scenario>-<seed>-<pid>-<n>`: also the prefix of every call's nonce.
    pub(super) run_id: String,
    /// `--tag` of server `s`.
    pub(super) main_tag: String,
    /// `--tag` of server `s__t` (the colliding one).
    pub(super) other_tag: String,
    /// `--tag` of the processes hooks leave behind.
    pub(super) hook_tag: String,
    /// The fault-servers' request log.
    pub(super) log: PathBuf,
    /// The runtime's event log (judged by `no_secret_leak`).
    pub(super) event_log: PathBuf,
    /// The secret value server `s` gets in its environment, unique per run.
    pub(super) secret: String,
    /// The browser provider's launcher and profiles (`browser_wont_die`).
    pub(super) browser_dir: PathBuf,
}

impl RunIds {
    /// Fresh names for a run of `sc`.
    pub(super) fn new(sc: &Scenario) -> Self {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::SeqCst);
        let run_id = format!("{}-{}-{}-{run}", sc.name, sc.seed, std::process::id());
        Self {
            main_tag: format!("{run_id}-s"),
            other_tag: format!("{run_id}-s__t"),
            hook_tag: format!("{run_id}-h"),
            log: unique_temp_path(&format!("{}-requests.log", sc.name)),
            event_log: unique_temp_path(&format!("{}-events.jsonl", sc.name)),
            secret: secret_value(&run_id),
            browser_dir: unique_temp_path(&format!("{}-browser", sc.name)),
            run_id,
        }
    }
}

/// A secret value for run `run_id`: unique, and unlike anything else a run
/// prints, so finding it anywhere is a leak.
fn secret_value(run_id: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run_id.hash(&mut h);
    format!("sk-chaos-{:016x}", h.finish())
}

/// What every phase of one run shares.
pub(super) struct Run<'a> {
    /// The scenario being run.
    pub(super) sc: &'a Scenario,
    /// The runner's options.
    pub(super) opts: &'a RunOptions,
    /// The run's names.
    pub(super) ids: RunIds,
    /// The runtime under test.
    pub(super) runtime: Runtime,
    /// The runner-owned HTTP fault-server, for the HTTP faults.
    pub(super) peer: Option<HttpFaultServer>,
    /// Hook files written for the faults, removed at the end.
    pub(super) hook_files: Vec<PathBuf>,
    /// What went wrong while setting up (judged by shutdown_within_deadline).
    pub(super) problems: Vec<String>,
    /// Server `s`'s config as it was added (the admin paths add it again).
    pub(super) main_config: Option<mcpvisor::ServerConfig>,
}

/// The observers of a run, stopped at shutdown.
pub(super) struct Observers {
    /// Walks `/proc` for the run's processes.
    pub(super) sampler: Sampler,
    /// Keeps every runtime event.
    pub(super) recorder: Recorder,
}

/// What the shutdown phase measured, and everything observed by its end.
struct Seen {
    /// How long `Runtime::shutdown` took.
    took: Duration,
    /// Its report.
    report: ShutdownReport,
    /// What the sampler and the recorder saw.
    observed: Observed,
    /// Runner-owned pids, never judged.
    excluded: HashSet<u32>,
    /// Every runtime event with the instant it arrived.
    events: Vec<(Instant, RuntimeEvent)>,
    /// Every server's status just before the shutdown, as JSON.
    last_status: String,
    /// The hooks' backgrounded processes still alive just before the
    /// shutdown (each hook's group kill should have taken them).
    hook_lingerers: Vec<u32>,
    /// When the shutdown began, Unix ms (the servers' clock).
    shutdown_ms: u128,
    /// The scope's catalog and instructions just before the shutdown, as
    /// JSON and text.
    published: String,
}

/// Run one scenario and judge it.
pub async fn run_scenario(sc: &Scenario, opts: &RunOptions) -> ScenarioReport {
    let started = Instant::now();
    let (mut run, observers) = match setup(sc, opts).await {
        Ok(set_up) => set_up,
        Err(why) => {
            let invariants =
                BTreeMap::from([(Invariant::ShutdownWithinDeadline, Verdict::Fail(why))]);
            return ScenarioReport::new(sc, invariants, started, BTreeMap::new());
        }
    };
    // Workload: echo calls and a concurrent batch, the faults' triggers, then
    // echo calls again once any reconnect has settled.
    let mut tally = Tally::default();
    sequential_calls(&run, &mut tally).await;
    concurrent_calls(&run, &mut tally).await;
    trigger(&run, &mut tally).await;
    tally.after_trigger = true;
    sequential_calls(&run, &mut tally).await;
    recovery_probe(&run, &mut tally).await;
    let seen = shutdown(&mut run, observers).await;
    let invariants = judge(&run, &seen, &tally).await;
    if invariants.values().any(|v| matches!(v, Verdict::Fail(_))) {
        // What a violation is read from stays: the server's request log
        // and the runtime's event log.
        eprintln!(
            "chaos: {} seed {}: kept {} and {}",
            sc.name,
            sc.seed,
            run.ids.log.display(),
            run.ids.event_log.display()
        );
    } else {
        clean_up(&run);
    }
    ScenarioReport::new(sc, invariants, started, tally.outcomes)
}

/// Shut the runtime down (timed), stop the runner's own server, then the
/// observers.
async fn shutdown(run: &mut Run<'_>, observers: Observers) -> Seen {
    // A process the server names on stderr at start: its line and the
    // server's stdout travel on two pipes, and under load the runtime's
    // stderr reader may not have taken it yet when the calls are done
    // (seed 823 of the 1000-seed run at 5bdc079). Wait for it, bounded,
    // before the status is kept for the judging.
    let named = run.sc.faults.iter().filter_map(|f| f.expected_gone());
    for (prefix, _) in named {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline
            && !run
                .runtime
                .status()
                .iter()
                .any(|s| s.stderr_tail.contains(prefix))
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let last_status = serde_json::to_string(&run.runtime.status()).unwrap_or_default();
    // What the runtime publishes of the servers (TRUST-2): the
    // catalog and the instructions, as a host or a gateway reads them.
    let published = format!(
        "{}\n{}",
        serde_json::to_string(&run.runtime.tools(&mcpvisor::Scope::Global)).unwrap_or_default(),
        run.runtime
            .instructions(&mcpvisor::Scope::Global)
            .join("\n")
    );
    let hook_lingerers = crate::processes_with_arg(&run.ids.hook_tag);
    let shutdown_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let shut_started = Instant::now();
    let report = run.runtime.shutdown(SHUTDOWN_DEADLINE).await;
    let took = shut_started.elapsed();
    if let Some(mut p) = run.peer.take() {
        let _ = p.child.kill().await;
        let _ = p.child.wait().await;
    }
    let events = observers.recorder.stop().await;
    // The sampler takes one last sample after the shutdown, then stops.
    let (observed, excluded) = observers.sampler.stop().await;
    Seen {
        took,
        report,
        observed,
        excluded,
        events,
        last_status,
        published,
        hook_lingerers,
        shutdown_ms,
    }
}

/// Every invariant's verdict on what was seen.
async fn judge(run: &Run<'_>, seen: &Seen, tally: &Tally) -> BTreeMap<Invariant, Verdict> {
    let mut invariants = BTreeMap::new();
    let (orphans, considered) = orphans(run, seen).await;
    reap_orphans(considered).await;
    invariants.insert(
        Invariant::NoOrphans,
        verdict(orphans.is_empty(), || {
            format!("alive after shutdown: {orphans:?}")
        }),
    );
    let overlaps = &seen.observed.overlaps;
    invariants.insert(
        Invariant::NoOverlap,
        verdict(overlaps.is_empty(), || {
            overlaps.first().cloned().unwrap_or_default()
        }),
    );
    let gen_problems = &seen.observed.generation_problems;
    invariants.insert(
        Invariant::OneGeneration,
        verdict(gen_problems.is_empty(), || gen_problems.join("; ")),
    );
    let mut budget = check_budget(&seen.events, &policy(), &tally.supervisor_failures);
    budget.extend(check_spawns(
        &run.ids.log,
        &policy(),
        run.sc.every_start_fails(),
        &[&run.ids.main_tag, &run.ids.other_tag],
        &tally.supervisor_failures_ms,
    ));
    budget.extend(check_restarts(
        &seen.events,
        &run.ids.log,
        &policy(),
        "s",
        &run.ids.main_tag,
        &tally.supervisor_failures_ms,
        seen.shutdown_ms,
    ));
    invariants.insert(
        Invariant::BudgetRespected,
        verdict(budget.is_empty(), || budget.join("; ")),
    );
    let doubles = check_double_send(&run.ids.log, &run.ids.run_id, &tally.ok_nonces);
    invariants.insert(
        Invariant::NoDoubleSend,
        verdict(doubles.is_empty(), || doubles.join("; ")),
    );
    invariants.insert(
        Invariant::OneOutcomePerCall,
        one_outcome_per_call(tally, &seen.events),
    );
    invariants.insert(Invariant::BoundedOutcome, bounded_outcome(tally));
    invariants.insert(Invariant::NoLostReply, no_lost_reply(run, tally));
    invariants.insert(Invariant::ReplyToItsCall, reply_to_its_call(tally));
    invariants.insert(Invariant::NoSecretLeak, no_secret_leak(run, seen, tally));
    invariants.insert(
        Invariant::ExpectedConsequences,
        expected_consequences(run, seen, tally, &orphans),
    );
    invariants.insert(
        Invariant::ShutdownWithinDeadline,
        shutdown_within_deadline(seen, &run.problems),
    );
    if run.opts.check_memory {
        // Judged once over the whole soak, on the last scenario's row.
        invariants.insert(Invariant::BoundedMemory, Verdict::Skip);
    }
    invariants
}

/// no_orphans: every process seen below the runner, every process that
/// carries the run's `CHAOS_TAG` in its environment (which a process that
/// left its group with setsid still does), and, when no other run is in
/// flight (`RunOptions::sole`), every process below the runner at all (a
/// subreaper keeps there an orphan that carries no tag) must be gone when
/// the shutdown has returned (RECO-7: after a clean shutdown no child
/// process of the runtime is alive). One found alive is a violation; the
/// runner then gives it 2 s, says whether it was still alive, and kills it.
/// Returns the violations and every process considered.
async fn orphans(run: &Run<'_>, seen: &Seen) -> (Vec<String>, Vec<(u32, u64)>) {
    let with_start = |p: u32| Some((p, crate::start_time(p)?));
    // Each process by pid and start time: a pid seen here may name another
    // run's process by now (pids are reused), which is not this run's orphan
    // and must never be killed by it.
    let mut procs: Vec<(u32, u64)> = seen.observed.seen.iter().copied().collect();
    procs.extend(
        tagged_processes(CHAOS_TAG, &run.ids.run_id)
            .into_iter()
            .filter_map(with_start),
    );
    if run.opts.sole {
        procs.extend(
            crate::descendants_of(std::process::id())
                .into_iter()
                .filter_map(with_start),
        );
    }
    procs.sort_unstable();
    procs.dedup();
    procs.retain(|(p, _)| !seen.excluded.contains(p));
    let alive: Vec<(u32, u64)> = procs
        .iter()
        .copied()
        .filter(|(p, s)| crate::same_process_alive(*p, *s))
        .collect();
    let mut orphans = Vec::new();
    for (pid, start) in alive {
        let cmd = crate::cmdline_of(pid);
        let later =
            !wait_gone(pid, Duration::from_secs(2)).await && crate::same_process_alive(pid, start);
        orphans.push(format!(
            "{pid} ({}) alive when the shutdown returned{}",
            cmd.trim(),
            if later { " and 2 s later" } else { "" }
        ));
        if later && let Ok(p) = i32::try_from(pid) {
            // Judged: now the runner cleans up what the runtime left.
            // SAFETY: kill(2) on a pid seen alive an instant ago.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
    (orphans, procs)
}

/// Reap the zombies the runner adopted (it is a child subreaper in the
/// `chaos` binary): once a run has shut down nothing waits for them. What
/// the runner has just killed (`procs`' live ones) is given up to 500 ms to
/// die first.
async fn reap_orphans(procs: Vec<(u32, u64)>) {
    for (pid, start) in &procs {
        if crate::same_process_alive(*pid, *start) {
            wait_gone(*pid, Duration::from_millis(500)).await;
        }
    }
    crate::reap_adopted();
}

/// one_outcome_per_call: every call issued returned, once, with one
/// `CallFinished` event each.
fn one_outcome_per_call(tally: &Tally, events: &[(Instant, RuntimeEvent)]) -> Verdict {
    let finished = events
        .iter()
        .filter(|(_, e)| matches!(e, RuntimeEvent::CallFinished { .. }))
        .count() as u64;
    let ok = tally.hung.is_empty() && tally.returned == tally.issued && finished == tally.issued;
    verdict(ok, || {
        format!(
            "issued {}, returned {}, CallFinished events {finished}, no outcome: {:?}",
            tally.issued, tally.returned, tally.hung
        )
    })
}

/// bounded_outcome (CALL-4): every call ended within its own bound: its
/// timeout (a browser call's is the provider's), the cancel notice's 1 s
/// margin, the PreToolUse hooks it waited for, and 1.5 s of slack for a
/// loaded 2-core machine (`workload::call_bound`).
fn bounded_outcome(tally: &Tally) -> Verdict {
    verdict(tally.over_bound.is_empty(), || summarise(&tally.over_bound))
}

/// no_lost_reply: when every fault of the plan leaves the server answering,
/// every workload call ended `ok` (a reply read in pieces, a wake from an
/// idle stop, a re-sync racing the calls never cost one).
fn no_lost_reply(run: &Run<'_>, tally: &Tally) -> Verdict {
    if !run.sc.keeps_answering() {
        return Verdict::Skip;
    }
    verdict(tally.not_ok.is_empty() && tally.hung.is_empty(), || {
        let mut all = tally.not_ok.clone();
        all.extend(tally.hung.iter().map(|h| format!("{h}: no outcome")));
        summarise(&all)
    })
}

/// The length of a piece of the secret that counts as showing it: a cut
/// (a ring buffer's, a byte budget's) can leave part of it.
const SECRET_WINDOW: usize = 8;

/// True when `text` shows `secret`, or any [`SECRET_WINDOW`] characters of
/// it in a row.
pub(super) fn shows_part(text: &str, secret: &str) -> bool {
    let bytes = secret.as_bytes();
    if bytes.len() <= SECRET_WINDOW {
        return text.contains(secret);
    }
    bytes
        .windows(SECRET_WINDOW)
        .filter_map(|w| std::str::from_utf8(w).ok())
        .any(|w| text.contains(w))
}

/// reply_to_its_call: every workload call that ended `ok` got its own
/// answer: the echo (or the resource read) names the call's own nonce,
/// never another call's (a reply given to the wrong call is a silent wrong
/// answer to the model).
fn reply_to_its_call(tally: &Tally) -> Verdict {
    if tally.answered == 0 {
        return Verdict::Skip;
    }
    verdict(tally.crossed.is_empty(), || {
        format!(
            "{} of {} answers went to another call: {}",
            tally.crossed.len(),
            tally.answered,
            summarise(&tally.crossed)
        )
    })
}

/// no_secret_leak (TRUST-2): the run's secret value appears in no event,
/// outcome, status or event-log line.
fn no_secret_leak(run: &Run<'_>, seen: &Seen, tally: &Tally) -> Verdict {
    if !run.sc.has_secret() {
        return Verdict::Skip;
    }
    let secret = run.ids.secret.as_str();
    // The runtime's own surfaces first, then each call's outcome.
    let mut leaks = Vec::new();
    let in_events = seen
        .events
        .iter()
        .filter(|(_, e)| shows_part(&serde_json::to_string(e).unwrap_or_default(), secret))
        .count();
    if in_events > 0 {
        leaks.push(format!("{in_events} runtime event(s)"));
    }
    if shows_part(&seen.last_status, secret) {
        leaks.push("the servers' status".into());
    }
    if shows_part(&seen.published, secret) {
        leaks.push("the published catalog or instructions".into());
    }
    if shows_part(&tally.model_requests, secret) {
        leaks.push("a model request of a turn".into());
    }
    match std::fs::read_to_string(&run.ids.event_log) {
        Ok(log) if shows_part(&log, secret) => leaks.push("the event log".into()),
        Ok(_) => {}
        Err(e) => leaks.push(format!("the event log could not be read: {e}")),
    }
    leaks.extend(tally.leaks.iter().cloned());
    verdict(leaks.is_empty(), || {
        format!("the secret value is in {}", summarise(&leaks))
    })
}

/// expected_consequences: each fault's promise in docs/chaos.md, where it has
/// one that is certain: the trigger's outcome kind, the text the status
/// shows, the number of catalog fetches (SYNC-5).
fn expected_consequences(run: &Run<'_>, seen: &Seen, tally: &Tally, orphans: &[String]) -> Verdict {
    let mut judged = false;
    let mut problems = Vec::new();
    for fault in &run.sc.faults {
        if let (Some(tool), Some(want)) = (fault.trigger(), fault.expected_trigger()) {
            judged = true;
            for (t, got, _) in tally.triggers.iter().filter(|(t, _, _)| *t == tool) {
                if got != want {
                    problems.push(format!(
                        "{}: trigger {t} ended {got}, not {want}",
                        fault.name()
                    ));
                }
            }
        }
        if let (Some(tool), Some(note)) = (fault.trigger(), fault.expected_trigger_note()) {
            judged = true;
            for (t, _, notes) in tally.triggers.iter().filter(|(t, _, _)| *t == tool) {
                if !notes.contains(note) {
                    problems.push(format!(
                        "{}: trigger {t}'s notes do not say {note:?}: {notes:?}",
                        fault.name()
                    ));
                }
            }
        }
        if let Some(want) = fault.expected_workload() {
            judged = true;
            let wrong = tally.workload_kinds.iter().filter(|k| *k != want).count();
            if wrong > 0 || tally.workload_kinds.is_empty() {
                problems.push(format!(
                    "{}: {wrong} of {} workload calls did not end {want}",
                    fault.name(),
                    tally.workload_kinds.len()
                ));
            }
        }
        for want in fault.expected_in_workload() {
            judged = true;
            if !tally.workload_kinds.iter().any(|k| k == want) {
                problems.push(format!(
                    "{}: no workload call ended {want}: {:?}",
                    fault.name(),
                    tally.workload_kinds
                ));
            }
        }
        // CALL-5: the call the server answered 404 for its
        // session (fault-server logs it) says it never ran. One that ended
        // `ok` was re-sent: that is `no_double_send`'s to judge.
        if let Fault::HttpSessionLoss { .. } = fault {
            judged = true;
            let log = std::fs::read_to_string(&run.ids.log).unwrap_or_default();
            let refused = tally.by_nonce.iter().filter(|(nonce, _, _)| {
                log.lines()
                    .any(|l| l.starts_with("refused-404 ") && l.contains(&format!("\"{nonce}\"")))
            });
            for (nonce, kind, error) in refused {
                let said = kind == "server_not_ready" && error.contains("not sent, nothing ran");
                if kind != "ok" && !said {
                    problems.push(format!(
                        "{}: the call the server answered 404 ({nonce}) ended {kind}, not \"not sent\": {error}",
                        fault.name()
                    ));
                }
            }
        }
        // Recovery is counted after the trigger only: calls made before
        // the fault prove nothing about the server coming back.
        if fault.recovers() && run.sc.calls > 0 {
            judged = true;
            if !tally.after_trigger_kinds.iter().any(|k| k == "ok") {
                problems.push(format!(
                    "{}: no workload call after the fault ended ok (the server never came back): {:?}",
                    fault.name(),
                    tally.after_trigger_kinds
                ));
            }
        }
        if let Some(note) = fault.expected_workload_note() {
            judged = true;
            let missing = tally
                .workload_notes
                .iter()
                .filter(|n| !n.contains(note))
                .count();
            if missing > 0 || tally.workload_notes.is_empty() {
                problems.push(format!(
                    "{}: {missing} of {} workload calls' notes do not say {note:?}",
                    fault.name(),
                    tally.workload_notes.len()
                ));
            }
        }
        if let Some((method, least)) = fault.expected_requests_at_least() {
            judged = true;
            let got = requests_logged(&run.ids.log, method);
            if got < least {
                problems.push(format!(
                    "{}: the server got {got} {method} requests, fewer than {least}",
                    fault.name()
                ));
            }
        }
        if let Some(least) = fault.expected_least_call_time() {
            judged = true;
            let quick = tally.workload_took.iter().filter(|t| **t < least).count();
            if quick > 0 || tally.workload_took.is_empty() {
                problems.push(format!(
                    "{}: {quick} of {} workload calls ended in under the server's {least:?} delay",
                    fault.name(),
                    tally.workload_took.len()
                ));
            }
        }
        if let Some((prefix, escapes)) = fault.expected_gone() {
            judged = true;
            problems.extend(gone_consequences(
                fault.name(),
                seen,
                orphans,
                prefix,
                escapes,
            ));
        }
        if *fault == Fault::HookGrandchild {
            judged = true;
            if !seen.hook_lingerers.is_empty() {
                problems.push(format!(
                    "hook_grandchild: {:?} that hooks backgrounded still ran after their hooks ended (HOOK-8: the group kill)",
                    seen.hook_lingerers
                ));
            }
        }
        if let Some(text) = fault.expected_in_status() {
            judged = true;
            if !seen.last_status.contains(text.as_str()) {
                problems.push(format!(
                    "{}: the status does not say {text:?}",
                    fault.name()
                ));
            }
        }
        if let Some(want) = fault.expected_turn() {
            judged = true;
            match tally.turns.iter().find(|(f, ..)| *f == fault.name()) {
                None => problems.push(format!("{}: no turn was run", fault.name())),
                Some((_, kind, message, ran)) => {
                    if kind != want.kind || !message.contains(want.says) {
                        problems.push(format!(
                            "{}: the turn ended {kind} ({message:?}), not {} saying {:?}",
                            fault.name(),
                            want.kind,
                            want.says
                        ));
                    }
                    if *ran > 0 {
                        problems.push(format!(
                            "{}: {ran} tool call(s) ran from a half-streamed round",
                            fault.name()
                        ));
                    }
                }
            }
        }
        if let (Some(least), [_]) = (fault.expected_shutdown_at_least(), run.sc.faults.as_slice()) {
            judged = true;
            if seen.took < least {
                problems.push(format!(
                    "{}: the shutdown took {:?}, less than the close sequence's {least:?}: it did not wait out the stubborn server's graces (CONN-8)",
                    fault.name(),
                    seen.took
                ));
            }
            if seen.report.processes_reaped.is_empty() {
                problems.push(format!("{}: the shutdown reaped no process", fault.name()));
            }
        }
        if let Some(bytes) = fault.expected_pad() {
            judged = true;
            problems.extend(pad_consequences(&run.ids.log, bytes));
        }
        if *fault == Fault::BrowserWontDie {
            judged = true;
            problems.extend(browser_consequences(seen, tally));
        }
        if let Some(tool) = fault.expected_published_tool() {
            judged = true;
            if !seen.published.contains(&format!("\"{tool}\"")) {
                problems.push(format!(
                    "{}: the catalog just before the shutdown lacks {tool}, which the server added (no re-sync after it)",
                    fault.name()
                ));
            }
        }
        if let Some(want) = fault.expected_lists() {
            judged = true;
            let got = requests_logged(&run.ids.log, "tools/list");
            if got != want {
                problems.push(format!(
                    "{}: {got} tools/list requests where {want} were due (SYNC-3 pages; SYNC-5: connect, sync, one follow-up)",
                    fault.name()
                ));
            }
        }
    }
    if !judged {
        return Verdict::Skip;
    }
    verdict(problems.is_empty(), || summarise(&problems))
}

/// `grandchild`, `daemonized_grandchild`: the process the server named on
/// stderr (`<prefix><pid>`, in the status's stderr tail) is gone after the
/// shutdown, and the report lists it as escaped exactly when it left the
/// server's group. `orphans` are what no_orphans found alive after the
/// shutdown (and has killed since).
fn gone_consequences(
    fault: &str,
    seen: &Seen,
    orphans: &[String],
    prefix: &str,
    escapes: bool,
) -> Vec<String> {
    let pid = seen.last_status.split(prefix).nth(1).and_then(|rest| {
        rest.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    let Some(pid) = pid else {
        return vec![format!(
            "{fault}: the status's stderr tail does not name the process ({prefix:?})"
        )];
    };
    // The process the stderr named, by its start time when the sampler saw
    // it: its pid may name another run's process by now.
    let starts: Vec<u64> = seen
        .observed
        .seen
        .iter()
        .filter(|(p, _)| *p == pid)
        .map(|(_, s)| *s)
        .collect();
    let running = if starts.is_empty() {
        crate::process_alive(pid)
    } else {
        starts.iter().any(|s| crate::same_process_alive(pid, *s))
    };
    let alive = running || orphans.iter().any(|o| o.starts_with(&format!("{pid} ")));
    let listed = seen.report.escaped.contains(&pid);
    match (escapes, alive, listed) {
        // An escaped process that survived is no_orphans' finding.
        (true, true, _) | (true, false, true) | (false, false, false) => Vec::new(),
        (true, false, false) => vec![format!(
            "{fault}: {pid} left its group and was killed, but the report's escaped list {:?} does not say so",
            seen.report.escaped
        )],
        (false, true, _) => vec![format!(
            "{fault}: {pid} in the server's group still runs after the shutdown"
        )],
        (false, false, true) => vec![format!(
            "{fault}: {pid} died with its group, yet the report lists it as escaped"
        )],
    }
}

/// `large_args`: every echo the server logged carries the whole `pad`
/// (the log has each call's arguments as the server got them), and at
/// least one reached it.
fn pad_consequences(log: &std::path::Path, bytes: usize) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut problems = Vec::new();
    let mut seen = 0;
    for line in text.lines().filter(|l| l.starts_with("tools/call ")) {
        let Some((_, args)) = line.split_once(" echo ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(args) else {
            problems.push(format!(
                "large_args: an echo's logged arguments are not JSON ({} bytes)",
                args.len()
            ));
            continue;
        };
        let Some(pad) = v.get("pad").and_then(|p| p.as_str()) else {
            continue;
        };
        seen += 1;
        if pad.len() != bytes {
            problems.push(format!(
                "large_args: the server got a pad of {} bytes, not {bytes}",
                pad.len()
            ));
        }
    }
    if seen == 0 {
        problems.push("large_args: no padded echo reached the server".into());
    }
    problems
}

/// `browser_wont_die`: the browser was driven (navigate and snapshot ended
/// ok), and the shutdown reported its pid reaped, and nothing of its
/// process group runs (no_orphans judges every process the runner saw).
fn browser_consequences(seen: &Seen, tally: &Tally) -> Vec<String> {
    let mut problems = Vec::new();
    for (what, kind) in &tally.browser {
        if kind != "ok" {
            problems.push(format!("browser_wont_die: {what} ended {kind}"));
        }
    }
    match tally.browser_pid {
        None => problems.push("browser_wont_die: no browser pid was owned".into()),
        Some(pid) if !seen.report.processes_reaped.contains(&pid) => problems.push(format!(
            "browser_wont_die: the shutdown did not report browser {pid} reaped: {:?}",
            seen.report.processes_reaped
        )),
        Some(pid) => {
            let group = crate::processes_in_group(pid);
            if !group.is_empty() {
                problems.push(format!(
                    "browser_wont_die: {group:?} of the browser's group still run"
                ));
            }
        }
    }
    problems
}

/// The first three of `items` and how many more: a violation stays readable.
fn summarise(items: &[String]) -> String {
    let mut s = items.iter().take(3).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 3 {
        s.push_str(&format!("; … and {} more", items.len() - 3));
    }
    s
}

/// shutdown_within_deadline: the report came in time, clean, after a setup
/// without problems.
fn shutdown_within_deadline(seen: &Seen, problems: &[String]) -> Verdict {
    let in_time = seen.took <= SHUTDOWN_DEADLINE + Duration::from_secs(1);
    verdict(
        in_time && seen.report.is_clean() && problems.is_empty(),
        || {
            format!(
                "took {:?}; unconfirmed {:?}; setup problems {problems:?}",
                seen.took, seen.report.unconfirmed
            )
        },
    )
}

/// Remove the run's request log and hook files.
fn clean_up(run: &Run<'_>) {
    let _ = std::fs::remove_dir_all(&run.ids.browser_dir);
    let _ = std::fs::remove_file(&run.ids.log);
    let _ = std::fs::remove_file(&run.ids.event_log);
    for f in &run.hook_files {
        let _ = std::fs::remove_file(f);
    }
}

/// How many `method` requests the server's request log holds (0 when there
/// is no log yet).
pub(super) fn requests_logged(log: &std::path::Path, method: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').next() == Some(method))
        .count()
}
