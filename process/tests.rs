use super::*;

/// Spawn `sh -c script` (which prints a grandchild's pid first) and read
/// that pid.
async fn spawn_with_grandchild(script: &str) -> (ProcessGroup, Pipes, u32) {
    let mut cmd = command("sh");
    cmd.arg("-c").arg(script);
    let (group, mut pipes) = ProcessGroup::spawn(&cmd).unwrap();
    let mut out = tokio::io::BufReader::new(&mut pipes.stdout);
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
        .await
        .unwrap();
    (group, pipes, line.trim().parse().unwrap())
}

#[tokio::test]
async fn a_group_that_ignores_sigterm_is_killed_and_reaped_with_its_grandchild() {
    // The leader ignores SIGTERM and leaves a grandchild in its group.
    let (mut group, pipes, grandchild) =
        spawn_with_grandchild("trap '' TERM; sleep 300 & echo $!; wait").await;
    drop(pipes.stdin);
    let graces = CloseGraces {
        after_stdin: Duration::from_millis(50),
        after_term: Duration::from_millis(100),
        after_kill: Duration::from_secs(5),
    };
    let exit = group.close(graces).await.expect("reaped");
    assert_eq!(exit.describe(), "was killed by signal 9");
    // The grandchild got the group's SIGKILL: gone, or a zombie.
    assert!(
        still_running(&[grandchild], Duration::from_secs(10))
            .await
            .is_empty(),
        "the grandchild died with its group"
    );
}

#[tokio::test]
async fn a_leader_that_exits_on_its_own_takes_its_group_with_it() {
    // CONN-5: grandchildren die with their leader, with no close sequence
    // and no later signal by pid: the group is killed before the leader
    // is reaped, so a reused pid is never signalled.
    let (mut group, _pipes, grandchild) =
        spawn_with_grandchild("sleep 300 & echo $!; exit 7").await;
    let exit = tokio::time::timeout(Duration::from_secs(10), group.wait(None))
        .await
        .expect("the leader exits by itself")
        .expect("reaped");
    assert_eq!(exit.code(), Some(7));
    assert!(
        still_running(&[grandchild], Duration::from_secs(10))
            .await
            .is_empty(),
        "the grandchild was killed when its leader exited"
    );
    // Signals after the reap go nowhere (the reaper is done).
    group.signal(libc::SIGKILL);
    // On Linux the exit is seen through a pidfd, before the reap.
    #[cfg(target_os = "linux")]
    assert!(
        leader_exit(std::process::id()).is_some(),
        "pidfd_open works here"
    );
}

#[tokio::test]
async fn a_generation_sweep_kills_its_own_generation_and_not_the_next() {
    // RECO-3, RECO-7: the close of generation 1 sweeps after its reap;
    // generation 2 of the same server may already run by then.
    let server = format!("test-{}/global/s", std::process::id());
    let mut groups = Vec::new();
    for conn_gen in [1, 2] {
        let mut cmd = command("sleep");
        cmd.arg("300")
            .env(TAG_VAR, generation_tag(&server, conn_gen));
        groups.push(ProcessGroup::spawn(&cmd).unwrap());
    }
    let (old, new) = (groups[0].0.pid(), groups[1].0.pid());
    let swept = kill_tagged(&generation_tag(&server, 1), false, None);
    assert_eq!(swept.killed, [old]);
    assert!(
        still_running(&[new], Duration::from_millis(200))
            .await
            .contains(&new),
        "the next generation's process still runs"
    );
    // The runtime's shutdown sweep (by prefix) still finds every one.
    let swept = kill_tagged(&format!("test-{}/", std::process::id()), true, None);
    assert!(swept.killed.contains(&new), "{swept:?}");
    for (mut group, _) in groups {
        group.signal(libc::SIGKILL);
        let _ = group.wait(None).await;
    }
}

/// All of `pipes.stdout`, once the leader closes it.
async fn read_all(pipes: &mut Pipes) -> String {
    let mut out = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut pipes.stdout, &mut out)
        .await
        .unwrap();
    out
}

