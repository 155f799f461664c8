//! Secrets (TRUST-2): values come from a store, reach only the transport, and
//! never appear in status, errors, events, logs or `--json` output — even
//! when the server prints them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use mcpvisor::FileSecretStore;
use mcpvisor::{Runtime, Scope, Secret, ServerConfig, StdioConfig, TransportConfig};
use mcpvisor_chaos::{
    ensure_mcpvisor_built, fault_server_config, fault_server_path, shutdown_checked,
    unique_temp_path,
};

const G: Scope = Scope::Global;
const VALUE: &str = "sk-TEST-9f8e7d6c5b4a";

fn server(name: &str, secret_name: &str) -> ServerConfig {
    let mut cfg = fault_server_config(name, ["--print-env", "API_KEY"]).trusted();
    if let TransportConfig::Stdio(StdioConfig { env_secrets, .. }) = &mut cfg.transport {
        env_secrets.insert("API_KEY".into(), secret_name.into());
    }
    cfg
}

/// A runtime whose file secret store holds `api_key` = [`VALUE`], with an
/// event log; the store's file and the log, to check and remove.
async fn secret_runtime(tag: &str) -> (Runtime, std::path::PathBuf, std::path::PathBuf) {
    let file = unique_temp_path(&format!("{tag}.toml"));
    let store = FileSecretStore::open(&file).unwrap();
    store.set("api_key", &Secret::new(VALUE)).unwrap();
    let log = unique_temp_path(&format!("{tag}-events.jsonl"));
    let runtime = Runtime::builder()
        .secrets(Arc::new(store))
        .event_log(&log)
        .start()
        .await
        .unwrap();
    (runtime, file, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_the_server_but_never_its_status_and_a_missing_one_is_named() {
    let (runtime, file, log) = secret_runtime("secrets").await;
    runtime
        .add_server(G, server("good", "api_key"))
        .await
        .unwrap();
    let mut bad = server("bad", "no_such_secret");
    bad.reconnect.enabled = false;
    runtime.add_server(G, bad).await.unwrap();
    runtime
        .wait_ready(&G, "good", Duration::from_secs(20))
        .await
        .unwrap();
    let err = runtime
        .wait_ready(&G, "bad", Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("secret no_such_secret for server bad is not available"),
        "{err}"
    );
    let status = runtime.status();
    let good = status.iter().find(|s| s.server == "good").unwrap();
    // The server received the value (it printed it), but the runtime shows it redacted.
    assert!(
        good.stderr_tail.contains("env API_KEY=[redacted]"),
        "{}",
        good.stderr_tail
    );
    let bad = status.iter().find(|s| s.server == "bad").unwrap();
    assert!(
        bad.error
            .as_deref()
            .unwrap()
            .contains("secret no_such_secret for server bad is not available"),
        "{:?}",
        bad.error
    );
    let all_status = serde_json::to_string(&status).unwrap();
    assert!(!all_status.contains(VALUE));
    shutdown_checked(&runtime, &[]).await.assert_clean();
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(
        events.contains("[redacted]"),
        "the redacted stderr tail is in the log"
    );
    assert!(!events.contains(VALUE), "the value is not in the event log");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&file);
    // The store's lock file, beside it.
    let _ = std::fs::remove_file(file.with_extension("lock"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_echoes_its_secret_in_a_result_shows_it_redacted() {
    // TRUST-2: everything the runtime makes of the
    // server's output — projection, canonical value, events — is redacted.
    let (runtime, file, log) = secret_runtime("echo-secrets").await;
    runtime
        .add_server(G, server("echoer", "api_key"))
        .await
        .unwrap();
    runtime
        .wait_ready(&G, "echoer", Duration::from_secs(20))
        .await
        .unwrap();
    let out = runtime
        .call(
            &G,
            "mcp__echoer__echo",
            Some(serde_json::json!({ "message": format!("the key is {VALUE}") })),
            mcpvisor::CallOptions::default(),
        )
        .await;
    assert_eq!(out.projection, "Echo: the key is [redacted]");
    let canonical = serde_json::to_string(&out.canonical).unwrap();
    assert!(!canonical.contains(VALUE), "{canonical}");
    shutdown_checked(&runtime, &[]).await.assert_clean();
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(events.contains("Echo: the key is [redacted]"));
    assert!(!events.contains(VALUE), "the value is not in the event log");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&file);
    // The store's lock file, beside it.
    let _ = std::fs::remove_file(file.with_extension("lock"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_servers_metadata_and_progress_is_redacted_before_it_is_published() {
    // TRUST-2: the server puts its own secret in its
    // version, its instructions, a tool's title, description and schema,
    // and its progress messages. None of it reaches the catalog, the
    // instructions, the status, the events or the event log.
    let (runtime, file, log) = secret_runtime("meta-secrets").await;
    let mut cfg = server("leaky", "api_key");
    if let TransportConfig::Stdio(s) = &mut cfg.transport {
        s.args
            .extend(["--leak-env", "API_KEY", "--progress", "2"].map(String::from));
    }
    let mut events = runtime.subscribe();
    runtime.add_server(G, cfg).await.unwrap();
    runtime
        .wait_ready(&G, "leaky", Duration::from_secs(20))
        .await
        .unwrap();
    let out = runtime
        .call(
            &G,
            "mcp__leaky__echo",
            Some(serde_json::json!({ "message": "hi" })),
            mcpvisor::CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, mcpvisor::OutcomeKind::Ok, "{out:?}");
    let tools = serde_json::to_string(&runtime.tools(&G)).unwrap();
    assert!(tools.contains("key [redacted]"), "{tools}");
    let instructions = runtime.instructions(&G).join("\n");
    assert!(instructions.contains("[redacted]"), "{instructions}");
    let status = serde_json::to_string(&runtime.status()).unwrap();
    assert!(status.contains("[redacted]"), "{status}");
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(format!("{e:?}"));
    }
    let seen = seen.join("\n");
    assert!(seen.contains("CallProgress"), "{seen}");
    for (what, text) in [
        ("tools", &tools),
        ("instructions", &instructions),
        ("status", &status),
        ("events", &seen),
    ] {
        assert!(!text.contains(VALUE), "{what}: {text}");
    }
    shutdown_checked(&runtime, &[]).await.assert_clean();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(VALUE), "the event log: {logged}");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(file.with_extension("lock"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cli_run_never_prints_a_secret_value() {
    // TRUST-2 end to end: env-variable store, check / status / tools / call
    // with --json, an event log, and a server that prints the value.
    let bin = ensure_mcpvisor_built().unwrap();
    let dir = unique_temp_path("secret-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("events.jsonl");
    let toml = format!(
        "[events]\nlog = {:?}\n[servers.x]\ncommand = {:?}\nargs = [\"--print-env\", \"API_KEY\", \"--leak-env\", \"API_KEY\", \"--progress\", \"2\"]\ntrust = \"always\"\nidle_stop_after_s = 0\nenv_secrets = {{ API_KEY = \"MCPVISOR_TEST_SECRET\" }}\n",
        log.to_string_lossy(),
        fault_server_path().to_string_lossy()
    );
    std::fs::write(dir.join("mcpvisor.toml"), toml).unwrap();
    let mut printed = String::new();
    for args in [
        vec!["--json", "check"],
        vec!["--json", "status"],
        vec!["--json", "tools"],
        vec![
            "--json",
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hello"}"#,
        ],
        vec!["check"],
        // Human output too: the server's version,
        // instructions and tool texts, and the progress lines of a call.
        vec!["status"],
        vec!["tools"],
        vec!["call", "mcp__x__echo", "--args", r#"{"message":"hello"}"#],
    ] {
        let out = tokio::process::Command::new(&bin)
            .args(&args)
            .current_dir(&dir)
            .env("MCPVISOR_TEST_SECRET", VALUE)
            .env_remove("MCPVISOR_CONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        printed.push_str(&String::from_utf8_lossy(&out.stdout));
        printed.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    assert!(
        printed.contains("[redacted]"),
        "the stderr tail was shown, redacted:\n{printed}"
    );
    assert!(
        !printed.contains(VALUE),
        "a secret value was printed:\n{printed}"
    );
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(
        !events.contains(VALUE),
        "a secret value reached the event log"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
