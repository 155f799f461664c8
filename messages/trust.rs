//! Trust, secrets and transport security: the pure rules (TRUST-2..6).

use std::fmt;

use serde::Serialize;

use futures::future::BoxFuture;

use super::store::StoreError;
use serde::Deserialize;

// ===== TRUST-3: one endpoint validator =====

/// The one validation every endpoint the runtime dials goes through (MCP
/// servers, model providers, CDP attach): `https://` anywhere; plain `http://`
/// only for `localhost`, `127.0.0.1` and `[::1]`; every other scheme rejected.
pub fn validate_endpoint(endpoint: &str) -> Result<(), EndpointError> {
    let parsed = url::Url::parse(endpoint).map_err(|e| EndpointError::NotAUrl {
        endpoint: endpoint.to_owned(),
        reason: e.to_string(),
    })?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => match parsed.host() {
            Some(url::Host::Domain("localhost")) => Ok(()),
            Some(url::Host::Ipv4(ip)) if ip == std::net::Ipv4Addr::LOCALHOST => Ok(()),
            Some(url::Host::Ipv6(ip)) if ip == std::net::Ipv6Addr::LOCALHOST => Ok(()),
            _ => Err(EndpointError::PlainHttpToRemote {
                endpoint: endpoint.to_owned(),
            }),
        },
        other => Err(EndpointError::Scheme {
            endpoint: endpoint.to_owned(),
            scheme: other.to_owned(),
        }),
    }
}

/// Why [`validate_endpoint`] refused an endpoint (TRUST-3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Not a URL at all.
    #[error("endpoint {endpoint:?} is not a valid URL: {reason}")]
    NotAUrl {
        /// The endpoint as given.
        endpoint: String,
        /// The parser's reason.
        reason: String,
    },
    /// `http://` to anything but the loopback host.
    #[error(
        "endpoint {endpoint:?} uses plain http:// to a remote host; use https:// (http:// is allowed only for localhost, 127.0.0.1 and [::1])"
    )]
    PlainHttpToRemote {
        /// The endpoint as given.
        endpoint: String,
    },
    /// Neither `https` nor `http`.
    #[error(
        "endpoint {endpoint:?} has scheme {scheme:?}; only https:// (and http:// to localhost) is allowed"
    )]
    Scheme {
        /// The endpoint as given.
        endpoint: String,
        /// Its scheme.
        scheme: String,
    },
}

// ===== TRUST-2: secrets =====

/// `text` with every secret value replaced by `[redacted]`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |t, s| t.replace(s.as_str(), "[redacted]"))
}

/// Redact every string of a JSON value in place (keys included), before
/// anything is projected or cut from it.
pub fn redact_value(value: &mut serde_json::Value, secrets: &[String]) {
    use serde_json::Value;
    let has = |s: &str| {
        secrets
            .iter()
            .any(|v| !v.is_empty() && s.contains(v.as_str()))
    };
    match value {
        Value::String(s) if has(s) => *s = redact(s, secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(v, secrets)),
        Value::Object(map) => {
            if map.keys().any(|k| has(k)) {
                let entries = std::mem::take(map);
                *map = entries
                    .into_iter()
                    .map(|(k, v)| (redact(&k, secrets), v))
                    .collect();
            }
            map.values_mut().for_each(|v| redact_value(v, secrets));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// Redact a text that was cut at its start (a ring buffer's tail): a secret
/// cut in two leaves its end at the start of the text, which whole-value
/// redaction cannot see. A start of at least 4 bytes (or the whole secret,
/// when shorter) that ends a secret value is redacted too.
pub fn redact_cut_start(text: &str, secrets: &[String]) -> String {
    let mut out = redact(text, secrets);
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        let min = s.len().min(4);
        let longest = (min..s.len())
            .rev()
            .map(|k| &s[s.len() - k..])
            .filter(|suffix| s.is_char_boundary(s.len() - suffix.len()))
            .find(|suffix| out.starts_with(suffix));
        if let Some(suffix) = longest {
            out = format!("[redacted]{}", &out[suffix.len()..]);
        }
    }
    out
}

/// A secret value. It never prints: `Debug` and `Display` show `[redacted]`,
/// and it does not implement `Serialize`. Read it with [`Secret::expose`] only
/// where it is handed to the transport.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The error of a missing or unreadable secret (TRUST-2).
pub fn secret_unavailable(name: &str, server: &str) -> String {
    format!("secret {name} for server {server} is not available")
}

/// Why a server's secrets could not be had for its connect (TRUST-2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsError {
    /// The server names secrets and no store is installed.
    #[error("server {server} needs secrets, but no secret store is installed")]
    NoStore {
        /// The server.
        server: String,
    },
    /// The store did not give one of them.
    #[error("{} ({source})", secret_unavailable(name, server))]
    Unavailable {
        /// The secret's name.
        name: String,
        /// The server.
        server: String,
        /// The store's reason.
        source: StoreError,
    },
}

// ===== TRUST-4: the decision =====

/// What the trust gate does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TrustDecision {
    /// Go on.
    Allow,
    /// Refuse without asking.
    Deny,
    /// Ask the approver.
    Ask,
}

