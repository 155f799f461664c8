//! [`OAuthError`]: why a login, a status or a logout failed, or a
//! connection's authorization manager could not be made.

use rmcp::transport::auth::{AuthError, enterprise::EmaError};

use crate::messages::store::StoreError;
use crate::messages::trust::EndpointError;

use super::DialError;

/// Why an OAuth step for a server failed (CONN-13). Its text names the
/// server and says what to do; a login's UI reason is the embedder's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// The server's own URL is refused (TRUST-3).
    #[error(transparent)]
    ServerUrl(EndpointError),
    /// The checked OAuth HTTP client could not be made for the server's URL.
    #[error("server {server}: {source}")]
    Client {
        /// The server.
        server: String,
        /// Why.
        source: DialError,
    },
    /// A step rmcp runs failed: discovery, registration, the code
    /// exchange, a refresh, the credential store.
    #[error("{}", super::describe(server, source))]
    Protocol {
        /// The server.
        server: String,
        /// rmcp's error (boxed: it is large).
        source: Box<AuthError>,
    },
    /// An endpoint the discovery (or the config) named is refused
    /// (TRUST-3: https, or http on loopback).
    #[error("server {server}: OAuth: {owner} endpoint {endpoint} is refused: {source}")]
    EndpointRefused {
        /// The server.
        server: String,
        /// Whose endpoint: "the authorization server's", "the identity provider's".
        owner: &'static str,
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: EndpointError,
    },
    /// The authorization URL the user would be sent to is refused (TRUST-3).
    #[error("server {server}: the authorization endpoint is refused: {source}")]
    AuthorizationUrlRefused {
        /// The server.
        server: String,
        /// Why.
        source: EndpointError,
    },
    /// A secret the `[oauth]` table names could not be read from the store.
    #[error("server {server}: {what} {name} could not be had: {source}")]
    Secret {
        /// The server.
        server: String,
        /// Which secret: "the client secret", "the ID token", ….
        what: &'static str,
        /// Its name in the store.
        name: String,
        /// The store's error (boxed: it is large).
        source: Box<StoreError>,
    },
    /// The grant needs a setting the `[oauth]` table lacks.
    #[error("server {server}: grant = \"{grant}\" needs {needs}")]
    Missing {
        /// The server.
        server: String,
        /// The grant (`client_credentials`, `enterprise`).
        grant: &'static str,
        /// What it needs.
        needs: &'static str,
    },
    /// `signing_algorithm` names none that is known.
    #[error(
        "server {server}: signing_algorithm = {name:?}: expected ES256, ES384, RS256, RS384 or RS512"
    )]
    SigningAlgorithm {
        /// The server.
        server: String,
        /// The name configured.
        name: String,
    },
    /// The user's side of the login failed (the [`super::AuthorizationUi`]'s
    /// own reason, shown as it is).
    #[error("{0}")]
    Ui(String),
    /// The authorization server's metadata names no issuer (an enterprise grant needs it).
    #[error("server {server}: OAuth: the authorization server's metadata names no issuer")]
    NoIssuer {
        /// The server.
        server: String,
    },
    /// The enterprise-managed exchange (ID token → ID-JAG → access token) failed.
    #[error("server {server}: OAuth: enterprise-managed authorization failed: {source}")]
    Enterprise {
        /// The server.
        server: String,
        /// rmcp's error (boxed: it is large).
        source: Box<EmaError>,
    },
    /// The token obtained could not be put in the stored form.
    #[error("server {server}: OAuth: the token could not be kept: {source}")]
    TokenNotKept {
        /// The server.
        server: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The login ended with no token stored.
    #[error("server {server}: the login kept no token")]
    NoToken {
        /// The server.
        server: String,
    },
    /// The DPoP key could not be made.
    #[error("server {server}: OAuth: {source}")]
    Dpop {
        /// The server.
        server: String,
        /// Why.
        source: super::DpopError,
    },
    /// DPoP-bound tokens are wanted, and the authorization server does not
    /// sign DPoP proofs with ES256.
    #[error(
        "server {server}: OAuth: DPoP-bound tokens are wanted, and the authorization server offers DPoP with {offered} only (this client signs with ES256); set `dpop = false` if the server takes bearer tokens"
    )]
    DpopUnsupported {
        /// The server.
        server: String,
        /// The algorithms it offers.
        offered: String,
    },
    /// The workload's JWT could not be read from its file.
    #[error("server {server}: OAuth: the workload's JWT could not be read from {}: {source}", path.display())]
    AssertionFile {
        /// The server.
        server: String,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A token request the runtime makes itself failed.
    #[error("server {server}: OAuth: the {grant} token request failed: {why}")]
    TokenRequest {
        /// The server.
        server: String,
        /// The grant.
        grant: &'static str,
        /// Why, with the authorization server's error code and description.
        why: String,
    },
    /// The stored credentials could not be removed.
    #[error("server {server}: {source}")]
    Logout {
        /// The server.
        server: String,
        /// The store's error (boxed: it is large).
        source: Box<StoreError>,
    },
}
