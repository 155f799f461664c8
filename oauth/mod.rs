//! OAuth 2.1 for streamable-HTTP servers (CONN-13), feature `oauth`.
//!
//! rmcp's `auth` does the protocol: discovery (the 401 challenge's
//! `resource_metadata`, the protected-resource and authorization-server
//! well-knowns), client registration (pre-registered, a Client ID Metadata
//! Document, dynamic registration, in that order), PKCE S256, the RFC 8707
//! `resource` parameter, scope selection, the resource-mismatch refusal,
//! and refresh with rotation. This module adds what is mcpvisor's:
//!
//! - tokens and client registrations live in the runtime's
//!   [`SecretStore`], under [`credentials_name`] (`oauth.<server>`), as
//!   JSON that only a [`crate::Secret`] ever holds;
//! - the interactive step is an [`AuthorizationUi`]: the binary's prints
//!   the URL, opens a browser when one is there, and takes the redirect on
//!   a 127.0.0.1 listener; [`HeadlessAuthorization`] follows an
//!   authorization server that redirects at once (tests, the conformance
//!   suite);
//! - [`login`] probes the server for its challenge first (`server/discover`,
//!   then `initialize`), so discovery starts where the server points, and
//!   refuses an authorization endpoint that is neither https nor loopback
//!   (TRUST-3); a login for more scope asks for the granted ones too
//!   (SEP-2350);
//! - DPoP-bound tokens ([`DpopKey`], SEP-1932) when the challenge names the
//!   DPoP scheme or `dpop = true`: the key is kept with the tokens, token
//!   requests carry a proof (`dial.rs`), the connection's requests too
//!   (`transport/dpop.rs`);
//! - the workload-identity JWT-bearer grant (SEP-1933), made here;
//! - a connection with `[servers.<name>.oauth]` sends the stored token and
//!   refreshes it (`transport/http.rs`); without one it asks the server
//!   unauthenticated, and a 401 says to run `mcpvisor auth login <name>`.
//!   A 403 `insufficient_scope` on a call ends that call (nothing was
//!   executed) naming the scope to log in with: the runtime never opens an
//!   authorization by itself in the middle of a call.

mod dial;
mod dpop;
mod error;

pub use dial::DialError;
pub(crate) use dpop::{DPOP_HEADER, NONCE_HEADER};
pub use dpop::{DpopError, DpopKey};
pub use error::OAuthError;

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, ClientCredentialsConfig, CredentialStore, JwtSigningAlgorithm,
    OAuthState, StoredCredentials,
};
use serde_json::Value;

use crate::messages::config::{HttpConfig, OAuthGrant};
use crate::messages::store::StoreError;
use crate::messages::trust::{Secret, SecretStore, validate_endpoint};

/// The secret-store name of `server`'s OAuth credentials.
pub fn credentials_name(server: &str) -> String {
    format!("oauth.{server}")
}

/// Where the interactive step of a login happens.
pub trait AuthorizationUi: Send + Sync {
    /// The redirect URI the authorization server is to send the user back
    /// to (asked once per login, before the authorization URL exists).
    fn redirect_uri(&self) -> BoxFuture<'_, Result<String, String>>;

    /// Let the user authorize at `url` (for `server`); resolve with the URL
    /// the authorization server redirected to, `code` and `state` in it.
    fn authorize<'a>(
        &'a self,
        server: &'a str,
        url: &'a str,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// An [`AuthorizationUi`] for an authorization server that redirects at
/// once (no login page): it asks for the authorization URL without
/// following the redirect and takes the code from `Location`.
#[derive(Debug, Clone)]
pub struct HeadlessAuthorization {
    redirect_uri: String,
}

impl HeadlessAuthorization {
    /// With this redirect URI (never dialled: the redirect is read, not followed).
    pub fn new(redirect_uri: impl Into<String>) -> Self {
        Self {
            redirect_uri: redirect_uri.into(),
        }
    }
}

impl Default for HeadlessAuthorization {
    fn default() -> Self {
        Self::new("http://localhost:3000/callback")
    }
}

impl AuthorizationUi for HeadlessAuthorization {
    fn redirect_uri(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move { Ok(self.redirect_uri.clone()) })
    }

    fn authorize<'a>(
        &'a self,
        _server: &'a str,
        url: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let client = no_redirects(std::time::Duration::from_secs(30))
                .ok_or_else(|| "cannot build the HTTP client".to_owned())?;
            let reply = client
                .get(url)
                .send()
                .await
                .map_err(|e| format!("the authorization endpoint did not answer: {e}"))?;
            reply
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .ok_or_else(|| {
                    format!(
                        "the authorization endpoint answered HTTP {} without a redirect: it needs a person (use `mcpvisor auth login`)",
                        reply.status().as_u16()
                    )
                })
        })
    }
}

