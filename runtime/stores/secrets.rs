//! Secret stores (TRUST-2): where credential values come from. Config holds
//! only names; values are fetched when a connection starts and live in a
//! redacting [`Secret`].
//!
//! Three implementations ship: [`EnvSecretStore`] (a secret name is the name
//! of an environment variable of the runtime's process), [`FileSecretStore`]
//! (a TOML file of `name = "value"` lines, created with mode 0600 and refused
//! when group or others can read it) and, with the `keyring` feature on
//! Linux, `KeyringSecretStore` (the user's kernel keyring). Desktop keyrings
//! (Secret Service, macOS Keychain) are not built.

use std::collections::BTreeMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use futures::future::BoxFuture;

use crate::messages::store::StoreError;
use crate::messages::trust::{Secret, SecretStore, StoreLock};

/// Secret name = environment variable name of this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvSecretStore;

impl SecretStore for EnvSecretStore {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        Box::pin(async move {
            std::env::var(name)
                .map(Secret::new)
                .map_err(|_| StoreError::EnvNotSet(name.to_owned()))
        })
    }
}

/// A TOML file of `name = "value"` entries, readable by its owner only.
#[derive(Debug, Clone)]
pub struct FileSecretStore {
    path: PathBuf,
}

impl FileSecretStore {
    /// A store reading `path`. The file is created empty with mode 0600 when
    /// it does not exist.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        if !path.exists() {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create", dir, e))?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| StoreError::io("create the secret file", &path, e))?;
        }
        Ok(Self { path })
    }

    /// Store a value (rewrites the file, keeping mode 0600).
    pub fn set(&self, name: &str, value: &Secret) -> Result<(), StoreError> {
        self.locked(|| {
            let mut all = self.read_all()?;
            all.insert(name.to_owned(), value.expose().to_owned());
            self.write_all(&all)
        })
    }

    /// Remove a value (rewrites the file; nothing to remove is fine).
    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        self.locked(|| {
            let mut all = self.read_all()?;
            if all.remove(name).is_none() {
                return Ok(());
            }
            self.write_all(&all)
        })
    }

    /// An exclusive `flock` of `secrets.refresh.<name>.lock` beside the
    /// file: the OAuth refresh transaction of `name` among every process
    /// sharing the file ([`SecretStore::refresh_lock`]). Another file than
    /// the writes' lock, which the refresh's own write takes inside it.
    /// Tried without blocking every 20 ms for at most 30 s (a holder that
    /// hangs fails the refresh, not the process); `None`, with a warning,
    /// where the lock file cannot be created (a read-only volume).
    async fn refresh_flock(&self, name: &str) -> Result<Option<StoreLock>, StoreError> {
        use std::os::fd::AsRawFd as _;
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let lock_path = self.path.with_extension(format!("refresh.{safe}.lock"));
        let lock = match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
        {
            Ok(lock) => lock,
            Err(e) => {
                tracing::warn!(
                    "cannot open {} ({e}): this OAuth refresh is not coordinated with other processes",
                    lock_path.display()
                );
                return Ok(None);
            }
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            // SAFETY: flock on a descriptor this function owns; it touches
            // no memory. The lock lives as long as the file.
            #[allow(unsafe_code)]
            let got = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if got {
                return Ok(Some(StoreLock::new(lock)));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(StoreError::io("lock", &lock_path, e));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::io(
                    "lock (another process has held it for 30 s)",
                    &lock_path,
                    e,
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Run a read-modify-write of the file under an exclusive `flock` of
    /// `FILE.lock`: two writers (two connections refreshing OAuth tokens,
    /// `auth login` beside a running gateway) never lose each other's
    /// change. The lock is released when the lock file is closed.
    fn locked<T>(&self, write: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        use std::os::fd::AsRawFd as _;
        let lock_path = self.path.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| StoreError::io("open the lock file", &lock_path, e))?;
        // SAFETY: flock on a file descriptor this function owns for the
        // whole call; it touches no memory.
        #[allow(unsafe_code)]
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(StoreError::io(
                "lock",
                &lock_path,
                std::io::Error::last_os_error(),
            ));
        }
        let result = write();
        drop(lock);
        result
    }

    fn write_all(&self, all: &BTreeMap<String, String>) -> Result<(), StoreError> {
        let text = toml::to_string(all)
            .map_err(|e| StoreError::Unusable(format!("cannot encode the secret file: {e}")))?;
        // A fresh file of a name nobody else writes, so the mode below is
        // the mode it gets; on disk before it replaces the store.
        let tmp = self
            .path
            .with_extension(format!("{:016x}.tmp", rand::random::<u64>()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, text.as_bytes())?;
                f.sync_all()
            })
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                StoreError::io("write", &tmp, e)
            })?;
        std::fs::rename(&tmp, &self.path).map_err(|e| StoreError::io("replace", &self.path, e))
    }

    fn read_all(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| StoreError::io("read the secret file", &self.path, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(StoreError::Unusable(format!(
                "the secret file {} can be read by others (mode {:o}); chmod 600 it",
                self.path.display(),
                meta.permissions().mode() & 0o777
            )));
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| StoreError::io("read the secret file", &self.path, e))?;
        // The parse error may quote a line of the file: never pass it on.
        toml::from_str(&text).map_err(|_| {
            StoreError::Unusable(format!(
                "the secret file {} is not valid TOML",
                self.path.display()
            ))
        })
    }
}

