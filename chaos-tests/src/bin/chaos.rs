//! `chaos`: drive the real mcpvisor runtime against fault-server under seeded
//! fault plans and check the invariants after every scenario (CHAOS-1..3).
//!
//! ```text
//! chaos [--seed N] [--scenario NAME]... [--smoke | --soak SECONDS | --seeds N] [--json]
//!       [--jobs N] [--break-close-barrier] [--list]
//! ```
//! Exit status: 0 when every invariant held, 1 on any violation, 2 on usage errors.

use std::time::{Duration, Instant};

use clap::Parser;
use mcpvisor_chaos::chaos::{
    RunOptions, ScenarioReport, Verdict, rss_kib, run_scenario, scenarios,
};
use serde_json::json;

/// Seeded fault injection against the real runtime.
#[derive(Parser, Debug)]
#[command(name = "chaos", about, long_about = None)]
struct Args {
    /// Seed of the fault plans (the same seed gives the same plan). Default: from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Run only these scenarios (repeatable).
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Every scenario once (the CI profile; also what a run without --soak does).
    #[arg(long, conflicts_with = "soak")]
    smoke: bool,
    /// Loop over all scenarios with new seeds for this many seconds; checks memory.
    #[arg(long, value_name = "SECONDS")]
    soak: Option<u64>,
    /// Run the scenarios once for each of N seeds: --seed, --seed+1, …
    /// (outside CI: a seed is about a minute of the whole catalogue).
    #[arg(long, value_name = "N", conflicts_with_all = ["soak", "smoke"])]
    seeds: Option<u64>,
    /// Run up to N scenarios at once (not with --soak). A seed's minute is
    /// mostly waiting on the faults' timeouts, so the 1000-seed run uses
    /// several; each run still has its own runtime, servers and tags.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "soak")]
    jobs: usize,
    /// A JSON report on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Deliberately break the runtime (skip the close barrier) to show that the
    /// no_overlap invariant catches it.
    #[arg(long)]
    break_close_barrier: bool,
    /// Deliberately break the runtime (start servers without its tag) to
    /// show that the no_orphans invariant catches a process that left its
    /// group.
    #[arg(long)]
    break_escape_sweep: bool,
    /// Turn on a break switch by name (repeatable): close-barrier,
    /// escape-sweep, session-replay, redaction, line-reader, timeouts,
    /// catalogs, root, backoff, outcome-events, outcome-kinds, leak (with
    /// --soak). Each breaks the runtime so one invariant must fail.
    #[arg(long = "break", value_name = "NAME")]
    breaks: Vec<String>,
    /// List the scenarios and their fault plans for the seed, then exit.
    #[arg(long)]
    list: bool,
}

/// The system allocator, counting the bytes live on the heap: a soak judges
/// bounded_memory on this figure, since RSS also moves with the allocator's
/// arenas and free lists (fragmentation that is no leak). The count lives in
/// this binary only (the runner), never in the library.
struct Counting;

