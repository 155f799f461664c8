//! The invariants of CHAOS-2, their verdicts, the report of one scenario,
//! and the pure checks that turn what was observed into verdicts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcpvisor::{ReconnectPolicy, RuntimeEvent, ServerState, ServerStatus, ToolDefinition};
use serde::Serialize;

use super::fault::Fault;
use super::scenario::Scenario;

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
    /// Every call's outcome arrives within its timeout plus the documented
    /// margin (CALL-4: the cancel notice's 1 s), plus the hooks it waits for.
    BoundedOutcome,
    /// The shutdown report arrives within its deadline, clean.
    ShutdownWithinDeadline,
    /// Every workload call ends `ok` when the plan's faults leave the server
    /// answering (no reply lost to a split read, a re-sync or an idle stop).
    NoLostReply,
    /// The run's secret value appears in no event, outcome, status or log (TRUST-2).
    NoSecretLeak,
    /// Every workload call that ended `ok` got its own answer, not another
    /// call's (its echo names its own nonce).
    ReplyToItsCall,
    /// Each fault's own consequence, as docs/chaos.md promises it: its
    /// trigger's outcome kind, what the status says, how many syncs.
    ExpectedConsequences,
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
            Self::BoundedOutcome => "bounded_outcome",
            Self::ShutdownWithinDeadline => "shutdown_within_deadline",
            Self::NoLostReply => "no_lost_reply",
            Self::ReplyToItsCall => "reply_to_its_call",
            Self::NoSecretLeak => "no_secret_leak",
            Self::ExpectedConsequences => "expected_consequences",
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
    /// Not judged: the scenario makes no promise this invariant checks
    /// (an HTTP run has no secret; a crashing server may fail calls).
    Skip,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pass => f.write_str("pass"),
            Self::Fail(_) => f.write_str("fail"),
            Self::Skip => f.write_str("skip"),
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
                Verdict::Pass | Verdict::Skip => None,
            })
            .collect()
    }

    /// The report of `sc`: its verdicts, the calls' outcome kinds, and the
    /// wall time since `started`.
    pub(super) fn new(
        sc: &Scenario,
        invariants: BTreeMap<Invariant, Verdict>,
        started: Instant,
        outcomes: BTreeMap<String, u64>,
    ) -> Self {
        Self {
            name: sc.name.to_owned(),
            seed: sc.seed,
            faults: sc.faults.iter().map(|f| f.name().to_owned()).collect(),
            plan: sc.faults.clone(),
            invariants,
            duration_ms: started.elapsed().as_millis() as u64,
            outcomes,
        }
    }
}

/// Pass when `ok`, else a failure saying `why`.
pub(super) fn verdict(ok: bool, why: impl FnOnce() -> String) -> Verdict {
    if ok {
        Verdict::Pass
    } else {
        Verdict::Fail(why())
    }
}

/// one_generation, from one snapshot of each server's status and its
/// registered tools (`catalogs`): the tools share one generation, the one
/// the status names; their number is the status's count; and each server
/// shows either no tools or its whole catalog (`expected`). A server with
/// no tools is judged too: its status must say 0 (a removal or an emptied
/// catalog is a swap like any other).
pub(super) fn generation_problems(
    catalogs: &[(ServerStatus, Arc<Vec<Arc<ToolDefinition>>>)],
    expected: &HashMap<String, u64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (status, tools) in catalogs {
        let server = &status.server;
        let gens: HashSet<u64> = tools.iter().map(|t| t.generation).collect();
        if gens.len() > 1 {
            problems.push(format!("{server}: generations {gens:?} registered at once"));
        }
        if let Some(g) = gens.iter().next()
            && gens.len() == 1
            && *g != status.generation
        {
            problems.push(format!(
                "{server}: tools of generation {g} registered, the status says {}",
                status.generation
            ));
        }
        if tools.len() != status.tools {
            problems.push(format!(
                "{server}: {} tools registered, the status says {}",
                tools.len(),
                status.tools
            ));
        }
        if let Some(&whole) = expected.get(server.as_str())
            && !tools.is_empty()
            && tools.len() as u64 != whole
        {
            problems.push(format!(
                "{server}: {} tools registered, the whole catalog has {whole}",
                tools.len()
            ));
        }
    }
    problems
}

/// The recorder stamps an event when it receives it, a little after the
/// runtime sent it: how much earlier than its stamp an event may have
/// happened, when set against an instant the runner took itself.
const STAMP_SLACK: Duration = Duration::from_millis(250);