/// rmcp's credential store on a [`SecretStore`] entry, bound to the
/// server's URL: an entry saved for another URL (the config's `url`
/// changed) is not loaded, so a token never goes to a resource it was not
/// issued for.
pub(crate) struct SecretCredentials {
    store: Arc<dyn SecretStore>,
    name: String,
    resource: String,
    /// The DPoP key the tokens are bound to, kept beside them.
    dpop: Option<Arc<DpopKey>>,
}

/// The key of the entry's JSON that names the URL it was issued for.
const RESOURCE_KEY: &str = "mcpvisor_resource";
/// The key of the entry's JSON that holds the DPoP private key.
const DPOP_KEY: &str = "mcpvisor_dpop_key";

impl SecretCredentials {
    pub(crate) fn new(store: Arc<dyn SecretStore>, server: &str, url: &str) -> Self {
        Self {
            store,
            name: credentials_name(server),
            resource: url.to_owned(),
            dpop: None,
        }
    }

    /// Saves keep `key` beside the tokens.
    fn with_dpop(mut self, key: Option<Arc<DpopKey>>) -> Self {
        self.dpop = key;
        self
    }

    /// The DPoP key stored with the tokens, if they are DPoP-bound.
    async fn dpop_key(&self) -> Result<Option<Arc<DpopKey>>, StoreError> {
        let secret = match self.store.get(&self.name).await {
            Ok(secret) => secret,
            Err(StoreError::Missing { .. } | StoreError::EnvNotSet(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let value: Value = serde_json::from_str(secret.expose()).unwrap_or(Value::Null);
        if value.get(RESOURCE_KEY).and_then(Value::as_str) != Some(self.resource.as_str()) {
            return Ok(None);
        }
        // A token the authorization server did not bind is sent as a
        // bearer token (RFC 9449 §7.1).
        let bound = value
            .pointer("/token_response/token_type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("dpop"));
        if !bound {
            return Ok(None);
        }
        Ok(value
            .get(DPOP_KEY)
            .and_then(Value::as_str)
            .and_then(|k| DpopKey::from_stored(k).ok())
            .map(Arc::new))
    }
}

fn store_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for SecretCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let secret = match self.store.get(&self.name).await {
            Ok(secret) => secret,
            Err(StoreError::Missing { .. } | StoreError::EnvNotSet(_)) => return Ok(None),
            Err(e) => return Err(store_error(e)),
        };
        let unreadable = || {
            store_error(format!(
                "the stored OAuth credentials {} are not readable; log in again",
                self.name
            ))
        };
        let value: Value = serde_json::from_str(secret.expose()).map_err(|_| unreadable())?;
        if value.get(RESOURCE_KEY).and_then(Value::as_str) != Some(self.resource.as_str()) {
            return Ok(None); // issued for another URL (or by an older build): log in again
        }
        serde_json::from_value(value)
            .map(Some)
            .map_err(|_| unreadable())
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let mut value = serde_json::to_value(&credentials).map_err(store_error)?;
        if let Value::Object(m) = &mut value {
            m.insert(RESOURCE_KEY.into(), self.resource.clone().into());
            if let Some(key) = &self.dpop {
                m.insert(DPOP_KEY.into(), key.to_stored().into());
            }
        }
        let json = value.to_string();
        self.store
            .put(&self.name, Secret::new(json))
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store.remove(&self.name).await.map_err(store_error)
    }

    /// A refresh is one transaction among the processes sharing the store
    /// (replicas on one secrets file): rmcp takes this before it reads the
    /// stored refresh token and holds it until the rotated one is saved.
    async fn acquire_refresh_guard(
        &self,
    ) -> Result<Option<rmcp::transport::auth::CredentialRefreshGuard>, AuthError> {
        let lock = self
            .store
            .refresh_lock(&self.name)
            .await
            .map_err(store_error)?;
        Ok(lock.map(rmcp::transport::auth::CredentialRefreshGuard::new))
    }
}

/// rmcp's authorization manager for `server` at `url`, dialing through
/// [`dial::CheckedClient`]: every URL of discovery, registration, the
/// token and refresh requests passes the endpoint validator (TRUST-3).
async fn new_manager(
    server: &str,
    url: &str,
    dpop: Option<Arc<DpopKey>>,
) -> Result<AuthorizationManager, OAuthError> {
    let client = dial::CheckedClient::new(url)
        .map_err(|source| OAuthError::Client {
            server: server.to_owned(),
            source,
        })?
        .with_dpop(dpop);
    AuthorizationManager::new_with_oauth_http_client(url, Arc::new(client))
        .await
        .map_err(protocol(server))
}

/// rmcp's error of a step for `server`, classified as a protocol failure.
fn protocol(server: &str) -> impl Fn(AuthError) -> OAuthError + '_ {
    move |source| OAuthError::Protocol {
        server: server.to_owned(),
        source: Box::new(source),
    }
}

/// What a connection authorizes with: rmcp's manager, whether tokens are
/// stored, and the DPoP key they are bound to.
pub(crate) struct Connecting {
    /// The authorization manager (its tokens from the store).
    pub(crate) manager: AuthorizationManager,
    /// The DPoP key, when the stored tokens are DPoP-bound.
    pub(crate) dpop: Option<Arc<DpopKey>>,
}

/// An authorization manager for `server` at `url` whose tokens come from
/// (and rotated ones go to) `store`.
pub(crate) async fn manager(
    server: &str,
    url: &str,
    store: Arc<dyn SecretStore>,
) -> Result<Connecting, OAuthError> {
    let dpop = SecretCredentials::new(store.clone(), server, url)
        .dpop_key()
        .await
        .map_err(|source| OAuthError::Secret {
            server: server.to_owned(),
            what: "the stored OAuth credentials",
            name: credentials_name(server),
            source: Box::new(source),
        })?;
    let mut manager = new_manager(server, url, dpop.clone()).await?;
    let creds = SecretCredentials::new(store, server, url).with_dpop(dpop.clone());
    let held = creds
        .load()
        .await
        .map_err(protocol(server))?
        .is_some_and(|c| c.token_response.is_some());
    manager.set_credential_store(creds);
    if held {
        // Refreshes go to the token endpoint: checked before the first.
        let metadata = discover(server, &manager, url, None).await?;
        manager.set_metadata(metadata);
    }
    manager
        .initialize_from_store()
        .await
        .map_err(protocol(server))?;
    Ok(Connecting { manager, dpop })
}

/// The token values stored for `server` at `url` (to redact from what the
/// server sends back, TRUST-2).
pub(crate) async fn token_values(
    server: &str,
    url: &str,
    store: Arc<dyn SecretStore>,
) -> Vec<String> {
    let Ok(Some(stored)) = SecretCredentials::new(store, server, url).load().await else {
        return Vec::new();
    };
    let token = stored
        .token_response
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or(Value::Null);
    ["access_token", "refresh_token"]
        .iter()
        .filter_map(|k| token.get(k).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The authorization server's metadata for the server at `url`: rmcp's
/// discovery (seeded by the 401 `challenge`), else a 2025-03-26 server's
/// own root ([`legacy_metadata`]); every endpoint in it is checked
/// (TRUST-3: https, or http on loopback) before anything is sent to one.
async fn discover(
    server: &str,
    manager: &AuthorizationManager,
    url: &str,
    challenge: Option<&str>,
) -> Result<AuthorizationMetadata, OAuthError> {
    let metadata = match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolution) => resolution.metadata,
        Err(mismatch @ AuthError::AuthorizationServerMismatch { .. }) => {
            match legacy_metadata(url).await {
                Some(metadata) => metadata,
                None => return Err(protocol(server)(mismatch)),
            }
        }
        Err(e) => return Err(protocol(server)(e)),
    };
    for endpoint in [&metadata.authorization_endpoint, &metadata.token_endpoint]
        .into_iter()
        .chain(metadata.registration_endpoint.as_ref())
    {
        validate_endpoint(endpoint).map_err(|source| OAuthError::EndpointRefused {
            server: server.to_owned(),
            owner: "the authorization server's",
            endpoint: endpoint.clone(),
            source,
        })?;
    }
    Ok(metadata)
}

/// How long a discovery probe may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// A client that follows no redirect and gives up after `timeout`, for the
/// probes ([`PROBE_TIMEOUT`]) and the headless step (30 s: an
/// authorization server that renders a page first may be slow).
fn no_redirects(timeout: std::time::Duration) -> Option<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .build()
        .ok()
}