/// TRUST-4: `never` → deny without asking; `always` → allow; `ask` → allow if
/// this chat already granted the server, else ask.
pub fn decide(mode: TrustMode, granted_for_this_chat: bool) -> TrustDecision {
    match mode {
        TrustMode::Never => TrustDecision::Deny,
        TrustMode::Always => TrustDecision::Allow,
        TrustMode::Ask if granted_for_this_chat => TrustDecision::Allow,
        TrustMode::Ask => TrustDecision::Ask,
    }
}

/// The approver's answer (TRUST-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Persist `always` for the server.
    AlwaysAllow,
    /// Grant this chat only.
    AllowThisChat,
    /// Deny this one call. Also the answer with no approver, on timeout or escape.
    DontAllow,
}

/// TRUST-6: the honest sentence the model gets for a refusal.
pub fn refusal_text(server: &str, tool: &str, why: Refusal) -> String {
    match why {
        Refusal::Never => format!(
            "The user does not allow the tool \"{tool}\" of server \"{server}\" (trust is set to never). Do not retry it."
        ),
        Refusal::Declined => {
            format!("The user declined this tool call (\"{tool}\" of server \"{server}\").")
        }
        Refusal::NoApprover(why) => format!(
            "This tool call (\"{tool}\" of server \"{server}\") was not approved (no one to ask: {why})."
        ),
        Refusal::Cancelled => format!(
            "This tool call (\"{tool}\" of server \"{server}\") was cancelled while it waited for the user's approval."
        ),
        Refusal::TimedOut(secs) => format!(
            "This tool call (\"{tool}\" of server \"{server}\") needs the user's approval, and nobody answered within {secs} s."
        ),
    }
}

/// Why the gate refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Config says never.
    Never,
    /// The user answered Don't Allow.
    Declined,
    /// Nobody could be asked (no approver, no terminal).
    NoApprover(&'static str),
    /// The approver did not answer within the approval timeout (seconds).
    TimedOut(u64),
    /// The call was cancelled while the approver was asked.
    Cancelled,
}

/// Trust mode of a server (TRUST-4). Stored now; enforced by the trust gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustMode {
    /// Ask the approver.
    #[default]
    Ask,
    /// Always allowed.
    Always,
    /// Never allowed.
    Never,
}

/// Supplies secret values by name.
pub trait SecretStore: Send + Sync + 'static {
    /// The value of `name`, or why it cannot be had (the error must not
    /// contain a value).
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>>;

    /// Keep `value` under `name`, replacing an earlier one: where OAuth
    /// tokens go (CONN-13). A store that cannot be written (the default)
    /// says so.
    fn put<'a>(&'a self, name: &'a str, value: Secret) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = value;
        Box::pin(async move { Err(StoreError::read_only(name)) })
    }

    /// Forget `name` (nothing to forget is not an error).
    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { Err(StoreError::read_only(name)) })
    }

    /// The lock that makes a refresh of the OAuth tokens under `name` one
    /// transaction among every process sharing this store (CONN-13, issue
    /// 35): taken before the stored tokens are read, held until the new
    /// ones are written, so that a refresh token another process rotated
    /// meanwhile is read, never replayed. `get`, `put` and `remove` must
    /// not wait for it. `None` (the default): this store is one process's.
    fn refresh_lock<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoreLock>, StoreError>> {
        let _ = name;
        Box::pin(async { Ok(None) })
    }
}

/// A lock held for [`SecretStore::refresh_lock`]: released when dropped.
pub struct StoreLock(#[allow(dead_code)] Box<dyn Send + Sync>);

impl StoreLock {
    /// A lock that holds `guard` (released when it drops).
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        Self(Box::new(guard))
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreLock")
    }
}

/// Whether a variable or header name looks like it holds a secret (`KEY`,
/// `TOKEN`, `SECRET`, `PASSWORD`, `CREDENTIAL`, `AUTH`…): such values are
/// never shown, and `mcpvisor add` will not write one into a config file.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|s| upper.contains(s))
}

