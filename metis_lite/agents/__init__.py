"""Agents' tools, and the Model Context Protocol that carries them.

tools.py       the agent tools (search, fetch a passage, remember), whatever carries them
jsonrpc.py     JSON-RPC messages read one bounded line at a time (MCP's stdio)
mcp_server.py  the tools over MCP: stdio, and /mcp of `serve`

Its face: tools and mcp_server.
"""
