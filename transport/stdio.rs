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

mod scan;
mod spawn;

pub(crate) use scan::request_id_key;
use scan::*;
pub use scan::{UNREADABLE_REPLY_CODE, UNREADABLE_REPLY_PREFIX};
pub use spawn::*;

// ===== The transport =====

/// The server's stdout, as the transport reads it.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The server's stdin, as the transport writes it.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// How long one write to the server's stdin may stay blocked (a server that
/// stopped reading with more than a pipe's worth queued). Past it the
/// transport is dead: it ends, and the reconnect policy takes over (CONN-14).
pub const WRITE_STALL_DEADLINE: Duration = Duration::from_secs(10);

/// A request of which not one byte reached the server's stdin (its read end
/// was closed, or the transport's writer was gone): nothing of it ran
/// (CALL-5). Carried inside the `io::Error` the send fails with, and read
/// back by [`crate::transport::client::nothing_written`].
#[derive(Debug)]
pub(crate) struct NothingWritten;

/// [`NothingWritten`]'s words.
pub(crate) const NOTHING_WRITTEN: &str =
    "the server's stdin is closed: nothing of the request was written";

impl std::fmt::Display for NothingWritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(NOTHING_WRITTEN)
    }
}

impl std::error::Error for NothingWritten {}

fn nothing_written() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, NothingWritten)
}

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
                    return Err(nothing_written());
                };
                // CALL-5: a message of which no byte was written (the pipe
                // has no reader: the server closed its stdin or is gone)
                // never ran, and says so.
                let mut at = 0;
                while at < bytes.len() {
                    match stdin.write(&bytes[at..]).await {
                        Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                        Ok(n) => at += n,
                        Err(e) if at == 0 && e.kind() == std::io::ErrorKind::BrokenPipe => {
                            return Err(nothing_written());
                        }
                        Err(e) => return Err(e),
                    }
                }
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

/// Entry points of the fuzz targets (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod props;

#[cfg(test)]
mod call_reply_props;
