//! Tool definitions (SYNC-8), call options, outcomes (CALL-4) and the policy seam (CALL-1).

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::config::Scope;
use super::images::AdmittedImage;
use super::projection::ProjectionPart;

/// One tool of one catalog generation (SYNC-8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// The public name the model sees (SYNC-1).
    pub name: String,
    /// The scope it is registered in.
    pub scope: Scope,
    /// `server_name`.
    pub server: String,
    /// The name on the wire.
    pub raw_name: String,
    /// Catalog generation this definition belongs to.
    pub generation: u64,
    /// Display title (`title`, else `annotations.title`).
    pub title: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Input schema (`{"type":"object"}` when the server sent none).
    pub input_schema: Arc<Map<String, Value>>,
    /// Output schema, when inside the supported subset (SYNC-7).
    pub output_schema: Option<Arc<Map<String, Value>>>,
    /// Annotations as sent.
    pub annotations: Option<Value>,
    /// `execution.taskSupport == "required"`: listed, but every call is refused.
    pub task_support_required: bool,
}

/// The outcome of a call (CALL-4). `Ok` is the only success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The tool succeeded.
    Ok,
    /// The trust gate refused the call (TRUST-4).
    RefusedByTrust,
    /// A pre-tool hook denied the call (HOOK-6).
    DeniedByHook,
    /// No tool of that name in the scope.
    UnknownTool,
    /// The caller expected a catalog generation that is no longer current.
    StaleGeneration,
    /// The server is not connected.
    ServerNotReady,
    /// The tool requires task-based execution, which is not implemented (SYNC-7).
    TaskSupportRequired,
    /// Arguments were not a JSON object (CALL-2).
    InvalidArguments,
    /// `tool_call_timeout_ms` elapsed; the server was sent `notifications/cancelled`.
    Timeout,
    /// The caller cancelled; the server was sent `notifications/cancelled`.
    Cancelled,
    /// The connection was lost while the call was in flight: side effects unknown (CALL-5).
    TransportLostDuringCall,
    /// The tool returned `isError: true`.
    ServerError,
    /// The result is not a valid `CallToolResult` (JSON-RPC errors are `ServerError`).
    InvalidResult,
    /// `structuredContent` missing or violating the tool's output schema (CALL-3).
    OutputSchemaViolation,
}

impl OutcomeKind {
    /// snake_case name, as in `--json` output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::RefusedByTrust => "refused_by_trust",
            Self::DeniedByHook => "denied_by_hook",
            Self::UnknownTool => "unknown_tool",
            Self::StaleGeneration => "stale_generation",
            Self::ServerNotReady => "server_not_ready",
            Self::TaskSupportRequired => "task_support_required",
            Self::InvalidArguments => "invalid_arguments",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::TransportLostDuringCall => "transport_lost_during_call",
            Self::ServerError => "server_error",
            Self::InvalidResult => "invalid_result",
            Self::OutputSchemaViolation => "output_schema_violation",
        }
    }
}

impl OutcomeKind {
    /// The kind of this snake_case name (the inverse of [`OutcomeKind::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_KINDS.iter().copied().find(|k| k.name() == name)
    }

    /// What an outcome of this kind says of the call's side effects when
    /// nothing more specific is known (SEAT-11, CALL-5): a call stopped
    /// before it was sent did nothing; one lost, timed out or cancelled
    /// after it was sent, or answered with an error, may have; one whose
    /// result came back ran to its end.
    pub fn side_effects(self) -> SideEffects {
        match self {
            Self::RefusedByTrust
            | Self::DeniedByHook
            | Self::UnknownTool
            | Self::StaleGeneration
            | Self::ServerNotReady
            | Self::TaskSupportRequired
            | Self::InvalidArguments => SideEffects::None,
            Self::Timeout | Self::Cancelled | Self::TransportLostDuringCall | Self::ServerError => {
                SideEffects::Unknown
            }
            Self::Ok | Self::InvalidResult | Self::OutputSchemaViolation => SideEffects::Applied,
        }
    }
}

