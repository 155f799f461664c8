//! What one connection learned about its server's output: the stderr
//! tail (CONN-7), the non-JSON lines skipped (CONN-6), the transport's own
//! failure, the server's secret values (TRUST-2), the raw `tools/list`
//! pages, and what reached the wire (CALL-5). Shared by the transport, the
//! stderr reader, the reaper, the connection actor and the call path.

use std::sync::{Arc, Mutex};

use crate::messages::trust::{redact, redact_cut_start};

/// Size of the stderr tail kept per instance (CONN-7).
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

impl crate::messages::registry::LiveOutput for Diagnostics {
    fn stderr_tail(&self) -> String {
        Diagnostics::stderr_tail(self)
    }

    fn non_json_lines(&self) -> u64 {
        self.non_json().0
    }
}

/// What one connection learned about its server's output: shared between the
/// transport, the stderr reader, the reaper and the connection actor.
#[derive(Debug, Default)]
pub struct Diagnostics {
    inner: Mutex<DiagInner>,
    /// What became of each `tools/call` request on the wire, where the
    /// transport can tell (the HTTP client records it).
    pub(crate) deliveries: Arc<crate::messages::registry::Deliveries>,
    /// Which call each progress token of this connection belongs to.
    pub(crate) progress: Arc<crate::messages::registry::ProgressRoutes>,
}

#[derive(Debug, Default)]
struct DiagInner {
    stderr: Vec<u8>,
    non_json_lines: u64,
    first_non_json: Option<String>,
    fatal: Option<String>,
    /// The JSON-RPC ids of `tools/list` requests sent and not yet answered
    /// (the stdio transport sees both). Bounded.
    tools_pending: std::collections::VecDeque<String>,
    /// Raw `tools` arrays of `tools/list` replies, by the reply's JSON-RPC
    /// id: the catalog fetch that sent the request takes its page, with
    /// what rmcp's typed `Tool` would drop (`execution.taskSupport`,
    /// SYNC-7) and any malformed entry (for build_catalog to judge). The
    /// stdio transport parses the reply once for it and hands rmcp the page
    /// with an empty array (PERF-1); the HTTP client taps SSE replies.
    /// Bounded: pages nobody takes fall out.
    tools_pages: std::collections::VecDeque<(String, Vec<serde_json::Value>)>,
    /// Secret values of this connection: never shown (TRUST-2).
    redact: Vec<String>,
    /// Test-only break switch (`ChaosSwitches::no_redaction`): nothing is
    /// added to `redact`, whoever adds it.
    no_redaction: bool,
}

impl Diagnostics {
    fn lock(&self) -> std::sync::MutexGuard<'_, DiagInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append stderr bytes, keeping the last [`STDERR_TAIL_BYTES`].
    pub fn push_stderr(&self, bytes: &[u8]) {
        let mut d = self.lock();
        d.stderr.extend_from_slice(bytes);
        if d.stderr.len() > STDERR_TAIL_BYTES {
            let cut = d.stderr.len() - STDERR_TAIL_BYTES;
            d.stderr.drain(..cut);
        }
    }

    /// The stderr tail as text (lossy UTF-8, trimmed), secret values
    /// redacted, including a secret the ring cut in two at its start.
    pub fn stderr_tail(&self) -> String {
        let d = self.lock();
        redact_cut_start(String::from_utf8_lossy(&d.stderr).trim(), &d.redact)
    }

    /// This connection's secret values (for what the call path makes of
    /// the server's output).
    pub fn redactions(&self) -> Vec<String> {
        self.lock().redact.clone()
    }

    /// Secret values that must never be shown from this connection's output.
    pub fn add_redactions(&self, values: impl IntoIterator<Item = String>) {
        let mut d = self.lock();
        if !d.no_redaction {
            d.redact
                .extend(values.into_iter().filter(|v| !v.is_empty()));
        }
    }

    /// The chaos runner's `redaction` break switch: redact nothing.
    pub(crate) fn break_redaction(&self) {
        self.lock().no_redaction = true;
    }

    /// Count a non-JSON stdout line; keep the first one's start.
    pub fn note_non_json(&self, line: &[u8]) {
        let mut d = self.lock();
        d.non_json_lines += 1;
        if d.first_non_json.is_none() {
            // Redacted before it is cut, so the cut cannot split a secret.
            let whole = redact(&String::from_utf8_lossy(line), &d.redact);
            let end = crate::messages::budget::floor_char_boundary(&whole, 200);
            d.first_non_json = Some(whole[..end].trim().to_owned());
        }
    }

    /// Non-JSON lines so far, and the first one.
    pub fn non_json(&self) -> (u64, Option<String>) {
        let d = self.lock();
        (d.non_json_lines, d.first_non_json.clone())
    }

    /// Record why the transport failed on its own (e.g. an over-long line).
    pub fn set_fatal(&self, why: String) {
        let mut d = self.lock();
        if d.fatal.is_none() {
            d.fatal = Some(why);
        }
    }

    /// The transport's own failure, if any.
    pub fn fatal(&self) -> Option<String> {
        self.lock().fatal.clone()
    }

    /// A `tools/list` request with this id was sent.
    pub(super) fn tools_requested(&self, id: String) {
        let mut d = self.lock();
        if d.tools_pending.len() >= 64 {
            d.tools_pending.pop_front();
        }
        d.tools_pending.push_back(id);
    }

    /// Whether a `tools/list` reply is awaited (a cheap check per line).
    pub(super) fn tools_awaited(&self) -> bool {
        !self.lock().tools_pending.is_empty()
    }

    /// Whether `id` is an awaited `tools/list` reply's; it is not any more.
    pub(super) fn take_tools_pending(&self, id: &str) -> bool {
        let mut d = self.lock();
        match d.tools_pending.iter().position(|i| i == id) {
            Some(at) => {
                d.tools_pending.remove(at);
                true
            }
            None => false,
        }
    }

    /// Keep the raw `tools` of the reply with `id` for the catalog fetch.
    pub(super) fn stash_tools_page(&self, id: String, tools: Vec<serde_json::Value>) {
        let mut d = self.lock();
        if d.tools_pages.len() >= 64 {
            d.tools_pages.pop_front();
        }
        d.tools_pages.push_back((id, tools));
    }

    /// The raw `tools` of the `tools/list` reply with `id`, when the
    /// transport kept them (stdio); `None` otherwise (read rmcp's page).
    pub(crate) fn take_tools_page(&self, id: &str) -> Option<Vec<serde_json::Value>> {
        let mut d = self.lock();
        let at = d.tools_pages.iter().position(|(i, _)| i == id)?;
        d.tools_pages.remove(at).map(|(_, t)| t)
    }

    /// Keep the raw `tools` of `raw`, a JSON-RPC reply that has a
    /// `result.tools` array (the HTTP client's SSE tap).
    pub(crate) fn tap_tools_page(&self, raw: &[u8]) {
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(raw) else {
            return;
        };
        let Some(id) = v.get("id").map(serde_json::Value::to_string) else {
            return;
        };
        if let Some(serde_json::Value::Array(tools)) =
            v.pointer_mut("/result/tools").map(std::mem::take)
        {
            self.stash_tools_page(id, tools);
        }
    }

    /// A one-paragraph explanation for an error message: stderr tail and non-JSON hints.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let (count, first) = self.non_json();
        if let Some(first) = first {
            out.push_str(&format!(
                "; the server wrote {count} non-JSON line(s) on stdout (first: {first:?}), the likely cause"
            ));
        }
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            out.push_str(&format!("; stderr: {tail}"));
        }
        out
    }
}
