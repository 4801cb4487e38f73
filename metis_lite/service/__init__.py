"""What the edges share: the bases a service serves, and their JSON.

bases.py      the served bases, kept indexed (or, read-only, followed to each newest copy)
follow.py     a read-only service's bases followed to each newest published copy
sources.py    a served base's sources watched: each change wakes its indexer
serialize.py  JSON, made once, for every edge (HTTP, MCP, the CLI's --json)
access.py     access tokens, compared in constant time

Its face: bases, serialize and access.
"""
