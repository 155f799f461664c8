//! Readiness and drain for rolling deploys (SCALE, issue 35). A replica
//! told to stop ([`Gateway::drain`](super::Gateway::drain)) fails its
//! readiness check at once, refuses requests that would start new work
//! with HTTP 503 (they did not run: a balancer sends them to another
//! replica), lets the requests it already took finish, and is stopped by
//! its caller once [`Drain::drained`] says none is left or a deadline
//! passed. Liveness stays true throughout: the process answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use serde_json::{Value, json};

/// The largest request body a middleware reads (to tell, while
/// draining, whether it starts work; to find its state's owner): rmcp's
/// own limit on a request body (a larger one is answered 413, as rmcp
/// would).
const MAX_CHECKED_BODY: usize = 4 * 1024 * 1024;

/// A request body read whole for a middleware to look at, or the 413 a
/// body too large (or cut) is answered.
pub(super) async fn buffered(body: Body) -> Result<axum::body::Bytes, axum::response::Response> {
    use axum::response::IntoResponse;
    axum::body::to_bytes(body, MAX_CHECKED_BODY)
        .await
        .map_err(|_| {
            (
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than 4 MiB, or was cut",
            )
                .into_response()
        })
}

/// A replica's drain state and the requests it is serving.
#[derive(Debug, Default)]
pub(super) struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Drain {
    pub(super) fn start(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.idle.notify_waiters();
    }

    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Count a request until the guard drops.
    fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Wait until no request is in flight or `deadline` passed: the count
    /// left (0: drained).
    pub(super) async fn drained(&self, deadline: Duration) -> usize {
        let now = tokio::time::Instant::now();
        let until = now
            .checked_add(deadline)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            let left = self.in_flight();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return self.in_flight();
            }
        }
    }
}

/// One request in flight; its end is the response body's end.
struct InFlight(Arc<Drain>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A response body that holds its request's [`InFlight`] until it ends
/// (a streamed reply ends with its call).
struct Counted {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The `/mcp` middleware: every POST is counted until its reply ends;
/// while draining, one that starts work is refused (503, not run).
pub(super) async fn counted(
    drain: Arc<Drain>,
    holds: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    // Counted before the drain flag is read (and the flag set before the
    // count is read): of a request and a drain that race, one sees the other.
    let in_flight = drain.enter();
    let req = if drain.is_draining() {
        let (parts, body) = req.into_parts();
        let bytes = match buffered(body).await {
            Ok(bytes) => bytes,
            Err(too_large) => return too_large,
        };
        let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if let Some(id) = starts_work(&message, &*holds) {
            return refused(&id);
        }
        axum::extract::Request::from_parts(parts, Body::from(bytes))
    } else {
        req
    };
    let (parts, body) = next.run(req).await.into_parts();
    axum::response::Response::from_parts(
        parts,
        Body::new(Counted {
            inner: body,
            _in_flight: in_flight,
        }),
    )
}

/// The id of a JSON-RPC request in `message` that would start work: any
/// request but `ping`, a 2026-07-28 retry whose `requestState` is one
/// this replica `holds` (the next round of a call it runs; any other state
/// would start a call afresh), and a call with a handle to state this
/// process `holds` (a browser here: no other replica has it).
/// Notifications and responses start nothing.
fn starts_work(message: &Value, holds: &dyn Fn(&str) -> bool) -> Option<Value> {
    let one = |m: &Value| -> Option<Value> {
        let method = m.get("method")?.as_str()?;
        let id = m.get("id")?.clone();
        let params = m.get("params");
        let state = params
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str);
        let handle = params
            .and_then(|p| p.get("_meta"))
            .and_then(|meta| meta.get(super::HANDLE_META_KEY))
            .and_then(Value::as_str);
        let continues = state.is_some_and(holds) || handle.is_some_and(holds);
        (method != "ping" && !continues).then_some(id)
    };
    match message {
        Value::Array(batch) => batch.iter().find_map(one),
        m => one(m),
    }
}

/// 503 with a JSON-RPC error for `id`: the request did not run.
fn refused(id: &Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32000,
            "message": "this gateway replica is draining (shutting down) and did not run the request: send it again; another replica takes it",
            "data": {"draining": true, "ran": false},
        },
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [
            (axum::http::header::CONTENT_TYPE, "application/json"),
            (axum::http::header::RETRY_AFTER, "1"),
        ],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_that_start_work_are_refused_while_draining() {
        let holds = |s: &str| s == "relay-held" || s == "browser~0123456789abcdef.1@r0";
        let starts_work = |m: &Value| starts_work(m, &holds);
        // A state this replica does not hold would start the call afresh.
        let stranger = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x", "requestState": "relay-other", "inputResponses": {}}});
        assert_eq!(starts_work(&stranger), Some(json!(5)));
        let elsewhere = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "x", "_meta": {"io.mcpvisor/handle": "browser~0123456789abcdef.1@r1"}}});
        assert_eq!(starts_work(&elsewhere), Some(json!(8)));
        let call =
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}});
        assert_eq!(starts_work(&call), Some(json!(7)));
        let init = json!({"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {}});
        assert_eq!(starts_work(&init), Some(json!("a")));
        for not_new in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}),
            json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x", "requestState": "relay-held", "inputResponses": {}}}),
            // A seat's handle to state held here (SCALE-2).
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "x", "_meta": {"io.mcpvisor/handle": "browser~0123456789abcdef.1@r0"}}}),
            json!("not json-rpc"),
        ] {
            assert_eq!(starts_work(&not_new), None, "{not_new}");
        }
        assert_eq!(
            starts_work(&json!([
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                call
            ])),
            Some(json!(7))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drained_waits_for_the_last_request_or_the_deadline() {
        let drain = Arc::new(Drain::default());
        assert_eq!(drain.drained(Duration::from_secs(5)).await, 0);
        let a = drain.enter();
        let b = drain.enter();
        drain.start();
        let waiter = {
            let drain = drain.clone();
            tokio::spawn(async move { drain.drained(Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(a);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        drop(b);
        assert_eq!(waiter.await.unwrap(), 0);
        let _c = drain.enter();
        let before = tokio::time::Instant::now();
        assert_eq!(drain.drained(Duration::from_secs(10)).await, 1);
        assert_eq!(before.elapsed(), Duration::from_secs(10));
    }
}
