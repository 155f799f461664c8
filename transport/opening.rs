//! The opening shim of `protocol = "auto"` (ERA-1): a server that answers
//! the `server/discover` probe by naming only session-era versions — an
//! `UnsupportedProtocolVersion` error whose `supported` list has no
//! stateless version, or a discover result without one — or with a result
//! that is no discover result at all (some session-era servers answer any
//! method with `{}`) is a session-era server, and the spec's answer is to
//! retry with a version both sides speak: `initialize`. rmcp's `Auto` mode
//! falls back only on other errors, so the shim rewrites such an answer
//! into the "method not found" of a server that never heard of
//! `server/discover`. Nothing else is touched, and after the opening every
//! message passes through as it came.

use std::borrow::Cow;
use std::future::Future;

use rmcp::model::{
    ClientRequest, ErrorCode, ErrorData, JsonRpcError, JsonRpcMessage, JsonRpcVersion2_0,
    RequestId, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;

/// Whether `version` is of the stateless era (2026-07-28 and later).
fn stateless(version: &str) -> bool {
    version >= "2026-07-28"
}

/// Where a progress notification goes as it is read.
type ProgressRoute = Box<dyn Fn(&rmcp::model::ProgressNotificationParam) + Send + Sync>;

/// A transport whose answers to the opening's `server/discover` are read
/// as the spec reads them (see the module header).
pub struct Opening<T> {
    inner: T,
    /// Where a server's `notifications/progress` go the moment they are
    /// read, in wire order: before the result that follows them (rmcp
    /// hands notifications to the handler on tasks of their own, which may
    /// run after the result reached its caller).
    progress: Option<ProgressRoute>,
    /// The ids of the probes sent; empty once a request of another method
    /// went out (the opening is over).
    probes: Vec<RequestId>,
    open: bool,
}

impl<T> Opening<T> {
    /// Wrap `inner` for an opening in `auto` mode.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            progress: None,
            probes: Vec::new(),
            open: true,
        }
    }

    /// Pass every progress notification to `route` as it is read.
    pub fn with_progress(
        mut self,
        route: impl Fn(&rmcp::model::ProgressNotificationParam) + Send + Sync + 'static,
    ) -> Self {
        self.progress = Some(Box::new(route));
        self
    }
}

/// Why an answer to the probe shows a session-era server: the versions it
/// names when it names no stateless one, or that it is no discover result.
fn session_era_answer(message: &RxJsonRpcMessage<RoleClient>) -> Option<String> {
    let named: Vec<String> = match message {
        JsonRpcMessage::Error(e) if e.error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => e
            .error
            .data
            .as_ref()?
            .get("supported")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        JsonRpcMessage::Response(r) => match &r.result {
            ServerResult::DiscoverResult(d) => d
                .supported_versions
                .iter()
                .map(|v| v.as_str().to_owned())
                .collect(),
            _ => {
                return Some(
                    "server/discover: the server answered with another result than a discover result, as a session-era server may"
                        .into(),
                );
            }
        },
        _ => return None,
    };
    (!named.is_empty() && !named.iter().any(|v| stateless(v))).then(|| {
        format!(
            "server/discover: the server speaks only the session era ({})",
            named.join(", ")
        )
    })
}

/// The id an answer is for.
fn answer_id(message: &RxJsonRpcMessage<RoleClient>) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(r) => Some(&r.id),
        JsonRpcMessage::Error(e) => e.id.as_ref(),
        _ => None,
    }
}

/// Read one answer of the opening: a probe's answer naming only session-era
/// versions becomes "method not found".
fn read(
    probes: &[RequestId],
    message: RxJsonRpcMessage<RoleClient>,
) -> RxJsonRpcMessage<RoleClient> {
    let Some(id) = answer_id(&message)
        .filter(|id| probes.contains(id))
        .cloned()
    else {
        return message;
    };
    match session_era_answer(&message) {
        Some(why) => JsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: Some(id),
            error: ErrorData::new(ErrorCode::METHOD_NOT_FOUND, why, None),
        }),
        None => message,
    }
}

impl<T> Transport<RoleClient> for Opening<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if self.open
            && let JsonRpcMessage::Request(r) = &item
        {
            if matches!(r.request, ClientRequest::DiscoverRequest(_)) {
                self.probes.push(r.id.clone());
            } else {
                self.open = false;
                self.probes.clear();
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let (Some(route), JsonRpcMessage::Notification(n)) = (&self.progress, &message)
            && let rmcp::model::ServerNotification::ProgressNotification(p) = &n.notification
        {
            route(&p.params);
        }
        if self.probes.is_empty() {
            return Some(message);
        }
        Some(read(&self.probes, message))
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> RxJsonRpcMessage<RoleClient> {
        serde_json::from_str(json).expect("a server message")
    }

    fn code(message: &RxJsonRpcMessage<RoleClient>) -> Option<i32> {
        match message {
            JsonRpcMessage::Error(e) => Some(e.error.code.0),
            _ => None,
        }
    }

    #[test]
    fn a_probe_answered_with_session_versions_only_reads_as_method_not_found() {
        let probes = [RequestId::Number(0)];
        let refused = parse(
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2025-11-25","2025-06-18"],"requested":"2026-07-28"}}}"#,
        );
        assert_eq!(code(&read(&probes, refused)), Some(-32601));
        let listed = parse(
            r#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2025-11-25"],"capabilities":{},"serverInfo":{"name":"s","version":"1"},"resultType":"complete","ttlMs":0,"cacheScope":"private"}}"#,
        );
        assert_eq!(code(&read(&probes, listed)), Some(-32601));
        let empty = parse(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        assert_eq!(code(&read(&probes, empty)), Some(-32601));
    }

    #[test]
    fn a_stateless_answer_or_another_request_s_answer_passes_untouched() {
        let probes = [RequestId::Number(0)];
        let negotiable = parse(
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28","2025-11-25"],"requested":"2027-01-01"}}}"#,
        );
        assert_eq!(code(&read(&probes, negotiable)), Some(-32022));
        let other = parse(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32022,"message":"x","data":{"supported":["2025-11-25"]}}}"#,
        );
        assert_eq!(code(&read(&probes, other)), Some(-32022));
        let no_list = parse(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"x"}}"#);
        assert_eq!(code(&read(&probes, no_list)), Some(-32022));
    }
}
