//! OAuth refresh and rotation (CONN-13) against a small authorization
//! server and MCP endpoint on 127.0.0.1 that rotate every refresh token and
//! can revoke the current access token on demand, so that the refresh is
//! driven by the server's 401, never by a clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mcpvisor::oauth::{HeadlessAuthorization, LoginRequest, login};
use mcpvisor::{
    CallOptions, FileSecretStore, MemorySecretStore, OAuthConfig, Runtime, Scope, SecretStore,
    ServerConfig, TransportConfig,
};
use serde_json::{Value, json};

/// What the fixture issued and saw.
#[derive(Default)]
struct Issued {
    /// The access token the MCP endpoint accepts now.
    access: Option<String>,
    /// The refresh token the token endpoint accepts now.
    refresh: Option<String>,
    /// Tokens minted so far (access `aN` and refresh `rN` share N).
    minted: u32,
    /// The refresh tokens presented, in order.
    refreshes: Vec<String>,
    /// Refuse every refresh (`invalid_grant`).
    refuse_refresh: bool,
    /// Advertise a cleartext token endpoint on another host.
    cleartext_token_endpoint: bool,
    /// Registrations received.
    registrations: u32,
    /// The challenge's `resource_metadata` URL, when not the fixture's own.
    metadata_at: Option<String>,
    /// The JWT-bearer assertions presented, in order.
    assertions: Vec<String>,
    /// Refuse every JWT-bearer request (`invalid_grant`).
    refuse_assertion: bool,
    /// Answer each refresh this much later (two refreshes overlap).
    refresh_delay: Option<Duration>,
}

#[derive(Clone)]
struct Fixture {
    base: String,
    issued: Arc<Mutex<Issued>>,
}

fn json_reply(status: StatusCode, v: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn form(body: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn field<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl Fixture {
    fn mint(&self) -> Value {
        let mut i = self.issued.lock().unwrap();
        i.minted += 1;
        let n = i.minted;
        i.access = Some(format!("a{n}"));
        i.refresh = Some(format!("r{n}"));
        json!({"access_token": format!("a{n}"), "token_type": "Bearer", "expires_in": 3600, "refresh_token": format!("r{n}"), "scope": "notes"})
    }
}

async fn prm(State(f): State<Fixture>) -> Response {
    json_reply(
        StatusCode::OK,
        json!({"resource": format!("{}/mcp", f.base), "authorization_servers": [f.base], "scopes_supported": ["notes"]}),
    )
}

async fn as_metadata(State(f): State<Fixture>) -> Response {
    let b = &f.base;
    let token_endpoint = if f.issued.lock().unwrap().cleartext_token_endpoint {
        "http://as.example.com/token".to_owned()
    } else {
        format!("{b}/token")
    };
    json_reply(
        StatusCode::OK,
        json!({
            "issuer": b, "authorization_endpoint": format!("{b}/authorize"),
            "token_endpoint": token_endpoint, "registration_endpoint": format!("{b}/register"),
            "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": ["notes"]
        }),
    )
}

async fn register(State(f): State<Fixture>, body: Bytes) -> Response {
    f.issued.lock().unwrap().registrations += 1;
    let asked: Value = serde_json::from_slice(&body).unwrap_or_default();
    json_reply(
        StatusCode::CREATED,
        json!({"client_id": "client-1", "redirect_uris": asked["redirect_uris"], "token_endpoint_auth_method": "none"}),
    )
}

async fn authorize(RawQuery(q): RawQuery) -> Response {
    let pairs = form(q.unwrap_or_default().as_bytes());
    let to = format!(
        "{}?code=code-1&state={}",
        field(&pairs, "redirect_uri").unwrap_or_default(),
        field(&pairs, "state").unwrap_or_default()
    );
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

async fn token(State(f): State<Fixture>, body: Bytes) -> Response {
    let pairs = form(&body);
    match field(&pairs, "grant_type") {
        Some("authorization_code") => json_reply(StatusCode::OK, f.mint()),
        Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
            let refuse = {
                let mut i = f.issued.lock().unwrap();
                let assertion = field(&pairs, "assertion").unwrap_or_default().to_owned();
                i.assertions.push(assertion);
                i.refuse_assertion
            };
            if refuse {
                json_reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "invalid_grant", "error_description": "assertion expired"}),
                )
            } else {
                json_reply(StatusCode::OK, f.mint())
            }
        }
        Some("refresh_token") => {
            let presented = field(&pairs, "refresh_token")
                .unwrap_or_default()
                .to_owned();
            let delay = f.issued.lock().unwrap().refresh_delay;
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let ok = {
                let mut i = f.issued.lock().unwrap();
                i.refreshes.push(presented.clone());
                !i.refuse_refresh && i.refresh.as_deref() == Some(presented.as_str())
            };
            if ok {
                json_reply(StatusCode::OK, f.mint())
            } else {
                json_reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "invalid_grant", "error_description": "refresh token not valid"}),
                )
            }
        }
        _ => json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "unsupported_grant_type"}),
        ),
    }
}

