//! One client's session: the MCP server handler that serves the scope's
//! catalog, calls, resources and prompts to that client.

use super::*;
use crate::ToolOutcome;

/// One client's session: the MCP handler. Its id is the chat id of its calls
/// (`gateway-<id>`), so "allow this chat" grants last as long as the session.
#[derive(Clone)]
pub struct GatewaySession {
    pub(super) shared: Arc<Shared>,
    pub(super) id: u64,
    /// Cancelled when the client's input ended (stdio): its listen
    /// streams end then.
    pub(super) input_closed: CancellationToken,
}

/// A shared resource tool's call that did not succeed: its outcome's text,
/// as the model would see it (`Tool call failed (…): …`).
#[derive(Debug, thiserror::Error)]
#[error("{text}")]
struct ResourceCallFailed {
    /// The outcome's projection.
    text: String,
}

impl GatewaySession {
    fn chat(&self) -> String {
        format!("gateway-{}", self.id)
    }

    /// The `input_required` result that puts the trust question `q` to a
    /// stateless client; its retry (with the answer and the request state)
    /// is the same call in `chat`.
    fn ask_in_a_round(
        &self,
        q: approver::Question,
        chat: String,
        arguments: Option<Value>,
    ) -> CallToolResponse {
        let state = self.shared.pending_asks.remember(PendingAsk {
            chat,
            server: q.server,
            tool: q.tool,
            arguments,
        });
        let elicit = json!({"method": "elicitation/create", "params": q.form});
        let mut requests = rmcp::model::InputRequests::new();
        if let Ok(request) = serde_json::from_value(elicit) {
            requests.insert(
                TRUST_INPUT_KEY.to_owned(),
                rmcp::model::InputRequest::Elicitation(request),
            );
        }
        CallToolResponse::InputRequired(rmcp::model::InputRequiredResult::new(
            Some(requests),
            Some(state),
        ))
    }

    fn scope(&self) -> &Scope {
        &self.shared.options.scope
    }

    /// A call in `chat` that trust rounds may ask about is over: the
    /// question it left, if any (its chat is forgotten).
    fn end_rounds(
        &self,
        approver: Option<&approver::ClientApprover>,
        chat: &str,
    ) -> Option<approver::Question> {
        let approver = approver?;
        let question = approver.take_question(chat);
        approver.forget(chat);
        self.shared.runtime.end_chat(chat);
        question
    }

    /// Run a stateless client's call until it ends, or until a backend
    /// asks for input: the call then waits for the client's retry, and the
    /// client is answered `input_required` with the request (GW-2).
    async fn step(&self, mut call: relay::RunningCall, ct: &CancellationToken) -> Step {
        let ended = |r: Result<ToolOutcome, tokio::task::JoinError>| {
            r.unwrap_or_else(|e| {
                ToolOutcome::failure(
                    OutcomeKind::Cancelled,
                    format!("the call ended before its result: {e}; side effects unknown"),
                )
            })
        };
        loop {
            let asked = tokio::select! {
                done = &mut call.outcome => return Step::Done(ended(done)),
                Some(asked) = call.asks.recv() => asked,
                () = ct.cancelled() => {
                    call.cancel.cancel();
                    return Step::Done(ended((&mut call.outcome).await));
                }
            };
            let mut requests = rmcp::model::InputRequests::new();
            let mut unreadable = None;
            for ask in &asked.asks {
                let mut request = json!({"method": ask.method});
                if !ask.params.is_null() {
                    request["params"] = ask.params.clone();
                }
                match serde_json::from_value::<rmcp::model::InputRequest>(request) {
                    Ok(request) => {
                        requests.insert(ask.key.clone(), request);
                    }
                    Err(e) => unreadable = Some(format!("{}: {e}", ask.method)),
                }
            }
            if let Some(why) = unreadable {
                let _ = asked.reply.send(Err(crate::RelayError {
                    code: -32602,
                    message: format!("the request could not be put to the client: {why}"),
                }));
                continue;
            }
            let keys = asked.asks.iter().map(|a| a.key.clone()).collect();
            let state = self.shared.rounds.remember(relay::Waiting {
                call,
                keys,
                reply: asked.reply,
            });
            return Step::Round(CallToolResponse::InputRequired(
                rmcp::model::InputRequiredResult::new(Some(requests), Some(state)),
            ));
        }
    }

