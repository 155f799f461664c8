//! The command line of `mcpvisor` (clap): global flags, the subcommands and
//! their arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// A supervised runtime for MCP servers.
#[derive(Parser, Debug)]
#[command(name = "mcpvisor", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Config file (else $MCPVISOR_CONFIG, else ./mcpvisor.toml).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The subcommand.
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the built-in demo server under supervision: list tools, call two,
    /// shut down, e.g. `mcpvisor demo`.
    Demo,
    /// Real handshake with one or all servers: state, protocol version, tool
    /// count, e.g. `mcpvisor check everything`.
    Check {
        /// Only this server (waited for in full).
        server: Option<String>,
        /// Wait for every server to answer (up to its startup_timeout_ms),
        /// not only those that answer within 5 s.
        #[arg(long)]
        wait: bool,
    },
    /// List public tool names, e.g. `mcpvisor tools`, or one server without
    /// a config: `mcpvisor tools -- node server.js`.
    Tools {
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
        /// Wait for every server to answer (up to its startup_timeout_ms),
        /// not only those that answer within 5 s.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Call a tool by public name and print what the model would see, e.g.
    /// `mcpvisor call mcp__everything__echo --arg message=hi`.
    Call {
        /// Public tool name, e.g. mcp__everything__echo (with a one-shot
        /// target, the server's own name for it also works).
        #[arg(required_unless_present = "batch")]
        name: Option<String>,
        /// Run a sequence of calls in ONE activation: one JSON object per
        /// line (`{"name": "...", "args": {...}}`) from FILE, or `-` for
        /// stdin, read and run as the lines arrive; one outcome per line
        /// (the `--json` object) is printed as soon as each call ends.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "args", "arg"])]
        batch: Option<String>,
        /// Arguments as a JSON object; `@FILE` reads them from a file, `-`
        /// from stdin.
        #[arg(long)]
        args: Option<String>,
        /// One argument, `KEY=VALUE` (repeatable), typed by the tool's input
        /// schema: numbers, booleans and JSON objects/arrays are parsed.
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        arg: Vec<String>,
        /// Allow this one call without asking (a server with trust `ask`);
        /// `never` still refuses.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        target: Target,
        /// Declare image capability for this call's route: valid images are
        /// saved and attached instead of placeholders.
        #[arg(long)]
        images: bool,
        /// Directory of the file attachment store (admitted images, spilled results).
        #[arg(long, value_name = "DIR")]
        attachments: Option<PathBuf>,
        /// The chat this call belongs to (for "allow this chat" trust grants).
        #[arg(long, value_name = "ID")]
        chat: Option<String>,
        /// Run only hooks whose command hash is in `[hooks] approved` (see `hooks list`).
        #[arg(long)]
        strict_hooks: bool,
    },
    /// Command hooks of the `[hooks]` files, e.g.
    /// `mcpvisor hooks test --event PreToolUse --payload '{"tool_name":"Bash"}'`.
    Hooks {
        #[command(subcommand)]
        what: HooksCommand,
    },
    /// JS mods of `[mods]`, e.g.
    /// `mcpvisor mods test --event prompt.submit --payload '{"prompt": "hi"}'`.
    Mods {
        #[command(subcommand)]
        what: ModsCommand,
    },
    /// Resources of the configured servers (through the shared resource
    /// tools), e.g. `mcpvisor resources read everything demo://resource/static/document/architecture.md`.
    Resources {
        #[command(subcommand)]
        what: ResourcesCommand,
    },
    /// Add a server to the config file, keeping its comments and order, then
    /// check it with a real handshake, e.g.
    /// `mcpvisor add files -- npx -y @modelcontextprotocol/server-filesystem /tmp`.
    Add {
        /// The server's name (letters, digits, `_`, `-`).
        name: String,
        /// A streamable-HTTP server at this URL instead of a command.
        #[arg(long)]
        url: Option<String>,
        /// An environment variable of the server (repeatable); a name that
        /// looks like a secret is refused: use --env-secret.
        #[arg(long = "env", value_name = "K=V")]
        env: Vec<String>,
        /// A variable whose value is the named secret (repeatable).
        #[arg(long = "env-secret", value_name = "K=SECRET")]
        env_secret: Vec<String>,
        /// An HTTP header (repeatable); secret-looking ones are refused.
        #[arg(long = "header", value_name = "H=V")]
        header: Vec<String>,
        /// A header whose value is the named secret, e.g. Authorization=GH_TOKEN.
        #[arg(long = "header-secret", value_name = "H=SECRET")]
        header_secret: Vec<String>,
        /// The server's working directory.
        #[arg(long)]
        cwd: Option<String>,
        /// `ask` (the default), `always` or `never`.
        #[arg(long)]
        trust: Option<String>,
        /// Write it with `enabled = false` (nothing is started).
        #[arg(long)]
        disabled: bool,
        /// Where to write it: `project` (./mcpvisor.toml) or `user`
        /// (~/.config/mcpvisor/mcpvisor.toml, read when there is no
        /// ./mcpvisor.toml); default: the config every command reads.
        #[arg(long, value_parser = ["project", "user"])]
        scope: Option<String>,
        /// Do not run the handshake after writing.
        #[arg(long)]
        no_check: bool,
        /// `startup_timeout_ms`: how long a start may take, through the
        /// first tools/list (default 30000; 120000 for `npx`, `uvx` and
        /// other package runners, whose first run downloads the package).
        #[arg(long, value_name = "MS")]
        startup_timeout: Option<u64>,
        /// `-- COMMAND ARGS…`: what to run (stdio).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server from the config file (everything else stays), e.g.
    /// `mcpvisor remove files`.
    Remove {
        /// The server's name.
        name: String,
        /// `project` (./mcpvisor.toml) or `user` (~/.config/mcpvisor/mcpvisor.toml);
        /// default: the config every command reads.
        #[arg(long, value_parser = ["project", "user"])]
        scope: Option<String>,
    },
    /// Switch configured servers on (`enabled = true`), keeping the file's
    /// comments and order, e.g. `mcpvisor enable github time`.
    Enable {
        /// The servers' names.
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
        /// `project` (./mcpvisor.toml) or `user` (~/.config/mcpvisor/mcpvisor.toml);
        /// default: the config every command reads.
        #[arg(long, value_parser = ["project", "user"])]
        scope: Option<String>,
    },
    /// Switch configured servers off (`enabled = false`: never started),
    /// e.g. `mcpvisor disable github`.
    Disable {
        /// The servers' names.
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
        /// `project` (./mcpvisor.toml) or `user` (~/.config/mcpvisor/mcpvisor.toml);
        /// default: the config every command reads.
        #[arg(long, value_parser = ["project", "user"])]
        scope: Option<String>,
    },
    /// The configured servers: name, transport, enabled, trust (nothing is
    /// started; `status` shows live states), e.g. `mcpvisor list`.
    List,
    /// Convert a `.mcp.json` / desktop-app `mcpServers` JSON or a Codex
    /// `config.toml` into mcpvisor TOML (servers arrive disabled, trust
    /// "ask"), e.g. `mcpvisor import ~/.codex/config.toml --out mcpvisor.toml`.
    Import {
        /// The files to convert (a server name taken by an earlier file, or
        /// by the config merged into, is left out and reported).
        #[arg(required = true, num_args = 1..)]
        file: Vec<std::path::PathBuf>,
        /// Write here instead of stdout (refused if it exists, unless --merge).
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
        /// Add to the existing config at --out: its text stays as it is, the
        /// imported servers are appended, and one already there is left out.
        #[arg(long, requires = "out")]
        merge: bool,
        /// Whose hooks file it is, when FILE has hooks: `claude` or
        /// `codex` (default: guessed from the path).
        #[arg(long, value_name = "TOOL")]
        from: Option<String>,
        /// Move the secret values found (API keys in `env`, Authorization
        /// headers) into this secret file (mode 0600), which the written
        /// config then names in `[secrets] file`.
        #[arg(long, value_name = "FILE")]
        secrets_file: Option<std::path::PathBuf>,
    },
    /// The config file itself, e.g. `mcpvisor config validate`.
    Config {
        #[command(subcommand)]
        what: ConfigCommand,
    },
    /// Prompts of the configured servers (`prompts/list`, `prompts/get`),
    /// e.g. `mcpvisor prompts list`.
    Prompts {
        #[command(subcommand)]
        what: PromptsCommand,
    },
    /// The supervision tree with each server's status, e.g. `mcpvisor status --watch`.
    Status {
        /// Keep running and print every state change until SIGINT/SIGTERM.
        #[arg(long)]
        watch: bool,
        /// Wait for every server to answer (up to its startup_timeout_ms),
        /// not only those that answer within 5 s.
        #[arg(long)]
        wait: bool,
    },
    /// Serve every configured tool as ONE MCP server (trust, hooks and
    /// supervision applied), e.g. `mcpvisor gateway --stdio`.
    Gateway {
        /// Serve on stdin/stdout (logs on stderr only).
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve streamable HTTP at ADDR: `/mcp`, and the status at `/health`.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Allow a non-loopback `--http` address. Every request then needs a
        /// bearer token (also on a loopback address), and `Host` is not checked.
        #[arg(long)]
        allow_remote: bool,
        /// The secret (from `[secrets]`, else the environment) holding that token.
        #[arg(long, value_name = "NAME", default_value = "MCPVISOR_GATEWAY_TOKEN")]
        token_secret: String,
        /// Also list a `mcpvisor_status` tool returning the servers' status.
        #[arg(long)]
        status_tool: bool,
        /// `--http`: session-era client sessions at most; one more is refused
        /// until one ends (2026-07-28 clients hold none).
        #[arg(long, value_name = "N", default_value_t = 1024)]
        max_sessions: usize,
        /// `--http`: a session-era client session idle this many seconds ends.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        session_idle_s: u64,
        /// Serve tools (and prompts) under their servers' own names, so a
        /// client set up for one server works unchanged; refused when two
        /// servers have a tool of the same name.
        #[arg(long)]
        raw_names: bool,
        /// `--http`: on SIGTERM, fail `/readyz`, refuse new work with 503
        /// and let the requests in flight finish for at most this many
        /// seconds before stopping (0: stop at once). SIGINT, or a second
        /// SIGTERM, stops at once.
        #[arg(long, value_name = "SECONDS", default_value_t = 30)]
        drain_timeout_s: u64,
        /// This replica's name behind a balancer (letters, digits, `-`, `_`,
        /// `.`): the request states it hands out end in `@NAME`, so the
        /// balancer can route a client's retry to it (docs/deploy.md).
        #[arg(long, value_name = "NAME")]
        replica_id: Option<String>,
        /// Another replica's address, `NAME=http://HOST:PORT` (repeatable;
        /// needs `--replica-id`): a request whose state that replica holds
        /// (its requestState or handle ends in `@NAME`) is forwarded there.
        #[arg(long = "peer", value_name = "NAME=URL")]
        peers: Vec<String>,
        /// A server whose state lives in its process (repeatable): its
        /// results carry a handle, and a call sending it back runs only
        /// where that state is. The providers' seats always are.
        #[arg(long = "stateful", value_name = "SERVER")]
        stateful: Vec<String>,
        /// The gateway's worker threads, 1 to 1024. Default: 1 with
        /// `--stdio` (one client on one pipe: a second thread adds
        /// cross-thread wake-ups, not throughput), one per CPU with
        /// `--http`; `TOKIO_WORKER_THREADS` sets the default for both.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        threads: Option<u16>,
    },
    /// Talk to a model with every configured tool (the tool loop), e.g.
    /// `mcpvisor chat --provider openai --endpoint https://api.openai.com/v1
    /// --model gpt-4.1 --key-secret OPENAI_API_KEY --prompt "list my files"`.
    Chat {
        /// `openai` (Chat Completions), `anthropic` (Messages) or
        /// `openai-responses` (the Responses API).
        #[arg(long)]
        provider: Option<String>,
        /// The base URL: OpenAI-compatible requests go to ENDPOINT/chat/completions,
        /// Anthropic ones to ENDPOINT/v1/messages, Responses ones to
        /// ENDPOINT/responses.
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// The model name.
        #[arg(long)]
        model: Option<String>,
        /// The secret (from `[secrets]`, else the environment variable) holding the API key.
        #[arg(long, value_name = "NAME")]
        key_secret: Option<String>,
        /// Run this one turn and exit (0 when it finished); without it, every stdin line is a turn.
        #[arg(long, value_name = "TEXT")]
        prompt: Option<String>,
        /// At most this many model rounds per turn (default 10).
        #[arg(long, value_name = "N")]
        max_rounds: Option<u32>,
        /// Offer the model no tools (a route without tool calling).
        #[arg(long)]
        no_tools: bool,
        /// At most N calls of one round in flight at once (default 4; 1 runs
        /// them one after another). A tool not safe beside others runs alone.
        #[arg(long, value_name = "N")]
        parallel: Option<usize>,
        /// `auto` (over 40 tools, the default), `always` or `never`: offer
        /// the model a search tool first instead of every tool, and the
        /// tools it finds from the next round on.
        #[arg(long, value_name = "WHEN")]
        defer: Option<String>,
        /// `auto` (the default), `native` or `local`: which search deferred
        /// tools are found with. `native` is the provider's own deferred
        /// loading (Responses API, Anthropic), `local` a plain search tool;
        /// `auto` is native on the vendor's own API, local elsewhere.
        #[arg(long, value_name = "KIND")]
        tool_search: Option<String>,
    },
    /// Benchmarks against bare baselines in the same run (figures, never
    /// assertions), e.g. `mcpvisor --json bench`.
    Bench {
        /// Sequential calls per latency sample.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// A short run that proves every row still works (CI): 200 calls,
        /// 1k tools, start-to-ready of 1 and 10 servers.
        #[arg(long)]
        quick: bool,
        /// Run every row K times and print each row's median ratio with its
        /// min–max (PERF-1: a ratio is not one noisy sample).
        #[arg(long, default_value_t = 1, value_name = "K")]
        runs: usize,
        /// Measure only this row (repeatable; default: every row). The
        /// others read NaN (`null` in --json).
        #[arg(long, value_enum, value_name = "ROW")]
        only: Vec<crate::cmd::bench::Row>,
        /// Add the memory soak row: this many seconds of steady load with
        /// a server restart every 30 s (PERF-1 asks for 600: flat within 5 %).
        #[arg(long, value_name = "SECONDS")]
        soak: Option<u64>,
    },
    /// OAuth for streamable-HTTP servers (CONN-13): `auth login|logout|status NAME`.
    Auth {
        #[command(subcommand)]
        what: AuthCommand,
    },
    /// The client adapter for the official MCP conformance suite:
    /// `conformance client --command "mcpvisor conformance" --scenario tools_call`.
    Conformance {
        /// The scenario's server URL (the suite appends it).
        url: String,
    },
    /// Relay stdio byte for byte to a child running COMMAND: the floor of
    /// any second hop, for `bench`'s gateway rows.
    #[command(hide = true)]
    ServeRelay {
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Serve the built-in demo MCP server on stdio.
    #[command(hide = true)]
    ServeDemo {
        /// Extra generated tools.
        #[arg(long, default_value_t = 0)]
        tools: usize,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum AuthCommand {
    /// Authorize mcpvisor for a server with `[servers.NAME.oauth]`: prints
    /// the authorization URL (and opens a browser when one is there), takes
    /// the redirect on 127.0.0.1, keeps the tokens in the secret store.
    Login {
        /// The server's name.
        server: String,
        /// Ask for these scopes (space-separated) instead of the configured ones.
        #[arg(long)]
        scope: Option<String>,
        /// Only print the URL; never start a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Forget a server's tokens and client registration.
    Logout {
        /// The server's name.
        server: String,
    },
    /// Whether a server's tokens are stored, its client id, scopes and expiry.
    Status {
        /// The server's name.
        server: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum HooksCommand {
    /// Every configured hook with its event, matcher, timeout and hash.
    List,
    /// Run the configured hooks of one event on a payload and print the
    /// merged, neutral outcome.
    Test {
        /// The event: SessionStart, UserPromptSubmit, PreToolUse, PostToolUse,
        /// PostToolUseFailure, PostToolBatch, Stop, SubagentStart,
        /// SubagentStop, SessionEnd.
        #[arg(long)]
        event: String,
        /// Only this dialect's hooks (default: every configured file).
        #[arg(long, value_enum)]
        dialect: Option<DialectArg>,
        /// Payload fields as a JSON object (tool_name, tool_input, prompt,
        /// source, session_id, cwd, …); the bridge fills the rest.
        #[arg(long)]
        payload: Option<String>,
        /// Run only hooks whose command hash is in `[hooks] approved` (see `hooks list`).
        #[arg(long)]
        strict_hooks: bool,
    },
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum ModsCommand {
    /// Every loaded mod's registrations (served or not) and the load reports.
    List,
    /// Run one event's chain on a payload and print what it decided:
    /// the prompt, appended context and every report.
    Test {
        /// The event: prompt.submit, tool.call, … (see `mods list`).
        #[arg(long)]
        event: String,
        /// The event's payload as a JSON object (`{"prompt": "hi"}`,
        /// `{"blocks": [...]}`, `{"tool": "x", "input": {...}}`).
        #[arg(long)]
        payload: Option<String>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum DialectArg {
    Claude,
    Codex,
}

/// A one-shot server instead of the config (`tools`, `call`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Target {
    /// A streamable-HTTP server to use instead of the config's servers.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub(crate) url: Option<String>,
    /// A stdio server to use instead of the config's servers: everything
    /// after `--`, e.g. `-- node server.js`.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ConfigCommand {
    /// Check the config without starting anything: every problem with its
    /// file, line and key; exit 0 when it is valid.
    Validate {
        /// The file to check; the usual config (`--config`,
        /// `MCPVISOR_CONFIG`, the working directory's) when not given.
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum PromptsCommand {
    /// Every prompt of every server: server, name, arguments, description.
    List,
    /// One prompt's messages, e.g. `prompts get everything simple-prompt`.
    Get {
        /// The server.
        server: String,
        /// The prompt's name (as the server lists it).
        name: String,
        /// Its arguments as a JSON object of strings.
        #[arg(long)]
        args: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ResourcesCommand {
    /// `resources/list` of one or every server.
    List {
        /// Only this server.
        #[arg(long)]
        server: Option<String>,
        /// A cursor from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// `resources/templates/list` of one or every server.
    Templates {
        /// Only this server.
        #[arg(long)]
        server: Option<String>,
        /// A cursor from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// `resources/read` of one resource.
    Read {
        /// The server.
        server: String,
        /// The resource URI.
        uri: String,
    },
}