/// budget_respected: attempt k never exceeds max_attempts, and the next
/// connection after `reconnecting(k)` starts no earlier than delay(k). A
/// server supervisor that failed (at an instant of `restarts`) is restarted
/// by its scope and starts its schedule anew: a wait that spans one (give or
/// take [`STAMP_SLACK`]) is not judged.
pub(super) fn check_budget(
    events: &[(Instant, RuntimeEvent)],
    policy: &ReconnectPolicy,
    restarts: &[Instant],
) -> Vec<String> {
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
            // A stdio server's schedule is judged from its own start times
            // (check_spawns); receipt times of events can bunch up when the
            // recorder stalls on a loaded machine.
            && s.transport != "stdio"
        {
            let waited = at.duration_since(since);
            let want = policy.delay_for_attempt(attempt);
            let restarted = restarts
                .iter()
                .any(|r| since <= *r + STAMP_SLACK && *r <= *at);
            if !restarted && waited + Duration::from_millis(2) < want {
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

/// budget_respected from the servers' own clocks (fault-server's `start`
/// lines): consecutive starts of one server are at least the policy's
/// initial delay apart (a start can only come later than its backoff, never
/// earlier, however loaded the machine), and a server whose every start
/// fails is started exactly `1 + max_attempts` times, its k-th restart at
/// least the k-th delay of the schedule after the one before (one outage:
/// 20, 40, 80 ms), so a runtime without backoff cannot pass on a loaded
/// machine whose spawns happen to take 20 ms.
pub(super) fn check_spawns(
    log: &Path,
    policy: &ReconnectPolicy,
    every_start_fails: bool,
    tags: &[&str],
    restarts_ms: &[u128],
) -> Vec<String> {
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) => {
            return vec![format!(
                "runner error: the spawn log {} cannot be read ({e})",
                log.display()
            )];
        }
    };
    let mut problems = Vec::new();
    for tag in tags {
        let mut starts: Vec<u128> = text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("start") && w.next() == Some(*tag))
                    .then(|| w.nth(1).and_then(|ms| ms.parse().ok()))
                    .flatten()
            })
            .collect();
        starts.sort_unstable();
        let one_outage = every_start_fails && tag.ends_with("-s");
        for (k, pair) in starts.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            let floor = match u32::try_from(k + 1) {
                Ok(attempt) if one_outage => policy.delay_for_attempt(attempt).as_millis(),
                _ => policy.initial_delay.as_millis(),
            };
            // A supervisor restart between them starts the schedule anew.
            let restarted = restarts_ms
                .iter()
                .any(|r| pair[0] <= *r + 250 && *r <= pair[1]);
            if gap + 1 < floor && !restarted {
                problems.push(format!(
                    "{tag}: started again {gap} ms after its last start, the backoff is at least {floor} ms"
                ));
            }
        }
        let want = 1 + policy.max_attempts as usize;
        if every_start_fails && tag.ends_with("-s") && starts.len() != want {
            problems.push(format!(
                "{tag}: started {} times, every start fails: 1 + max_attempts = {want}",
                starts.len()
            ));
        }
    }
    problems
}

/// How long after a failure's delay the next start may come: the
/// replacement waits for the old process's close to be confirmed (a hung
/// server is SIGTERMed 1 s after its stdin closed, RECO-3), then spawns;
/// plus a loaded 2-core machine.
pub(super) const RESTART_SLACK: Duration = Duration::from_secs(4);

