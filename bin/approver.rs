//! The reference binary's approver (TRUST-5): an interactive prompt on the
//! terminal. Always Allow / Allow This Chat / Don't Allow; Escape, an empty
//! answer, end of input or anything else is Don't Allow. With no terminal
//! nobody is asked: the call is not approved, and stderr says how to allow
//! the server where it came from (its section, the provider's, `--yes`).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use futures::future::BoxFuture;
use mcpvisor::{Approval, ApprovalRequest, Approver};

/// Asks on stderr, reads the answer from stdin. With no terminal nobody
/// is asked: the call is refused as not approved, and stderr says how to
/// allow that server where it came from.
pub struct TerminalApprover {
    /// Server → how to allow its calls without asking.
    fixes: BTreeMap<String, String>,
    /// How to allow a server `fixes` does not name.
    default_fix: &'static str,
}

/// Where a server of a command came from, for the fix a refusal names.
enum Origin {
    /// `[servers.NAME]` of the config.
    Config,
    /// `[providers.KIND]` of the config (the server is named after the kind).
    Provider,
    /// The command line (`--url`, `-- COMMAND`): there is no section.
    OneShot,
}

impl TerminalApprover {
    /// The approver of a command over `cfg`'s servers and providers;
    /// `yes_flag` says the command takes `--yes` (`call`).
    pub fn new(cfg: &mcpvisor::FileConfig, one_shot: Option<&str>, yes_flag: bool) -> Self {
        let yes = if yes_flag {
            "pass --yes to allow this call, or "
        } else {
            ""
        };
        let mut fixes = BTreeMap::new();
        for s in &cfg.servers {
            fixes.insert(
                s.server_name.clone(),
                fix(&s.server_name, Origin::Config, yes),
            );
        }
        for p in crate::config::provider_names(cfg) {
            let f = fix(&p, Origin::Provider, yes);
            fixes.insert(p, f);
        }
        if let Some(name) = one_shot {
            fixes.insert(name.to_owned(), fix(name, Origin::OneShot, yes));
        }
        Self {
            fixes,
            default_fix: "set trust = \"always\" for it in the config",
        }
    }
}

/// How to allow `server`'s calls without asking, for its `origin`.
fn fix(server: &str, origin: Origin, yes: &str) -> String {
    match origin {
        Origin::Config => format!("{yes}set trust = \"always\" under [servers.{server}] in the config"),
        Origin::Provider => {
            format!("{yes}set trust = \"always\" under [providers.{server}] in the config")
        }
        Origin::OneShot if !yes.is_empty() => {
            "pass --yes (the server comes from the command line, so no config section holds its trust)".to_owned()
        }
        Origin::OneShot => "run it from a config with trust = \"always\" in its section".to_owned(),
    }
}

/// Map one typed answer to an approval.
pub fn parse_answer(line: &str) -> Approval {
    match line.trim().to_ascii_lowercase().as_str() {
        "a" | "always" | "always allow" => Approval::AlwaysAllow,
        "c" | "chat" | "allow this chat" => Approval::AllowThisChat,
        _ => Approval::DontAllow, // "d", Escape (\u{1b}), empty, anything else
    }
}

impl Approver for TerminalApprover {
    fn unavailable(&self, request: &ApprovalRequest) -> Option<&'static str> {
        if std::io::stdin().is_terminal() {
            return None;
        }
        // The refusal the model gets says why; the person running the
        // command reads here how to allow it.
        eprintln!(
            "mcpvisor: the call to {} was not approved (no one to ask: standard input is not a terminal); to allow it, {}",
            request.tool,
            self.fixes
                .get(&request.server)
                .map(String::as_str)
                .unwrap_or(self.default_fix)
        );
        Some("standard input is not a terminal")
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            let why = request
                .reason
                .as_deref()
                .map(|r| format!("\n  a hook asks: {r}"))
                .unwrap_or_default();
            let prompt = format!(
                "\nAllow {} (server \"{}\")?{why}\n  arguments: {}\n  [a] Always Allow   [c] Allow This Chat   [d] Don't Allow (Esc = Don't Allow): ",
                request.tool, request.server, request.arguments
            );
            tokio::task::spawn_blocking(move || {
                let mut err = std::io::stderr();
                let _ = err.write_all(prompt.as_bytes());
                let _ = err.flush();
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => Approval::DontAllow,
                    Ok(_) => parse_answer(&line),
                }
            })
            .await
            .unwrap_or(Approval::DontAllow)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_approvals_and_anything_else_is_dont_allow() {
        assert_eq!(parse_answer("a\n"), Approval::AlwaysAllow);
        assert_eq!(parse_answer("C"), Approval::AllowThisChat);
        assert_eq!(parse_answer("d"), Approval::DontAllow);
        assert_eq!(parse_answer("\u{1b}\n"), Approval::DontAllow);
        assert_eq!(parse_answer(""), Approval::DontAllow);
        assert_eq!(parse_answer("yes"), Approval::DontAllow);
    }
}
