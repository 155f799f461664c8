//! The reference binary's approver (TRUST-5): an interactive prompt on the
//! terminal. Always Allow / Allow This Chat / Don't Allow; Escape, an empty
//! answer, end of input or anything else is Don't Allow. With no terminal it
//! denies with a message saying how to allow the server.

use std::io::{BufRead, IsTerminal, Write};

use futures::future::BoxFuture;
use mcpvisor::{Approval, ApprovalRequest, Approver};

/// Asks on stderr, reads the answer from stdin.
pub struct TerminalApprover;

/// Map one typed answer to an approval.
pub fn parse_answer(line: &str) -> Approval {
    match line.trim().to_ascii_lowercase().as_str() {
        "a" | "always" | "always allow" => Approval::AlwaysAllow,
        "c" | "chat" | "allow this chat" => Approval::AllowThisChat,
        _ => Approval::DontAllow, // "d", Escape (\u{1b}), empty, anything else
    }
}

impl Approver for TerminalApprover {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            if !std::io::stdin().is_terminal() {
                eprintln!(
                    "mcpvisor: the call to {} needs approval, but standard input is not a terminal: \
                     denied. Set trust = \"always\" under [servers.{}] to allow it without asking.",
                    request.tool, request.server
                );
                return Approval::DontAllow;
            }
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
