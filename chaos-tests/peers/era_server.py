# A server built on the Python SDK 2.x (`mcp` 2.3.0, MCPServer), for the era
# tests (chaos-tests/tests/all/eras.rs): stdio, one tool `echo` {text}. The
# SDK serves both protocol eras.
from mcp.server.mcpserver import MCPServer

app = MCPServer("py-era-server")


@app.tool()
def echo(text: str) -> str:
    """Answers its text."""
    return text


if __name__ == "__main__":
    app.run()
