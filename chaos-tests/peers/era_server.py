# A server built on the Python SDK 2.x (`mcp` 2.3.0, MCPServer), for the era
# tests (chaos-tests/tests/all/eras.rs): stdio, one tool `echo` {text}. The
# SDK serves both protocol eras.
#
# `--ttl-ms N`: its tool lists say they stay fresh for N ms (SEP-2549), it
# serves no `subscriptions/listen` (so no change is ever notified), and a
# second tool `grow` adds a tool `grown_K` without telling anyone: only a
# client that fetches the list again when it expires sees it.
import sys

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer

ttl_ms = None
if "--ttl-ms" in sys.argv:
    ttl_ms = int(sys.argv[sys.argv.index("--ttl-ms") + 1])

if ttl_ms is None:
    app = MCPServer("py-era-server")
else:
    app = MCPServer(
        "py-era-server",
        cache_hints={"tools/list": CacheHint(ttl_ms=ttl_ms, scope="public")},
        subscriptions=False,
    )


@app.tool()
def echo(text: str) -> str:
    """Answers its text."""
    return text


grown = 0

if ttl_ms is not None:

    @app.tool()
    def grow() -> str:
        """Adds a tool, silently."""
        global grown
        grown += 1
        name = f"grown_{grown}"

        def added() -> str:
            return name

        app.add_tool(added, name=name, description="A tool added later.")
        return name


if __name__ == "__main__":
    app.run()