impl SecretStore for FileSecretStore {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        Box::pin(async move {
            let all = self.read_all()?;
            all.get(name)
                .map(|v| Secret::new(v.clone()))
                .ok_or_else(|| StoreError::Missing {
                    name: name.to_owned(),
                    place: self.path.display().to_string(),
                })
        })
    }

    fn put<'a>(&'a self, name: &'a str, value: Secret) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.set(name, &value) })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.delete(name) })
    }

    fn refresh_lock<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoreLock>, StoreError>> {
        Box::pin(self.refresh_flock(name))
    }
}

/// Secrets kept in memory only, for this runtime's life: for tests, and
/// for an embedder that keeps OAuth tokens per process (the conformance
/// adapter does).
#[derive(Debug, Default)]
pub struct MemorySecretStore {
    values: std::sync::Mutex<BTreeMap<String, Secret>>,
}

impl MemorySecretStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SecretStore for MemorySecretStore {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        let found = self.values.lock().ok().and_then(|v| v.get(name).cloned());
        Box::pin(async move {
            found.ok_or_else(|| StoreError::Missing {
                name: name.to_owned(),
                place: "memory".into(),
            })
        })
    }

    fn put<'a>(&'a self, name: &'a str, value: Secret) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Ok(mut v) = self.values.lock() {
            v.insert(name.to_owned(), value);
        }
        Box::pin(async { Ok(()) })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Ok(mut v) = self.values.lock() {
            v.remove(name);
        }
        Box::pin(async { Ok(()) })
    }
}

/// Secrets from the OS keyring (feature `keyring`, Linux): `user` keys named
/// `mcpvisor:<service>:<secret name>` in the user's kernel keyring
/// (keyrings(7)), which lives as long as the user has a process running.
#[cfg(all(feature = "keyring", target_os = "linux"))]
#[derive(Debug, Clone)]
pub struct KeyringSecretStore {
    service: String,
}

#[cfg(all(feature = "keyring", target_os = "linux"))]
impl KeyringSecretStore {
    /// A store reading the entries of `service` (e.g. `"mcpvisor"`).
    pub fn new(service: impl Into<String>) -> Self {
        Self {
            service: service.into(),
        }
    }

    fn description(&self, name: &str) -> String {
        format!("mcpvisor:{}:{name}", self.service)
    }

    fn keyring() -> Result<linux_keyutils::KeyRing, StoreError> {
        linux_keyutils::KeyRing::from_special_id(linux_keyutils::KeyRingIdentifier::User, false)
            .map_err(|e| StoreError::Unusable(format!("the user keyring is not available: {e:?}")))
    }

