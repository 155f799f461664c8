//! The browser's tools as an in-process MCP server: their definitions,
//! what each does on the page over CDP, and the URL check.

use super::*;

/// A CDP request's error: the action failed part way (effect unknown).
pub(super) fn cdp<T>(r: Result<T, chromiumoxide::error::CdpError>) -> Result<T, ToolFailure> {
    r.map_err(|e| ToolFailure::failed(e.to_string()))
}

/// The tools of one activation: an MCP server over an in-process stream.
#[derive(Clone)]
pub(super) struct BrowserTools {
    pub(super) sessions: SessionsHandle,
    pub(super) config: Arc<BrowserNativeConfig>,
    pub(super) attach: Option<Arc<Exclusive>>,
}

pub(super) fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Tool {
    crate::providers::tool(name, description, GUIDANCE, props, required)
}

impl BrowserTools {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "navigate",
                "Open a URL in this activation's browser (a fresh headless Chromium, started on first use). Returns the page's title and URL; tokens of earlier snapshots become stale.",
                json!({"url": {"type": "string", "description": "http(s), file, data or about URL"}}),
                &["url"],
            ),
            tool(
                "snapshot",
                "List the page's interactable elements, each with a token (like g3e17) next to its role and name, and the page's text. A new snapshot makes every earlier token stale.",
                json!({}),
                &[],
            ),
            tool(
                "click",
                "Click the element with this token from the latest snapshot.",
                json!({"token": {"type": "string"}}),
                &["token"],
            ),
            tool(
                "type",
                "Focus the element with this token from the latest snapshot and type the text into it.",
                json!({"token": {"type": "string"}, "text": {"type": "string"}}),
                &["token", "text"],
            ),
            tool(
                "press",
                "Press a key (Enter, Tab, Escape, ArrowDown, Backspace, a letter…) in the focused element.",
                json!({"key": {"type": "string"}}),
                &["key"],
            ),
            tool(
                "screenshot",
                "A PNG screenshot of the page's viewport.",
                json!({}),
                &[],
            ),
            tool(
                "close",
                "Close this activation's browser (its process is reaped); the next navigate starts a new one with a fresh profile.",
                json!({}),
                &[],
            ),
        ];
        if self.config.evaluate {
            tools.push(tool(
                "evaluate",
                "Evaluate a JavaScript expression in the page and return its JSON value.",
                json!({"expression": {"type": "string"}}),
                &["expression"],
            ));
        }
        tools
    }

    fn masked(&self) -> bool {
        self.attach
            .as_ref()
            .is_some_and(|a| a.masked_for(&self.sessions.activation))
    }

    async fn session(&self) -> Result<Arc<BrowserSession>, BrowserError> {
        let limit = self.config.launch_timeout + Duration::from_secs(5);
        let resource = self.sessions.acquire(limit).await?;
        resource
            .as_any()
            .downcast::<BrowserSession>()
            .map_err(|_| BrowserError::NotABrowser)
    }

    /// The browser is gone: close what is left of it and let the next call
    /// start a new one.
    async fn replace(&self) {
        if let Err(e) = self.sessions.reset().await {
            tracing::warn!(activation = %self.sessions.activation, "{e}");
        }
    }

    async fn run(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        // Arguments are checked before a browser is started.
        let known = self.tools().iter().any(|t| t.name == name);
        if !known {
            return Err(ToolFailure::refused(format!(
                "no tool {name:?} in this provider"
            )));
        }
        if name == "close" {
            let had = self
                .sessions
                .reset()
                .await
                .map_err(|e| ToolFailure::failed(e.to_string()))?;
            return Ok(vec![ContentBlock::text(
                if had.processes_reaped.is_empty() {
                    "no browser was open".to_owned()
                } else {
                    format!(
                        "the browser was closed (process {} reaped)",
                        had.processes_reaped
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            )]);
        }
        let session = self
            .session()
            .await
            .map_err(|e| ToolFailure::not_done(e.to_string()))?;
        let result = session.act(name, args, cancel).await;
        if let Err(f) = &result
            && f.kind == OutcomeKind::TransportLostDuringCall
        {
            // The browser is gone: the next call starts a new one.
            drop(session);
            self.replace().await;
        }
        result
    }
}

/// The URL schemes `navigate` opens.
pub(super) fn check_url(url: &str) -> Result<(), BrowserError> {
    let parsed = url::Url::parse(url).map_err(|source| BrowserError::NotAUrl {
        url: url.to_owned(),
        source,
    })?;
    match parsed.scheme() {
        "http" | "https" | "file" | "data" | "about" => Ok(()),
        other => Err(BrowserError::Scheme {
            url: url.to_owned(),
            scheme: other.to_owned(),
        }),
    }
}

impl ServerHandler for BrowserTools {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        rmcp::model::ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                format!("mcpvisor {}", self.config.name),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "A headless Chromium of this activation's own (browser-native). {GUIDANCE}"
            ))
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut page = ListToolsResult::default();
        // SEAT-9: masked (absent), not failing, while another activation
        // owns the attached browser.
        if !self.masked() {
            page.tools = self.tools();
        }
        Ok(page)
    }

    async fn on_initialized(&self, ctx: rmcp::service::NotificationContext<RoleServer>) {
        if let Some(state) = &self.attach {
            state.register(self.sessions.activation.clone(), ctx.peer);
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        Ok(crate::providers::tool_result(
            self.run(&request.name, &args, &ctx.ct).await,
        ))
    }
}

