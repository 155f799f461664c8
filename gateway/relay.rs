//! A backend's requests to the client a call, a read or a prompt is made
//! for (GW-2): `elicitation/create`, `sampling/createMessage` and
//! `roots/list` that a server sends while the request runs reach the
//! gateway's client that made it, when that client declared the
//! capability.
//!
//! - A session-era client is sent the request as the gateway's own
//!   ([`PeerRelay`]).
//! - A stateless client cannot be sent requests: the call runs on while
//!   the client is answered `input_required` with the request, and its
//!   retry (with the answer and the request state) picks the same call up
//!   ([`RoundRelay`], [`RunningCall`]).
//!
//! A backend of either era is served: a session-era backend's request is
//! attributed to the client whose requests are under way on that connection
//! ([`ProgressRoutes::relay`](crate::messages::registry::ProgressRoutes::relay)),
//! a stateless backend's `input_required` to its own call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rmcp::{Peer, RoleServer};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{CallerRelay, Offers, RelayAsk, RelayError, ToolOutcome};

/// JSON-RPC's internal error.
const INTERNAL_ERROR: i32 = -32603;

/// What a client declared it answers.
pub(super) fn offers_of(capabilities: &rmcp::model::ClientCapabilities) -> Offers {
    Offers {
        elicitation: capabilities.elicitation.is_some(),
        sampling: capabilities.sampling.is_some(),
        roots: capabilities.roots.is_some(),
    }
}

fn relay_error(method: &str, e: rmcp::service::ServiceError) -> RelayError {
    match e {
        rmcp::service::ServiceError::McpError(e) => RelayError {
            code: e.code.0,
            message: e.message.into_owned(),
        },
        other => RelayError {
            code: INTERNAL_ERROR,
            message: format!("{method}: the calling client did not answer: {other}"),
        },
    }
}

fn unreadable(method: &str, e: serde_json::Error) -> RelayError {
    RelayError {
        code: -32602,
        message: format!("{method}: the server's request could not be read: {e}"),
    }
}

/// A session-era client: the backend's request is sent to it as the
/// gateway's own, and its answer goes back.
#[derive(Debug)]
pub(super) struct PeerRelay {
    client: u64,
    offers: Offers,
    peer: Peer<RoleServer>,
}

impl PeerRelay {
    /// The relay of session `client`, when its client declared anything
    /// it could be asked.
    pub(super) fn of(client: u64, peer: &Peer<RoleServer>) -> Option<Arc<dyn CallerRelay>> {
        let offers = offers_of(&peer.peer_info()?.capabilities);
        (offers != Offers::default()).then(|| {
            Arc::new(Self {
                client,
                offers,
                peer: peer.clone(),
            }) as Arc<dyn CallerRelay>
        })
    }
}

impl CallerRelay for PeerRelay {
    fn client(&self) -> u64 {
        self.client
    }

    fn offers(&self) -> Offers {
        self.offers
    }

    fn gone(&self) -> bool {
        self.peer.is_transport_closed()
    }

    fn ask(
        &self,
        asks: Vec<RelayAsk>,
    ) -> BoxFuture<'static, Result<Map<String, Value>, RelayError>> {
        let peer = self.peer.clone();
        Box::pin(async move {
            let mut answers = Map::new();
            for RelayAsk {
                key,
                method,
                params,
            } in asks
            {
                answers.insert(key, ask_peer(&peer, method, params).await?);
            }
            Ok(answers)
        })
    }
}

