//! What a run observes while it runs: a sampler walking `/proc` for the
//! run's tagged processes, a recorder keeping every runtime event, and this
//! process's resident memory.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpvisor::{Runtime, RuntimeEvent, Scope};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::invariant::generation_problems;
use crate::{ProcTable, ProcWatch, cmdline_of, parent_of, process_alive};

/// How often the sampler walks `/proc`.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// What the sampler and the recorder saw during one run.
#[derive(Debug, Default, Clone)]
pub(super) struct Observed {
    /// Every process of this run ever seen, as (pid, start time): tagged
    /// server processes and their descendants.
    pub(super) seen: HashSet<(u32, u64)>,
    /// Overlap evidence: server tag → (pids alive together).
    pub(super) overlaps: Vec<String>,
    /// one_generation violations seen at events.
    pub(super) generation_problems: Vec<String>,
}

/// The `--tag` values the sampler looks for.
struct Tags {
    /// Servers' tags: never two processes of one alive at once.
    servers: Vec<String>,
    /// Only followed for orphans (hook processes, many at once by design).
    tracked: Vec<String>,
}

/// Walks `/proc` every few milliseconds until stopped, recording the run's
/// processes and any two live servers of one tag. It runs on a thread of its
/// own: a walk is synchronous file reading, and on one of the runtime's two
/// workers it would take that worker from the runtime under test while its
/// timings are judged.
pub(super) struct Sampler {
    /// Shared with the recorder, which adds generation problems.
    observed: Arc<Mutex<Observed>>,
    /// Runner-owned processes (an HTTP fault-server) that are never judged.
    exclude: Arc<Mutex<HashSet<u32>>>,
    /// Ends the sampling thread (after one last sample).
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// The sampling thread.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Start sampling for processes tagged with one of `servers` (never two
    /// alive at once) or `tracked` (only followed for orphans).
    /// Its readings of `/proc` come from `procs`, shared with the other
    /// runs in flight.
    pub(super) fn start(servers: Vec<String>, tracked: Vec<String>, procs: Arc<ProcWatch>) -> Self {
        let observed = Arc::new(Mutex::new(Observed::default()));
        let exclude = Arc::new(Mutex::new(HashSet::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (o, e, s) = (observed.clone(), exclude.clone(), stop.clone());
        let tags = Tags { servers, tracked };
        let thread = std::thread::Builder::new()
            .name("chaos-sampler".into())
            .spawn(move || sample_until(&s, &tags, &o, &e, &procs));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(err) => {
                // Judged, not silent: without samples no_orphans and
                // no_overlap would pass vacuously.
                if let Ok(mut obs) = observed.lock() {
                    obs.overlaps
                        .push(format!("the sampler thread could not start: {err}"));
                }
                None
            }
        };
        Self {
            observed,
            exclude,
            stop,
            thread,
        }
    }

    /// The observations, for the recorder to add to.
    pub(super) fn observed(&self) -> Arc<Mutex<Observed>> {
        self.observed.clone()
    }

    /// Never count `pid` (a process the runner itself owns).
    pub(super) fn exclude(&self, pid: u32) {
        if let Ok(mut e) = self.exclude.lock() {
            e.insert(pid);
        }
    }

    /// Take one last sample, stop, and return what was observed and the
    /// excluded pids.
    pub(super) async fn stop(mut self) -> (Observed, HashSet<u32>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        let observed = self.observed.lock().map(|o| o.clone()).unwrap_or_default();
        let excluded = self.exclude.lock().map(|e| e.clone()).unwrap_or_default();
        (observed, excluded)
    }
}

/// Sample until `stop` is set, then once more: the last sample always comes
/// after the stop. A polling observer on its own thread, not a sleep that
/// synchronises anything.
fn sample_until(
    stop: &std::sync::atomic::AtomicBool,
    tags: &Tags,
    observed: &Mutex<Observed>,
    exclude: &Mutex<HashSet<u32>>,
    procs: &ProcWatch,
) {
    loop {
        let last = stop.load(std::sync::atomic::Ordering::SeqCst);
        let excluded = exclude.lock().map(|e| e.clone()).unwrap_or_default();
        // A reading another run's sampler took within the period serves
        // this one too; the last sample's reading is always a new one.
        let fresh = if last { Duration::ZERO } else { SAMPLE_EVERY };
        sample(tags, &excluded, observed, &procs.table(fresh));
        if last {
            return;
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// One walk of `/proc`: record the tagged processes and everything below
/// them, and any server tag with two live servers.
fn sample(tags: &Tags, excluded: &HashSet<u32>, observed: &Mutex<Observed>, table: &ProcTable) {
    let per_tag = tagged_processes(tags, excluded, table);
    // Ours: the processes carrying one of our tags, and everything below them
    // (a grandchild), so runs in parallel never judge each other's processes.
    let ours: Vec<u32> = per_tag
        .values()
        .flatten()
        .flat_map(|p| table.tree(*p))
        .collect();
    if let Ok(mut o) = observed.lock() {
        o.seen
            .extend(ours.into_iter().filter_map(|p| Some((p, table.start(p)?))));
        for (tag, live) in per_tag {
            if tags.tracked.iter().any(|t| t == tag) {
                continue;
            }
            if let Some(overlap) = overlap(tag, &live) {
                o.overlaps.push(overlap);
            }
        }
    }
}

/// The live descendants of this process carrying each tag, `excluded` left out.
fn tagged_processes<'t>(
    tags: &'t Tags,
    excluded: &HashSet<u32>,
    table: &ProcTable,
) -> HashMap<&'t str, Vec<u32>> {
    let me = std::process::id();
    let mut per_tag: HashMap<&str, Vec<u32>> = HashMap::new();
    for pid in table.descendants_of(me) {
        if excluded.contains(&pid) || !table.alive(pid) {
            continue;
        }
        let cmd = table.cmdline(pid);
        for tag in tags.servers.iter().chain(&tags.tracked) {
            if carries_tag(cmd, tag) {
                per_tag.entry(tag.as_str()).or_default().push(pid);
            }
        }
    }
    per_tag
}

/// Evidence that two servers of `tag` are alive at once, if they are.
fn overlap(tag: &str, live: &[u32]) -> Option<String> {
    // A child of a tagged process (e.g. a grandchild between fork and exec,
    // which still shows its parent's command line) is not a second server.
    // Each candidate is looked at again: one that exec'd something else or
    // exited since the walk (a short-lived `sh` a server started) is not a
    // server either, and its parent can no longer be read.
    let servers: Vec<u32> = live
        .iter()
        .copied()
        .filter(|p| process_alive(*p) && carries_tag(&cmdline_of(*p), tag))
        .filter(|p| !parent_of(*p).is_some_and(|pp| live.contains(&pp)))
        .collect();
    (servers.len() > 1).then(|| format!("{tag}: pids {servers:?} alive at once"))
}

/// True when a command line carries `--tag <tag>` as whole arguments.
fn carries_tag(cmd: &str, tag: &str) -> bool {
    cmd.contains(&format!("--tag {tag} ")) || cmd.ends_with(&format!("--tag {tag}"))
}

/// Keeps every runtime event with the instant it arrived, and checks
/// one_generation at every catalog or status change.
pub(super) struct Recorder {
    /// The events so far.
    events: Arc<Mutex<Vec<(Instant, RuntimeEvent)>>>,
    /// The recording task.
    task: JoinHandle<()>,
    /// Tells the task to drain what is queued and end.
    stop: mcpvisor::CancellationToken,
}

impl Recorder {
    /// Record `events` of `runtime`; generation problems (against the whole
    /// catalogs `expected`) go to `observed`.
    pub(super) fn start(
        runtime: Runtime,
        mut events: broadcast::Receiver<RuntimeEvent>,
        observed: Arc<Mutex<Observed>>,
        expected: HashMap<String, u64>,
    ) -> Self {
        let recorded: Arc<Mutex<Vec<(Instant, RuntimeEvent)>>> = Arc::default();
        let into = recorded.clone();
        let stop = mcpvisor::CancellationToken::new();
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                // Events already sent are received before a stop is seen,
                // so stopping loses none of them.
                let received = tokio::select! {
                    biased;
                    ev = events.recv() => ev,
                    _ = stopping.cancelled() => match events.try_recv() {
                        Ok(ev) => Ok(ev),
                        Err(_) => return,
                    },
                };
                match received {
                    Ok(ev) => {
                        if matches!(
                            ev,
                            RuntimeEvent::CatalogChanged { .. } | RuntimeEvent::ServerStatus(_)
                        ) {
                            let problems =
                                generation_problems(&runtime.catalogs(&Scope::Global), &expected);
                            note(&observed, problems);
                        }
                        if let Ok(mut r) = into.lock() {
                            r.push((Instant::now(), ev));
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        note(&observed, vec![format!("event recorder lagged by {n}")]);
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Self {
            events: recorded,
            task,
            stop,
        }
    }

    /// Stop recording and return every event. The recorder holds a runtime
    /// handle, so the event channel never closes on its own.
    pub(super) async fn stop(self) -> Vec<(Instant, RuntimeEvent)> {
        self.stop.cancel();
        let _ = self.task.await;
        self.events.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Add one_generation `problems` to what was observed.
fn note(observed: &Mutex<Observed>, problems: Vec<String>) {
    if !problems.is_empty()
        && let Ok(mut o) = observed.lock()
    {
        o.generation_problems.extend(problems);
    }
}

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
