//! `CatalogSync(conn_gen, n)`: one catalog re-sync's phase 1 (SYNC-3) as a
//! temporary actor, a child of its `ServerSupervisor` (ADR 0011).
//!
//! It fetches every page of `tools/list` (raw JSON, one pass) on the live
//! connection's client, reports `SyncDone { conn_gen, n, result }` to the
//! supervisor, and stops. The supervisor stops it when the connection ends,
//! on restart and on shutdown; its `post_stop` aborts a fetch still under
//! way, so a sync killed mid-page sends nothing. Coalescing (SYNC-5) and the
//! stale-result rule (SYNC-6) stay in the supervisor: a `SyncDone` counts
//! only from the sync it is running now (same `conn_gen`, same `n`).
//!
//! The fetch runs in a task of the actor's own, not in its handler, so the
//! actor's mailbox stays free for the stop while a page is outstanding.

use std::sync::Arc;
use std::time::Duration;

use crate::messages::catalog::ToolPages;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use crate::messages::server::ServerSupervisorMsg;
use crate::transport::WireError;
use crate::transport::client::fetch_catalog;
use crate::transport::stdio::Diagnostics;

/// The actor.
pub struct CatalogSync;

/// What one sync needs.
pub struct CatalogSyncArgs {
    /// The connection it syncs.
    pub conn_gen: u64,
    /// Its number among the server's syncs (1, 2, …).
    pub n: u64,
    /// The live connection's rmcp handle.
    pub client: crate::messages::registry::McpClient,
    /// Per-request timeout of each page.
    pub timeout: Duration,
    /// The connection's diagnostics (task support seen on the wire).
    pub diag: Arc<Diagnostics>,
    /// Where the result goes.
    pub supervisor: ActorRef<ServerSupervisorMsg>,
}

/// Its one message: the fetch ended.
pub enum CatalogSyncMsg {
    /// Every entry, or why the fetch failed.
    Fetched(Result<ToolPages, WireError>),
}

/// Its state: the fetch task and where the result goes.
pub struct CatalogSyncState {
    conn_gen: u64,
    n: u64,
    supervisor: ActorRef<ServerSupervisorMsg>,
    fetch: Option<JoinHandle<()>>,
}

impl Actor for CatalogSync {
    type Msg = CatalogSyncMsg;
    type State = CatalogSyncState;
    type Arguments = CatalogSyncArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: CatalogSyncArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let CatalogSyncArgs {
            conn_gen,
            n,
            client,
            timeout,
            diag,
            supervisor,
        } = args;
        let fetch = tokio::spawn(async move {
            let result = fetch_catalog(&client, timeout, &diag).await;
            let _ = myself.cast(CatalogSyncMsg::Fetched(result));
        });
        Ok(CatalogSyncState {
            conn_gen,
            n,
            supervisor,
            fetch: Some(fetch),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("catalog_sync", conn_gen = st.conn_gen, n = st.n);
        let _enter = span.enter();
        match msg {
            CatalogSyncMsg::Fetched(result) => {
                st.fetch = None;
                let _ = st.supervisor.cast(ServerSupervisorMsg::SyncDone {
                    conn_gen: st.conn_gen,
                    n: st.n,
                    // The failure's words are the sync's cause in status.
                    result: result.map_err(|e| e.to_string()),
                });
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped mid-page: the fetch goes, and nothing is reported.
        if let Some(f) = st.fetch.take() {
            f.abort();
        }
        Ok(())
    }
}
