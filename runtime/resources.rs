//! The shared resource tools (RES-2..4, RES-6), and prompts (for the gateway).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::messages::budget::apply_budget;
use crate::messages::call::{OutcomeKind, ToolOutcome};
use crate::messages::capabilities::CallerRelay;
use crate::messages::config::Scope;
use crate::messages::registry::{ActivityGuard, LiveConn, ScopeSnapshot};
use crate::messages::resources::{ResourceOp, render_resource_result};

use super::call::{Started, begin_on_live, needs_wake};
use super::{Runtime, RuntimeError};

impl Runtime {
    /// A shared resource tool (RES-2..4, RES-6): resolve the server in the
    /// caller's scope (an invisible server gets the same error as an unknown
    /// one), pass cursors and URIs through untouched, and show the model the
    /// server name plus compact JSON with blobs replaced by their length.
    pub(super) async fn resource_call(
        &self,
        scope: &Scope,
        snap: &ScopeSnapshot,
        op: ResourceOp,
        args: &Map<String, Value>,
        timeout: Duration,
        relay: Option<&Arc<dyn CallerRelay>>,
    ) -> ToolOutcome {
        let server = args.get("server").and_then(Value::as_str);
        let cursor = args
            .get("cursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let targets: Vec<&str> = match server {
            Some(s) if snap.resource_providers.iter().any(|p| p == s) => vec![s],
            Some(s) => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidArguments,
                    format!(
                        "unknown resource server \"{s}\"; known: {}",
                        snap.resource_providers.join(", ")
                    ),
                );
            }
            None if op == ResourceOp::Read => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidArguments,
                    "\"server\" is required",
                );
            }
            None => snap.resource_providers.iter().map(String::as_str).collect(),
        };
        let uri = args.get("uri").and_then(Value::as_str);
        if op == ResourceOp::Read && uri.is_none() {
            return ToolOutcome::failure(OutcomeKind::InvalidArguments, "\"uri\" is required");
        }
        let mut canonical = Map::new();
        let mut shown = Vec::new();
        for target in targets {
            let (live, _activity) = match self.live_for(scope, snap, target).await {
                Ok(started) => started,
                Err(Unavailable::Gone) => continue,
                Err(Unavailable::NotLive(state)) if server.is_some() => {
                    return ToolOutcome::failure(
                        OutcomeKind::ServerNotReady,
                        format!("server \"{target}\" is {state}"),
                    );
                }
                Err(Unavailable::NotLive(_)) => {
                    shown.push(format!("[MCP server \"{target}\"] is not connected"));
                    continue;
                }
                Err(Unavailable::WakeFailed(e)) if server.is_some() => {
                    return ToolOutcome::failure(
                        OutcomeKind::ServerNotReady,
                        format!("server \"{target}\": {e}"),
                    );
                }
                Err(Unavailable::WakeFailed(e)) => {
                    shown.push(format!("[MCP server \"{target}\"] failed: {e}"));
                    continue;
                }
            };
            let asked = match op {
                ResourceOp::List => live.client.list_resources(cursor.clone(), timeout).await,
                ResourceOp::Templates => {
                    live.client
                        .list_resource_templates(cursor.clone(), timeout)
                        .await
                }
                ResourceOp::Read => {
                    let answerer = answerer_for(snap, target, &live, relay);
                    live.client
                        .read_resource(uri.unwrap_or_default().to_owned(), timeout, &answerer)
                        .await
                }
            };
            let value = match asked {
                Ok(mut v) => {
                    crate::messages::trust::redact_value(&mut v, &live.redactions);
                    v
                }
                Err(e) if server.is_some() => {
                    let e = crate::messages::trust::redact(&e.to_string(), &live.redactions);
                    return ToolOutcome::failure(
                        OutcomeKind::ServerError,
                        format!("server \"{target}\": {e}"),
                    );
                }
                // Listing across servers: one failing server does not hide the others.
                Err(e) => {
                    let e = crate::messages::trust::redact(&e.to_string(), &live.redactions);
                    shown.push(format!("[MCP server \"{target}\"] failed: {e}"));
                    continue;
                }
            };
            shown.push(render_resource_result(target, &value));
            canonical.insert(target.to_owned(), value);
        }
        let projection = if shown.is_empty() {
            "No resource server answered.".to_owned()
        } else {
            shown.join("\n")
        };
        let (projection, cut_bytes) = apply_budget(
            &projection,
            self.inner.limits.max_result_bytes,
            "a tool result",
        );
        ToolOutcome {
            kind: OutcomeKind::Ok,
            side_effects: OutcomeKind::Ok.side_effects(),
            error: None,
            parts: vec![crate::messages::projection::ProjectionPart::Text {
                text: projection.clone(),
            }],
            projection,
            images: Vec::new(),
            cut_bytes,
            canonical: Some(Value::Object(canonical)),
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
}

