//! Config files as a program reads them: [`parse_config_at`] with this
//! process's `HOME` for `~/` (the vocabulary layer reads no environment).

use std::path::PathBuf;

use crate::messages::config::file::{FileConfig, parse_config_at};
use crate::messages::config::{ConfigError, ServerConfig};

/// Parse a whole config file; `origin` (the path) prefixes every problem,
/// relative paths are its directory's, `~/` is `$HOME`.
pub fn parse_config(origin: &str, text: &str) -> Result<FileConfig, ConfigError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    parse_config_at(origin, text, home.as_deref())
}

/// Parse a whole config file and return its servers.
pub fn parse_config_file(origin: &str, text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    parse_config(origin, text).map(|c| c.servers)
}
