//! The file-backed [`AttachmentStore`] (CALL-7, CALL-8): content-addressed
//! files in one directory. Saving the same bytes twice gives the same path.

use std::path::PathBuf;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use crate::messages::images::{AttachmentStore, extension_for};
use crate::messages::store::StoreError;

/// Saves attachments as `<dir>/<sha256 prefix>.<ext>`.
#[derive(Debug, Clone)]
pub struct FileAttachmentStore {
    dir: PathBuf,
}

impl FileAttachmentStore {
    /// A store writing into `dir` (created on first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

impl AttachmentStore for FileAttachmentStore {
    fn save<'a>(
        &'a self,
        mime: &'a str,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(async move {
            let digest = Sha256::digest(bytes);
            let name = crate::messages::naming::hex(&digest[..12]);
            let ext = match mime {
                "application/json" => "json",
                other => extension_for(other),
            };
            let path = self.dir.join(format!("{name}.{ext}"));
            tokio::fs::create_dir_all(&self.dir)
                .await
                .map_err(|e| StoreError::io("create", &self.dir, e))?;
            tokio::fs::write(&path, bytes)
                .await
                .map_err(|e| StoreError::io("write", &path, e))?;
            Ok(path.display().to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_same_bytes_are_saved_once_under_their_hash() {
        let dir = std::env::temp_dir().join(format!("mcpvisor-att-{}", std::process::id()));
        let store = FileAttachmentStore::new(&dir);
        let a = store.save("image/png", b"\x89PNG").await.unwrap();
        let b = store.save("image/png", b"\x89PNG").await.unwrap();
        assert_eq!(a, b);
        assert!(a.ends_with(".png"));
        assert_eq!(std::fs::read(&a).unwrap(), b"\x89PNG");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
