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