/// One request to a session-era client; its result.
#[allow(deprecated)] // sampling and roots: deprecated by SEP-2577, still what session-era clients answer
async fn ask_peer(
    peer: &Peer<RoleServer>,
    method: String,
    params: Value,
) -> Result<Value, RelayError> {
    let answer = match method.as_str() {
        "elicitation/create" => {
            let p = serde_json::from_value(params).map_err(|e| unreadable(&method, e))?;
            serde_json::to_value(
                peer.create_elicitation(p)
                    .await
                    .map_err(|e| relay_error(&method, e))?,
            )
        }
        "sampling/createMessage" => {
            let p = serde_json::from_value(params).map_err(|e| unreadable(&method, e))?;
            serde_json::to_value(
                peer.create_message(p)
                    .await
                    .map_err(|e| relay_error(&method, e))?,
            )
        }
        "roots/list" => serde_json::to_value(
            peer.list_roots()
                .await
                .map_err(|e| relay_error(&method, e))?,
        ),
        other => {
            return Err(RelayError {
                code: -32601,
                message: format!("{other}: not a request the gateway passes on"),
            });
        }
    };
    answer.map_err(|e| RelayError {
        code: INTERNAL_ERROR,
        message: format!("{method}: the client's answer could not be written: {e}"),
    })
}

/// Where the answers to a backend's requests go, by key.
pub(super) type Reply = tokio::sync::oneshot::Sender<Result<Map<String, Value>, RelayError>>;

/// A backend's requests for a stateless client (one round), and where
/// the answers go.
pub(super) struct Asked {
    pub(super) asks: Vec<RelayAsk>,
    pub(super) reply: Reply,
}

/// A stateless client: a backend's request is handed to the request
/// handler of the client's call, which answers the client `input_required`.
#[derive(Debug)]
pub(super) struct RoundRelay {
    client: u64,
    offers: Offers,
    asks: tokio::sync::mpsc::UnboundedSender<Asked>,
}

/// The relay of a stateless client (its number) that declared it
/// answers nothing: its backend is told so, and nothing is asked of it.
#[derive(Debug)]
pub(super) struct NoOffers(pub(super) u64);

impl CallerRelay for NoOffers {
    fn client(&self) -> u64 {
        self.0
    }

    fn offers(&self) -> Offers {
        Offers::default()
    }

    fn ask(
        &self,
        asks: Vec<RelayAsk>,
    ) -> BoxFuture<'static, Result<Map<String, Value>, RelayError>> {
        let methods: Vec<String> = asks.into_iter().map(|a| a.method).collect();
        Box::pin(async move {
            Err(RelayError {
                code: rmcp::model::ErrorCode::METHOD_NOT_FOUND.0,
                message: format!(
                    "{}: the calling client declared no capabilities",
                    methods.join(", ")
                ),
            })
        })
    }
}

impl std::fmt::Debug for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asked").field("asks", &self.asks).finish()
    }
}

impl CallerRelay for RoundRelay {
    fn client(&self) -> u64 {
        self.client
    }

    fn offers(&self) -> Offers {
        self.offers
    }

    fn ask(
        &self,
        asks: Vec<RelayAsk>,
    ) -> BoxFuture<'static, Result<Map<String, Value>, RelayError>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let method = asks
            .iter()
            .map(|a| a.method.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let sent = self.asks.send(Asked { asks, reply });
        Box::pin(async move {
            if sent.is_err() {
                return Err(RelayError {
                    code: INTERNAL_ERROR,
                    message: format!("{method}: the calling client is gone"),
                });
            }
            answer.await.unwrap_or_else(|_| {
                Err(RelayError {
                    code: INTERNAL_ERROR,
                    message: format!(
                        "{method}: the calling client did not answer (its retry never came, or the gateway stopped)"
                    ),
                })
            })
        })
    }
}