/// A minimal MCP endpoint (JSON replies, no session) that wants the
/// current access token on every request.
async fn mcp(State(f): State<Fixture>, headers: HeaderMap, body: Bytes) -> Response {
    let current = f.issued.lock().unwrap().access.clone();
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if current.is_none() || sent != current.as_deref() {
        let elsewhere = f.issued.lock().unwrap().metadata_at.clone();
        let metadata = elsewhere
            .unwrap_or_else(|| format!("{}/.well-known/oauth-protected-resource/mcp", f.base));
        let challenge = format!("Bearer resource_metadata=\"{metadata}\", scope=\"notes\"");
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            "",
        )
            .into_response();
    }
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": msg["params"]["protocolVersion"].clone(),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "notes", "version": "1"}
        }),
        "tools/list" => json!({"tools": [{"name": "read", "inputSchema": {"type": "object"}}]}),
        // A careless server that echoes the credential it was sent.
        "tools/call" => {
            json!({"content": [{"type": "text", "text": format!("the notes (you sent {})", sent.unwrap_or_default())}]})
        }
        _ => json!({}),
    };
    json_reply(
        StatusCode::OK,
        json!({"jsonrpc": "2.0", "id": id, "result": result}),
    )
}

async fn start() -> Fixture {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let f = Fixture {
        base,
        issued: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route(
            "/mcp",
            post(mcp).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(f.clone());
    tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    f
}

/// The fixture's `notes` server with `[oauth]`, reconnects off: its
/// config and its HTTP part (what `login` takes).
fn notes_config(f: &Fixture) -> (ServerConfig, mcpvisor::HttpConfig) {
    let mut cfg = ServerConfig::http("notes", format!("{}/mcp", f.base)).trusted();
    cfg.reconnect.enabled = false;
    let TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        unreachable!()
    };
    http.oauth = Some(Box::new(OAuthConfig::default()));
    let http = http.clone();
    (cfg, http)
}

fn revoke(f: &Fixture) {
    f.issued.lock().unwrap().access = None;
}

async fn stored(store: &Arc<dyn SecretStore>) -> String {
    store.get("oauth.notes").await.unwrap().expose().to_owned()
}

#[tokio::test]
async fn a_rejected_token_is_refreshed_once_the_rotated_refresh_token_is_kept_and_used_next() {
    // CONN-13: refresh tokens used and rotated; the rotation lands in the
    // SecretStore; a refused refresh ends the call saying to log in again,
    // with nothing executed.
    let f = start().await;
    let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
    let (cfg, http) = notes_config(&f);
    let got = login(
        "notes",
        &http,
        store.clone(),
        &HeadlessAuthorization::default(),
        &LoginRequest::default(),
    )
    .await
    .unwrap();
    assert_eq!(got.client_id, "client-1");
    assert!(got.refreshable);
    assert!(stored(&store).await.contains("\"r1\""));

    let rt = Runtime::builder()
        .secrets(store.clone())
        .start()
        .await
        .unwrap();
    rt.add_server(Scope::Global, cfg.clone()).await.unwrap();
    rt.wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
        .await
        .unwrap();
    let call = || {
        rt.call(
            &Scope::Global,
            "mcp__notes__read",
            None,
            CallOptions::default(),
        )
    };
    // TRUST-2: the token held at connect is redacted from what comes back.
    let first = call().await;
    assert!(first.is_ok(), "{}", first.projection);
    assert!(
        first.projection.contains("you sent [redacted]") && !first.projection.contains("a1"),
        "{}",
        first.projection
    );
    // The chaos runner's redaction break switch reaches this path too (so
    // no_secret_leak can be shown failing for it): the token shows.
    let broken = Runtime::builder()
        .secrets(store.clone())
        .break_for_chaos(mcpvisor::ChaosSwitches {
            no_redaction: true,
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    broken.add_server(Scope::Global, cfg.clone()).await.unwrap();
    broken
        .wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
        .await
        .unwrap();
    let leaked = broken
        .call(
            &Scope::Global,
            "mcp__notes__read",
            None,
            CallOptions::default(),
        )
        .await;
    assert!(
        leaked.projection.contains("you sent a1"),
        "{}",
        leaked.projection
    );
    assert!(broken.shutdown(Duration::from_secs(10)).await.is_clean());

    // The server stops taking a1: the next request is refused, refreshed
    // with r1 once, and sent again with a2.
    revoke(&f);
    let out = call().await;
    assert!(out.is_ok(), "{}", out.projection);
    let kept = stored(&store).await;
    assert!(
        kept.contains("\"r2\"") && !kept.contains("\"r1\""),
        "the rotated refresh token replaced the old one in the store"
    );
    // Again: the rotated r2 is the one presented.
    revoke(&f);
    assert!(call().await.is_ok());
    assert_eq!(f.issued.lock().unwrap().refreshes, ["r1", "r2"]);

    // A refused refresh: the call ends without running, saying how to fix it.
    f.issued.lock().unwrap().refuse_refresh = true;
    revoke(&f);
    let out = call().await;
    assert_eq!(
        out.kind,
        mcpvisor::OutcomeKind::ServerError,
        "{}",
        out.projection
    );
    assert_eq!(out.side_effects, mcpvisor::SideEffects::None);
    assert!(
        out.projection.contains("requires authorization")
            && out.projection.contains("mcpvisor auth login notes"),
        "{}",
        out.projection
    );
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

#[tokio::test]
async fn a_cleartext_token_endpoint_is_refused_before_anything_is_sent_to_the_server() {
    // TRUST-3 / CONN-13: the code, a client secret and refresh tokens go
    // to the token endpoint; one that is neither https nor loopback is
    // refused at discovery, before the client even registers.
    let f = start().await;
    f.issued.lock().unwrap().cleartext_token_endpoint = true;
    let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
    let mut cfg = ServerConfig::http("notes", format!("{}/mcp", f.base));
    let TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        unreachable!()
    };
    http.oauth = Some(Box::new(OAuthConfig::default()));
    let e = login_error(&cfg, &store).await;
    assert!(
        e.contains("http://as.example.com/token is refused") && e.contains("use https://"),
        "{e}"
    );
    assert_eq!(f.issued.lock().unwrap().registrations, 0);
    assert!(
        store.get("oauth.notes").await.is_err(),
        "nothing was stored"
    );
}

#[tokio::test]
async fn a_challenge_pointing_at_cleartext_metadata_elsewhere_is_refused_without_dialing_it() {
    // TRUST-3: every URL the runtime dials goes
    // through the one endpoint validator, OAuth discovery included. The
    // 401 names protected-resource metadata on http://127.0.0.2, which is
    // not a loopback name the rule allows (only localhost, 127.0.0.1 and
    // [::1]), though it reaches a listener here: it must never be asked.
    let f = start().await;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let elsewhere = format!("http://{}/prm", listener.local_addr().unwrap());
    let count = asked.clone();
    let app = axum::Router::new().fallback(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { StatusCode::NOT_FOUND }
    });
    tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    f.issued.lock().unwrap().metadata_at = Some(elsewhere.clone());
    let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
    let mut cfg = ServerConfig::http("notes", format!("{}/mcp", f.base));
    let TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        unreachable!()
    };
    http.oauth = Some(Box::new(OAuthConfig::default()));
    let e = login_error(&cfg, &store).await;
    assert!(e.contains(&elsewhere) && e.contains("refused"), "{e}");
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the cleartext metadata URL was dialed"
    );
    assert_eq!(f.issued.lock().unwrap().registrations, 0);
}

