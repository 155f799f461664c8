//! The HTTP client of every OAuth request the runtime makes (discovery,
//! registration, token, refresh): each URL it dials, a redirect's included,
//! passes the one endpoint validator first (TRUST-3: https, or http on
//! loopback), and the addresses a name resolves to pass an address rule.
//!
//! The address rule: a name the discovered metadata gives may resolve to a
//! public address; to a loopback one only when the MCP server's own URL
//! names a loopback host, to a private one only when it names a private
//! address. Link-local (cloud instance metadata among them), unspecified,
//! multicast and broadcast addresses are never dialed. So a server's
//! metadata cannot make the client reach into the network it runs in.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};

use super::dpop::{self, DpopKey};
use crate::messages::trust::validate_endpoint;

/// The longest OAuth response body read.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 10;
/// A request's deadline when rmcp names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an OAuth request was not sent, or the client that sends them
/// could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The URL (a redirect's included) is refused.
    #[error("OAuth request to {url} refused: {why}")]
    Refused {
        /// The URL.
        url: String,
        /// Why (the endpoint rule's words, the address rule, the redirect limit).
        why: String,
    },
    /// Every address the host resolves to is one the rule forbids.
    #[error("{host} resolves to {addr}, which an OAuth request may not reach from {base}")]
    Address {
        /// The host named.
        host: String,
        /// The first address it resolved to.
        addr: IpAddr,
        /// The MCP server's origin.
        base: String,
    },
    /// A response body is larger than the client reads.
    #[error("an OAuth response body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// The MCP server's URL does not parse.
    #[error("{base} is not a URL: {source}")]
    NotAUrl {
        /// The URL given.
        base: String,
        /// The parser's error.
        source: url::ParseError,
    },
    /// reqwest could not build the client.
    #[error("could not build the OAuth HTTP client: {0}")]
    Build(reqwest::Error),
}

/// The class of an address, as the rule above sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Public,
    Loopback,
    Private,
    Never,
}

fn class(addr: IpAddr) -> Class {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    match addr {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Class::Loopback
            } else if v4.is_private() || (a == 100 && (64..=127).contains(&b)) {
                Class::Private
            } else if v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
            {
                Class::Never
            } else {
                Class::Public
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Class::Loopback
            } else if first & 0xfe00 == 0xfc00 {
                Class::Private
            } else if v6.is_unspecified() || v6.is_multicast() || first & 0xffc0 == 0xfe80 {
                Class::Never
            } else {
                Class::Public
            }
        }
    }
}

/// Resolves names and drops what the rule forbids (see the module docs).
struct Filtered {
    /// The classes beyond `Public` the base URL allows.
    allowed: Vec<Class>,
    base: String,
}

impl Filtered {
    fn new(base: &url::Url) -> Self {
        let allowed = match base.host() {
            Some(url::Host::Ipv4(v4)) => vec![class(IpAddr::V4(v4))],
            Some(url::Host::Ipv6(v6)) => vec![class(IpAddr::V6(v6))],
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => {
                vec![Class::Loopback]
            }
            _ => Vec::new(),
        };
        Self {
            allowed: allowed.into_iter().filter(|c| *c != Class::Never).collect(),
            base: base.origin().ascii_serialization(),
        }
    }

    fn allows(&self, addr: IpAddr) -> bool {
        match class(addr) {
            Class::Public => true,
            Class::Never => false,
            c => self.allowed.contains(&c),
        }
    }
}

impl Resolve for Filtered {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allowed = self.allowed.clone();
        let base = self.base.clone();
        let rule = Filtered { allowed, base };
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| rule.allows(a.ip()))
                .collect();
            if kept.is_empty()
                && let Some(first) = found.first()
            {
                return Err(Box::new(DialError::Address {
                    host,
                    addr: first.ip(),
                    base: rule.base,
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The OAuth HTTP client (see the module docs), for the MCP server at
/// `base` (its URL decides which addresses its metadata may name).
pub(crate) struct CheckedClient {
    follow: reqwest::Client,
    stop: reqwest::Client,
    rule: Arc<Filtered>,
    /// The login's DPoP key, when its tokens are DPoP-bound.
    dpop: Option<Arc<DpopKey>>,
}

impl CheckedClient {
    pub(crate) fn new(base: &str) -> Result<Self, DialError> {
        let base = url::Url::parse(base).map_err(|source| DialError::NotAUrl {
            base: base.to_owned(),
            source,
        })?;
        let rule = Arc::new(Filtered::new(&base));
        let follow_rule = rule.clone();
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            let url = attempt.url().to_string();
            if let Err(e) = validate_endpoint(&url) {
                attempt.error(DialError::Refused {
                    url,
                    why: e.to_string(),
                })
            } else if literal_refused(&follow_rule, attempt.url()) {
                attempt.error(DialError::Refused {
                    url,
                    why: "its address may not be reached".into(),
                })
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(DialError::Refused {
                    url,
                    why: format!("more than {MAX_REDIRECTS} redirects"),
                })
            } else {
                attempt.follow()
            }
        });
        let build = |redirect| {
            reqwest::Client::builder()
                .redirect(redirect)
                .dns_resolver(rule.clone())
                .build()
                .map_err(DialError::Build)
        };
        Ok(Self {
            follow: build(follow)?,
            stop: build(reqwest::redirect::Policy::none())?,
            rule,
            dpop: None,
        })
    }
}

/// Whether `url` names an IP address the rule forbids (a literal is not
/// resolved, so the resolver never sees it).
fn literal_refused(rule: &Filtered, url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(v4)) => !rule.allows(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => !rule.allows(IpAddr::V6(v6)),
        _ => false,
    }
}

impl OAuthHttpClient for CheckedClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let OAuthHttpRequest {
                request,
                redirect_policy,
                timeout,
                ..
            } = request;
            let request = reqwest::Request::try_from(request)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            self.send(
                request,
                matches!(redirect_policy, OAuthHttpRedirectPolicy::Stop),
                timeout,
            )
            .await
        })
    }
}