    /// The paused request a stateless client's retry names by `state`,
    /// which must be a request for `key` (a call's public tool name, a
    /// read's or a prompt's key); with its answers, from the retry's
    /// `responses`.
    fn take_round(
        &self,
        state: &str,
        key: &str,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<(relay::Waiting, Answers), McpError> {
        let Some(waiting) = self.shared.rounds.take(state) else {
            return Err(self.shared.unknown_state(state));
        };
        if waiting.call.tool != key {
            return Err(McpError::invalid_params(
                format!(
                    "the requestState answers a request of another call (of {}), which is cancelled now",
                    waiting.call.tool
                ),
                None,
            ));
        }
        let answers = waiting
            .keys
            .iter()
            .map(|key| {
                responses
                    .and_then(|r| r.get(key))
                    .map(|v| (key.clone(), v.clone()))
                    .ok_or_else(|| crate::RelayError {
                        code: -32602,
                        message: format!("the client's retry brought no answer under {key:?}"),
                    })
            })
            .collect();
        Ok((waiting, answers))
    }

    /// A request other than `tools/call` that a backend may answer with
    /// its own questions (on `prompts/get` or `resources/read`: a
    /// stateless backend's `input_required`, a session-era backend's own
    /// requests; GW-2), run for this client: a
    /// session client is asked them as requests, a stateless one in
    /// `input_required` rounds, and a stateless client's retry (its
    /// `state`) goes on with the request it paused. `key` names the
    /// request: a retry must be for the same one.
    async fn relayed<F>(
        &self,
        key: String,
        retry: (Option<&str>, Option<&rmcp::model::InputResponses>),
        ctx: &RequestContext<RoleServer>,
        run: impl FnOnce(Option<Arc<dyn crate::CallerRelay>>, CancellationToken) -> F,
    ) -> Result<Step, McpError>
    where
        F: std::future::Future<Output = ToolOutcome> + Send + 'static,
    {
        if let Some(state) = retry.0.filter(|s| self.shared.rounds.names(s)) {
            let (waiting, answers) = self.take_round(state, &key, retry.1)?;
            let _ = waiting.reply.send(answers);
            return Ok(self.step(waiting.call, &ctx.ct).await);
        }
        match self.relaying(ctx) {
            Relaying::Rounds(client, offers) => {
                let call = relay::RunningCall::start(
                    client,
                    offers,
                    key,
                    self.chat(),
                    crate::ProgressSink::default(),
                    |relay, cancel| run(Some(relay), cancel),
                );
                Ok(self.step(call, &ctx.ct).await)
            }
            Relaying::Inline(relay) => Ok(Step::Done(run(relay, ctx.ct.clone()).await)),
        }
    }

    /// Where a backend's requests during this client's request go (GW-2).
    fn relaying(&self, ctx: &RequestContext<RoleServer>) -> Relaying {
        let Some(offers) = stateless_offers(ctx) else {
            return Relaying::Inline(relay::PeerRelay::of(self.id, &ctx.peer));
        };
        let client = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
        if offers == crate::Offers::default() {
            // One that declared nothing is never asked: its backend is
            // told so, and the request needs no rounds.
            Relaying::Inline(Some(Arc::new(relay::NoOffers(client))))
        } else {
            // A stateless client is asked in rounds: the request runs on
            // between them (relay.rs).
            Relaying::Rounds(client, offers)
        }
    }

    /// A stateless client's retry with its answer to a backend's request:
    /// the call it names goes on.
    async fn resume(
        &self,
        state: &str,
        public: &str,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (waiting, answers) =
            self.take_round(state, public, request.input_responses.as_ref())?;
        // The call's progress from here on goes to the retry's token
        // (pointed there before the answers let the call go on).
        let chat = waiting.call.chat.clone();
        let sink = waiting.call.progress.clone();
        let token = ctx.meta.get_progress_token();
        let step = notify::with_progress(&sink, token, &ctx.peer, async {
            let _ = waiting.reply.send(answers);
            self.step(waiting.call, &ctx.ct).await
        })
        .await;
        match step {
            Step::Round(round) => Ok(round),
            Step::Done(outcome) => {
                let approver = self
                    .shared
                    .approver
                    .as_deref()
                    .filter(|_| stateless_with_elicitation(ctx));
                let _ = self.end_rounds(approver, &chat);
                if let Some(e) = results::passed_on_error(&outcome) {
                    return Err(e);
                }
                let mut result = results::to_call_result(outcome);
                if let Some(server) = self.shared.pinned_server(public) {
                    let epoch = self.shared.epoch(&server).await;
                    self.shared
                        .hand_out(&mut result.meta, &server.server, epoch);
                }
                Ok(result.into())
            }
        }
    }

    /// The combined, attributed instructions, cut at the byte limit.
    fn instructions(&self) -> Option<String> {
        let all = self.shared.runtime.instructions(self.scope());
        if all.is_empty() {
            return None;
        }
        let text = all.join("\n\n");
        let max = self.shared.options.max_instruction_bytes;
        Some(crate::apply_budget(&text, max, "the gateway's combined instructions").0)
    }

    /// A call of the shared resource tool `op`; its canonical value per server.
    async fn resource_call(
        &self,
        op: ResourceOp,
        args: Value,
        ct: &CancellationToken,
    ) -> Result<Map<String, Value>, ResourceCallFailed> {
        let outcome = self
            .shared
            .runtime
            .call(
                self.scope(),
                op.tool_name(),
                Some(args),
                CallOptions {
                    cancel: Some(ct.clone()),
                    chat: Some(self.chat()),
                    ..CallOptions::default()
                },
            )
            .await;
        per_server(outcome)
    }

    /// The server that lists the prompt the gateway serves as `name`, and
    /// that server's own name for it (listing first when none has yet).
    async fn prompt_owner(
        &self,
        name: &str,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(String, String), McpError> {
        let owner = |s: &Self| {
            s.shared
                .prompt_owner
                .lock()
                .ok()
                .and_then(|o| o.get(name).cloned())
        };
        if let Some(found) = owner(self) {
            return Ok(found);
        }
        let _ = self.list_prompts(None, ctx).await;
        owner(self).ok_or_else(|| {
            McpError::invalid_params(
                format!("no server of this gateway lists the prompt {name:?}"),
                None,
            )
        })
    }

    /// Subscriber `id` (a session, or a listen stream) follows `uri`: the
    /// first one subscribes the server that listed it.
    async fn subscribe_uri(
        &self,
        uri: String,
        id: u64,
        ct: &CancellationToken,
    ) -> Result<(), McpError> {
        let Some(server) = self.owner_of(&uri, ct).await else {
            return Err(not_listed(&uri));
        };
        let first = self
            .shared
            .subscriptions
            .lock()
            .map(|s| s.get(&uri).is_none_or(|ids| ids.is_empty()))
            .unwrap_or(true);
        if first {
            self.shared
                .runtime
                .subscribe_resource(self.scope(), &server, &uri)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            if let Ok(mut followed) = self.shared.followed.lock() {
                followed.insert(uri.clone(), server);
            }
        }
        if let Ok(mut subs) = self.shared.subscriptions.lock() {
            subs.entry(uri).or_default().insert(id);
        }
        Ok(())
    }

    /// Subscriber `id` leaves `uri`: the last one unsubscribes the server.
    async fn unsubscribe_uri(&self, uri: String, id: u64, ct: &CancellationToken) {
        let last = match self.shared.subscriptions.lock() {
            Ok(mut subs) => {
                let ids = subs.entry(uri.clone()).or_default();
                ids.remove(&id);
                let empty = ids.is_empty();
                if empty {
                    subs.remove(&uri);
                    if let Ok(mut followed) = self.shared.followed.lock() {
                        followed.remove(&uri);
                    }
                }
                empty
            }
            Err(_) => false,
        };
        if last && let Some(server) = self.owner_of(&uri, ct).await {
            let _ = self
                .shared
                .runtime
                .unsubscribe_resource(self.scope(), &server, &uri)
                .await;
        }
    }

    /// The server that listed `uri` (listing first when none has yet: a
    /// client may read a URI it knows); for a URI no server listed, the
    /// scope's only resource server, if there is just one.
    async fn owner_of(&self, uri: &str, ct: &CancellationToken) -> Option<String> {
        let known = |s: &Self| {
            s.shared
                .uri_owner
                .lock()
                .ok()
                .and_then(|o| o.get(uri).cloned())
        };
        if let Some(server) = known(self) {
            return Some(server);
        }
        let _ = self.list_all(ResourceOp::List, "resources", ct).await;
        if let Some(server) = known(self) {
            return Some(server);
        }
        // A template's instance: the server whose template it matches.
        let _ = self
            .list_all(ResourceOp::Templates, "resourceTemplates", ct)
            .await;
        let by_template = self.shared.uri_owner.lock().ok().and_then(|o| {
            let servers: std::collections::BTreeSet<&String> = o
                .iter()
                .filter(|(template, _)| template.contains('{') && matches_template(template, uri))
                .map(|(_, server)| server)
                .collect();
            match servers.into_iter().collect::<Vec<_>>().as_slice() {
                [only] => Some((*only).clone()),
                _ => None,
            }
        });
        by_template.or_else(|| {
            // A URI no server listed nor templated (a resource the server
            // does not list): unambiguous only with one provider.
            let providers: Vec<String> = self
                .shared
                .runtime
                .status()
                .into_iter()
                .filter(|s| s.resources && &s.scope == self.scope())
                .map(|s| s.server)
                .collect();
            match providers.as_slice() {
                [only] => Some(only.clone()),
                _ => None,
            }
        })
    }

    /// Every item under `key` of every server's pages (each server's
    /// cursors followed, at most 100 pages), with its server in `_meta`.
    async fn list_all(&self, op: ResourceOp, key: &str, ct: &CancellationToken) -> Vec<Value> {
        let first = match self.resource_call(op, json!({}), ct).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "gateway: {} failed", op.tool_name());
                return Vec::new();
            }
        };
        let mut items = Vec::new();
        for (server, mut page) in first {
            for _ in 0..100 {
                if let Some(list) = page.get(key).and_then(Value::as_array) {
                    for item in list {
                        let mut item = item.clone();
                        if let Some(obj) = item.as_object_mut() {
                            let meta = obj
                                .entry("_meta")
                                .or_insert_with(|| Value::Object(Map::new()));
                            if let Some(meta) = meta.as_object_mut() {
                                meta.insert(SERVER_META_KEY.into(), Value::String(server.clone()));
                            }
                            // A resource's URI, or a template's (for completions).
                            if let Some(uri) = obj
                                .get("uri")
                                .or_else(|| obj.get("uriTemplate"))
                                .and_then(Value::as_str)
                                && let Ok(mut owners) = self.shared.uri_owner.lock()
                            {
                                owners.insert(uri.to_owned(), server.clone());
                            }
                        }
                        items.push(item);
                    }
                }
                let Some(cursor) = page.get("nextCursor").and_then(Value::as_str) else {
                    break;
                };
                let args = json!({"server": server, "cursor": cursor});
                page = match self.resource_call(op, args, ct).await {
                    Ok(mut m) => m.remove(&server).unwrap_or(Value::Null),
                    Err(e) => {
                        tracing::warn!(server = %server, error = %e, "gateway: a resource page failed");
                        break;
                    }
                };
            }
        }
        items
    }
}

