//! Running an event through the handlers: each handler in its turn under
//! the deadline, `next()` or a stop, a rewrite checked before it is kept,
//! and what each handler reported.

use super::*;

/// A timed-out or failed handler's classification.
pub(super) enum Failure {
    Timeout,
    Memory(String),
    Throw(String),
}

/// Where a handler waits for its host calls: the host's requests, and
/// those that must wait for the running chain to end.
pub(super) struct Waits<'a> {
    pub(super) rx: &'a Receiver<Req>,
    pub(super) deferred: &'a mut VecDeque<Req>,
}

/// Run one handler of `m` (the mod after `before`) on `ev`, within the
/// deadline. While it awaits its `callTool` calls, the chains those calls
/// raise run on `before` (MOD-5).
pub(super) fn run_handler(
    m: &Loaded,
    index: usize,
    ev: &Value,
    before: &mut [Loaded],
    settings: &ModSettings,
    waits: &mut Waits<'_>,
) -> (Result<Ran, Failure>, Vec<String>) {
    let deadline = settings.deadline;
    let now = u64::try_from(m.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
    let limit = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
    m.deadline_at
        .store(now.saturating_add(limit), Ordering::Relaxed);
    let started = Instant::now();
    let classify = |msg: String| {
        if started.elapsed() >= deadline || msg.contains("interrupted") {
            Failure::Timeout
        } else if msg.contains("out of memory") || msg.contains("memory") && msg.contains("alloc") {
            Failure::Memory(msg)
        } else {
            Failure::Throw(msg)
        }
    };
    let mut result = || -> (Result<Ran, Failure>, Vec<String>) {
        let first = m.ctx.with(|ctx| {
            let f: Function<'_> = ctx
                .globals()
                .get("__mcpvisor_run")
                .map_err(|e| e.to_string())?;
            f.call::<_, String>((index, ev.to_string()))
                .catch(&ctx)
                .map_err(caught)
        });
        let mut out = match first {
            Ok(s) => s,
            Err(e) => return (Err(classify(e)), m.ctx.with(|ctx| take_logs(&ctx))),
        };
        // A promise: run its jobs (outside `with`: the engine is not
        // borrowed then) until it settles or the deadline passes.
        loop {
            let logs = || m.ctx.with(|ctx| take_logs(&ctx));
            let ran: Option<Ran> = serde_json::from_str(&out).ok();
            match ran {
                Some(r) if r.st.done => return (Ok(r), logs()),
                Some(_) if started.elapsed() >= deadline => return (Err(Failure::Timeout), logs()),
                Some(_) => {}
                None => {
                    return (
                        Err(Failure::Throw(format!(
                            "the handler's result is not readable: {out}"
                        ))),
                        logs(),
                    );
                }
            }
            match m.engine.execute_pending_job() {
                Ok(true) => {}
                // Nothing left to run and not settled: it awaits its host
                // calls, or something that will never come.
                Ok(false) => {
                    if m.calls.borrow().is_empty() {
                        return (Err(Failure::Timeout), logs());
                    }
                    let left = deadline.saturating_sub(started.elapsed());
                    match waits.rx.recv_timeout(left) {
                        Ok(Req::Settled { id, result }) => {
                            if m.calls.borrow_mut().remove(&id).is_some() {
                                let settled = m.ctx.with(|ctx| {
                                    ctx.globals()
                                        .get::<_, Function<'_>>("__mcpvisor_settle")
                                        .and_then(|f| f.call::<_, ()>((id, result.to_string())))
                                        .map_err(|e| e.to_string())
                                });
                                if let Err(e) = settled {
                                    return (Err(classify(e)), logs());
                                }
                            }
                        }
                        // The tool.call of this mod's own call: the mods
                        // before it see it, now, on this thread.
                        Ok(Req::Run {
                            event,
                            payload,
                            origin: Some(o),
                            reply,
                        }) if o <= before.len() => {
                            let out = run_chain(&mut before[..o], settings, &event, payload, waits);
                            let _ = reply.send(out);
                        }
                        Ok(other) => waits.deferred.push_back(other),
                        Err(RecvTimeoutError::Timeout) => return (Err(Failure::Timeout), logs()),
                        Err(RecvTimeoutError::Disconnected) => {
                            return (Err(Failure::Throw("the mod host stopped".into())), logs());
                        }
                    }
                }
                Err(_) => return (Err(classify("a promise job failed".into())), logs()),
            }
            let collected = m.ctx.with(|ctx| {
                ctx.globals()
                    .get::<_, Function<'_>>("__mcpvisor_collect")
                    .and_then(|f| f.call::<_, String>(()))
                    .map_err(|e| e.to_string())
            });
            out = match collected {
                Ok(s) => s,
                Err(e) => return (Err(classify(e)), logs()),
            };
        }
    };
    let result = result();
    m.deadline_at.store(u64::MAX, Ordering::Relaxed);
    // The handler is over: its calls still in flight are cancelled, and
    // their results will find no promise.
    let abandoned: Vec<CancellationToken> = m.calls.borrow_mut().drain().map(|(_, c)| c).collect();
    if !abandoned.is_empty() {
        for c in abandoned {
            c.cancel();
        }
        m.ctx.with(|ctx| {
            let _ = ctx.eval::<(), _>("__mcpvisor.calls = {};");
        });
    }
    result
}

/// The text of a prompt's text blocks.
pub(super) fn prompt_text(payload: &Value) -> Option<String> {
    if let Some(p) = payload.get("prompt").and_then(Value::as_str) {
        return Some(p.to_owned());
    }
    let blocks = payload.get("blocks")?.as_array()?;
    Some(
        blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Put the rewritten text into `payload`: `prompt`, and in `blocks` the
/// first text block (the other text blocks go; non-text blocks stay where
/// they were, MOD-4).
pub(super) fn rewrite_prompt(payload: &mut Value, text: &str) {
    if let Some(o) = payload.as_object_mut() {
        o.insert("prompt".into(), Value::String(text.to_owned()));
    }
    let Some(blocks) = payload.get_mut("blocks").and_then(Value::as_array_mut) else {
        return;
    };
    let mut placed = false;
    blocks.retain_mut(|b| {
        if b["type"] != "text" {
            return true;
        }
        if placed {
            return false;
        }
        placed = true;
        b["text"] = Value::String(text.to_owned());
        true
    });
    if !placed {
        blocks.push(json!({"type": "text", "text": text}));
    }
}

pub(super) fn run_chain(
    mods: &mut [Loaded],
    settings: &ModSettings,
    event: &str,
    payload: Value,
    waits: &mut Waits<'_>,
) -> ChainOutcome {
    let mut out = ChainOutcome {
        event: event.to_owned(),
        prompt: None,
        payload: payload.clone(),
        context: Vec::new(),
        ran: Vec::new(),
        stopped_by: None,
        reports: Vec::new(),
    };
    if !EVENTS.contains(&event) {
        out.reports.push(report(
            "host",
            "unknown_event",
            format!("unknown event {event:?} (known: {})", EVENTS.join(", ")),
        ));
        return out;
    }
    let mut ev = payload.clone();
    let prompt = if event == "prompt.submit" {
        prompt_text(&payload)
    } else {
        None
    };
    if let (Some(p), Some(o)) = (&prompt, ev.as_object_mut()) {
        o.insert("prompt".into(), Value::String(p.clone()));
    }
    if let Some(o) = ev.as_object_mut() {
        o.insert("event".into(), Value::String(event.to_owned()));
        o.insert("context".into(), json!([]));
    }
    let input_before = ev.get("input").cloned();
    'chain: for k in 0..mods.len() {
        let (before, rest) = mods.split_at_mut(k);
        let Some(m) = rest.first_mut() else {
            break;
        };
        if m.disabled {
            continue;
        }
        for index in 0..m.handlers.len() {
            if m.handlers[index].0 != event {
                continue;
            }
            let who = format!("{}#{index}", m.name);
            out.ran.push(who.clone());
            let (result, logs) = run_handler(m, index, &ev, before, settings, waits);
            for l in logs {
                out.reports.push(report(&m.name, "log", l));
            }
            match result {
                Ok(ran) => {
                    if let Some(c) = &ran.st.caught {
                        out.reports.push(report(
                            &m.name,
                            "caught",
                            format!("{who} threw {c:?}; its catch handled it"),
                        ));
                    }
                    if let Some(t) = &ran.st.threw {
                        if t.contains("out of memory") {
                            out.reports.push(report(&m.name, "memory", format!("{who} exceeded the memory limit ({} bytes): {t}; the mod is disabled", settings.memory_limit)));
                            m.disabled = true;
                            continue 'chain;
                        }
                        out.reports.push(report(
                            &m.name,
                            "throw",
                            format!("{who} threw: {t}; the chain went on"),
                        ));
                    }
                    // A tool's input is not rewritable (MOD-4).
                    if event == "tool.call" && ran.ev.get("input").cloned() != input_before {
                        out.reports.push(report(&m.name, "refused_rewrite", format!("{who} changed the tool input: tool-input rewrite is not supported, the input is unchanged")));
                    }
                    let mut next_ev = ran.ev;
                    if let (Some(o), Some(i)) = (next_ev.as_object_mut(), &input_before) {
                        o.insert("input".into(), i.clone());
                    }
                    ev = next_ev;
                    if !ran.st.continued {
                        out.stopped_by = Some(who);
                        break 'chain;
                    }
                }
                Err(Failure::Timeout) => {
                    m.timeouts += 1;
                    out.reports.push(report(
                        &m.name,
                        "timeout",
                        format!(
                            "{who} did not finish within {} ms; the chain went on",
                            settings.deadline.as_millis()
                        ),
                    ));
                    if m.timeouts >= 3 {
                        m.disabled = true;
                        out.reports.push(report(
                            &m.name,
                            "disabled",
                            format!("{} timed out three times: disabled", m.name),
                        ));
                        continue 'chain;
                    }
                }
                Err(Failure::Memory(e)) => {
                    out.reports.push(report(
                        &m.name,
                        "memory",
                        format!(
                            "{who} exceeded the memory limit ({} bytes): {e}; the mod is disabled",
                            settings.memory_limit
                        ),
                    ));
                    m.disabled = true;
                    continue 'chain;
                }
                Err(Failure::Throw(e)) => {
                    out.reports.push(report(
                        &m.name,
                        "throw",
                        format!("{who} threw: {e}; the chain went on"),
                    ));
                }
            }
        }
    }
    if let Some(ctx) = ev.get("context").and_then(Value::as_array) {
        out.context = ctx
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| c.to_string())
            })
            .collect();
    }
    let mut payload = payload;
    if event == "prompt.submit" {
        let text = ev
            .get("prompt")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(prompt);
        if let Some(t) = &text {
            rewrite_prompt(&mut payload, t);
        }
        out.prompt = text;
    }
    // The host's own commands and drawing: the handlers' answer is the
    // event itself (`event.output`, `event.text`).
    if matches!(event, "command.run" | "ui.render") {
        if let Some(o) = ev.as_object_mut() {
            o.remove("event");
            o.remove("context");
        }
        payload = ev;
    }
    out.payload = payload;
    out
}
