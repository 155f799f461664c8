//! `HookRun`: a temporary actor that owns one hook process group (HOOK-3).
//!
//! Owns: one `ProcessGroup` (the shell and whatever it starts in its group).
//! Supervisor: the `HooksSupervisor`, restart type temporary (never
//! restarted). States: running → done (answered, stopped); or stopped early
//! (drained, HOOK-8), which cancels the run and waits for the reap in
//! `post_stop`. Messages: [`HookRunMsg`], private (only its run task sends).
//!
//! It starts the command through the shell, writes the payload to stdin,
//! captures stdout and stderr up to a cap, and ends the run on exit, timeout
//! or cancellation. On every path the whole group is SIGKILLed (so a
//! backgrounded grandchild does not outlive its hook) and the leader is
//! reaped before the actor answers.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::messages::hooks::codec::RawRun;
use crate::messages::hooks::run::{HookCommand, HookShell};
use crate::process::ProcessGroup;

/// Bytes kept of each of stdout and stderr; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 256 * 1024;

/// Start arguments.
pub struct HookRunArgs {
    /// What to run.
    pub command: HookCommand,
    /// The operation's cancellation (a child token is used).
    pub cancel: CancellationToken,
    /// The runtime's disposal: ends the run like a cancellation.
    pub disposed: CancellationToken,
    /// Where the result goes. Dropped unanswered only if the actor is killed.
    pub reply: oneshot::Sender<RawRun>,
}

/// Messages: only the run's own completion.
pub enum HookRunMsg {
    /// The process ended and was reaped.
    Done(RawRun),
}

/// The actor.
#[derive(Debug, Default)]
pub struct HookRun;

/// Its state.
pub struct HookRunState {
    cancel: CancellationToken,
    reply: Option<oneshot::Sender<RawRun>>,
    task: Option<JoinHandle<()>>,
}

impl Actor for HookRun {
    type Msg = HookRunMsg;
    type State = HookRunState;
    type Arguments = HookRunArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HookRunArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cancel = args.cancel.child_token();
        let token = cancel.clone();
        let disposed = args.disposed;
        let task = tokio::spawn(async move {
            let raw = run(args.command, token, disposed).await;
            let _ = myself.send_message(HookRunMsg::Done(raw));
        });
        Ok(HookRunState {
            cancel,
            reply: Some(args.reply),
            task: Some(task),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let HookRunMsg::Done(raw) = msg;
        if let Some(reply) = state.reply.take() {
            let _ = reply.send(raw);
        }
        state.task = None;
        myself.stop(None);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped before the run ended: cancel it and wait for the group to be
        // killed and the leader reaped (bounded; the kill is immediate).
        if let Some(task) = state.task.take() {
            state.cancel.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        Ok(())
    }
}

async fn read_capped(mut pipe: impl AsyncRead + Unpin) -> String {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn shell_command(shell: &HookShell, command: &str) -> crate::process::Spawn {
    let (program, flag) = match shell {
        HookShell::Sh => ("sh".to_owned(), "-c"),
        HookShell::Login => {
            let login = std::env::var("SHELL")
                .ok()
                .filter(|s| !s.is_empty() && std::path::Path::new(s).is_file())
                .unwrap_or_else(|| "/bin/sh".into());
            (login, "-lc")
        }
    };
    let mut cmd = crate::process::command(program);
    cmd.arg(flag).arg(command);
    cmd
}

/// Run one hook to completion, timeout or cancellation. Never fails: a run
/// that could not start is a `RawRun` with `failed_to_run`.
async fn run(spec: HookCommand, cancel: CancellationToken, disposed: CancellationToken) -> RawRun {
    let timeout_ms = u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX);
    if cancel.is_cancelled() || disposed.is_cancelled() {
        // Cancelled before it started (a call given up on, a disposing
        // runtime): no process at all.
        return RawRun {
            cancelled: true,
            timeout_ms,
            ..RawRun::default()
        };
    }
    let mut cmd = shell_command(&spec.shell, &spec.command);
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = spec.cwd.as_ref().filter(|c| c.is_dir()) {
        cmd.current_dir(cwd);
    }
    // The group is SIGKILLed if this task is dropped mid-run (the process is
    // exiting); the reaper still reaps the leader.
    let (mut group, pipes) = match ProcessGroup::spawn(&cmd) {
        Ok(spawned) => spawned,
        Err(e) => {
            return RawRun {
                failed_to_run: Some(format!("could not start the shell: {e}")),
                timeout_ms,
                ..RawRun::default()
            };
        }
    };
    let out = tokio::spawn(read_capped(pipes.stdout));
    let err = tokio::spawn(read_capped(pipes.stderr));
    let payload = spec.stdin;
    let mut stdin = pipes.stdin;
    // A hook that does not read stdin closes it early: that is not a failure.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&payload[..]).await;
        let _ = stdin.shutdown().await;
    });
    let mut raw = RawRun {
        timeout_ms,
        ..RawRun::default()
    };
    let exit = tokio::select! {
        e = group.wait(None) => e,
        _ = tokio::time::sleep(spec.timeout) => { raw.timed_out = true; None }
        _ = cancel.cancelled() => { raw.cancelled = true; None }
        _ = disposed.cancelled() => { raw.cancelled = true; None }
    };
    // Every path: kill what is left of the group, then reap the leader (a
    // leader that exited had its group SIGKILLed by the reaper already).
    let exit = match exit {
        Some(e) => Some(e),
        None => group.kill_and_reap().await,
    };
    if !raw.timed_out && !raw.cancelled {
        raw.exit_code = exit.and_then(|e| e.code());
    }
    writer.abort();
    // The group is dead, so the pipes close; a process that left the group
    // (setsid) could hold them open, hence the bound, after which the
    // readers are aborted and the output counts as empty.
    let (abort_out, abort_err) = (out.abort_handle(), err.abort_handle());
    let drain = async {
        let o = out.await.unwrap_or_default();
        let e = err.await.unwrap_or_default();
        (o, e)
    };
    match tokio::time::timeout(Duration::from_secs(1), drain).await {
        Ok((o, e)) => {
            raw.stdout = o;
            raw.stderr = e;
        }
        Err(_) => {
            abort_out.abort();
            abort_err.abort();
        }
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_past_the_cap_is_read_and_dropped() {
        // HOOK-3: captured with a size cap; the writer is never blocked.
        let big = vec![b'x'; OUTPUT_CAP + 10_000];
        let kept = read_capped(&big[..]).await;
        assert_eq!(kept.len(), OUTPUT_CAP);
    }
}
