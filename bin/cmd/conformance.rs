//! `mcpvisor conformance URL`: the client adapter for the official MCP
//! conformance suite (`conformance client --command "mcpvisor conformance"`).
//! It reads `MCP_CONFORMANCE_SCENARIO` and does what the scenario asks,
//! through the runtime (supervised connection, trust off for the suite's
//! server, elicitation answered with the schema's defaults). The OAuth
//! scenarios (`auth/*`) log in with `mcpvisor::oauth::login` through a
//! headless authorization (the suite's authorization servers redirect at
//! once), keep the tokens in a memory secret store, and run the server
//! through the runtime with `[oauth]`; a refusal for lack of scope (of a
//! call, or of the connection's opening) logs in again with the scope the
//! server names, and a connection refused for want of authorization (the
//! authorization server changed) logs in again, at most 3 logins in all.
//! A scenario whose context holds a workload JWT uses `grant =
//! "jwt_bearer"`; DPoP follows from the server's challenge.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use mcpvisor::{AcceptSchemaDefaults, CallOptions, Runtime, Scope, ServerConfig};
use serde_json::json;

/// Run the scenario against `url`; exit 0 when every step worked.
pub(crate) async fn run(url: &str) -> anyhow::Result<u8> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    if scenario.starts_with("auth/") {
        return auth(url, &scenario).await;
    }
    let mut cfg = ServerConfig::http("suite", url).trusted();
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(15);
    cfg.idle_stop_after = None;
    let runtime = Runtime::builder()
        .elicitation(Arc::new(AcceptSchemaDefaults))
        .start()
        .await?;
    runtime.add_server(Scope::Global, cfg).await?;
    let ready = runtime
        .wait_ready(&Scope::Global, "suite", Duration::from_secs(20))
        .await;
    let mut failed = false;
    if let Err(e) = ready {
        eprintln!("mcpvisor conformance: {e}");
        failed = true;
    } else {
        for (tool, args) in scenario_calls(&scenario, &runtime) {
            let name = mcpvisor::public_tool_name("suite", &tool);
            let outcome = runtime
                .call(&Scope::Global, &name, Some(args), CallOptions::default())
                .await;
            println!("{tool}: {} {}", outcome.kind.name(), outcome.projection);
            failed |= !outcome.is_ok();
        }
    }
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    if !report.is_clean() {
        bail!("the shutdown did not confirm: {:?}", report.unconfirmed);
    }
    Ok(u8::from(failed))
}

