//! stdio transport glue owned by the `Connection` actor: the child process in its
//! own process group (CONN-5), the stdout line guard (CONN-6), the stderr ring
//! buffer (CONN-7) and the close sequence (CONN-8).
//!
//! rmcp's own child-process transport silently drops unparsable lines, so this
//! module reads stdout itself and hands rmcp parsed messages through the
//! [`rmcp::transport::Transport`] trait.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

pub use super::diagnostics::Diagnostics;
#[cfg(test)]
use super::diagnostics::STDERR_TAIL_BYTES;
use crate::messages::config::StdioConfig;
use crate::process::{CloseGraces, ProcessGroup};

/// Longest stdout line accepted (CONN-6).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Parent variables passed to every stdio child (CONN-5).
pub const ENV_ALLOWLIST: [&str; 10] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ",
];

/// How long the close sequence waits after closing stdin, after SIGTERM and after
/// SIGKILL (CONN-8). With the 0.5 s service close, the worst case (4.5 s) fits
/// inside the 5 s close barrier (RECO-3).
const CLOSE_GRACES: CloseGraces = CloseGraces {
    after_stdin: Duration::from_secs(1),
    after_term: Duration::from_millis(1500),
    after_kill: Duration::from_millis(1500),
};

// ===== Spawning =====

/// Why a stdio server could not be started (CONN-5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The command is not on `PATH` nor in the common prefixes.
    #[error("executable \"{command}\" not found; searched: {}", .searched.join(", "))]
    NotFound {
        /// The command as configured.
        command: String,
        /// Every directory looked in, in order.
        searched: Vec<String>,
    },
    /// The executable was found but could not be started.
    #[error("could not start {exe}: {reason}")]
    Start {
        /// The executable's path.
        exe: String,
        /// The operating system's reason.
        reason: String,
    },
}

/// A spawned stdio child, before the handshake.
pub struct SpawnedChild {
    /// The transport rmcp serves on.
    pub transport: StdioTransport,
    /// The handle that closes and reaps the process group.
    pub process: ProcessHandle,
}