const ALL_KINDS: [OutcomeKind; 14] = [
    OutcomeKind::Ok,
    OutcomeKind::RefusedByTrust,
    OutcomeKind::DeniedByHook,
    OutcomeKind::UnknownTool,
    OutcomeKind::StaleGeneration,
    OutcomeKind::ServerNotReady,
    OutcomeKind::TaskSupportRequired,
    OutcomeKind::InvalidArguments,
    OutcomeKind::Timeout,
    OutcomeKind::Cancelled,
    OutcomeKind::TransportLostDuringCall,
    OutcomeKind::ServerError,
    OutcomeKind::InvalidResult,
    OutcomeKind::OutputSchemaViolation,
];

/// Whether a call's side effects took place (SEAT-11, CALL-5): what a host
/// may assume before it retries a call or reconciles its effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SideEffects {
    /// The tool did not act: the call was stopped before it was sent, or
    /// the tool says it refused before doing anything.
    None,
    /// It may or may not have taken effect (a timeout, a cancellation or a
    /// lost transport after sending; an error the tool reported).
    Unknown,
    /// The tool ran to its end: its result came back (valid or not).
    Applied,
}

impl SideEffects {
    /// snake_case name, as in `--json` output and the `_meta` key.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Unknown => "unknown",
            Self::Applied => "applied",
        }
    }

    /// The value of this name.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::None, Self::Unknown, Self::Applied]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// The `_meta` key under which a tool's error result states its side
/// effects (`"none"`, `"unknown"`, `"applied"`); any server may set it.
pub const SIDE_EFFECTS_META: &str = "io.mcpvisor/sideEffects";

/// The `_meta` key under which an in-process server (a native provider,
/// an embedder's own) names the CALL-4 kind of its error result: one of
/// `invalid_arguments`, `timeout`, `cancelled`,
/// `transport_lost_during_call`, `server_error`. Ignored from any other
/// server, and on a result that is not an error.
pub const OUTCOME_META: &str = "io.mcpvisor/outcome";

/// The result of `Runtime::call`: exactly one per call (CALL-4, CALL-6).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// What happened.
    pub kind: OutcomeKind,
    /// Whether the call's side effects took place (SEAT-11).
    pub side_effects: SideEffects,
    /// The failure detail, for every kind but `Ok`.
    pub error: Option<String>,
    /// What the model sees as text: the projection of the result (admitted
    /// images as marker lines), or the failure text.
    pub projection: String,
    /// What the model sees, in order: text parts and admitted images (CALL-7).
    pub parts: Vec<ProjectionPart>,
    /// The admitted images (also in `parts`, in their positions).
    pub images: Vec<AdmittedImage>,
    /// Projection bytes cut by the per-result budget (CALL-8).
    pub cut_bytes: usize,
    /// The `CallToolResult` as received, full fidelity, when there was one.
    pub canonical: Option<Value>,
    /// The server that handled (or would have handled) the call.
    pub server: Option<String>,
    /// The raw tool name on the wire.
    pub raw_name: Option<String>,
    /// The catalog generation the call resolved against.
    pub generation: Option<u64>,
    /// For the user, never the model: hook warnings and hook errors (HOOK-5, HOOK-9).
    pub notes: Vec<String>,
    /// A policy asked to end the turn (a hook's `continue: false`), with its reason.
    pub stop: Option<String>,
    /// What policies did to the model's text, in order (already applied to
    /// `projection` and `parts`): a gateway replays them on the full result.
    pub model_edits: Vec<ModelEdit>,
    /// The server answered the call with a JSON-RPC error (`server_error`):
    /// its code, message (secrets redacted) and data, for a gateway that
    /// passes a protocol error on as one.
    pub rpc_error: Option<RpcErrorReply>,
    /// The `_meta` of the server's result, kept out of `canonical` and of
    /// what the model sees (CALL-3; secrets redacted): a gateway passes it
    /// on to its client unchanged (ERA-7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_meta: Option<serde_json::Map<String, Value>>,
}

/// A JSON-RPC error a server answered a call with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcErrorReply {
    /// The error code (`-32021`: a client capability the server requires
    /// is missing).
    pub code: i32,
    /// Its message.
    pub message: String,
    /// Its data, when it had some.
    pub data: Option<Value>,
}

