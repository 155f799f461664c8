//! `SessionResources`: what a provider's activations own (SEAT-7..10), keyed
//! by the exact live activation id.
//!
//! Owns: one entry per live activation, each holding at most one resource
//! (a launched browser, a desktop session). Supervisor: the provider's seat
//! (`supervisors/seat.rs`), which starts it when a provider registers and
//! stops it once every entry was closed.
//!
//! ```text
//! | Entry     | Event                 | Actions                                        | Next      |
//! |-----------|-----------------------|------------------------------------------------|-----------|
//! | (none)    | Live                  |                                                | live      |
//! | (none)    | Acquire               | reply NotLive                                  | (none)    |
//! | live      | Acquire               | spawn the opening task (owned here, not by     | opening   |
//! |           |                       | the caller); queue the reply                   |           |
//! | opening   | Acquire               | queue the reply (one opening per activation)   | opening   |
//! | opening   | Opened(ok)            | answer every waiter still waiting              | ready     |
//! | opening   | Opened(err)           | answer the error; the entry forgets the try    | live      |
//! | opening   | Dispose               | waiters get NotLive; close when the opening    | disposing |
//! |           |                       | ends                                           |           |
//! | disposing | Opened(ok)            | close it (task), then answer the disposal      | closing   |
//! | ready     | Acquire               | the resource                                   | ready     |
//! | ready     | Dispose               | interrupt; close in a task                     | closing   |
//! | closing   | Closed(clean)         | answer the disposal                            | (none)    |
//! | closing   | Closed(unconfirmed)   | answer it; keep the resource and what is open  | failed    |
//! | failed    | Dispose               | close again                                    | closing   |
//! ```
//! A caller that stops waiting for `Acquire` drops only its own reply port:
//! the opening goes on for the others (SEAT-8). Operations on one resource
//! are serialised by the resource itself; other activations' resources are
//! independent of it. Messages: [`SessionsMsg`].

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::messages::seat::{ActivationId, Opener, SeatError, SessionResource, SessionsMsg};
use crate::messages::status::ShutdownReport;

type Waiter = RpcReplyPort<Result<Arc<dyn SessionResource>, SeatError>>;

enum Entry {
    Live,
    Opening {
        attempt: u64,
        waiters: Vec<Waiter>,
    },
    Disposing {
        attempt: u64,
        replies: Vec<RpcReplyPort<ShutdownReport>>,
    },
    Ready(Arc<dyn SessionResource>),
    Closing {
        resource: Arc<dyn SessionResource>,
        replies: Vec<RpcReplyPort<ShutdownReport>>,
    },
    Failed {
        resource: Arc<dyn SessionResource>,
        open: Vec<String>,
    },
}

/// The actor.
#[derive(Debug, Default)]
pub struct SessionResources;

/// Its arguments: the provider's opener (none: nothing to own).
pub struct SessionsArgs {
    /// Opens one activation's resource.
    pub opener: Option<Opener>,
    /// The provider's name (in errors).
    pub provider: String,
}

/// Its state.
pub struct SessionsState {
    opener: Option<Opener>,
    provider: String,
    entries: BTreeMap<ActivationId, Entry>,
    attempts: u64,
}

