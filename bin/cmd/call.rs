//! `mcpvisor call`: call one tool by its public name and print what the
//! model would see.

use std::path::PathBuf;

use anyhow::Context;
use mcpvisor::{CallOptions, FileAttachmentStore, Scope};
use serde_json::Value;

use crate::cli::Cli;
use crate::cmd::hooks;
use crate::config::{builder_for, load_config};
use crate::lifecycle::{finish, start_with};
use crate::render::outcome_json;

/// `call`'s options beyond the name and arguments.
pub(crate) struct CallFlags {
    /// `--images`: valid images are saved and attached.
    pub(crate) images: bool,
    /// `--attachments DIR`: the file attachment store.
    pub(crate) attachments: Option<PathBuf>,
    /// `--chat ID`: the chat the call belongs to.
    pub(crate) chat: Option<String>,
    /// `--strict-hooks`: only approved hooks run.
    pub(crate) strict_hooks: bool,
}

/// Run `call` of `name` with `args` (a JSON object); exit 1 unless the outcome is ok.
pub(crate) async fn run(
    cli: &Cli,
    name: &str,
    args: Option<&str>,
    flags: CallFlags,
) -> anyhow::Result<u8> {
    let args: Option<Value> = match args {
        None => None,
        Some(text) => Some(
            serde_json::from_str(text)
                .with_context(|| format!("--args is not valid JSON: {text}"))?,
        ),
    };
    let cfg = load_config(cli, true)?;
    let mut builder = builder_for(&cfg, flags.strict_hooks)?;
    if let Some(dir) = flags.attachments {
        builder = builder.attachments(std::sync::Arc::new(FileAttachmentStore::new(dir)));
    }
    let runtime = start_with(builder, cfg.servers, cli.json).await?;
    if !cli.json {
        hooks::print_load_warnings(&runtime);
    }
    let options = CallOptions {
        images: flags.images,
        chat: flags.chat.or_else(|| Some("cli".into())),
        ..CallOptions::default()
    };
    let outcome = runtime.call(&Scope::Global, name, args, options).await;
    let _ = finish(runtime).await;
    if cli.json {
        println!("{}", outcome_json(&outcome));
    } else {
        println!("{}", outcome.projection);
        if let Some(e) = &outcome.error
            && !outcome.projection.contains(e.as_str())
        {
            eprintln!("{}: {e}", outcome.kind.name());
        }
        for note in &outcome.notes {
            eprintln!("{note}");
        }
        if outcome.kind == mcpvisor::OutcomeKind::UnknownTool {
            eprintln!("(`mcpvisor tools` lists the tool names)");
        }
        if let Some(r) = &outcome.stop {
            eprintln!("a hook stopped the turn: {r}");
        }
    }
    Ok(u8::from(!outcome.is_ok()))
}