impl ServerHandler for GatewaySession {
    // Logging is deprecated by SEP-2577, but clients of 2025-11-25 (and the
    // conformance suite) still send logging/setLevel: it is accepted.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_completions()
            .enable_logging()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            self.shared.options.name.clone(),
            env!("CARGO_PKG_VERSION"),
        ));
        match self.instructions() {
            Some(text) => info.with_instructions(text),
            None => info,
        }
    }

    /// Answered once the servers still starting are up (or the wait is
    /// over): the instructions then hold every backend's.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        self.shared.settle().await;
        context.peer.set_peer_info(request.clone());
        // Registered here, not at `initialized`: rmcp may handle the
        // client's first call before that notification.
        if let Some(approver) = &self.shared.approver {
            approver.register(self.chat(), context.peer.clone());
        }
        self.negotiate_initialize(&request)
    }

    /// As `initialize`, for a stateless client's opening.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        self.shared.settle().await;
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        if let Ok(mut clients) = self.shared.clients.lock() {
            clients.retain(|_, p| !p.is_transport_closed());
            clients.insert(self.id, ctx.peer.clone());
        }
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.shared.settle().await;
        // Raw-names mode only: the name each tool is served under.
        let served = self
            .shared
            .options
            .raw_names
            .then(|| self.shared.served_names());
        let mut tools: Vec<Tool> = self
            .shared
            .runtime
            .tools(self.scope())
            .iter()
            .filter_map(|d| {
                let mut tool = to_mcp_tool(d)?;
                if let Some(name) = served.as_ref().and_then(|s| s.get(&d.name)) {
                    tool.name = name.clone().into();
                }
                Some(tool)
            })
            .collect();
        if self.shared.options.status_tool {
            tools.push(status_tool());
        }
        let mut page = ListToolsResult::default();
        page.tools = tools;
        let unavailable = self.shared.unavailable();
        if !unavailable.is_empty() {
            let mut meta = rmcp::model::MetaObject(Map::new());
            meta.0
                .insert(UNAVAILABLE_META_KEY.into(), Value::Array(unavailable));
            page.meta = Some(meta);
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.shared.options.status_tool && request.name == STATUS_TOOL {
            let text = serde_json::to_string_pretty(
                &Gateway {
                    shared: self.shared.clone(),
                }
                .health(),
            )
            .unwrap_or_default();
            return Ok(CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]).into());
        }
        self.shared.settle().await;
        let public = self.shared.public_name(&request.name);
        // The retry of a call that asked its stateless client for input.
        if let Some(state) = request
            .request_state
            .as_deref()
            .filter(|s| self.shared.rounds.names(s))
        {
            return self.resume(state, &public, &request, &ctx).await;
        }
        // State that lives here (a seat, a stateful backend): a handle sent
        // back must name it (SCALE-2).
        let pinned = self.shared.pinned_server(&public);
        if let Some(server) = &pinned
            && let Some(handle) = ctx.meta.get(HANDLE_META_KEY)
        {
            let epoch = self.shared.epoch(server).await;
            self.shared.check_handle(handle, &server.server, epoch)?;
        }
        let mut arguments = request.arguments.take().map(Value::Object);
        // A stateless client that can answer an elicitation is asked by an
        // `input_required` round (approver.rs): a chat of the call's own.
        let rounds = match &self.shared.approver {
            Some(approver) if stateless_with_elicitation(&ctx) => Some(approver.clone()),
            _ => None,
        };
        let mut chat = self.chat();
        if let Some(approver) = &rounds {
            chat = match (&request.request_state, &request.input_responses) {
                (Some(state), Some(responses)) => {
                    let Some(asked) = self.shared.pending_asks.take(state) else {
                        return Err(self.shared.unknown_state(state));
                    };
                    if asked.tool != public || asked.arguments != arguments {
                        return Err(McpError::invalid_params(
                            format!(
                                "the requestState answers a question about another call (of {}): retry that call unchanged",
                                asked.tool
                            ),
                            None,
                        ));
                    }
                    let answer = responses
                        .get(TRUST_INPUT_KEY)
                        .map(approver::decision)
                        .unwrap_or(crate::Approval::DontAllow);
                    approver.answer(&asked.chat, &asked.server, &asked.tool, answer);
                    asked.chat
                }
                _ => format!(
                    "{}-{}",
                    self.chat(),
                    self.shared.next_session.fetch_add(1, Ordering::Relaxed)
                ),
            };
            approver.expect_rounds(&chat);
        }
        // The call's progress, as it comes, under the client's own token.
        let sink = crate::ProgressSink::default();
        // Kept for the question only when a round may ask one.
        let call_arguments = if rounds.is_some() {
            arguments.clone()
        } else {
            arguments.take()
        };
        let options = CallOptions {
            cancel: Some(ctx.ct.clone()),
            chat: Some(chat.clone()),
            progress: Some(sink.clone()),
            trace: trace_of(&ctx),
            ..CallOptions::default()
        };
        let relaying = self.relaying(&ctx);
        let running = async {
            match relaying {
                Relaying::Rounds(client, offers) => {
                    let (runtime, scope, tool) = (
                        self.shared.runtime.clone(),
                        self.scope().clone(),
                        public.clone(),
                    );
                    // A retry's progress token takes the call's progress over
                    // (the sink is the call's).
                    let call = relay::RunningCall::start(
                        client,
                        offers,
                        public.clone(),
                        chat.clone(),
                        sink.clone(),
                        move |relay, cancel| async move {
                            let options = CallOptions {
                                cancel: Some(cancel),
                                relay: Some(relay),
                                ..options
                            };
                            runtime.call(&scope, &tool, call_arguments, options).await
                        },
                    );
                    self.step(call, &ctx.ct).await
                }
                Relaying::Inline(relay) => {
                    let options = CallOptions { relay, ..options };
                    Step::Done(
                        self.shared
                            .runtime
                            .call(self.scope(), &public, call_arguments, options)
                            .await,
                    )
                }
            }
        };
        // Its progress goes out before its result (or its round).
        let token = ctx.meta.get_progress_token();
        let outcome = match notify::with_progress(&sink, token, &ctx.peer, running).await {
            Step::Done(outcome) => outcome,
            Step::Round(round) => return Ok(round),
        };
        if let Some(q) = self.end_rounds(rounds.as_deref(), &chat)
            && outcome.kind == OutcomeKind::RefusedByTrust
        {
            return Ok(self.ask_in_a_round(q, chat, arguments));
        }
        if let Some(e) = results::passed_on_error(&outcome) {
            return Err(e);
        }
        let mut result = results::to_call_result(outcome);
        // The state as the call left it (a first call opens the browser).
        // Its status read again: the call may have restarted it.
        if let Some(server) = pinned.and_then(|_| self.shared.pinned_server(&public)) {
            let epoch = self.shared.epoch(&server).await;
            self.shared
                .hand_out(&mut result.meta, &server.server, epoch);
        }
        if !is_stateless(&ctx) {
            for_a_session_client(&mut result.meta);
        }
        Ok(result.into())
    }

    /// `completion/complete` (GW-2): passed to the server whose prompt or
    /// resource template it names, in that server's own names.
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        self.shared.settle().await;
        let mut params = serde_json::to_value(&request)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let ct = ctx.ct.clone();
        let server = match &request.r#ref {
            rmcp::model::Reference::Prompt(p) => {
                let (server, raw) = self.prompt_owner(&p.name, ctx).await?;
                params["ref"]["name"] = Value::String(raw);
                server
            }
            rmcp::model::Reference::Resource(r) => {
                let listed = |s: &Self| {
                    s.shared
                        .uri_owner
                        .lock()
                        .ok()
                        .is_some_and(|o| o.contains_key(&r.uri))
                };
                if !listed(self) {
                    let _ = self
                        .list_all(ResourceOp::Templates, "resourceTemplates", &ct)
                        .await;
                }
                self.owner_of(&r.uri, &ct)
                    .await
                    .ok_or_else(|| not_listed(&r.uri))?
            }
            _ => {
                return Err(McpError::invalid_params(
                    "a completion reference of a kind this gateway does not know",
                    None,
                ));
            }
        };
        if let Some(obj) = params.as_object_mut() {
            obj.remove("_meta");
        }
        let value = self
            .shared
            .runtime
            .complete(self.scope(), &server, params)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let mut result: rmcp::model::CompleteResult =
            serde_json::from_value(value).map_err(|e| {
                McpError::internal_error(
                    format!(
                        "server \"{server}\" answered completion/complete with an invalid result: {e}"
                    ),
                    None,
                )
            })?;
        // As on every relayed result (results.rs): a session-era backend
        // sends none, a stateless client requires it.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(result)
    }

    /// The level below which the backends' log messages are not sent to
    /// this client (GW-2); the gateway's own log goes to its stderr.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let level = serde_json::to_value(request.level)
            .ok()
            .and_then(|v| v.as_str().map(log_rank))
            .unwrap_or(0);
        if let Ok(mut levels) = self.shared.log_levels.lock() {
            levels.insert(self.id, level);
        }
        Ok(())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        let mut prompts = Vec::new();
        let mut all = Vec::new();
        for (server, listed) in self.shared.runtime.list_prompts(self.scope()).await {
            match listed {
                Ok(list) => all.push((server, list)),
                Err(e) => {
                    tracing::warn!(server = %server, error = %e, "gateway: prompts/list failed");
                }
            }
        }
        // Raw-names mode: a prompt name only one server has is served as it is.
        let mut by_raw: HashMap<String, usize> = HashMap::new();
        for (_, list) in &all {
            for p in list {
                if let Some(n) = p.get("name").and_then(Value::as_str) {
                    *by_raw.entry(n.to_owned()).or_default() += 1;
                }
            }
        }
        for (server, list) in all {
            for mut prompt in list {
                let Some(raw) = prompt
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    continue;
                };
                let public = if self.shared.options.raw_names && by_raw.get(&raw) == Some(&1) {
                    raw.clone()
                } else {
                    crate::public_tool_name(&server, &raw)
                };
                if let Some(obj) = prompt.as_object_mut() {
                    obj.insert("name".into(), Value::String(public.clone()));
                    let meta = obj
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.insert(SERVER_META_KEY.into(), Value::String(server.clone()));
                    }
                }
                if let Ok(p) = serde_json::from_value(prompt) {
                    prompts.push(p);
                    if let Ok(mut owners) = self.shared.prompt_owner.lock() {
                        owners.insert(public, (server.clone(), raw));
                    }
                }
            }
        }
        let mut result = rmcp::model::ListPromptsResult::default();
        result.prompts = prompts;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let stateless = is_stateless(&ctx);
        let (server, raw) = self.prompt_owner(&request.name, ctx.clone()).await?;
        // What the backend asks first goes to this client (GW-2).
        let (runtime, scope) = (self.shared.runtime.clone(), self.scope().clone());
        let arguments = request.arguments.clone();
        let asked_of = server.clone();
        let step = self
            .relayed(
                format!("prompts/get {}", request.name),
                (
                    request.request_state.as_deref(),
                    request.input_responses.as_ref(),
                ),
                &ctx,
                move |relay, cancel| async move {
                    value_outcome(tokio::select! {
                        got = runtime.get_prompt_relayed(&scope, &asked_of, &raw, arguments, relay) => {
                            got.map_err(|e| e.to_string())
                        }
                        () = cancel.cancelled() => Err("the request was cancelled".to_owned()),
                    })
                },
            )
            .await?;
        let outcome = match step {
            Step::Round(round) => {
                return Ok(rmcp::model::GetPromptResponse::InputRequired(round_of(
                    round,
                )?));
            }
            Step::Done(outcome) => outcome,
        };
        let Some(value) = outcome
            .canonical
            .filter(|_| outcome.kind == OutcomeKind::Ok)
        else {
            return Err(McpError::internal_error(
                outcome.error.unwrap_or(outcome.projection),
                None,
            ));
        };
        let mut result: rmcp::model::GetPromptResult =
            serde_json::from_value(value).map_err(|e| {
                McpError::internal_error(
                    format!("server \"{server}\" answered prompts/get with an invalid result: {e}"),
                    None,
                )
            })?;
        // As for a call's result (`results::to_call_result`).
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        if !stateless {
            for_a_session_client(&mut result.meta);
        }
        Ok(result.into())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let items = self.list_all(ResourceOp::List, "resources", &ctx.ct).await;
        let mut result = ListResourcesResult::default();
        result.resources = items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        Ok(result)
    }

    /// `resources/subscribe`: passed to the server that listed the URI
    /// (once per URI, however many clients subscribe); its updates go to
    /// every session that subscribed.
    #[allow(deprecated)] // legacy-only in rmcp; what 2025-11-25 clients send
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribe_uri(request.uri, self.id, &ctx.ct).await
    }

    /// `resources/unsubscribe`: the last session to leave a URI unsubscribes
    /// the server.
    #[allow(deprecated)] // as above
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.unsubscribe_uri(request.uri, self.id, &ctx.ct).await;
        Ok(())
    }

    /// A stateless client's `subscriptions/listen` (2026-07-28): tool list
    /// changes, and the updates of the resources it names (each passed to
    /// the server that listed it, as `resources/subscribe` is).
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let mut accepted = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        accepted.resource_subscriptions = requested.resource_subscriptions.clone();
        Some(accepted)
    }

    /// Follow one listen stream until the client ends it or the gateway
    /// stops: what the gateway's notifiers send, as far as the stream's
    /// filter accepts it.
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        use tokio::sync::broadcast::error::RecvError;
        let mut notes = self.shared.listens.subscribe();
        // A stream of its own among the subscribers of a URI.
        let me = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
        let ct = context.request_context().ct.clone();
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        for uri in &uris {
            if let Err(e) = self.subscribe_uri(uri.clone(), me, &ct).await {
                for done in &uris {
                    self.unsubscribe_uri(done.clone(), me, &ct).await;
                }
                return Err(e);
            }
        }
        // The stream was acknowledged before the backends were asked to
        // follow its resources: one may have changed in between, so each is
        // said to have (a client reads it again; nothing is missed).
        for uri in &uris {
            let note = rmcp::model::ServerNotification::ResourceUpdatedNotification(
                rmcp::model::ResourceUpdatedNotification::new(
                    rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone()),
                ),
            );
            let _ = context.sink().send(note).await;
        }
        loop {
            let note = tokio::select! {
                () = context.cancelled() => break,
                () = self.shared.stop.cancelled() => break,
                () = self.input_closed.cancelled() => break,
                note = notes.recv() => note,
            };
            let note = match note {
                Ok(n) => n,
                // Fell behind: the catalog may have changed meanwhile.
                Err(RecvError::Lagged(_)) => {
                    rmcp::model::ServerNotification::ToolListChangedNotification(Default::default())
                }
                Err(RecvError::Closed) => break,
            };
            // Not accepted by this stream's filter: not its business.
            let sent =
                tokio::time::timeout(Duration::from_secs(5), context.sink().send(note)).await;
            if matches!(
                sent,
                Ok(Err(
                    rmcp::service::SubscriptionSendError::SubscriptionClosed
                ))
            ) {
                break;
            }
        }
        for uri in uris {
            self.unsubscribe_uri(uri, me, &ct).await;
        }
        Ok(())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let items = self
            .list_all(ResourceOp::Templates, "resourceTemplates", &ctx.ct)
            .await;
        let mut result = ListResourceTemplatesResult::default();
        result.resource_templates = items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let Some(server) = self.owner_of(&uri, &ctx.ct).await else {
            return Err(not_listed(&uri));
        };
        let args = json!({"server": server, "uri": uri});
        // What the backend asks first goes to this client (GW-2).
        let (runtime, scope, chat) = (
            self.shared.runtime.clone(),
            self.scope().clone(),
            self.chat(),
        );
        let step = self
            .relayed(
                format!("resources/read {uri}"),
                (
                    request.request_state.as_deref(),
                    request.input_responses.as_ref(),
                ),
                &ctx,
                move |relay, cancel| async move {
                    let options = CallOptions {
                        cancel: Some(cancel),
                        chat: Some(chat),
                        relay,
                        ..CallOptions::default()
                    };
                    runtime
                        .call(&scope, ResourceOp::Read.tool_name(), Some(args), options)
                        .await
                },
            )
            .await?;
        let outcome = match step {
            Step::Round(round) => {
                return Ok(ReadResourceResponse::InputRequired(round_of(round)?));
            }
            Step::Done(outcome) => outcome,
        };
        let mut per_server =
            per_server(outcome).map_err(|e| McpError::internal_error(e.text, None))?;
        let value = per_server.remove(&server).unwrap_or(Value::Null);
        let mut result: ReadResourceResult = serde_json::from_value(value).map_err(|e| {
            McpError::internal_error(
                format!("server \"{server}\" answered resources/read with an invalid result: {e}"),
                None,
            )
        })?;
        // As for a call's result (`results::to_call_result`); a stateless
        // backend's cache hints pass on as it gave them to a stateless
        // client (rmcp fills absent ones with "stale at once"). A
        // session-era client gets none of the 2026-07-28 fields, nor the
        // backend's server info (the gateway is its server).
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        if !is_stateless(&ctx) {
            result.ttl_ms = None;
            result.cache_scope = None;
            for_a_session_client(&mut result.meta);
        }
        Ok(result.into())
    }
}

