//! The tool loop (LOOP-1..4, LOOP-6, LOOP-7, TRUST-6, TRUST-7): one user
//! turn against a model endpoint, with the scope's tools (or, over a
//! threshold, a search tool that finds them). Each round streams the
//! model's text, thinking and usage out as [`TurnEvent`]s and collects its
//! tool calls; the round's calls go through [`Runtime::call`] (trust →
//! hooks → call → result checks) together — the policy chains one at a
//! time in the model's order, then bounded in flight — and their outcomes
//! — refusals and failures included, as honest text — go back to the
//! model in the model's order. Like a call,
//! a turn runs in the caller's task (ADR 0002, ADR 0008): its cancellation
//! is the caller's token, and nothing of it outlives the call to `turn`.

mod client;
pub(crate) mod model;
#[cfg(feature = "mods")]
mod mods;
pub(crate) mod search;

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::messages::budget::TurnBudget;
use crate::messages::call::{CallOptions, OutcomeKind};
use crate::messages::config::Scope;
use crate::messages::trust::validate_endpoint;
use model::{
    Decoder, Delta, Item, Offer, Provider, Round, ToolResultItem, ToolSpec, Usage, anthropic,
    openai, responses,
};

use super::Runtime;
#[cfg(feature = "mods")]
use mods::*;

/// Where a turn's model is, and how to talk to it (LOOP-7).
#[derive(Debug, Clone)]
pub struct ModelRoute {
    /// The wire format.
    pub provider: Provider,
    /// The base URL as the vendor's SDK takes it: OpenAI-compatible
    /// requests go to `{endpoint}/chat/completions` (it usually ends in
    /// `/v1`), Responses ones to `{endpoint}/responses`, Anthropic ones to
    /// `{endpoint}/v1/messages`. HTTPS, or HTTP on loopback only (TRUST-3).
    pub endpoint: String,
    /// The model name.
    pub model: String,
    /// The secret holding the API key (TRUST-2): looked up in the
    /// runtime's secret store (by default, the environment variable of
    /// that name). `None`: no key is sent.
    pub key_secret: Option<String>,
    /// Whether the route supports tool calling (TRUST-7): without it the
    /// model is offered no tools and answers normally.
    pub supports_tools: bool,
    /// `max_tokens` of each Anthropic request.
    pub max_tokens: u32,
    /// How long a response may be silent (headers, or between stream
    /// chunks) before the round fails.
    pub idle_timeout: Duration,
    /// Responses API: ask for the reasoning items' encrypted content
    /// (`include: ["reasoning.encrypted_content"]`), so that a reasoning
    /// model's reasoning goes back to it with its calls' results. Only
    /// reasoning models accept it (others answer 400); off by default.
    pub encrypted_reasoning: bool,
    /// Which search a turn that defers its tools uses (issue 36).
    pub tool_search: ToolSearch,
}

pub use crate::messages::provider::ToolSearch;

impl ModelRoute {
    /// Whether a turn that defers its tools uses the provider's own
    /// deferred loading on this route ([`ToolSearch`]).
    pub fn native_search(&self) -> bool {
        let vendor = match self.provider {
            Provider::OpenAi => return false,
            Provider::OpenAiResponses => "api.openai.com",
            Provider::Anthropic => "api.anthropic.com",
        };
        match self.tool_search {
            ToolSearch::Local => false,
            ToolSearch::Native => true,
            ToolSearch::Auto => reqwest::Url::parse(&self.endpoint)
                .ok()
                .is_some_and(|u| u.host_str() == Some(vendor)),
        }
    }

    /// Whether a request that offered the provider's own tool search and
    /// was answered with HTTP `status` and `message` goes again with the
    /// local search: only under [`ToolSearch::Auto`], only for a 400 whose
    /// message names the feature (a model without tool search; another
    /// 400 would fail the same way again), and only while no native search
    /// answer is in the conversation (`answered`).
    fn search_refused(&self, status: u16, message: &str, answered: bool) -> bool {
        let m = message.to_ascii_lowercase();
        let names_it = [
            "tool_search",
            "tool search",
            "defer_loading",
            "tool_reference",
        ]
        .iter()
        .any(|w| m.contains(w));
        self.tool_search == ToolSearch::Auto && status == 400 && names_it && !answered
    }