/// budget_respected from each failure to the next start (RECO-1): every
/// `reconnecting(k)` status of a stdio server carries when the runtime
/// registered the failure (`last_failure_unix_ms`); the server's next
/// `start` line (its own clock, the same machine's) must come at least
/// delay(k) after it (a runtime without backoff fails this, however long
/// its spawns take) and at most delay(k) + [`RESTART_SLACK`] after it (so
/// does one that never reconnects). Not judged: a wait that spans a
/// supervisor restart (`restarts_ms`), and a failure too close to the
/// shutdown (`shutdown_ms`) for its restart to be due.
pub(super) fn check_restarts(
    events: &[(Instant, RuntimeEvent)],
    log: &Path,
    policy: &ReconnectPolicy,
    server: &str,
    tag: &str,
    restarts_ms: &[u128],
    shutdown_ms: u128,
) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(log) else {
        // check_spawns reports an unreadable log.
        return Vec::new();
    };
    let mut starts: Vec<u128> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("start") && w.next() == Some(tag))
                .then(|| w.nth(1).and_then(|ms| ms.parse().ok()))
                .flatten()
        })
        .collect();
    starts.sort_unstable();
    let mut failures: Vec<(u128, u32)> = Vec::new();
    for (_, e) in events {
        let RuntimeEvent::ServerStatus(s) = e else {
            continue;
        };
        if let (ServerState::Reconnecting { attempt, .. }, Some(at), "stdio") =
            (&s.state, s.last_failure_unix_ms, s.transport)
            && s.server == server
            && !failures.iter().any(|(f, _)| *f == u128::from(at))
        {
            failures.push((u128::from(at), *attempt));
        }
    }
    let mut problems = Vec::new();
    for (failed, attempt) in failures {
        let want = policy.delay_for_attempt(attempt).as_millis();
        let ceiling = want + RESTART_SLACK.as_millis();
        let restarted = |until: u128| {
            restarts_ms
                .iter()
                .any(|r| failed <= *r + 250 && *r <= until)
        };
        match starts.iter().find(|s| **s > failed) {
            Some(next) if restarted(*next) => {}
            Some(next) => {
                let gap = next - failed;
                if gap + 1 < want {
                    problems.push(format!(
                        "{tag}: attempt {attempt} started {gap} ms after the failure, the schedule says {want} ms"
                    ));
                }
                if gap > ceiling {
                    problems.push(format!(
                        "{tag}: attempt {attempt} started only {gap} ms after the failure, past {want} ms plus {} ms of slack",
                        RESTART_SLACK.as_millis()
                    ));
                }
            }
            None if failed + ceiling < shutdown_ms && !restarted(shutdown_ms) => {
                problems.push(format!(
                    "{tag}: attempt {attempt} never started ({} ms between the failure and the shutdown)",
                    shutdown_ms - failed
                ));
            }
            None => {}
        }
    }
    problems
}

/// no_double_send (CALL-5): every nonce of this run was executed at most
/// once (the handler's lines) and sent at most once (the HTTP layer's `post`
/// lines, which include requests answered with an error); and every call
/// that ended `ok` (`ok_nonces`) was executed exactly once. A log that
/// cannot be read while calls ended `ok` is a failure, not "no duplicates".
pub(super) fn check_double_send(log: &Path, run_id: &str, ok_nonces: &[String]) -> Vec<String> {
    // Every fault-server writes its start line to the log first thing, so
    // a run always has one: without it nothing can be judged, which is the
    // runner's failure, never "no duplicates".
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) => {
            return vec![format!(
                "runner error: the request log {} cannot be read ({e}); {} call(s) ended ok",
                log.display(),
                ok_nonces.len()
            )];
        }
    };
    // A call's stateless-era rounds (ERA-5) each carry the state the
    // server minted (` state=…` at the end of the line): a round is its own
    // request, and the same round twice is a re-send.
    let mut executed: HashMap<String, u32> = HashMap::new();
    let mut posted: HashMap<String, u32> = HashMap::new();
    for line in text.lines() {
        let counts = if line.starts_with("tools/call") || line.starts_with("resources/read") {
            &mut executed
        } else if line.starts_with("post ") {
            &mut posted
        } else {
            continue;
        };
        if let Some(start) = line.find(run_id) {
            let rest = &line[start..];
            let end = rest.find('"').unwrap_or(rest.len());
            let round = line.rfind(" state=").map_or("", |at| &line[at..]);
            *counts
                .entry(format!("{}{round}", &rest[..end]))
                .or_default() += 1;
        }
    }
    let mut problems: Vec<String> = Vec::new();
    for (what, counts) in [("arrived", &executed), ("was sent", &posted)] {
        problems.extend(
            counts
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(nonce, n)| format!("{nonce} {what} {n} times")),
        );
    }
    for nonce in ok_nonces {
        if !executed.contains_key(nonce) {
            problems.push(format!("{nonce} ended ok but the server never ran it"));
        }
    }
    problems.sort();
    problems
}

#[cfg(test)]
mod tests {
    use mcpvisor::Scope;

    use super::super::setup::policy;
    use super::*;
    use crate::unique_temp_path;