/// A client's answers to a paused request's questions, by key (or why
/// they are not all there).
type Answers = Result<Map<String, Value>, crate::RelayError>;

/// A shared resource tool's outcome: its canonical value per server.
fn per_server(outcome: ToolOutcome) -> Result<Map<String, Value>, ResourceCallFailed> {
    match (outcome.kind, outcome.canonical) {
        (OutcomeKind::Ok, Some(Value::Object(per_server))) => Ok(per_server),
        // No server of the scope provides resources.
        (OutcomeKind::UnknownTool, _) => Ok(Map::new()),
        _ => Err(ResourceCallFailed {
            text: outcome.projection,
        }),
    }
}

/// A request's raw result (a prompt) as the outcome a [`Step`] ends with.
fn value_outcome(got: Result<Value, String>) -> ToolOutcome {
    match got {
        Ok(value) => {
            let mut outcome = ToolOutcome::failure(OutcomeKind::Ok, String::new());
            outcome.error = None;
            outcome.projection.clear();
            outcome.parts.clear();
            outcome.canonical = Some(value);
            outcome
        }
        Err(e) => ToolOutcome::failure(OutcomeKind::ServerError, e),
    }
}

/// A paused request's `input_required` result, out of a round's response.
fn round_of(response: CallToolResponse) -> Result<rmcp::model::InputRequiredResult, McpError> {
    match response {
        CallToolResponse::InputRequired(r) => Ok(r),
        _ => Err(McpError::internal_error(
            "a round ended with something other than input_required",
            None,
        )),
    }
}

