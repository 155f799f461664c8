//! State that lives in one replica's process (SCALE-2, issue 35): a seat's
//! browser or desktop, a stateful backend. Its tools' results carry a
//! handle naming where that state is — the server, the process that holds
//! it, the state's epoch and the replica — which a client sends back in
//! the next call's `_meta` ([`HANDLE_META_KEY`](super::HANDLE_META_KEY)).
//! The epoch is a number the process gives each identity it sees of the
//! server's connection, its process and its seat resources' processes.
//!
//! A call with a handle is run only where its state is: a replica that
//! gets another's handle forwards the request to that replica when it
//! knows its address (`--peer`), and otherwise answers that the state has
//! moved; a handle of a process or an epoch that ended (the replica
//! restarted; the server restarted, or its browser was replaced) is
//! answered as lost. Never a call run against another browser or another
//! server's fresh state (but for one replaced between the check and the
//! call: the next call is told).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use serde_json::{Value, json};

/// The header a forwarded request carries (the forwarding replica's
/// name): such a request is never forwarded again.
const FORWARDED_BY: &str = "mcpvisor-forwarded-by";

/// How long connecting to a peer may take before its state is lost to
/// this request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest silence in a forwarded request's reply (a streamed reply
/// of a long call sends nothing between its events): a peer quiet for
/// longer is taken as lost (the request may have run).
const READ_TIMEOUT: Duration = Duration::from_secs(600);

/// The requests whose state a peer may hold: only these are forwarded.
const FORWARDED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// The request headers a forwarded request keeps.
const KEPT_HEADERS: [&str; 8] = [
    "content-type",
    "accept",
    "authorization",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "traceparent",
    "tracestate",
];

/// A handle's parts: `<server>~<process>.<epoch>[@<replica>]`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Handle<'a> {
    pub server: &'a str,
    /// The gateway process that handed it out (random per process).
    pub process: &'a str,
    /// The state's epoch then (`Shared::epoch`).
    pub epoch: u64,
    /// The replica (`--replica-id`), when it has a name.
    pub owner: Option<&'a str>,
}

impl<'a> Handle<'a> {
    pub(super) fn parse(handle: &'a str) -> Option<Self> {
        let (minted, owner) = match handle.rsplit_once('@') {
            Some((minted, owner)) if !owner.is_empty() => (minted, Some(owner)),
            Some(_) => return None,
            None => (handle, None),
        };
        let (server, rest) = minted.rsplit_once('~')?;
        let (process, epoch) = rest.split_once('.')?;
        let well_formed = !server.is_empty()
            && process.len() == 16
            && process.bytes().all(|b| b.is_ascii_hexdigit());
        well_formed.then_some(Handle {
            server,
            process,
            epoch: epoch.parse().ok()?,
            owner,
        })
    }

    pub(super) fn mint(server: &str, process: &str, epoch: u64, owner: Option<&str>) -> String {
        match owner {
            Some(owner) => format!("{server}~{process}.{epoch}@{owner}"),
            None => format!("{server}~{process}.{epoch}"),
        }
    }
}

/// A random name for this gateway process: 16 hex digits.
pub(super) fn process_name() -> String {
    let mut bytes = [0u8; 8];
    rand::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON-RPC error whose data says the request did not run here because
/// its state is on `owner`.
pub(super) fn moved(owner: &str, here: Option<&str>, what: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode(-32000),
        format!(
            "{what} is on gateway replica {owner:?}, not this one ({}), and its address is not known here (--peer): send the request to {owner:?} (a balancer routes it by the @{owner} in its body), or call again without it to start afresh",
            here.unwrap_or("unnamed")
        ),
        Some(json!({"moved": true, "owner": owner, "ran": false})),
    )
}

/// A JSON-RPC error whose data says the state the request names is gone
/// (it did not run).
pub(super) fn lost(owner: Option<&str>, why: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode(-32000),
        format!(
            "{why}: the state it names is lost; call again without the handle to start afresh (the result brings a new one)"
        ),
        Some(json!({"lost": true, "owner": owner, "ran": false})),
    )
}

/// Where requests whose state is on another replica are sent.
pub(super) struct Peers {
    /// This replica's name.
    here: String,
    /// Each other replica's base URL (`http://host:port`).
    urls: BTreeMap<String, String>,
    client: reqwest::Client,
}

impl Peers {
    pub(super) fn new(here: String, urls: BTreeMap<String, String>) -> Option<Arc<Self>> {
        if urls.is_empty() {
            return None;
        }
        let client = match reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            // A peer that stops answering mid-reply, or whose machine is
            // gone, is noticed; a redirect is not followed (a POST would
            // be sent somewhere else).
            .tcp_keepalive(Duration::from_secs(15))
            .read_timeout(READ_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "gateway: no HTTP client for the peers (--peer): requests whose state is on another replica are answered `moved`");
                return None;
            }
        };
        Some(Arc::new(Self { here, urls, client }))
    }
}

/// The replica a request's body names as its state's owner: the `@owner`
/// of a `requestState` this gateway's kind hands out (a paused call, read
/// or prompt), or of a handle in a `tools/call`'s `params._meta` (handles
/// are a pinned tool's).
fn owner_named(message: &Value) -> Option<String> {
    let params = message.get("params")?;
    let call = message.get("method").and_then(Value::as_str) == Some("tools/call");
    if let Some(owner) = params
        .get("requestState")
        .and_then(Value::as_str)
        .and_then(super::relay::state_owner)
    {
        return Some(owner.to_owned());
    }
    if !call {
        return None;
    }
    params
        .pointer("/_meta")
        .and_then(|m| m.get(super::HANDLE_META_KEY))
        .and_then(Value::as_str)
        .and_then(Handle::parse)
        .and_then(|h| h.owner)
        .map(str::to_owned)
}

