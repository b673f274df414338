"""/api/v1, its tokens and the MCP server over it."""