/// How a stateless client's call goes on ([`GatewaySession::step`]).
enum Step {
    /// The call ended.
    Done(ToolOutcome),
    /// A backend asked for input: the client is answered this.
    Round(CallToolResponse),
}

/// Where a backend's requests during a client's request go
/// ([`GatewaySession::relaying`]).
enum Relaying {
    /// A stateless client (its number) that declared `Offers`: asked in
    /// rounds.
    Rounds(u64, crate::Offers),
    /// The request runs in the handler; the relay of its client, if any.
    Inline(Option<Arc<dyn crate::CallerRelay>>),
}

/// Whether the request is of the stateless era.
fn is_stateless(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta
        .protocol_version()
        .is_some_and(|v| v.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
}

/// What a stateless client declared it answers (in the request's `_meta`;
/// nothing when it declared no capabilities); None for a session-era client.
fn stateless_offers(ctx: &RequestContext<RoleServer>) -> Option<crate::Offers> {
    if !is_stateless(ctx) {
        return None;
    }
    // A client that declared nothing offers nothing: its backend is told
    // so (not the gateway's own capabilities), and refuses what needs one
    // (-32021, passed on).
    Some(
        ctx.meta
            .client_capabilities()
            .map(|c| relay::offers_of(&c))
            .unwrap_or_default(),
    )
}

/// The `_meta` key under which a 2026-07-28 server names itself in its
/// results.
const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// A relayed result's `_meta` for a session-era client: without the
/// stateless backend's server info (the gateway is the client's server).
fn for_a_session_client(meta: &mut Option<rmcp::model::MetaObject>) {
    if let Some(m) = meta.as_mut() {
        m.0.remove(SERVER_INFO_META_KEY);
    }
    if meta.as_ref().is_some_and(|m| m.0.is_empty()) {
        *meta = None;
    }
}

/// Whether the request comes from a stateless (2026-07-28) client that
/// declared elicitation in its `_meta`.
fn stateless_with_elicitation(ctx: &RequestContext<RoleServer>) -> bool {
    is_stateless(ctx)
        && ctx
            .meta
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some())
}