/// Locate `command` on `path` and the common prefixes (CONN-5).
pub fn resolve_executable(
    command: &str,
    path: Option<&str>,
    home: Option<&Path>,
) -> Result<PathBuf, SpawnError> {
    if command.contains('/') {
        return Ok(PathBuf::from(command));
    }
    let mut dirs: Vec<PathBuf> = path
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.push(PathBuf::from("/usr/local/bin"));
    if let Some(home) = home {
        dirs.push(home.join(".local/bin"));
        dirs.push(home.join(".cargo/bin"));
        if let Ok(rd) = std::fs::read_dir(home.join(".nvm/versions/node")) {
            let mut versions: Vec<PathBuf> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect();
            versions.sort();
            versions.reverse();
            dirs.extend(versions);
        }
    }
    for dir in &dirs {
        let candidate = dir.join(command);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    // Each directory once, in search order (PATH often repeats /usr/local/bin).
    let mut searched: Vec<String> = Vec::new();
    for d in &dirs {
        let d = d.display().to_string();
        if !searched.contains(&d) {
            searched.push(d);
        }
    }
    Err(SpawnError::NotFound {
        command: command.to_owned(),
        searched,
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The environment of a stdio child (CONN-5): allowlisted parent variables,
/// explicit passthrough, the instance's `env`, then `NO_COLOR=1`.
pub fn child_environment(
    cfg: &StdioConfig,
    parent: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = Default::default();
    for name in ENV_ALLOWLIST {
        if let Some(v) = parent(name) {
            env.insert(name.to_owned(), v);
        }
    }
    for name in &cfg.env_passthrough {
        if let Some(v) = parent(name) {
            env.insert(name.clone(), v);
        }
    }
    for (k, v) in &cfg.env {
        env.insert(k.clone(), v.clone());
    }
    env.insert("NO_COLOR".into(), "1".into());
    debug_assert!(
        ENV_ALLOWLIST
            .iter()
            .all(|n| !crate::messages::trust::looks_secret(n))
    );
    env.into_iter().collect()
}

/// Spawn the child in its own process group with piped stdio, start the stderr
/// reader and the reaper.
pub fn spawn(
    cfg: &StdioConfig,
    secret_env: Vec<(String, crate::messages::trust::Secret)>,
    diag: Arc<Diagnostics>,
    chaos: crate::messages::config::ChaosSwitches,
) -> Result<SpawnedChild, SpawnError> {
    let mut env = child_environment(cfg, |n| std::env::var(n).ok());
    for (name, value) in secret_env {
        env.retain(|(k, _)| *k != name);
        env.push((name, value.expose().to_owned()));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let exe = resolve_executable(&cfg.command, path, home.as_deref())?;
    let mut cmd = crate::process::command(&exe);
    cmd.args(&cfg.args).env_clear().envs(env);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // The leader's exit ends the transport even when stdout stays open (a
    // process it started holds it): what the pipe still holds is read for
    // LEADER_EXIT_DRAIN, then the transport is dead (CONN-14).
    let dead = Arc::new(Dead::default());
    let leader_gone = dead.clone();
    let on_exit = Box::new(move || {
        tokio::spawn(async move {
            tokio::time::sleep(LEADER_EXIT_DRAIN).await;
            leader_gone.set_leader_exited();
        });
    });
    let (group, pipes) =
        ProcessGroup::spawn_notifying(&cmd, on_exit).map_err(|e| SpawnError::Start {
            exe: exe.display().to_string(),
            reason: e.to_string(),
        })?;
    let (stderr_done_tx, stderr_done) = watch::channel(false);
    let d = diag.clone();
    tokio::spawn(async move {
        let stderr = pipes.stderr;
        // No buffer is held while the server is quiet: the read buffer
        // lives on the stack between a readiness and its read, so an idle
        // connection's stderr costs no heap (PERF-1, memory per idle
        // connection).
        while stderr.readable().await.is_ok() {
            let mut buf = [0u8; 4096];
            match stderr.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => d.push_stderr(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        let _ = stderr_done_tx.send(true);
    });
    Ok(SpawnedChild {
        transport: StdioTransport {
            lossy: chaos.lossy_line_reader(),
            cross: chaos.cross_replies().then(Default::default),
            dead,
            ..StdioTransport::new(pipes.stdin, pipes.stdout, diag)
        },
        process: ProcessHandle {
            pid: group.pid(),
            group,
            stderr_done,
        },
    })
}

// ===== The process handle =====

/// The server's process group (see `crate::process`) and its stderr
/// reader: closing it runs the close sequence; dropping it without a
/// confirmed close SIGKILLs the group.
#[derive(Debug)]
pub struct ProcessHandle {
    /// The child's pid, also its process group id.
    pub pid: u32,
    group: ProcessGroup,
    stderr_done: watch::Receiver<bool>,
}

impl ProcessHandle {
    /// Wait up to `limit` for the child to be reaped, then up to 200 ms more for
    /// stderr to drain (so the error can quote what the server printed last, CONN-7).
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<String> {
        let exit = self.group.wait(Some(limit)).await?;
        self.drain_stderr().await;
        Some(exit.describe())
    }

    async fn drain_stderr(&mut self) {
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            self.stderr_done.wait_for(|d| *d),
        )
        .await;
    }

    /// See [`ProcessGroup::unreaped`].
    pub fn unreaped(&self) -> crate::messages::server::Unreaped {
        self.group.unreaped()
    }

    /// The close sequence (CONN-8) after stdin was closed by the transport:
    /// wait 1 s, SIGTERM the group, wait, SIGKILL, wait for the reap.
    /// Returns whether the leader was confirmed reaped.
    pub async fn close(&mut self) -> bool {
        let exit = self.group.close(CLOSE_GRACES).await;
        if exit.is_some() {
            self.drain_stderr().await;
        }
        exit.is_some()
    }
}

// ===== The transport =====

/// The server's stdout, as the transport reads it.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The server's stdin, as the transport writes it.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// How long one write to the server's stdin may stay blocked (a server that
/// stopped reading with more than a pipe's worth queued). Past it the
/// transport is dead: it ends, and the reconnect policy takes over (CONN-14).
pub const WRITE_STALL_DEADLINE: Duration = Duration::from_secs(10);

/// rmcp transport over a child's stdin/stdout with the CONN-6 line guard.
///
/// `receive` is cancel-safe: rmcp drops a pending `receive()` whenever
/// another event wins its loop, so the line being assembled, and its byte
/// count against [`MAX_LINE_BYTES`], live in the transport, not in the
/// future (a reply that arrives in pieces is never cut in two).
pub struct StdioTransport {
    reader: Reader,
    /// What was read and not yet handed out, from the start of the line
    /// being read: stdout is read straight into it (no second buffer), so
    /// an idle connection holds only what its largest recent line needed.
    line: Vec<u8>,
    /// `line[..scanned]` holds no newline.
    scanned: usize,
    /// The length of the line handed out (`line[..n]`, its newline at
    /// `n`): dropped from `line` before the next is read.
    handed: Option<usize>,
    writer: Arc<tokio::sync::Mutex<Option<Writer>>>,
    /// Set when a write stayed blocked past [`WRITE_STALL_DEADLINE`].
    dead: Arc<Dead>,
    diag: Arc<Diagnostics>,
    /// The ids of `tools/call` requests sent and not yet answered or
    /// cancelled: their replies are read once, as raw JSON (see
    /// [`call_reply`]). Only a fast path: an id missing from it (the set is
    /// dropped past [`CALLS_PENDING_MAX`]) makes its reply read the usual
    /// way.
    calls_pending: std::collections::HashSet<rmcp::model::RequestId>,
    /// Test-only break switch (`ChaosSwitches::lossy_line_reader`).
    lossy: bool,
    /// Test-only break switch (`ChaosSwitches::cross_replies`): which
    /// call gets the reply to which (see [`cross_reply`]).
    cross: Option<std::collections::HashMap<rmcp::model::RequestId, rmcp::model::RequestId>>,
}

/// The transport's death by a stalled write or by its server's exit, as
/// the reader waits for it: flags and one waker. rmcp makes a new
/// `receive()` for every event of its loop, and a `CancellationToken`
/// would take a lock to be cloned, to be waited on and to be dropped each
/// time (PERF-1).
#[derive(Default)]
struct Dead {
    set: std::sync::atomic::AtomicBool,
    /// Set with `set` when the server's process exited (not by a stall).
    leader_exited: std::sync::atomic::AtomicBool,
    reader: futures::task::AtomicWaker,
}

/// How long the transport still reads stdout after the server's process
/// was reaped: what it wrote before exiting is in the pipe, and is read;
/// then the transport ends, whether or not stdout reached its end (a
/// process the server started may hold it open for ever; CONN-14).
pub const LEADER_EXIT_DRAIN: Duration = Duration::from_millis(250);

impl Dead {
    fn set(&self) {
        self.set.store(true, std::sync::atomic::Ordering::SeqCst);
        self.reader.wake();
    }

    fn set_leader_exited(&self) {
        self.leader_exited
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.set();
    }

    fn leader_exited(&self) -> bool {
        self.leader_exited.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn poll(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.set.load(SeqCst) {
            return std::task::Poll::Ready(());
        }
        self.reader.register(cx.waker());
        // Set between the check and the registration: seen here.
        if self.set.load(SeqCst) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

/// Bound of [`StdioTransport::calls_pending`]: ids of calls whose reply
/// never came and whose cancel notice was never written.
const CALLS_PENDING_MAX: usize = 1024;

/// A reply line as the `tools/call` fast path reads it: its result kept as
/// raw JSON.
#[derive(serde::Deserialize)]
struct RawReply {
    #[allow(dead_code)] // checked by deserialising it, as rmcp does
    jsonrpc: rmcp::model::JsonRpcVersion2_0,
    id: Option<rmcp::model::RequestId>,
    #[serde(default)]
    result: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

impl StdioTransport {
    fn new(
        stdin: impl AsyncWrite + Send + Unpin + 'static,
        stdout: impl AsyncRead + Send + Unpin + 'static,
        diag: Arc<Diagnostics>,
    ) -> Self {
        Self {
            reader: Box::new(stdout) as Reader,
            line: Vec::new(),
            scanned: 0,
            handed: None,
            writer: Arc::new(tokio::sync::Mutex::new(Some(Box::new(stdin) as Writer))),
            dead: Arc::default(),
            diag,
            calls_pending: std::collections::HashSet::new(),
            lossy: false,
            cross: None,
        }
    }

    /// Read one line (without its newline) into `self.line[..n]`, bounded
    /// by [`MAX_LINE_BYTES`]; returns `n`. `None` on EOF, error or an
    /// over-long line (recorded as fatal).
    async fn read_line(&mut self) -> Option<usize> {
        // Cancel safety: only a line that was handed out is dropped; a
        // partial one stays when this future is dropped between reads
        // (`read_buf` reads nothing when it loses a race).
        if let Some(n) = self.handed.take() {
            self.line.drain(..=n);
            self.scanned = 0;
        } else if self.lossy {
            self.line.clear();
            self.scanned = 0;
        }
        loop {
            if let Some(i) = self.line[self.scanned..].iter().position(|b| *b == b'\n') {
                let n = self.scanned + i;
                self.handed = Some(n);
                return Some(n);
            }
            self.scanned = self.line.len();
            if self.line.len() > MAX_LINE_BYTES {
                self.diag.set_fatal(format!(
                    "the server wrote a stdout line longer than {} MiB without a newline",
                    MAX_LINE_BYTES / (1024 * 1024)
                ));
                return None;
            }
            // Room to read into: an empty buffer reads into what it has (a
            // busy connection keeps its capacity from line to line); a
            // line being read gets at least doubled room (one copy per
            // byte, amortised).
            if self.line.is_empty() {
                if self.line.capacity() == 0 {
                    self.line.reserve(IDLE_KEEP);
                }
            } else if self.line.capacity() - self.line.len() < READ_CHUNK / 2 {
                self.line.reserve(READ_CHUNK.max(self.line.len()));
            }
            let read = if self.line.is_empty() && self.line.capacity() > IDLE_KEEP {
                // Nothing partial is held: a connection that stays quiet
                // gives its buffer back (an idle connection's memory, PERF-1).
                tokio::select! {
                    read = tokio::io::AsyncReadExt::read_buf(&mut self.reader, &mut self.line) => read,
                    _ = tokio::time::sleep(IDLE_SHRINK_AFTER) => {
                        self.line = Vec::with_capacity(IDLE_KEEP);
                        continue;
                    }
                }
            } else {
                tokio::io::AsyncReadExt::read_buf(&mut self.reader, &mut self.line).await
            };
            match read {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    self.diag
                        .set_fatal(format!("reading the server's stdout failed: {e}"));
                    return None;
                }
            }
        }
    }
}

impl StdioTransport {
    /// Note what `item` means for the replies to come: a `tools/call`
    /// request's reply is awaited; a cancelled one's is not.
    fn note_sent(&mut self, item: &TxJsonRpcMessage<RoleClient>) {
        use rmcp::model::{ClientNotification, ClientRequest, JsonRpcMessage};
        match item {
            JsonRpcMessage::Request(r) => match &r.request {
                ClientRequest::ListToolsRequest(_) => {
                    self.diag.tools_requested(request_id_key(&r.id));
                }
                ClientRequest::CallToolRequest(_) => {
                    if self.calls_pending.len() >= CALLS_PENDING_MAX {
                        // Its memory too, not only its entries.
                        self.calls_pending = std::collections::HashSet::new();
                    }
                    self.calls_pending.insert(r.id.clone());
                }
                _ => {}
            },
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.calls_pending.remove(id);
                }
            }
            _ => {}
        }
    }
}

/// A `tools/list` reply, read once as raw JSON: its `tools` are kept for
/// the catalog fetch and rmcp gets the reply with an empty array (nothing
/// typed per tool, no re-serialisation; PERF-1). `None` when the line is
/// no awaited reply with a `tools` array (then it is read as usual, and a
/// malformed page still reaches the fetch).
fn tools_page(diag: &Diagnostics, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    // The id first, by a scan that stops at it: a line that answers
    // something else is not parsed twice.
    let id = top_level_id(line)?.to_string();
    if !diag.take_tools_pending(&id) {
        return None;
    }
    let mut v = serde_json::from_slice::<serde_json::Value>(line).ok()?;
    let Some(serde_json::Value::Array(tools)) = v
        .pointer_mut("/result/tools")
        .map(|t| std::mem::replace(t, serde_json::Value::Array(Vec::new())))
    else {
        // Not a page (an error reply, no tools array): read as usual.
        return None;
    };
    diag.stash_tools_page(id, tools);
    // What rmcp cannot type (a bad nextCursor) is its CustomResult,
    // as before: the fetch takes the stashed page either way.
    serde_json::from_value(v).ok()
}

/// The reply to an awaited `tools/call`, read once as raw JSON: rmcp
/// gets its result as a `CustomResult`, which the call path takes as
/// the canonical value as it is (no typed copy, no re-serialisation,
/// none of the untagged result union's failed tries; PERF-1). Only a
/// result rmcp would type as a plain `CallToolResult` takes this path
/// (an object with a `content` array, no other `resultType` than
/// `complete`); `None` for anything else, which is read as usual.
fn call_reply(
    pending: &mut std::collections::HashSet<rmcp::model::RequestId>,
    line: &[u8],
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let reply = serde_json::from_slice::<RawReply>(line).ok()?;
    let id = reply.id?;
    let result = match (reply.result, reply.error) {
        (Some(result), None) => result,
        // An error reply answers the call too: its id is not awaited any
        // more (rmcp reads the error as usual).
        (_, Some(_)) => {
            pending.remove(&id);
            return None;
        }
        // A request from the server: it has an id too, from its own id
        // space, and must not take an awaited one.
        (None, None) => return None,
    };
    if !pending.remove(&id) {
        return None;
    }
    let plain = result
        .get("content")
        .is_some_and(serde_json::Value::is_array)
        && result
            .get("resultType")
            .is_none_or(|t| t.as_str() == Some("complete"));
    if !plain {
        return None;
    }
    Some(rmcp::model::JsonRpcMessage::Response(
        rmcp::model::JsonRpcResponse {
            jsonrpc: rmcp::model::JsonRpcVersion2_0,
            id,
            result: rmcp::model::ServerResult::CustomResult(rmcp::model::CustomResult(result)),
        },
    ))
}

/// The chaos runner's `cross-replies` break switch: call X's reply goes
/// to another call Y still in flight, and Y's reply, when it comes, to X
/// (`map` holds Y → X): every call gets one reply, another call's.
fn cross_reply(
    pending: &std::collections::HashSet<rmcp::model::RequestId>,
    map: &mut std::collections::HashMap<rmcp::model::RequestId, rmcp::model::RequestId>,
    msg: &mut RxJsonRpcMessage<RoleClient>,
) {
    let rmcp::model::JsonRpcMessage::Response(r) = msg else {
        return;
    };
    if let Some(to) = map.remove(&r.id) {
        r.id = to;
    } else if let Some(other) = pending
        .iter()
        .find(|p| !map.contains_key(*p) && !map.values().any(|v| v == *p))
        .cloned()
    {
        // Y stays awaited (its reply comes the fast way, then to X).
        let own = std::mem::replace(&mut r.id, other.clone());
        map.insert(other, own);
    }
}

/// A JSON-RPC id as the catalog fetch and the transport both key it: its
/// JSON text (`2`, `"abc"`).
pub(crate) fn request_id_key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_value(id)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

/// The least room the stdout reader makes when a line outgrows its buffer.
const READ_CHUNK: usize = 8 * 1024;
/// The buffer a quiet connection keeps (and the first read's room).
const IDLE_KEEP: usize = 512;
/// How long a connection must be quiet, with no partial line, before its
/// reader gives its buffer back.
const IDLE_SHRINK_AFTER: Duration = Duration::from_secs(2);

impl rmcp::transport::Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.note_sent(&item);
        let writer = self.writer.clone();
        let dead = self.dead.clone();
        let diag = self.diag.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            // The lock is taken inside the deadline too: a write queued
            // behind a blocked one is just as blocked.
            let write = async {
                let mut guard = writer.lock().await;
                let Some(stdin) = guard.as_mut() else {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "stdin closed",
                    ));
                };
                stdin.write_all(&bytes).await?;
                stdin.flush().await
            };
            // Most writes finish at once: the deadline (a timer) is made
            // only for one that does not.
            let mut write = std::pin::pin!(write);
            let written = match futures::poll!(write.as_mut()) {
                std::task::Poll::Ready(written) => Ok(written),
                std::task::Poll::Pending => tokio::time::timeout(WRITE_STALL_DEADLINE, write).await,
            };
            match written {
                Ok(written) => written,
                Err(_) => {
                    diag.set_fatal(format!(
                        "the server stopped reading its stdin: a write was blocked for {} s",
                        WRITE_STALL_DEADLINE.as_secs()
                    ));
                    dead.set();
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the server stopped reading its stdin",
                    ))
                }
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let dead = self.dead.clone();
            // read_line is cancel-safe, so losing this race loses nothing.
            // Death first: a process that keeps writing to a dead server's
            // stdout must not keep its transport alive.
            let read = tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| dead.poll(cx)) => {
                    if dead.leader_exited() {
                        self.diag.set_fatal(
                            "the server's process exited, but its stdout stayed open (a process it started holds it)".into(),
                        );
                    }
                    None
                }
                read = self.read_line() => read,
            };
            let n = read?;
            let line = trim_cr(&self.line[..n]);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let mut failed =
                match decode(&self.diag, &mut self.calls_pending, line, &mut self.cross) {
                    Ok(msg) => return Some(msg),
                    Err(e) => e,
                };
            // A lone UTF-16 surrogate escape (`"\ud800"`: Node writes one
            // when it cuts text mid-emoji, Python for a file name that is
            // not UTF-8) is read as U+FFFD, as JavaScript's and Python's
            // parsers read it, instead of losing the whole message.
            if let Some(fixed) = replace_lone_surrogates(line) {
                match decode(&self.diag, &mut self.calls_pending, &fixed, &mut self.cross) {
                    Ok(msg) => return Some(msg),
                    Err(e) => failed = e,
                }
            }
            // A reply that cannot be read still answers its request: the
            // call ends at once with the reason, instead of waiting its
            // whole timeout for a reply that came (CALL-4).
            if let Some(reply) = unreadable_reply(line, &unreadable_reason(&failed)) {
                if let Ok(id) = serde_json::from_value(reply.1) {
                    self.calls_pending.remove(&id);
                }
                return Some(reply.0);
            }
            self.diag.note_non_json(line);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(mut stdin) = self.writer.lock().await.take() {
            let _ = stdin.shutdown().await;
        }
        Ok(())
    }
}

