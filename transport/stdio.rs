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
mod tests;

#[cfg(test)]
mod props;

#[cfg(test)]
mod call_reply_props;