/// The authorization-server metadata of a 2025-03-26 server: at its own
/// origin's `/.well-known/oauth-authorization-server`, accepted although
/// its `issuer` names a path (RFC 8414 would put that document elsewhere)
/// only when the issuer is of the same origin as the MCP server (its
/// endpoints are checked by [`discover`]).
async fn legacy_metadata(url: &str) -> Option<AuthorizationMetadata> {
    let base = url::Url::parse(url).ok()?;
    let at = base.join("/.well-known/oauth-authorization-server").ok()?;
    let reply = no_redirects(PROBE_TIMEOUT)?.get(at).send().await.ok()?;
    if !reply.status().is_success() {
        return None;
    }
    let metadata: AuthorizationMetadata = reply.json().await.ok()?;
    let issuer = url::Url::parse(metadata.issuer.as_deref()?).ok()?;
    (issuer.origin() == base.origin()).then_some(metadata)
}

/// What a login asks for beyond the server's `[oauth]` table.
#[derive(Debug, Clone, Default)]
pub struct LoginRequest {
    /// Scopes to ask for instead of the configured ones (a step-up).
    pub scopes: Vec<String>,
}

/// What a login obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    /// The client id used (registered now, pre-registered, or a metadata URL).
    pub client_id: String,
    /// The scopes granted (as the token response says, else as asked).
    pub scopes: Vec<String>,
    /// Seconds the access token is valid for, when the server said.
    pub expires_in: Option<u64>,
    /// Whether a refresh token came with it.
    pub refreshable: bool,
}