/// The error of a headless login to `cfg`'s server (which must fail).
async fn login_error(cfg: &ServerConfig, store: &Arc<dyn SecretStore>) -> String {
    let TransportConfig::StreamableHttp(http) = &cfg.transport else {
        unreachable!()
    };
    login(
        "notes",
        http,
        store.clone(),
        &HeadlessAuthorization::default(),
        &LoginRequest::default(),
    )
    .await
    .unwrap_err()
    .to_string()
}

#[tokio::test]
async fn a_workload_jwt_is_read_again_at_every_connection_and_a_refusal_is_not_retried() {
    // ERA-8 (SEP-1933): grant = "jwt_bearer" sends the workload's JWT from
    // its file as the assertion at every connection (the platform rotates
    // it), and an authorization server's refusal ends the connection with
    // its words, after one request.
    let f = start().await;
    let dir = mcpvisor_chaos::unique_temp_path("wif");
    std::fs::create_dir_all(&dir).unwrap();
    let jwt = dir.join("token.jwt");
    std::fs::write(&jwt, "workload-jwt-1\n").unwrap();
    let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
    let mut cfg = ServerConfig::http("notes", format!("{}/mcp", f.base)).trusted();
    cfg.reconnect.enabled = false;
    let TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        unreachable!()
    };
    http.oauth = Some(Box::new(OAuthConfig {
        grant: mcpvisor::OAuthGrant::JwtBearer,
        client_id: Some("workload".into()),
        assertion_file: Some(jwt.clone()),
        ..OAuthConfig::default()
    }));
    let rt = Runtime::builder()
        .secrets(store.clone())
        .start()
        .await
        .unwrap();
    rt.add_server(Scope::Global, cfg.clone()).await.unwrap();
    rt.wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
        .await
        .unwrap();
    let call = || {
        rt.call(
            &Scope::Global,
            "mcp__notes__read",
            None,
            CallOptions::default(),
        )
    };
    assert!(call().await.is_ok());
    std::fs::write(&jwt, "workload-jwt-2").unwrap();
    rt.remove_server(&Scope::Global, "notes").await.unwrap();
    rt.add_server(Scope::Global, cfg.clone()).await.unwrap();
    rt.wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
        .await
        .unwrap();
    assert!(call().await.is_ok());
    assert_eq!(
        f.issued.lock().unwrap().assertions,
        ["workload-jwt-1", "workload-jwt-2"]
    );
    assert_eq!(f.issued.lock().unwrap().registrations, 0, "no registration");

    f.issued.lock().unwrap().refuse_assertion = true;
    rt.remove_server(&Scope::Global, "notes").await.unwrap();
    rt.add_server(Scope::Global, cfg.clone()).await.unwrap();
    let e = rt
        .wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("jwt_bearer token request failed")
            && e.contains("HTTP 400, invalid_grant: assertion expired"),
        "{e}"
    );
    assert_eq!(f.issued.lock().unwrap().assertions.len(), 3, "not retried");
    mcpvisor_chaos::shutdown_checked(&rt, &[])
        .await
        .assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `grant = "enterprise"` config for the fixture's server, with the
