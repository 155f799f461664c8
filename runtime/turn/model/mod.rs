//! The model side of the tool loop (LOOP-5, LOOP-7): provider-neutral
//! conversation items, and the three wire codecs as pure functions — request
//! bodies, and stream decoders that reassemble text, thinking, usage and
//! tool calls from SSE events. No I/O here; `runtime::turn` sends and reads.

pub mod anthropic;
pub mod openai;
pub mod responses;

use serde::Serialize;
use serde_json::Value;

pub use crate::messages::provider::Provider;

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Public name (`mcp__server__tool`).
    pub name: String,
    /// Description (title, when there is no description).
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
    /// How it goes on the wire.
    pub offer: Offer,
}

/// How a tool is put on the wire (deferred loading, issue 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offer {
    /// A function the model sees in full.
    #[default]
    Eager,
    /// Sent with `defer_loading: true`: the model sees its definition only
    /// once a search names it (Anthropic; a Responses request sends none).
    Deferred,
    /// The search tool of the provider's own deferred loading: a
    /// client-executed `tool_search` (Responses), or a plain tool whose
    /// results are `tool_reference` blocks (Anthropic).
    NativeSearch,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRequest {
    /// The provider's call id (`call_…`, `toolu_…`).
    pub id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments, parsed; `Err` holds the raw text when it was not a
    /// JSON object (the model is told, the tool is not called).
    pub arguments: Result<Value, ArgumentsError>,
}

/// The answer the model gets for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultItem {
    /// The call's id.
    pub call_id: String,
    /// What the model sees (the projection, or the honest failure text).
    pub content: String,
    /// The call did not succeed.
    pub is_error: bool,
    /// The tools a search found, when the provider's own deferred loading
    /// is used: sent as its search result (Anthropic `tool_reference`
    /// blocks, a Responses `tool_search_output`) instead of `content`.
    pub found: Option<Vec<ToolSpec>>,
}

/// One entry of a turn's conversation, as both codecs render it.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// The user's prompt.
    User(String),
    /// An assistant round: its text, its tool calls, and (Anthropic) its
    /// content blocks exactly as received, thinking included, to echo back
    /// within the turn.
    Assistant {
        /// Text.
        text: String,
        /// Tool calls, in order.
        calls: Vec<ToolCallRequest>,
        /// The provider's own content, echoed unchanged (Anthropic).
        raw: Option<Value>,
    },
    /// The results of one round's calls (Anthropic: one user turn).
    ToolResults(Vec<ToolResultItem>),
}

/// Tokens, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt / input tokens.
    pub input_tokens: u64,
    /// Completion / output tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Add `other` to this.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// What a stream yields as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Assistant text.
    Text(String),
    /// Thinking / reasoning text.
    Thinking(String),
}

/// A finished round, reassembled from its stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Round {
    /// The assistant's text.
    pub text: String,
    /// The tool calls, in the order the model made them.
    pub calls: Vec<ToolCallRequest>,
    /// Tokens.
    pub usage: Usage,
    /// `finish_reason` / `stop_reason`.
    pub stop_reason: Option<String>,
    /// The provider's own assistant content (Anthropic blocks), to echo.
    pub raw: Option<Value>,
}

/// A stream decoder of either format.
#[derive(Debug)]
pub enum Decoder {
    /// OpenAI Chat Completions chunks.
    OpenAi(openai::Decoder),
    /// Anthropic Messages events.
    Anthropic(anthropic::Decoder),
    /// OpenAI Responses API events.
    Responses(responses::Decoder),
}

impl Decoder {
    /// A fresh decoder for `provider`.
    pub fn new(provider: Provider) -> Self {
        match provider {
            Provider::OpenAi => Self::OpenAi(openai::Decoder::default()),
            Provider::Anthropic => Self::Anthropic(anthropic::Decoder::default()),
            Provider::OpenAiResponses => Self::Responses(responses::Decoder::default()),
        }
    }

    /// One SSE event (its `event:` name, if any, and its `data:`): the
    /// deltas it carries, or the provider's error / why it is unreadable.
    pub fn feed(&mut self, event: Option<&str>, data: &str) -> Result<Vec<Delta>, StreamError> {
        match self {
            Self::OpenAi(d) => d.feed(data),
            Self::Anthropic(d) => d.feed(event, data),
            Self::Responses(d) => d.feed(event, data),
        }
    }

    /// True once the stream said it is complete (`[DONE]`, `message_stop`).
    pub fn is_done(&self) -> bool {
        match self {
            Self::OpenAi(d) => d.done,
            Self::Anthropic(d) => d.done,
            Self::Responses(d) => d.done,
        }
    }

    /// The round, once the stream ended. A stream that ended before it said
    /// it was complete is an error naming what was cut.
    pub fn finish(self) -> Result<Round, StreamError> {
        match self {
            Self::OpenAi(d) => d.finish(),
            Self::Anthropic(d) => d.finish(),
            Self::Responses(d) => d.finish(),
        }
    }
}

/// Why a model's stream did not give a round: the provider's own error,
/// an event that cannot be read, or a stream that ended too soon.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// A `data:` payload that is not JSON (`unit` is `chunk` for OpenAI,
    /// `event` for Anthropic); `data` is its start.
    #[error("an unreadable stream {unit} ({source}): {data}")]
    Unreadable {
        /// `chunk` or `event`.
        unit: &'static str,
        /// The JSON parser's reason.
        source: serde_json::Error,
        /// The payload, clipped.
        data: String,
    },
    /// A content block that starts as something other than an object
    /// (`kind` with its article: `a string`).
    #[error("an unreadable stream event: content block {index} is {kind}, not an object")]
    BlockNotAnObject {
        /// The block's index.
        index: u64,
        /// What it is instead.
        kind: String,
    },
    /// A delta for a block that never started.
    #[error("a delta for block {index}, which never started")]
    NeverStarted {
        /// The block's index.
        index: u64,
    },
    /// The endpoint sent an error event; its message.
    #[error("the model endpoint sent an error: {0}")]
    Endpoint(String),
    /// The stream ended before the provider said it was complete.
    #[error(
        "the model's stream was cut in the middle of {} ({})",
        if *in_call { "a tool call" } else { "the message" },
        match provider {
            Provider::OpenAi => "no finish_reason, no [DONE]",
            Provider::Anthropic => "no message_stop",
            Provider::OpenAiResponses => "no response.completed",
        }
    )]
    Cut {
        /// Whose stream.
        provider: Provider,
        /// A tool call had begun.
        in_call: bool,
    },
}

/// Streamed arguments that are not a JSON object: the raw text, kept to
/// echo to the model (the tool is not called).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the arguments were not a JSON object: {}", openai::clip(raw))]
pub struct ArgumentsError {
    /// The text the model wrote.
    pub raw: String,
}

/// Parse streamed arguments: empty is `{}`; anything but a JSON object is
/// an error carrying the raw text.
pub(crate) fn parse_arguments(raw: &str) -> Result<Value, ArgumentsError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(ArgumentsError {
            raw: raw.to_owned(),
        }),
    }
}
