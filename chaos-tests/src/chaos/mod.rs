//! The chaos runner (CHAOS-1..3): seeded scenarios that drive the real runtime
//! against `fault-server`, and the invariants checked after every scenario.
//!
//! A scenario is a fault plan (derived from the seed) plus a workload:
//! connect, sequential and concurrent calls, the fault's trigger, more calls,
//! shutdown. While it runs, a sampler walks `/proc` every few milliseconds and
//! a recorder keeps every runtime event; afterwards the invariants judge what
//! was seen. The same seed always gives the same plan.
//!
//! # Layout
//!
//! - `rng`: the seeded generator fault parameters are drawn from.
//! - `fault`: every fault kind, and what it means for the fault-server's
//!   flags, the hooks, the trigger call and the catalog.
//! - `scenario`: the catalogue of scenarios and their plans.
//! - `invariant`: the invariants, verdicts, the report, and the pure checks.
//! - `observe`: the `/proc` sampler and the event recorder.
//! - `setup`, `workload`, `run`: one run, phase by phase (setup, workload,
//!   trigger, shutdown, judge).

mod fault;
mod invariant;
mod observe;
mod rng;
mod run;
mod scenario;
mod setup;
mod workload;

pub use fault::{BAD_TOOL_NAME, Fault, LONG_TOOL_NAME};
pub use invariant::{Invariant, ScenarioReport, Verdict};
pub use observe::rss_kib;
pub use rng::SeededRng;
pub use run::{BREAKS, RunOptions, run_scenario};
pub use scenario::{Scenario, scenarios};