/// Authorize mcpvisor for `server` (CONN-13): discover, register, let the
/// user authorize through `ui`, exchange the code, and keep the tokens in
/// `store` (the connection then uses them).
pub async fn login(
    server: &str,
    http: &HttpConfig,
    store: Arc<dyn SecretStore>,
    ui: &dyn AuthorizationUi,
    request: &LoginRequest,
) -> Result<Authorized, OAuthError> {
    validate_endpoint(&http.url).map_err(OAuthError::ServerUrl)?;
    let oauth = http.oauth.as_deref().cloned().unwrap_or_default();
    let creds = SecretCredentials::new(store.clone(), server, &http.url);
    // SEP-2350: a step-up asks for the scopes held as well as the new ones.
    let mut scopes = oauth.scopes.clone();
    if !request.scopes.is_empty() {
        scopes = match creds.load().await {
            Ok(Some(held)) => held.granted_scopes,
            _ => Vec::new(),
        };
        for s in &request.scopes {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
    }
    let scopes = &scopes;
    let client_secret = match &oauth.client_secret {
        Some(name) => Some(store.get(name).await.map_err(secret_error(
            server,
            "the client secret",
            name,
        ))?),
        None => None,
    };
    let challenge = match oauth.grant {
        OAuthGrant::AuthorizationCode => probe(&http.url).await,
        _ => None,
    };
    // DPoP-bound tokens when asked for, or when the server's challenge
    // names the DPoP scheme.
    let wants_dpop = oauth.grant != OAuthGrant::Enterprise
        && oauth.dpop.unwrap_or_else(|| {
            challenge
                .as_deref()
                .is_some_and(|c| c.trim_start().to_ascii_lowercase().starts_with("dpop"))
        });
    let dpop = if wants_dpop {
        Some(Arc::new(DpopKey::generate().map_err(|source| {
            OAuthError::Dpop {
                server: server.to_owned(),
                source,
            }
        })?))
    } else {
        None
    };
    let mut manager = new_manager(server, &http.url, dpop.clone()).await?;
    manager.set_credential_store(creds.with_dpop(dpop.clone()));
    if oauth.grant == OAuthGrant::Enterprise {
        return enterprise(server, http, &oauth, store, &manager, client_secret, scopes).await;
    }
    if oauth.grant == OAuthGrant::ClientCredentials {
        return client_credentials(server, http, &oauth, store, manager, client_secret, scopes)
            .await;
    }
    if oauth.grant == OAuthGrant::JwtBearer {
        return jwt_bearer(server, http, &oauth, store, &manager, dpop, scopes).await;
    }
    let redirect = ui.redirect_uri().await.map_err(OAuthError::Ui)?;
    let mut ask = AuthorizationRequest::new(redirect)
        .with_client_name(oauth.client_name.as_deref().unwrap_or("mcpvisor"));
    if let Some(id) = &oauth.client_id {
        ask = ask.with_preregistered_client(id.clone());
        if let Some(secret) = &client_secret {
            ask = ask.with_client_secret(secret.expose().to_owned());
        }
    }
    if let Some(url) = &oauth.client_metadata_url {
        ask = ask.with_client_metadata_url(url.clone());
    }
    if !scopes.is_empty() {
        ask = ask.with_scopes(scopes.iter().cloned());
    }
    // Discovery first, and every endpoint checked, before the
    // registration or anything else is sent (TRUST-3).
    let metadata = discover(server, &manager, &http.url, challenge.as_deref()).await?;
    if dpop.is_some() {
        dpop_offered(server, &metadata)?;
    }
    manager.set_metadata(metadata);
    if let Some(challenge) = challenge {
        ask = ask.with_challenge(challenge);
    }
    let session = AuthorizationSession::new(manager, ask)
        .await
        .map_err(|(_, e)| protocol(server)(e))?;
    let mut state = OAuthState::Session(session);
    let url = state
        .get_authorization_url()
        .await
        .map_err(protocol(server))?;
    // TRUST-3: the user's browser (or the headless client) is sent only to
    // an https or loopback authorization endpoint.
    validate_endpoint(&url).map_err(|source| OAuthError::AuthorizationUrlRefused {
        server: server.to_owned(),
        source,
    })?;
    let back = ui.authorize(server, &url).await.map_err(OAuthError::Ui)?;
    state
        .handle_callback_url(&back)
        .await
        .map_err(protocol(server))?;
    stored_summary(server, &http.url, store, scopes).await
}

async fn stored_summary(
    server: &str,
    url: &str,
    store: Arc<dyn SecretStore>,
    asked: &[String],
) -> Result<Authorized, OAuthError> {
    let stored = SecretCredentials::new(store, server, url)
        .load()
        .await
        .map_err(protocol(server))?
        .ok_or_else(|| OAuthError::NoToken {
            server: server.to_owned(),
        })?;
    Ok(summarize(&stored, asked))
}

fn summarize(stored: &StoredCredentials, asked: &[String]) -> Authorized {
    let token = stored
        .token_response
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or(Value::Null);
    let mut scopes = stored.granted_scopes.clone();
    if scopes.is_empty() {
        scopes = token
            .get("scope")
            .and_then(Value::as_str)
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_else(|| asked.to_vec());
    }
    Authorized {
        client_id: stored.client_id.clone(),
        scopes,
        expires_in: token.get("expires_in").and_then(Value::as_u64),
        refreshable: token.get("refresh_token").is_some_and(|r| !r.is_null()),
    }
}

/// `grant = "client_credentials"` (SEP-1046): rmcp requests the token with
/// the client secret or a signed JWT assertion; the token is stored like
/// any other.
async fn client_credentials(
    server: &str,
    http: &HttpConfig,
    oauth: &crate::messages::config::OAuthConfig,
    store: Arc<dyn SecretStore>,
    manager: AuthorizationManager,
    client_secret: Option<Secret>,
    scopes: &[String],
) -> Result<Authorized, OAuthError> {
    let missing = |needs| OAuthError::Missing {
        server: server.to_owned(),
        grant: "client_credentials",
        needs,
    };
    let Some(client_id) = oauth.client_id.clone() else {
        return Err(missing("client_id"));
    };
    // RFC 8707: the token is for this server.
    let resource = Some(http.url.clone());
    let config = match (&oauth.client_assertion_key, &client_secret) {
        (Some(key_name), _) => {
            let key = store.get(key_name).await.map_err(secret_error(
                server,
                "the client assertion key",
                key_name,
            ))?;
            ClientCredentialsConfig::PrivateKeyJwt {
                client_id,
                signing_key: key.expose().as_bytes().to_vec(),
                signing_algorithm: signing_algorithm(server, oauth.signing_algorithm.as_deref())?,
                token_endpoint_audience: None,
                scopes: scopes.to_vec(),
                resource,
            }
        }
        (None, Some(secret)) => ClientCredentialsConfig::ClientSecret {
            client_id,
            client_secret: secret.expose().to_owned(),
            scopes: scopes.to_vec(),
            resource,
        },
        (None, None) => {
            return Err(missing("client_secret or client_assertion_key"));
        }
    };
    OAuthState::Unauthorized(manager)
        .authenticate_client_credentials(config)
        .await
        .map_err(protocol(server))?;
    stored_summary(server, &http.url, store, scopes).await
}

/// Enterprise-managed authorization: the user's ID token (kept in the
/// store by the host) is exchanged at the identity provider for an ID-JAG,
/// and that at the server's authorization server for an access token,
/// which is stored like any other.
async fn enterprise(
    server: &str,
    http: &HttpConfig,
    oauth: &crate::messages::config::OAuthConfig,
    store: Arc<dyn SecretStore>,
    manager: &AuthorizationManager,
    client_secret: Option<Secret>,
    scopes: &[String],
) -> Result<Authorized, OAuthError> {
    use rmcp::transport::auth::enterprise::{
        EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
    };
    let need = |v: &Option<String>, needs: &'static str| {
        v.clone().ok_or_else(|| OAuthError::Missing {
            server: server.to_owned(),
            grant: "enterprise",
            needs,
        })
    };
    let secret = |s: Secret| {
        EmaClientAuthentication::ClientSecretBasic(oauth2::ClientSecret::new(s.expose().to_owned()))
    };
    // The same discovery and endpoint check as every grant (TRUST-3): the
    // ID-JAG and a client secret go to these endpoints.
    let metadata = discover(server, manager, &http.url, None).await?;
    let issuer = metadata
        .issuer
        .clone()
        .ok_or_else(|| OAuthError::NoIssuer {
            server: server.to_owned(),
        })?;
    let id_token_name = need(&oauth.idp_id_token, "idp_id_token")?;
    let id_token = store.get(&id_token_name).await.map_err(secret_error(
        server,
        "the ID token",
        &id_token_name,
    ))?;
    let idp_token_endpoint = need(&oauth.idp_token_endpoint, "idp_token_endpoint")?;
    // The user's ID token goes there.
    validate_endpoint(&idp_token_endpoint).map_err(|source| OAuthError::EndpointRefused {
        server: server.to_owned(),
        owner: "the identity provider's",
        endpoint: idp_token_endpoint.clone(),
        source,
    })?;
    let mut idp = EmaAuthorizationServer::new(
        need(&oauth.idp_issuer, "idp_issuer")?,
        idp_token_endpoint,
        need(&oauth.idp_client_id, "idp_client_id")?,
    );
    if let Some(name) = &oauth.idp_client_secret {
        let s = store.get(name).await.map_err(secret_error(
            server,
            "the identity provider's client secret",
            name,
        ))?;
        idp = idp.with_client_authentication(secret(s));
    }
    let client_id = need(&oauth.client_id, "client_id")?;
    let mut resource_as = EmaAuthorizationServer::new(
        issuer.clone(),
        metadata.token_endpoint.clone(),
        client_id.clone(),
    );
    if let Some(s) = client_secret {
        resource_as = resource_as.with_client_authentication(secret(s));
    }
    let client = rmcp::transport::auth::default_oauth_http_client().map_err(protocol(server))?;
    let token =
        EmaExchangeRequest::new_with_id_token(idp, resource_as, &http.url, id_token.expose())
            .with_scopes(scopes.iter().cloned())
            .exchange(&client, &client)
            .await
            .map_err(|source| OAuthError::Enterprise {
                server: server.to_owned(),
                source: Box::new(source),
            })?;
    let mut granted: Vec<String> = token.scopes.iter().cloned().collect();
    granted.sort();
    let response: rmcp::transport::auth::OAuthTokenResponse =
        serde_json::from_value(serde_json::json!({
            "access_token": token.access_token.secret(),
            "token_type": "Bearer",
            "expires_in": token.expires_in.map(|d| d.as_secs()),
        }))
        .map_err(|source| OAuthError::TokenNotKept {
            server: server.to_owned(),
            source,
        })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .ok();
    SecretCredentials::new(store.clone(), server, &http.url)
        .save(
            StoredCredentials::new(client_id, Some(response), granted, now)
                .with_issuer(Some(issuer)),
        )
        .await
        .map_err(protocol(server))?;
    stored_summary(server, &http.url, store, scopes).await
}

