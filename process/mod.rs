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
//! No group signal is sent after the leader was reaped: when the leader
//! exits (seen through its pidfd, without reaping), the reaper SIGKILLs the
//! group, then reaps, under the lock every group signal takes. While the
//! leader or its zombie exists its pid cannot be reused, so no group signal
//! can reach an unrelated process that got the same id.
//!
//! A process that leaves its group (`setsid`) is out of reach of group
//! signals; see docs/runtime-semantics.md.

use std::process::ExitStatus;
#[cfg(not(target_os = "linux"))]
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::watch;

mod spawn;

pub use spawn::Spawn;

use crate::messages::server::Unreaped;

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
    pub stdin: pipe::Sender,
    /// Its stdout.
    pub stdout: pipe::Receiver,
    /// Its stderr.
    pub stderr: pipe::Receiver,
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
    /// `true` once the leader was reaped, shared with the reaper task; held
    /// while a group signal is sent and while the reaper reaps, so a signal
    /// never goes to the id after the leader was reaped (and the id may
    /// have been reused).
    gone: Arc<Mutex<bool>>,
    /// The leader was seen reaped: no kill on drop.
    reaped: bool,
}

impl ProcessGroup {
    /// Spawn `cmd` as the leader of a new process group with piped stdio
    /// and `PR_SET_PDEATHSIG = SIGKILL` (it dies with the runtime's process,
    /// also a SIGKILLed one), and start the task that reaps it.
    pub fn spawn(cmd: &Spawn) -> std::io::Result<(Self, Pipes)> {
        Self::spawn_notifying(cmd, Box::new(|| {}))
    }

    /// [`ProcessGroup::spawn`], and `on_exit` runs in the reaper task once
    /// the leader was reaped (before any waiter hears of it). The stdio
    /// transport learns this way that its server is gone even while another
    /// process still holds the server's stdout open (CONN-14).
    pub fn spawn_notifying(
        cmd: &Spawn,
        on_exit: Box<dyn FnOnce() + Send>,
    ) -> std::io::Result<(Self, Pipes)> {
        let spawned = spawn_leader(cmd)?;
        let pid = spawned.pid;
        let (exit_tx, exit) = watch::channel(None);
        let (reaped_tx, reaped_flag) = watch::channel(false);
        let gone = Arc::new(Mutex::new(false));
        let reaper_gone = gone.clone();
        // The reaper owns the leader: it is reaped on every path, also when
        // the group's owner is gone.
        #[cfg(target_os = "linux")]
        let reaping = reap(pid, reaper_gone);
        #[cfg(not(target_os = "linux"))]
        let reaping = reap(spawned.child, pid, reaper_gone);
        tokio::spawn(async move {
            let exit = reaping.await;
            on_exit();
            let _ = exit_tx.send(Some(exit));
            let _ = reaped_tx.send(true);
        });
        let group = Self {
            pid,
            exit,
            reaped_flag,
            gone,
            reaped: false,
        };
        // A pipe that cannot join the reactor: `group`'s drop kills the child.
        let pipes = Pipes {
            stdin: pipe::Sender::from_owned_fd(spawned.stdin)?,
            stdout: pipe::Receiver::from_owned_fd(spawned.stdout)?,
            stderr: pipe::Receiver::from_owned_fd(spawned.stderr)?,
        };
        Ok((group, pipes))
    }

    /// The leader's pid, also the group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// For whoever outlives this owner: a watch that turns `true` once the
    /// leader was reaped (a close that could not be confirmed in time can
    /// still be confirmed later, RECO-3), and a group SIGKILL that is skipped
    /// once the leader was reaped.
    pub fn unreaped(&self) -> Unreaped {
        let (pid, gone) = (self.pid, self.gone.clone());
        Unreaped {
            reaped: self.reaped_flag.clone(),
            kill_again: Arc::new(move || {
                let gone = lock(&gone);
                if !*gone {
                    signal_group(pid, libc::SIGKILL);
                }
            }),
        }
    }