    fn status(state: ServerState, conn_gen: u64, failures: u32) -> RuntimeEvent {
        let mut s = mcpvisor::ServerStatus::new(Scope::Global, "s", "streamable_http", 0);
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
        let problems = check_budget(&early, &p, &[]);
        // A supervisor restart in between starts the schedule anew.
        assert!(check_budget(&early, &p, &[t0 + Duration::from_millis(1)]).is_empty());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("schedule says 200ms"), "{problems:?}");
        let past = vec![(
            t0,
            status(ServerState::Reconnecting { attempt: 4, of: 3 }, 1, 4),
        )];
        assert_eq!(check_budget(&past, &p, &[]).len(), 1);
        let on_time = vec![
            (
                t0,
                status(ServerState::Reconnecting { attempt: 1, of: 3 }, 1, 1),
            ),
            (
                t0 + Duration::from_millis(100),
                status(ServerState::Connecting, 2, 1),
            ),
        ];
        assert!(check_budget(&on_time, &p, &[]).is_empty());
    }

    #[test]
    fn spawn_check_flags_a_start_before_the_backoff_and_a_count_past_the_budget() {
        // CHAOS-2 budget_respected, from fault-server's own start lines.
        let log = unique_temp_path("spawns.log");
        let p = policy();
        std::fs::write(
            &log,
            "start r-s 1 1000\nstart r-s 2 1150\nstart r-s 3 1155\nstart r-s__t 4 1000\n",
        )
        .unwrap();
        let problems = check_spawns(&log, &p, true, &["r-s", "r-s__t"], &[]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("5 ms after its last start"),
            "{problems:?}"
        );
        assert!(problems[1].contains("started 3 times"), "{problems:?}");
        std::fs::write(
            &log,
            "start r-s 1 1000\nstart r-s 2 1100\nstart r-s 3 1300\nstart r-s 4 1700\n",
        )
        .unwrap();
        assert!(check_spawns(&log, &p, true, &["r-s"], &[]).is_empty());
        // One outage's restarts 125 ms apart: past the first delay, short
        // of the second and the third.
        std::fs::write(
            &log,
            "start r-s 1 1000\nstart r-s 2 1125\nstart r-s 3 1250\nstart r-s 4 1375\n",
        )
        .unwrap();
        let problems = check_spawns(&log, &p, true, &["r-s"], &[]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("at least 200 ms"), "{problems:?}");
        assert!(problems[1].contains("at least 400 ms"), "{problems:?}");
        // Starts of separate outages (a server that connects in between)
        // are held to the first delay only.
        assert!(check_spawns(&log, &p, false, &["r-s"], &[]).is_empty());
        // A supervisor restart between two starts excuses their gap.
        std::fs::write(&log, "start r-s 1 1000\nstart r-s 2 1005\n").unwrap();
        assert!(check_spawns(&log, &p, false, &["r-s"], &[1003]).is_empty());
        assert_eq!(check_spawns(&log, &p, false, &["r-s"], &[]).len(), 1);
        let _ = std::fs::remove_file(&log);
    }

    #[test]
    fn restart_check_flags_a_restart_without_backoff_one_past_the_schedule_and_none_at_all() {
        // CHAOS-2 budget_respected: from each failure the runtime
        // registered to the server's next start, both bounds.
        let log = unique_temp_path("restarts.log");
        let p = policy();
        let want = p.delay_for_attempt(2).as_millis();
        let slack = RESTART_SLACK.as_millis();
        let t0 = Instant::now();
        let mut failed = status(ServerState::Reconnecting { attempt: 2, of: 3 }, 1, 2);
        if let RuntimeEvent::ServerStatus(s) = &mut failed {
            s.transport = "stdio";
            s.last_failure_unix_ms = Some(2000);
        }
        let events = vec![(t0, failed.clone()), (t0, failed)];
        let check = |next: Option<u128>, shutdown: u128, restarts: &[u128]| {
            let mut text = "start r-s 1 1000\n".to_owned();
            if let Some(n) = next {
                text.push_str(&format!("start r-s 2 {n}\n"));
            }
            std::fs::write(&log, text).unwrap();
            check_restarts(&events, &log, &p, "s", "r-s", restarts, shutdown)
        };
        assert!(check(Some(2000 + want), 99_999, &[]).is_empty());
        let early = check(Some(2005), 99_999, &[]);
        assert_eq!(early.len(), 1, "{early:?}");
        assert!(
            early[0].contains("started 5 ms after the failure"),
            "{early:?}"
        );
        assert!(
            check(Some(2005), 99_999, &[2003]).is_empty(),
            "a supervisor restart"
        );
        let late = check(Some(2000 + want + slack + 1), 99_999, &[]);
        assert!(late[0].contains("started only"), "{late:?}");
        let never = check(None, 2000 + want + slack + 1, &[]);
        assert!(never[0].contains("never started"), "{never:?}");
        assert!(check(None, 2000 + want + slack - 1, &[]).is_empty());
        let _ = std::fs::remove_file(&log);
    }

    #[test]
    fn one_generation_judges_each_server_against_its_own_status_zero_tools_included() {
        // one_generation judges a server with zero tools too.
        let tool = |name: &str, generation: u64| {
            Arc::new(ToolDefinition {
                name: format!("mcp__s__{name}"),
                scope: Scope::Global,
                server: "s".into(),
                raw_name: name.into(),
                generation,
                title: None,
                description: None,
                input_schema: Arc::default(),
                output_schema: None,
                annotations: None,
                task_support_required: false,
            })
        };
        let status = |tools: usize, generation: u64| {
            let mut s = mcpvisor::ServerStatus::new(Scope::Global, "s", "stdio", 1);
            s.tools = tools;
            s.generation = generation;
            s
        };
        let whole = HashMap::from([("s".to_owned(), 2)]);
        let two = Arc::new(vec![tool("a", 3), tool("b", 3)]);
        let none = Arc::new(Vec::new());
        // Consistent: the whole catalog, or none with a status saying 0.
        assert!(generation_problems(&[(status(2, 3), two.clone())], &whole).is_empty());
        assert!(generation_problems(&[(status(0, 4), none.clone())], &whole).is_empty());
        // A status that claims tools nobody registered (a removal or an
        // emptied catalog that was not one swap), and the reverse.
        let p = generation_problems(&[(status(2, 4), none)], &whole);
        assert_eq!(
            p,
            vec!["s: 0 tools registered, the status says 2".to_owned()]
        );
        let p = generation_problems(&[(status(0, 3), two.clone())], &whole);
        assert_eq!(
            p,
            vec!["s: 2 tools registered, the status says 0".to_owned()]
        );
        // Tools of another generation than the status names; two at once;
        // half a catalog.
        let p = generation_problems(&[(status(2, 4), two)], &whole);
        assert!(
            p[0].contains("generation 3 registered, the status says 4"),
            "{p:?}"
        );
        let mixed = Arc::new(vec![tool("a", 3), tool("b", 4)]);
        let p = generation_problems(&[(status(2, 4), mixed)], &whole);
        assert!(p[0].contains("registered at once"), "{p:?}");
        let half = Arc::new(vec![tool("a", 3)]);
        let p = generation_problems(&[(status(1, 3), half)], &whole);
        assert_eq!(
            p,
            vec!["s: 1 tools registered, the whole catalog has 2".to_owned()]
        );
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
        let problems = check_double_send(&log, "run", &["run#2".into()]);
        assert_eq!(problems, vec!["run#1 arrived 2 times".to_owned()]);
        // The rounds of one call after input_required each carry their
        // state: not a re-send; the same round twice is.
        std::fs::write(
            &log,
            "tools/call 1 t {\"message\":\"run#4\"}\ntools/call 2 t {\"message\":\"run#4\"} state=r1\ntools/call 3 t {\"message\":\"run#4\"} state=r2\ntools/call 4 t {\"message\":\"run#5\"} state=r1\ntools/call 5 t {\"message\":\"run#5\"} state=r1\n",
        )
        .unwrap();
        let problems = check_double_send(&log, "run", &[]);
        assert_eq!(problems, vec!["run#5 state=r1 arrived 2 times".to_owned()]);
        // A request re-sent at the HTTP layer counts even when it ran once,
        // and an ok call the server never ran is flagged.
        std::fs::write(
            &log,
            "post tools/call {\"message\":\"run#3\"}\npost tools/call {\"message\":\"run#3\"}\ntools/call 4 echo {\"message\":\"run#3\"}\n",
        )
        .unwrap();
        let problems = check_double_send(&log, "run", &["run#3".into(), "run#9".into()]);
        assert_eq!(
            problems,
            vec![
                "run#3 was sent 2 times".to_owned(),
                "run#9 ended ok but the server never ran it".to_owned()
            ]
        );
        let _ = std::fs::remove_file(&log);
        // A missing log is the runner's error, whether or not calls ended
        // ok: never "no duplicates".
        let missing = check_double_send(&log, "run", &["run#1".into()]);
        assert!(missing[0].contains("cannot be read"), "{missing:?}");
        let missing = check_double_send(&log, "run", &[]);
        assert!(missing[0].starts_with("runner error"), "{missing:?}");
        let missing = check_spawns(&log, &policy(), false, &["r-s"], &[]);
        assert!(missing[0].starts_with("runner error"), "{missing:?}");
    }
}
