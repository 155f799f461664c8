//! `ProcessGroup`: the one owner of a child process group. It spawns the
//! child as the leader of a new group, reaps the leader in a task of its own,
//! signals the whole group, runs the close sequence, and reports how the
//! leader ended.
//!
//! Its users: the stdio transport (one MCP server per group, CONN-5, CONN-8)
//! and `HookRun` (one hook per group, HOOK-3); the browser providers will be
//! the third. Whoever holds a `ProcessGroup` owns the group: dropping it
//! before the leader was reaped SIGKILLs the group (the reaper task still
//! reaps the leader), so no path leaves an orphan behind.
//!
//! A process that leaves its group (`setsid`) is out of reach of group
//! signals; see docs/runtime-semantics.md.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

/// How the leader of a group ended, once it was reaped.
#[derive(Debug, Clone)]
pub enum Exit {
    /// Reaped with this status.
    Status(ExitStatus),
    /// `wait` itself failed; the leader counts as reaped (nothing more can be done).
    WaitFailed(String),
}

impl Exit {
    /// The exit code, when the leader exited normally.
    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Status(s) => s.code(),
            Exit::WaitFailed(_) => None,
        }
    }

    /// For error messages: "exited with status 3", "was killed by signal 9".
    pub fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Status(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                (None, None) => "exited".into(),
            },
            Exit::WaitFailed(e) => format!("could not be waited for: {e}"),
        }
    }
}

/// The graces of the close sequence (CONN-8): after stdin was closed, after
/// SIGTERM, after SIGKILL.
#[derive(Debug, Clone, Copy)]
pub struct CloseGraces {
    /// Wait this long for a voluntary exit.
    pub after_stdin: Duration,
    /// Then SIGTERM the group and wait this long.
    pub after_term: Duration,
    /// Then SIGKILL the group and wait this long for the reap.
    pub after_kill: Duration,
}

/// The child's pipes, taken at spawn.
#[derive(Debug)]
pub struct Pipes {
    /// Its stdin.
    pub stdin: ChildStdin,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
}

/// One child process group (see the module docs).
#[derive(Debug)]
pub struct ProcessGroup {
    /// The leader's pid, also the group id.
    pid: u32,
    /// `Some` once the reaper task reaped the leader.
    exit: watch::Receiver<Option<Exit>>,
    /// `true` once the leader was reaped (for whoever must know later).
    reaped_flag: watch::Receiver<bool>,
    /// The leader was seen reaped: no kill on drop.
    reaped: bool,
}

impl ProcessGroup {
    /// Spawn `cmd` as the leader of a new process group with piped stdio, and
    /// start the task that reaps it. The command's own stdio and group
    /// settings are overridden.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<(Self, Pipes)> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(cmd);
        let mut child = cmd.spawn()?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let pid = child.id();
        let (exit_tx, exit) = watch::channel(None);
        let (reaped_tx, reaped_flag) = watch::channel(false);
        // The reaper owns the child: it is reaped on every path, also when the
        // group's owner is gone.
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(s) => Exit::Status(s),
                Err(e) => Exit::WaitFailed(e.to_string()),
            };
            let _ = exit_tx.send(Some(exit));
            let _ = reaped_tx.send(true);
        });
        let (Some(pid), (Some(stdin), Some(stdout), Some(stderr))) = (pid, pipes) else {
            // Not reachable for a child spawned with piped stdio that has not
            // been waited for; handled so that no path panics.
            if let Some(pid) = pid {
                signal_group(pid, libc::SIGKILL);
            }
            return Err(std::io::Error::other(
                "the child exited before its pid and pipes were taken",
            ));
        };
        let group = Self {
            pid,
            exit,
            reaped_flag,
            reaped: false,
        };
        Ok((
            group,
            Pipes {
                stdin,
                stdout,
                stderr,
            },
        ))
    }

    /// The leader's pid, also the group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A watch that turns `true` once the leader was reaped: a close that
    /// could not be confirmed in time can still be confirmed later (RECO-3).
    pub fn reaped_watch(&self) -> watch::Receiver<bool> {
        self.reaped_flag.clone()
    }

    /// Send `sig` to every process of the group.
    pub fn signal(&self, sig: i32) {
        signal_group(self.pid, sig);
    }

    /// Wait up to `limit` (`None`: without limit) for the leader to be reaped.
    pub async fn wait(&mut self, limit: Option<Duration>) -> Option<Exit> {
        let exit = &mut self.exit;
        let waited = async move {
            exit.wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|v| v.clone())
        };
        let exit = match limit {
            Some(limit) => tokio::time::timeout(limit, waited).await.ok().flatten(),
            None => waited.await,
        };
        if exit.is_some() {
            self.reaped = true;
        }
        exit
    }

    /// SIGKILL the whole group and wait without limit for the leader's reap
    /// (a SIGKILLed process always exits).
    pub async fn kill_and_reap(&mut self) -> Option<Exit> {
        self.signal(libc::SIGKILL);
        self.wait(None).await
    }

    /// The close sequence (CONN-8), once stdin was closed: wait, SIGTERM the
    /// group, wait, SIGKILL, wait for the reap. Finally SIGKILL the group once
    /// more so no grandchild outlives its leader. Returns the leader's exit
    /// when it was confirmed reaped.
    pub async fn close(&mut self, graces: CloseGraces) -> Option<Exit> {
        let mut exit = self.wait(Some(graces.after_stdin)).await;
        if exit.is_none() {
            self.signal(libc::SIGTERM);
            exit = self.wait(Some(graces.after_term)).await;
        }
        if exit.is_none() {
            self.signal(libc::SIGKILL);
            exit = self.wait(Some(graces.after_kill)).await;
        }
        self.signal(libc::SIGKILL);
        exit
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
        }
    }
}

