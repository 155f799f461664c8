//! `EventLog`: the durable JSONL event log (OBS-2).
//!
//! Owns exclusively: the log file. A forwarder task reads the runtime's event
//! broadcast and appends one JSON object per line (`{"ts_ms": …, "event": …,
//! …}`), flushed per line so a crash loses at most the line being written.
//! Supervisor: the `RootSupervisor` (tier 0: started first, stopped last, so
//! the shutdown's own events are logged); restart type temporary. States:
//! forwarding, then on `Stop` draining what is buffered and flushing, then
//! stopped. Messages: [`EventLogMsg`].

use std::path::PathBuf;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::messages::status::RuntimeEvent;
use crate::messages::tree::EventLogMsg;

/// The event log actor.
#[derive(Debug, Default)]
pub struct EventLog;

/// Its state.
#[derive(Debug)]
pub struct EventLogState {
    forwarder: Option<JoinHandle<()>>,
    stop: Option<oneshot::Sender<()>>,
}

/// Arguments: the path and the broadcast to read.
#[derive(Debug)]
pub struct EventLogArgs {
    /// The file (appended to; parent directories created).
    pub path: PathBuf,
    /// Runtime events.
    pub events: broadcast::Receiver<RuntimeEvent>,
}

fn line(event: &RuntimeEvent) -> Vec<u8> {
    let ts_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut value = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(m) = &mut value {
        m.insert("ts_ms".into(), ts_ms.into());
    }
    let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

impl Actor for EventLog {
    type Msg = EventLogMsg;
    type State = EventLogState;
    type Arguments = EventLogArgs;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        args: EventLogArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        if let Some(dir) = args.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await?;
        }
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.path)
            .await
            .map_err(|e| format!("cannot open the event log {}: {e}", args.path.display()))?;
        let (stop_tx, mut stop_rx) = oneshot::channel();
        let mut events = args.events;
        let forwarder = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    ev = events.recv() => match ev {
                        Ok(ev) => {
                            let _ = file.write_all(&line(&ev)).await;
                            let _ = file.flush().await;
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let note = format!("{{\"event\":\"log_lagged\",\"missed\":{n}}}\n");
                            let _ = file.write_all(note.as_bytes()).await;
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    _ = &mut stop_rx => {
                        while let Ok(ev) = events.try_recv() {
                            let _ = file.write_all(&line(&ev)).await;
                        }
                        break;
                    }
                }
            }
            let _ = file.flush().await;
            let _ = file.sync_data().await;
        });
        Ok(EventLogState {
            forwarder: Some(forwarder),
            stop: Some(stop_tx),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            EventLogMsg::Stop { reply } => {
                if let Some(stop) = st.stop.take() {
                    let _ = stop.send(());
                }
                if let Some(f) = st.forwarder.take() {
                    let _ = f.await;
                }
                let _ = reply.send(());
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
        if let Some(f) = st.forwarder.take() {
            f.abort();
        }
        Ok(())
    }
}