/// user's ID token in `store`.
async fn enterprise_config(
    f: &Fixture,
    idp_token_endpoint: &str,
    store: &Arc<dyn SecretStore>,
) -> ServerConfig {
    store
        .put("idp.token", mcpvisor::Secret::new("id-token-1".to_owned()))
        .await
        .unwrap();
    let mut cfg = ServerConfig::http("notes", format!("{}/mcp", f.base));
    let TransportConfig::StreamableHttp(http) = &mut cfg.transport else {
        unreachable!()
    };
    http.oauth = Some(Box::new(OAuthConfig {
        grant: mcpvisor::OAuthGrant::Enterprise,
        client_id: Some("client-1".into()),
        idp_issuer: Some(format!("{}/idp", f.base)),
        idp_token_endpoint: Some(idp_token_endpoint.to_owned()),
        idp_client_id: Some("idp-client".into()),
        idp_id_token: Some("idp.token".into()),
        ..OAuthConfig::default()
    }));
    cfg
}

#[tokio::test]
async fn the_enterprise_grant_checks_every_endpoint_before_a_token_is_sent() {
    // TRUST-3 / CONN-13: the enterprise grant sends the user's ID token to
    // the identity provider and the ID-JAG to the authorization server; it
    // goes through the same discovery and endpoint check as the others.
    for (cleartext_as, idp, refused) in [
        (true, None, "http://as.example.com/token is refused"),
        (
            false,
            Some("http://idp.example.com/token"),
            "http://idp.example.com/token is refused",
        ),
    ] {
        let f = start().await;
        f.issued.lock().unwrap().cleartext_token_endpoint = cleartext_as;
        let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
        let idp = idp
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}/idp/token", f.base));
        let cfg = enterprise_config(&f, &idp, &store).await;
        let e = login_error(&cfg, &store).await;
        assert!(e.contains(refused) && e.contains("use https://"), "{e}");
        assert!(
            store.get("oauth.notes").await.is_err(),
            "nothing was stored"
        );
    }
}