/// One line as rmcp's message: an awaited `tools/list` page or
/// `tools/call` reply by its fast path, anything else typed.
fn decode(
    diag: &Diagnostics,
    calls_pending: &mut std::collections::HashSet<rmcp::model::RequestId>,
    line: &[u8],
    cross: &mut Option<std::collections::HashMap<rmcp::model::RequestId, rmcp::model::RequestId>>,
) -> Result<RxJsonRpcMessage<RoleClient>, serde_json::Error> {
    if diag.tools_awaited()
        && let Some(msg) = tools_page(diag, line)
    {
        return Ok(msg);
    }
    if !calls_pending.is_empty()
        && let Some(mut msg) = call_reply(calls_pending, line)
    {
        if let Some(map) = cross {
            cross_reply(calls_pending, map, &mut msg);
        }
        return Ok(msg);
    }
    serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line)
}

/// The JSON-RPC error code of a reply the runtime could not read (not
/// JSON-RPC, invalid UTF-8, both `result` and `error`, nested past
/// serde_json's 128-level limit); the call path maps it to
/// `invalid_result` (CALL-4).
pub const UNREADABLE_REPLY_CODE: i32 = -32099;

/// How the message of an [`UNREADABLE_REPLY_CODE`] error starts.
pub const UNREADABLE_REPLY_PREFIX: &str = "the server's reply cannot be read";

/// Why a line was not a message, as the call's outcome says it.
fn unreadable_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("recursion limit") {
        format!("{UNREADABLE_REPLY_PREFIX}: it is nested more than 128 levels deep")
    } else {
        format!("{UNREADABLE_REPLY_PREFIX}: {text}")
    }
}

/// For a reply that cannot be read: an error response to the same request
/// id, so the call ends at once with `reason`, and that id. `None` when
/// the line has no top-level `id`, or has a `method` (a request or a
/// notification of the server's: its id is from the server's own id
/// space, and nothing of ours waits for it).
fn unreadable_reply(
    line: &[u8],
    reason: &str,
) -> Option<(RxJsonRpcMessage<RoleClient>, serde_json::Value)> {
    let id = top_level_id(line)?;
    if top_level_key(line, "method") {
        return None;
    }
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": UNREADABLE_REPLY_CODE,
            "message": reason,
        },
    });
    Some((serde_json::from_value(error).ok()?, id))
}

