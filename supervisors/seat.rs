//! `Seat(kind)`: one exclusive provider seat, `browser_use` or
//! `computer_use` (SEAT-1..3, SEAT-10).
//!
//! Owns: at most one provider, its `SessionResources` (a child, started when
//! the provider registers), and the mount of the provider's tools in every
//! live activation's scope. Supervisor: the root (tier 3, so a shutdown
//! releases the seats before it stops the scopes their tools live in).
//!
//! ```text
//! | State     | Event     | Actions                                                 | Next      |
//! |-----------|-----------|---------------------------------------------------------|-----------|
//! | empty     | Register  | start SessionResources; mount in every live activation  | held      |
//! | held      | Register  | refused: Held(holder)                                   | held      |
//! | any       | Open(a)   | remember a; when held: Live(a), mount the tools         | same      |
//! | any       | Close(a)  | unmount a's tools (remove_server); Dispose(a)           | same      |
//! | held      | Release   | 1. unmount from every scope 2. Dispose every activation | empty     |
//! |           |           | 3. clean: stop SessionResources                         |           |
//! | held      | Release   | a close unconfirmed: refused, StillOpen; keep it all    | releasing |
//! | releasing | Register  | refused: Releasing(holder)                              | releasing |
//! | releasing | Release   | try again                                               | empty/rel.|
//! | any       | CloseRes. | Dispose every activation (TRUST-1 off); keep the mounts | same      |
//! | any       | Shutdown  | Release; refuse everything after                        | stopped   |
//! ```
//! The seat's mailbox orders it all: a release's steps run inside one
//! message, so no provider can enter while the old one's resources close.
//! Messages: [`SeatMsg`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use super::spec::{AskError, Shutdown, ask, stop_child};
use crate::actors::sessions::{SessionResources, SessionsArgs};
use crate::messages::config::Scope;
use crate::messages::seat::{
    ActivationId, ProviderInfo, SeatError, SeatKind, SeatMsg, SeatProvider, SeatStatus,
    SessionsHandle, SessionsMsg,
};
use crate::messages::status::ShutdownReport;
use crate::messages::tree::ScopeHandle;

/// How long one activation's resources have to close (a browser's close
/// sequence, its process group's reap).
pub const DISPOSE_DEADLINE: Duration = Duration::from_secs(12);
/// How long unmounting one activation's tools may take.
const UNMOUNT_DEADLINE: Duration = Duration::from_secs(16);

/// The runtime's side of a seat: every request the facade makes of it is a
/// method here, each with the bound the caller gives, so no [`SeatMsg`] is
/// built outside the tree.
#[derive(Debug, Clone)]
pub struct SeatHandle {
    kind: SeatKind,
    actor: ActorRef<SeatMsg>,
}

impl SeatHandle {
    pub(crate) fn new(kind: SeatKind, actor: ActorRef<SeatMsg>) -> Self {
        Self { kind, actor }
    }

    /// Which seat.
    pub fn kind(&self) -> SeatKind {
        self.kind
    }

    /// Put `provider` in the seat (SEAT-1).
    pub(crate) async fn register(
        &self,
        provider: Arc<dyn SeatProvider>,
        limit: Duration,
    ) -> Result<Result<(), SeatError>, AskError> {
        ask(
            &self.actor,
            |reply| SeatMsg::Register { provider, reply },
            Some(limit),
        )
        .await
    }

    /// Release the seat (SEAT-2, SEAT-10).
    pub(crate) async fn release(
        &self,
        limit: Duration,
    ) -> Result<Result<ShutdownReport, SeatError>, AskError> {
        ask(&self.actor, |reply| SeatMsg::Release { reply }, Some(limit)).await
    }

    /// The seat's holder, activations and pids.
    pub(crate) async fn status(&self, limit: Duration) -> Result<SeatStatus, AskError> {
        ask(&self.actor, |reply| SeatMsg::Status { reply }, Some(limit)).await
    }

    /// An activation began in `scope`: the mounted server's name, `None`
    /// when the seat is empty (SEAT-7).
    pub(crate) async fn open(
        &self,
        activation: ActivationId,
        scope: Scope,
        handle: ScopeHandle,
        limit: Duration,
    ) -> Result<Result<Option<String>, SeatError>, AskError> {
        ask(
            &self.actor,
            |reply| SeatMsg::Open {
                activation,
                scope,
                handle,
                reply,
            },
            Some(limit),
        )
        .await
    }

