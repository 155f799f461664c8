//! The error of the storage ports ([`super::trust::SecretStore`],
//! [`super::images::AttachmentStore`]): what went wrong, with the name and
//! the place (a path, a keyring service) a user needs to fix it. A store's
//! error never contains a secret value.

/// Why a store could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An environment variable the secret name points to is not set.
    #[error("environment variable {0} is not set")]
    EnvNotSet(String),
    /// Nothing is stored under `name` in `place`.
    #[error("no entry {name} in {place}")]
    Missing {
        /// The name asked for.
        name: String,
        /// The file or keyring it was looked for in.
        place: String,
    },
    /// Reading or writing `path` failed.
    #[error("cannot {action} {path}: {reason}")]
    Io {
        /// What was being done ("read the secret file", "write", …).
        action: &'static str,
        /// The file or directory.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The store is there but cannot be used as it is (unsafe permissions,
    /// bad encoding, an unavailable keyring): the sentence says how to fix it.
    #[error("{0}")]
    Unusable(String),
}

impl StoreError {
    /// `name` cannot be written: the store is read-only.
    pub fn read_only(name: &str) -> Self {
        Self::Unusable(format!(
            "{name} cannot be stored: this secret store is read-only (configure `[secrets] file` or the keyring)"
        ))
    }

    /// An I/O failure on `path`.
    pub fn io(
        action: &'static str,
        path: &std::path::Path,
        reason: impl std::fmt::Display,
    ) -> Self {
        Self::Io {
            action,
            path: path.display().to_string(),
            reason: reason.to_string(),
        }
    }
}