/// Whether `uri` is an instance of the URI template `template` (RFC 6570,
/// the simple `{var}` form): its literal parts, in order, with something
/// in the place of each variable.
pub(super) fn matches_template(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    literals.push(rest);
    let (Some(first), Some(last)) = (literals.first(), literals.last()) else {
        return false;
    };
    if literals.len() < 2 || !uri.starts_with(first) || !uri.ends_with(last) {
        return false;
    }
    let Some(mut middle) = uri.get(first.len()..uri.len().saturating_sub(last.len())) else {
        return false;
    };
    for literal in &literals[1..literals.len() - 1] {
        // Each variable takes at least one character before the next literal.
        match middle.get(1..).and_then(|m| m.find(literal)) {
            Some(at) => middle = &middle[1 + at + literal.len()..],
            None => return false,
        }
    }
    !middle.is_empty()
}

pub(super) fn not_listed(uri: &str) -> McpError {
    McpError::resource_not_found(
        format!("no server of this gateway listed the resource {uri:?}"),
        None,
    )
}

/// The MCP form of a catalog entry: public name, real schemas, annotations.
pub(super) fn to_mcp_tool(def: &ToolDefinition) -> Option<Tool> {
    let mut tool = json!({
        "name": def.name,
        "inputSchema": Value::Object((*def.input_schema).clone()),
    });
    if let Some(t) = &def.title {
        tool["title"] = Value::String(t.clone());
    }
    if let Some(d) = &def.description {
        tool["description"] = Value::String(d.clone());
    }
    if let Some(o) = &def.output_schema {
        tool["outputSchema"] = Value::Object((**o).clone());
    }
    if let Some(a) = &def.annotations {
        tool["annotations"] = a.clone();
    }
    match serde_json::from_value(tool) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(tool = %def.name, error = %e, "gateway: a tool could not be listed");
            None
        }
    }
}

pub(super) fn status_tool() -> Tool {
    let schema = json!({"type": "object", "properties": {}});
    let schema = schema.as_object().cloned().unwrap_or_default();
    Tool::new(
        STATUS_TOOL,
        "The gateway's status: every backend server's state, tools, last error and stderr tail (JSON).",
        Arc::new(schema),
    )
}

/// The W3C trace a client's call continues: the `traceparent` (and
/// `tracestate`) of its `_meta` (SEP-414), else of its HTTP request's
/// headers; none when absent or invalid.
fn trace_of(ctx: &RequestContext<RoleServer>) -> Option<crate::TraceContext> {
    use crate::TraceContext;
    if let Some(parent) = ctx.meta.get_traceparent() {
        return TraceContext::continue_from(parent, ctx.meta.get_tracestate());
    }
    let headers = &ctx.extensions.get::<http::request::Parts>()?.headers;
    let parent = headers.get("traceparent").and_then(|v| v.to_str().ok())?;
    // Several `tracestate` headers are one list, in order (W3C).
    let state: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let state = (!state.is_empty()).then(|| state.join(","));
    TraceContext::continue_from(parent, state.as_deref())
}
