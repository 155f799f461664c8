//! Transport vocabulary that is not configuration: the in-process connector,
//! a port through which an embedder (or a test) hands the runtime a live byte
//! stream to an MCP server in the same process (`TransportConfig::InProcess`).

use std::fmt;
use std::sync::Arc;

/// One in-process connection: the client's end of a byte stream plus a future that
/// resolves to `true` once the server side confirms it has fully closed (the
/// in-process analogue of "the child was reaped", RECO-3).
pub struct InProcessConnection {
    /// The client's end of the stream.
    pub stream: tokio::io::DuplexStream,
    /// Resolves when the server side has closed; `true` = confirmed.
    pub closed: futures::future::BoxFuture<'static, bool>,
}

impl fmt::Debug for InProcessConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessConnection")
    }
}

/// Factory of in-process connections; called once per connection attempt.
#[derive(Clone)]
pub struct InProcessConnector(
    pub Arc<dyn Fn() -> Result<InProcessConnection, String> + Send + Sync>,
);

impl fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcessConnector")
    }
}