    /// Store a value (replacing an earlier one).
    pub fn set(&self, name: &str, value: &Secret) -> Result<(), StoreError> {
        Self::keyring()?
            .add_key(&self.description(name), value.expose().as_bytes())
            .map(|_| ())
            .map_err(|e| {
                StoreError::Unusable(format!(
                    "cannot store {name} in the keyring ({}): {e:?}",
                    self.service
                ))
            })
    }

    /// Remove a value.
    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        Self::keyring()?
            .search(&self.description(name))
            .and_then(|k| k.invalidate())
            .map_err(|e| {
                StoreError::Unusable(format!(
                    "cannot delete {name} from the keyring ({}): {e:?}",
                    self.service
                ))
            })
    }
}

#[cfg(all(feature = "keyring", target_os = "linux"))]
impl SecretStore for KeyringSecretStore {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        Box::pin(async move {
            let key = Self::keyring()?
                .search(&self.description(name))
                .map_err(|_| StoreError::Missing {
                    name: name.to_owned(),
                    place: format!("the keyring ({})", self.service),
                })?;
            let bytes = key.read_to_vec().map_err(|e| {
                StoreError::Unusable(format!(
                    "cannot read {name} from the keyring ({}): {e:?}",
                    self.service
                ))
            })?;
            String::from_utf8(bytes).map(Secret::new).map_err(|_| {
                StoreError::Unusable(format!(
                    "the keyring entry {name} ({}) is not UTF-8",
                    self.service
                ))
            })
        })
    }

    fn put<'a>(&'a self, name: &'a str, value: Secret) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.set(name, &value) })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Nothing stored is nothing to remove.
            if self.get(name).await.is_err() {
                return Ok(());
            }
            self.delete(name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_store_is_private_and_round_trips() {
        let path =
            std::env::temp_dir().join(format!("mcpvisor-secrets-{}.toml", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let store = FileSecretStore::open(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        store.set("gh_token", &Secret::new("s3cr3t")).unwrap();
        assert_eq!(store.get("gh_token").await.unwrap().expose(), "s3cr3t");
        let missing = store.get("nope").await.unwrap_err().to_string();
        assert!(missing.contains("no entry nope"), "{missing}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = store.get("gh_token").await.unwrap_err().to_string();
        assert!(open.contains("can be read by others"), "{open}");
        assert!(!open.contains("s3cr3t"));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("lock"));
    }

    #[test]
    fn concurrent_writers_of_one_file_lose_nothing() {
        // OAuth refreshes of several connections (and `auth login` in
        // another process) write one secret file: each read-modify-write
        // holds the file's lock, so every entry survives.
        let dir = std::env::temp_dir().join(format!(
            "mcpvisor-secrets-race-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secrets.toml");
        FileSecretStore::open(&path).unwrap();
        let writers: Vec<_> = (0..6)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let store = FileSecretStore::open(&path).unwrap();
                    for i in 0..15 {
                        store
                            .set(&format!("w{w}_{i}"), &Secret::new(format!("v{w}{i}")))
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let all = FileSecretStore::open(&path).unwrap().read_all().unwrap();
        assert_eq!(all.len(), 6 * 15, "lost updates");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(all(feature = "keyring", target_os = "linux"))]
    #[tokio::test]
    async fn the_keyring_store_round_trips_and_names_a_missing_entry() {
        let store = KeyringSecretStore::new(format!("mcpvisor-test-{}", std::process::id()));
        store.set("gh_token", &Secret::new("k3yr1ng")).unwrap();
        assert_eq!(store.get("gh_token").await.unwrap().expose(), "k3yr1ng");
        store.delete("gh_token").unwrap();
        let missing = store.get("gh_token").await.unwrap_err().to_string();
        assert!(
            missing.contains("no entry gh_token in the keyring"),
            "{missing}"
        );
    }
}