/// What a scenario asks the client to call: the calls its context lists
/// (`toolCalls`), a fixed call for the older scenarios, every listed tool
/// with arguments made from its schema where the scenario judges how the
/// client treats each tool (MRTR, tools with invalid `x-mcp-header`s,
/// which the catalog left out), and for the schema scenario the focal
/// tool's input schema echoed back as the runtime kept it (ERA-7).
fn scenario_calls(scenario: &str, runtime: &Runtime) -> Vec<(String, serde_json::Value)> {
    let context: serde_json::Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    if let Some(calls) = context.get("toolCalls").and_then(|c| c.as_array()) {
        return calls
            .iter()
            .filter_map(|c| {
                let name = c.get("name")?.as_str()?.to_owned();
                Some((name, c.get("arguments").cloned().unwrap_or(json!({}))))
            })
            .collect();
    }
    let tools = runtime.tools(&Scope::Global);
    match scenario {
        "tools_call" => vec![("add_numbers".into(), json!({"a": 2, "b": 3}))],
        "elicitation-sep1034-client-defaults" => {
            vec![("test_client_elicitation_defaults".into(), json!({}))]
        }
        "sse-retry" => vec![("test_reconnection".into(), json!({}))],
        "json-schema-2020-12-preservation" => tools
            .iter()
            .find(|t| t.raw_name == "json_schema_2020_12_tool")
            .map(|t| {
                vec![(
                    "json_schema_echo".into(),
                    json!({ "schema": serde_json::Value::Object((*t.input_schema).clone()) }),
                )]
            })
            .unwrap_or_default(),
        "sep-2322-client-request-state" | "http-invalid-tool-headers" => tools
            .iter()
            .map(|t| (t.raw_name.clone(), arguments_for(&t.input_schema)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Arguments that satisfy a schema's required properties: a placeholder of
/// each one's type.
fn arguments_for(schema: &serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    let properties = schema.get("properties").and_then(|p| p.as_object());
    let mut args = serde_json::Map::new();
    for name in schema
        .get("required")
        .and_then(|r| r.as_array())
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str())
    {
        let kind = properties
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(|t| t.as_str());
        let value = match kind {
            Some("integer") | Some("number") => json!(1),
            Some("boolean") => json!(true),
            Some("object") => json!({}),
            Some("array") => json!([]),
            _ => json!("x"),
        };
        args.insert(name.to_owned(), value);
    }
    serde_json::Value::Object(args)
}

/// The client id the suite expects where its authorization server takes
/// Client ID Metadata Documents (`auth/basic-cimd`).
const CIMD_URL: &str = "https://conformance-test.local/client-metadata.json";

/// Logins one scenario may make (the first, and the step-ups: CONN-13's 3).
const MAX_LOGINS: usize = 3;

/// An `auth/*` scenario: log in, run the server through the runtime, call
/// its tools; log in again with the scope a refusal names.
async fn auth(url: &str, scenario: &str) -> anyhow::Result<u8> {
    use mcpvisor::oauth::{HeadlessAuthorization, LoginRequest, login};
    let context: serde_json::Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    let text = |key: &str| context.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let store: Arc<dyn mcpvisor::SecretStore> = Arc::new(mcpvisor::MemorySecretStore::new());
    let mut oauth = mcpvisor::OAuthConfig {
        grant: if scenario.starts_with("auth/client-credentials") {
            mcpvisor::OAuthGrant::ClientCredentials
        } else if context.get("valid_jwt").is_some() {
            mcpvisor::OAuthGrant::JwtBearer
        } else if context.get("idp_id_token").is_some() {
            mcpvisor::OAuthGrant::Enterprise
        } else {
            mcpvisor::OAuthGrant::AuthorizationCode
        },
        idp_issuer: text("idp_issuer"),
        idp_token_endpoint: text("idp_token_endpoint"),
        idp_client_id: text("idp_client_id"),
        client_id: text("client_id"),
        client_metadata_url: Some(CIMD_URL.into()),
        client_name: Some("mcpvisor-conformance".into()),
        ..Default::default()
    };
    if let Some(token) = text("idp_id_token") {
        store
            .put("suite_id_token", mcpvisor::Secret::new(token))
            .await?;
        oauth.idp_id_token = Some("suite_id_token".into());
    }
    if let Some(secret) = text("idp_client_secret") {
        store
            .put("suite_idp_secret", mcpvisor::Secret::new(secret))
            .await?;
        oauth.idp_client_secret = Some("suite_idp_secret".into());
    }
    if let Some(jwt) = text("valid_jwt") {
        store
            .put("suite_workload_jwt", mcpvisor::Secret::new(jwt))
            .await?;
        oauth.assertion = Some("suite_workload_jwt".into());
    }
    if let Some(pem) = text("private_key_pem") {
        store
            .put("suite_client_key", mcpvisor::Secret::new(pem))
            .await?;
        oauth.client_assertion_key = Some("suite_client_key".into());
        oauth.signing_algorithm = text("signing_algorithm");
    }
    if let Some(secret) = text("client_secret") {
        store
            .put("suite_client_secret", mcpvisor::Secret::new(secret))
            .await?;
        oauth.client_secret = Some("suite_client_secret".into());
    }
    let mut cfg = ServerConfig::http("suite", url).trusted();
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(15);
    cfg.idle_stop_after = None;
    let mcpvisor::TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        bail!("not an HTTP server config");
    };
    http.oauth = Some(Box::new(oauth));
    let http = http.clone();
    let ui = HeadlessAuthorization::default();
    let mut logins = 0;
    let mut request = LoginRequest::default();
    let runtime = Runtime::builder()
        .elicitation(Arc::new(AcceptSchemaDefaults))
        .secrets(store.clone())
        .start()
        .await?;
    let mut failed = false;
    'run: loop {
        logins += 1;
        match login("suite", &http, store.clone(), &ui, &request).await {
            Ok(a) => eprintln!(
                "mcpvisor conformance: {scenario}: authorized as {} (scopes {:?})",
                a.client_id, a.scopes
            ),
            Err(e) => {
                eprintln!("mcpvisor conformance: {scenario}: {e}");
                failed = true;
                break;
            }
        }
        // A new connection for the new token: the server is removed
        // (awaited) and added again, so that `wait_ready` waits for the new
        // connection. After `restart_server` it could see the old one still
        // ready, and the next call met the restart (seen in CI).
        if logins > 1 {
            runtime.remove_server(&Scope::Global, "suite").await?;
        }
        runtime.add_server(Scope::Global, cfg.clone()).await?;
        if let Err(e) = runtime
            .wait_ready(&Scope::Global, "suite", Duration::from_secs(20))
            .await
        {
            let text = e.to_string();
            eprintln!("mcpvisor conformance: {scenario}: {text}");
            // The connection's end says what to log in again for: a scope
            // (step-up), or a new authorization (the authorization server
            // changed: the next login discovers and registers anew).
            let again = wanted_scope(&text)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .or_else(|| text.contains("authorization required").then(Vec::new));
            match again {
                Some(scopes) if logins < MAX_LOGINS => {
                    request.scopes = scopes;
                    continue 'run;
                }
                _ => {
                    failed = true;
                    break;
                }
            }
        }
        for tool in runtime.tools(&Scope::Global) {
            let outcome = runtime
                .call(
                    &Scope::Global,
                    &tool.name,
                    Some(json!({})),
                    CallOptions::default(),
                )
                .await;
            println!(
                "{}: {} {}",
                tool.raw_name,
                outcome.kind.name(),
                outcome.projection
            );
            if let Some(scope) = wanted_scope(&outcome.projection) {
                if logins >= MAX_LOGINS {
                    eprintln!(
                        "mcpvisor conformance: {scenario}: still refused after {logins} logins; giving up"
                    );
                    failed = true;
                    break 'run;
                }
                request.scopes = scope.split_whitespace().map(str::to_owned).collect();
                continue 'run;
            }
            failed |= !outcome.is_ok();
        }
        break;
    }
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    if !report.is_clean() {
        bail!("the shutdown did not confirm: {:?}", report.unconfirmed);
    }
    Ok(u8::from(failed))
}

/// The scope a call refused for lack of it names (`runtime::call`'s text).
fn wanted_scope(projection: &str) -> Option<String> {
    let (_, rest) = projection.split_once("insufficient_scope, scope \"")?;
    rest.split_once('"').map(|(s, _)| s.to_owned())
}
