//! One client over a byte stream (stdio): the framing in front of rmcp.
//!
//! A session-era client's `tools/call` is the gateway's hot path, so it is
//! served here: its line is decoded straight into the call's parameters
//! (not through rmcp's untagged message enum), handed to the same handler
//! rmcp would call ([`rmcp::Service::handle_request`], with its checks and
//! its era's result shape), and its reply written as one frame. Every other
//! line (the handshake, lists, reads, a stateless client's requests, the
//! client's answers to the gateway's own requests) goes to rmcp's server
//! loop unchanged, through an in-process pipe.
//!
//! ```text
//! client ─stdin─▶ read_lines ─┬─ tools/call (session era) ─▶ handler ─┐
//!                             └─ anything else ─▶ rmcp's loop ────────┤ frames, in order
//! client ◀─stdout─ write_frames ◀─────────────────────────────────────┘
//! ```
//!
//! Both sides write through one channel of whole frames, so a call's
//! progress (sent through rmcp's peer) is in the channel before its result,
//! and frames never interleave. A client's `notifications/cancelled` of a
//! call served here cancels it, and its reply is dropped, as rmcp does.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    JsonRpcVersion2_0, ProtocolVersion, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, PollSender};
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use super::{GatewayError, GatewaySession};

/// Frames queued for the client's output before a writer waits (a call's
/// reply, rmcp's loop): a client that stops reading stdout holds them there.
const FRAMES_QUEUED: usize = 256;
/// The client's output buffer: frames queued together go out in one write
/// when they fit; a larger frame goes out as it is, not copied.
const WRITE_BUFFER: usize = 64 * 1024;
/// How long calls still running when the client's input ends have to
/// finish (rmcp gives its own handlers as long).
const CALLS_AFTER_EOF: Duration = Duration::from_secs(5);
/// The longest line held whole for the fast path; a longer one streams to
/// rmcp as it comes, which applies its own cap (16 MiB) to it.
pub(super) const LINE_CAP: usize = 4 * 1024 * 1024;

/// A `tools/call` request line, decoded for the fast path. `jsonrpc` and
/// `method` are decoded only to check them: a line with another value is
/// not a call and goes to rmcp.
#[derive(serde::Deserialize)]
struct CallLine {
    #[allow(dead_code)]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[allow(dead_code)]
    method: CallToolRequestMethod,
    params: CallToolRequestParams,
}

/// A `notifications/cancelled` line.
#[derive(serde::Deserialize)]
struct CancelLine {
    params: CancelledNotificationParam,
}

/// Serve `session`'s client over `read`/`write` until its input ends (and
/// the calls it left have answered) or `stop` is cancelled.
pub(super) async fn serve<R, W>(
    session: GatewaySession,
    read: R,
    write: W,
    stop: CancellationToken,
) -> Result<(), GatewayError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (frames, queued) = mpsc::channel::<Vec<u8>>(FRAMES_QUEUED);
    let writer = AbortOnDropHandle::new(tokio::spawn(write_frames(write, queued)));
    let (to_rmcp, rmcp_in) = tokio::io::duplex(64 * 1024);
    let rmcp_out = FrameSink {
        pending: Vec::new(),
        frames: PollSender::new(frames.clone()),
    };
    let fast = Arc::new(FastCalls::default());
    // However this ends (dropped too), no call served here outlives it.
    let _calls_end = fast.all.clone().drop_guard();
    let mut reading = Box::pin(read_lines(
        read,
        to_rmcp,
        session.clone(),
        frames,
        fast.clone(),
    ));
    let rmcp_side = async {
        let running = rmcp::ServiceExt::serve(session.clone(), (rmcp_in, rmcp_out))
            .await
            .map_err(|e| GatewayError::Handshake(e.to_string()))?;
        let ct = running.cancellation_token();
        tokio::select! {
            r = running.waiting() => r.map(|_| ()).map_err(|e| GatewayError::Serve(e.to_string())),
            _ = stop.cancelled() => {
                ct.cancel();
                Ok(())
            }
        }
    };
    tokio::pin!(rmcp_side);
    // rmcp's loop ends when its input does (the reader's end of input is
    // its own), on an error, or when the gateway stops.
    let mut read_all = false;
    let served = loop {
        tokio::select! {
            r = &mut rmcp_side => break r,
            _ = &mut reading, if !read_all => read_all = true,
        }
    };
    // A reader still waiting for input (rmcp's loop ended first) is done.
    drop(reading);
    fast.finish(&stop).await;
    // Every sender is gone now (rmcp's transport with its loop, the
    // reader, the calls): the writer ends once it wrote what is queued.
    tokio::select! {
        _ = writer => {}
        _ = stop.cancelled() => {}
    }
    served
}