static LIVE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counter is only arithmetic.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new, std::sync::atomic::Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes live on the heap now, in KiB.
fn heap_kib() -> u64 {
    (LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed) / 1024) as u64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    // no_orphans: what a server's process leaves behind stays below the
    // runner, tagged or not, instead of going to init (CHAOS-2).
    if let Err(e) = mcpvisor_chaos::become_subreaper() {
        eprintln!("chaos: cannot become a child subreaper: {e}");
        return std::process::ExitCode::from(2);
    }
    let mut opts = RunOptions {
        break_close_barrier: args.break_close_barrier,
        break_escape_sweep: args.break_escape_sweep,
        check_memory: args.soak.is_some(),
        sole: args.jobs <= 1,
        ..RunOptions::default()
    };
    let select = |seed: u64| {
        scenarios(seed)
            .into_iter()
            .filter(|s| args.scenarios.is_empty() || args.scenarios.iter().any(|n| n == s.name))
            .collect::<Vec<_>>()
    };
    let first = select(seed);
    for name in &args.breaks {
        if !opts.set_break(name) {
            eprintln!("chaos: no break switch {name:?}");
            return std::process::ExitCode::from(2);
        }
    }
    if first.is_empty() {
        eprintln!("chaos: no scenario matches {:?}", args.scenarios);
        return std::process::ExitCode::from(2);
    }
    if args.list {
        for s in &first {
            println!(
                "{:<32} {}",
                s.name,
                serde_json::to_string(&s.faults).unwrap_or_default()
            );
        }
        return std::process::ExitCode::SUCCESS;
    }
    // `cargo run --bin chaos` builds only this binary: make sure the server exists.
    if let Err(e) = mcpvisor_chaos::ensure_built("mcpvisor-chaos", "fault-server") {
        eprintln!("chaos: cannot build fault-server: {e}");
        return std::process::ExitCode::from(2);
    }
    match args.seeds {
        Some(n) => eprintln!(
            "chaos: seeds {seed}..={}, {} scenario(s) each",
            seed.wrapping_add(n.saturating_sub(1)),
            first.len()
        ),
        None => eprintln!("chaos: seed {seed}, {} scenario(s)", first.len()),
    }
    let mut reports: Vec<ScenarioReport> = Vec::new();
    let started = Instant::now();
    let soak_until = args.soak.map(|s| started + Duration::from_secs(s));
    let rss_start = rss_kib();
    let heap_start = heap_kib();
    // The live heap and RSS after every scenario: the soak judges their
    // trend, not one figure.
    let mut rss: Vec<u64> = Vec::new();
    let mut heap: Vec<u64> = Vec::new();
    let mut round_seed = seed;
    if args.jobs > 1 {
        let rounds = args.seeds.unwrap_or(1);
        let plan = (0..rounds).flat_map(|i| select(seed.wrapping_add(i)));
        match run_in_parallel(plan, &opts, args.jobs, args.json).await {
            Ok(done) => reports = done,
            Err(why) => {
                eprintln!("chaos: {why}");
                return std::process::ExitCode::from(1);
            }
        }
    } else {
        // One scenario after the other (a soak judges memory as it goes).
        loop {
            if args.seeds.is_some() && !args.json {
                eprintln!("chaos: seed {round_seed}");
            }
            for sc in select(round_seed) {
                if !args.json {
                    eprint!("  {:<32} … ", sc.name);
                }
                let r = run_scenario(&sc, &opts).await;
                rss.push(rss_kib());
                heap.push(heap_kib());
                if !args.json {
                    let bad = r.violations();
                    eprintln!(
                        "{} ({} ms)",
                        if bad.is_empty() { "ok" } else { "VIOLATION" },
                        r.duration_ms
                    );
                }
                reports.push(r);
            }
            let more_seeds = args
                .seeds
                .is_some_and(|n| round_seed.wrapping_sub(seed).wrapping_add(1) < n);
            match soak_until {
                Some(until) if Instant::now() < until => round_seed = round_seed.wrapping_add(1),
                _ if more_seeds => {
                    round_seed = round_seed.wrapping_add(1);
                    continue;
                }
                _ => break,
            }
            opts.check_memory = true;
        }
    }
    if soak_until.is_some() {
        let (verdict, summary) = memory_verdict((heap_start, &heap), (rss_start, &rss));
        eprintln!("chaos: memory: {summary}");
        if let Some(last) = reports.last_mut() {
            last.invariants
                .insert(mcpvisor_chaos::chaos::Invariant::BoundedMemory, verdict);
        }
    }
    // With runs in parallel no run can tell an untagged orphan below the
    // runner for its own: the walk after the last run judges them all.
    let left_below = if args.jobs > 1 {
        mcpvisor_chaos::sweep_below_runner().await
    } else {
        Vec::new()
    };
    for p in &left_below {
        eprintln!("violation: no_orphans after every run ended: {p} was still below the runner");
    }
    let violations: usize =
        reports.iter().map(|r| r.violations().len()).sum::<usize>() + left_below.len();
    if args.json {
        println!(
            "{}",
            json!({"seed": seed, "scenarios": reports, "violations": violations})
        );
    } else {
        print_table(&reports);
        println!(
            "{violations} violation(s), {} scenario(s), {:.1} s",
            reports.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let mut breaks_shown = String::new();
    if args.break_close_barrier {
        breaks_shown.push_str(" --break-close-barrier");
    }
    if args.break_escape_sweep {
        breaks_shown.push_str(" --break-escape-sweep");
    }
    for name in &args.breaks {
        breaks_shown.push_str(&format!(" --break {name}"));
    }
    for r in &reports {
        for (inv, why) in r.violations() {
            eprintln!("violation: {} in {}: {why}", inv.name(), r.name);
            eprintln!(
                "note: rerun with `cargo run -p mcpvisor-chaos --bin chaos -- --seed {} --scenario {}{}`",
                r.seed, r.name, breaks_shown
            );
        }
    }
    if violations > 0 {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// bounded_memory over a soak, from the live heap and RSS after each
/// scenario. The first half is warm-up (the allocator's high-water marks,
/// the first large results, the runner's report list). Over the second half
/// the least-squares slope of the live heap must stay under 16 KiB per
/// scenario (a leak of a few KiB per run shows there). RSS must not grow by
/// more than 32 MiB over the second half, nor by more than 256 MiB in all.
/// RSS is not judged by its slope, and its warm-up is large: glibc keeps
/// freed pages in its arenas, one per thread up to 8 per core, and the mod
/// faults' engines (16 MiB each, on threads of their own, allocating through
/// malloc, which the live-heap counter does not see) touch a new arena's
/// pages until every arena has been used (docs/chaos.md). Returns the
/// verdict and the figures.
fn memory_verdict(heap: (u64, &[u64]), rss: (u64, &[u64])) -> (Verdict, String) {
    let (heap_start, heap) = heap;
    let (rss_start, rss) = rss;
    let heap_slope = second_half_slope(heap);
    let rss_slope = second_half_slope(rss);
    let last = |v: &[u64], start: u64| v.last().copied().unwrap_or(start);
    let half = |v: &[u64], start: u64| v.get(v.len() / 2).copied().unwrap_or(start);
    let summary = format!(
        "live heap {heap_start} KiB at the start, {} KiB after the first half ({} scenarios), {} KiB at the end, slope over the second half {heap_slope:.1} KiB per scenario; RSS {rss_start} KiB, {} KiB, {} KiB, slope {rss_slope:.1} KiB per scenario",
        half(heap, heap_start),
        heap.len() / 2,
        last(heap, heap_start),
        half(rss, rss_start),
        last(rss, rss_start),
    );
    let grown = last(rss, rss_start).saturating_sub(rss_start);
    let late = last(rss, rss_start).saturating_sub(half(rss, rss_start));
    let verdict = if late > 32 * 1024 {
        Verdict::Fail(format!(
            "RSS grew by {late} KiB over the second half of the soak, after the warm-up; {summary}"
        ))
    } else if grown > 256 * 1024 {
        Verdict::Fail(format!("RSS grew by {grown} KiB over the soak; {summary}"))
    } else if heap_slope > 16.0 {
        Verdict::Fail(format!(
            "the live heap still grows after the warm-up; {summary}"
        ))
    } else {
        Verdict::Pass
    };
    (verdict, summary)
}

/// Least-squares slope (per sample) of the second half of `v`.
fn second_half_slope(v: &[u64]) -> f64 {
    let tail = &v[v.len() / 2..];
    if tail.len() < 2 {
        return 0.0;
    }
    let n = tail.len() as f64;
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = tail.iter().map(|v| *v as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in tail.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (*y as f64 - mean_y);
        den += dx * dx;
    }
    if den > 0.0 { num / den } else { 0.0 }
}

/// Run `plan` with up to `jobs` scenarios in flight, each on a task of its
/// own; the reports come back in the plan's order. A run that panicked is
/// an error of the runner, not a pass.
async fn run_in_parallel(
    plan: impl Iterator<Item = mcpvisor_chaos::chaos::Scenario>,
    opts: &RunOptions,
    jobs: usize,
    quiet: bool,
) -> Result<Vec<ScenarioReport>, String> {
    let mut plan = plan.enumerate();
    let mut running = tokio::task::JoinSet::new();
    let mut done: Vec<(usize, ScenarioReport)> = Vec::new();
    loop {
        while running.len() < jobs {
            let Some((i, sc)) = plan.next() else { break };
            let opts = opts.clone();
            running.spawn(async move { (i, run_scenario(&sc, &opts).await) });
        }
        let Some(finished) = running.join_next().await else {
            break;
        };
        let (i, r) = finished.map_err(|e| format!("a scenario's run did not finish: {e}"))?;
        if !quiet {
            eprintln!(
                "  {:>6} {:<32} {} ({} ms)",
                r.seed,
                r.name,
                if r.violations().is_empty() {
                    "ok"
                } else {
                    "VIOLATION"
                },
                r.duration_ms
            );
            // At once, not only at the end: a long run may be stopped.
            for (inv, why) in r.violations() {
                eprintln!(
                    "    violation: {} in {} (seed {}): {why}",
                    inv.name(),
                    r.name,
                    r.seed
                );
            }
        }
        done.push((i, r));
    }
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, r)| r).collect())
}

