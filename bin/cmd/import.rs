//! `mcpvisor import FILE` and `mcpvisor config validate`: the configs users
//! already have, as mcpvisor TOML; and a check of the config that starts
//! nothing.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::json;

use crate::cli::Cli;
use crate::config::load_config;

/// `import FILE [--out FILE] [--from claude|codex]`: the TOML on stdout (or
/// in `out`), what was imported and skipped on stderr.
pub(crate) fn import(
    cli: &Cli,
    file: &Path,
    out: Option<&Path>,
    from: Option<&str>,
    secrets_file: Option<&Path>,
) -> anyhow::Result<u8> {
    let from = match from {
        None => None,
        Some("claude") => Some(mcpvisor::HooksFrom::Claude),
        Some("codex") => Some(mcpvisor::HooksFrom::Codex),
        Some(other) => bail!("--from {other:?}: expected claude or codex"),
    };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    // `[hooks]` paths resolve against the working directory: the TOML
    // names the file absolutely.
    let absolute = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let got = mcpvisor::import_file(
        &file.display().to_string(),
        &absolute.display().to_string(),
        &text,
        from,
    )
    .map_err(anyhow::Error::msg)?;
    let mut got = got;
    if let Some(path) = out.filter(|p| p.exists()) {
        bail!(
            "{} exists: import does not overwrite a config (choose another --out, or merge by hand)",
            path.display()
        );
    }
    // The values go to the secret file, never into the TOML (TRUST-2).
    let mut moved = Vec::new();
    if let Some(path) = secrets_file {
        let store = mcpvisor::FileSecretStore::open(path)
            .map_err(|e| anyhow::anyhow!("--secrets-file {}: {e}", path.display()))?;
        for s in got.secrets.iter().filter(|s| s.value.is_some()) {
            let value = mcpvisor::Secret::new(s.value.clone().unwrap_or_default());
            store
                .set(&s.secret_name, &value)
                .map_err(|e| anyhow::anyhow!("--secrets-file {}: {e}", path.display()))?;
            moved.push(s.secret_name.clone());
        }
        let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        got.toml.push_str(&format!(
            "\n[secrets]\nfile = {}\n",
            toml::Value::String(absolute.display().to_string())
        ));
    }
    match out {
        Some(path) => {
            if path.exists() {
                bail!(
                    "{} exists: import does not overwrite a config (choose another --out, or merge by hand)",
                    path.display()
                );
            }
            std::fs::write(path, &got.toml)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None if !cli.json => print!("{}", got.toml),
        None => {}
    }
    if cli.json {
        println!(
            "{}",
            json!({
                "servers": got.servers,
                "hooks": got.hooks,
                "skipped": got.skipped,
                "secrets": got.secrets.iter().map(|s| json!({
                    "server": s.server, "field": s.field, "key": s.key,
                    "secret": s.secret_name, "moved": moved.contains(&s.secret_name),
                    "referenced": s.value.is_none(),
                })).collect::<Vec<_>>(),
                "toml": got.toml,
            })
        );
    } else {
        if !got.servers.is_empty() || got.hooks.is_empty() {
            eprintln!(
                "imported {} server(s), all disabled with trust \"ask\": {}",
                got.servers.len(),
                got.servers.join(", ")
            );
        }
        if !got.hooks.is_empty() {
            eprintln!(
                "imported {} hook command(s), commented out until you have read them:",
                got.hooks.len()
            );
            for h in &got.hooks {
                eprintln!("  {h}");
            }
        }
        for s in &got.skipped {
            eprintln!("  skipped {s}");
        }
        for s in &got.secrets {
            let what = format!("server {}: {} {}", s.server, s.field, s.key);
            match (&s.value, moved.contains(&s.secret_name)) {
                (None, _) => eprintln!(
                    "  {what}: reads the secret {} (the variable the source referred to)",
                    s.secret_name
                ),
                (Some(_), true) => {
                    eprintln!(
                        "  {what}: its value moved into the secret file as {}",
                        s.secret_name
                    )
                }
                (Some(_), false) => eprintln!(
                    "  {what}: its value was NOT imported; store it as the secret {} (an environment variable of that name, or rerun with --secrets-file FILE)",
                    s.secret_name
                ),
            }
        }
    }
    Ok(0)
}

/// `config validate`: parse and validate, start nothing.
pub(crate) fn validate(cli: &Cli) -> anyhow::Result<u8> {
    let cfg = load_config(cli, false)?;
    let enabled = cfg.servers.iter().filter(|s| s.enabled).count();
    if cli.json {
        println!(
            "{}",
            json!({"valid": true, "servers": cfg.servers.len(), "enabled": enabled})
        );
    } else {
        println!(
            "the config is valid: {} server(s), {enabled} enabled",
            cfg.servers.len()
        );
    }
    Ok(0)
}