/// The `/mcp` middleware of a replica that knows its peers: a stateless
/// POST whose state is on a peer is sent there, and its reply passed back
/// as it comes; any other request is served here (a session-era request
/// belongs to its session, here: told `moved`).
pub(super) async fn route(
    peers: Arc<Peers>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.method() != axum::http::Method::POST
        || req.headers().contains_key(FORWARDED_BY)
        || req.headers().contains_key("mcp-session-id")
    {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match super::drain::buffered(body).await {
        Ok(bytes) => bytes,
        Err(too_large) => return too_large,
    };
    // Most requests name no owner: only a body that mentions one is parsed.
    let mentions = |needle: &[u8]| memchr::memmem::find(&bytes, needle).is_some();
    let owner = (mentions(b"\"requestState\"") || mentions(super::HANDLE_META_KEY.as_bytes()))
        .then(|| serde_json::from_slice::<Value>(&bytes).ok())
        .flatten()
        .filter(|m| {
            m.get("method")
                .and_then(Value::as_str)
                .is_some_and(|method| FORWARDED_METHODS.contains(&method))
        })
        .and_then(|m| owner_named(&m).map(|o| (o, m.get("id").cloned())));
    // An owner not known here: served here, which answers `moved`.
    if let Some((owner, id)) = owner.filter(|(o, _)| *o != peers.here)
        && let Some(url) = peers.urls.get(&owner)
    {
        return forward(&peers, &owner, url, &parts, bytes, id).await;
    }
    next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Send the request to `owner` at `url` and pass its reply back, streamed.
/// A peer that cannot be reached: the request did not run, its state is
/// lost to it. A reply cut after the request went: it may have run.
async fn forward(
    peers: &Peers,
    owner: &str,
    url: &str,
    parts: &axum::http::request::Parts,
    body: axum::body::Bytes,
    id: Option<Value>,
) -> axum::response::Response {
    let mut request = peers
        .client
        .post(format!("{}/mcp", url.trim_end_matches('/')))
        .header(FORWARDED_BY, peers.here.as_str())
        .body(body);
    for name in KEPT_HEADERS {
        for value in parts.headers.get_all(name) {
            request = request.header(name, value.as_bytes());
        }
    }
    let error = |data: rmcp::ErrorData| {
        let body =
            json!({"jsonrpc": "2.0", "id": id.clone().unwrap_or(Value::Null), "error": data});
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() => {
            tracing::warn!(owner, url, error = %e, "gateway: the replica holding a request's state is unreachable");
            return error(lost(
                Some(owner),
                &format!(
                    "gateway replica {owner:?}, which holds the request's state, cannot be reached ({e})"
                ),
            ));
        }
        Err(e) => {
            tracing::warn!(owner, url, error = %e, "gateway: a request forwarded to its replica got no reply");
            return error(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(-32000),
                format!(
                    "the request was sent to gateway replica {owner:?}, which holds its state, and no reply came ({e}): it may have run; it was not sent again"
                ),
                Some(json!({"lost": true, "owner": owner, "may_have_run": true})),
            ));
        }
    };
    let mut out = axum::response::Response::builder().status(response.status().as_u16());
    for (name, value) in response.headers() {
        if matches!(
            name.as_str(),
            "content-type" | "cache-control" | "retry-after" | "www-authenticate"
        ) {
            out = out.header(name.as_str(), value.as_bytes());
        }
    }
    let chunks = futures::stream::unfold(Some(response), |response| async move {
        let mut response = response?;
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(response))),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    });
    out.body(Body::from_stream(chunks))
        .unwrap_or_else(|e| error(rmcp::ErrorData::internal_error(e.to_string(), None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_what_was_minted() {
        let h = Handle::mint("browser", "0123456789abcdef", 3, Some("r0"));
        assert_eq!(h, "browser~0123456789abcdef.3@r0");
        assert_eq!(
            Handle::parse(&h),
            Some(Handle {
                server: "browser",
                process: "0123456789abcdef",
                epoch: 3,
                owner: Some("r0"),
            })
        );
        let unnamed = Handle::mint("s", "0123456789abcdef", 1, None);
        assert_eq!(Handle::parse(&unnamed).and_then(|h| h.owner), None);
        for bad in [
            "",
            "browser",
            "browser~xyz.1@r0",
            "browser~0123456789abcdef.x@r0",
            "browser~0123456789abcdef.1@",
            "~0123456789abcdef.1",
        ] {
            assert_eq!(Handle::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_owner_is_read_from_a_request_state_or_a_handle() {
        let state =
            json!({"params": {"requestState": "relay-00112233445566778899aabbccddeeff@r2"}});
        assert_eq!(owner_named(&state).as_deref(), Some("r2"));
        let meta = json!({"_meta": {"io.mcpvisor/handle": "b~0123456789abcdef.1@r1"}});
        let handle = json!({"method": "tools/call", "params": meta});
        assert_eq!(owner_named(&handle).as_deref(), Some("r1"));
        // Only a call's handle routes: handles are a pinned tool's.
        let prompt = json!({"method": "prompts/get", "params": meta});
        assert_eq!(owner_named(&prompt), None);
        assert_eq!(owner_named(&json!({"params": {"name": "x"}})), None);
    }
}