/// The calls served on the fast path, for the client's cancellations and
/// for the end of its input.
#[derive(Default)]
struct FastCalls {
    /// Set once the session is up, when its client speaks the session era.
    peer: OnceLock<Peer<RoleServer>>,
    /// Each call still running, by its request id.
    running: Mutex<HashMap<RequestId, CancellationToken>>,
    /// Cancels them all.
    all: CancellationToken,
    /// When the client's input ended.
    eof: OnceLock<tokio::time::Instant>,
    tasks: TaskTracker,
}

impl FastCalls {
    /// Serve `call` in a task of its own.
    fn start(
        self: &Arc<Self>,
        call: CallLine,
        session: &GatewaySession,
        peer: &Peer<RoleServer>,
        frames: &mpsc::Sender<Vec<u8>>,
    ) {
        tracing::debug!(id = %call.id, "tools/call on the gateway's own framing");
        let ct = self.all.child_token();
        if let Ok(mut running) = self.running.lock() {
            running.insert(call.id.clone(), ct.clone());
        }
        let (this, session, peer, frames) =
            (self.clone(), session.clone(), peer.clone(), frames.clone());
        self.tasks.spawn(async move {
            let (id, mut params) = (call.id, call.params);
            // rmcp keeps a request's `_meta` beside its params, not in them.
            let meta = params.meta.take().unwrap_or_default();
            let request: ClientRequest = rmcp::model::CallToolRequest::new(params).into();
            let mut ctx = RequestContext::new(id.clone(), peer);
            ctx.ct = ct;
            ctx.meta = meta;
            let result = rmcp::Service::handle_request(&session, request, ctx).await;
            // A call its client cancelled gets no reply.
            let wanted = this
                .running
                .lock()
                .map(|mut running| running.remove(&id).is_some())
                .unwrap_or(true);
            if !wanted {
                return;
            }
            let message = match result {
                Ok(result) => ServerJsonRpcMessage::response(result, id),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
            };
            match serde_json::to_vec(&message) {
                Ok(mut frame) => {
                    frame.push(b'\n');
                    // A client that stopped reading does not hold a call
                    // past the end of the session.
                    tokio::select! {
                        biased;
                        _ = frames.send(frame) => {}
                        _ = this.all.cancelled() => {}
                    }
                }
                Err(e) => tracing::warn!("gateway: a call's reply could not be written: {e}"),
            }
        });
    }

    /// The client cancelled the call `line` names, if it is served here.
    fn cancel(&self, line: &[u8]) {
        let Ok(CancelLine { params }) = serde_json::from_slice::<CancelLine>(line) else {
            return;
        };
        let Some(id) = params.request_id else { return };
        if let Some(ct) = self
            .running
            .lock()
            .ok()
            .and_then(|mut running| running.remove(&id))
        {
            ct.cancel();
        }
    }

    /// The client's input ended (or the gateway stops): the calls left
    /// have [`CALLS_AFTER_EOF`] from the end of input to answer, then are
    /// cancelled.
    async fn finish(&self, stop: &CancellationToken) {
        self.tasks.close();
        let ended = self
            .eof
            .get()
            .copied()
            .unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            _ = tokio::time::sleep_until(ended + CALLS_AFTER_EOF) => {}
            _ = self.tasks.wait() => {}
            _ = stop.cancelled() => {}
        }
        self.all.cancel();
        self.tasks.wait().await;
    }
}

/// The client's lines: a session-era `tools/call` to the fast path, the
/// rest to rmcp (`to_rmcp`), until the client's input ends.
async fn read_lines<R: AsyncRead + Unpin>(
    read: R,
    mut to_rmcp: tokio::io::DuplexStream,
    session: GatewaySession,
    frames: mpsc::Sender<Vec<u8>>,
    fast: Arc<FastCalls>,
) {
    let mut read = tokio::io::BufReader::with_capacity(64 * 1024, read);
    let mut line = Vec::new();
    while let Some(whole) = next_line(&mut read, &mut line, &mut to_rmcp).await {
        if fast.peer.get().is_none()
            && let Some(peer) = session_era_peer(&session)
        {
            let _ = fast.peer.set(peer);
        }
        if whole && let Some(peer) = fast.peer.get() {
            if let Some(call) = call_line(&line) {
                fast.start(call, &session, peer, &frames);
                continue;
            }
            if memchr::memmem::find(&line, b"cancelled").is_some() {
                fast.cancel(&line);
            }
        }
        if to_rmcp.write_all(&line).await.is_err() {
            break;
        }
    }
    let _ = fast.eof.set(tokio::time::Instant::now());
    // The client's end of input ends its listen streams at once (rmcp
    // would wait for handlers still running before it cancels them).
    session.input_closed.cancel();
}

