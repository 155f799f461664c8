//! The HTTP listener's session-era client sessions, capped (GW-5): rmcp's
//! in-memory session manager, refusing a new session while the cap is
//! held (rmcp answers that 500; the router makes it a 503 with
//! `Retry-After` and the sentence). Idle sessions expire by rmcp's
//! keep-alive ([`GatewayOptions::session_idle`]). Stateless (2026-07-28)
//! clients open no session and are not counted.

use std::sync::Arc;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId,
};

use super::GatewayOptions;

/// Why a session could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The cap is held.
    #[error(
        "the gateway holds its limit of {max} client sessions (`gateway --max-sessions`); idle ones expire after {idle_s} s, and a client of MCP 2026-07-28 needs none"
    )]
    Full {
        /// The cap.
        max: usize,
        /// The idle expiry, seconds.
        idle_s: u64,
    },
    /// rmcp's session manager failed.
    #[error(transparent)]
    Inner(#[from] LocalSessionManagerError),
}

/// rmcp's local session manager with a cap on its sessions.
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    idle_s: u64,
}

impl CappedSessions {
    pub(super) fn new(options: &GatewayOptions) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(options.session_idle);
        Self {
            inner,
            max: options.max_sessions,
            idle_s: options.session_idle.as_secs(),
        }
    }

    /// Sessions open now.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// The refusal while the cap is held, else `None`.
    pub async fn full(&self) -> Option<SessionError> {
        (self.open().await >= self.max).then_some(SessionError::Full {
            max: self.max,
            idle_s: self.idle_s,
        })
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if let Some(full) = self.full().await {
            return Err(full);
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(
        &self,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.inner.event_store()
    }
}