impl BrowserSession {
    /// Run one action of this activation (SEAT-8: one at a time; one whose
    /// caller gave up while it queued is skipped, never sent). A tab that
    /// does not answer within the timeout (a page that never finishes
    /// loading holds every later action of the session) is replaced by a
    /// blank one, and the caller is told.
    pub(super) async fn act(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        let mut guard = self.live.lock().await;
        if cancel.is_cancelled() || self.cancel.is_cancelled() {
            return Err(ToolFailure::skipped(format!(
                "{name} was cancelled while it waited for the activation's previous action; it was not run"
            )));
        }
        let Some(live) = guard.as_mut() else {
            return Err(ToolFailure::not_done(
                "the browser was closed; the next call starts a new one",
            ));
        };
        let result = self.act_on(live, name, args, cancel).await;
        match result {
            Err(f) if f.kind == OutcomeKind::Timeout => Err(self.replace_tab(live, f).await),
            other => other,
        }
    }

    /// Replace the tab that timed out by a blank one; `why` says so.
    pub(super) async fn replace_tab(&self, live: &mut Live, why: ToolFailure) -> ToolFailure {
        live.valid = None;
        let fresh =
            tokio::time::timeout(Duration::from_secs(5), live.browser.new_page("about:blank"))
                .await;
        match fresh {
            Ok(Ok(fresh)) => {
                let old = std::mem::replace(&mut live.page, fresh);
                let _ = tokio::time::timeout(Duration::from_secs(2), old.close()).await;
                why.and(
                    "; the tab that did not answer was replaced by a blank one (its page state is gone): navigate again",
                )
            }
            _ => why.and("; replacing the tab that did not answer failed too"),
        }
    }

    pub(super) async fn act_on(
        &self,
        live: &mut Live,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        let text_arg = |key: &str| crate::providers::text_arg(args, name, key);
        let page = live.page.clone();
        match name {
            "navigate" => {
                let url = text_arg("url")?;
                check_url(&url).map_err(|e| ToolFailure::refused(e.to_string()))?;
                live.valid = None;
                let (title, at) = self
                    .guarded("navigate", cancel, async {
                        cdp(page.goto(url.as_str()).await)?;
                        let title = cdp(page.get_title().await)?.unwrap_or_default();
                        let at = cdp(page.url().await)?.unwrap_or_default();
                        Ok((title, at))
                    })
                    .await?;
                Ok(vec![ContentBlock::text(format!(
                    "navigated to {at} (title {title:?}); take a snapshot to act on it"
                ))])
            }
            "snapshot" => {
                live.generation += 1;
                let generation = live.generation;
                let script = SNAPSHOT_JS.replace("__GEN__", &generation.to_string());
                let raw: String = self
                    .guarded("snapshot", cancel, async {
                        cdp(page.evaluate(script.as_str()).await)?
                            .into_value::<String>()
                            .map_err(|e| ToolFailure::failed(e.to_string()))
                    })
                    .await?;
                let snap: Snapshot = serde_json::from_str(&raw).map_err(|e| {
                    ToolFailure::failed(format!("the snapshot script returned bad JSON: {e}"))
                })?;
                live.valid = Some(generation);
                Ok(vec![ContentBlock::text(snap.render(generation))])
            }
            "click" | "type" => {
                let token = text_arg("token")?;
                let text = if name == "type" {
                    Some(text_arg("text")?)
                } else {
                    None
                };
                check_token(&token, live.valid).map_err(|e| ToolFailure::refused(e.to_string()))?;
                let selector = format!("[data-mcpvisor-token=\"{token}\"]");
                self.guarded(name, cancel, async {
                    let el = page.find_element(selector.as_str()).await.map_err(|_| {
                        ToolFailure::not_done(format!(
                            "element {token} is no longer on the page; take a new snapshot"
                        ))
                    })?;
                    cdp(el.click().await)?;
                    if let Some(text) = &text {
                        cdp(el.type_str(text).await)?;
                    }
                    Ok(())
                })
                .await?;
                Ok(vec![ContentBlock::text(match &text {
                    Some(t) => format!(
                        "typed {} character(s) into {token}; take a snapshot to verify",
                        t.chars().count()
                    ),
                    None => format!(
                        "clicked {token}; take a snapshot to see the result (a click cannot be undone)"
                    ),
                })])
            }
            "press" => {
                let key = text_arg("key")?;
                self.guarded("press", cancel, async {
                    let el = match page.find_element(":focus").await {
                        Ok(el) => el,
                        Err(_) => cdp(page.find_element("body").await)?,
                    };
                    cdp(el.press_key(key.as_str()).await)?;
                    Ok(())
                })
                .await?;
                Ok(vec![ContentBlock::text(format!(
                    "pressed {key}; take a snapshot to see the result"
                ))])
            }
            "screenshot" => {
                let png = self
                    .guarded("screenshot", cancel, async {
                        let params = chromiumoxide::page::ScreenshotParams::builder()
                            .format(chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat::Png)
                            .build();
                        cdp(page.screenshot(params).await)
                    })
                    .await?;
                let data = base64::engine::general_purpose::STANDARD.encode(&png);
                Ok(vec![ContentBlock::image(data, "image/png")])
            }
            "evaluate" => {
                let expression = text_arg("expression")?;
                let value: Value = self
                    .guarded("evaluate", cancel, async {
                        let r = cdp(page.evaluate(expression.as_str()).await)?;
                        Ok(r.value().cloned().unwrap_or(Value::Null))
                    })
                    .await?;
                Ok(vec![ContentBlock::text(value.to_string())])
            }
            other => Err(ToolFailure::refused(format!(
                "no tool {other:?} in this provider"
            ))),
        }
    }
}