/// Refuse a DPoP login with an authorization server that does not sign
/// DPoP proofs with ES256 (the one algorithm this client offers); one
/// that names no algorithms at all is tried.
fn dpop_offered(server: &str, metadata: &AuthorizationMetadata) -> Result<(), OAuthError> {
    let Some(algs) = metadata
        .additional_fields
        .get("dpop_signing_alg_values_supported")
        .and_then(Value::as_array)
    else {
        return Ok(());
    };
    if algs.iter().any(|a| a.as_str() == Some(dpop::ALGORITHM)) {
        return Ok(());
    }
    Err(OAuthError::DpopUnsupported {
        server: server.to_owned(),
        offered: algs
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The grant type of RFC 7523's JWT-bearer grant.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// `grant = "jwt_bearer"` (RFC 7523, workload identity federation,
/// SEP-1933): the workload's JWT, read again now (platforms rotate it), is
/// the assertion of one token request. An error is reported as the
/// authorization server gave it: no retry, no other grant tried.
async fn jwt_bearer(
    server: &str,
    http: &HttpConfig,
    oauth: &crate::messages::config::OAuthConfig,
    store: Arc<dyn SecretStore>,
    manager: &AuthorizationManager,
    dpop: Option<Arc<DpopKey>>,
    scopes: &[String],
) -> Result<Authorized, OAuthError> {
    let assertion = match (&oauth.assertion, &oauth.assertion_file) {
        (Some(name), _) => store
            .get(name)
            .await
            .map_err(secret_error(server, "the workload's JWT", name))?
            .expose()
            .trim()
            .to_owned(),
        (None, Some(path)) => tokio::fs::read_to_string(path)
            .await
            .map_err(|source| OAuthError::AssertionFile {
                server: server.to_owned(),
                path: path.clone(),
                source,
            })?
            .trim()
            .to_owned(),
        (None, None) => {
            return Err(OAuthError::Missing {
                server: server.to_owned(),
                grant: "jwt_bearer",
                needs: "assertion (a secret name) or assertion_file",
            });
        }
    };
    let metadata = discover(server, manager, &http.url, None).await?;
    if dpop.is_some() {
        dpop_offered(server, &metadata)?;
    }
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", JWT_BEARER)
        .append_pair("assertion", &assertion)
        // RFC 8707: the token is for this server.
        .append_pair("resource", &http.url);
    if let Some(id) = &oauth.client_id {
        form.append_pair("client_id", id);
    }
    if !scopes.is_empty() {
        form.append_pair("scope", &scopes.join(" "));
    }
    let token_error = |why: String| OAuthError::TokenRequest {
        server: server.to_owned(),
        grant: "jwt_bearer",
        why,
    };
    let client = dial::CheckedClient::new(&http.url)
        .map_err(|source| OAuthError::Client {
            server: server.to_owned(),
            source,
        })?
        .with_dpop(dpop.clone());
    let request = reqwest::Client::new()
        .post(&metadata.token_endpoint)
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(form.finish())
        .build()
        .map_err(|e| token_error(e.to_string()))?;
    let reply = client
        .send(request, true, None)
        .await
        .map_err(|e| token_error(e.to_string()))?;
    let body: Value = serde_json::from_slice(reply.body()).unwrap_or(Value::Null);
    if !reply.status().is_success() {
        let code = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error code");
        let text = body
            .get("error_description")
            .and_then(Value::as_str)
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        return Err(token_error(format!(
            "the token endpoint answered HTTP {}, {code}{text}",
            reply.status().as_u16()
        )));
    }
    let response: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(body)
        .map_err(|source| OAuthError::TokenNotKept {
            server: server.to_owned(),
            source,
        })?;
    let granted = {
        use oauth2::TokenResponse as _;
        response
            .scopes()
            .map(|s| s.iter().map(|s| s.to_string()).collect())
            .unwrap_or_else(|| scopes.to_vec())
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .ok();
    let client_id = oauth.client_id.clone().unwrap_or_default();
    SecretCredentials::new(store.clone(), server, &http.url)
        .with_dpop(dpop)
        .save(
            StoredCredentials::new(client_id, Some(response), granted, now)
                .with_issuer(metadata.issuer.clone()),
        )
        .await
        .map_err(protocol(server))?;
    stored_summary(server, &http.url, store, scopes).await
}

/// The `private_key_jwt` algorithm of this name (ES256 when unset).
fn signing_algorithm(server: &str, name: Option<&str>) -> Result<JwtSigningAlgorithm, OAuthError> {
    Ok(match name.unwrap_or("ES256") {
        "ES256" => JwtSigningAlgorithm::ES256,
        "ES384" => JwtSigningAlgorithm::ES384,
        "RS256" => JwtSigningAlgorithm::RS256,
        "RS384" => JwtSigningAlgorithm::RS384,
        "RS512" => JwtSigningAlgorithm::RS512,
        other => {
            return Err(OAuthError::SigningAlgorithm {
                server: server.to_owned(),
                name: other.to_owned(),
            });
        }
    })
}

/// What is stored for `server` at `url`: `None` when it never logged in,
/// logged out, or logged in for another URL.
pub async fn status(
    server: &str,
    url: &str,
    store: Arc<dyn SecretStore>,
) -> Result<Option<Authorized>, OAuthError> {
    let stored = SecretCredentials::new(store, server, url)
        .load()
        .await
        .map_err(protocol(server))?;
    Ok(stored
        .filter(|s| s.token_response.is_some())
        .map(|s| summarize(&s, &[])))
}

/// Forget `server`'s tokens and registration.
pub async fn logout(server: &str, store: Arc<dyn SecretStore>) -> Result<(), OAuthError> {
    store
        .remove(&credentials_name(server))
        .await
        .map_err(|source| OAuthError::Logout {
            server: server.to_owned(),
            source: Box::new(source),
        })
}

/// A store error reading the secret `name` (`what` it is) for `server`.
fn secret_error<'a>(
    server: &'a str,
    what: &'static str,
    name: &'a str,
) -> impl FnOnce(StoreError) -> OAuthError + 'a {
    move |source| OAuthError::Secret {
        server: server.to_owned(),
        what,
        name: name.to_owned(),
        source: Box::new(source),
    }
}

/// The server's `WWW-Authenticate` challenge to an unauthenticated
/// request, when it answers 401 or 403 with one: first to the new era's
/// opening (`server/discover`), then to the old one's (`initialize`), as a
/// server may leave either open.
async fn probe(url: &str) -> Option<String> {
    let client = no_redirects(PROBE_TIMEOUT)?;
    let info = serde_json::json!({"name": "mcpvisor", "version": env!("CARGO_PKG_VERSION")});
    let openings = [
        serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "server/discover",
            "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": info,
                "io.modelcontextprotocol/clientCapabilities": {}}}
        }),
        serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}
        }),
    ];
    for (body, method) in openings.iter().zip(["server/discover", "initialize"]) {
        let reply = client
            .post(url)
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("mcp-method", method)
            .body(body.to_string())
            .send()
            .await
            .ok()?;
        if !matches!(reply.status().as_u16(), 401 | 403) {
            continue;
        }
        if let Some(challenge) = reply
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
        {
            return Some(challenge.to_owned());
        }
    }
    None
}