/// Why a server could not take a resource or prompt request.
pub(super) enum Unavailable {
    /// Not in the scope (any more), or still not live after a wake.
    Gone,
    /// Not connected and not idle-stopped; its state.
    NotLive(String),
    /// It was idle-stopped and could not be woken.
    WakeFailed(String),
}

impl Runtime {
    /// Start a request's activity on `target`'s live connection (RECO-6),
    /// waking it first when it is idle-stopped (RES-2) or its idle stop was
    /// claimed just before — once.
    pub(super) async fn live_for(
        &self,
        scope: &Scope,
        snap: &ScopeSnapshot,
        target: &str,
    ) -> Result<(LiveConn, ActivityGuard), Unavailable> {
        let mut fresh: Option<Arc<ScopeSnapshot>> = None;
        let mut woken = false;
        loop {
            let current = fresh.as_deref().unwrap_or(snap);
            let wake_for = match current.servers.get(target) {
                None => return Err(Unavailable::Gone),
                Some(e) if e.live.is_none() && needs_wake(&e.status) => e.clone(),
                Some(e) => match begin_on_live(current, target) {
                    Started::Live(live, activity) => return Ok((live, activity)),
                    Started::NotLive => {
                        return Err(Unavailable::NotLive(e.status.state.to_string()));
                    }
                    Started::Closing(e) => e.clone(),
                },
            };
            if woken {
                return Err(Unavailable::Gone);
            }
            woken = true;
            self.wake(&wake_for)
                .await
                .map_err(Unavailable::WakeFailed)?;
            fresh = Some(self.snapshot(scope).ok_or(Unavailable::Gone)?);
        }
    }

    /// `prompts/list` of every server of `scope` that declared prompts:
    /// per server, every page's prompts (cursors followed, at most 100
    /// pages) as raw JSON with secrets redacted, or why that server could
    /// not answer. Prompts are for a client's user (the gateway passes
    /// them on); they are not offered to the model as tools.
    pub async fn list_prompts(&self, scope: &Scope) -> Vec<(String, Result<Vec<Value>, String>)> {
        let Some(snap) = self.snapshot(scope) else {
            return Vec::new();
        };
        let providers: Vec<String> = snap
            .servers
            .iter()
            .filter(|(_, e)| e.status.prompts)
            .map(|(name, _)| name.clone())
            .collect();
        let mut out = Vec::new();
        for server in providers {
            let listed = self.prompt_pages(scope, &snap, &server).await;
            out.push((server, listed));
        }
        out
    }