    /// A route with the defaults: tools supported, 4096 max tokens, 60 s idle.
    pub fn new(provider: Provider, endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider,
            endpoint: endpoint.into(),
            model: model.into(),
            key_secret: None,
            supports_tools: true,
            max_tokens: 4096,
            idle_timeout: Duration::from_secs(60),
            encrypted_reasoning: false,
            tool_search: ToolSearch::Auto,
        }
    }
}

/// The default `max_rounds` (LOOP-2).
pub const DEFAULT_MAX_ROUNDS: u32 = 10;

/// One user turn.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// The scope whose tools are offered.
    pub scope: Scope,
    /// The model.
    pub route: ModelRoute,
    /// The user's prompt. `@handle rest` offers only server `handle`'s
    /// tools and sends `rest` (LOOP-6).
    pub prompt: String,
    /// A system prompt, if any.
    pub system: Option<String>,
    /// At most this many model rounds (LOOP-2).
    pub max_rounds: u32,
    /// The chat the turn belongs to (per-chat trust grants).
    pub chat: Option<String>,
    /// Cancels the turn: the stream is dropped and a running call is
    /// cancelled (its server is sent `notifications/cancelled`).
    pub cancel: Option<CancellationToken>,
    /// At most this many calls of one round in flight at once (default
    /// [`DEFAULT_PARALLEL_CALLS`]; 1 runs them one after another). A call
    /// that is not safe beside others runs alone (`parallel_calls` of its
    /// server, else its tool's `readOnlyHint`).
    pub parallel: usize,
    /// Whether the tools are deferred behind a search tool (issue 36): the
    /// first request then offers only `mcpvisor_tool_search`, and the tools
    /// it finds are offered from the next round on.
    pub defer: Defer,
    /// [`Defer::Auto`] defers over this many tools (default
    /// [`DEFAULT_DEFER_THRESHOLD`]).
    pub defer_threshold: usize,
}

/// Calls of one round in flight at once, by default.
pub const DEFAULT_PARALLEL_CALLS: usize = 4;

/// [`Defer::Auto`] defers a catalog of more tools than this, by default.
pub const DEFAULT_DEFER_THRESHOLD: usize = 40;

/// When a turn's tools are deferred behind the search tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Defer {
    /// Over `defer_threshold` tools.
    #[default]
    Auto,
    /// Always (when there is any tool).
    Always,
    /// Never: every tool in every request.
    Never,
}

impl Defer {
    /// `auto`, `always` or `never`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "auto" => Some(Self::Auto),
            "always" => Some(Self::Always),
            "never" => Some(Self::Never),
            _ => None,
        }
    }
}

impl TurnRequest {
    /// A turn in `scope` with the defaults.
    pub fn new(scope: Scope, route: ModelRoute, prompt: impl Into<String>) -> Self {
        Self {
            scope,
            route,
            prompt: prompt.into(),
            system: None,
            max_rounds: DEFAULT_MAX_ROUNDS,
            chat: None,
            cancel: None,
            parallel: DEFAULT_PARALLEL_CALLS,
            defer: Defer::Auto,
            defer_threshold: DEFAULT_DEFER_THRESHOLD,
        }
    }
}

/// What a turn reports as it goes (LOOP-1), in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnEvent {
    /// A model round starts (1-based).
    Round {
        /// The round.
        round: u32,
        /// How many tools it was offered.
        tools: usize,
        /// Tools behind the search: not in the prompt until a search
        /// finds them (with the provider's own deferred loading on
        /// Anthropic they are on the wire, with `defer_loading`).
        deferred: usize,
        /// The bytes of the request's tool definitions.
        tool_bytes: usize,
    },
    /// The endpoint refused the provider's own tool search ([`ToolSearch::Auto`]
    /// on the vendor's API: HTTP 400 to the first request, naming the
    /// feature): the round is sent again with the local search tool, which
    /// the rest of the turn uses. That round then has a second
    /// [`TurnEvent::Round`].
    ToolSearchRefused {
        /// The round.
        round: u32,
        /// The endpoint's message.
        message: String,
    },
    /// The search tool found tools (deferred loading): they are offered
    /// from the next round on.
    ToolsFound {
        /// The round.
        round: u32,
        /// What the model searched for.
        query: String,
        /// The tools found, best first.
        tools: Vec<String>,
    },
    /// Assistant text, as it streams.
    Text {
        /// The fragment.
        text: String,
    },
    /// Thinking / reasoning text, as it streams.
    Thinking {
        /// The fragment.
        text: String,
    },
    /// The round's token usage.
    Usage {
        /// The round.
        round: u32,
        /// Its tokens.
        usage: Usage,
    },
    /// A tool call is about to run: what a transcript row needs.
    ToolCall {
        /// The round.
        round: u32,
        /// The model's call id.
        call_id: String,
        /// The tool's name as the model wrote it.
        tool: String,
        /// The server, when the name resolves.
        server: Option<String>,
        /// The tool's title (else its raw name), for the row.
        title: Option<String>,
        /// The arguments (the raw text when they were not a JSON object).
        arguments: Value,
    },
    /// A hook of the loop's own events ran (UserPromptSubmit, Stop) and
    /// changed the turn.
    Hook {
        /// The hook event.
        hook_event: String,
        /// `block`, `context`, `continue`, `stop` or `budget_exhausted`.
        verdict: String,
        /// Its reason / prompt / context.
        text: String,
    },
    /// A tool call ended.
    ToolResult {
        /// The round.
        round: u32,
        /// The model's call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The outcome kind, snake_case (`ok`, `refused_by_trust`, …).
        outcome: String,
        /// What the model was given (after the turn budget).
        content: String,
    },
}

