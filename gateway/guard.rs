//! What the gateway's HTTP listener checks and sets on every connection:
//! the Host and Origin of every request (GW-5, DNS rebinding) and
//! `TCP_NODELAY` on every accepted socket (GW-6).

/// The loopback names the gateway answers to when no hosts are given.
pub(super) const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

pub(super) fn allowed_hosts_or_loopback(allowed: &Option<Vec<String>>) -> Vec<String> {
    match allowed {
        Some(hosts) => hosts.clone(),
        None => LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect(),
    }
}

/// What every HTTP route of the gateway checks before anything else
/// (GW-5, the transport spec's "Security Warning"):
///
/// - `Host` must name an allowed host (any port): a web page that got a
///   name of its own resolved to 127.0.0.1 (DNS rebinding) is refused. An
///   empty list allows any host (a remote gateway, guarded by its token).
/// - An `Origin`, when a browser sends one, must be an allowed host too
///   (http or https, any port), or the very host the request was sent to
///   (same origin): a page of another site is refused, also one that
///   reached the gateway by its real address. Clients that are not
///   browsers send no `Origin` and are not affected.
///
/// A refusal is `403 Forbidden` with a sentence naming what was refused.
#[derive(Debug, Clone)]
pub struct RequestGuard {
    /// Lowercase host names, without brackets or port.
    hosts: Vec<String>,
}

impl RequestGuard {
    /// A guard allowing `hosts` (names or `name:port`; an empty list allows
    /// any host).
    pub fn new(hosts: Vec<String>) -> Self {
        Self {
            hosts: hosts.iter().map(|h| host_name(h)).collect(),
        }
    }

    /// `None` when the request may pass; otherwise why it is refused.
    pub fn refuses(&self, headers: &axum::http::HeaderMap) -> Option<String> {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(host_name);
        let allowed = |name: &str| self.hosts.is_empty() || self.hosts.iter().any(|h| h == name);
        match &host {
            Some(h) if allowed(h) => {}
            Some(h) => return Some(format!("Forbidden: the Host {h:?} is not allowed")),
            None => return Some("Forbidden: the request names no Host".into()),
        }
        let origin = headers.get(axum::http::header::ORIGIN)?;
        let text = origin.to_str().unwrap_or("");
        let parsed = url::Url::parse(text).ok();
        let origin_host = parsed
            .as_ref()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .and_then(|u| u.host_str())
            .map(host_name);
        match origin_host {
            Some(o) if (!self.hosts.is_empty() && allowed(&o)) || Some(&o) == host.as_ref() => None,
            _ => Some(format!("Forbidden: the Origin {text:?} is not allowed")),
        }
    }
}

/// `name`, `name:port`, `[v6]:port` or `v6`: the lowercase name alone.
pub(super) fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let name = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if a.matches(':').count() == 1 {
        a.split(':').next().unwrap_or(a)
    } else {
        a
    };
    name.to_ascii_lowercase()
}

/// `listener` with `TCP_NODELAY` on every socket it accepts (GW-6): without
/// it a small reply waits for the client's delayed ACK, about 40 ms per
/// sequential request over loopback.
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY could not be set: {e}");
        }
    })
}
