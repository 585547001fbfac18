"""The orchestrator layer: tools over the Python API, the MCP server, the built-in loop."""