// Issue 35 (SCALE-5): replicas sharing one secrets file refresh in a transaction.
// Two runtimes (each with its own handle on the file, as two processes
// would) get a 401 at the same time and both refresh, each answer 300 ms
// late: the second reads the refresh token the first rotated (under the
// file's refresh lock) instead of replaying the old one, which the
// server would refuse (`invalid_grant`: "log in again").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_secrets_file_never_replay_a_rotated_refresh_token() {
    let f = start().await;
    let dir = mcpvisor_chaos::unique_temp_path("shared-secrets");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secrets.toml");
    let handle = || -> Arc<dyn SecretStore> { Arc::new(FileSecretStore::open(&path).unwrap()) };
    let (cfg, http) = notes_config(&f);
    login(
        "notes",
        &http,
        handle(),
        &HeadlessAuthorization::default(),
        &LoginRequest::default(),
    )
    .await
    .unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let rt = Runtime::builder().secrets(handle()).start().await.unwrap();
        rt.add_server(Scope::Global, cfg.clone()).await.unwrap();
        rt.wait_ready(&Scope::Global, "notes", Duration::from_secs(15))
            .await
            .unwrap();
        replicas.push(rt);
    }
    f.issued.lock().unwrap().refresh_delay = Some(Duration::from_millis(300));
    revoke(&f);
    let call = |rt: &Runtime| {
        let rt = rt.clone();
        async move {
            rt.call(
                &Scope::Global,
                "mcp__notes__read",
                None,
                CallOptions::default(),
            )
            .await
        }
    };
    let (a, b) = tokio::join!(call(&replicas[0]), call(&replicas[1]));
    let refreshes = f.issued.lock().unwrap().refreshes.clone();
    let distinct: std::collections::HashSet<&String> = refreshes.iter().collect();
    assert_eq!(
        (refreshes.len(), distinct.len()),
        (2, 2),
        "each replica refreshed once, no refresh token presented twice: {refreshes:?}"
    );
    assert!(a.is_ok() && b.is_ok(), "{}\n{}", a.projection, b.projection);
    let kept = handle()
        .get("oauth.notes")
        .await
        .unwrap()
        .expose()
        .to_owned();
    let last = refreshes
        .last()
        .unwrap()
        .trim_start_matches('r')
        .parse::<u32>()
        .unwrap();
    assert!(
        kept.contains(&format!("\"r{}\"", last + 1)),
        "the newest rotation is kept"
    );
    for rt in replicas {
        assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
