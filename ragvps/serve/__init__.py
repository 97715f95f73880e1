"""The long-running service: the HTTP API (http), its keys (auth) and limits, MCP tools (mcp), the web page."""