/// `line` with every lone UTF-16 surrogate escape (a `\uD800`–`\uDFFF`
/// not in a high–low pair) written as `\uFFFD`; `None` when it has none.
fn replace_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    fn hex4(line: &[u8], at: usize) -> Option<u16> {
        let digits = std::str::from_utf8(line.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    }
    // `\u` + 4 hex digits at `at` (the backslash's index).
    let unit = |at: usize| -> Option<u16> {
        (line.get(at + 1) == Some(&b'u'))
            .then(|| hex4(line, at + 2))
            .flatten()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            // Any other escape: two bytes.
            i += 2;
            continue;
        };
        let lone = match u {
            0xD800..=0xDBFF => match unit(i + 6) {
                Some(0xDC00..=0xDFFF) => {
                    i += 12;
                    continue;
                }
                _ => true,
            },
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let o = out.get_or_insert_with(|| Vec::with_capacity(line.len()));
            o.extend_from_slice(&line[copied..i]);
            o.extend_from_slice(b"\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    let mut out = out?;
    out.extend_from_slice(&line[copied..]);
    Some(out)
}

/// The value of the top-level `"id"` of a JSON object, found by scanning
/// (no recursion): a number or a string, as JSON.
fn top_level_id(line: &[u8]) -> Option<serde_json::Value> {
    let i = top_level_value_at(line, "id")?;
    let value_end = if line.get(i) == Some(&b'"') {
        string_end(line, i + 1)? + 1
    } else {
        let len = line[i..]
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(line.len() - i);
        i + len
    };
    let id: serde_json::Value = serde_json::from_slice(&line[i..value_end]).ok()?;
    (id.is_number() || id.is_string()).then_some(id)
}

/// Whether the JSON object in `line` has the top-level key `key`, found
/// by scanning (no recursion).
fn top_level_key(line: &[u8], key: &str) -> bool {
    top_level_value_at(line, key).is_some()
}

/// Where the value of the first top-level `key` of the JSON object in
/// `line` starts, found by scanning (no recursion).
fn top_level_value_at(line: &[u8], wanted: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let start = i + 1;
                let end = string_end(line, start)?;
                let key = &line[start..end];
                // A key may be spelt with escapes (`"\u0069d"`): decode those.
                let is_wanted = depth == 1
                    && (key == wanted.as_bytes()
                        || (key.contains(&b'\\')
                            && serde_json::from_slice::<String>(&line[i..=end])
                                .is_ok_and(|k| k == wanted)));
                i = end + 1;
                if is_wanted {
                    while i < line.len() && line[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    if line.get(i) != Some(&b':') {
                        continue;
                    }
                    i += 1;
                    while i < line.len() && line[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    return Some(i);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote that closes the string starting at `start`.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Entry points of the fuzz targets (feature `fuzzing`, see
/// `runtime::fuzzing`): a server's stdout, as bytes, through the line
/// reader and its scanners, and through the `tools/call` fast path. A
/// failed `assert!` here is the fuzzer's crash signal: an invariant the
/// transport relies on did not hold.
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz {
    use super::*;
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest,
        ListToolsRequest, NumberOrString,
    };

    /// The ids the fuzzed transport awaits: `tools/call` requests 0 to 7
    /// and `"a"`, and a `tools/list` request 8 (the fast paths only look
    /// at replies to requests that were sent).
    fn awaited() -> Vec<ClientJsonRpcMessage> {
        let call = |id| {
            ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                    "t",
                ))),
                id,
            )
        };
        let mut sent: Vec<ClientJsonRpcMessage> =
            (0..8).map(|i| call(NumberOrString::Number(i))).collect();
        sent.push(call(NumberOrString::String("a".into())));
        sent.push(ClientJsonRpcMessage::request(
            ClientRequest::ListToolsRequest(ListToolsRequest::default()),
            NumberOrString::Number(8),
        ));
        sent
    }

    /// `data` as a server's whole stdout: every message the transport
    /// hands out, then each line through the scanners the transport uses
    /// on a line it cannot parse.
    pub(crate) fn stdout(data: &[u8]) {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            use rmcp::transport::Transport;
            let (client_out, mut server_out) = tokio::io::duplex(data.len() + 1);
            let (client_in, _server_in) = tokio::io::duplex(64);
            let mut t =
                StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
            for item in awaited() {
                t.note_sent(&item);
            }
            // Room for all of it: the write never waits for the reader.
            if server_out.write_all(data).await.is_err() {
                return;
            }
            drop(server_out);
            let lines = data.split(|b| *b == b'\n').count();
            let mut handed = 0;
            while let Some(msg) = t.receive().await {
                handed += 1;
                assert!(handed <= lines, "more messages than lines");
                assert!(
                    serde_json::to_vec(&msg).is_ok(),
                    "a message that cannot be written back"
                );
            }
        });
        for line in data.split(|b| *b == b'\n').map(trim_cr) {
            let id = top_level_id(line);
            assert!(
                id.as_ref().is_none_or(|v| v.is_number() || v.is_string()),
                "an id that is neither a number nor a string: {id:?}"
            );
            if let Some(fixed) = replace_lone_surrogates(line) {
                assert_eq!(
                    replace_lone_surrogates(&fixed),
                    None,
                    "a lone surrogate left after replacing them"
                );
            }
            if let Some((msg, reply_id)) = unreadable_reply(line, "why") {
                assert_eq!(Some(&reply_id), id.as_ref(), "the error answers another id");
                assert!(
                    matches!(msg, rmcp::model::JsonRpcMessage::Error(_)),
                    "an unreadable reply that is not an error"
                );
            }
        }
    }

    /// `data` as one line through the `tools/call` fast path, with calls
    /// awaited: a reply it hands out answers an awaited call, which is
    /// awaited no more; it drops at most that one id otherwise.
    pub(crate) fn call_reply(data: &[u8]) {
        let mut pending: std::collections::HashSet<rmcp::model::RequestId> = awaited()
            .iter()
            .filter_map(|m| match m {
                rmcp::model::JsonRpcMessage::Request(r)
                    if matches!(r.request, ClientRequest::CallToolRequest(_)) =>
                {
                    Some(r.id.clone())
                }
                _ => None,
            })
            .collect();
        let before = pending.clone();
        match super::call_reply(&mut pending, data) {
            Some(rmcp::model::JsonRpcMessage::Response(r)) => {
                assert!(
                    before.contains(&r.id),
                    "a reply to a call never sent: {:?}",
                    r.id
                );
                assert!(
                    !pending.contains(&r.id),
                    "a call answered and still awaited"
                );
                assert_eq!(
                    pending.len() + 1,
                    before.len(),
                    "more than its own call dropped"
                );
            }
            Some(other) => panic!("the fast path handed out a non-response: {other:?}"),
            None => assert!(
                pending.len() + 1 >= before.len(),
                "calls dropped unanswered"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_binary_search_list_names_each_directory_once() {
        let err = resolve_executable(
            "no-such-binary-xyz",
            Some("/usr/local/bin:/bin:/usr/local/bin:/bin"),
            None,
        )
        .unwrap_err()
        .to_string();
        let searched: Vec<&str> = err
            .split("searched: ")
            .nth(1)
            .unwrap()
            .split(", ")
            .collect();
        assert_eq!(searched, ["/usr/local/bin", "/bin"], "{err}");
    }

    #[test]
    fn stderr_ring_keeps_only_the_tail() {
        // CONN-7
        let d = Diagnostics::default();
        d.push_stderr(&vec![b'a'; STDERR_TAIL_BYTES]);
        d.push_stderr(b"LAST WORDS");
        let tail = d.stderr_tail();
        assert_eq!(tail.len(), STDERR_TAIL_BYTES);
        assert!(tail.ends_with("LAST WORDS"));
    }

    #[test]
    fn environment_is_scrubbed_to_the_allowlist_plus_explicit_values() {
        // CONN-5
        let cfg = StdioConfig {
            command: "x".into(),
            args: vec![],
            env: [("FOO".to_owned(), "bar".to_owned())].into(),
            env_passthrough: vec!["EXTRA".into()],
            env_secrets: Default::default(),
            cwd: None,
        };
        let env = child_environment(&cfg, |n| match n {
            "PATH" => Some("/bin".into()),
            "EXTRA" => Some("1".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("nope".into()),
            _ => None,
        });
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["EXTRA", "FOO", "NO_COLOR", "PATH"]);
    }

    #[test]
    fn missing_executable_error_names_what_was_searched() {
        // CONN-5
        let err = resolve_executable(
            "no-such-binary-xyz",
            Some("/nope1:/nope2"),
            Some(Path::new("/h")),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no-such-binary-xyz"), "{err}");
        assert!(
            err.contains("/nope1, /nope2, /usr/local/bin, /h/.local/bin, /h/.cargo/bin"),
            "{err}"
        );
    }

    #[test]
    fn the_sse_tap_keeps_each_page_raw_by_its_id() {
        // SYNC-7 over HTTP: rmcp's typed Tool drops execution.taskSupport;
        // the page kept raw has it. Each fetch takes only its own page,
        // once: nothing accumulates.
        let d = Diagnostics::default();
        d.tap_tools_page(
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","execution":{"taskSupport":"required"}}]}}"#,
        );
        d.tap_tools_page(br#"{"jsonrpc":"2.0","id":"x","result":{"tools":[{"name":"c"}]}}"#);
        d.tap_tools_page(br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#);
        let page = d.take_tools_page("1").expect("page 1");
        assert_eq!(page[0]["execution"]["taskSupport"], "required");
        assert!(d.take_tools_page("1").is_none());
        assert_eq!(d.take_tools_page("\"x\"").expect("page x")[0]["name"], "c");
        assert!(
            d.take_tools_page("2").is_none(),
            "no tools array, nothing kept"
        );
    }

    /// A reply line as a server writes it.
    fn reply_line(id: u64, text_bytes: usize) -> Vec<u8> {
        let reply = serde_json::json!({
            "jsonrpc": "2.0", "id": id,
            "result": {"content": [{"type": "text", "text": "x".repeat(text_bytes)}]}
        });
        format!("{reply}\n").into_bytes()
    }

    #[tokio::test]
    async fn a_tools_call_reply_is_read_once_as_raw_json_and_only_an_awaited_one() {
        // PERF-1 / CALL-3: the reply to a tools/call the transport sent
        // reaches rmcp as a CustomResult holding the result exactly as the
        // server wrote it (a field rmcp's typed result would drop is kept).
        // Everything else is read as usual: a reply to an id never sent, a
        // request from the server reusing an awaited id, a result that is
        // not a plain CallToolResult, and the reply to a cancelled call.
        use rmcp::model::{
            CallToolRequest, CallToolRequestParams, CancelledNotification,
            CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification, ClientRequest,
            JsonRpcMessage, NumberOrString, ServerResult,
        };
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let mut t = StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
        for id in [1, 2, 3, 4, 5] {
            let call = ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                    "echo",
                ))),
                NumberOrString::Number(id),
            );
            t.send(call).await.unwrap();
        }
        let cancel = ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(
            CancelledNotification::new(CancelledNotificationParam::new(
                Some(NumberOrString::Number(4)),
                None,
            )),
        ));
        t.send(cancel).await.unwrap();
        let raw = serde_json::json!({"content": [{"type": "text", "text": "hi", "extra": 1}],
            "isError": false});
        let lines = [
            // A request from the server that reuses awaited id 1.
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": raw}),
            serde_json::json!({"jsonrpc": "2.0", "id": 9, "result": raw}),
            // Not a plain CallToolResult: rmcp types it as before.
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "result": {"isError": true}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 3,
                "result": {"content": [], "resultType": "input_required"}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 4, "result": raw}),
            // An error reply answers awaited id 5.
            serde_json::json!({"jsonrpc": "2.0", "id": 5,
                "error": {"code": -32602, "message": "no such tool"}}),
        ];
        for line in &lines {
            server_out
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        let mut got = Vec::new();
        for _ in &lines {
            got.push(t.receive().await.unwrap());
        }
        let result = |m: &RxJsonRpcMessage<RoleClient>| match m {
            JsonRpcMessage::Response(r) => r.result.clone(),
            other => panic!("a response: {other:?}"),
        };
        let ServerResult::CustomResult(c) = result(&got[1]) else {
            panic!("the awaited reply, raw: {:?}", got[1]);
        };
        assert_eq!(c.0, raw, "as the server wrote it");
        // The others exactly as rmcp reads them.
        for (at, what) in [
            (0, "a request"),
            (2, "never sent"),
            (3, "no content"),
            (4, "another resultType"),
            (5, "cancelled"),
            (6, "an error reply"),
        ] {
            let usual: RxJsonRpcMessage<RoleClient> =
                serde_json::from_value(lines[at].clone()).unwrap();
            assert_eq!(
                format!("{:?}", got[at]),
                format!("{usual:?}"),
                "{what}: read as usual"
            );
        }
        assert!(
            matches!(result(&got[5]), ServerResult::CallToolResult(_)),
            "{:?}",
            got[5]
        );
        assert!(t.calls_pending.is_empty(), "{:?}", t.calls_pending);
    }

    #[tokio::test]
    async fn a_tools_list_reply_is_read_once_as_raw_json_and_rmcp_gets_an_empty_page() {
        // PERF-1 / SYNC-3, SYNC-7: the transport keeps the raw entries of
        // the reply to a tools/list request it sent (taskSupport and a
        // malformed entry included, for build_catalog to judge); rmcp's
        // typed page is empty but keeps nextCursor. A reply to any other
        // request is read as usual, "tools" key or not.
        use rmcp::model::{
            ClientJsonRpcMessage, ClientRequest, ListToolsRequest, NumberOrString, ServerResult,
        };
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let list = ClientJsonRpcMessage::request(
            ClientRequest::ListToolsRequest(ListToolsRequest::default()),
            NumberOrString::Number(7),
        );
        t.send(list).await.unwrap();
        let tools = serde_json::json!([
            {"name": "a", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
            {"name": 3},
        ]);
        for (id, tools) in [(8, tools.clone()), (7, tools.clone())] {
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": id,
                "result": {"tools": tools, "nextCursor": "p2"}});
            server_out
                .write_all(format!("{reply}\n").as_bytes())
                .await
                .unwrap();
        }
        // Id 8 was never asked for: rmcp reads it whole (a malformed entry
        // makes it a CustomResult), and nothing is kept.
        let other = serde_json::to_value(t.receive().await.unwrap()).unwrap();
        assert_eq!(other["result"]["tools"], tools, "{other}");
        assert!(diag.take_tools_page("8").is_none());
        let msg = t.receive().await.unwrap();
        let rmcp::model::JsonRpcMessage::Response(r) = msg else {
            panic!("a response: {msg:?}");
        };
        let ServerResult::ListToolsResult(page) = r.result else {
            panic!("a typed page: {:?}", r.result);
        };
        assert!(page.tools.is_empty());
        assert_eq!(page.next_cursor.as_deref(), Some("p2"));
        assert_eq!(
            diag.take_tools_page("7"),
            Some(tools.as_array().unwrap().clone())
        );
        assert!(diag.take_tools_page("7").is_none(), "taken once");
        assert!(!diag.tools_awaited(), "the request was answered");
    }

    #[tokio::test]
    async fn a_reply_split_across_reads_survives_receive_futures_dropped_in_between() {
        // CONN-6: rmcp drops a pending receive() whenever
        // another event wins its loop; the part of the line read so far must
        // stay. Each chunk is written, then one receive() is polled until it
        // has nothing more to read and dropped, as rmcp's select would.
        use futures::FutureExt;
        use rmcp::transport::Transport;
        for chunk in [1usize, 2, 3, 7, 64, 4096, 65_537, 300_000] {
            let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
            let (client_in, _server_in) = tokio::io::duplex(1 << 20);
            let diag = Arc::new(Diagnostics::default());
            let mut t = StdioTransport::new(client_in, client_out, diag.clone());
            let mut bytes = reply_line(1, 200_000);
            bytes.extend(reply_line(2, 10));
            let mut got = Vec::new();
            for piece in bytes.chunks(chunk) {
                server_out.write_all(piece).await.unwrap();
                while let Some(msg) = t.receive().now_or_never() {
                    got.push(msg.expect("a message, not the end"));
                }
            }
            let ids: Vec<String> = got
                .iter()
                .map(|m| serde_json::to_value(m).unwrap()["id"].to_string())
                .collect();
            assert_eq!(ids, vec!["1", "2"], "chunks of {chunk} bytes");
            assert_eq!(diag.non_json().0, 0, "nothing counted as non-JSON");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_gives_its_read_buffer_back_and_a_partial_line_is_kept() {
        // PERF-1 (memory per idle connection): stdout is read straight into
        // the line buffer; a large reply grows it, and once the connection
        // has been quiet for IDLE_SHRINK_AFTER with nothing partial held,
        // the buffer is given back. A partial line is never dropped by it.
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        server_out.write_all(&reply_line(1, 200_000)).await.unwrap();
        assert!(t.receive().await.is_some());
        assert!(t.line.capacity() > 200_000, "the buffer grew for the reply");
        // Half of the next reply, then quiet for longer than the shrink delay.
        let next = reply_line(2, 50_000);
        let (head, tail) = next.split_at(next.len() / 2);
        server_out.write_all(head).await.unwrap();
        let waited = tokio::time::timeout(IDLE_SHRINK_AFTER * 3, t.receive()).await;
        assert!(waited.is_err(), "no whole line yet");
        assert!(t.line.capacity() >= head.len(), "the partial line is kept");
        server_out.write_all(tail).await.unwrap();
        let msg = t.receive().await.expect("the second reply, whole");
        assert_eq!(serde_json::to_value(&msg).unwrap()["id"], 2);
        // Now quiet with nothing partial: the buffer goes back.
        let waited = tokio::time::timeout(IDLE_SHRINK_AFTER * 2, t.receive()).await;
        assert!(waited.is_err(), "nothing more was sent");
        assert!(
            t.line.capacity() <= IDLE_KEEP,
            "an idle connection holds {} bytes",
            t.line.capacity()
        );
        // And it still reads what comes next.
        server_out.write_all(&reply_line(3, 10)).await.unwrap();
        let msg = t.receive().await.expect("the third reply");
        assert_eq!(serde_json::to_value(&msg).unwrap()["id"], 3);
    }

    #[tokio::test]
    async fn the_line_guard_counts_across_dropped_receive_futures() {
        // CONN-6: the 8 MiB guard holds for a line read in pieces too.
        use futures::FutureExt;
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let piece = vec![b'x'; 512 * 1024];
        let mut ended = false;
        for _ in 0..(MAX_LINE_BYTES / piece.len() + 2) {
            server_out.write_all(&piece).await.unwrap();
            if let Some(end) = t.receive().now_or_never() {
                assert!(end.is_none(), "an over-long line ends the transport");
                ended = true;
                break;
            }
        }
        assert!(ended, "the guard fired");
        assert!(
            diag.fatal()
                .unwrap_or_default()
                .contains("longer than 8 MiB")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_stops_reading_stdin_makes_the_transport_dead_after_the_deadline() {
        // CALL-4, CONN-14: a write blocked past the
        // deadline fails, and the transport ends so that reconnecting takes over.
        use rmcp::transport::Transport;
        let (client_out, _server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in_never_read) = tokio::io::duplex(64);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let big = rmcp::model::ClientJsonRpcMessage::notification(
            rmcp::model::ClientNotification::CancelledNotification(
                rmcp::model::CancelledNotification::new(
                    rmcp::model::CancelledNotificationParam::new(
                        Some(rmcp::model::NumberOrString::Number(1)),
                        Some("y".repeat(100_000)),
                    ),
                ),
            ),
        );
        let started = tokio::time::Instant::now();
        let sent = t.send(big).await;
        assert_eq!(sent.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), WRITE_STALL_DEADLINE);
        assert!(t.receive().await.is_none(), "the transport is dead");
        assert!(
            diag.fatal()
                .unwrap_or_default()
                .contains("stopped reading its stdin")
        );
    }

    #[tokio::test]
    async fn a_reply_nested_past_the_parse_limit_becomes_an_error_for_its_call() {
        // CALL-4: not a skipped line, so the call does
        // not wait its whole timeout.
        use futures::FutureExt;
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"result\":{{\"structuredContent\":{{\"a\":{deep}}},\"content\":[]}},\"id\":7}}\n"
        );
        server_out.write_all(line.as_bytes()).await.unwrap();
        let msg = t.receive().now_or_never().flatten().expect("a message");
        let v = serde_json::to_value(&msg).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], UNREADABLE_REPLY_CODE);
        assert_eq!(
            v["error"]["message"],
            "the server's reply cannot be read: it is nested more than 128 levels deep"
        );
        assert_eq!(diag.non_json().0, 0);
        assert_eq!(
            top_level_id(br#"{"a":{"id":1},"id":"x\"y"}"#),
            Some(serde_json::json!("x\"y"))
        );
        assert_eq!(top_level_id(br#"{"method":"n"}"#), None);
    }

    #[test]
    fn lone_surrogate_escapes_become_the_replacement_character_and_pairs_stay() {
        // CALL-4: read leniently, as JS and Python do.
        let fixed =
            |s: &str| replace_lone_surrogates(s.as_bytes()).map(|b| String::from_utf8(b).unwrap());
        assert_eq!(
            fixed(r#"{"t":"a\ud83d"}"#).as_deref(),
            Some(r#"{"t":"a\uFFFD"}"#)
        );
        assert_eq!(
            fixed(r#"{"t":"\udc00x\ud800\u0041"}"#).as_deref(),
            Some(r#"{"t":"\uFFFDx\uFFFD\u0041"}"#)
        );
        assert_eq!(
            fixed(r#"{"t":"\ud83d\ude00 and \\ud800"}"#),
            None,
            "a pair, and an escaped backslash"
        );
        assert_eq!(
            fixed(r#"{"t":"\ud83d\ud83d\ude00"}"#).as_deref(),
            Some(r#"{"t":"\uFFFD\ud83d\ude00"}"#)
        );
        let v: serde_json::Value =
            serde_json::from_str(&fixed(r#"{"t":"cut \ud83d"}"#).unwrap()).unwrap();
        assert_eq!(v["t"], "cut \u{fffd}");
    }

    #[tokio::test]
    async fn a_reply_that_cannot_be_read_answers_its_id_and_a_server_request_stays_noise() {
        // CALL-4: invalid UTF-8 and result+error end
        // the call at once with the parser's reason; a broken line that is
        // the server's own request (a `method`) has an id of the server's
        // id space and must never end a call of ours.
        use futures::FutureExt;
        use rmcp::transport::Transport;
        let (client_out, mut server_out) = tokio::io::duplex(1 << 20);
        let (client_in, _server_in) = tokio::io::duplex(1 << 20);
        let diag = Arc::new(Diagnostics::default());
        let mut t = StdioTransport::new(client_in, client_out, diag.clone());
        let mut lines: Vec<Vec<u8>> = vec![
            br#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"x":"#.to_vec(),
            br#"{"jsonrpc":"2.0","id":4,"result":{"content":[]},"error":{"code":1,"message":"m"}}"#
                .to_vec(),
        ];
        let mut bad =
            br#"{"jsonrpc":"2.0","id":"s","result":{"content":[{"type":"text","text":""#.to_vec();
        bad.extend_from_slice(b"\xff\"}]}}");
        lines.push(bad);
        for l in &lines {
            server_out.write_all(l).await.unwrap();
            server_out.write_all(b"\n").await.unwrap();
        }
        for want in [serde_json::json!(4), serde_json::json!("s")] {
            let msg = t.receive().now_or_never().flatten().expect("a message");
            let v = serde_json::to_value(&msg).unwrap();
            assert_eq!(v["id"], want, "{v}");
            assert_eq!(v["error"]["code"], UNREADABLE_REPLY_CODE);
            let why = v["error"]["message"].as_str().unwrap();
            assert!(
                why.starts_with("the server's reply cannot be read: "),
                "{why}"
            );
        }
        assert_eq!(diag.non_json().0, 1, "the broken request is noise");
        assert!(top_level_key(br#"{"id":1,"method":"x"}"#, "method"));
        assert!(!top_level_key(
            br#"{"id":1,"result":{"method":"x"}}"#,
            "method"
        ));
    }

    #[test]
    fn a_top_level_id_key_written_with_escapes_is_still_the_id() {
        // CALL-4: found by the property test
        // `top_level_id_is_the_id_serde_json_reads_and_nothing_nested`; the
        // minimal input was `{"\u0069\u0064":0}`. A too-deep reply with such
        // a key got no error reply, and its call waited its whole timeout.
        assert_eq!(
            top_level_id(br#"{"\u0069\u0064":0}"#),
            Some(serde_json::json!(0))
        );
        assert_eq!(
            top_level_id(br#"{"a":{"i\u0064":1},"\u0069d":"x"}"#),
            Some(serde_json::json!("x"))
        );
        assert_eq!(top_level_id(br#"{"i\u0064x":1}"#), None);
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the stdout line reader and of the scanning parsers
    //! that classify a line.

    use super::*;
    use crate::messages::budget::floor_char_boundary;
    use crate::messages::prop_gen::{config, json_number, json_value, key, tricky_text};
    use futures::FutureExt;
    use proptest::prelude::*;
    use rmcp::transport::Transport;
    use serde_json::{Value, json};

    // ===== What a server writes =====

    /// One stdout line as a server writes it.
    #[derive(Debug, Clone)]
    enum Line {
        /// A reply the transport must hand out once, in order.
        Reply {
            id: Value,
            text: String,
            crlf: bool,
            lead: &'static str,
        },
        /// A reply nested past serde_json's limit: handed out as an error
        /// reply to the same id (CALL-4).
        Deep { id: Value, depth: usize, crlf: bool },
        /// A banner or stray log line: skipped and counted (CONN-6).
        NonJson { bytes: Vec<u8>, crlf: bool },
        /// Whitespace only: skipped, not counted.
        Blank(&'static str),
    }

    impl Line {
        fn bytes(&self) -> Vec<u8> {
            let end: &[u8] = match self {
                Line::Reply { crlf: true, .. }
                | Line::Deep { crlf: true, .. }
                | Line::NonJson { crlf: true, .. } => b"\r\n",
                _ => b"\n",
            };
            let mut out = match self {
                Line::Reply { id, text, lead, .. } => {
                    let reply = json!({
                        "jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": text}]}
                    });
                    format!("{lead}{reply}{lead}").into_bytes()
                }
                Line::Deep { id, depth, .. } => format!(
                    "{{\"jsonrpc\":\"2.0\",\"result\":{{\"structuredContent\":{{\"a\":{}{}}},\"content\":[]}},\"id\":{id}}}",
                    "[".repeat(*depth),
                    "]".repeat(*depth)
                )
                .into_bytes(),
                Line::NonJson { bytes, .. } => bytes.clone(),
                Line::Blank(ws) => ws.as_bytes().to_vec(),
            };
            out.extend_from_slice(end);
            out
        }

        /// What the transport hands out for this line: the id and the text
        /// (a reply) or the error code (a nested reply).
        fn expected(&self) -> Option<(Value, Value)> {
            match self {
                Line::Reply { id, text, .. } => Some((id.clone(), json!(text))),
                Line::Deep { id, .. } => Some((id.clone(), json!(UNREADABLE_REPLY_CODE))),
                _ => None,
            }
        }
    }

    /// A JSON-RPC id: an integer rmcp keeps, or any string.
    fn rpc_id() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            (0i64..100).prop_map(Value::from),
            tricky_text().prop_map(Value::String),
        ]
    }

    /// Reply text of random size: a short piece of multi-byte text repeated,
    /// sometimes past the reader's 64 KiB buffer.
    fn reply_text() -> impl Strategy<Value = String> {
        let repeats = prop_oneof![
            6 => 0usize..20,
            3 => 20usize..2_000,
            1 => 2_000usize..12_000,
        ];
        ("[a-zé漢😀\"\\\\\n\t {}]{1,8}", repeats).prop_map(|(unit, n)| unit.repeat(n))
    }

    fn line() -> impl Strategy<Value = Line> {
        let non_json_start = prop::sample::select(vec![
            &b"Starting server on stdio"[..],
            b"[info] ",
            b"WARN: ",
            b"> ",
            b"#",
            b"{not json",
            b"\xff\xfe",
            b"npm notice ",
        ]);
        let non_json_rest = prop::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..300,
        );
        prop_oneof![
            6 => (rpc_id(), reply_text(), any::<bool>(), prop::sample::select(vec!["", " ", "\t", " \t "]))
                .prop_map(|(id, text, crlf, lead)| Line::Reply { id, text, crlf, lead }),
            1 => (rpc_id(), 129usize..400, any::<bool>())
                .prop_map(|(id, depth, crlf)| Line::Deep { id, depth, crlf }),
            3 => (non_json_start, non_json_rest, any::<bool>()).prop_map(|(start, rest, crlf)| {
                let mut bytes = start.to_vec();
                bytes.extend(rest);
                Line::NonJson { bytes, crlf }
            }),
            1 => prop::sample::select(vec!["", " ", "\t", "\r", " \r", "\x0c  "]).prop_map(Line::Blank),
        ]
    }

    // ===== How it arrives =====

    /// What happens between two writes: rmcp polls `receive()` and drops it
    /// whenever another event wins its select.
    #[derive(Debug, Clone, Copy)]
    enum Polls {
        /// No receive() at all.
        None,
        /// This many receive() futures, each polled once and dropped.
        Once(u8),
        /// receive() futures polled until one is pending, which is dropped.
        UntilPending,
    }

    /// A write of this many bytes, then the polls.
    type Step = (usize, Polls);

    fn schedule() -> impl Strategy<Value = Vec<Step>> {
        let len = prop_oneof![1usize..8, 8usize..300, 300usize..70_000];
        let polls = prop_oneof![
            Just(Polls::None),
            (1u8..4).prop_map(Polls::Once),
            Just(Polls::UntilPending),
        ];
        prop::collection::vec((len, polls), 1..12)
    }

    /// Write `bytes` through a duplex pipe as `steps` say (cycled), then
    /// close it and receive what is left. Returns the messages as (id,
    /// text or error code), and the connection's diagnostics.
    fn run(bytes: &[u8], steps: &[Step]) -> (Vec<(Value, Value)>, Arc<Diagnostics>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let diag = Arc::new(Diagnostics::default());
        let got = rt.block_on(async {
            // Room for everything: a write never waits for the reader.
            let (client_out, mut server_out) = tokio::io::duplex(bytes.len() + 1);
            let (client_in, _server_in) = tokio::io::duplex(64);
            let mut t = StdioTransport::new(client_in, client_out, diag.clone());
            let mut got = Vec::new();
            let mut rest = bytes;
            for &(len, polls) in steps.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let n = len.min(rest.len());
                server_out.write_all(&rest[..n]).await.unwrap();
                rest = &rest[n..];
                let mut poll = |got: &mut Vec<_>| match t.receive().now_or_never() {
                    Some(Some(msg)) => {
                        got.push(msg);
                        true
                    }
                    Some(None) => panic!("the transport ended before its input did"),
                    None => false,
                };
                match polls {
                    Polls::None => {}
                    Polls::Once(k) => {
                        for _ in 0..k {
                            poll(&mut got);
                        }
                    }
                    Polls::UntilPending => while poll(&mut got) {},
                }
            }
            drop(server_out);
            while let Some(msg) = t.receive().await {
                got.push(msg);
            }
            got
        });
        let got = got
            .iter()
            .map(|m| {
                let v = serde_json::to_value(m).unwrap();
                let body = match v.pointer("/result/content/0/text") {
                    Some(text) => text.clone(),
                    None => v["error"]["code"].clone(),
                };
                (v["id"].clone(), body)
            })
            .collect();
        (got, diag)
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn conn6_every_reply_comes_out_once_in_order_whatever_the_chunking_and_dropped_receives(
            lines in prop::collection::vec(line(), 0..12),
            steps in schedule(),
        ) {
            // CONN-6, CALL-4: a reply split
            // across reads survives receive() futures dropped in between; no
            // message is lost, duplicated or reordered; non-JSON lines are
            // skipped and counted, blank ones skipped.
            let bytes: Vec<u8> = lines.iter().flat_map(Line::bytes).collect();
            let expected: Vec<(Value, Value)> = lines.iter().filter_map(Line::expected).collect();
            let (got, diag) = run(&bytes, &steps);
            prop_assert_eq!(&got, &expected);
            let (whole, _) = run(&bytes, &[(usize::MAX, Polls::UntilPending)]);
            prop_assert_eq!(&got, &whole, "the same messages whatever the chunking");

            let non_json: Vec<&Vec<u8>> = lines
                .iter()
                .filter_map(|l| match l {
                    Line::NonJson { bytes, .. } => Some(bytes),
                    _ => None,
                })
                .collect();
            let (count, first) = diag.non_json();
            prop_assert_eq!(count, non_json.len() as u64);
            // The first one's start is kept (CONN-6), cut on a char boundary.
            let first_expected = non_json.first().map(|b| {
                let whole = String::from_utf8_lossy(trim_cr(b)).into_owned();
                whole[..floor_char_boundary(&whole, 200)].trim().to_owned()
            });
            prop_assert_eq!(first, first_expected);
            prop_assert_eq!(diag.fatal(), None);
        }
    }

    // ===== Line classification =====

    /// Whitespace JSON allows between tokens.
    fn ws() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["", "", "", " ", "\t", "\r\n", "  \n "])
    }

    /// The text of a key: as serde_json writes it, or with `\u` escapes.
    fn key_text(key: &str, escaped: bool) -> String {
        if escaped {
            let mut out = String::from("\"");
            for unit in key.encode_utf16() {
                out.push_str(&format!("\\u{unit:04x}"));
            }
            out.push('"');
            out
        } else {
            serde_json::to_string(key).unwrap()
        }
    }

    /// A JSON object written by hand, so that members keep their order and
    /// whitespace varies: `members` (key, value's JSON text, key escaped) in
    /// order, with `id` (if any) at `at`.
    fn object_text(
        members: &[(String, String, bool)],
        id: Option<&(Value, bool)>,
        at: usize,
        spaces: &[&str],
    ) -> String {
        let mut all: Vec<(String, String)> = members
            .iter()
            .map(|(k, v, escaped)| (key_text(k, *escaped), v.clone()))
            .collect();
        if let Some((id, escaped)) = id {
            all.insert(
                at.min(all.len()),
                (key_text("id", *escaped), id.to_string()),
            );
        }
        let mut sp = spaces.iter().cycle();
        let mut s = || *sp.next().unwrap();
        let mut out = format!("{}{{", s());
        for (i, (k, v)) in all.iter().enumerate() {
            if i > 0 {
                out.push_str(&format!("{},", s()));
            }
            out.push_str(&format!("{}{k}{}:{}{v}", s(), s(), s()));
        }
        out.push_str(&format!("{}}}{}", s(), s()));
        out
    }

    /// Object members other than `id`: (key, value's JSON text, key escaped).
    fn members(n: usize) -> impl Strategy<Value = Vec<(String, String, bool)>> {
        prop::collection::vec(
            (
                key(),
                json_value(),
                prop::bool::weighted(0.1),
                any::<bool>(),
            ),
            0..n,
        )
        .prop_map(|members| {
            members
                .into_iter()
                .filter(|(k, ..)| k != "id")
                .map(|(k, v, escaped, pretty)| {
                    let text = if pretty {
                        serde_json::to_string_pretty(&v).unwrap()
                    } else {
                        v.to_string()
                    };
                    (k, text, escaped)
                })
                .collect()
        })
    }

    /// JSON-looking bytes: tokens that make the scanners work.
    fn jsonish_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop::sample::select(vec![
            &b"{"[..],
            b"}",
            b"[",
            b"]",
            b"\"",
            b"\\",
            b"\\\"",
            b"id",
            b"\"id\"",
            b":",
            b",",
            b" ",
            b"1",
            b"-",
            b"e",
            b".",
            b"\xff",
            b"\"x\"",
        ]);
        prop_oneof![
            prop::collection::vec(token, 0..40).prop_map(|t| t.concat()),
            prop::collection::vec(any::<u8>(), 0..200),
        ]
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn line_scanners_never_panic_on_arbitrary_bytes(bytes in jsonish_bytes(), start in 0usize..64) {
            let id = top_level_id(&bytes);
            prop_assert!(id.as_ref().is_none_or(|v| v.is_number() || v.is_string()));
            let _ = unreadable_reply(&bytes, "why");
            let _ = replace_lone_surrogates(&bytes);
            let start = start.min(bytes.len());
            if let Some(end) = string_end(&bytes, start) {
                prop_assert!(end >= start && bytes[end] == b'"');
            }
        }

        #[test]
        fn top_level_id_is_the_id_serde_json_reads_and_nothing_nested(
            members in members(6),
            id in prop::option::weighted(0.8, (prop_oneof![json_number(), tricky_text().prop_map(Value::String)], prop::bool::weighted(0.1))),
            at in 0usize..8,
            spaces in prop::collection::vec(ws(), 1..8),
        ) {
            // CALL-4: the id of a reply too deep to parse is found by
            // scanning; it must be the id a parser reads, never one nested
            // in a value or spelled inside a string.
            let text = object_text(&members, id.as_ref(), at, &spaces);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let expected = parsed.get("id").filter(|v| v.is_number() || v.is_string()).cloned();
            // (serde_json reads floats back only nearly exactly: compare
            // with what it parses, not with what was generated.)
            prop_assert_eq!(expected.is_some(), id.is_some());
            prop_assert_eq!(top_level_id(text.as_bytes()), expected);
        }

        #[test]
        fn a_reply_too_deep_to_parse_becomes_an_error_for_its_own_id(
            id in rpc_id(),
            mut members in members(4),
            at in 0usize..6,
            depth in 129usize..300,
            spaces in prop::collection::vec(ws(), 1..4),
        ) {
            // CALL-4: whatever sits around it.
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let deep_at = at % (members.len() + 1);
            members.insert(deep_at, ("deep".to_owned(), deep, false));
            let text = object_text(&members, Some(&(id.clone(), false)), at, &spaces);
            let (msg, _) = unreadable_reply(text.as_bytes(), "why").expect("an error reply");
            let v = serde_json::to_value(&msg).unwrap();
            prop_assert_eq!(&v["id"], &id);
            prop_assert_eq!(&v["error"]["code"], &json!(UNREADABLE_REPLY_CODE));
        }
    }
}

#[cfg(test)]
mod call_reply_props {
    //! Property tests of the raw reply fast paths (`call_reply` and
    //! `tools_page`, reached through `decode`): replies to awaited calls and
    //! to a `tools/list`, in any order, among decoys that must never answer
    //! them.

    use super::*;
    use crate::messages::prop_gen::{config, tricky_text};
    use proptest::prelude::*;
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest,
        JsonRpcMessage, ListToolsRequest, NumberOrString,
    };
    use rmcp::transport::Transport;
    use serde_json::{Value, json};

    /// One stdout line of the server's.
    #[derive(Debug, Clone)]
    enum Wire {
        /// The reply to awaited call `id`, its text its own.
        Reply { id: i64, text: String },
        /// A reply to awaited call `id` with both `result` and `error`:
        /// the call's only answer, which the transport makes an error.
        Both { id: i64 },
        /// A reply whose id is the string form of awaited call `id`
        /// (`"3"` for 3): JSON-RPC ids are typed, it answers no call.
        StringId { id: i64, text: String },
        /// A request of the server's, with an id from its own id space
        /// (a string, or a number an awaited call has too).
        Request { id: Value },
        /// The page answering the awaited `tools/list` `id`.
        Page { id: i64, tools: Vec<Value> },
        /// A page whose id is the string form of the awaited `tools/list`'s.
        StringPage { id: i64, tools: Vec<Value> },
    }

    impl Wire {
        fn line(&self) -> String {
            let result = |text: &str| json!({"content": [{"type": "text", "text": text}]});
            let v = match self {
                Wire::Reply { id, text } => {
                    json!({"jsonrpc": "2.0", "id": id, "result": result(text)})
                }
                Wire::Both { id } => json!({"jsonrpc": "2.0", "id": id,
                    "result": result("both"), "error": {"code": 1, "message": "both"}}),
                Wire::StringId { id, text } => {
                    json!({"jsonrpc": "2.0", "id": id.to_string(), "result": result(text)})
                }
                Wire::Request { id } => json!({"jsonrpc": "2.0", "id": id, "method": "ping"}),
                Wire::Page { id, tools } => {
                    json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}})
                }
                Wire::StringPage { id, tools } => {
                    json!({"jsonrpc": "2.0", "id": id.to_string(), "result": {"tools": tools}})
                }
            };
            format!("{v}\n")
        }
    }

    /// The tools of a page: well formed, or not (the catalog judges them).
    fn tools() -> impl Strategy<Value = Vec<Value>> {
        let tool = prop_oneof![
            3 => tricky_text().prop_map(|name| json!({"name": name, "inputSchema": {"type": "object"}})),
            1 => tricky_text().prop_map(|t| json!({"name": 3, "title": t})),
        ];
        prop::collection::vec(tool, 0..4)
    }

    /// An exchange: the calls sent (distinct numeric ids; each answered by
    /// its reply with its own text, or by a reply with both `result` and
    /// `error`), maybe a `tools/list` sent (an id no call has), and every
    /// line the server writes, shuffled.
    type Exchange = (Vec<i64>, Option<i64>, Vec<Wire>);

    fn exchange() -> impl Strategy<Value = Exchange> {
        let ids = prop::collection::btree_set(prop_oneof![3 => 0i64..20, 1 => any::<i64>()], 1..8);
        ids.prop_flat_map(|ids| {
            let ids: Vec<i64> = ids.into_iter().collect();
            let n = ids.len();
            let answers = prop::collection::vec((tricky_text(), prop::bool::weighted(0.2)), n);
            let decoy = prop_oneof![
                (0..n, tricky_text()).prop_map(|(at, text)| (at, Some(text), None)),
                (
                    0..n,
                    prop_oneof![Just(json!("1")), tricky_text().prop_map(Value::String)]
                )
                    .prop_map(|(at, id)| (at, None, Some(id))),
                (0..n).prop_map(|at| (at, None, None)),
            ];
            let decoys = prop::collection::vec(decoy, 0..6);
            // The list's id, its page, and whether a string-id page comes too.
            let taken = ids.clone();
            let list = prop::option::weighted(0.5, (0i64..40, tools(), tools(), any::<bool>()))
                .prop_map(move |l| l.filter(|(id, ..)| !taken.contains(id)));
            (Just(ids), answers, decoys, list)
        })
        .prop_flat_map(|(ids, answers, decoys, list)| {
            let mut lines: Vec<Wire> = ids
                .iter()
                .zip(answers)
                .map(|(&id, (text, both))| {
                    if both {
                        Wire::Both { id }
                    } else {
                        Wire::Reply { id, text }
                    }
                })
                .collect();
            for (at, text, request_id) in decoys {
                let id = ids[at];
                lines.push(match (text, request_id) {
                    (Some(text), _) => Wire::StringId { id, text },
                    (None, Some(rid)) => Wire::Request { id: rid },
                    // A request reusing an awaited call's number.
                    (None, None) => Wire::Request { id: json!(id) },
                });
            }
            let list_id = list.as_ref().map(|(id, ..)| *id);
            if let Some((id, tools, decoy_tools, decoy)) = list {
                lines.push(Wire::Page { id, tools });
                if decoy {
                    lines.push(Wire::StringPage {
                        id,
                        tools: decoy_tools,
                    });
                }
            }
            (Just(ids), Just(list_id), Just(lines).prop_shuffle())
        })
    }

    /// What the transport handed out, in order, how many calls it still
    /// awaits, and the connection's diagnostics (with the stashed pages).
    type Run = (Vec<RxJsonRpcMessage<RoleClient>>, usize, Arc<Diagnostics>);

    /// Mark `ids` as sent `tools/call` requests (and `list` as a sent
    /// `tools/list`), write `lines`, close stdout, and read every message
    /// the transport hands out.
    fn run(ids: &[i64], list: Option<i64>, lines: &[Wire]) -> Run {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let bytes: String = lines.iter().map(Wire::line).collect();
            let (client_out, mut server_out) = tokio::io::duplex(bytes.len() + 1);
            let (client_in, _server_in) = tokio::io::duplex(64);
            let diag = Arc::new(Diagnostics::default());
            let mut t = StdioTransport::new(client_in, client_out, diag.clone());
            if let Some(id) = list {
                t.note_sent(&ClientJsonRpcMessage::request(
                    ClientRequest::ListToolsRequest(ListToolsRequest::default()),
                    NumberOrString::Number(id),
                ));
            }
            for &id in ids {
                t.note_sent(&ClientJsonRpcMessage::request(
                    ClientRequest::CallToolRequest(CallToolRequest::new(
                        CallToolRequestParams::new("echo"),
                    )),
                    NumberOrString::Number(id),
                ));
            }
            server_out.write_all(bytes.as_bytes()).await.unwrap();
            drop(server_out);
            let mut got = Vec::new();
            while let Some(msg) = t.receive().await {
                got.push(msg);
            }
            (got, t.calls_pending.len(), diag)
        })
    }

    /// The numeric id a response or an error answers, if any.
    fn answered(msg: &RxJsonRpcMessage<RoleClient>) -> Option<i64> {
        let id = match msg {
            JsonRpcMessage::Response(r) => &r.id,
            JsonRpcMessage::Error(e) => e.id.as_ref()?,
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => return None,
        };
        match id {
            NumberOrString::Number(n) => Some(*n),
            NumberOrString::String(_) => None,
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn every_awaited_call_gets_its_own_reply_once_and_decoys_answer_none(
            (ids, list, lines) in exchange(),
        ) {
            // CALL-3, CALL-4: whatever the order, each awaited
            // call is answered once, by its own reply (or, for a reply with
            // both result and error, by an unreadable-reply error); a reply
            // whose id is the string "3" answers no call 3; a server request
            // keeps its id, whatever number it reuses. The awaited
            // tools/list's page is stashed raw, its string twin is not.
            let (got, still_pending, diag) = run(&ids, list, &lines);
            prop_assert_eq!(got.len(), lines.len(), "one message per line: {:?}", got);
            prop_assert_eq!(still_pending, 0, "calls_pending ends empty");
            let mut answers: Vec<i64> = got.iter().filter_map(answered).collect();
            answers.sort_unstable();
            let mut expected = ids.clone();
            expected.extend(list);
            expected.sort_unstable();
            prop_assert_eq!(&answers, &expected, "each awaited request answered exactly once");

            for (wire, msg) in lines.iter().zip(&got) {
                let v = serde_json::to_value(msg).unwrap();
                let line = wire.line();
                let typed = serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&line);
                match wire {
                    Wire::Reply { id, text } => {
                        prop_assert_eq!(answered(msg), Some(*id), "{}", v);
                        prop_assert_eq!(&v["result"]["content"][0]["text"], &json!(text));
                        // The raw path's result is the typed parse's.
                        let typed = serde_json::to_value(typed.unwrap()).unwrap();
                        prop_assert_eq!(&v["result"]["content"], &typed["result"]["content"]);
                        prop_assert_eq!(&v["id"], &typed["id"]);
                    }
                    Wire::Both { id } => {
                        prop_assert!(typed.is_err(), "rmcp reads neither: {:?}", typed);
                        prop_assert!(matches!(msg, JsonRpcMessage::Error(_)), "{}", v);
                        prop_assert_eq!(answered(msg), Some(*id));
                        prop_assert_eq!(&v["error"]["code"], &json!(UNREADABLE_REPLY_CODE));
                    }
                    Wire::Page { id, tools } => {
                        prop_assert_eq!(answered(msg), Some(*id), "{}", v);
                        // rmcp gets the page with no tools; the fetch takes
                        // them raw, once.
                        let mut typed = serde_json::to_value(typed.unwrap()).unwrap();
                        typed["result"]["tools"] = json!([]);
                        prop_assert_eq!(&v["result"]["tools"], &json!([]));
                        prop_assert_eq!(&v["id"], &typed["id"]);
                        prop_assert_eq!(diag.take_tools_page(&id.to_string()), Some(tools.clone()));
                    }
                    Wire::StringPage { id, .. } => {
                        prop_assert_eq!(answered(msg), None, "{}", v);
                        let typed = serde_json::to_value(typed.unwrap()).unwrap();
                        prop_assert_eq!(&v, &typed);
                        prop_assert_eq!(diag.take_tools_page(&json!(id.to_string()).to_string()), None);
                    }
                    Wire::StringId { .. } | Wire::Request { .. } => {
                        // Read exactly as rmcp reads it, and never a call's answer.
                        prop_assert_eq!(answered(msg), None, "{}", v);
                        let typed = serde_json::to_value(typed.unwrap()).unwrap();
                        prop_assert_eq!(&v, &typed);
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn a_reply_with_two_id_keys_ends_the_call_of_the_first_as_unreadable_and_not_the_second()
    {
        // CALL-4: `{"id":1,"id":2,…}` is no message rmcp reads (nor the
        // fast path: a duplicate field); the transport's scan takes the
        // FIRST id, so call 1 ends
        // at once with the parser's reason, and call 2 is still awaited
        // (serde_json's Value would have kept the last).
        let (client_out, mut server_out) = tokio::io::duplex(1 << 16);
        let (client_in, _server_in) = tokio::io::duplex(64);
        let mut t = StdioTransport::new(client_in, client_out, Arc::new(Diagnostics::default()));
        for id in [1, 2] {
            t.note_sent(&ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                    "echo",
                ))),
                NumberOrString::Number(id),
            ));
        }
        let line =
            r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"content":[{"type":"text","text":"x"}]}}"#;
        server_out.write_all(line.as_bytes()).await.unwrap();
        server_out.write_all(b"\n").await.unwrap();
        drop(server_out);
        let msg = t.receive().await.unwrap();
        assert_eq!(
            serde_json::to_value(&msg).unwrap(),
            json!({"jsonrpc": "2.0", "id": 1, "error": {
                "code": UNREADABLE_REPLY_CODE,
                "message": "the server's reply cannot be read: unrecognized JSON-RPC message",
            }})
        );
        assert!(t.receive().await.is_none());
        assert_eq!(
            t.calls_pending,
            [NumberOrString::Number(2)].into_iter().collect()
        );
    }
}
