//! The `tool.call` mod event (MOD-2) at its real point: a link of the
//! policy chain, after trust and hooks. Mods observe the call and may
//! append context for the model; a changed input is reported and ignored
//! (MOD-4), so the call always proceeds with its own arguments.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::messages::call::{CallPolicy, PolicyCall, PolicyVerdict};
use crate::mods::ModHost;

/// The policy.
pub struct ModsPolicy {
    /// The mods' host.
    pub host: Arc<ModHost>,
}

impl CallPolicy for ModsPolicy {
    fn before<'a>(&'a self, call: &'a PolicyCall) -> BoxFuture<'a, PolicyVerdict> {
        Box::pin(async move {
            let payload = json!({
                "tool": call.tool.name,
                "server": call.tool.server,
                "raw_name": call.tool.raw_name,
                "input": Value::Object(call.arguments.clone()),
                "scope": call.scope.to_string(),
            });
            let host = self.host.clone();
            // MOD-5: a mod's own call is seen only by the mods before it.
            let origin = call.mod_origin;
            let ran =
                tokio::task::spawn_blocking(move || host.run_from("tool.call", payload, origin))
                    .await;
            match ran {
                Ok(out) => call.annotate(|a| {
                    a.context.extend(out.context);
                    for r in out.reports.iter().filter(|r| r.kind != "log") {
                        a.notes.push(format!("mod {}: {}", r.mod_name, r.message));
                    }
                }),
                Err(e) => {
                    call.annotate(|a| a.notes.push(format!("the tool.call mods did not run: {e}")))
                }
            }
            PolicyVerdict::Proceed
        })
    }
}
