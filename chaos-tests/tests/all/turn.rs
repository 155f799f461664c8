//! The tool loop (LOOP-1..7, TRUST-6, TRUST-7) against a scripted model
//! endpoint on 127.0.0.1 speaking both real wire formats, with real MCP
//! tools (fault-server) behind it. Each test asserts on the exact request
//! bodies the runtime sent.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use mcpvisor::{
    ModelRoute, Provider, Runtime, Scope, Secret, SecretStore, StoreError, TrustMode, TurnError,
    TurnEvent, TurnOutcome, TurnRequest,
};
use mcpvisor_chaos::model::{
    Reply, ScriptedModel, anthropic_text, anthropic_tool_use, openai_call_chunks, openai_partial,
    openai_stream, openai_text, openai_tool_calls, responses_text, responses_tool_calls,
    responses_tool_search,
};
use mcpvisor_chaos::{RequestLog, fault_server_config};
use serde_json::{Value, json};

const G: Scope = Scope::Global;
const KEY: &str = "sk-test-model-key";

/// The model key, as a secret store has it (never the environment).
struct Keys;

impl SecretStore for Keys {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        Box::pin(async move {
            match name {
                "MODEL_KEY" => Ok(Secret::new(KEY)),
                _ => Err(StoreError::EnvNotSet(name.to_owned())),
            }
        })
    }
}

/// A runtime with trusted fault-servers named `names` (and `n`, trust
/// `never`, when `never` is set); each server's request log.
async fn runtime_with(names: &[&str], never: bool) -> (Runtime, Vec<RequestLog>) {
    let rt = Runtime::builder()
        .secrets(Arc::new(Keys))
        .start()
        .await
        .unwrap();
    let mut logs = Vec::new();
    let mut all: Vec<(&str, TrustMode)> = names.iter().map(|n| (*n, TrustMode::Always)).collect();
    if never {
        all.push(("n", TrustMode::Never));
    }
    for (name, trust) in all {
        let log = RequestLog::new(&format!("turn-{name}"));
        let mut cfg = fault_server_config(name, log.args());
        cfg.trust = trust;
        rt.add_server(G, cfg).await.unwrap();
        rt.wait_ready(&G, name, Duration::from_secs(20))
            .await
            .unwrap();
        logs.push(log);
    }
    (rt, logs)
}

fn route(provider: Provider, model: &ScriptedModel) -> ModelRoute {
    let endpoint = match provider {
        Provider::OpenAi | Provider::OpenAiResponses => format!("{}/v1", model.base_url()),
        Provider::Anthropic => model.base_url(),
    };
    let mut r = ModelRoute::new(provider, endpoint, "test-model");
    r.key_secret = Some("MODEL_KEY".into());
    r
}

/// The request carried the model key as `Authorization: Bearer` (OpenAI's
/// two formats).
fn assert_bearer_key(req: &mcpvisor_chaos::model::Recorded) {
    assert_eq!(
        req.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some(format!("Bearer {KEY}").as_str())
    );
}

/// A runtime with the model key and one Claude Code hook file in `dir`:
/// `command` on every `event`.
async fn runtime_with_hook(dir: &std::path::Path, event: &str, command: &str) -> Runtime {
    let file = dir.join("cc.json");
    std::fs::write(
        &file,
        serde_json::to_vec(
            &json!({"hooks": {event: [{"hooks": [{"type": "command", "command": command}]}]}}),
        )
        .unwrap(),
    )
    .unwrap();
    Runtime::builder()
        .secrets(Arc::new(Keys))
        .hooks(mcpvisor::HookSettings {
            claude: Some(file),
            ..mcpvisor::HookSettings::default()
        })
        .start()
        .await
        .unwrap()
}

/// Run a turn, collecting its events.
async fn turn(rt: &Runtime, request: TurnRequest) -> (TurnOutcome, Vec<TurnEvent>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = tokio::time::timeout(Duration::from_secs(60), rt.turn(request, Some(tx)))
        .await
        .expect("the turn ended in time");
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    (outcome, events)
}

/// A scripted endpoint with `replies`, and one turn of `prompt` against it.
async fn scripted_turn(
    rt: &Runtime,
    provider: Provider,
    replies: Vec<Reply>,
    prompt: &str,
) -> (ScriptedModel, TurnOutcome, Vec<TurnEvent>) {
    let model = ScriptedModel::start(replies).await.unwrap();
    let (out, events) = turn(rt, TurnRequest::new(G, route(provider, &model), prompt)).await;
    (model, out, events)
}

