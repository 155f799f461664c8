//! Starting a stdio server: the executable found, its environment built
//! (CONN-5), the child spawned in its own process group, and the handle
//! that closes it (CONN-8).

use super::*;

/// Why a stdio server could not be started (CONN-5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The command is not on `PATH` nor in the common prefixes.
    #[error("executable \"{command}\" not found; searched: {}", .searched.join(", "))]
    NotFound {
        /// The command as configured.
        command: String,
        /// Every directory looked in, in order.
        searched: Vec<String>,
    },
    /// The executable was found but could not be started.
    #[error("could not start {exe}: {reason}")]
    Start {
        /// The executable's path.
        exe: String,
        /// The operating system's reason.
        reason: String,
    },
}

/// A spawned stdio child, before the handshake.
pub struct SpawnedChild {
    /// The transport rmcp serves on.
    pub transport: StdioTransport,
    /// The handle that closes and reaps the process group.
    pub process: ProcessHandle,
}

/// Locate `command` on `path` and the common prefixes (CONN-5).
pub fn resolve_executable(
    command: &str,
    path: Option<&str>,
    home: Option<&Path>,
) -> Result<PathBuf, SpawnError> {
    if command.contains('/') {
        return Ok(PathBuf::from(command));
    }
    let mut dirs: Vec<PathBuf> = path
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.push(PathBuf::from("/usr/local/bin"));
    if let Some(home) = home {
        dirs.push(home.join(".local/bin"));
        dirs.push(home.join(".cargo/bin"));
        if let Ok(rd) = std::fs::read_dir(home.join(".nvm/versions/node")) {
            let mut versions: Vec<PathBuf> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect();
            versions.sort();
            versions.reverse();
            dirs.extend(versions);
        }
    }
    for dir in &dirs {
        let candidate = dir.join(command);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    // Each directory once, in search order (PATH often repeats /usr/local/bin).
    let mut searched: Vec<String> = Vec::new();
    for d in &dirs {
        let d = d.display().to_string();
        if !searched.contains(&d) {
            searched.push(d);
        }
    }
    Err(SpawnError::NotFound {
        command: command.to_owned(),
        searched,
    })
}

/// Whether `cfg`'s executable does not exist: looked up as [`spawn`]
/// looks it up (the child's `PATH` and the common prefixes), or an
/// absolute path with nothing there.
pub fn missing_executable(cfg: &StdioConfig) -> bool {
    let command = Path::new(&cfg.command);
    if command.is_absolute() {
        return !command.exists();
    }
    let env = child_environment(cfg, |n| std::env::var(n).ok());
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    matches!(
        resolve_executable(&cfg.command, path, home.as_deref()),
        Err(SpawnError::NotFound { .. })
    )
}

/// The package runner `cfg` starts (`npx`, `uvx`, `bunx`, `pnpm dlx`…),
/// which downloads the package on its first run: a first start can take
/// far longer than the next ones.
pub fn package_runner(cfg: &StdioConfig) -> Option<String> {
    let line: Vec<String> = std::iter::once(cfg.command.clone())
        .chain(cfg.args.iter().take(1).cloned())
        .collect();
    package_runner_of(&line)
}

/// The package runner a command line (`["npx", "-y", "pkg"]`) starts
/// (`npx`, `uvx`, `bunx`, `pnpx`, `pipx`, `pnpm dlx`, `yarn dlx`…), whose
/// first run downloads the package.
pub fn package_runner_of(line: &[String]) -> Option<String> {
    let base = Path::new(line.first()?).file_name()?.to_str()?;
    let first = line.get(1).map(String::as_str);
    match (base, first) {
        ("npx" | "uvx" | "bunx" | "pnpx" | "pipx", _) => Some(base.to_owned()),
        ("pnpm" | "yarn" | "bun", Some(sub @ ("dlx" | "x"))) => Some(format!("{base} {sub}")),
        _ => None,
    }
}

/// What to add to a failed start of `cfg` whose stderr is `stderr`: for
/// `npx`, a package npm's cache holds half-installed (a first run stopped
/// mid-install) fails the same way at every start until the cache is
/// cleared.
pub fn package_runner_hint(cfg: &StdioConfig, stderr: &str) -> Option<&'static str> {
    let runner = package_runner(cfg)?;
    let broken = ["ERR_MODULE_NOT_FOUND", "Cannot find module", "ENOTEMPTY"]
        .iter()
        .any(|m| stderr.contains(m));
    (runner == "npx" && broken).then_some(
        "; npm's copy of the package looks incomplete (a first run stopped while it installed leaves it so): delete ~/.npm/_npx (or run `npm cache clean --force`), then start it again",
    )
}

