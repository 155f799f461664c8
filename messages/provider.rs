//! The wire format a model endpoint speaks: a word of the configuration
//! (`[model] provider`) and of the tool loop's codecs (`runtime::turn`).

use serde::Serialize;

/// The wire format a model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible Chat Completions (`{endpoint}/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`{endpoint}/v1/messages`).
    Anthropic,
    /// The OpenAI Responses API (`{endpoint}/responses`).
    OpenAiResponses,
}

impl Provider {
    /// `openai`, `anthropic` or `openai-responses`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            "openai-responses" => Some(Self::OpenAiResponses),
            _ => None,
        }
    }
}

/// Which search a turn that defers its tools uses. Either way the search
/// itself runs in the tool loop (BM25); what differs is how its answer
/// reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolSearch {
    /// The provider's own deferred loading on the vendor's own API
    /// (`api.openai.com` for the Responses API, `api.anthropic.com`), the
    /// local search tool elsewhere. When the first request is refused
    /// (HTTP 400: a model without tool search), the turn goes on with the
    /// local search tool.
    #[default]
    Auto,
    /// The provider's own deferred loading: a client-executed `tool_search`
    /// whose answers are `tool_search_output` items (Responses API), or
    /// every tool sent with `defer_loading: true` and the search's answers
    /// as `tool_reference` blocks (Anthropic). Chat Completions has none:
    /// the local search tool is used.
    Native,
    /// The local search tool, a plain function whose answer is the found
    /// tools' definitions as text; they are offered from the next round on.
    Local,
}

impl ToolSearch {
    /// `auto`, `native` or `local`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "auto" => Some(Self::Auto),
            "native" => Some(Self::Native),
            "local" => Some(Self::Local),
            _ => None,
        }
    }
}
