//! `Spawn`: what the runtime starts (program, arguments, environment,
//! working directory), and on Linux the spawn itself: a `clone(CLONE_VM |
//! CLONE_VFORK)` of our own, as `posix_spawn` does internally, whose child
//! sets `PR_SET_PDEATHSIG = SIGKILL` before it execs (ADR 0013).
//!
//! Why not the standard library: every process the runtime starts must die
//! with the runtime, also when the runtime is SIGKILLed, and the death
//! signal can only be set in the child between its creation and its exec.
//! The standard library's `pre_exec` hook is the way to run code there, and
//! it makes the spawn a `fork` of the whole runtime (2–4 ms at its size);
//! `setpriv --pdeathsig KILL` kept `posix_spawn` but added an
//! exec of its own (about 1 ms, the same again as `sh -c true`). This spawn
//! costs what `posix_spawn` costs (docs/performance.md).
//!
//! The child shares the parent's memory until it execs, so it runs only
//! async-signal-safe system calls on a stack of its own, over data the
//! parent prepared (no allocation, no lock, no panic): it resets every
//! signal handler to the default (a handler of the parent must never run
//! on the child's stack), sets SIGPIPE back to the default (Rust ignores
//! it), clears the signal mask, makes itself a group leader, sets its death
//! signal (and checks that its parent is still the runtime), moves its pipe
//! ends onto 0, 1 and 2, changes directory and execs. A step that fails
//! leaves its errno in memory the parent reads once the vfork returns, and
//! the child `_exit`s.

use std::ffi::{CString, OsStr, OsString};
use std::path::{Path, PathBuf};

/// A program to start: built like a `std::process::Command` (the methods
/// the runtime uses), spawned by [`super::ProcessGroup::spawn`].
#[derive(Debug, Clone)]
pub struct Spawn {
    program: OsString,
    args: Vec<OsString>,
    /// Start from an empty environment instead of the runtime's.
    clear_env: bool,
    /// Changes to the environment, in order (a later one wins): `None`
    /// removes the variable.
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
}

impl Spawn {
    /// `program`, found at spawn in the child's `PATH` (the runtime's when
    /// the child's environment has none) unless it names a path.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            clear_env: false,
            env: Vec::new(),
            cwd: None,
        }
    }

    /// Add an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Add arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Set a variable of the child's environment.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Set variables of the child's environment.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Start from an empty environment (the variables set before this call
    /// are dropped too, as with `std::process::Command`).
    pub fn env_clear(&mut self) -> &mut Self {
        self.clear_env = true;
        self.env.clear();
        self
    }

    /// The child's working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The program as given.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> impl Iterator<Item = &OsStr> {
        self.args.iter().map(OsString::as_os_str)
    }

    /// The child's whole environment: the runtime's (unless cleared) with
    /// the changes applied.
    pub fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> = if self.clear_env {
            Vec::new()
        } else {
            std::env::vars_os().collect()
        };
        for (k, v) in &self.env {
            vars.retain(|(name, _)| name != k);
            if let Some(v) = v {
                vars.push((k.clone(), v.clone()));
            }
        }
        vars
    }

    /// The working directory, when one was set.
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The program's path: itself when it names a path, else its first
    /// runnable match in `path` (the child's `PATH`), else in the runtime's
    /// `PATH`, else in `/usr/bin:/bin`.
    pub(super) fn resolve(&self, child_path: Option<&OsStr>) -> std::io::Result<PathBuf> {
        use std::os::unix::ffi::OsStrExt as _;
        use std::os::unix::fs::PermissionsExt as _;
        if self.program.as_bytes().contains(&b'/') {
            return Ok(PathBuf::from(&self.program));
        }
        let runnable = |p: &Path| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let runtime_path = std::env::var_os("PATH");
        let dirs = child_path
            .map(OsStr::to_owned)
            .or(runtime_path)
            .unwrap_or_else(|| "/usr/bin:/bin".into());
        std::env::split_paths(&dirs)
            .map(|d| d.join(&self.program))
            .find(|p| runnable(p))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "{} not found in PATH (No such file or directory)",
                        Path::new(&self.program).display()
                    ),
                )
            })
    }
}

