//! `options.host.callTool` (capability `tools`): a mod's tool call through
//! the runtime's whole call pipeline (trust, hooks, result checks), as a
//! promise. The call runs on the runtime's tokio runtime; its result comes
//! back to the host's thread as a message, which settles the promise.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Req;
use crate::messages::call::{ModelEdit, ToolOutcome};
use crate::messages::config::Scope;

/// A tool call a mod asked for with `callTool`.
#[derive(Debug, Clone)]
pub struct ModToolCall {
    /// The calling mod's load index (MOD-5: the `tool.call` it raises is
    /// seen only by the mods before it).
    pub origin: usize,
    /// `opts.scope` (`global`, `agent:ID`, `chat:ID`); global by default.
    pub scope: Scope,
    /// The namespaced tool name.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
    /// Cancelled when the calling handler ends (done or past its deadline).
    pub cancel: CancellationToken,
}

/// How the mod host reaches the runtime for `callTool`: the call's result as
/// the JSON the promise resolves to ([`outcome_json`]), or `{"refused": …}`.
pub type ToolCaller = Arc<dyn Fn(ModToolCall) -> BoxFuture<'static, Value> + Send + Sync>;

/// What the host's thread lends the engines' host APIs.
#[derive(Clone)]
pub(super) struct Host {
    pub(super) tx: Sender<Req>,
    pub(super) io: Option<tokio::runtime::Handle>,
    pub(super) caller: Arc<OnceLock<ToolCaller>>,
    /// Host-wide call ids: a result settles only the call it belongs to.
    pub(super) ids: Arc<AtomicU64>,
}

impl Host {
    /// Start mod `origin`'s call; `{"id": n}`, or `{"refused": why}`.
    pub(super) fn call_tool(
        &self,
        origin: usize,
        calls: &RefCell<HashMap<u64, CancellationToken>>,
        name: &str,
        args: &str,
        scope: &str,
    ) -> Value {
        let Some(caller) = self.caller.get().cloned() else {
            return json!({"refused": "callTool needs a runtime: this mod host was started without one (as `mcpvisor mods test` is)"});
        };
        let Some(io) = &self.io else {
            return json!({"refused": "callTool needs the runtime's tokio runtime (the mod host was started outside one)"});
        };
        let scope = match parse_scope(scope) {
            Ok(s) => s,
            Err(e) => return json!({"refused": e.to_string()}),
        };
        let arguments: Value = match serde_json::from_str(args) {
            Ok(v @ Value::Object(_)) => v,
            Ok(other) => {
                return json!({"refused": format!("callTool {name}: the arguments must be an object, not {other}")});
            }
            Err(e) => {
                return json!({"refused": format!("callTool {name}: unreadable arguments: {e}")});
            }
        };
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        calls.borrow_mut().insert(id, cancel.clone());
        let call = ModToolCall {
            origin,
            scope,
            name: name.to_owned(),
            arguments,
            cancel,
        };
        let tx = self.tx.clone();
        io.spawn(async move {
            let result = caller(call).await;
            let _ = tx.send(Req::Settled { id, result });
        });
        json!({ "id": id })
    }
}

/// `opts.scope` as a scope: empty or `global`, `agent:ID`, `chat:ID`.
fn parse_scope(s: &str) -> Result<Scope, UnknownScope> {
    match s.split_once(':') {
        _ if s.is_empty() || s == "global" => Ok(Scope::Global),
        Some(("agent", id)) if !id.is_empty() => Ok(Scope::Agent(id.to_owned())),
        Some(("chat", id)) if !id.is_empty() => Ok(Scope::Chat(id.to_owned())),
        _ => Err(UnknownScope(s.to_owned())),
    }
}

/// A `callTool` scope that is none of `global`, `agent:ID`, `chat:ID`.
#[derive(Debug, thiserror::Error)]
#[error("callTool: unknown scope {0:?} (expected \"global\", \"agent:ID\" or \"chat:ID\")")]
struct UnknownScope(String);

/// What a `callTool` promise resolves to: `kind` (`ok`, `tool_error`, …),
/// `text` (what the model would see), `error`, `structured`, `context` (what
/// policies appended, the `tool.call` mods' context among it) and `notes`.
pub fn outcome_json(out: &ToolOutcome) -> Value {
    let context: Vec<&str> = out
        .model_edits
        .iter()
        .filter_map(|e| match e {
            ModelEdit::Append(t) => Some(t.as_str()),
            ModelEdit::Replace(_) => None,
        })
        .collect();
    json!({
        "kind": out.kind,
        "text": out.projection,
        "error": out.error,
        "structured": out.canonical,
        "context": context,
        "notes": out.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_a_wrong_one_is_named() {
        assert_eq!(parse_scope("").unwrap(), Scope::Global);
        assert_eq!(parse_scope("global").unwrap(), Scope::Global);
        assert_eq!(parse_scope("agent:a1").unwrap(), Scope::Agent("a1".into()));
        assert_eq!(parse_scope("chat:c").unwrap(), Scope::Chat("c".into()));
        for bad in ["agent:", "team:x", "Global"] {
            let e = parse_scope(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