/// An `env_secrets` / `header_secrets` value: the name of a secret, whose
/// value is sent as it is, or a text holding one reference to a secret,
/// `Bearer ${NAME}`, sent with the secret's value in place of `${NAME}`.
/// Returns the text before the reference, the secret's name and the text
/// after it; an error says what is wrong with a malformed reference.
pub fn secret_reference(value: &str) -> Result<(&str, &str, &str), String> {
    let Some(start) = value.find("${") else {
        return if value.is_empty() {
            Err("an empty secret name".into())
        } else {
            Ok(("", value, ""))
        };
    };
    let rest = &value[start + 2..];
    let Some(end) = rest.find('}') else {
        return Err(format!("{value:?}: `${{` without a closing `}}`"));
    };
    let (name, after) = (&rest[..end], &rest[end + 1..]);
    if name.is_empty() || name.contains(['$', '{']) {
        return Err(format!("{value:?}: `${{…}}` must hold a secret's name"));
    }
    if after.contains("${") {
        return Err(format!(
            "{value:?}: holds more than one `${{…}}`; name one secret"
        ));
    }
    Ok((&value[..start], name, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_reference_is_a_name_or_one_reference_in_a_text() {
        assert_eq!(secret_reference("GH_TOKEN"), Ok(("", "GH_TOKEN", "")));
        assert_eq!(
            secret_reference("Bearer ${GH_TOKEN}"),
            Ok(("Bearer ", "GH_TOKEN", ""))
        );
        assert_eq!(secret_reference("a${X}b"), Ok(("a", "X", "b")));
        for bad in ["", "Bearer ${}", "Bearer ${X", "${A} ${B}"] {
            assert!(secret_reference(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_https_or_loopback_http_is_dialled() {
        // TRUST-3
        assert!(validate_endpoint("https://example.com/mcp").is_ok());
        assert!(validate_endpoint("http://127.0.0.1:3001/mcp").is_ok());
        assert!(validate_endpoint("http://localhost:8080/mcp").is_ok());
        assert!(validate_endpoint("http://[::1]:8080/mcp").is_ok());
        let remote = validate_endpoint("http://example.com/mcp")
            .unwrap_err()
            .to_string();
        assert!(remote.contains("use https://"), "{remote}");
        assert!(validate_endpoint("http://10.0.0.1/mcp").is_err());
        assert!(validate_endpoint("http://127.0.0.2/mcp").is_err());
        assert!(
            validate_endpoint("ws://localhost/mcp")
                .unwrap_err()
                .to_string()
                .contains("scheme \"ws\"")
        );
        assert!(validate_endpoint("not a url").is_err());
    }

    #[test]
    fn the_trust_decision_follows_the_mode_and_the_chat_grant() {
        // TRUST-4
        assert_eq!(decide(TrustMode::Never, true), TrustDecision::Deny);
        assert_eq!(decide(TrustMode::Always, false), TrustDecision::Allow);
        assert_eq!(decide(TrustMode::Ask, true), TrustDecision::Allow);
        assert_eq!(decide(TrustMode::Ask, false), TrustDecision::Ask);
    }

    #[test]
    fn a_secret_never_prints() {
        // TRUST-2
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(
            secret_unavailable("gh_token", "github"),
            "secret gh_token for server github is not available"
        );
    }

    #[test]
    fn secrets_are_redacted_in_values_and_in_a_tail_that_cut_one_in_two() {
        // TRUST-2.
        let secrets = vec!["sk-SECRET-1234".to_owned()];
        let mut v = serde_json::json!({
            "content": [{"type": "text", "text": "key is sk-SECRET-1234, see"}],
            "sk-SECRET-1234": ["x sk-SECRET-1234"],
        });
        redact_value(&mut v, &secrets);
        let shown = v.to_string();
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(v["content"][0]["text"], "key is [redacted], see");
        assert!(v.get("[redacted]").is_some());
        // The ring buffer kept only "CRET-1234 …": the start ends the secret.
        let tail = redact_cut_start("CRET-1234 then more", &secrets);
        assert_eq!(tail, "[redacted] then more");
        assert_eq!(redact_cut_start("1234 ok", &secrets), "[redacted] ok");
        assert_eq!(
            redact_cut_start("234 ok", &secrets),
            "234 ok",
            "under 4 bytes: kept"
        );
        assert_eq!(
            redact_cut_start("no secret here", &secrets),
            "no secret here"
        );
    }
}