fn print_table(reports: &[ScenarioReport]) {
    let names: Vec<&'static str> = reports
        .first()
        .map(|r| r.invariants.keys().map(|i| i.name()).collect())
        .unwrap_or_default();
    print!("{:<32} {:>20} {:<36}", "scenario", "seed", "faults");
    for n in &names {
        print!(" {:>4}", abbreviate(n));
    }
    println!(" {:>8}", "ms");
    for r in reports {
        let faults = r.faults.join(",");
        print!(
            "{:<32} {:>20} {:<36}",
            r.name,
            r.seed,
            truncate(&faults, 36)
        );
        for v in r.invariants.values() {
            let shown = match v {
                Verdict::Pass => "ok",
                Verdict::Skip => "-",
                Verdict::Fail(_) => "FAIL",
            };
            print!(" {shown:>4}");
        }
        println!(" {:>8}", r.duration_ms);
    }
    println!(
        "columns: {}",
        names
            .iter()
            .map(|n| format!("{}={n}", abbreviate(n)))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn abbreviate(name: &str) -> &'static str {
    match name {
        "no_orphans" => "orph",
        "no_overlap" => "ovlp",
        "one_generation" => "gen",
        "budget_respected" => "bdgt",
        "no_double_send" => "dbl",
        "one_outcome_per_call" => "once",
        "bounded_outcome" => "bnd",
        "shutdown_within_deadline" => "shut",
        "bounded_memory" => "mem",
        "no_lost_reply" => "lost",
        "no_secret_leak" => "scrt",
        "expected_consequences" => "csq",
        _ => "?",
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rss_that_plateaus_after_the_warm_up_passes_and_late_growth_fails() {
        // The stop-23 soak's shape: a big warm-up, then flat.
        let heap = vec![400; 20];
        let plateau: Vec<u64> = (0..20)
            .map(|i| {
                if i < 10 {
                    15_000 + i * 10_000
                } else {
                    116_000 + i * 50
                }
            })
            .collect();
        let (v, _) = memory_verdict((64, &heap), (15_000, &plateau));
        assert_eq!(v, Verdict::Pass);
        // 40 MiB more after the warm-up: a leak, whatever the heap says.
        let late: Vec<u64> = (0..20).map(|i| 20_000 + i * 4_000).collect();
        let (v, why) = memory_verdict((64, &heap), (20_000, &late));
        assert!(
            matches!(v, Verdict::Fail(ref w) if w.contains("second half")),
            "{v:?} {why}"
        );
        // The heap rule still stands on its own.
        let leaking: Vec<u64> = (0..20).map(|i| 100 + i * 100).collect();
        let (v, _) = memory_verdict((64, &leaking), (15_000, &plateau));
        assert!(
            matches!(v, Verdict::Fail(ref w) if w.contains("live heap")),
            "{v:?}"
        );
    }
}