pub(super) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The environment of a stdio child (CONN-5): allowlisted parent variables,
/// explicit passthrough, the instance's `env`, then `NO_COLOR=1`.
pub fn child_environment(
    cfg: &StdioConfig,
    parent: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = Default::default();
    for name in ENV_ALLOWLIST {
        if let Some(v) = parent(name) {
            env.insert(name.to_owned(), v);
        }
    }
    for name in &cfg.env_passthrough {
        if let Some(v) = parent(name) {
            env.insert(name.clone(), v);
        }
    }
    for (k, v) in &cfg.env {
        env.insert(k.clone(), v.clone());
    }
    env.insert("NO_COLOR".into(), "1".into());
    debug_assert!(
        ENV_ALLOWLIST
            .iter()
            .all(|n| !crate::messages::trust::looks_secret(n))
    );
    env.into_iter().collect()
}

/// Spawn the child in its own process group with piped stdio, start the stderr
/// reader and the reaper.
pub fn spawn(
    cfg: &StdioConfig,
    secret_env: Vec<(String, crate::messages::trust::Secret)>,
    diag: Arc<Diagnostics>,
    chaos: crate::messages::config::ChaosSwitches,
) -> Result<SpawnedChild, SpawnError> {
    let mut env = child_environment(cfg, |n| std::env::var(n).ok());
    for (name, value) in secret_env {
        env.retain(|(k, _)| *k != name);
        env.push((name, value.expose().to_owned()));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let exe = resolve_executable(&cfg.command, path, home.as_deref())?;
    let mut cmd = crate::process::command(&exe);
    cmd.args(&cfg.args).env_clear().envs(env);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // The leader's exit ends the transport even when stdout stays open (a
    // process it started holds it): what the pipe still holds is read for
    // LEADER_EXIT_DRAIN, then the transport is dead (CONN-14).
    let dead = Arc::new(Dead::default());
    let leader_gone = dead.clone();
    let on_exit = Box::new(move || {
        tokio::spawn(async move {
            tokio::time::sleep(LEADER_EXIT_DRAIN).await;
            leader_gone.set_leader_exited();
        });
    });
    let (group, pipes) =
        ProcessGroup::spawn_notifying(&cmd, on_exit).map_err(|e| SpawnError::Start {
            exe: exe.display().to_string(),
            reason: e.to_string(),
        })?;
    let (stderr_done_tx, stderr_done) = watch::channel(false);
    let d = diag.clone();
    tokio::spawn(async move {
        let stderr = pipes.stderr;
        // No buffer is held while the server is quiet: the read buffer
        // lives on the stack between a readiness and its read, so an idle
        // connection's stderr costs no heap (PERF-1, memory per idle
        // connection).
        while stderr.readable().await.is_ok() {
            let mut buf = [0u8; 4096];
            match stderr.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => d.push_stderr(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        let _ = stderr_done_tx.send(true);
    });
    Ok(SpawnedChild {
        transport: StdioTransport {
            lossy: chaos.lossy_line_reader(),
            cross: chaos.cross_replies().then(Default::default),
            dead,
            ..StdioTransport::new(pipes.stdin, pipes.stdout, diag)
        },
        process: ProcessHandle {
            pid: group.pid(),
            group,
            stderr_done,
        },
    })
}

/// The server's process group (see `crate::process`) and its stderr
/// reader: closing it runs the close sequence; dropping it without a
/// confirmed close SIGKILLs the group.
#[derive(Debug)]
pub struct ProcessHandle {
    /// The child's pid, also its process group id.
    pub pid: u32,
    group: ProcessGroup,
    stderr_done: watch::Receiver<bool>,
}

impl ProcessHandle {
    /// Wait up to `limit` for the child to be reaped, then up to 200 ms more for
    /// stderr to drain (so the error can quote what the server printed last, CONN-7).
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<String> {
        let exit = self.group.wait(Some(limit)).await?;
        self.drain_stderr().await;
        Some(exit.describe())
    }

    async fn drain_stderr(&mut self) {
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            self.stderr_done.wait_for(|d| *d),
        )
        .await;
    }

    /// See [`ProcessGroup::unreaped`].
    pub fn unreaped(&self) -> crate::messages::server::Unreaped {
        self.group.unreaped()
    }

    /// The close sequence (CONN-8) after stdin was closed by the transport:
    /// wait 1 s, SIGTERM the group, wait, SIGKILL, wait for the reap.
    /// Returns whether the leader was confirmed reaped.
    pub async fn close(&mut self) -> bool {
        let exit = self.group.close(CLOSE_GRACES).await;
        if exit.is_some() {
            self.drain_stderr().await;
        }
        exit.is_some()
    }
}