/// A policy's change to what the model sees of a result (hook context, a
/// Codex post-tool block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelEdit {
    /// Text appended after the result.
    Append(String),
    /// The model sees this text instead of the result (the side effect happened).
    Replace(String),
}

impl ToolOutcome {
    /// True for `OutcomeKind::Ok`.
    pub fn is_ok(&self) -> bool {
        self.kind == OutcomeKind::Ok
    }

    /// A failure without a result.
    pub fn failure(kind: OutcomeKind, error: impl Into<String>) -> Self {
        let error = error.into();
        let projection = format!("Tool call failed ({}): {error}", kind.name());
        Self {
            kind,
            side_effects: kind.side_effects(),
            parts: vec![ProjectionPart::Text {
                text: projection.clone(),
            }],
            projection,
            images: Vec::new(),
            cut_bytes: 0,
            error: Some(error),
            canonical: None,
            server: None,
            raw_name: None,
            generation: None,
            notes: Vec::new(),
            stop: None,
            model_edits: Vec::new(),
            rpc_error: None,
            result_meta: None,
        }
    }

    /// The call was never sent: it had no side effects.
    pub(crate) fn not_sent(mut self) -> Self {
        self.side_effects = SideEffects::None;
        self
    }

    /// Add text the model sees after the result (hook context and feedback).
    pub fn append_model_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.model_edits.push(ModelEdit::Append(text.to_owned()));
        if !self.projection.is_empty() {
            self.projection.push('\n');
        }
        self.projection.push_str(text);
        self.parts.push(ProjectionPart::Text {
            text: text.to_owned(),
        });
    }

    /// Replace what the model sees of the result (Codex's post-tool block).
    /// The canonical value is kept: the side effect happened.
    pub fn replace_model_text(&mut self, text: &str) {
        self.model_edits.push(ModelEdit::Replace(text.to_owned()));
        self.projection = text.to_owned();
        self.parts = vec![ProjectionPart::Text {
            text: text.to_owned(),
        }];
        self.images.clear();
    }

    /// Apply what the policies noted before the call.
    pub(crate) fn annotate(&mut self, notes: Annotations) {
        for c in &notes.context {
            self.append_model_text(c);
        }
        self.notes.extend(notes.notes);
        if self.stop.is_none() {
            self.stop = notes.stop;
        }
    }

    pub(crate) fn for_tool(mut self, def: &ToolDefinition) -> Self {
        self.server = Some(def.server.clone());
        self.raw_name = Some(def.raw_name.clone());
        self.generation = Some(def.generation);
        self
    }
}

/// Where a call's progress goes ([`CallOptions::progress`]): a channel the
/// caller reads, which it can point elsewhere while the call runs (a
/// stateless client's retry takes over the call's progress) or nowhere.
#[derive(Debug, Clone, Default)]
pub struct ProgressSink(
    Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<super::registry::ProgressNote>>>>,
);

impl ProgressSink {
    /// A sink pointed at `to`.
    pub fn new(to: tokio::sync::mpsc::UnboundedSender<super::registry::ProgressNote>) -> Self {
        Self(Arc::new(Mutex::new(Some(to))))
    }

    /// From now on the notes go to `to`; None: nowhere (the receiver
    /// before ends once it took what came to it).
    pub fn to(
        &self,
        to: Option<tokio::sync::mpsc::UnboundedSender<super::registry::ProgressNote>>,
    ) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }

    /// Pass `note` on (dropped while the sink points nowhere).
    pub fn send(&self, note: super::registry::ProgressNote) {
        if let Some(to) = &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = to.send(note);
        }
    }
}