impl CheckedClient {
    /// Send proofs made with `key` on token requests (DPoP, RFC 9449 §5).
    pub(crate) fn with_dpop(mut self, key: Option<Arc<DpopKey>>) -> Self {
        self.dpop = key;
        self
    }

    /// Send one OAuth request under the rules (see the module docs): its
    /// URL checked, no redirect followed when `stop`, the body read up
    /// to [`MAX_BODY_BYTES`]. A token request carries a DPoP proof when
    /// the client has a key, and is sent once more with the nonce an
    /// authorization server asks for (`use_dpop_nonce`, RFC 9449 §8).
    pub(crate) async fn send(
        &self,
        request: reqwest::Request,
        stop: bool,
        timeout: Option<Duration>,
    ) -> Result<oauth2::http::Response<Vec<u8>>, OAuthHttpClientError> {
        let url = request.url().to_string();
        if let Err(e) = validate_endpoint(&url) {
            return Err(Box::new(DialError::Refused {
                url,
                why: e.to_string(),
            }) as OAuthHttpClientError);
        }
        if literal_refused(&self.rule, request.url()) {
            return Err(Box::new(DialError::Refused {
                url,
                why: "its address may not be reached".into(),
            }) as OAuthHttpClientError);
        }
        let client = if stop { &self.stop } else { &self.follow };
        let key = self.dpop.as_ref().filter(|_| is_token_request(&request));
        let mut again = None;
        let mut request = request;
        for _ in 0..2 {
            if let Some(key) = key {
                again = request.try_clone();
                let proof = key
                    .proof(request.method().as_str(), &url, None)
                    .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
                let value = http::HeaderValue::from_str(&proof)
                    .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
                request.headers_mut().insert(dpop::DPOP_HEADER, value);
            }
            *request.timeout_mut() = Some(timeout.unwrap_or(DEFAULT_TIMEOUT));
            let response = read(client.execute(request).await).await?;
            let new_nonce = match (key, response.headers().get(dpop::NONCE_HEADER)) {
                (Some(key), Some(nonce)) => {
                    key.remember_nonce(&url, nonce.to_str().unwrap_or_default())
                }
                _ => false,
            };
            let asks_nonce = response.status() == http::StatusCode::BAD_REQUEST
                && dpop::wants_nonce(&String::from_utf8_lossy(response.body()));
            match again.take() {
                Some(next) if asks_nonce && new_nonce => request = next,
                _ => return Ok(response),
            }
        }
        Err(Box::new(DialError::Refused {
            url,
            why: "the authorization server asked for a DPoP nonce twice".into(),
        }) as OAuthHttpClientError)
    }
}

/// Whether `request` is one to a token endpoint (a form POST with a
/// `grant_type`): the requests a DPoP proof goes with.
fn is_token_request(request: &reqwest::Request) -> bool {
    request.method() == reqwest::Method::POST
        && request
            .body()
            .and_then(|b| b.as_bytes())
            .is_some_and(|b| b.starts_with(b"grant_type=") || contains(b, b"&grant_type="))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A response with its body read (up to [`MAX_BODY_BYTES`]).
async fn read(
    response: Result<reqwest::Response, reqwest::Error>,
) -> Result<oauth2::http::Response<Vec<u8>>, OAuthHttpClientError> {
    let response = response.map_err(|e| Box::new(e) as OAuthHttpClientError)?;
    let mut builder = oauth2::http::Response::builder()
        .status(response.status())
        .version(response.version());
    for (name, value) in response.headers() {
        builder = builder.header(name, value);
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| Box::new(e) as OAuthHttpClientError)?;
        if chunk.len() > MAX_BODY_BYTES - body.len() {
            return Err(Box::new(DialError::TooLarge) as OAuthHttpClientError);
        }
        body.extend_from_slice(&chunk);
    }
    builder
        .body(body)
        .map_err(|e| Box::new(e) as OAuthHttpClientError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_may_name_public_addresses_and_the_base_urls_own_class_only() {
        let public = Filtered::new(&url::Url::parse("https://mcp.example.com/mcp").unwrap());
        let local = Filtered::new(&url::Url::parse("http://127.0.0.1:8080/mcp").unwrap());
        let named = Filtered::new(&url::Url::parse("http://localhost:8080/mcp").unwrap());
        let private = Filtered::new(&url::Url::parse("https://10.1.2.3/mcp").unwrap());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (rule, addr, allowed) in [
            (&public, "93.184.216.34", true),
            (&public, "127.0.0.1", false),
            (&public, "10.0.0.9", false),
            (&public, "169.254.169.254", false),
            (&public, "::ffff:127.0.0.1", false),
            (&public, "fe80::1", false),
            (&local, "127.0.0.1", true),
            (&local, "::1", true),
            (&named, "::1", true),
            (&named, "10.0.0.9", false),
            (&private, "10.0.0.9", true),
            (&private, "169.254.169.254", false),
        ] {
            assert_eq!(rule.allows(ip(addr)), allowed, "{} → {addr}", rule.base);
        }
    }
}