    /// Send `sig` to every process of the group, unless its leader was
    /// reaped already (then the whole group was SIGKILLed just before).
    pub fn signal(&self, sig: i32) {
        let gone = lock(&self.gone);
        if !*gone {
            signal_group(self.pid, sig);
        }
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
    /// group, wait, SIGKILL, wait for the reap. No grandchild outlives its
    /// leader: the reaper SIGKILLs the group when the leader exits. Returns
    /// the leader's exit when it was confirmed reaped.
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

/// What to start for `program` (arguments, environment and working
/// directory are the caller's to add); [`ProcessGroup::spawn`] starts it.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Spawn {
    Spawn::new(program)
}

/// A started leader and the parent's ends of its pipes.
struct Started {
    pid: u32,
    /// What the reaper waits on elsewhere than Linux (there, the pid).
    #[cfg(not(target_os = "linux"))]
    child: tokio::process::Child,
    stdin: std::os::fd::OwnedFd,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
}

/// Linux: our own vfork-style spawn, which sets the death signal in the
/// child (actors/spawn.rs).
#[cfg(target_os = "linux")]
fn spawn_leader(cmd: &Spawn) -> std::io::Result<Started> {
    let s = spawn::spawn(cmd)?;
    let pid = u32::try_from(s.pid).map_err(|_| std::io::Error::other("negative pid"))?;
    Ok(Started {
        pid,
        stdin: s.stdin,
        stdout: s.stdout,
        stderr: s.stderr,
    })
}

/// Elsewhere: the standard library's spawn (there is no death signal).
#[cfg(not(target_os = "linux"))]
fn spawn_leader(cmd: &Spawn) -> std::io::Result<Started> {
    let mut c = tokio::process::Command::new(cmd.get_program());
    c.args(cmd.get_args())
        .env_clear()
        .envs(cmd.environment())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = cmd.get_current_dir() {
        c.current_dir(dir);
    }
    let mut child = c.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the child exited before its pid was taken"))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("the child's pipes were not created"));
    };
    Ok(Started {
        pid,
        stdin: stdin.into_owned_fd()?,
        stdout: stdout.into_owned_fd()?,
        stderr: stderr.into_owned_fd()?,
        child,
    })
}

/// The environment variable every process the runtime starts carries
/// (servers and hooks), and which every descendant inherits, also one that
/// left its process group with `setsid`: `<runtime>/<scope>/<server>#<conn_gen>`
/// for a server's connection (see [`generation_tag`]), `<runtime>/hooks` for
/// hooks.
pub const TAG_VAR: &str = "MCPVISOR_TAG";

/// The tag of one connection generation of a server whose tag is `server`.
/// A connection's close sweeps its own generation only: after a supervisor
/// restart the next generation may start once the old process is reaped,
/// while the old close is still sweeping (RECO-3, RECO-7), and a sweep by
/// the server's tag would kill the new process too.
pub fn generation_tag(server: &str, conn_gen: u64) -> String {
    format!("{server}#{conn_gen}")
}

/// How long a sweep waits for the processes it SIGKILLed to be gone (a
/// SIGKILLed process exits as soon as it is scheduled; one still running
/// after this is reported, not waited for without end).
pub const SWEPT_EXIT_WAIT: Duration = Duration::from_secs(1);

/// What [`kill_tagged`] SIGKILLed.
#[derive(Debug, Default)]
pub struct Swept {
    /// Every process killed, and the members of `group` still dying, so
    /// that a caller can wait for all of them to be gone.
    pub killed: Vec<u32>,
    /// Of those, the ones that had left `group` (RECO-7's `escaped`).
    pub escaped: Vec<u32>,
}