/// Make the leader die with the runtime's process (Linux `PR_SET_PDEATHSIG`):
/// drop-based kills cannot run when the embedding process is itself killed
/// (SIGKILL, a crash), and a leader that ignores stdin EOF would outlive it.
/// The signal follows the thread that spawned the child: the runtime's
/// tokio worker threads, which live as long as the runtime. Descendants the
/// leader started are not covered (see docs/runtime-semantics.md).
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: between fork and exec the closure calls only prctl and getppid,
    // which are async-signal-safe, and touches no memory of the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl took effect: do not run orphaned.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("the runtime exited during the spawn"));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// Send `sig` to the group led by `pgid`, by id: for a group whose owner is
/// gone but whose leader is not reaped yet (so the id is still the group's).
pub fn signal_group_of(pgid: u32, sig: i32) {
    signal_group(pgid, sig);
}

/// Send `sig` to the process group `pgid` (a child spawned with
/// `process_group(0)`: its pid). ESRCH (the group is gone) is ignored.
fn signal_group(pgid: u32, sig: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    // SAFETY: killpg has no memory-safety preconditions; ESRCH is ignored.
    #[allow(unsafe_code)]
    unsafe {
        libc::killpg(pgid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_that_ignores_sigterm_is_killed_and_reaped_with_its_grandchild() {
        let mut cmd = Command::new("sh");
        // The leader ignores SIGTERM and leaves a grandchild in its group.
        cmd.arg("-c").arg("trap '' TERM; sleep 300 & echo $!; wait");
        let (mut group, pipes) = ProcessGroup::spawn(&mut cmd).unwrap();
        let mut out = tokio::io::BufReader::new(pipes.stdout);
        let mut line = String::new();
        tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
            .await
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        drop(pipes.stdin);
        let graces = CloseGraces {
            after_stdin: Duration::from_millis(50),
            after_term: Duration::from_millis(100),
            after_kill: Duration::from_secs(5),
        };
        let exit = group.close(graces).await.expect("reaped");
        assert_eq!(exit.describe(), "was killed by signal 9");
        // The grandchild got the group's SIGKILL: it is gone (or a zombie
        // until init reaps it, which kill(0) cannot tell from alive; wait).
        let gone = async {
            loop {
                let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat"));
                match stat {
                    Err(_) => return,
                    Ok(s) if s.contains(") Z ") => return,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone)
            .await
            .expect("the grandchild died with its group");
    }

    #[tokio::test]
    async fn dropping_an_unreaped_group_kills_it() {
        let mut cmd = Command::new("sleep");
        cmd.arg("300");
        let (group, _pipes) = ProcessGroup::spawn(&mut cmd).unwrap();
        let pid = group.pid();
        let mut exit = group.exit.clone();
        drop(group);
        let exit = tokio::time::timeout(Duration::from_secs(10), exit.wait_for(Option::is_some))
            .await
            .expect("reaped after the drop's SIGKILL")
            .unwrap()
            .clone()
            .unwrap();
        assert_eq!(exit.describe(), "was killed by signal 9", "pid {pid}");
    }
}