/// One tool use as persisted history keeps it (LOOP-4): never the raw
/// call and result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolUseRecord {
    /// The server, when the name resolved.
    pub server: Option<String>,
    /// The tool.
    pub tool: String,
    /// The outcome kind.
    pub status: String,
    /// A short summary (the first line of what the model got, cut to 200 bytes).
    pub summary: String,
}

/// Why a turn did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnError {
    /// LOOP-2: the model kept calling tools.
    #[error(
        "the model kept calling tools: it still asked for tools after {rounds} rounds (max_rounds = {rounds}); the turn was stopped"
    )]
    MaxRounds {
        /// The limit.
        rounds: u32,
    },
    /// The endpoint answered with an HTTP error.
    #[error("the model endpoint answered HTTP {status}: {message}{}", retry_after.map(|s| format!(" (retry after {s} s)")).unwrap_or_default())]
    Http {
        /// The status.
        status: u16,
        /// The error's message (from its JSON body when there is one).
        message: String,
        /// `retry-after`, in seconds, on a 429 / 503.
        retry_after: Option<u64>,
    },
    /// The endpoint could not be reached, or went silent.
    #[error("the model endpoint could not be used: {0}")]
    Transport(String),
    /// The stream was cut or unreadable, or carried an error event.
    #[error("{0}")]
    Stream(String),
    /// The route cannot be used (endpoint rule, key missing).
    #[error("{0}")]
    Route(String),
    /// A UserPromptSubmit hook blocked the prompt (HOOK-6); nothing was
    /// sent to the model.
    #[error("a UserPromptSubmit hook blocked the prompt: {0}")]
    BlockedByHook(String),
    /// The caller cancelled the turn.
    #[error("the turn was cancelled")]
    Cancelled,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The assistant's final text (what the last round said; on a failure,
    /// what had been said).
    pub text: String,
    /// Model rounds made.
    pub rounds: u32,
    /// One record per tool use (LOOP-4).
    pub tool_uses: Vec<ToolUseRecord>,
    /// Tokens over all rounds.
    pub usage: Usage,
    /// Why the turn did not finish; `None` when it did.
    pub error: Option<TurnError>,
}

impl Runtime {
    /// Run one user turn (LOOP-1..7): model rounds with the scope's tools
    /// until the model answers without calling one, at most `max_rounds`.
    /// Events go to `events` as they happen (if given; a full or dropped
    /// receiver never holds the turn up).
    pub async fn turn(
        &self,
        request: TurnRequest,
        events: Option<mpsc::UnboundedSender<TurnEvent>>,
    ) -> TurnOutcome {
        #[cfg(feature = "mods")]
        let (request, mods) = {
            let mut request = request;
            let mods = self.inner.mods.clone();
            if let Some(host) = &mods {
                mod_prompt(host, &mut request, events.as_ref()).await;
            }
            (request, mods)
        };
        let outcome = self.turn_inner(request, events.clone()).await;
        #[cfg(feature = "mods")]
        if let Some(host) = mods {
            let payload = serde_json::json!({
                "text": outcome.text,
                "rounds": outcome.rounds,
                "error": outcome.error.as_ref().map(|e| e.to_string()),
            });
            let out = run_mods(&host, "turn.complete", payload).await;
            emit_mod_reports(events.as_ref(), "turn.complete", &out);
        }
        outcome
    }