/// The session's client, once its `initialize` in the session era is done
/// (the handler registered it): only such a client's calls take the fast
/// path; a 2026-07-28 client's requests each carry their own era, which
/// rmcp reads.
fn session_era_peer(session: &GatewaySession) -> Option<Peer<RoleServer>> {
    let peer = session
        .shared
        .clients
        .lock()
        .ok()?
        .get(&session.id)
        .cloned()?;
    let era = peer.peer_info()?.protocol_version.clone();
    (era.as_str() < ProtocolVersion::V_2026_07_28.as_str()).then_some(peer)
}

/// The client's next line into `line`: `Some(true)` a whole line (with its
/// newline) held there; `Some(false)` one to pass to rmcp as it is (the
/// last, unterminated, in `line`; or one over [`LINE_CAP`], already
/// streamed to `to_rmcp`, `line` empty); `None` at the end of input (or a
/// read or rmcp failing).
pub(super) async fn next_line<R: AsyncRead + Unpin>(
    read: &mut tokio::io::BufReader<R>,
    line: &mut Vec<u8>,
    to_rmcp: &mut tokio::io::DuplexStream,
) -> Option<bool> {
    line.clear();
    let mut streamed = false;
    loop {
        let available = read.fill_buf().await.ok()?;
        if available.is_empty() {
            return (!line.is_empty() || streamed).then_some(false);
        }
        let newline = memchr::memchr(b'\n', available);
        let take = newline.map_or(available.len(), |at| at + 1);
        if !streamed && line.len() + take > LINE_CAP {
            to_rmcp.write_all(line).await.ok()?;
            line.clear();
            streamed = true;
        }
        if streamed {
            to_rmcp.write_all(&available[..take]).await.ok()?;
        } else {
            line.extend_from_slice(&available[..take]);
        }
        read.consume(take);
        if newline.is_some() {
            return Some(!streamed);
        }
    }
}

/// `line` as a session-era `tools/call` request, when it is one that
/// decodes; anything else (another message, a call rmcp must refuse, a
/// call that names its own protocol version in `_meta`) is rmcp's.
fn call_line(line: &[u8]) -> Option<CallLine> {
    memchr::memmem::find(line, b"\"tools/call\"")?;
    let call: CallLine = serde_json::from_slice(line).ok()?;
    let own_era = call
        .params
        .meta
        .as_ref()
        .is_some_and(|meta| meta.protocol_version().is_some());
    (!own_era).then_some(call)
}

/// Write frames to the client as they come, flushed once no more are
/// queued, until every sender is gone or the client's output fails.
async fn write_frames<W: AsyncWrite + Unpin>(write: W, mut queued: mpsc::Receiver<Vec<u8>>) {
    let mut write = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, write);
    while let Some(frame) = queued.recv().await {
        if write.write_all(&frame).await.is_err() {
            return;
        }
        if queued.is_empty() && write.flush().await.is_err() {
            return;
        }
    }
    let _ = write.flush().await;
}

/// rmcp's output: the bytes it writes, cut into whole lines, each a frame
/// for [`write_frames`]. A frame is queued by the time rmcp's flush returns.
struct FrameSink {
    pending: Vec<u8>,
    frames: PollSender<Vec<u8>>,
}

impl FrameSink {
    /// Queue every whole line of `pending`.
    fn poll_queue(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some(end) = memchr::memchr(b'\n', &self.pending) {
            ready!(self.frames.poll_reserve(cx)).map_err(|_| gone())?;
            let frame = if end + 1 == self.pending.len() {
                std::mem::take(&mut self.pending)
            } else {
                let rest = self.pending.split_off(end + 1);
                std::mem::replace(&mut self.pending, rest)
            };
            self.frames.send_item(frame).map_err(|_| gone())?;
        }
        Poll::Ready(Ok(()))
    }
}

fn gone() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the client's output is closed",
    )
}

impl AsyncWrite for FrameSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.poll_queue(cx))?;
        self.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_queue(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_queue(cx))?;
        if !self.pending.is_empty() {
            ready!(self.frames.poll_reserve(cx)).map_err(|_| gone())?;
            let rest = std::mem::take(&mut self.pending);
            self.frames.send_item(rest).map_err(|_| gone())?;
        }
        self.frames.close();
        Poll::Ready(Ok(()))
    }
}