/// Per-call options (CALL-2).
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Cancel the call; the server is sent `notifications/cancelled`.
    pub cancel: Option<CancellationToken>,
    /// Refuse with `StaleGeneration` unless the tool's catalog generation is this one.
    pub expected_generation: Option<u64>,
    /// The chat the call belongs to (for policies such as per-chat grants).
    pub chat: Option<String>,
    /// The route (the model the result goes to) declares image capability:
    /// admissible images are saved and projected as images (CALL-7).
    pub images: bool,
    /// The call was made by the `callTool` host API of the JS mod at this
    /// load index: its `tool.call` event is seen only by the mods loaded
    /// before it (MOD-5). The mod host sets it.
    pub mod_origin: Option<usize>,
    /// Sent the call's id as soon as it has one, so that the caller can
    /// follow the call's events among others' (its progress alone comes
    /// more cheaply through `progress`).
    pub id_to: Option<tokio::sync::mpsc::UnboundedSender<u64>>,
    /// Where the server's progress on the call goes as it comes, besides
    /// the call's `CallProgress` events: a caller that forwards progress
    /// (the gateway, to its client's token) follows its own call without
    /// reading every event of the runtime.
    pub progress: Option<ProgressSink>,
    /// The client the call is made for, when a server's requests during
    /// the call should go to it (the gateway's client, GW-2); the
    /// embedder's handlers answer them otherwise.
    pub relay: Option<std::sync::Arc<dyn super::capabilities::CallerRelay>>,
    /// The call's place among the calls of one model round, run together
    /// (`RoundGate`): its policy chain waits for the earlier calls', and it
    /// is sent once every chain of the round ran, within the round's
    /// bound on calls in flight.
    pub round: Option<super::round::RoundSlot>,
    /// The W3C trace the call continues (a `traceparent` that came with
    /// it): the call is a span of that trace, and its server is sent a
    /// `traceparent` naming that span (with the `tracestate`) in `_meta`.
    pub trace: Option<super::trace::TraceContext>,
}

/// What a policy sees of a call.
#[derive(Debug, Clone)]
pub struct PolicyCall {
    /// The scope.
    pub scope: Scope,
    /// The resolved tool.
    pub tool: Arc<ToolDefinition>,
    /// The arguments that will be sent (after normalisation).
    pub arguments: Map<String, Value>,
    /// The chat, when given.
    pub chat: Option<String>,
    /// The server's configured trust mode (TRUST-4).
    pub trust: super::trust::TrustMode,
    /// Per-runtime call id (as in `CallStarted`).
    pub call_id: u64,
    /// The call's cancellation, for policies that wait (hooks).
    pub cancel: CancellationToken,
    /// [`CallOptions::mod_origin`].
    pub mod_origin: Option<usize>,
    /// What policies add on the way: context for the model, notes for the
    /// user, a stop request. Applied to the outcome, whatever it is.
    pub annotations: Arc<Mutex<Annotations>>,
}

impl PolicyCall {
    /// Add to the call's annotations.
    pub fn annotate(&self, f: impl FnOnce(&mut Annotations)) {
        if let Ok(mut a) = self.annotations.lock() {
            f(&mut a);
        }
    }
}

/// What policies note about a call before it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotations {
    /// Text for the model, appended after the result.
    pub context: Vec<String>,
    /// Text for the user only.
    pub notes: Vec<String>,
    /// End the turn after this call, with this reason.
    pub stop: Option<String>,
}

/// A policy's decision before the call.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyVerdict {
    /// Go on.
    Proceed,
    /// Go on with these arguments instead.
    ProceedWith(Map<String, Value>),
    /// Stop: the outcome kind (`RefusedByTrust` or `DeniedByHook`) and the reason.
    Deny {
        /// Which refusal this is.
        kind: OutcomeKind,
        /// Shown to the model.
        reason: String,
    },
}

/// A link of the policy chain every call passes through (CALL-1): trust and hooks
/// plug in here. Policies run in the caller's task, in the order installed:
/// `before` in order, then the call, then `after` in order.
pub trait CallPolicy: Send + Sync + 'static {
    /// Decide before the call reaches the server.
    fn before<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, PolicyVerdict>;
    /// Observe or amend the outcome after the call.
    fn after<'a>(
        &'a self,
        call: &'a PolicyCall,
        outcome: &'a mut ToolOutcome,
    ) -> BoxFuture<'a, ()> {
        let _ = (call, outcome);
        Box::pin(async {})
    }
}