    /// An activation ended (SEAT-8): what was stopped and reaped, or what
    /// is still open.
    pub(crate) async fn close(
        &self,
        activation: ActivationId,
        limit: Duration,
    ) -> Result<Result<ShutdownReport, SeatError>, AskError> {
        ask(
            &self.actor,
            |reply| SeatMsg::Close {
                activation,
                reply: Some(reply),
            },
            Some(limit),
        )
        .await
    }

    /// An activation was dropped without a close: end it in the background.
    pub(crate) fn close_detached(&self, activation: ActivationId) {
        let _ = self.actor.cast(SeatMsg::Close {
            activation,
            reply: None,
        });
    }
}

/// The seat actor.
#[derive(Debug, Default)]
pub struct Seat;

struct Holder {
    provider: Arc<dyn SeatProvider>,
    info: ProviderInfo,
    sessions: ActorRef<SessionsMsg>,
}

struct Mount {
    scope: Scope,
    handle: ScopeHandle,
    /// The server carrying the provider's tools in the scope, when mounted.
    server: Option<String>,
}

/// Its state.
pub struct SeatState {
    kind: SeatKind,
    holder: Option<Holder>,
    activations: BTreeMap<ActivationId, Mount>,
    /// A release did not finish: what it left open (SEAT-10).
    still_open: Vec<String>,
    /// The session resources actor failed: nothing it held can be vouched for.
    sessions_failed: Option<String>,
    releasing: bool,
    shutting_down: bool,
}