/// A stateless client's call that runs on between the client's rounds.
/// Dropping it cancels the call.
pub(super) struct RunningCall {
    /// The call, spawned.
    pub(super) outcome: tokio::task::JoinHandle<ToolOutcome>,
    /// The backend's requests for the client.
    pub(super) asks: tokio::sync::mpsc::UnboundedReceiver<Asked>,
    /// Cancels the call.
    pub(super) cancel: CancellationToken,
    /// The public tool name (a retry must name the same tool).
    pub(super) tool: String,
    /// The call's chat (trust rounds: forgotten when the call ends).
    pub(super) chat: String,
    /// Where the call's progress goes: a retry's progress token is given
    /// it from then on.
    pub(super) progress: crate::ProgressSink,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl RunningCall {
    /// Start `call` for a stateless client `client` that declared
    /// `offers`, in `chat`, its progress on `progress`; `call` is given
    /// the relay to put in its options.
    pub(super) fn start<F>(
        client: u64,
        offers: Offers,
        tool: String,
        chat: String,
        progress: crate::ProgressSink,
        call: impl FnOnce(Arc<dyn CallerRelay>, CancellationToken) -> F,
    ) -> Self
    where
        F: std::future::Future<Output = ToolOutcome> + Send + 'static,
    {
        let (asks_to, asks) = tokio::sync::mpsc::unbounded_channel();
        let relay = Arc::new(RoundRelay {
            client,
            offers,
            asks: asks_to,
        });
        let cancel = CancellationToken::new();
        let outcome = tokio::spawn(call(relay, cancel.clone()));
        Self {
            outcome,
            asks,
            cancel,
            tool,
            chat,
            progress,
        }
    }
}

/// A call awaiting its stateless client's answer.
pub(super) struct Waiting {
    /// The call.
    pub(super) call: RunningCall,
    /// The keys of the requests in the `input_required` result.
    pub(super) keys: Vec<String>,
    /// Where the answers go.
    pub(super) reply: Reply,
}

/// What awaits a stateless client's retry, by the request state handed out
/// with it: at most `max` (the oldest go first), none older than `ttl`.
pub(super) struct Pending<T> {
    items: Mutex<HashMap<String, (Instant, T)>>,
    prefix: &'static str,
    /// `@<replica>` at the end of every state, when the gateway is one
    /// replica of several: the state names its owner.
    owner: String,
    ttl: Duration,
    max: usize,
}

impl<T> Pending<T> {
    pub(super) fn new(
        prefix: &'static str,
        replica: Option<&str>,
        ttl: Duration,
        max: usize,
    ) -> Self {
        Self {
            items: Mutex::default(),
            prefix,
            owner: replica.map(|r| format!("@{r}")).unwrap_or_default(),
            ttl,
            max,
        }
    }

    /// Keep `item` until the retry; the request state that names it.
    pub(super) fn remember(&self, item: T) -> String {
        let mut nonce = [0u8; 16];
        rand::fill(&mut nonce);
        let state: String = std::iter::once(self.prefix.to_owned())
            .chain(nonce.iter().map(|b| format!("{b:02x}")))
            .chain(std::iter::once(self.owner.clone()))
            .collect();
        if let Ok(mut p) = self.items.lock() {
            p.retain(|_, (at, _)| at.elapsed() < self.ttl);
            while p.len() >= self.max {
                let Some(oldest) = p
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                p.remove(&oldest);
            }
            p.insert(state.clone(), (Instant::now(), item));
        }
        state
    }

    /// Whether `state` awaits its retry here (and has not expired).
    pub(super) fn holds(&self, state: &str) -> bool {
        self.items
            .lock()
            .is_ok_and(|p| p.get(state).is_some_and(|(at, _)| at.elapsed() < self.ttl))
    }

    /// Whether `state` is of this kind.
    pub(super) fn names(&self, state: &str) -> bool {
        state.starts_with(self.prefix)
    }

    /// What `state` names (taken: it is answered now).
    pub(super) fn take(&self, state: &str) -> Option<T> {
        self.items
            .lock()
            .ok()?
            .remove(state)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, item)| item)
    }
}

/// The replica a request state names as its owner, when it is of the form
/// a replica hands out (`ask-` or `relay-`, 32 hex digits, `@<replica>`).
pub(super) fn state_owner(state: &str) -> Option<&str> {
    let (minted, owner) = state.split_once('@')?;
    let nonce = minted
        .strip_prefix("ask-")
        .or_else(|| minted.strip_prefix("relay-"))?;
    (nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()) && !owner.is_empty())
        .then_some(owner)
}