    async fn turn_inner(
        &self,
        request: TurnRequest,
        events: Option<mpsc::UnboundedSender<TurnEvent>>,
    ) -> TurnOutcome {
        let emit = |e: TurnEvent| {
            if let Some(tx) = &events {
                let _ = tx.send(e);
            }
        };
        let mut outcome = TurnOutcome {
            text: String::new(),
            rounds: 0,
            tool_uses: Vec::new(),
            usage: Usage::default(),
            error: None,
        };
        let cancel = request.cancel.clone().unwrap_or_default();
        let route = &request.route;
        let client = match self.model_client(route).await {
            Ok(c) => c,
            Err(e) => {
                outcome.error = Some(e);
                return outcome;
            }
        };
        let (tools, mut prompt) = self.offered_tools(&request);
        let hooks = self.hooks();
        let session = hooks.session().clone();
        // UserPromptSubmit (HOOK-6): a block ends the turn before the model
        // sees anything; context is added to the prompt.
        if hooks.has(crate::messages::hooks::config::HookEvent::UserPromptSubmit) {
            let input = crate::messages::hooks::input::HookInput::UserPromptSubmit {
                prompt: prompt.clone(),
            };
            let report = hooks.run(&session, &input, None, &cancel).await;
            match loop_hook_verdict(&report, "UserPromptSubmit", &emit) {
                Err(reason) => {
                    outcome.error = Some(TurnError::BlockedByHook(reason));
                    return outcome;
                }
                Ok(Some(context)) => prompt = format!("{prompt}\n\n{context}"),
                Ok(None) => {}
            }
        }
        let mut stop_state = crate::messages::hooks::engine::StopState::default();
        let specs: Vec<ToolSpec> = tools
            .iter()
            .map(|d| ToolSpec {
                name: d.name.clone(),
                description: d
                    .description
                    .clone()
                    .or_else(|| d.title.clone())
                    .unwrap_or_default(),
                parameters: Value::Object((*d.input_schema).clone()),
                offer: Offer::Eager,
            })
            .collect();
        let mut items = vec![Item::User(prompt)];
        let mut budget = TurnBudget::new(self.inner.limits.max_turn_result_bytes);
        // Deferred loading: the search tool first, then what it found, in
        // the order found (the earlier tools stay a stable prefix).
        let deferring = !specs.is_empty()
            && match request.defer {
                Defer::Never => false,
                Defer::Always => true,
                Defer::Auto => specs.len() > request.defer_threshold,
            };
        let index = if deferring {
            search::ToolIndex::build(&specs)
        } else {
            search::ToolIndex::default()
        };
        let mut found: Vec<usize> = Vec::new();
        // The provider's own deferred loading: the same tool list every
        // round (Responses: the search alone; Anthropic: the search, then
        // every tool deferred), what a search finds loaded where its answer
        // stands. `native_answered` once an answer of that kind is in the
        // conversation (from then on there is no going back to the local
        // search).
        let mut native = deferring && route.native_search();
        let mut native_answered = false;
        let native_offer: Vec<ToolSpec> = if native {
            let mut offer = vec![search::search_spec(specs.len(), Offer::NativeSearch)];
            if route.provider == Provider::Anthropic {
                offer.extend(specs.iter().map(|s| ToolSpec {
                    offer: Offer::Deferred,
                    ..s.clone()
                }));
            }
            offer
        } else {
            Vec::new()
        };
        for round in 1..=request.max_rounds.max(1) {
            outcome.rounds = round;
            let r: Round = loop {
                // Every tool, borrowed; or the search tool and what it found.
                let offered: std::borrow::Cow<'_, [ToolSpec]> = if !deferring {
                    specs.as_slice().into()
                } else if native {
                    native_offer.as_slice().into()
                } else {
                    std::iter::once(search::search_spec(specs.len(), Offer::Eager))
                        .chain(found.iter().filter_map(|&i| specs.get(i).cloned()))
                        .collect::<Vec<_>>()
                        .into()
                };
                let body = match route.provider {
                    Provider::OpenAi => openai::request_body(
                        &route.model,
                        request.system.as_deref(),
                        &offered,
                        &items,
                    ),
                    Provider::Anthropic => anthropic::request_body(
                        &route.model,
                        route.max_tokens,
                        request.system.as_deref(),
                        &offered,
                        &items,
                    ),
                    Provider::OpenAiResponses => responses::request_body(
                        &route.model,
                        request.system.as_deref(),
                        &offered,
                        &items,
                        route.encrypted_reasoning,
                    ),
                };
                let sent_deferred = offered
                    .iter()
                    .filter(|t| t.offer == Offer::Deferred)
                    .count();
                emit(TurnEvent::Round {
                    round,
                    tools: offered.len() - sent_deferred,
                    deferred: match (deferring, native) {
                        (false, _) => 0,
                        (true, true) => specs.len(),
                        (true, false) => specs.len().saturating_sub(found.len()),
                    },
                    tool_bytes: body.get("tools").map_or(0, |t| t.to_string().len()),
                });
                let streamed = tokio::select! {
                    r = client.round(&body, &emit) => r,
                    _ = cancel.cancelled() => Err(TurnError::Cancelled),
                };
                match streamed {
                    Ok(r) => break r,
                    // A model or endpoint without the provider's tool search
                    // refuses the request: the same round again, searched here.
                    Err(TurnError::Http {
                        status, message, ..
                    }) if native
                        && round == 1
                        && route.search_refused(status, &message, native_answered) =>
                    {
                        native = false;
                        emit(TurnEvent::ToolSearchRefused { round, message });
                    }
                    Err(e) => {
                        outcome.error = Some(e);
                        return outcome;
                    }
                }
            };
            outcome.usage.add(r.usage);
            emit(TurnEvent::Usage {
                round,
                usage: r.usage,
            });
            outcome.text = r.text.clone();
            if r.calls.is_empty() {
                // Stop hooks (HOOK-7): a `Continue` gives the model another
                // round with the hook's prompt, within the stop budget and
                // max_rounds.
                if !hooks.has(crate::messages::hooks::config::HookEvent::Stop)
                    || round == request.max_rounds.max(1)
                {
                    return outcome;
                }
                let (verdict, _) = hooks
                    .on_stop(&mut stop_state, &session, Some(r.text.clone()), &cancel)
                    .await;
                use crate::messages::hooks::engine::StopVerdict;
                let (name, text) = match &verdict {
                    StopVerdict::Stop => return outcome,
                    StopVerdict::Continue(p) => ("continue", p.clone()),
                    StopVerdict::Halt(why) => ("stop", why.clone()),
                    StopVerdict::BudgetExhausted(n) => {
                        ("budget_exhausted", format!("{n} continuations in a row"))
                    }
                };
                emit(TurnEvent::Hook {
                    hook_event: "Stop".into(),
                    verdict: name.into(),
                    text: text.clone(),
                });
                let StopVerdict::Continue(more) = verdict else {
                    return outcome;
                };
                items.push(Item::Assistant {
                    text: r.text,
                    calls: Vec::new(),
                    raw: r.raw,
                });
                items.push(Item::User(more));
                continue;
            }
            if round == request.max_rounds.max(1) {
                // LOOP-2: the model still asks for tools; the calls are not run.
                break;
            }
            let calls = r.calls.clone();
            items.push(Item::Assistant {
                text: r.text,
                calls: r.calls,
                raw: r.raw,
            });
            // The round's calls run together: their policy chains (trust,
            // PreToolUse hooks) one at a time in the model's order, then at
            // most `parallel` in flight, one not safe beside others alone;
            // results go back in the model's order.
            let exclusive: Vec<bool> = calls
                .iter()
                .map(|c| !self.parallel_safe(&request.scope, &c.name))
                .collect();
            let slots = crate::messages::round::RoundGate::slots(request.parallel, &exclusive);
            // The search tool's calls are answered here, from the index.
            let searched: Vec<Option<(String, Vec<usize>, String)>> = calls
                .iter()
                .map(|c| {
                    (deferring && c.name == search::SEARCH_TOOL).then(|| {
                        let args = c.arguments.as_ref().ok().cloned().unwrap_or_default();
                        let (query, limit) = search::query_of(&args);
                        let hits = index.search(&query, limit);
                        (search::answer(&specs, &hits, &query), hits, query)
                    })
                })
                .collect();
            for call in &calls {
                // What the transcript row needs, from the tools offered.
                let def = tools.iter().find(|d| d.name == call.name);
                let arguments = match &call.arguments {
                    Ok(v) => v.clone(),
                    Err(e) => Value::String(e.raw.clone()),
                };
                emit(TurnEvent::ToolCall {
                    round,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    server: def.as_ref().map(|d| d.server.clone()),
                    title: def
                        .as_ref()
                        .map(|d| d.title.clone().unwrap_or_else(|| d.raw_name.clone())),
                    arguments,
                });
            }
            let runs = calls
                .iter()
                .zip(slots)
                .zip(&searched)
                .map(|((call, slot), searched)| {
                    let (scope, chat, cancel) = (&request.scope, request.chat.clone(), &cancel);
                    async move {
                        if let Some((text, _, _)) = searched {
                            return ("ok".to_owned(), text.clone(), None);
                        }
                        match &call.arguments {
                            // TRUST-6: the model is told, nothing is called (the
                            // slot is released as it drops).
                            Err(e) => (
                                OutcomeKind::InvalidArguments.name().to_owned(),
                                format!("Tool call failed (invalid_arguments): {e}"),
                                None,
                            ),
                            Ok(args) => {
                                let o = self
                                    .call(
                                        scope,
                                        &call.name,
                                        Some(args.clone()),
                                        CallOptions {
                                            cancel: Some(cancel.child_token()),
                                            chat,
                                            round: Some(slot),
                                            ..CallOptions::default()
                                        },
                                    )
                                    .await;
                                (o.kind.name().to_owned(), o.projection, o.server)
                            }
                        }
                    }
                });
            let done = futures::future::join_all(runs).await;
            if cancel.is_cancelled() {
                outcome.error = Some(TurnError::Cancelled);
                return outcome;
            }
            // What was found, and any tool the model called without
            // searching for it, is offered from the next round on.
            for (call, searched) in calls.iter().zip(&searched) {
                let new: Vec<usize> = match searched {
                    Some((_, hits, query)) => {
                        emit(TurnEvent::ToolsFound {
                            round,
                            query: query.clone(),
                            tools: hits
                                .iter()
                                .filter_map(|&i| specs.get(i).map(|s| s.name.clone()))
                                .collect(),
                        });
                        hits.clone()
                    }
                    None => specs
                        .iter()
                        .position(|s| s.name == call.name)
                        .into_iter()
                        .collect(),
                };
                for i in new {
                    if deferring && !found.contains(&i) {
                        found.push(i);
                    }
                }
            }
            let mut results = Vec::new();
            let mut batch = Vec::new();
            let mut batch_context = None;
            for ((call, (kind, text, server)), searched) in
                calls.into_iter().zip(done).zip(searched)
            {
                // A native search's answer goes as the found definitions
                // (at most the search's limit), not as this text.
                let native_search = native && searched.is_some();
                // LOOP-3: the per-turn budget over every result, in order.
                let content = if native_search {
                    text
                } else {
                    budget.charge(&text).0
                };
                emit(TurnEvent::ToolResult {
                    round,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    outcome: kind.clone(),
                    content: content.clone(),
                });
                outcome.tool_uses.push(ToolUseRecord {
                    server,
                    tool: call.name.clone(),
                    status: kind.clone(),
                    summary: summary(&content),
                });
                batch.push(serde_json::json!({
                    "tool_name": call.name,
                    "tool_input": match &call.arguments {
                        Ok(v) => v.clone(),
                        Err(e) => Value::String(e.raw.clone()),
                    },
                    "tool_use_id": call.id,
                    "tool_response": content,
                    "is_error": kind != "ok",
                }));
                // A native search's answer names what it found.
                let found: Option<Vec<ToolSpec>> =
                    searched.filter(|_| native).map(|(_, hits, _)| {
                        hits.iter().filter_map(|&i| specs.get(i).cloned()).collect()
                    });
                // Once the provider's own search answer is in the
                // conversation (Anthropic sends an empty one as text), the
                // turn cannot go back to the local search.
                if found
                    .as_ref()
                    .is_some_and(|f| route.provider == Provider::OpenAiResponses || !f.is_empty())
                {
                    native_answered = true;
                }
                results.push(ToolResultItem {
                    call_id: call.id,
                    content,
                    is_error: kind != "ok",
                    found,
                });
            }
            // PostToolBatch: once the round's calls all ended, before the
            // next request. Its context goes to the model with the results;
            // a block ends the turn.
            if hooks.has(crate::messages::hooks::config::HookEvent::PostToolBatch) {
                let input =
                    crate::messages::hooks::input::HookInput::PostToolBatch { tool_calls: batch };
                let report = hooks.run(&session, &input, None, &cancel).await;
                match loop_hook_verdict(&report, "PostToolBatch", &emit) {
                    Err(reason) => {
                        outcome.error = Some(TurnError::BlockedByHook(reason));
                        return outcome;
                    }
                    Ok(Some(context)) => {
                        // With the last result the model reads as text; a
                        // native search's answer is the found tools, so
                        // after a round of those alone, as a user message.
                        match results.iter_mut().rev().find(|r| r.found.is_none()) {
                            Some(last) => last.content = format!("{}\n\n{context}", last.content),
                            None => batch_context = Some(context),
                        }
                    }
                    Ok(None) => {}
                }
            }
            items.push(Item::ToolResults(results));
            if let Some(context) = batch_context.take() {
                items.push(Item::User(context));
            }
        }
        outcome.error = Some(TurnError::MaxRounds {
            rounds: request.max_rounds.max(1),
        });
        outcome
    }

    /// Whether a call of tool `name` may run beside the other calls of its
    /// round: the shared resource tools do (they only read); otherwise its
    /// server's `parallel_calls` when set, else the tool's `readOnlyHint`
    /// annotation (a tool that changes nothing). The name is resolved as
    /// the call will resolve it (in the scope, not only among the tools
    /// offered); a name that resolves to nothing fails at once either way.
    fn parallel_safe(&self, scope: &Scope, name: &str) -> bool {
        let Some(snap) = self.snapshot(scope) else {
            return true;
        };
        if snap.resource_tool(name).is_some() {
            return true;
        }
        let Some((_, def)) = snap.resolve(name) else {
            return true;
        };
        let server = snap
            .servers
            .get(&def.server)
            .and_then(|e| e.config.parallel_calls);
        match server {
            Some(set) => set,
            None => def
                .annotations
                .as_ref()
                .and_then(|a| a.get("readOnlyHint"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    /// The tools a turn offers and the prompt it sends: none when the route
    /// has no tool calling (TRUST-7); `@handle rest` with a visible server
    /// `handle` offers only its tools and sends `rest` (LOOP-6).
    fn offered_tools(
        &self,
        request: &TurnRequest,
    ) -> (
        Vec<std::sync::Arc<crate::messages::call::ToolDefinition>>,
        String,
    ) {
        let all = self.tools_for_route(&request.scope, request.route.supports_tools);
        if let Some(rest) = request.prompt.strip_prefix('@')
            && let Some((handle, text)) = rest.split_once(' ')
            && all.iter().any(|d| d.server == handle)
        {
            let only = all.into_iter().filter(|d| d.server == handle).collect();
            return (only, text.trim_start().to_owned());
        }
        (all, request.prompt.clone())
    }
}

/// What the hooks of one of the loop's own events (UserPromptSubmit,
/// PostToolBatch) decided, each part emitted as a [`TurnEvent::Hook`]: a
/// block (or `continue: false`) is `Err(reason)`, which ends the turn;
/// otherwise their context, joined, when they gave any.
fn loop_hook_verdict(
    report: &crate::messages::hooks::engine::HookReport,
    event: &str,
    emit: &impl Fn(TurnEvent),
) -> Result<Option<String>, String> {
    let m = &report.merged;
    let blocked = m.stop.clone().or_else(|| {
        (m.decision == Some(crate::messages::hooks::HookDecision::Block))
            .then(|| m.reason.clone().unwrap_or_default())
    });
    if let Some(reason) = blocked {
        emit(TurnEvent::Hook {
            hook_event: event.into(),
            verdict: "block".into(),
            text: reason.clone(),
        });
        return Err(reason);
    }
    if m.context.is_empty() {
        return Ok(None);
    }
    let context = m.context.join("\n\n");
    emit(TurnEvent::Hook {
        hook_event: event.into(),
        verdict: "context".into(),
        text: context.clone(),
    });
    Ok(Some(context))
}

/// The first line of `text`, cut to 200 bytes.
fn summary(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let (cut, _) = crate::messages::budget::apply_budget(line, 200, "a summary");
    cut.lines().next().unwrap_or("").to_owned()
}

#[cfg(test)]
mod tests;