    async fn prompt_pages(
        &self,
        scope: &Scope,
        snap: &ScopeSnapshot,
        server: &str,
    ) -> Result<Vec<Value>, String> {
        let (live, _activity) = self
            .live_for(scope, snap, server)
            .await
            .map_err(|u| u.describe(server))?;
        let mut prompts = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let mut page = live
                .client
                .list_prompts(cursor.clone(), entry_timeout(snap))
                .await
                .map_err(|e| crate::messages::trust::redact(&e.to_string(), &live.redactions))?;
            crate::messages::trust::redact_value(&mut page, &live.redactions);
            if let Some(list) = page.get_mut("prompts").and_then(Value::as_array_mut) {
                prompts.append(list);
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok(prompts)
    }

    /// `prompts/get` of `server`'s prompt `name`: the raw `GetPromptResult`
    /// with secrets redacted. Goes through no trust gate: like resources, a
    /// prompt is data from a server that was trusted to connect.
    pub async fn get_prompt(
        &self,
        scope: &Scope,
        server: &str,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<Value, RuntimeError> {
        self.get_prompt_relayed(scope, server, name, arguments, None)
            .await
    }

    /// [`Runtime::get_prompt`] for a gateway's client: what a stateless
    /// server asks before it answers (`input_required`) goes to `relay`
    /// first, for what that client declared (GW-2).
    pub async fn get_prompt_relayed(
        &self,
        scope: &Scope,
        server: &str,
        name: &str,
        arguments: Option<Map<String, Value>>,
        relay: Option<Arc<dyn CallerRelay>>,
    ) -> Result<Value, RuntimeError> {
        self.server_request(
            scope,
            server,
            Ask::Prompt {
                name,
                arguments,
                relay,
            },
        )
        .await
    }
}

impl Runtime {
    /// `resources/subscribe` to `uri` at `server` (in the stateless era, a
    /// `subscriptions/listen` stream for it): the server's
    /// `notifications/resources/updated` then arrive as
    /// [`RuntimeEvent::ResourceUpdated`](crate::RuntimeEvent::ResourceUpdated).
    /// A subscription lives as long as the server's connection: after a
    /// reconnect it must be made again.
    pub async fn subscribe_resource(
        &self,
        scope: &Scope,
        server: &str,
        uri: &str,
    ) -> Result<(), RuntimeError> {
        self.server_request(scope, server, Ask::Subscribe { uri, on: true })
            .await
            .map(|_| ())
    }

    /// `completion/complete` at `server`: `params` are the request's
    /// parameters (`ref`, `argument`, `context`) in the server's own names
    /// (its prompt's name, its resource template); the result as raw JSON,
    /// secrets redacted.
    pub async fn complete(
        &self,
        scope: &Scope,
        server: &str,
        params: Value,
    ) -> Result<Value, RuntimeError> {
        self.server_request(scope, server, Ask::Complete { params })
            .await
    }

    /// `resources/unsubscribe` from `uri` at `server`.
    pub async fn unsubscribe_resource(
        &self,
        scope: &Scope,
        server: &str,
        uri: &str,
    ) -> Result<(), RuntimeError> {
        self.server_request(scope, server, Ask::Subscribe { uri, on: false })
            .await
            .map(|_| ())
    }

    /// One request to `server`'s live connection (woken if idle-stopped),
    /// its result as raw JSON with secrets redacted.
    async fn server_request(
        &self,
        scope: &Scope,
        server: &str,
        ask: Ask<'_>,
    ) -> Result<Value, RuntimeError> {
        let err = |message: String| RuntimeError::Server {
            server: server.to_owned(),
            message,
        };
        let snap = self
            .snapshot(scope)
            .ok_or_else(|| err(format!("no such server in scope {scope}")))?;
        let (live, _activity) = self
            .live_for(scope, &snap, server)
            .await
            .map_err(|u| err(u.describe(server)))?;
        let timeout = entry_timeout(&snap);
        let asked = match ask {
            Ask::Prompt {
                name,
                arguments,
                relay,
            } => {
                let answerer = answerer_for(&snap, server, &live, relay.as_ref());
                live.client
                    .get_prompt(name, arguments, timeout, &answerer)
                    .await
            }
            Ask::Complete { params } => live.client.complete(params, timeout).await,
            Ask::Subscribe { uri, on } => {
                live.client
                    .subscription(uri, on, timeout, live.era, &live.handlers, server)
                    .await
            }
        };
        let mut value = asked.map_err(|e| {
            err(crate::messages::trust::redact(
                &e.to_string(),
                &live.redactions,
            ))
        })?;
        crate::messages::trust::redact_value(&mut value, &live.redactions);
        Ok(value)
    }
}

impl Unavailable {
    fn describe(&self, server: &str) -> String {
        match self {
            Self::Gone => format!("server \"{server}\" is gone"),
            Self::NotLive(state) => format!("server \"{server}\" is {state}"),
            Self::WakeFailed(e) => format!("server \"{server}\" could not be woken: {e}"),
        }
    }
}

/// The longest request timeout of a snapshot's servers (resource requests).
/// Who answers `server`'s input requests on `live` (ERA-5).
fn answerer_for<'a>(
    snap: &ScopeSnapshot,
    server: &'a str,
    live: &'a crate::messages::registry::LiveConn,
    relay: Option<&'a Arc<dyn CallerRelay>>,
) -> crate::transport::client::Answerer<'a> {
    crate::transport::client::Answerer {
        relay,
        stateless: live.era == crate::messages::server::Era::Stateless,
        routes: &live.progress,
        handlers: &live.handlers,
        server,
        redactions: &live.redactions,
        max_rounds: snap
            .servers
            .get(server)
            .map_or(crate::messages::config::DEFAULT_MAX_INPUT_ROUNDS, |e| {
                e.config.max_input_rounds
            }),
    }
}

pub(super) fn entry_timeout(snap: &ScopeSnapshot) -> Duration {
    snap.servers
        .values()
        .map(|e| e.config.request_timeout)
        .max()
        .unwrap_or(Duration::from_secs(15))
}

/// A request of [`Runtime::server_request`].
enum Ask<'a> {
    /// `prompts/get`.
    Prompt {
        name: &'a str,
        arguments: Option<Map<String, Value>>,
        relay: Option<Arc<dyn CallerRelay>>,
    },
    /// `resources/subscribe` (`on`) or `resources/unsubscribe`.
    Subscribe { uri: &'a str, on: bool },
    /// `completion/complete`.
    Complete { params: Value },
}