fn tool_names(body: &Value, provider: Provider) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| match provider {
                    Provider::OpenAi => t["function"]["name"].as_str().unwrap().to_owned(),
                    Provider::Anthropic | Provider::OpenAiResponses => {
                        t["name"].as_str().unwrap().to_owned()
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_two_round_turn_calls_a_real_tool_and_sends_its_result_back() {
    // LOOP-1, LOOP-5, LOOP-7: round 1 asks for mcp__s__echo (arguments in
    // fragments, chunks cut inside JSON); the result goes back as a
    // `role: tool` message; round 2 answers.
    let (rt, logs) = runtime_with(&["s"], false).await;
    let (model, out, events) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_tool_calls(&[("call_1", "mcp__s__echo", r#"{"message":"hello tools"}"#)]),
            openai_text("All done."),
        ],
        "use echo",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.text, "All done.");
    assert_eq!(out.rounds, 2);
    assert_eq!(out.usage.input_tokens, 11);
    assert_eq!(out.tool_uses.len(), 1);
    assert_eq!(out.tool_uses[0].status, "ok");
    assert_eq!(out.tool_uses[0].server.as_deref(), Some("s"));
    assert!(
        logs[0].text().contains("hello tools"),
        "the server got the call"
    );
    assert!(events.iter().any(|e| matches!(e, TurnEvent::ToolCall { server: Some(s), tool, .. } if s == "s" && tool == "mcp__s__echo")));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolResult { outcome, .. } if outcome == "ok"))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Text { text } if text == "All "))
    );
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_bearer_key(&reqs[0]);
    let first = &reqs[0].body;
    assert_eq!(first["model"], "test-model");
    assert_eq!(first["stream"], true);
    assert_eq!(
        first["messages"][0],
        json!({"role": "user", "content": "use echo"})
    );
    let echo = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__s__echo")
        .unwrap();
    assert_eq!(echo["type"], "function");
    assert!(
        echo["function"]["parameters"]["properties"]["message"].is_object(),
        "{echo}"
    );
    let second = &reqs[1].body["messages"];
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["arguments"],
        r#"{"message":"hello tools"}"#
    );
    assert_eq!(second[2]["role"], "tool");
    assert_eq!(second[2]["tool_call_id"], "call_1");
    assert!(
        second[2]["content"]
            .as_str()
            .unwrap()
            .contains("hello tools"),
        "{second}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_two_round_turn_merges_results_into_one_user_turn_and_echoes_thinking() {
    // LOOP-5: tool_use with the parsed input; the assistant's blocks, the
    // thinking block and its signature included, go back unchanged; both
    // tool_results in ONE user turn.
    let (rt, logs) = runtime_with(&["s"], false).await;
    let (model, out, events) = scripted_turn(
        &rt,
        Provider::Anthropic,
        vec![
            anthropic_tool_use(&[
                ("toolu_1", "mcp__s__echo", r#"{"message":"first"}"#),
                ("toolu_2", "mcp__s__echo", r#"{"message":"second"}"#),
            ]),
            anthropic_text("Both echoed."),
        ],
        "echo twice",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.text, "Both echoed.");
    assert_eq!(out.tool_uses.len(), 2);
    assert_eq!(logs[0].tool_calls(), 2);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Thinking { text } if text.contains("call a tool")))
    );
    let reqs = model.requests();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(
        reqs[0]
            .headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok()),
        Some(KEY)
    );
    assert_eq!(
        reqs[0]
            .headers
            .get("anthropic-version")
            .and_then(|v| v.to_str().ok()),
        Some("2023-06-01")
    );
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["name"] == "mcp__s__echo").unwrap();
    assert!(echo["input_schema"]["properties"]["message"].is_object());
    // A prompt-cache breakpoint after the tools, on the last one only.
    let marked: Vec<usize> = (0..tools.len())
        .filter(|&i| tools[i].get("cache_control").is_some())
        .collect();
    assert_eq!(marked, [tools.len() - 1]);
    assert_eq!(
        tools[tools.len() - 1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        3,
        "user, assistant, one user turn of results: {msgs:?}"
    );
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type": "thinking", "thinking": "I should call a tool.", "signature": "c2lnbmF0dXJl"})
    );
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "mcp__s__echo", "input": {"message": "first"}})
    );
    assert_eq!(msgs[2]["role"], "user");
    let results = msgs[2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert!(results[0]["content"].as_str().unwrap().contains("first"));
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_parallel_calls_from_a_server_without_index_stay_three_calls() {
    // LOOP-5: deltas without `index` are told apart by their ids.
    let (rt, logs) = runtime_with(&["s"], false).await;
    let calls = [
        ("c1", "mcp__s__echo", r#"{"message":"one"}"#),
        ("c2", "mcp__s__echo", r#"{"message":"two"}"#),
        ("c3", "mcp__s__echo", r#"{"message":"three"}"#),
    ];
    let (model, out, _) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_stream(openai_call_chunks(&calls, false)),
            openai_text("ok"),
        ],
        "go",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(logs[0].tool_calls(), 3);
    let msgs = model.requests()[1].body["messages"].clone();
    let tool_msgs: Vec<&Value> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_msgs.len(), 3);
    for (m, (id, _, word)) in
        tool_msgs
            .iter()
            .zip([("c1", 0, "one"), ("c2", 0, "two"), ("c3", 0, "three")])
    {
        assert_eq!(m["tool_call_id"], id);
        assert!(m["content"].as_str().unwrap().contains(word), "{m}");
    }
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_and_a_refused_call_are_content_for_the_model() {
    // TRUST-6: the model gets the honest sentence; the turn goes on.
    let (rt, logs) = runtime_with(&["s"], true).await;
    let (model, out, _) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_tool_calls(&[
                ("u", "mcp__nobody__thing", "{}"),
                ("r", "mcp__n__echo", r#"{"message":"no"}"#),
            ]),
            openai_text("I could not."),
        ],
        "try",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let statuses: Vec<&str> = out.tool_uses.iter().map(|t| t.status.as_str()).collect();
    assert_eq!(statuses, ["unknown_tool", "refused_by_trust"]);
    assert_eq!(logs[1].tool_calls(), 0, "the never server got nothing");
    let msgs = model.requests()[1].body["messages"].clone();
    let contents: Vec<String> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(contents[0].contains("unknown_tool"), "{contents:?}");
    assert!(contents[1].contains("does not allow"), "{contents:?}");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_keeps_calling_tools_is_stopped_at_max_rounds() {
    // LOOP-2: at most max_rounds rounds; the last round's calls are not run.
    let (rt, logs) = runtime_with(&["s"], false).await;
    let model = ScriptedModel::start(vec![
        openai_tool_calls(&[("a", "mcp__s__echo", r#"{"message":"1"}"#)]),
        openai_tool_calls(&[("b", "mcp__s__echo", r#"{"message":"2"}"#)]),
    ])
    .await
    .unwrap();
    let mut req = TurnRequest::new(G, route(Provider::OpenAi, &model), "loop");
    req.max_rounds = 2;
    let (out, _) = turn(&rt, req).await;
    assert_eq!(out.error, Some(TurnError::MaxRounds { rounds: 2 }));
    assert!(
        out.error
            .unwrap()
            .to_string()
            .contains("kept calling tools")
    );
    assert_eq!(out.rounds, 2);
    assert_eq!(logs[0].tool_calls(), 1);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_handle_offers_only_that_servers_tools_and_no_tool_route_gets_none() {
    // LOOP-6 and TRUST-7.
    let (rt, _logs) = runtime_with(&["s", "t"], false).await;
    let model = ScriptedModel::start(vec![openai_text("a"), openai_text("b"), openai_text("c")])
        .await
        .unwrap();
    let r = route(Provider::OpenAi, &model);
    turn(&rt, TurnRequest::new(G, r.clone(), "@s say hi")).await;
    turn(&rt, TurnRequest::new(G, r.clone(), "@nobody say hi")).await;
    let mut plain = r;
    plain.supports_tools = false;
    turn(&rt, TurnRequest::new(G, plain, "no tools")).await;
    let reqs = model.requests();
    let only_s = tool_names(&reqs[0].body, Provider::OpenAi);
    assert!(
        !only_s.is_empty() && only_s.iter().all(|n| n.starts_with("mcp__s__")),
        "{only_s:?}"
    );
    assert_eq!(reqs[0].body["messages"][0]["content"], "say hi");
    let all = tool_names(&reqs[1].body, Provider::OpenAi);
    assert!(all.iter().any(|n| n.starts_with("mcp__t__")), "{all:?}");
    assert_eq!(reqs[1].body["messages"][0]["content"], "@nobody say hi");
    assert!(reqs[2].body.get("tools").is_none(), "{}", reqs[2].body);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_fails_its_turn_with_retry_after_and_the_next_turn_works() {
    let (rt, logs) = runtime_with(&["s"], false).await;
    let model = ScriptedModel::start(vec![
        Reply::Error {
            status: 429,
            body: r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#.into(),
            retry_after: Some(7),
        },
        openai_text("fine now"),
    ])
    .await
    .unwrap();
    let r = route(Provider::OpenAi, &model);
    let (out, _) = turn(&rt, TurnRequest::new(G, r.clone(), "hi")).await;
    assert_eq!(
        out.error,
        Some(TurnError::Http {
            status: 429,
            message: "Rate limit reached".into(),
            retry_after: Some(7)
        })
    );
    let (out, _) = turn(&rt, TurnRequest::new(G, r, "hi again")).await;
    assert_eq!(out.error, None);
    assert_eq!(out.text, "fine now");
    assert_eq!(logs[0].tool_calls(), 0);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_in_the_middle_of_a_tool_call_fails_the_turn_and_calls_nothing() {
    let (rt, logs) = runtime_with(&["s"], false).await;
    let chunks = openai_call_chunks(&[("x", "mcp__s__echo", r#"{"message":"never"}"#)], true);
    let partial = openai_partial(chunks[..2].to_vec());
    let model = ScriptedModel::start(vec![Reply::Cut(partial)])
        .await
        .unwrap();
    let (out, _) = turn(
        &rt,
        TurnRequest::new(G, route(Provider::OpenAi, &model), "go"),
    )
    .await;
    match &out.error {
        Some(TurnError::Stream(why)) => {
            assert!(why.contains("cut") || why.contains("broke"), "{why}")
        }
        other => panic!("not a stream failure: {other:?}"),
    }
    assert_eq!(logs[0].tool_calls(), 0, "a half-streamed call is never run");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_past_the_turn_budget_are_cut_with_the_marker() {
    // LOOP-3: a 64 KiB result in a turn limited to 4 KiB.
    let rt = Runtime::builder()
        .result_limits(mcpvisor::ResultLimits {
            max_turn_result_bytes: 4096,
            ..mcpvisor::ResultLimits::default()
        })
        .start()
        .await
        .unwrap();
    let cfg = fault_server_config("s", ["--huge-result", "65536"]).trusted();
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "s", Duration::from_secs(20))
        .await
        .unwrap();
    let model = ScriptedModel::start(vec![
        openai_tool_calls(&[("h", "mcp__s__huge", "{}")]),
        openai_text("big"),
    ])
    .await
    .unwrap();
    let mut r = route(Provider::OpenAi, &model);
    r.key_secret = None;
    let (out, events) = turn(&rt, TurnRequest::new(G, r, "go")).await;
    assert_eq!(out.error, None, "{out:?}");
    let content = events
        .iter()
        .find_map(|e| match e {
            TurnEvent::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(content.len() < 5000, "{}", content.len());
    assert!(
        content.contains("bytes cut"),
        "{}",
        &content[content.len() - 200..]
    );
    let sent = model.requests()[1].body["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sent, content, "the model got the cut text");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

/// `mcpvisor --config CFG --json chat …ARGS`: exit code and stdout lines.
async fn chat_cli(
    model: &ScriptedModel,
    provider: &str,
    extra: &[&str],
) -> (Option<i32>, Vec<Value>, String) {
    chat_cli_with(model, provider, extra, "").await
}

/// [`chat_cli`] with more TOML in the config.
async fn chat_cli_with(
    model: &ScriptedModel,
    provider: &str,
    extra: &[&str],
    more_toml: &str,
) -> (Option<i32>, Vec<Value>, String) {
    let log = RequestLog::new("chat-cli");
    let toml = format!(
        "{more_toml}\n{}",
        mcpvisor_chaos::fault_server_section("s", &log.args(), "always")
    );
    let work = mcpvisor_chaos::ConfigDir::new("chat", &toml).unwrap();
    let endpoint = match provider {
        "openai" => format!("{}/v1", model.base_url()),
        _ => model.base_url(),
    };
    let mut cmd = tokio::process::Command::new(mcpvisor_chaos::ensure_mcpvisor_built().unwrap());
    cmd.arg("--config")
        .arg(work.config())
        .args([
            "--json",
            "chat",
            "--provider",
            provider,
            "--endpoint",
            &endpoint,
        ])
        .args(["--model", "m", "--key-secret", "CHAT_TEST_KEY"])
        .args(extra)
        .env("CHAT_TEST_KEY", KEY)
        .env_remove("MCPVISOR_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcpvisor_chat_runs_one_turn_with_a_real_tool_and_prints_json_events() {
    let model = ScriptedModel::start(vec![
        anthropic_tool_use(&[("toolu_9", "mcp__s__echo", r#"{"message":"from chat"}"#)]),
        anthropic_text("Chat done."),
    ])
    .await
    .unwrap();
    let (code, lines, err) = chat_cli(&model, "anthropic", &["--prompt", "echo please"]).await;
    assert_eq!(code, Some(0), "{err}\n{lines:?}");
    let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert!(
        events.contains(&"tool_call") && events.contains(&"tool_result"),
        "{events:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["final"], "Chat done.");
    assert_eq!(last["rounds"], 2);
    assert_eq!(last["tool_uses"][0]["status"], "ok");
    assert_eq!(last["error"], Value::Null);
    assert_eq!(
        model.requests()[0]
            .headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok()),
        Some(KEY),
        "the key came from the secret named by --key-secret"
    );
    assert!(
        !err.contains(KEY) && !lines.iter().any(|l| l.to_string().contains(KEY)),
        "the key is never printed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcpvisor_chat_exits_1_on_a_failed_turn_and_says_why() {
    let model = ScriptedModel::start(vec![Reply::Error {
        status: 401,
        body: r#"{"error":{"message":"invalid x-api-key"}}"#.into(),
        retry_after: None,
    }])
    .await
    .unwrap();
    let (code, lines, _) = chat_cli(&model, "openai", &["--prompt", "hi"]).await;
    assert_eq!(code, Some(1));
    let last = lines.last().unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 401: invalid x-api-key"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_prompt_submit_and_stop_hooks_run_at_their_points_in_the_turn() {
    // HOOK-6 / HOOK-7 in the loop: UserPromptSubmit blocks a prompt (the
    // model is never asked) or adds context to it; a Stop hook's continue
    // gives the model one more round with the hook's prompt.
    let dir = mcpvisor_chaos::unique_temp_path("turn-hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let submit = r#"if grep -q forbidden; then echo '{"decision":"block","reason":"not that"}'; else echo '{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"Today is Tuesday."}}'; fi"#;
    let stop = r#"if grep -q '"stop_hook_active":false'; then echo '{"decision":"block","reason":"Also say bye."}'; fi"#;
    let file = dir.join("cc.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": submit, "timeout": 10}]}],
            "Stop": [{"hooks": [{"type": "command", "command": stop, "timeout": 10}]}],
        }}))
        .unwrap(),
    )
    .unwrap();
    let rt = Runtime::builder()
        .hooks(mcpvisor::HookSettings {
            claude: Some(file),
            session: mcpvisor::HookSession {
                session_id: "s1".into(),
                cwd: dir.display().to_string(),
                ..mcpvisor::HookSession::default()
            },
            ..mcpvisor::HookSettings::default()
        })
        .start()
        .await
        .unwrap();
    let model = ScriptedModel::start(vec![openai_text("Hello."), openai_text("Bye.")])
        .await
        .unwrap();
    let mut r = route(Provider::OpenAi, &model);
    r.key_secret = None;
    let (blocked, _) = turn(
        &rt,
        TurnRequest::new(G, r.clone(), "do the forbidden thing"),
    )
    .await;
    assert_eq!(
        blocked.error,
        Some(TurnError::BlockedByHook("not that".into()))
    );
    assert!(model.requests().is_empty(), "the model was never asked");
    let (out, events) = turn(&rt, TurnRequest::new(G, r, "greet me")).await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.text, "Bye.");
    assert_eq!(out.rounds, 2);
    let reqs = model.requests();
    assert_eq!(
        reqs[0].body["messages"][0]["content"],
        "greet me\n\nToday is Tuesday."
    );
    let second = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(second[1], json!({"role": "assistant", "content": "Hello."}));
    assert_eq!(
        second[2],
        json!({"role": "user", "content": "Also say bye."})
    );
    assert!(events.iter().any(|e| matches!(e, TurnEvent::Hook { hook_event, verdict, .. } if hook_event == "Stop" && verdict == "continue")));
    rt.shutdown(Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_round_turn_with_server_everythings_echo_in_every_format() {
    // The issue's first test: a real third-party MCP tool behind the loop.
    let Some(dir) = mcpvisor_chaos::everything_dir() else {
        println!("note: SKIPPED (MCPVISOR_SKIP_PEERS=1): server-everything is not installed");
        return;
    };
    let rt = Runtime::builder()
        .secrets(Arc::new(Keys))
        .start()
        .await
        .unwrap();
    let mut cfg = mcpvisor::ServerConfig::stdio(
        "everything",
        "node",
        vec![
            mcpvisor_chaos::peers::everything_entry(&dir),
            "stdio".into(),
        ],
    )
    .trusted();
    cfg.idle_stop_after = None;
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "everything", Duration::from_secs(30))
        .await
        .unwrap();
    for provider in [
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::OpenAiResponses,
    ] {
        let args = r#"{"message":"from the loop"}"#;
        let replies = match provider {
            Provider::OpenAi => vec![
                openai_tool_calls(&[("c", "mcp__everything__echo", args)]),
                openai_text("echoed"),
            ],
            Provider::Anthropic => vec![
                anthropic_tool_use(&[("toolu_e", "mcp__everything__echo", args)]),
                anthropic_text("echoed"),
            ],
            Provider::OpenAiResponses => vec![
                responses_tool_calls(&[("call_e", "mcp__everything__echo", args)]),
                responses_text("echoed"),
            ],
        };
        let (model, out, _) = scripted_turn(&rt, provider, replies, "echo it").await;
        assert_eq!(out.error, None, "{provider:?}: {out:?}");
        assert_eq!(out.tool_uses[0].status, "ok", "{provider:?}: {out:?}");
        let sent = model.requests()[1].body.to_string();
        assert!(sent.contains("Echo: from the loop"), "{provider:?}: {sent}");
    }
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcpvisor_chat_runs_session_start_hooks_and_sends_their_context_as_the_system_prompt() {
    let dir = mcpvisor_chaos::unique_temp_path("chat-hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cc.json");
    let hook = r#"echo '{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"You are in a test."}}'"#;
    // SessionEnd (issue 36): the chat's end runs it, with why it ended.
    let ended = dir.join("ended.json");
    let end_hook = format!("cat > '{}'", ended.display());
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"hooks": {
            "SessionStart": [{"hooks": [{"type": "command", "command": hook}]}],
            "SessionEnd": [{"hooks": [{"type": "command", "command": end_hook}]}],
        }}))
        .unwrap(),
    )
    .unwrap();
    let model = ScriptedModel::start(vec![openai_text("hi")]).await.unwrap();
    let toml = format!("[hooks]\nclaude = {:?}\n", file.to_string_lossy());
    let (code, lines, err) = chat_cli_with(&model, "openai", &["--prompt", "hello"], &toml).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "hook" && l["hook_event"] == "SessionStart"),
        "{lines:?}"
    );
    assert_eq!(
        model.requests()[0].body["messages"][0],
        json!({"role": "system", "content": "You are in a test."})
    );
    let end: Value = serde_json::from_str(&std::fs::read_to_string(&ended).unwrap()).unwrap();
    assert_eq!(
        (&end["hook_event_name"], &end["reason"]),
        (&json!("SessionEnd"), &json!("other"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 36 (LOOP-5): the Responses API. Round 1 is a reasoning model's two
// parallel function calls (arguments in interleaved deltas); they run on
// real servers; round 2's `input` replays the reasoning item (its
// encrypted content, without its id: `store: false`) and both calls, then
// one `function_call_output` per call in the model's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_api_turn_runs_both_calls_of_a_round_and_replays_reasoning() {
    let (rt, logs) = runtime_with(&["s", "t"], false).await;
    let model = ScriptedModel::start(vec![
        responses_tool_calls(&[
            ("call_a", "mcp__s__echo", r#"{"message":"from s"}"#),
            ("call_b", "mcp__t__echo", r#"{"message":"from t"}"#),
        ]),
        responses_text("Both answered."),
    ])
    .await
    .unwrap();
    // A reasoning model's route asks for its reasoning's encrypted content.
    let mut r = route(Provider::OpenAiResponses, &model);
    r.encrypted_reasoning = true;
    let (out, events) = turn(&rt, TurnRequest::new(G, r, "ask both")).await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.text, "Both answered.");
    assert_eq!((out.rounds, out.tool_uses.len()), (2, 2), "{out:?}");
    assert_eq!(out.usage.input_tokens, 80);
    assert!(logs[0].text().contains("from s") && logs[1].text().contains("from t"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Thinking { text } if text == "Calling tools."))
    );
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_bearer_key(&reqs[0]);
    let first = &reqs[0].body;
    assert_eq!(
        (&first["stream"], &first["store"], &first["include"]),
        (
            &json!(true),
            &json!(false),
            &json!(["reasoning.encrypted_content"])
        )
    );
    assert_eq!(
        first["input"],
        json!([{"role": "user", "content": "ask both"}])
    );
    let echo = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__s__echo")
        .unwrap();
    assert_eq!(
        (&echo["type"], &echo["strict"]),
        (&json!("function"), &json!(false))
    );
    assert!(
        echo["parameters"]["properties"]["message"].is_object(),
        "{echo}"
    );
    let input = reqs[1].body["input"].as_array().unwrap().clone();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ],
        "{input:?}"
    );
    assert_eq!(input[1]["encrypted_content"], "ENCRYPTED-REASONING");
    assert!(
        input.iter().all(|i| i.get("id").is_none()),
        "no stored-item ids with store: false: {input:?}"
    );
    assert_eq!(input[2]["call_id"], "call_a");
    assert_eq!(input[2]["arguments"], r#"{"message":"from s"}"#);
    assert_eq!(input[4]["call_id"], "call_a");
    assert!(
        input[4]["output"].as_str().unwrap().contains("from s"),
        "{input:?}"
    );
    assert_eq!(input[5]["call_id"], "call_b");
    assert!(
        input[5]["output"].as_str().unwrap().contains("from t"),
        "{input:?}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

// Issue 36: a round's calls run together. Three calls of a tool that never
// answers all reach the server (one after another they could not: the
// first would hold the rest), on a server whose tools are declared safe to
// run beside others (`parallel_calls`); cancelling the turn then ends
// them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rounds_calls_run_together_and_a_cancel_ends_them_all() {
    let rt = Runtime::builder()
        .secrets(Arc::new(Keys))
        .start()
        .await
        .unwrap();
    let log = RequestLog::new("turn-parallel");
    let mut cfg = fault_server_config("s", log.args());
    cfg.trust = TrustMode::Always;
    cfg.parallel_calls = Some(true);
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "s", Duration::from_secs(20))
        .await
        .unwrap();
    let model = ScriptedModel::start(vec![openai_tool_calls(&[
        ("c1", "mcp__s__hang", "{}"),
        ("c2", "mcp__s__hang", "{}"),
        ("c3", "mcp__s__hang", "{}"),
    ])])
    .await
    .unwrap();
    let cancel = mcpvisor::CancellationToken::new();
    let mut req = TurnRequest::new(G, route(Provider::OpenAi, &model), "hang thrice");
    req.cancel = Some(cancel.clone());
    let running = {
        let rt = rt.clone();
        tokio::spawn(async move { turn(&rt, req).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while log.text().matches(" hang ").count() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the three calls never all reached the server: {}",
            log.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let (out, _) = running.await.unwrap();
    assert!(matches!(out.error, Some(TurnError::Cancelled)), "{out:?}");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

/// The tool names a request offered, in order.
fn offered(body: &Value) -> Vec<String> {
    tool_names(body, Provider::OpenAi)
}

// Issue 36: deferred loading. On a 1,004-tool catalog the first request
// offers only the search tool (at most 10 % of the bytes of the eager
// list); a task that needs three tools searches, finds and calls them;
// what was found is appended in the order found, so each request's tool
// list starts with the previous one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tools_are_searched_found_and_called_with_a_stable_prefix() {
    let rt = thousand_tools().await;
    let search = "mcpvisor_tool_search";
    let model = ScriptedModel::start(vec![
        openai_tool_calls(&[
            ("s1", search, r#"{"query":"echo the message back"}"#),
            ("s2", search, r#"{"query":"add two numbers","limit":1}"#),
        ]),
        openai_tool_calls(&[
            ("c1", "mcp__d__echo", r#"{"message":"found"}"#),
            ("c2", "mcp__d__add", r#"{"a":1,"b":2}"#),
            (
                "s3",
                search,
                r#"{"query":"generated tool number 42","limit":1}"#,
            ),
        ]),
        openai_tool_calls(&[("c3", "mcp__d__tool_00042", r#"{"x":"y"}"#)]),
        openai_text("done"),
        // The same prompt, every tool eager: the baseline's bytes.
        openai_text("eager"),
    ])
    .await
    .unwrap();
    let (out, events) = turn(
        &rt,
        TurnRequest::new(G, route(Provider::OpenAi, &model), "use three tools"),
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let used: Vec<(&str, &str)> = out
        .tool_uses
        .iter()
        .map(|u| (u.tool.as_str(), u.status.as_str()))
        .collect();
    assert_eq!(
        used,
        [
            (search, "ok"),
            (search, "ok"),
            ("mcp__d__echo", "ok"),
            ("mcp__d__add", "ok"),
            (search, "ok"),
            ("mcp__d__tool_00042", "ok"),
        ]
    );
    assert!(events.iter().any(|e| matches!(e, TurnEvent::ToolsFound { tools, .. } if tools.first().map(String::as_str) == Some("mcp__d__tool_00042"))));
    let mut eager = TurnRequest::new(G, route(Provider::OpenAi, &model), "use three tools");
    eager.defer = mcpvisor::Defer::Never;
    let (out, _) = turn(&rt, eager).await;
    assert_eq!(out.error, None, "{out:?}");
    let reqs = model.requests();
    let bytes = |i: usize| reqs[i].body["tools"].to_string().len();
    assert!(offered(&reqs[4].body).len() >= 1004, "the eager list");
    assert!(
        bytes(0) * 10 <= bytes(4),
        "the first request's tools are {} bytes, the eager list's {}",
        bytes(0),
        bytes(4)
    );
    println!(
        "deferred first request: {} bytes of tools; eager: {} bytes ({} tools)",
        bytes(0),
        bytes(4),
        offered(&reqs[4].body).len()
    );
    assert_eq!(offered(&reqs[0].body), [search]);
    let second = offered(&reqs[1].body);
    assert_eq!(second[0], search);
    assert!(
        second.contains(&"mcp__d__echo".to_owned()) && second.contains(&"mcp__d__add".to_owned()),
        "{second:?}"
    );
    for i in 1..3 {
        let (before, after) = (offered(&reqs[i].body), offered(&reqs[i + 1].body));
        assert!(
            after.starts_with(&before),
            "request {i}: {before:?} then {after:?}"
        );
    }
    assert_eq!(
        offered(&reqs[3].body).last().map(String::as_str),
        Some("mcp__d__tool_00042")
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

/// A runtime with the demo server's 1,004 tools (`mcp__d__…`).
async fn thousand_tools() -> Runtime {
    let rt = Runtime::builder()
        .secrets(Arc::new(Keys))
        .start()
        .await
        .unwrap();
    let exe = mcpvisor_chaos::ensure_mcpvisor_built().unwrap();
    let cfg = mcpvisor::ServerConfig::stdio(
        "d",
        exe.to_string_lossy(),
        vec!["serve-demo".into(), "--tools".into(), "1000".into()],
    )
    .trusted();
    rt.add_server(G, cfg).await.unwrap();
    rt.wait_ready(&G, "d", Duration::from_secs(30))
        .await
        .unwrap();
    rt
}

/// A turn with the provider's own tool search (`native`) scripted by
/// `replies`: a search, then a call of the echo it found. Checks that both
/// calls were made and ok and that every request carried the same tool
/// list; the requests and the events.
async fn native_search_turn(
    rt: &Runtime,
    provider: Provider,
    replies: Vec<Reply>,
) -> (Vec<mcpvisor_chaos::model::Recorded>, Vec<TurnEvent>) {
    let model = ScriptedModel::start(replies).await.unwrap();
    let mut r = route(provider, &model);
    r.tool_search = mcpvisor::ToolSearch::Native;
    let (out, events) = turn(rt, TurnRequest::new(G, r, "echo something")).await;
    assert_eq!(out.error, None, "{out:?}");
    let used: Vec<(&str, &str)> = out
        .tool_uses
        .iter()
        .map(|u| (u.tool.as_str(), u.status.as_str()))
        .collect();
    assert_eq!(
        used,
        [("mcpvisor_tool_search", "ok"), ("mcp__d__echo", "ok")]
    );
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    let tools = &reqs[0].body["tools"];
    assert!(
        reqs.iter().all(|r| &r.body["tools"] == tools),
        "one tool list for the whole turn"
    );
    (reqs, events)
}

// Issue 36 (LOOP-10): the providers' own deferred loading, searched here. Every
// request of the turn carries the same tool list (the prompt cache keeps
// it); a search's answer loads what it found where the answer stands
// (Anthropic `tool_reference` blocks, a Responses `tool_search_output`);
// the found tool is then called. On a loopback endpoint `auto` is the
// local search tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_own_tool_search_loads_what_it_found_and_keeps_one_tool_list() {
    let rt = thousand_tools().await;
    let search = "mcpvisor_tool_search";
    let echo = r#"{"message":"found natively"}"#;
    let query = r#"{"query":"echo the message back"}"#;

    // Anthropic: every tool deferred behind the search tool.
    let (reqs, events) = native_search_turn(
        &rt,
        Provider::Anthropic,
        vec![
            anthropic_tool_use(&[("toolu_s", search, query)]),
            anthropic_tool_use(&[("toolu_e", "mcp__d__echo", echo)]),
            anthropic_text("done"),
        ],
    )
    .await;
    assert!(
        events.iter().any(|e| matches!(
            e,
            TurnEvent::Round {
                round: 1,
                tools: 1,
                deferred: 1004,
                ..
            }
        )),
        "{events:?}"
    );
    assert_eq!(
        reqs[0]
            .headers
            .get("anthropic-beta")
            .map(|v| v.to_str().unwrap()),
        Some("advanced-tool-use-2025-11-20")
    );
    let tools = reqs[0].body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1005);
    assert_eq!(
        (
            &tools[0]["name"],
            &tools[0]["defer_loading"],
            &tools[0]["cache_control"]
        ),
        (&json!(search), &Value::Null, &json!({"type": "ephemeral"}))
    );
    assert!(
        tools[1..]
            .iter()
            .all(|t| t["defer_loading"] == json!(true) && t["cache_control"].is_null())
    );
    let answer = &reqs[1].body["messages"][2]["content"][0];
    assert_eq!(answer["tool_use_id"], "toolu_s");
    let refs = answer["content"].as_array().unwrap();
    assert_eq!(
        refs[0],
        json!({"type": "tool_reference", "tool_name": "mcp__d__echo"}),
        "{refs:?}"
    );

    // Responses API: the search alone, answered with the definitions.
    let (reqs, _) = native_search_turn(
        &rt,
        Provider::OpenAiResponses,
        vec![
            responses_tool_search(
                "call_s",
                json!({"query": "echo the message back", "limit": 2}),
            ),
            responses_tool_calls(&[("call_e", "mcp__d__echo", echo)]),
            responses_text("done"),
        ],
    )
    .await;
    let tools = &reqs[0].body["tools"];
    assert_eq!(
        (
            &tools[0]["type"],
            &tools[0]["execution"],
            tools.as_array().unwrap().len()
        ),
        (&json!("tool_search"), &json!("client"), 1)
    );
    let input = reqs[1].body["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "tool_search_call", "call_id": "call_s", "execution": "client", "arguments": {"query": "echo the message back", "limit": 2}})
    );
    assert_eq!(
        (&input[2]["type"], &input[2]["call_id"]),
        (&json!("tool_search_output"), &json!("call_s"))
    );
    let loaded = input[2]["tools"].as_array().unwrap();
    assert!(
        (1..=2).contains(&loaded.len()),
        "within the limit the model asked for: {loaded:?}"
    );
    assert_eq!(
        (&loaded[0]["name"], &loaded[0]["defer_loading"]),
        (&json!("mcp__d__echo"), &json!(true))
    );
    assert!(loaded[0]["parameters"]["properties"]["message"].is_object());
    println!(
        "Responses, native search: first request {} bytes of tools",
        tools.to_string().len()
    );

    // `auto` on a loopback endpoint: the local search tool, a function.
    let model = ScriptedModel::start(vec![responses_text("nothing to do")])
        .await
        .unwrap();
    let (out, _) = turn(
        &rt,
        TurnRequest::new(G, route(Provider::OpenAiResponses, &model), "hi"),
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let tools = &model.requests()[0].body["tools"];
    assert_eq!(
        (&tools[0]["type"], &tools[0]["name"]),
        (&json!("function"), &json!(search))
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

// Issue 36: a round whose one call has arguments that are not a JSON
// object (never made) does not hold the round's other calls: both get
// their answer, in the model's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_never_made_in_a_round_holds_none_of_the_others() {
    let (rt, logs) = runtime_with(&["s"], false).await;
    let (_model, out, _) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_tool_calls(&[
                ("c1", "mcp__s__echo", "[1]"),
                ("c2", "mcp__s__echo", r#"{"message":"still made"}"#),
            ]),
            openai_text("ok"),
        ],
        "two calls",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let statuses: Vec<&str> = out.tool_uses.iter().map(|u| u.status.as_str()).collect();
    assert_eq!(statuses, ["invalid_arguments", "ok"], "{out:?}");
    assert!(logs[0].text().contains("still made"));
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

// Issue 36: PostToolBatch runs once after a round's calls all ended, with
// every call in the model's order; its context goes to the model with the
// results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_tool_batch_sees_the_whole_round_and_its_context_reaches_the_model() {
    let dir = mcpvisor_chaos::unique_temp_path("batch-hook");
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("seen.json");
    let command = format!(
        r#"cat > '{}'; echo '{{"hookSpecificOutput":{{"hookEventName":"PostToolBatch","additionalContext":"batch checked"}}}}'"#,
        seen.display()
    );
    let rt = runtime_with_hook(&dir, "PostToolBatch", &command).await;
    let log = RequestLog::new("turn-batch");
    rt.add_server(G, fault_server_config("s", log.args()).trusted())
        .await
        .unwrap();
    rt.wait_ready(&G, "s", Duration::from_secs(20))
        .await
        .unwrap();
    let (model, out, events) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_tool_calls(&[
                ("c1", "mcp__s__echo", r#"{"message":"one"}"#),
                ("c2", "mcp__s__is_error", "{}"),
            ]),
            openai_text("done"),
        ],
        "two",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(payload["hook_event_name"], "PostToolBatch");
    let calls = payload["tool_calls"].as_array().unwrap();
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2"], "{payload}");
    assert_eq!(
        (&calls[0]["is_error"], &calls[1]["is_error"]),
        (&json!(false), &json!(true))
    );
    assert!(events.iter().any(|e| matches!(e, TurnEvent::Hook { hook_event, verdict, .. } if hook_event == "PostToolBatch" && verdict == "context")));
    let second = &model.requests()[1].body["messages"];
    let last = second.as_array().unwrap().last().unwrap();
    assert_eq!(last["tool_call_id"], "c2");
    assert!(
        last["content"].as_str().unwrap().ends_with("batch checked"),
        "{last}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 36: a PostToolBatch hook's context after a round whose only call
// was the provider's own search (answered with the found tools, not text)
// still reaches the model, as a user message after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_tool_batch_context_after_a_native_search_reaches_the_model() {
    let dir = mcpvisor_chaos::unique_temp_path("batch-native");
    std::fs::create_dir_all(&dir).unwrap();
    let command = r#"cat > /dev/null; echo '{"hookSpecificOutput":{"hookEventName":"PostToolBatch","additionalContext":"batch checked"}}'"#;
    let rt = runtime_with_hook(&dir, "PostToolBatch", command).await;
    let log = RequestLog::new("turn-batch-native");
    rt.add_server(G, fault_server_config("s", log.args()).trusted())
        .await
        .unwrap();
    rt.wait_ready(&G, "s", Duration::from_secs(20))
        .await
        .unwrap();
    let model = ScriptedModel::start(vec![
        responses_tool_search("call_s", json!({"query": "echo"})),
        responses_text("done"),
    ])
    .await
    .unwrap();
    let mut r = route(Provider::OpenAiResponses, &model);
    r.tool_search = mcpvisor::ToolSearch::Native;
    let mut request = TurnRequest::new(G, r, "search");
    request.defer = mcpvisor::Defer::Always;
    let (out, _) = turn(&rt, request).await;
    assert_eq!(out.error, None, "{out:?}");
    let input = model.requests()[1].body["input"]
        .as_array()
        .unwrap()
        .clone();
    let n = input.len();
    assert_eq!(input[n - 2]["type"], "tool_search_output", "{input:?}");
    assert_eq!(
        input[n - 1],
        json!({"role": "user", "content": "batch checked"})
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 36: with a round's calls running together, the PreToolUse hooks
// still run one at a time in the model's order, and the results go back in
// the model's order even when a later call ends first (the first call's
// server answers 300 ms late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_the_models_order_and_results_go_back_in_it() {
    let dir = mcpvisor_chaos::unique_temp_path("order-hook");
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("seen.jsonl");
    let command = format!("cat >> '{}'; echo >> '{}'", seen.display(), seen.display());
    let rt = runtime_with_hook(&dir, "PreToolUse", &command).await;
    let (slow, fast) = (RequestLog::new("order-slow"), RequestLog::new("order-fast"));
    let mut args = slow.args();
    args.extend(["--slow-ms".to_owned(), "300".to_owned()]);
    for (name, args) in [("slow", args), ("fast", fast.args())] {
        let mut cfg = fault_server_config(name, args).trusted();
        cfg.parallel_calls = Some(true);
        rt.add_server(G, cfg).await.unwrap();
        rt.wait_ready(&G, name, Duration::from_secs(20))
            .await
            .unwrap();
    }
    let (model, out, _) = scripted_turn(
        &rt,
        Provider::OpenAi,
        vec![
            openai_tool_calls(&[
                ("c1", "mcp__slow__echo", r#"{"message":"first"}"#),
                ("c2", "mcp__fast__echo", r#"{"message":"second"}"#),
                ("c3", "mcp__fast__echo", r#"{"message":"third"}"#),
            ]),
            openai_text("done"),
        ],
        "three",
    )
    .await;
    assert_eq!(out.error, None, "{out:?}");
    let hooked: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["tool_input"]["message"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(hooked, ["first", "second", "third"]);
    let messages = model.requests()[1].body["messages"].clone();
    let results: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["c1", "c2", "c3"]);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let _ = std::fs::remove_dir_all(&dir);
}