/// An rmcp authorization error in words, naming the server.
pub(crate) fn describe(server: &str, e: &AuthError) -> String {
    let why = match e {
        AuthError::AuthorizationRequired => {
            "authorization required: run `mcpvisor auth login` for it".to_owned()
        }
        AuthError::TokenRefreshRejected(_) | AuthError::TokenExpired => {
            "the stored authorization expired or was revoked: run `mcpvisor auth login` for it again"
                .to_owned()
        }
        AuthError::ProtectedResourceMetadataInvalid { .. } => format!(
            "the server's protected-resource metadata is refused ({e}): it does not name this server as its resource"
        ),
        // The request's own reason (a URL the endpoint rule refuses, an
        // address that may not be reached, a refused connection) after
        // rmcp's words.
        AuthError::DiscoveryRequestFailed { source, .. } => format!("{e}: {source}"),
        other => other.to_string(),
    };
    format!("server {server}: OAuth: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemorySecretStore;

    #[tokio::test]
    async fn credentials_round_trip_through_the_secret_store_and_logout_forgets_them() {
        // CONN-13 / TRUST-2: the tokens are one secret-store entry.
        let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
        let creds = SecretCredentials::new(store.clone(), "notes", "https://notes.example/mcp");
        assert!(creds.load().await.unwrap().is_none());
        let token: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-1", "scope": "a b"}),
        )
        .unwrap();
        creds
            .save(StoredCredentials::new(
                "client-7".into(),
                Some(token),
                vec![],
                Some(1),
            ))
            .await
            .unwrap();
        let stored = store.get("oauth.notes").await.unwrap();
        assert!(stored.expose().contains("at-1"));
        assert!(!format!("{stored:?}").contains("at-1"), "a Secret redacts");
        // Another URL under the same name sees nothing: the token stays
        // with the resource it was issued for.
        assert!(
            status("notes", "https://other.example/mcp", store.clone())
                .await
                .unwrap()
                .is_none()
        );
        let seen = status("notes", "https://notes.example/mcp", store.clone())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            seen,
            Authorized {
                client_id: "client-7".into(),
                scopes: vec!["a".into(), "b".into()],
                expires_in: Some(3600),
                refreshable: true,
            }
        );
        logout("notes", store.clone()).await.unwrap();
        assert!(
            status("notes", "https://notes.example/mcp", store)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn an_unreadable_entry_is_an_error_that_says_to_log_in_again() {
        let store: Arc<dyn SecretStore> = Arc::new(MemorySecretStore::new());
        store
            .put("oauth.notes", Secret::new("not json"))
            .await
            .unwrap();
        let e = status("notes", "https://notes.example/mcp", store)
            .await
            .unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("not readable") && e.contains("log in again"),
            "{e}"
        );
        assert!(!e.contains("not json"), "the value is never quoted: {e}");
    }
}