/// SIGKILL every process but this one whose environment has [`TAG_VAR`]
/// equal to `value` (or, with `prefix`, starting with it): the descendants
/// that left their process group, out of reach of group signals, and the
/// members of the group just killed that have not died yet. A process
/// still in `group` is killed again but not listed as escaped. Processes
/// of other users, and ones that cleared their environment, are not found.
pub fn kill_tagged(value: &str, prefix: bool, group: Option<u32>) -> Swept {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Swept::default();
    };
    let me = std::process::id();
    let wanted = format!("{TAG_VAR}={value}");
    let mut swept = Swept::default();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let tagged = environ.split(|b| *b == 0).any(|var| {
            let var = var.strip_prefix(wanted.as_bytes());
            match var {
                Some(rest) => prefix || rest.is_empty(),
                None => false,
            }
        });
        // Its group is read before the kill: once killed, a process of the
        // group may be reaped at once and read as no group at all, which
        // is not "left its group" (a chaos run's finding under load). One
        // that cannot be read is already gone. A member of `group` is ours
        // even when its environment no longer reads: a process already
        // exiting (the group's SIGKILL) has none, and must still be waited
        // for (a group's id is not reused while it has members).
        if !tagged && group.is_none() {
            continue;
        }
        let Some(pgid) = process_group_of(pid) else {
            continue;
        };
        if !tagged {
            // Not killed again: it was, with its group; only waited for.
            if group == Some(pgid) {
                swept.killed.push(pid);
            }
            continue;
        }
        if let Ok(p) = libc::pid_t::try_from(pid) {
            // SAFETY: kill has no memory-safety preconditions. The pid was
            // read from /proc an instant ago with our tag in its environment.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
            swept.killed.push(pid);
            if group != Some(pgid) {
                swept.escaped.push(pid);
            }
        }
    }
    swept
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`, after the
/// parenthesised command, which may itself hold spaces and parentheses).
fn process_group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Of `pids`, the ones still running (not gone, not a zombie) after waiting
/// up to `limit` for each to exit (through its pidfd where there is one).
pub async fn still_running(pids: &[u32], limit: std::time::Duration) -> Vec<u32> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut left = Vec::new();
    for pid in pids {
        if let Some(exited) = leader_exit(*pid) {
            let _ = tokio::time::timeout_at(deadline, exited).await;
        }
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim_start().chars().next())
            });
        if !matches!(state, None | Some('Z') | Some('X')) {
            left.push(*pid);
        }
    }
    left
}

/// The reaper of a group led by `pid`. Once the leader has exited, and
/// before it is reaped, it SIGKILLs the whole group (CONN-5: grandchildren
/// die with their leader), then reaps it, both under the `gone` lock that
/// [`ProcessGroup::signal`] takes: every group signal is sent while the
/// leader's pid is still held (by the process or its zombie), so none can
/// reach another group that reused the id.
#[cfg(target_os = "linux")]
async fn reap(pid: u32, gone: Arc<Mutex<bool>>) -> Exit {
    // Dropped unreaped (the runtime's tokio runtime is shutting down): the
    // group is killed, and the zombie reaped if it already is one.
    let mut guard = ReapOnDrop { pid, done: false };
    match leader_exit(pid) {
        Some(exited) => exited.await,
        // No pidfd (a kernel before 5.3): look for the exit, without reaping.
        None => {
            while !has_exited(pid) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let mut gone_now = lock(&gone);
    signal_group(pid, libc::SIGKILL);
    let exit = wait_pid(pid, 0);
    *gone_now = true;
    guard.done = true;
    exit
}

/// `waitpid(pid, flags)`: the exit once reaped.
#[cfg(target_os = "linux")]
fn wait_pid(pid: u32, flags: libc::c_int) -> Exit {
    use std::os::unix::process::ExitStatusExt as _;
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return Exit::WaitFailed("pid out of range".into());
    };
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into the int it is given.
        #[allow(unsafe_code)]
        let r = unsafe { libc::waitpid(p, &mut status, flags) };
        if r == p {
            return Exit::Status(ExitStatus::from_raw(status));
        }
        let e = std::io::Error::last_os_error();
        if r == -1 && e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Exit::WaitFailed(if r == 0 {
            "still running".into()
        } else {
            e.to_string()
        });
    }
}

/// Whether child `pid` has exited (it is reapable), without reaping it.
#[cfg(target_os = "linux")]
fn has_exited(pid: u32) -> bool {
    let p: libc::id_t = pid;
    // SAFETY: waitid writes into the siginfo it is given.
    #[allow(unsafe_code)]
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            p,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == -1 || info.si_pid() != 0
    }
}

/// Kills and, when it can without waiting, reaps a leader whose reaper was
/// dropped before the reap.
#[cfg(target_os = "linux")]
struct ReapOnDrop {
    pid: u32,
    done: bool,
}

#[cfg(target_os = "linux")]
impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        if !self.done {
            signal_group(self.pid, libc::SIGKILL);
            let _ = wait_pid(self.pid, libc::WNOHANG);
        }
    }
}

#[cfg(not(target_os = "linux"))]
async fn reap(mut child: tokio::process::Child, pid: u32, gone: Arc<Mutex<bool>>) -> Exit {
    let exit = child.wait().await;
    *lock(&gone) = true;
    signal_group(pid, libc::SIGKILL);
    match exit {
        Ok(s) => Exit::Status(s),
        Err(e) => Exit::WaitFailed(e.to_string()),
    }
}

/// The `gone` flag, also after a panic elsewhere poisoned it.
fn lock(gone: &Mutex<bool>) -> std::sync::MutexGuard<'_, bool> {
    gone.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A future that completes when process `pid` has exited, without reaping
/// it (for a child): its pidfd turns readable. `None` when no pidfd can be
/// had (no such process, or no pidfd support).
#[cfg(target_os = "linux")]
fn leader_exit(pid: u32) -> Option<impl std::future::Future<Output = ()>> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; it touches no memory of ours.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` is a descriptor pidfd_open just returned, owned by no one else.
    #[allow(unsafe_code)]
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the OwnedFd is moved in and stays open, the same descriptor,
    // for as long as the AsyncFd lives. A runtime without an I/O driver
    // cannot spawn children at all (tokio::process needs one).
    #[allow(unsafe_code)]
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .ok()?;
    Some(async move {
        // An error of the reactor counts as the exit: the wait that follows
        // still reaps.
        let _ = fd.readable().await;
    })
}

#[cfg(not(target_os = "linux"))]
fn leader_exit(_: u32) -> Option<std::future::Ready<()>> {
    None
}

/// SIGKILL one process (found by a sweep, not a child of ours).
#[cfg(feature = "browser")]
pub fn kill_pid(pid: libc::pid_t) {
    // SAFETY: kill has no memory-safety preconditions; ESRCH is ignored.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
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
mod tests;
