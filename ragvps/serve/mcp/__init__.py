"""MCP tools (search, ask) for AI assistants: mounted at /mcp on first use, or over stdio (`ragvps mcp`)."""
