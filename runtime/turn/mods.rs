//! The mods' events of a turn (feature `mods`): `prompt.submit` before the
//! first round, `turn.start`/`turn.end`, and their reports as turn events.

use super::*;

/// A mods chain on the mod host's thread.
#[cfg(feature = "mods")]
pub(super) async fn run_mods(
    host: &std::sync::Arc<crate::mods::ModHost>,
    event: &'static str,
    payload: Value,
) -> crate::mods::ChainOutcome {
    let h = host.clone();
    let p = payload.clone();
    match tokio::task::spawn_blocking(move || h.run(event, p)).await {
        Ok(out) => out,
        Err(e) => crate::mods::ChainOutcome {
            event: event.to_owned(),
            payload,
            prompt: None,
            context: Vec::new(),
            ran: Vec::new(),
            stopped_by: None,
            reports: vec![crate::mods::ModReport {
                mod_name: "host".into(),
                kind: "host_error".into(),
                message: format!("the mod chain's task failed: {e}"),
            }],
        },
    }
}

/// Every report of a chain as a `Hook` event (`mods:<event>`).
#[cfg(feature = "mods")]
pub(super) fn emit_mod_reports(
    events: Option<&mpsc::UnboundedSender<TurnEvent>>,
    event: &str,
    out: &crate::mods::ChainOutcome,
) {
    let Some(tx) = events else { return };
    for r in &out.reports {
        let _ = tx.send(TurnEvent::Hook {
            hook_event: format!("mods:{event}"),
            verdict: r.kind.clone(),
            text: format!("{}: {}", r.mod_name, r.message),
        });
    }
}

/// MOD-2/4 at their real points: `turn.start` (observers), then
/// `prompt.submit` on the direct human prompt: its rewritten text replaces
/// the prompt, and appended context follows it.
#[cfg(feature = "mods")]
pub(super) async fn mod_prompt(
    host: &std::sync::Arc<crate::mods::ModHost>,
    request: &mut TurnRequest,
    events: Option<&mpsc::UnboundedSender<TurnEvent>>,
) {
    let start = run_mods(
        host,
        "turn.start",
        serde_json::json!({"prompt": request.prompt}),
    )
    .await;
    emit_mod_reports(events, "turn.start", &start);
    let out = run_mods(
        host,
        "prompt.submit",
        serde_json::json!({"prompt": request.prompt}),
    )
    .await;
    emit_mod_reports(events, "prompt.submit", &out);
    if let Some(text) = out.prompt.filter(|p| *p != request.prompt) {
        if let Some(tx) = events {
            let _ = tx.send(TurnEvent::Hook {
                hook_event: "mods:prompt.submit".into(),
                verdict: "rewrite".into(),
                text: text.clone(),
            });
        }
        request.prompt = text;
    }
    if !out.context.is_empty() {
        let context = out.context.join("\n\n");
        if let Some(tx) = events {
            let _ = tx.send(TurnEvent::Hook {
                hook_event: "mods:prompt.submit".into(),
                verdict: "context".into(),
                text: context.clone(),
            });
        }
        request.prompt = format!("{}\n\n{context}", request.prompt);
    }
}