impl Actor for SessionResources {
    type Msg = SessionsMsg;
    type State = SessionsState;
    type Arguments = SessionsArgs;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        args: SessionsArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SessionsState {
            opener: args.opener,
            provider: args.provider,
            entries: BTreeMap::new(),
            attempts: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionsMsg::Live { activation } => {
                st.entries.entry(activation).or_insert(Entry::Live);
            }
            SessionsMsg::Acquire { activation, reply } => {
                on_acquire(&myself, st, activation, reply)
            }
            SessionsMsg::Opened {
                activation,
                attempt,
                result,
            } => on_opened(&myself, st, activation, attempt, result),
            SessionsMsg::Dispose { activation, reply } => {
                on_dispose(&myself, st, activation, reply);
            }
            SessionsMsg::Closed { activation, report } => on_closed(st, activation, report),
            SessionsMsg::Owned { reply } => {
                let mut owned = Vec::new();
                let mut open = Vec::new();
                for (a, e) in &st.entries {
                    match e {
                        Entry::Ready(r) | Entry::Closing { resource: r, .. } => {
                            owned.push((a.clone(), r.pids()));
                        }
                        Entry::Failed { resource, open: o } => {
                            owned.push((a.clone(), resource.pids()));
                            open.extend(o.iter().cloned());
                        }
                        _ => {}
                    }
                }
                let _ = reply.send((owned, open));
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped with resources still owned (the tree was killed): each
        // resource's own drop kills its process group; interrupt what runs.
        for e in st.entries.values() {
            if let Entry::Ready(r) | Entry::Closing { resource: r, .. } = e {
                r.interrupt();
            }
        }
        Ok(())
    }
}

fn on_acquire(
    myself: &ActorRef<SessionsMsg>,
    st: &mut SessionsState,
    activation: ActivationId,
    reply: Waiter,
) {
    let Some(entry) = st.entries.get_mut(&activation) else {
        let _ = reply.send(Err(SeatError::NotLive(activation)));
        return;
    };
    match entry {
        Entry::Live => {
            let Some(opener) = st.opener.clone() else {
                let _ = reply.send(Err(SeatError::Open(format!(
                    "provider \"{}\" has no session resources",
                    st.provider
                ))));
                return;
            };
            st.attempts += 1;
            let attempt = st.attempts;
            *entry = Entry::Opening {
                attempt,
                waiters: vec![reply],
            };
            // The opening belongs to the activation, not to the caller: it
            // runs to its end even when every caller stopped waiting.
            let me = myself.clone();
            let a = activation.clone();
            tokio::spawn(async move {
                let result = opener(a.clone()).await;
                let sent = me.cast(SessionsMsg::Opened {
                    activation: a,
                    attempt,
                    result,
                });
                if let Err(ractor::MessagingErr::SendErr(SessionsMsg::Opened {
                    result: Ok(r),
                    ..
                })) = sent
                {
                    // The actor is gone: nobody owns the resource but us.
                    r.interrupt();
                    let report = r.close().await;
                    if !report.is_clean() {
                        tracing::error!(unconfirmed = ?report.unconfirmed, "an orphaned session resource did not close");
                    }
                }
            });
        }
        Entry::Opening { waiters, .. } => waiters.push(reply),
        Entry::Ready(r) => {
            let _ = reply.send(Ok(r.clone()));
        }
        Entry::Disposing { .. } | Entry::Closing { .. } => {
            let _ = reply.send(Err(SeatError::NotLive(activation)));
        }
        Entry::Failed { open, .. } => {
            let _ = reply.send(Err(SeatError::Open(format!(
                "activation {activation}'s previous resource is still open: {}",
                open.join("; ")
            ))));
        }
    }
}

fn on_opened(
    myself: &ActorRef<SessionsMsg>,
    st: &mut SessionsState,
    activation: ActivationId,
    attempt: u64,
    result: Result<Arc<dyn SessionResource>, String>,
) {
    let entry = st.entries.remove(&activation);
    match (entry, result) {
        (
            Some(Entry::Opening {
                attempt: a,
                waiters,
            }),
            result,
        ) if a == attempt => match result {
            Ok(r) => {
                for w in waiters {
                    let _ = w.send(Ok(r.clone()));
                }
                st.entries.insert(activation, Entry::Ready(r));
            }
            Err(e) => {
                // SEAT-8: a failed acquisition removes the entry's resource;
                // the activation stays live and may try again.
                for w in waiters {
                    let _ = w.send(Err(SeatError::Open(e.clone())));
                }
                st.entries.insert(activation, Entry::Live);
            }
        },
        (
            Some(Entry::Disposing {
                attempt: a,
                replies,
            }),
            result,
        ) if a == attempt => match result {
            Ok(r) => start_close(myself, st, activation, r, replies),
            Err(_) => {
                for r in replies {
                    let _ = r.send(ShutdownReport::default());
                }
            }
        },
        (entry, result) => {
            if let Some(e) = entry {
                st.entries.insert(activation.clone(), e);
            }
            // An opening nobody waits for any more: close what it made.
            if let Ok(r) = result {
                tokio::spawn(async move {
                    r.interrupt();
                    let report = r.close().await;
                    if !report.is_clean() {
                        tracing::error!(%activation, unconfirmed = ?report.unconfirmed, "a late session resource did not close");
                    }
                });
            }
        }
    }
}

fn on_dispose(
    myself: &ActorRef<SessionsMsg>,
    st: &mut SessionsState,
    activation: ActivationId,
    reply: RpcReplyPort<ShutdownReport>,
) {
    match st.entries.remove(&activation) {
        None | Some(Entry::Live) => {
            let _ = reply.send(ShutdownReport::default());
        }
        Some(Entry::Opening { attempt, waiters }) => {
            for w in waiters {
                let _ = w.send(Err(SeatError::NotLive(activation.clone())));
            }
            st.entries.insert(
                activation,
                Entry::Disposing {
                    attempt,
                    replies: vec![reply],
                },
            );
        }
        Some(Entry::Disposing {
            attempt,
            mut replies,
        }) => {
            replies.push(reply);
            st.entries
                .insert(activation, Entry::Disposing { attempt, replies });
        }
        Some(Entry::Closing {
            resource,
            mut replies,
        }) => {
            replies.push(reply);
            st.entries
                .insert(activation, Entry::Closing { resource, replies });
        }
        Some(Entry::Ready(r) | Entry::Failed { resource: r, .. }) => {
            start_close(myself, st, activation, r, vec![reply]);
        }
    }
}

/// Interrupt what runs and close the resource in a task of its own, so
/// other activations are not held up (SEAT-8).
fn start_close(
    myself: &ActorRef<SessionsMsg>,
    st: &mut SessionsState,
    activation: ActivationId,
    resource: Arc<dyn SessionResource>,
    replies: Vec<RpcReplyPort<ShutdownReport>>,
) {
    resource.interrupt();
    let closing = resource.clone();
    let me = myself.clone();
    let a = activation.clone();
    tokio::spawn(async move {
        let report = closing.close().await;
        let _ = me.cast(SessionsMsg::Closed {
            activation: a,
            report,
        });
    });
    st.entries
        .insert(activation, Entry::Closing { resource, replies });
}

fn on_closed(st: &mut SessionsState, activation: ActivationId, report: ShutdownReport) {
    let Some(Entry::Closing { resource, replies }) = st.entries.remove(&activation) else {
        return;
    };
    if !report.is_clean() {
        // SEAT-10: never "closed" for what was not confirmed: the entry and
        // its resource stay, and say what is open.
        st.entries.insert(
            activation,
            Entry::Failed {
                resource,
                open: report.unconfirmed.clone(),
            },
        );
    }
    for r in replies {
        let _ = r.send(report.clone());
    }
}

impl crate::messages::seat::SessionsHandle {
    /// The activation's resource, opened on first use (SEAT-8). Stopping
    /// waiting (dropping the future) cancels only this wait.
    pub async fn acquire(
        &self,
        limit: std::time::Duration,
    ) -> Result<Arc<dyn SessionResource>, SeatError> {
        let activation = self.activation.clone();
        match self
            .actor
            .call(
                |reply| SessionsMsg::Acquire { activation, reply },
                Some(limit),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(ractor::rpc::CallResult::Timeout) => Err(SeatError::Open(format!(
                "the session resource did not open within {} ms",
                limit.as_millis()
            ))),
            Ok(ractor::rpc::CallResult::SenderError) | Err(_) => {
                Err(SeatError::NotLive(self.activation.clone()))
            }
        }
    }

    /// Close the activation's resource now (its processes reaped) and let
    /// the next `acquire` open a new one: a browser's `close` tool, or one
    /// that crashed. The report says what was reaped; a close that cannot
    /// be confirmed is the error, and the entry keeps the resource.
    pub async fn reset(&self) -> Result<ShutdownReport, SeatError> {
        let activation = self.activation.clone();
        let limit = std::time::Duration::from_secs(12);
        let report = match self
            .actor
            .call(
                |reply| SessionsMsg::Dispose { activation, reply },
                Some(limit),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => return Err(SeatError::NotLive(self.activation.clone())),
        };
        if !report.is_clean() {
            return Err(SeatError::StillOpen {
                seat: self.seat,
                open: report.unconfirmed,
            });
        }
        let _ = self.actor.cast(SessionsMsg::Live {
            activation: self.activation.clone(),
        });
        Ok(report)
    }
}