#[tokio::test]
async fn the_child_gets_exactly_its_arguments_environment_directory_and_default_signals() {
    // The spawn is our own (actors/spawn.rs): what std's would give the
    // child, it must give too. The test process ignores SIGPIPE (Rust
    // does at start) and tokio has a SIGCHLD handler: neither reaches
    // the child, and its signal mask is empty.
    let dir = std::env::temp_dir();
    let mut cmd = command("sh");
    cmd.arg("-c")
            .arg(r#"printf '%s|' "$0" "$1" "$PWD"; env | sort | tr '\n' ' '; grep -E '^Sig(Ign|Blk|Cgt)' /proc/self/status | tr -s '\t\n' '  '"#)
            .arg("zero")
            .arg("two words")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("ONLY", "this one")
            .current_dir(&dir);
    let (mut group, mut pipes) = ProcessGroup::spawn(&cmd).unwrap();
    let out = read_all(&mut pipes).await;
    assert_eq!(group.wait(None).await.unwrap().code(), Some(0), "{out}");
    let pwd = std::fs::canonicalize(&dir).unwrap();
    assert!(
        out.starts_with(&format!("zero|two words|{}|", pwd.display())),
        "{out}"
    );
    // Only what was set (sh adds PWD, and may add SHLVL and _).
    let vars: Vec<&str> = out
        .split('|')
        .nth(3)
        .unwrap()
        .split(' ')
        .filter(|v| v.contains('=') && !v.starts_with("Sig"))
        .filter(|v| {
            !["PWD=", "SHLVL=", "_=", "OLDPWD="]
                .iter()
                .any(|p| v.starts_with(p))
        })
        .collect();
    assert_eq!(vars, ["ONLY=this", "PATH=/usr/bin:/bin"], "{out}");
    // The same signal state as the standard library's spawn gives.
    let std_child = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"grep -E '^Sig(Ign|Blk|Cgt)' /proc/self/status | tr -s '\t\n' '  '"#)
        .output()
        .unwrap();
    let std_sigs = String::from_utf8(std_child.stdout).unwrap();
    assert!(std_sigs.contains("SigBlk: 0000000000000000"), "{std_sigs}");
    // Signals 1–31 (32 and up are glibc's own and real-time ones): the
    // mask, ignored (SIGPIPE is not) and caught sets, field by field.
    let standard = |text: &str, field: &str| {
        let hex = text
            .split(field)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("{field} in {text}"));
        u64::from_str_radix(hex, 16).unwrap() & 0x7fff_ffff
    };
    for field in ["SigBlk:", "SigIgn:", "SigCgt:"] {
        assert_eq!(
            standard(&out, field),
            standard(&std_sigs, field),
            "{field} ours: {out}\nstd's: {std_sigs}"
        );
    }
    assert_eq!(standard(&out, "SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0);
}

#[tokio::test]
async fn a_spawn_that_fails_says_why_and_leaves_no_child() {
    let missing = ProcessGroup::spawn(&command("no-such-program-mcpvisor")).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound, "{missing}");
    assert!(
        missing.to_string().contains("no-such-program-mcpvisor"),
        "{missing}"
    );
    // Exec fails in the child (a file that is not executable): the
    // child's errno comes back and the child was reaped.
    let garbage = std::env::temp_dir().join(format!("mcpvisor-not-exec-{}", std::process::id()));
    std::fs::write(&garbage, [0u8, 1, 2, 3]).unwrap();
    std::fs::set_permissions(
        &garbage,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // ETXTBSY while another test's fork, made before the write's fd was
    // closed, still holds that fd until its child execs: try again.
    let mut not_exec = ProcessGroup::spawn(&command(&garbage)).unwrap_err();
    for _ in 0..1000 {
        if not_exec.raw_os_error() != Some(libc::ETXTBSY) {
            break;
        }
        tokio::task::yield_now().await;
        not_exec = ProcessGroup::spawn(&command(&garbage)).unwrap_err();
    }
    let _ = std::fs::remove_file(&garbage);
    assert_eq!(not_exec.raw_os_error(), Some(libc::ENOEXEC), "{not_exec}");
    let mut bad_dir = command("true");
    bad_dir.current_dir("/no/such/dir");
    let e = ProcessGroup::spawn(&bad_dir).unwrap_err();
    assert!(e.to_string().contains("working directory"), "{e}");
    // No failed child is left unreaped. A child that failed before its
    // exec still has this thread's name; other tests' children (which
    // run in parallel and must not be reaped here) have exec'd. Only
    // looked at, never waited for.
    let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let zombies: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            stat.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                && comm == me
        })
        .collect();
    assert!(zombies.is_empty(), "unreaped failed children: {zombies:?}");
}

#[tokio::test]
async fn dropping_an_unreaped_group_kills_it() {
    let mut cmd = command("sleep");
    cmd.arg("300");
    let (group, _pipes) = ProcessGroup::spawn(&cmd).unwrap();
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