/// A C string of `s`, or the error `Command::spawn` gives for a NUL inside.
fn c_string(s: &OsStr) -> std::io::Result<CString> {
    use std::os::unix::ffi::OsStrExt as _;
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("nul byte found in {:?}", s),
        )
    })
}

#[cfg(target_os = "linux")]
pub(super) use linux::spawn;

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    use std::sync::atomic::{AtomicI32, Ordering};

    use super::{Spawn, c_string};

    /// A started child: its pid (also its group id) and the parent's ends
    /// of its pipes.
    pub(in crate::process) struct Spawned {
        pub(in crate::process) pid: libc::pid_t,
        pub(in crate::process) stdin: OwnedFd,
        pub(in crate::process) stdout: OwnedFd,
        pub(in crate::process) stderr: OwnedFd,
    }

    /// The child's stack: it runs a handful of system-call wrappers.
    const CHILD_STACK: usize = 64 * 1024;

    /// The steps the child can fail at (0: none), each with what the
    /// error says; a failed exec keeps its own error.
    const STEP_PGID: i32 = 1;
    const STEP_DEATH_SIGNAL: i32 = 2;
    const STEP_PARENT: i32 = 3;
    const STEP_STDIO: i32 = 4;
    const STEP_CWD: i32 = 5;
    const STEP_EXEC: i32 = 6;
    fn step_failed(step: i32) -> &'static str {
        match step {
            STEP_PGID => "could not make it a process group leader",
            STEP_DEATH_SIGNAL => "could not set its death signal",
            STEP_PARENT => "the runtime exited during the spawn",
            STEP_STDIO => "could not set up its stdio",
            STEP_CWD => "could not change to its working directory",
            _ => "failed before its exec",
        }
    }

    /// What the child reads (prepared by the parent) and writes (its error).
    struct ChildArgs {
        path: *const libc::c_char,
        argv: *const *const libc::c_char,
        envp: *const *const libc::c_char,
        cwd: *const libc::c_char,
        /// The child's ends, all ≥ 3, moved onto 0, 1, 2.
        fds: [libc::c_int; 3],
        parent: libc::pid_t,
        errno: AtomicI32,
        step: AtomicI32,
    }

    /// A pipe whose both ends are close-on-exec and not 0, 1 or 2 (so that
    /// the child's `dup2`s onto 0, 1 and 2 never overwrite one another).
    fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        #[allow(unsafe_code)]
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by no one else.
        #[allow(unsafe_code)]
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((above_stdio(r)?, above_stdio(w)?))
    }

    fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
        if fd.as_raw_fd() > 2 {
            return Ok(fd);
        }
        // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (or -1).
        #[allow(unsafe_code)]
        let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if new == -1 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `new` was just created and is owned by no one else.
        #[allow(unsafe_code)]
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    }

    /// Start `s` as the leader of a new process group, with piped stdio and
    /// `PR_SET_PDEATHSIG = SIGKILL`.
    pub(in crate::process) fn spawn(s: &Spawn) -> std::io::Result<Spawned> {
        use std::os::unix::ffi::OsStrExt as _;
        let env = s.environment();
        let child_path = env
            .iter()
            .find(|(k, _)| k.as_bytes() == b"PATH")
            .map(|(_, v)| v.as_os_str());
        let resolved = s.resolve(child_path)?;
        let path = c_string(resolved.as_os_str())?;
        let mut argv_owned = vec![c_string(s.get_program())?];
        for a in s.get_args() {
            argv_owned.push(c_string(a)?);
        }
        let mut envp_owned = Vec::with_capacity(env.len());
        for (k, v) in &env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp_owned.push(c_string(std::ffi::OsStr::from_bytes(&kv))?);
        }
        let cwd = s
            .get_current_dir()
            .map(|d| c_string(d.as_os_str()))
            .transpose()?;
        let argv: Vec<*const libc::c_char> = argv_owned
            .iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp: Vec<*const libc::c_char> = envp_owned
            .iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let (stdin_r, stdin_w) = pipe()?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        let args = ChildArgs {
            path: path.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: cwd
                .as_ref()
                .map_or(std::ptr::null(), |c: &CString| c.as_ptr()),
            fds: [
                stdin_r.as_raw_fd(),
                stdout_w.as_raw_fd(),
                stderr_w.as_raw_fd(),
            ],
            // SAFETY: getpid has no preconditions.
            #[allow(unsafe_code)]
            parent: unsafe { libc::getpid() },
            errno: AtomicI32::new(0),
            step: AtomicI32::new(0),
        };
        let mut stack = vec![0u8; CHILD_STACK];
        // The stack grows down: its top, aligned to 16 bytes.
        let top = {
            let end = stack.as_mut_ptr().wrapping_add(CHILD_STACK) as usize;
            (end & !15) as *mut libc::c_void
        };
        let pid = {
            // SAFETY: the signal sets are plain memory initialised by
            // sigfillset/pthread_sigmask before use. clone runs `child` on
            // `stack` (alive until clone returns: CLONE_VFORK suspends this
            // thread until the child execs or exits) over `args`, which
            // outlives the call; the child runs only async-signal-safe calls
            // (see `child`). Every signal is blocked around the clone so no
            // handler of ours can run in the child before it resets them.
            #[allow(unsafe_code)]
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                let mut old: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
                let pid = libc::clone(
                    child,
                    top,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    std::ptr::addr_of!(args) as *mut libc::c_void,
                );
                let clone_errno = std::io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                if pid == -1 {
                    return Err(clone_errno);
                }
                pid
            }
        };
        drop(stack);
        // The child's ends are the child's now.
        drop((stdin_r, stdout_w, stderr_w));
        let step = args.step.load(Ordering::SeqCst);
        if step != 0 {
            let errno = args.errno.load(Ordering::SeqCst);
            // The child has exited (`_exit` after the failed step): reap it.
            let mut status = 0;
            // SAFETY: waitpid writes the status into the int it is given.
            #[allow(unsafe_code)]
            unsafe {
                while libc::waitpid(pid, &mut status, 0) == -1
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                }
            }
            let err = std::io::Error::from_raw_os_error(errno);
            return Err(if step == STEP_EXEC {
                err
            } else {
                std::io::Error::new(err.kind(), format!("{}: {err}", step_failed(step)))
            });
        }
        Ok(Spawned {
            pid,
            stdin: stdin_w,
            stdout: stdout_r,
            stderr: stderr_r,
        })
    }

    /// Leave the failed step's errno for the parent and end the child.
    #[allow(unsafe_code)]
    fn fail(a: &ChildArgs, step: i32) -> ! {
        // SAFETY: errno is the calling thread's, readable at any time;
        // _exit ends the child without running anything of the parent's.
        unsafe {
            a.errno.store(*libc::__errno_location(), Ordering::SeqCst);
            a.step.store(step, Ordering::SeqCst);
            libc::_exit(127)
        }
    }

    /// The child, between clone and exec: async-signal-safe calls only.
    #[allow(unsafe_code)]
    extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the parent's `ChildArgs`, alive and unchanged
        // until this child execs or exits (the parent is suspended).
        let a = unsafe { &*(arg as *const ChildArgs) };
        // SAFETY: sigaction, sigprocmask, setpgid, prctl, getppid, dup2,
        // fcntl, chdir and execve are async-signal-safe system calls over
        // memory this child owns (its stack) or the parent prepared.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            for sig in 1..65 {
                let mut old: libc::sigaction = std::mem::zeroed();
                if sig != libc::SIGKILL
                    && sig != libc::SIGSTOP
                    && libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction != libc::SIG_DFL
                    && old.sa_sigaction != libc::SIG_IGN
                {
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
            }
            libc::sigaction(libc::SIGPIPE, &dfl, std::ptr::null_mut());
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if libc::setpgid(0, 0) == -1 {
                fail(a, STEP_PGID);
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                fail(a, STEP_DEATH_SIGNAL);
            }
            if libc::getppid() != a.parent {
                *libc::__errno_location() = libc::ESRCH;
                fail(a, STEP_PARENT);
            }
            for (target, fd) in a.fds.iter().enumerate() {
                // Every fd is ≥ 3, so `target` (0, 1, 2) is never one of them.
                if libc::dup2(*fd, target as libc::c_int) == -1 {
                    fail(a, STEP_STDIO);
                }
            }
            if !a.cwd.is_null() && libc::chdir(a.cwd) == -1 {
                fail(a, STEP_CWD);
            }
            libc::execve(a.path, a.argv, a.envp);
            fail(a, STEP_EXEC)
        }
    }
}
