//! The shared resource tools (RES-2..4, RES-6).

use std::time::Duration;

use rmcp::model::ClientRequest;
use serde_json::{Map, Value};

use crate::messages::budget::apply_budget;
use crate::messages::call::{OutcomeKind, ToolOutcome};
use crate::messages::config::Scope;
use crate::messages::registry::ScopeSnapshot;
use crate::messages::resources::{ResourceOp, render_resource_result};

use super::Runtime;
use super::call::{Started, begin_on_live, needs_wake};

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
            // Resource traffic is activity (RECO-6), and an idle-stopped
            // provider is woken for it like for a tool call (RES-2), also
            // one whose idle stop was claimed just before this read began.
            let mut fresh: Option<std::sync::Arc<ScopeSnapshot>> = None;
            let mut woken = false;
            let started = loop {
                let current = fresh.as_deref().unwrap_or(snap);
                let wake_for = match current.servers.get(target) {
                    None => break None,
                    Some(e) if e.live.is_none() && needs_wake(&e.status) => e.clone(),
                    Some(_) => match begin_on_live(current, target) {
                        Started::Live(live, activity) => break Some((live, activity)),
                        Started::NotLive if server.is_some() => {
                            let e = current.servers.get(target);
                            let state = e.map(|e| e.status.state.to_string());
                            return ToolOutcome::failure(
                                OutcomeKind::ServerNotReady,
                                format!(
                                    "server \"{target}\" is {}",
                                    state.unwrap_or_else(|| "gone".into())
                                ),
                            );
                        }
                        Started::NotLive => {
                            shown.push(format!("[MCP server \"{target}\"] is not connected"));
                            break None;
                        }
                        Started::Closing(e) => e.clone(),
                    },
                };
                if woken {
                    break None;
                }
                woken = true;
                match self.wake(&wake_for).await {
                    Ok(()) => match self.snapshot(scope) {
                        Some(now) => fresh = Some(now),
                        None => break None,
                    },
                    Err(e) if server.is_some() => {
                        return ToolOutcome::failure(
                            OutcomeKind::ServerNotReady,
                            format!("server \"{target}\": {e}"),
                        );
                    }
                    Err(e) => {
                        shown.push(format!("[MCP server \"{target}\"] failed: {e}"));
                        break None;
                    }
                }
            };
            let Some((live, _activity)) = started else {
                continue;
            };
            let request = match op {
                ResourceOp::List => ClientRequest::ListResourcesRequest(
                    rmcp::model::ListResourcesRequest::with_param(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
                    ),
                ),
                ResourceOp::Templates => ClientRequest::ListResourceTemplatesRequest(
                    rmcp::model::ListResourceTemplatesRequest::with_param(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
                    ),
                ),
                ResourceOp::Read => {
                    ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(
                        rmcp::model::ReadResourceRequestParams::new(uri.unwrap_or_default()),
                    ))
                }
            };
            let value = match request_value(&live.peer, request, timeout).await {
                Ok(mut v) => {
                    crate::messages::trust::redact_value(&mut v, &live.redactions);
                    v
                }
                Err(e) if server.is_some() => {
                    let e = crate::messages::trust::redact(&e, &live.redactions);
                    return ToolOutcome::failure(
                        OutcomeKind::ServerError,
                        format!("server \"{target}\": {e}"),
                    );
                }
                // Listing across servers: one failing server does not hide the others.
                Err(e) => {
                    let e = crate::messages::trust::redact(&e, &live.redactions);
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
        }
    }
}

/// The longest request timeout of a snapshot's servers (resource requests).
pub(super) fn entry_timeout(snap: &ScopeSnapshot) -> Duration {
    snap.servers
        .values()
        .map(|e| e.config.request_timeout)
        .max()
        .unwrap_or(Duration::from_secs(15))
}

/// Send one request with a timeout and return its result as raw JSON.
async fn request_value(
    peer: &rmcp::service::Peer<rmcp::service::RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<Value, String> {
    let handle = peer
        .send_request_with_option(
            request,
            rmcp::service::PeerRequestOptions::with_timeout(timeout),
        )
        .await
        .map_err(|e| e.to_string())?;
    let result = handle.await_response().await.map_err(|e| e.to_string())?;
    serde_json::to_value(&result).map_err(|e| e.to_string())
}
