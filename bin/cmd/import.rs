//! `mcpvisor import FILE` and `mcpvisor config validate`: the configs users
//! already have, as mcpvisor TOML; and a check of the config that starts
//! nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::json;

use crate::cli::Cli;
use crate::config::load_config_at;

/// `import FILE… [--out FILE [--merge]] [--from claude|codex]`: the TOML on
/// stdout (or in `out`), what was imported and skipped on stderr.
pub(crate) fn import(
    cli: &Cli,
    files: &[PathBuf],
    out: Option<&Path>,
    merge: bool,
    from: Option<&str>,
    secrets_file: Option<&Path>,
) -> anyhow::Result<u8> {
    let from = match from {
        None => None,
        Some("claude") => Some(mcpvisor::HooksFrom::Claude),
        Some("codex") => Some(mcpvisor::HooksFrom::Codex),
        Some(other) => bail!("--from {other:?}: expected claude or codex"),
    };
    // The config merged into: its text stays, its servers are not imported again.
    let target = match out.filter(|p| p.exists()) {
        Some(path) if merge => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        ),
        Some(path) => bail!(
            "{} exists: import does not overwrite a config (choose another --out, or add --merge to add to it)",
            path.display()
        ),
        None => None,
    };
    let target_table: Option<toml::Table> = match &target {
        Some(text) => Some(toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}: not valid TOML, nothing merged: {e}",
                out.map(|p| p.display().to_string()).unwrap_or_default()
            )
        })?),
        None => None,
    };
    let mut taken: Vec<String> = target_table
        .as_ref()
        .and_then(|t| t.get("servers"))
        .and_then(toml::Value::as_table)
        .map(|s| s.keys().cloned().collect())
        .unwrap_or_default();
    // Secret names already in use are not reused for another value: those
    // the config merged into names (their values unknown here), and those
    // the secret file holds.
    let mut in_use = used_secret_names(target_table.as_ref());
    if let Some(path) = secrets_file
        && let Ok(text) = std::fs::read_to_string(path)
        && let Ok(held) = text.parse::<toml::Table>()
    {
        in_use.extend(held.into_iter().map(|(name, v)| mcpvisor::FoundSecret {
            server: String::new(),
            field: "secret file",
            key: String::new(),
            secret_name: name,
            value: v.as_str().map(str::to_owned),
        }));
    }
    let mut got = mcpvisor::Imported {
        toml: String::new(),
        servers: Vec::new(),
        skipped: Vec::new(),
        hooks: Vec::new(),
        secrets: Vec::new(),
        renamed: Vec::new(),
    };
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        // `[hooks]` paths resolve against the working directory: the TOML
        // names the file absolutely.
        let absolute = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        let one = mcpvisor::import_file_beside(
            &file.display().to_string(),
            &absolute.display().to_string(),
            &text,
            from,
            &taken,
            &[in_use.as_slice(), got.secrets.as_slice()].concat(),
        )?;
        if !got.toml.is_empty() {
            got.toml.push('\n');
        }
        got.toml.push_str(&one.toml);
        taken.extend(one.servers.iter().cloned());
        got.servers.extend(one.servers);
        got.skipped.extend(one.skipped);
        got.hooks.extend(one.hooks);
        got.secrets.extend(one.secrets);
        got.renamed.extend(one.renamed);
    }
    // The values go to the secret file, never into the TOML (TRUST-2).
    // Everything is checked before anything is written: the secret file,
    // then the config.
    let mut store = None;
    if let Some(path) = secrets_file {
        let target_secrets = target_table.as_ref().and_then(|t| t.get("secrets"));
        if target_secrets.and_then(|s| s.get("keyring")).is_some() {
            bail!(
                "the config merged into keeps its secrets in a keyring: import without --secrets-file, and store the secrets stderr names there"
            );
        }
        let opened = mcpvisor::FileSecretStore::open(path)
            .map_err(|e| anyhow::anyhow!("--secrets-file {}: {e}", path.display()))?;
        let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let named = target_secrets
            .and_then(|s| s.get("file"))
            .and_then(toml::Value::as_str)
            .map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| PathBuf::from(f)));
        if let Some(named) = &named
            && named != &absolute
        {
            bail!(
                "the config merged into reads its secrets from {}: pass that file as --secrets-file",
                named.display()
            );
        }
        // A secret of the same name with another value is not overwritten.
        for s in got.secrets.iter().filter(|s| s.value.is_some()) {
            use mcpvisor::SecretStore as _;
            if let Ok(old) = futures::executor::block_on(opened.get(&s.secret_name))
                && Some(old.expose()) != s.value.as_deref()
            {
                bail!(
                    "--secrets-file {} already holds a different {}: nothing written (remove it first, or import into another secret file)",
                    path.display(),
                    s.secret_name
                );
            }
        }
        if named.is_none() {
            got.toml.push_str(&format!(
                "\n[secrets]\nfile = {}\n",
                toml::Value::String(absolute.display().to_string())
            ));
        }
        store = Some((opened, path));
    }
    let merged = target
        .as_ref()
        .map(|before| format!("{}\n{}", before.trim_end(), got.toml));
    if let (Some(path), Some(merged)) = (out, &merged) {
        // The merged file must still be a valid config.
        mcpvisor::parse_config(&path.display().to_string(), merged).map_err(|e| {
            anyhow::anyhow!("the merged config would not be valid, nothing written: {e}")
        })?;
    } else {
        // Import writes no config the commands would refuse.
        let origin = out.map_or_else(
            || "the imported config".to_owned(),
            |p| p.display().to_string(),
        );
        mcpvisor::parse_config(&origin, &got.toml).map_err(|e| {
            anyhow::anyhow!("the imported config would not be valid, nothing written (a bug: please report it): {e}")
        })?;
    }
    let mut moved = Vec::new();
    if let Some((store, path)) = &store {
        for s in got.secrets.iter().filter(|s| s.value.is_some()) {
            let value = mcpvisor::Secret::new(s.value.clone().unwrap_or_default());
            store
                .set(&s.secret_name, &value)
                .map_err(|e| anyhow::anyhow!("--secrets-file {}: {e}", path.display()))?;
            moved.push(s.secret_name.clone());
        }
    }
    match (out, merged) {
        (Some(path), Some(merged)) => {
            let tmp = path.with_extension("import-tmp");
            std::fs::write(&tmp, &merged)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            std::fs::rename(&tmp, path)
                .with_context(|| format!("cannot replace {}", path.display()))?;
        }
        (Some(path), None) => {
            std::fs::write(path, &got.toml)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        (None, _) if !cli.json => print!("{}", got.toml),
        (None, _) => {}
    }
    if cli.json {
        println!(
            "{}",
            json!({
                "servers": got.servers,
                "hooks": got.hooks,
                "skipped": got.skipped,
                "renamed": got.renamed.iter().map(|(from, to)| json!({"from": from, "to": to})).collect::<Vec<_>>(),
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
        for (from, to) in &got.renamed {
            eprintln!(
                "  renamed {from:?} to {to} (server names: letters, digits, `_`, `-`; one per config)"
            );
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

/// The secret names the servers of `target` (a config) refer to, each as
/// taken with an unknown value.
fn used_secret_names(target: Option<&toml::Table>) -> Vec<mcpvisor::FoundSecret> {
    let servers = target
        .and_then(|t| t.get("servers"))
        .and_then(toml::Value::as_table);
    let mut out = Vec::new();
    for (server, table) in servers.into_iter().flatten() {
        for (field, key) in [("env", "env_secrets"), ("header", "header_secrets")] {
            let map = table.get(key).and_then(toml::Value::as_table);
            for (target, reference) in map.into_iter().flatten() {
                let Some(reference) = reference.as_str() else {
                    continue;
                };
                let Ok((_, name, _)) = mcpvisor::secret_reference(reference) else {
                    continue;
                };
                out.push(mcpvisor::FoundSecret {
                    server: server.clone(),
                    field,
                    key: target.clone(),
                    secret_name: name.to_owned(),
                    value: None,
                });
            }
        }
    }
    out
}

/// `config validate`: parse and validate, start nothing.
pub(crate) fn validate(cli: &Cli, file: Option<&Path>) -> anyhow::Result<u8> {
    if let (Some(file), Some(config)) = (file, &cli.config)
        && file != config.as_path()
    {
        bail!(
            "config validate: two files named ({} and --config {}); give one",
            file.display(),
            config.display()
        );
    }
    let cfg = load_config_at(cli, file, false)?;
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