impl Actor for Seat {
    type Msg = SeatMsg;
    type State = SeatState;
    type Arguments = SeatKind;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        kind: SeatKind,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SeatState {
            kind,
            holder: None,
            activations: BTreeMap::new(),
            still_open: Vec::new(),
            sessions_failed: None,
            releasing: false,
            shutting_down: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SeatMsg::Register { provider, reply } => {
                let r = register(&myself, st, provider).await;
                let _ = reply.send(r);
            }
            SeatMsg::Release { reply } => {
                let r = release(st).await;
                let _ = reply.send(r);
            }
            SeatMsg::Open {
                activation,
                scope,
                handle,
                reply,
            } => {
                if st.shutting_down {
                    let _ = reply.send(Err(SeatError::ShuttingDown));
                    return Ok(());
                }
                st.activations.insert(
                    activation.clone(),
                    Mount {
                        scope,
                        handle,
                        server: None,
                    },
                );
                let r = mount(st, &activation).await;
                let _ = reply.send(r);
            }
            SeatMsg::Close { activation, reply } => {
                let report = close(st, &activation).await;
                if let Some(reply) = reply {
                    let r = if report.is_clean() {
                        Ok(report)
                    } else {
                        Err(SeatError::StillOpen {
                            seat: st.kind,
                            open: report.unconfirmed,
                        })
                    };
                    let _ = reply.send(r);
                } else if !report.is_clean() {
                    tracing::error!(seat = %st.kind, %activation, open = ?report.unconfirmed, "an activation's resources did not close");
                }
            }
            SeatMsg::CloseResources { reply } => {
                let mut report = ShutdownReport::default();
                if let Some(h) = &st.holder {
                    let sessions = h.sessions.clone();
                    let closes = st.activations.keys().map(|a| dispose(&sessions, a));
                    for r in futures::future::join_all(closes).await {
                        report.absorb(r);
                    }
                    // Still live: a call after switching on opens anew.
                    for a in st.activations.keys() {
                        let _ = sessions.cast(SessionsMsg::Live {
                            activation: a.clone(),
                        });
                    }
                }
                let _ = reply.send(report);
            }
            SeatMsg::Status { reply } => {
                let _ = reply.send(status(st).await);
            }
            SeatMsg::Shutdown { reply } => {
                st.shutting_down = true;
                let report = match release(st).await {
                    Ok(r) => r,
                    Err(SeatError::Empty { .. }) => ShutdownReport::default(),
                    Err(e) => ShutdownReport {
                        unconfirmed: vec![e.to_string()],
                        ..Default::default()
                    },
                };
                let _ = reply.send(report);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = evt
            && st
                .holder
                .as_ref()
                .is_some_and(|h| h.sessions.get_id() == cell.get_id())
        {
            // The resources' owner failed: its resources' drops killed their
            // groups. The seat cannot vouch for them: it stays held until a
            // release, which reports it.
            tracing::error!(seat = %st.kind, "the session resources failed: {err}");
            st.sessions_failed = Some(format!(
                "the session resources of the {} seat failed: {err}",
                st.kind
            ));
        }
        Ok(())
    }
}

async fn register(
    myself: &ActorRef<SeatMsg>,
    st: &mut SeatState,
    provider: Arc<dyn SeatProvider>,
) -> Result<(), SeatError> {
    if st.shutting_down {
        return Err(SeatError::ShuttingDown);
    }
    if let Some(h) = &st.holder {
        let holder = h.info.name.clone();
        return Err(if st.releasing {
            SeatError::Releasing {
                seat: st.kind,
                holder,
            }
        } else {
            SeatError::Held {
                seat: st.kind,
                holder,
            }
        });
    }
    let info = provider.info();
    let args = SessionsArgs {
        opener: provider.opener(),
        provider: info.name.clone(),
    };
    let (sessions, _) = Actor::spawn_linked(None, SessionResources, args, myself.get_cell())
        .await
        .map_err(|e| SeatError::Open(format!("cannot start the session resources: {e}")))?;
    st.holder = Some(Holder {
        provider,
        info,
        sessions,
    });
    st.still_open.clear();
    // A provider that enters while activations are live serves them too.
    let live: Vec<ActivationId> = st.activations.keys().cloned().collect();
    for a in live {
        if let Err(e) = mount(st, &a).await {
            tracing::warn!(seat = %st.kind, activation = %a, "{e}");
        }
    }
    Ok(())
}

/// Mount the holder's tools in `activation`'s scope.
async fn mount(st: &mut SeatState, activation: &ActivationId) -> Result<Option<String>, SeatError> {
    let (Some(holder), Some(m)) = (&st.holder, st.activations.get_mut(activation)) else {
        return Ok(None);
    };
    if st.releasing || m.server.is_some() {
        return Ok(m.server.clone());
    }
    // SEAT-9: masked while another activation holds the provider's one
    // resource; asked again when that mount ends.
    if !holder.provider.admit(activation) {
        return Ok(None);
    }
    let _ = holder.sessions.cast(SessionsMsg::Live {
        activation: activation.clone(),
    });
    let sessions = SessionsHandle {
        actor: holder.sessions.clone(),
        activation: activation.clone(),
        seat: st.kind,
    };
    let mount_err = |reason: String| SeatError::Mount {
        provider: holder.info.name.clone(),
        scope: m.scope.clone(),
        reason,
    };
    let config = holder
        .provider
        .mount(activation, sessions)
        .map_err(mount_err)?;
    let name = m
        .handle
        .add_server(Box::new(config))
        .await
        .map_err(|e| mount_err(format!("the scope supervisor {e}")))?
        .map_err(|e| mount_err(e.to_string()))?;
    m.server = Some(name.clone());
    Ok(Some(name))
}

/// Withdraw `activation`'s tools from its scope (the server stops
/// quiescently).
async fn unmount(m: &mut Mount) -> ShutdownReport {
    let Some(server) = m.server.take() else {
        return ShutdownReport::default();
    };
    match tokio::time::timeout(UNMOUNT_DEADLINE, m.handle.remove_server(&server)).await {
        Ok(Ok(Ok(r))) => r,
        // The scope is gone or does not know it: nothing of it runs there.
        Ok(Ok(Err(_)) | Err(_)) => ShutdownReport::default(),
        Err(_) => ShutdownReport {
            unconfirmed: vec![format!(
                "the tools of server \"{server}\" in scope {} were not withdrawn in time",
                m.scope
            )],
            ..Default::default()
        },
    }
}

/// Dispose of one activation's resources, within [`DISPOSE_DEADLINE`].
async fn dispose(sessions: &ActorRef<SessionsMsg>, activation: &ActivationId) -> ShutdownReport {
    let a = activation.clone();
    match ask(
        sessions,
        |reply| SessionsMsg::Dispose {
            activation: a,
            reply,
        },
        Some(DISPOSE_DEADLINE),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => ShutdownReport {
            unconfirmed: vec![format!(
                "activation {activation}'s resources: the session resources {e}"
            )],
            ..Default::default()
        },
    }
}

/// An activation ended: its tools leave its scope, then its resources close.
async fn close(st: &mut SeatState, activation: &ActivationId) -> ShutdownReport {
    let Some(mut m) = st.activations.remove(activation) else {
        return ShutdownReport::default();
    };
    let was_mounted = m.server.is_some();
    let mut report = unmount(&mut m).await;
    if let Some(h) = &st.holder {
        report.absorb(dispose(&h.sessions, activation).await);
        if was_mounted {
            h.provider.unmounted(activation);
        }
    }
    // A masked activation may have the tools now.
    if was_mounted {
        let waiting: Vec<ActivationId> = st
            .activations
            .iter()
            .filter(|(_, m)| m.server.is_none())
            .map(|(a, _)| a.clone())
            .collect();
        for a in waiting {
            if let Err(e) = mount(st, &a).await {
                tracing::warn!(seat = %st.kind, activation = %a, "{e}");
            }
        }
    }
    report
}

/// SEAT-2 and SEAT-10: withdraw every tool, await every close, then release.
async fn release(st: &mut SeatState) -> Result<ShutdownReport, SeatError> {
    let Some(holder) = &st.holder else {
        return Err(SeatError::Empty { seat: st.kind });
    };
    st.releasing = true;
    let mut report = ShutdownReport::default();
    let mounted_before: Vec<ActivationId> = st
        .activations
        .iter()
        .filter(|(_, m)| m.server.is_some())
        .map(|(a, _)| a.clone())
        .collect();
    // 1. The tools leave every registry first: no new action starts.
    let unmounts = st.activations.values_mut().map(unmount);
    for r in futures::future::join_all(unmounts).await {
        report.absorb(r);
    }
    // 2. Every activation's resources close (concurrently), in-flight
    //    actions interrupted.
    let sessions = holder.sessions.clone();
    let disposals = st.activations.keys().map(|a| dispose(&sessions, a));
    for r in futures::future::join_all(disposals).await {
        report.absorb(r);
    }
    for a in mounted_before.iter() {
        holder.provider.unmounted(a);
    }
    // Also what an earlier failed close (of an activation that ended
    // since) still holds: the disposals above tried those again.
    if let Ok((_, open)) = ask(
        &sessions,
        |reply| SessionsMsg::Owned { reply },
        Some(Duration::from_secs(2)),
    )
    .await
    {
        report.unconfirmed.extend(open);
    }
    if let Some(failed) = &st.sessions_failed {
        report.unconfirmed.push(failed.clone());
    }
    let mut seen = std::collections::BTreeSet::new();
    report.unconfirmed.retain(|u| seen.insert(u.clone()));
    if !report.is_clean() {
        st.still_open = report.unconfirmed.clone();
        return Err(SeatError::StillOpen {
            seat: st.kind,
            open: report.unconfirmed,
        });
    }
    // 3. Released: nothing of the old provider works any more.
    stop_child(
        &sessions.get_cell(),
        Shutdown::Timeout(Duration::from_secs(1)),
    )
    .await;
    st.holder = None;
    st.releasing = false;
    st.still_open.clear();
    Ok(report)
}

async fn status(st: &SeatState) -> SeatStatus {
    let mut pids = Vec::new();
    let mut still_open = st.still_open.clone();
    if let Some(h) = &st.holder
        && let Ok((owned, open)) = ask(
            &h.sessions,
            |reply| SessionsMsg::Owned { reply },
            Some(Duration::from_secs(2)),
        )
        .await
    {
        pids = owned.into_iter().flat_map(|(_, p)| p).collect();
        for o in open {
            if !still_open.contains(&o) {
                still_open.push(o);
            }
        }
    }
    SeatStatus {
        seat: st.kind.name().to_owned(),
        holder: st.holder.as_ref().map(|h| h.info.name.clone()),
        kind: st.holder.as_ref().map(|h| h.info.kind.clone()),
        activations: st.activations.keys().map(|a| a.to_string()).collect(),
        pids,
        releasing: st.releasing,
        still_open,
    }
}
